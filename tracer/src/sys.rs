//! Thin, allocation-aware wrappers over the system calls the tracer makes.
//! Everything here is safe to call from inside an allocation hook.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The monotonic clock at its last tick (a few ms coarse), read faster.
pub fn coarse_monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

pub fn unix_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// When this process started (its fork, or its clone), in nanoseconds since
/// the Unix epoch, to the kernel's clock tick (10 ms), rounded down;
/// `None` when /proc/self/stat cannot be read. The kernel counts it on
/// the boot-time clock: the distance from now on that clock, taken from
/// the wall clock now.
pub fn process_start_unix_ns() -> Option<u64> {
    let mut buf = [0u8; 1024];
    let len = read_small_file(c"/proc/self/stat", &mut buf);
    let ticks = start_ticks(&buf[..len])?;
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|&t| t > 0)?;
    let since_boot_ns = ticks.checked_mul(1_000_000_000)? / ticks_per_second;
    let ago_ns = clock_ns(libc::CLOCK_BOOTTIME).checked_sub(since_boot_ns)?;
    unix_ns().checked_sub(ago_ns)
}

/// The pipes this process's standard input and output are, where they are.
pub fn stdio_pipes() -> trace_format::StdioPipes {
    let pipe = |fd| {
        fstat(fd)
            .filter(|status| status.st_mode & libc::S_IFMT == libc::S_IFIFO)
            .map(|status| (status.st_dev, status.st_ino))
    };
    trace_format::StdioPipes { input: pipe(0), output: pipe(1) }
}

/// The start time field (the 22nd) of a /proc/<pid>/stat line, in clock
/// ticks since boot. The second field, the command's name in parentheses,
/// may hold spaces and parentheses itself: the fields are counted from
/// the last `)`.
fn start_ticks(stat: &[u8]) -> Option<u64> {
    let after_name = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    let field = std::str::from_utf8(after_name).ok()?.split_ascii_whitespace().nth(22 - 3)?;
    field.parse().ok()
}

pub fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

pub fn is_main_thread() -> bool {
    thread_id() == pid()
}

/// Resident set size from /proc/self/statm, 0 when it cannot be read.
pub fn rss_bytes() -> u64 {
    let mut buf = [0u8; 128];
    let len = read_small_file(c"/proc/self/statm", &mut buf);
    let text = std::str::from_utf8(&buf[..len]).unwrap_or("");
    let resident_pages: u64 = text.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    resident_pages * page_size() as u64
}

/// The resident pages of files mapped into this process (`RssFile` of
/// /proc/self/status, kernels since 4.5), 0 when it cannot be read: counters
/// the kernel keeps, no page table walk.
pub fn rss_file_bytes() -> u64 {
    let mut buf = [0u8; 4096];
    let len = read_small_file(c"/proc/self/status", &mut buf);
    kib_field(&buf[..len], b"RssFile:").map_or(0, |kib| kib * 1024)
}

/// Memory written by this process alone (`Private_Dirty` of
/// /proc/self/smaps_rollup), 0 when it cannot be read. The kernel walks
/// the page tables for it: milliseconds in a process of a few GB.
pub fn private_dirty_bytes() -> u64 {
    let mut buf = [0u8; 4096];
    let len = read_small_file(c"/proc/self/smaps_rollup", &mut buf);
    kib_field(&buf[..len], b"Private_Dirty:").map_or(0, |kib| kib * 1024)
}

/// The value of a `Name:   123 kB` line of a /proc file.
fn kib_field(text: &[u8], name: &[u8]) -> Option<u64> {
    let line = text.split(|&b| b == b'\n').find_map(|line| line.strip_prefix(name))?;
    std::str::from_utf8(line).ok()?.split_whitespace().next()?.parse().ok()
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize
}

/// A new zeroed, readable and writable anonymous mapping of `len` bytes,
/// private or shared with forks (`sharing`: `MAP_PRIVATE` or `MAP_SHARED`),
/// made by the raw system call: the library's own `mmap` is the hook that
/// records the program's mappings. `None` when the kernel refuses.
pub fn map_anonymous(len: usize, sharing: libc::c_int) -> Option<std::ptr::NonNull<u8>> {
    new_mapping(len, libc::PROT_READ | libc::PROT_WRITE, sharing | libc::MAP_ANONYMOUS, -1)
}

/// A new mapping of `len` bytes at an address the kernel picks, of the file
/// open at `fd` (from its start) or anonymous, by the raw system call.
fn new_mapping(len: usize, protection: libc::c_int, flags: libc::c_int, fd: i32) -> Option<std::ptr::NonNull<u8>> {
    // SAFETY: a new mapping at an address the kernel picks; no existing
    // memory is touched.
    let address = unsafe { libc::syscall(libc::SYS_mmap, 0usize, len, protection, flags, fd as libc::c_long, 0usize) };
    if address == -1 {
        return None;
    }
    std::ptr::NonNull::new(address as *mut u8)
}

/// `N` counters, 0 at first, that every process forked from this one from
/// now on shares with it: one page of their own, mapped shared and never
/// unmapped. `None` when the page cannot be had.
pub fn counters_shared_with_forks<const N: usize>() -> Option<&'static [AtomicU32; N]> {
    let page = map_anonymous(page_size(), libc::MAP_SHARED)?;
    // SAFETY: the page is zeroed, readable and writable, and never unmapped.
    Some(unsafe { counters_in_page(page) })
}

/// The first `N` words of `page` as counters.
///
/// # Safety
/// `page` is a page-aligned mapping of at least 4096 bytes that stays
/// mapped for the life of the process, readable (and writable where a
/// counter is ever added to), whose words are only ever accessed atomically.
unsafe fn counters_in_page<const N: usize>(page: std::ptr::NonNull<u8>) -> &'static [AtomicU32; N] {
    const { assert!(N * std::mem::size_of::<AtomicU32>() <= 4096, "one page holds the counters") };
    // SAFETY: the caller's promise: aligned, mapped for good, only accessed
    // atomically (a zeroed word is a valid AtomicU32), and the counters fit
    // (asserted above).
    unsafe { &*page.as_ptr().cast::<[AtomicU32; N]>() }
}

/// The name a page of [`counters_shared_with_descendants`] is made under,
/// which `/proc/<pid>/fd/<fd>` shows (`/memfd:tracer-counters (deleted)`).
const SHARED_COUNTERS_NAME: &std::ffi::CStr = c"tracer-counters";

/// Where the descendants of a process that are not its forks (a program
/// it execs, a multiprocessing child it spawns) find a page of counters
/// that it shares: an unnamed file in memory (a memfd), open in that
/// process at a descriptor of its own, reachable by another process of
/// the same user at `/proc/<pid>/fd/<fd>` for as long as it stays open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedCountersAddress {
    pid: u32,
    fd: i32,
    file: FileId,
}

impl SharedCountersAddress {
    /// As an environment variable's value: `pid:fd:device:inode`.
    pub fn to_env(self) -> String {
        format!("{}:{}:{}:{}", self.pid, self.fd, self.file.device, self.file.inode)
    }

    /// What [`SharedCountersAddress::to_env`] wrote; `None` for anything else.
    pub fn from_env(text: &str) -> Option<SharedCountersAddress> {
        let mut fields = text.split(':');
        let pid = fields.next()?.parse().ok()?;
        let fd = fields.next()?.parse().ok()?;
        let device = fields.next()?.parse().ok()?;
        let inode = fields.next()?.parse().ok()?;
        fields.next().is_none().then_some(SharedCountersAddress { pid, fd, file: FileId { device, inode } })
    }

    /// Whether this process has the page's file open at its descriptor (a
    /// forked child's copy of its parent's, unless the program closed it
    /// or opened something else there since).
    pub fn open_here(self) -> bool {
        file_id(self.fd) == Some(self.file)
    }

    pub fn fd(self) -> i32 {
        self.fd
    }
}

/// `N` counters, 0 at first, shared as [`counters_shared_with_forks`]'s are
/// and reachable by other descendants at the address returned (see
/// [`parents_counters`]). The page's descriptor stays open in this process
/// (closed at exec); forks inherit it. `None` when the kernel refuses.
pub fn counters_shared_with_descendants<const N: usize>() -> Option<(&'static [AtomicU32; N], SharedCountersAddress)> {
    let size = page_size();
    // SAFETY: memfd_create with a NUL-terminated name and flags; it makes a
    // new descriptor and touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, SHARED_COUNTERS_NAME.as_ptr(), libc::MFD_CLOEXEC) };
    let Ok(fd) = i32::try_from(fd) else { return None };
    if fd < 0 {
        return None;
    }
    let made = (|| {
        // SAFETY: sizes the file just made; no memory is touched.
        if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
            return None;
        }
        let file = file_id(fd)?;
        let page = map_file_page(fd, size, libc::PROT_READ | libc::PROT_WRITE)?;
        // SAFETY: a new page of the file, zeroed, readable and writable,
        // never unmapped; its words are only accessed as atomics.
        let counters = unsafe { counters_in_page(page) };
        Some((counters, SharedCountersAddress { pid: pid(), fd, file }))
    })();
    if made.is_none() {
        close(fd);
    }
    made
}

/// A shared mapping of the first `len` bytes of the file open at `fd`,
/// made by the raw system call (see [`map_anonymous`]).
fn map_file_page(fd: i32, len: usize, protection: libc::c_int) -> Option<std::ptr::NonNull<u8>> {
    new_mapping(len, protection, libc::MAP_SHARED, fd)
}

/// The counters of the page at `address`, mapped read-only, when the
/// process that made it is this one's parent and still holds it open at
/// that descriptor; `None` otherwise (another process's address, handed
/// down past a process that made none; a parent that closed it, or whose
/// descriptor now names another file). Nothing but that page is opened:
/// the descriptor's link must name it before it is opened (never waiting
/// on what it names) and the file opened must be it.
pub fn parents_counters<const N: usize>(address: SharedCountersAddress) -> Option<&'static [AtomicU32; N]> {
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } as u32 != address.pid {
        return None;
    }
    let path = CString::new(format!("/proc/{}/fd/{}", address.pid, address.fd)).ok()?;
    let mut target = [0u8; 64];
    // SAFETY: `path` is NUL-terminated and readlink writes at most `target.len()` bytes.
    let len = unsafe { libc::readlink(path.as_ptr(), target.as_mut_ptr().cast(), target.len()) };
    let name = [b"/memfd:", SHARED_COUNTERS_NAME.to_bytes()].concat();
    if len < 0 || !target[..len as usize].starts_with(&name) {
        return None;
    }
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated; the descriptor is closed below.
    let fd = unsafe { nocancel::open(path.as_ptr(), flags, 0) };
    if fd < 0 {
        return None;
    }
    let size = page_size();
    let page = fstat(fd)
        .filter(|status| FileId { device: status.st_dev, inode: status.st_ino } == address.file)
        .filter(|status| status.st_size as usize >= size)
        .and_then(|_| map_file_page(fd, size, libc::PROT_READ));
    close(fd);
    // SAFETY: the parent's page, mapped read-only here and never unmapped;
    // the counters are only read, atomically.
    page.map(|page| unsafe { counters_in_page(page) })
}

/// Holds the counters of a page that [`counters_shared_with_forks`],
/// [`counters_shared_with_descendants`] or [`parents_counters`] hand out,
/// or none; replaceable through a shared reference (a forked child swaps
/// its parent's for a page of its own).
pub struct SharedCountersSlot<const N: usize>(AtomicPtr<[AtomicU32; N]>);

impl<const N: usize> Default for SharedCountersSlot<N> {
    fn default() -> Self {
        SharedCountersSlot(AtomicPtr::new(std::ptr::null_mut()))
    }
}

impl<const N: usize> SharedCountersSlot<N> {
    pub fn set(&self, counters: Option<&'static [AtomicU32; N]>) {
        let pointer = counters.map_or(std::ptr::null_mut(), |c| c as *const [AtomicU32; N] as *mut [AtomicU32; N]);
        self.0.store(pointer, Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<&'static [AtomicU32; N]> {
        let pointer = self.0.load(Ordering::Relaxed);
        // SAFETY: the slot holds null or a pointer from a `&'static`
        // reference (`set` takes nothing else): a page never unmapped.
        unsafe { pointer.as_ref() }
    }
}

/// Reads up to `buf.len()` bytes of a file into a stack buffer without
/// allocating; errno is left as it was.
pub fn read_small_file(path: &std::ffi::CStr, buf: &mut [u8]) -> usize {
    keeping_errno(|| {
        // SAFETY: `path` is NUL-terminated; the descriptor is closed before return.
        let fd = unsafe { nocancel::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return 0;
        }
        let mut filled = 0;
        while filled < buf.len() {
            // SAFETY: the pointer and length describe the unfilled part of `buf`.
            let n = unsafe { nocancel::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled) };
            if n > 0 {
                filled += n as usize;
            } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        // SAFETY: `fd` was opened above and is not used after this.
        unsafe { nocancel::close(fd) };
        filled
    })
}

/// This process's arguments (`/proc/self/cmdline`), empty when unreadable.
pub fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|raw| {
            raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default()
}

/// The address of the first definition of `name` in the global scope (the
/// program and the libraries loaded with it), if any.
pub fn global_symbol(name: &std::ffi::CStr) -> Option<usize> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no other preconditions.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
    (address != 0).then_some(address)
}

/// Whether `path` names the file this process's standard output or error
/// is open on (`/dev/stdout`, or the file they were redirected to), as a
/// regular file, a pipe, a socket or a terminal; `/dev/null` is none.
pub fn names_standard_stream(path: &Path) -> bool {
    let Ok(named) = std::fs::metadata(path) else { return false };
    let kind = named.file_type();
    [1, 2].into_iter().any(|fd| {
        let same = fstat(fd).is_some_and(|s| s.st_dev == named.dev() && s.st_ino == named.ino());
        // SAFETY: isatty only asks about the descriptor.
        let written_to = kind.is_file() || kind.is_fifo() || kind.is_socket() || unsafe { libc::isatty(fd) } == 1;
        same && written_to
    })
}

/// What dladdr says of the symbol it finds for `address` (the nearest at or
/// below it), with a copy of that symbol's entry in its object's symbol
/// table; `None` where none is found.
pub fn symbol_entry(address: usize) -> Option<(libc::Dl_info, libc::Elf64_Sym)> {
    /// `dladdr1`'s request for the symbol table entry.
    const RTLD_DL_SYMENT: libc::c_int = 1;
    // SAFETY: Dl_info is plain data, for which all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut symbol: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 only reads the loader's tables and fills `info` and,
    // with RTLD_DL_SYMENT, `symbol` with a pointer into a loaded object's
    // symbol table, which stays mapped while the object is loaded.
    let found = unsafe { libc::dladdr1(address as *const libc::c_void, &mut info, &mut symbol, RTLD_DL_SYMENT) } != 0;
    // SAFETY: as above; null when no symbol matched.
    let entry = unsafe { symbol.cast::<libc::Elf64_Sym>().as_ref() }.copied();
    entry.filter(|_| found).map(|entry| (info, entry))
}

/// The size of the symbol at `address`, from its loaded object's symbol
/// table.
pub fn symbol_size(address: usize) -> Option<usize> {
    let (info, entry) = symbol_entry(address)?;
    (info.dli_saddr as usize == address).then_some(entry.st_size as usize)
}

/// The calling thread's kernel id.
pub fn thread_id() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// What dladdr says of the loaded object holding `address`, if anything.
pub fn loaded_object(address: usize) -> Option<libc::Dl_info> {
    // SAFETY: Dl_info is plain data, for which all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and fills `info`.
    (unsafe { libc::dladdr(address as *const libc::c_void, &mut info) } != 0).then_some(info)
}

/// The file name the loaded object holding `address` was loaded by, as
/// the loader recorded it (for a preloaded library, its `LD_PRELOAD` entry
/// as written).
pub fn loaded_file_name(address: usize) -> Option<&'static std::ffi::CStr> {
    let info = loaded_object(address).filter(|info| !info.dli_fname.is_null())?;
    // SAFETY: a file name dladdr sets is a NUL-terminated string the loader
    // keeps while the object is loaded; the objects asked about (this
    // library, the allocators and libraries loaded at start) stay loaded.
    Some(unsafe { std::ffi::CStr::from_ptr(info.dli_fname) })
}

/// The file name this library was loaded by (see [`loaded_file_name`]).
pub fn own_library_name() -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let name = loaded_file_name(own_library_name as fn() -> Option<std::ffi::OsString> as usize)?;
    Some(std::ffi::OsStr::from_bytes(name.to_bytes()).to_owned())
}

/// Writes a whole message to stderr, ignoring failure (there is nowhere else to report it).
/// The file the program's stderr (descriptor 2) was as the tracer started:
/// its device and inode, both 0 when it was closed.
static STDERR_AT_START: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Notes what the program's stderr is as the tracer starts (see [`print_stderr`]).
pub fn note_stderr() {
    let (device, inode) = file_id(2).map_or((0, 0), |id| (id.device, id.inode));
    STDERR_AT_START[0].store(device, Ordering::Relaxed);
    STDERR_AT_START[1].store(inode, Ordering::Relaxed);
}

/// Writes the tracer's line to the program's stderr, unless descriptor 2
/// has become a file of the program's own: a daemon that closed its
/// descriptors and opened its data files at 0, 1 and 2 must not find the
/// tracer's words among its data. Descriptor 2 is written while it is the
/// file it was as the tracer started, or something a line cannot damage
/// (a terminal, a pipe, a socket, /dev/null), or a file opened to append to
/// (a log the program's stderr was sent to).
pub fn print_stderr(message: &str) {
    if keeping_errno(stderr_is_the_programs) {
        let _ = write_all(2, message.as_bytes());
    }
}

fn stderr_is_the_programs() -> bool {
    let Some(status) = fstat(2) else { return false };
    let at_start = [STDERR_AT_START[0].load(Ordering::Relaxed), STDERR_AT_START[1].load(Ordering::Relaxed)];
    if at_start == [status.st_dev, status.st_ino] || status.st_mode & libc::S_IFMT != libc::S_IFREG {
        return true;
    }
    // SAFETY: F_GETFL reads the descriptor's flags and changes nothing.
    let flags = unsafe { libc::fcntl(2, libc::F_GETFL) };
    flags != -1 && flags & libc::O_APPEND != 0
}

pub fn write_all(fd: i32, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe the live slice `bytes`.
        let n = unsafe { nocancel::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the file accepts no more data"));
        } else {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
    Ok(())
}

/// How a trace file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Created, or emptied and reused, unless another process holds its lock:
    /// the named file of a first traced process. Two programs started
    /// side by side with the same settings (`train.py | tee log` with
    /// `LD_PRELOAD` exported) would otherwise write over each other's trace.
    Locked,
    /// Created, never reused: a descendant's `<path>.<pid>`.
    Exclusive,
}

/// Opens a trace file for writing as `claim` says, close-on-exec so that an
/// exec'd program does not inherit it. A file another process holds fails
/// with `WouldBlock`, one that exists when `Exclusive` with `AlreadyExists`.
/// A `Locked` file that no process holds is emptied, unless `keep`, asked
/// with the locked descriptor, says that it must be kept: it then fails
/// with `AlreadyExists`.
pub fn create_file(path: &Path, claim: Claim, keep: impl FnOnce(i32) -> bool) -> io::Result<i32> {
    let mut flags = libc::O_WRONLY | libc::O_CREAT;
    if claim == Claim::Exclusive {
        flags |= libc::O_EXCL;
    }
    let fd = open(path, flags)?;
    if claim == Claim::Locked {
        if let Err(err) = lock_and_empty(fd, keep) {
            close(fd);
            return Err(err);
        }
    }
    Ok(fd)
}

/// The file `fd` is open on, opened again for reading (through
/// /proc/self/fd, whatever its path is now), close-on-exec.
pub fn open_to_read(fd: i32) -> io::Result<i32> {
    open(Path::new(&format!("/proc/self/fd/{fd}")), libc::O_RDONLY)
}

/// This process's memory as a file (/proc/self/mem), to read at addresses
/// that may have been unmapped: a read there fails, where a load faults.
pub fn open_own_memory() -> io::Result<i32> {
    open(Path::new("/proc/self/mem"), libc::O_RDONLY)
}

/// What a read of this process's memory through the kernel found.
pub enum OwnMemory<const N: usize> {
    Words([u64; N]),
    /// Not mapped (EFAULT): a direct load there would fault.
    Unmapped,
    /// The kernel refused the read (a sandbox's filter).
    Unknown,
}

/// Reads `N` words at `address` of this process's memory through the
/// kernel (`process_vm_readv`), which fails where memory was unmapped,
/// where a load would fault.
pub fn read_own_words<const N: usize>(address: u64) -> OwnMemory<N> {
    let mut words = [0u64; N];
    let local = libc::iovec { iov_base: words.as_mut_ptr().cast(), iov_len: 8 * N };
    let remote = libc::iovec { iov_base: address as *mut libc::c_void, iov_len: 8 * N };
    let (read, error) = keeping_errno(|| {
        // SAFETY: the kernel writes at most `8 * N` bytes into `words`, and
        // reads the remote range as a copy, failing (not faulting) where it
        // is not mapped.
        let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        (read, errno())
    });
    match read {
        n if n == 8 * N as isize => OwnMemory::Words(words),
        -1 if error == libc::EFAULT => OwnMemory::Unmapped,
        -1 => OwnMemory::Unknown,
        // Cut short at an unmapped page.
        _ => OwnMemory::Unmapped,
    }
}

/// Reads from `fd` at `offset` into `buf`, without moving the descriptor's
/// offset; the bytes read (0 at the end of the file).
pub fn read_at(fd: i32, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    loop {
        // SAFETY: the pointer and length describe `buf`, writable for the call.
        let n = unsafe { nocancel::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Reads a descriptor from its start with `pread`, leaving the
/// descriptor's own offset where it is.
pub struct ReaderAt {
    fd: i32,
    offset: u64,
}

impl ReaderAt {
    pub fn from_start(fd: i32) -> ReaderAt {
        ReaderAt { fd, offset: 0 }
    }
}

impl io::Read for ReaderAt {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = read_at(self.fd, buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Opens `path` with `flags`, close-on-exec (created files get mode 0644).
fn open(path: &Path, flags: libc::c_int) -> io::Result<i32> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `c_path` is NUL-terminated and outlives the call.
    let fd = unsafe { nocancel::open(c_path.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// Opens an existing trace file again to add to its end, locked again as
/// [`create_file`] locks it (whoever holds it, the trace goes on).
pub fn reopen_to_append(path: &Path) -> io::Result<i32> {
    let fd = open(path, libc::O_WRONLY | libc::O_APPEND)?;
    // SAFETY: flock on the descriptor just opened; its outcome changes nothing here.
    unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) };
    Ok(fd)
}

/// Takes `fd`'s exclusive lock, held until every descriptor of this open
/// file is closed (a forked child closes its copy at once), and empties
/// the file. Where the file system has no locks, the file is emptied all
/// the same, as it was before locks were taken. Anything but a regular
/// file (`/dev/null`, a pipe) is written as it is. A file that `keep`
/// says must be kept is left as it is, and unlocked again.
fn lock_and_empty(fd: i32, keep: impl FnOnce(i32) -> bool) -> io::Result<()> {
    if fstat(fd).is_none_or(|status| status.st_mode & libc::S_IFMT != libc::S_IFREG) {
        return Ok(());
    }
    // SAFETY: flock and ftruncate act on a descriptor this function's caller owns.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::WouldBlock {
            return Err(err);
        }
    }
    if keep(fd) {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, "written by a process started beside this one"));
    }
    // SAFETY: as above.
    if unsafe { libc::ftruncate(fd, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What tells one open file from another: its device and inode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileId {
    device: u64,
    inode: u64,
}

/// The file `fd` is open on; `None` when `fd` is not open.
pub fn file_id(fd: i32) -> Option<FileId> {
    fstat(fd).map(|status| FileId { device: status.st_dev, inode: status.st_ino })
}

/// What the trace writer checks of its descriptor before each write.
pub struct OpenFile {
    pub id: FileId,
    /// The size of a regular file; `None` for anything else (`/dev/null`).
    pub size: Option<u64>,
    /// A regular file whose last name was removed.
    pub deleted: bool,
}

/// The file `fd` is open on; `None` when `fd` is not open.
pub fn open_file(fd: i32) -> Option<OpenFile> {
    fstat(fd).map(|status| {
        let regular = status.st_mode & libc::S_IFMT == libc::S_IFREG;
        OpenFile {
            id: FileId { device: status.st_dev, inode: status.st_ino },
            size: regular.then_some(status.st_size as u64),
            deleted: regular && status.st_nlink == 0,
        }
    })
}

/// Fails when writing `len` more bytes at the end of a regular file of
/// `size` bytes would pass the process's file-size limit (`ulimit -f`): the
/// kernel would end the program with SIGXFSZ.
pub fn within_file_size_limit(size: u64, len: usize) -> io::Result<()> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only into `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return Ok(());
    }
    if size + len as u64 > limit.rlim_cur {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("it would pass the file-size limit of {} bytes (ulimit -f)", limit.rlim_cur),
        ));
    }
    Ok(())
}

/// Of the room on a trace file's file system, the share left to the
/// program (1/N of its size), up to [`ROOM_LEFT_MOST`] bytes.
const ROOM_LEFT_DIVISOR: u64 = 100;
const ROOM_LEFT_MOST: u64 = 64 << 20;

/// Fails when writing `len` more bytes into the regular file `fd` would
/// leave its file system less free room than a hundredth of its size (64
/// MiB at most): the program's own files there (its checkpoints, its logs)
/// must still find room, which a trace that filled the disk would take.
pub fn leaves_room_for_the_program(fd: i32, len: usize) -> io::Result<()> {
    // SAFETY: an all-zero statvfs is a valid value for fstatvfs to overwrite.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs writes only into `fs`.
    if unsafe { libc::fstatvfs(fd, &mut fs) } != 0 {
        return Ok(());
    }
    let unit = fs.f_frsize as u64;
    let Some(left) = room_left_short(fs.f_bavail as u64 * unit, fs.f_blocks as u64 * unit, len as u64, unit) else {
        return Ok(());
    };
    let (amount, share) = if left >= 1 << 20 {
        (format!("{} MiB", left >> 20), "a hundredth of its size, 64 MiB at most")
    } else {
        (format!("{} KiB", left.div_ceil(1024)), "a hundredth of its size")
    };
    Err(io::Error::new(
        io::ErrorKind::StorageFull,
        format!("its file system would be left with less than {amount} free ({share}), which the program's own files may need"),
    ))
}

/// The room left to the program that writing `len` bytes on a file system
/// of `size` bytes with `free` bytes free, in blocks of `block` bytes,
/// would not leave; `None` when it would. The write may take a block more
/// than its length: the one the file's last block was short of.
fn room_left_short(free: u64, size: u64, len: u64, block: u64) -> Option<u64> {
    let left = (size / ROOM_LEFT_DIVISOR).min(ROOM_LEFT_MOST);
    (free < left.saturating_add(len).saturating_add(block)).then_some(left)
}

/// Whether `fd` is a file of shared memory: a regular file of tmpfs (a
/// /dev/shm file, `shm_open`'s, a memfd) or hugetlbfs (a memfd made with
/// `MFD_HUGETLB`), whose pages are memory the processes mapping it hold.
/// A file of any other filesystem is a file's pages, cached, and a device
/// (a driver's memory) neither.
pub fn is_shared_memory_file(fd: i32) -> bool {
    let regular = fstat(fd).is_some_and(|status| status.st_mode & libc::S_IFMT == libc::S_IFREG);
    regular && is_on_shared_memory_filesystem(fd)
}

/// [`is_shared_memory_file`] for the file /proc/self/maps names `path`
/// (see [`MapsLine::path`]). The kernel names a memfd "/memfd:NAME
/// (deleted)" and a System V segment "/SYSV<key> (deleted)", paths of no
/// file; a file removed since it was mapped is told by its directory's
/// filesystem. `false` where nothing can be opened there.
pub fn is_shared_memory_path(path: &[u8]) -> bool {
    if path.starts_with(b"/memfd:") || path.starts_with(b"/SYSV") {
        return true;
    }
    let (path, removed) = match path.strip_suffix(b" (deleted)") {
        Some(removed) => {
            let slash = removed.iter().rposition(|&b| b == b'/').unwrap_or(0);
            (&removed[..slash.max(1)], true)
        }
        None => (path, false),
    };
    let Ok(path) = std::ffi::CString::new(path) else { return false };
    // SAFETY: the path is NUL-terminated; the descriptor is closed below.
    let fd = unsafe { nocancel::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    let shared = if removed { is_on_shared_memory_filesystem(fd) } else { is_shared_memory_file(fd) };
    close(fd);
    shared
}

/// Whether the filesystem `fd` lies on is tmpfs or hugetlbfs.
fn is_on_shared_memory_filesystem(fd: i32) -> bool {
    // SAFETY: an all-zero statfs is a valid value for fstatfs to overwrite.
    let mut status: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes only into `status`; a closed descriptor fails
    // with EBADF. The raw call, as the tracer's other I/O.
    let found = unsafe { libc::syscall(libc::SYS_fstatfs, fd, &mut status as *mut libc::statfs) } == 0;
    // The magic numbers are 32-bit; the kernel widens them without a sign.
    let kind = status.f_type as u32;
    found && (kind == libc::TMPFS_MAGIC as u32 || kind == libc::HUGETLBFS_MAGIC as u32)
}

/// The size of the file `fd` is open on; `None` when `fd` is not open.
pub fn file_size(fd: i32) -> Option<u64> {
    fstat(fd).map(|status| status.st_size as u64)
}

/// What `fstat` says of `fd`; `None` when `fd` is not open.
fn fstat(fd: i32) -> Option<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
    let mut status: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes only into `status`; a closed descriptor fails with EBADF.
    (unsafe { libc::fstat(fd, &mut status) } == 0).then_some(status)
}

pub fn close(fd: i32) {
    // SAFETY: closing a descriptor the caller owns; errors leave nothing to undo.
    unsafe { nocancel::close(fd) };
}

/// Whether `signal`, sent to this process by the calling thread, ends it
/// now: `SIGKILL`, or a signal that ends a process by default, left to its
/// default action and not blocked by this thread. A signal blocked here may
/// go to another thread, or wait: it is not taken to end the process.
pub fn signal_ends_process(signal: i32) -> bool {
    const STOP_OR_IGNORED: [i32; 7] =
        [libc::SIGSTOP, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGCHLD, libc::SIGCONT, libc::SIGURG];
    if signal == libc::SIGKILL {
        return true;
    }
    if signal <= 0 || signal == libc::SIGWINCH || STOP_OR_IGNORED.contains(&signal) {
        return false;
    }
    // SAFETY: both structures are plain data, for which all zeroes is a
    // valid value; sigaction with a null new action and pthread_sigmask
    // with a null new set only read the current disposition and mask.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut action) != 0 || action.sa_sigaction != libc::SIG_DFL {
            return false;
        }
        let mut blocked: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut blocked) == 0
            && libc::sigismember(&blocked, signal) == 0
    }
}

/// Ends the process at once, as `_exit` does, without running exit handlers.
pub fn exit_group(status: i32) -> ! {
    loop {
        // SAFETY: exit_group ends the process and has no memory-safety
        // preconditions; the loop only satisfies the type checker.
        unsafe { libc::syscall(libc::SYS_exit_group, status as libc::c_long) };
    }
}

/// The `[start, end)` of the memory mapping holding `address`, read from
/// /proc/self/maps through a stack buffer: no allocation, no lock of glibc's.
pub fn mapping_containing(address: u64) -> Option<(u64, u64)> {
    maps_line_containing(address, parse_range).flatten()
}

/// `read` applied to the line of /proc/self/maps (without its newline)
/// whose range holds `address`, read through a stack buffer: no
/// allocation, no lock of glibc's, so that a hook may call it.
pub fn maps_line_containing<R>(address: u64, read: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let mut buf = [0u8; 4096];
    let mut read = Some(read);
    let mut found = None;
    for_each_maps_line(&mut buf, |line| {
        if parse_range(line).is_some_and(|(start, end)| start <= address && address < end) {
            found = read.take().map(|read| read(line));
        }
        found.is_none()
    });
    found
}

/// This thread's errno.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's errno: the tracer's own system calls must leave the
/// program's as its own calls left it.
pub fn set_errno(value: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = value };
}

/// `work`, with this thread's errno as it was before it afterwards.
pub fn keeping_errno<R>(work: impl FnOnce() -> R) -> R {
    let errno = errno();
    let result = work();
    set_errno(errno);
    result
}

/// The absolute path of the file mapped at each of `addresses`, in one
/// pass over /proc/self/maps (through a heap buffer: the caller may run on
/// a signal handler's small stack); `None` where none is, or the file
/// cannot be read.
pub fn files_mapped_at(addresses: &[u64]) -> Vec<Option<String>> {
    if addresses.is_empty() {
        return Vec::new();
    }
    // `Some(None)`: the line found, no file there.
    let mut files: Vec<Option<Option<String>>> = vec![None; addresses.len()];
    let mut buf = vec![0u8; 16 << 10];
    let mut left = addresses.len();
    for_each_maps_line(&mut buf, |line| {
        let Some((start, end)) = parse_range(line) else { return true };
        for (file, &address) in files.iter_mut().zip(addresses) {
            if file.is_none() && start <= address && address < end {
                let path = MapsLine::parse(line).map_or(&b""[..], |fields| fields.path);
                *file = Some(path.starts_with(b"/").then(|| String::from_utf8_lossy(path).into_owned()));
                left -= 1;
            }
        }
        left > 0
    });
    files.into_iter().map(Option::flatten).collect()
}

/// Calls `each` with the lines of /proc/self/maps (without their newline),
/// read through `buf`, until it returns false. errno is left as it was.
pub fn for_each_maps_line(buf: &mut [u8], each: impl FnMut(&[u8]) -> bool) {
    keeping_errno(|| read_maps_lines(buf, each));
}

fn read_maps_lines(buf: &mut [u8], mut each: impl FnMut(&[u8]) -> bool) {
    // SAFETY: the path is NUL-terminated; the descriptor is closed below.
    let fd = unsafe { nocancel::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return;
    }
    let mut filled = 0;
    loop {
        // SAFETY: the pointer and length describe the unfilled part of `buf`.
        let n = unsafe { nocancel::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        let at_end = n <= 0;
        filled += n.max(0) as usize;
        // Complete lines only; a partial last line waits for the next read.
        let complete =
            if at_end { filled } else { buf[..filled].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) };
        let go_on = buf[..complete].split(|&b| b == b'\n').all(&mut each);
        if !go_on || at_end || complete == 0 {
            break;
        }
        buf.copy_within(complete..filled, 0);
        filled -= complete;
    }
    close(fd);
}

/// The fields of a /proc/self/maps line ("start-end perms offset dev
/// inode path") that say what is mapped there.
pub struct MapsLine<'a> {
    pub perms: &'a [u8],
    /// Where in its file the mapping starts.
    pub offset: u64,
    pub inode: &'a [u8],
    /// The file's path as the kernel names it (absolute, with " (deleted)"
    /// after a file removed since), a pseudo-path ("[stack]", "/memfd:name
    /// (deleted)"), or empty for anonymous memory.
    pub path: &'a [u8],
}

impl MapsLine<'_> {
    pub fn parse(line: &[u8]) -> Option<MapsLine<'_>> {
        let mut fields = line.split(|&b| b == b' ').filter(|field| !field.is_empty());
        let perms = fields.nth(1)?;
        let offset = u64::from_str_radix(std::str::from_utf8(fields.next()?).ok()?, 16).ok()?;
        let inode = fields.nth(1)?;
        let path_start = inode.as_ptr() as usize - line.as_ptr() as usize + inode.len();
        Some(MapsLine { perms, offset, inode, path: line[path_start..].trim_ascii() })
    }
}

/// "start-end perms ..." with hexadecimal bounds.
pub fn parse_range(line: &[u8]) -> Option<(u64, u64)> {
    let range = line.split(|&b| b == b' ').next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let hex = |digits: &[u8]| u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok();
    Some((hex(&range[..dash])?, hex(&range[dash + 1..])?))
}

/// The system calls of the tracer's I/O, made directly: glibc's wrappers
/// of them are cancellation points, where a thread that `pthread_cancel`
/// targets would unwind from inside a hook, through the tracer's frames,
/// which catch every unwind (a panic is the tracer's own failure), and glibc
/// aborts the process when its forced unwind is caught. The raw `syscall`
/// is no cancellation point; the cancellation waits for the program's own.
mod nocancel {
    use std::ffi::{c_char, c_int, c_void};

    /// # Safety
    /// `path` is NUL-terminated.
    pub unsafe fn open(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
        // SAFETY: openat relative to the working directory, as open is; the caller's path.
        unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) as c_int }
    }

    /// # Safety
    /// `buf` is writable for `len` bytes.
    pub unsafe fn read(fd: c_int, buf: *mut c_void, len: usize) -> isize {
        // SAFETY: the caller's buffer and length.
        unsafe { libc::syscall(libc::SYS_read, fd, buf, len) as isize }
    }

    /// # Safety
    /// `buf` is readable for `len` bytes.
    pub unsafe fn write(fd: c_int, buf: *const c_void, len: usize) -> isize {
        // SAFETY: the caller's buffer and length.
        unsafe { libc::syscall(libc::SYS_write, fd, buf, len) as isize }
    }

    /// # Safety
    /// `buf` is writable for `len` bytes.
    pub unsafe fn pread(fd: c_int, buf: *mut c_void, len: usize, offset: libc::off_t) -> isize {
        // SAFETY: the caller's buffer, length and offset.
        unsafe { libc::syscall(libc::SYS_pread64, fd, buf, len, offset) as isize }
    }

    /// # Safety
    /// `fd` is the caller's to close.
    pub unsafe fn close(fd: c_int) -> c_int {
        // SAFETY: the caller's descriptor.
        unsafe { libc::syscall(libc::SYS_close, fd) as c_int }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_leaves_a_hundredth_of_its_file_system_free_up_to_64_mib() {
        const MIB: u64 = 1 << 20;
        // 512 KiB of tmpfs in 4 KiB blocks: 5 KiB (rounded down) stay
        // free, and a block for the write's last one.
        assert_eq!(room_left_short(12 << 10, 512 << 10, 2 << 10, 4096), None);
        assert_eq!(room_left_short(12 << 10, 512 << 10, 4 << 10, 4096), Some(5242));
        // 1 TiB: 64 MiB, not 10 GiB.
        assert_eq!(room_left_short(100 * MIB, 1 << 40, MIB, 4096), None);
        assert_eq!(room_left_short(64 * MIB, 1 << 40, 1, 4096), Some(64 * MIB));
    }

    #[test]
    fn this_threads_stack_is_a_mapping_around_a_local() {
        let local = 0u8;
        let here = std::ptr::addr_of!(local) as u64;
        let (start, end) = mapping_containing(here).unwrap();
        assert!(start <= here && here < end);
        let other = std::thread::spawn(|| {
            let local = 0u8;
            let here = std::ptr::addr_of!(local) as u64;
            mapping_containing(here).map(|(s, e)| s <= here && here < e)
        });
        assert_eq!(other.join().unwrap(), Some(true));
    }

    #[test]
    fn a_shared_counter_is_shared_with_a_forked_child() {
        let counters = counters_shared_with_forks::<2>().expect("a shared page");
        let slot = SharedCountersSlot::default();
        assert!(slot.get().is_none());
        slot.set(Some(counters));
        // SAFETY: the child only touches the shared counter and exits with
        // the raw call, running no destructor or handler of the test harness.
        let child = unsafe { libc::fork() };
        if child == 0 {
            slot.get().map(|[_, c]| c.fetch_add(5, Ordering::Relaxed));
            exit_group(0);
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert_eq!(counters[1].load(Ordering::Relaxed), 5, "the child's increment is seen by its parent");
    }

    #[test]
    fn a_counter_shared_with_descendants_is_found_by_a_child_only() {
        let ([_, counter], address) = counters_shared_with_descendants::<2>().expect("a memfd");
        counter.store(7, Ordering::Relaxed);
        let text = address.to_env();
        assert_eq!(SharedCountersAddress::from_env(&text), Some(address));
        assert_eq!(SharedCountersAddress::from_env("1:2:3"), None);
        assert!(address.open_here());
        // This process is not its own parent.
        assert!(parents_counters::<2>(address).is_none());
        // SAFETY: the child only reads its parent's page through /proc and
        // exits with the raw call, running no destructor or handler of the
        // test harness.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let mut found = SharedCountersAddress::from_env(&text).unwrap();
            found.pid = pid();
            let ok = parents_counters::<2>(found).is_none()
                && parents_counters::<2>(SharedCountersAddress { fd: found.fd + 1000, ..address }).is_none()
                && parents_counters::<2>(SharedCountersAddress { file: FileId::default(), ..address }).is_none()
                && parents_counters::<2>(address).is_some_and(|[_, c]| c.load(Ordering::Relaxed) == 7);
            exit_group(if ok { 0 } else { 1 });
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child did not find its parent's page");
    }

    #[test]
    fn private_memory_is_read_from_the_rollup() {
        let text = b"Rss:      512 kB\nPrivate_Clean:    8 kB\nPrivate_Dirty:   300 kB\n";
        assert_eq!(kib_field(text, b"Private_Dirty:"), Some(300));
        assert_eq!(kib_field(text, b"Swap:"), None);
        // Writing fresh pages makes them this process's alone. Measured in
        // a forked child: in the test process, the other tests' threads
        // free memory meanwhile (16 MiB once, under load); in the child,
        // its parent's writes can only add to the pages it alone holds.
        // SAFETY: the child allocates (glibc's malloc is reset for a forked
        // child), reads its own status and exits with the raw call, running
        // no destructor or handler of the test harness.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let before = private_dirty_bytes();
            let mut block = vec![0u8; 32 << 20];
            block.iter_mut().step_by(4096).for_each(|b| *b = 1);
            let grew = private_dirty_bytes() >= before + (24 << 20);
            drop(std::hint::black_box(block));
            exit_group(if grew { 0 } else { 1 });
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "32 MiB written, private memory grew less");
    }

    #[test]
    fn pages_read_from_a_mapped_file_are_counted_as_file_pages() {
        let len = 16usize << 20;
        let path = std::env::temp_dir().join(format!("tracer-rss-file-{}", pid()));
        std::fs::write(&path, vec![7u8; len]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let before = rss_file_bytes();
        assert!(before > 0, "the test binary's own code is file pages");
        // SAFETY: a new read-only private mapping of the whole file, at an
        // address the kernel picks, unmapped below.
        let address = unsafe {
            libc::syscall(
                libc::SYS_mmap,
                0usize,
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file) as libc::c_long,
                0usize,
            )
        };
        assert!(address > 0, "mmap failed");
        let pages = address as *const u8;
        // SAFETY: every offset read is inside the mapping.
        let sum: u64 =
            (0..len).step_by(4096).map(|offset| u64::from(unsafe { pages.add(offset).read_volatile() })).sum();
        assert_eq!(sum, 7 * (len / 4096) as u64);
        let after = rss_file_bytes();
        // SAFETY: unmaps the mapping made above, which nothing uses any more.
        unsafe { libc::syscall(libc::SYS_munmap, address, len) };
        assert!(after >= before + (12 << 20), "{before} -> {after}");
    }

    #[test]
    fn a_process_start_is_read_after_its_name() {
        let stat = b"4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50\n";
        assert_eq!(start_ticks(stat), Some(987654));
        assert_eq!(start_ticks(b"4242 (cut"), None);
        let started = process_start_unix_ns().expect("this process's start");
        let now = unix_ns();
        assert!(started <= now && now - started < 24 * 3600 * 1_000_000_000, "{started} {now}");
    }

    #[test]
    fn an_unmapped_address_has_no_mapping() {
        assert_eq!(mapping_containing(8), None);
    }

    #[test]
    fn ranges_parse_as_hex() {
        assert_eq!(parse_range(b"7f00-7fff r-xp 00000000 08:01 123 /lib/x.so"), Some((0x7f00, 0x7fff)));
        assert_eq!(parse_range(b""), None);
    }
}
