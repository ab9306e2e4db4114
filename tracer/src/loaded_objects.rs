//! The loaded ELF objects, as `dl_iterate_phdr` lists them, or, in a
//! process forked while its loader was changing the list, as the process's
//! mappings show them.
//!
//! glibc's `fork` resets the loader's own lock in the child but not the one
//! that guards its list of objects, which a thread adding or removing an
//! object holds for a moment, and one walking the objects for as long as
//! it walks: a child forked then waits for ever in its first
//! `dl_iterate_phdr`, as the tracer's listings call it at the child's
//! snapshots and on its first captures. The child reads that lock, found
//! as the tracer starts (see [`find_the_list_lock`]), and the loader's
//! interface for debuggers (`_r_debug`, `<link.h>`), which says whether
//! objects were being added or removed: a child forked with the lock held
//! or inside that window, and its own descendants, list their objects from
//! /proc/self/maps and the ELF headers mapped there.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::sys::{self, MapsLine};

/// A `dl_iterate_phdr` callback.
pub type EachObject = unsafe extern "C" fn(*mut libc::dl_phdr_info, usize, *mut c_void) -> c_int;

/// Set in a child forked while the list's lock may have been held; its
/// descendants inherit it with the lock.
static LIST_MAY_BE_HELD: AtomicBool = AtomicBool::new(false);

/// `<link.h>`'s `struct r_debug`, followed by the link to the next
/// namespace's that glibc 2.35 added (`struct r_debug_extended`, read only
/// where `version` is 2 or more).
#[repr(C)]
struct LoaderDebugState {
    version: c_int,
    map: *const c_void,
    brk: usize,
    state: c_int,
    ldbase: usize,
    next: *const LoaderDebugState,
}

/// `r_state` while the objects are not being changed.
const CONSISTENT: c_int = 0;
/// glibc allows 16 namespaces; the walk stops there whatever the links say.
const MOST_NAMESPACES: usize = 16;

extern "C" {
    /// The dynamic loader's state for debuggers, defined by ld.so.
    static _r_debug: LoaderDebugState;
}

/// In a forked child, before the tracer lists anything there: whether the
/// loader's list of objects may be locked for ever is noted.
pub fn note_fork_in_child() {
    if !LIST_MAY_BE_HELD.load(Ordering::Relaxed) && (list_lock_held() || loader_was_changing_objects()) {
        LIST_MAY_BE_HELD.store(true, Ordering::Relaxed);
    }
}

/// The address of the loader's lock on its list of objects, found by
/// [`find_the_list_lock`]; 0 where it was not.
static LIST_LOCK: AtomicUsize = AtomicUsize::new(0);

/// The start of glibc's `pthread_mutex_t` on x86_64 (`struct
/// __pthread_mutex_s`): the lock word, the recursion count, the owner's
/// thread id, and after the waiters' count its kind.
#[repr(C)]
struct MutexHead {
    lock: c_int,
    count: u32,
    owner: c_int,
    users: u32,
    kind: c_int,
}

const PTHREAD_MUTEX_RECURSIVE: c_int = 1;

/// Looks, once as the tracer starts, for the loader's lock on its list of
/// objects (`dl_load_write_lock`, inside ld.so's `_rtld_global`, at an
/// offset of glibc's own): `dl_iterate_phdr` holds it while it calls back,
/// so it is the one recursive mutex there that this thread owns then. A
/// child forked while another thread held it (loading or unloading an
/// object, or walking the objects itself, as an unwinder does) finds it
/// held by a thread it does not have. Not found (another layout, no such
/// symbol): the loader's debugger state alone tells.
pub fn find_the_list_lock() {
    /// Where to look, for whom, and the locks found.
    struct Search {
        start: usize,
        len: usize,
        thread: u32,
        found: Vec<usize>,
    }
    unsafe extern "C" fn inside(_: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the search below, for this call only.
        let search = unsafe { &mut *data.cast::<Search>() };
        let last = search.start + search.len - std::mem::size_of::<MutexHead>();
        for address in (search.start..=last).step_by(std::mem::align_of::<c_int>()) {
            // SAFETY: inside `_rtld_global`, ld.so's data, mapped for the
            // process's life; read as plain integers.
            let head = unsafe { std::ptr::read_volatile(address as *const MutexHead) };
            let recursive = head.kind & 0x7f == PTHREAD_MUTEX_RECURSIVE;
            if head.lock != 0 && head.count >= 1 && head.owner as u32 == search.thread && recursive {
                search.found.push(address);
            }
        }
        1 // the first object is enough
    }
    let Some(start) = sys::global_symbol(c"_rtld_global") else { return };
    let Some(len) = sys::symbol_size(start).filter(|&len| len >= std::mem::size_of::<MutexHead>()) else { return };
    let mut search = Search { start, len, thread: sys::thread_id(), found: Vec::new() };
    // SAFETY: the callback reads ld.so's data only, and `data` is `search`.
    unsafe { libc::dl_iterate_phdr(Some(inside), (&mut search as *mut Search).cast()) };
    if let [address] = search.found[..] {
        LIST_LOCK.store(address, Ordering::Relaxed);
    }
}

/// Whether the loader's list lock (see [`find_the_list_lock`]) is held:
/// in a child just forked, by a thread of its parent's, which it lacks.
fn list_lock_held() -> bool {
    let address = LIST_LOCK.load(Ordering::Relaxed);
    // SAFETY: an address inside ld.so's `_rtld_global` found above, mapped
    // for the process's life; the lock word read as a plain integer.
    address != 0 && unsafe { std::ptr::read_volatile(address as *const c_int) } != 0
}

fn loader_was_changing_objects() -> bool {
    let mut debug: *const LoaderDebugState = std::ptr::addr_of!(_r_debug);
    for _ in 0..MOST_NAMESPACES {
        // SAFETY: `debug` is `_r_debug` (ld.so's, for the process's life) or
        // a namespace's state it links to, which the loader never frees;
        // the fields past `ldbase` are read only where the version says
        // they exist. Volatile: the loader writes them for debuggers,
        // behind the compiler's back.
        let (version, state) = unsafe {
            (std::ptr::addr_of!((*debug).version).read_volatile(), std::ptr::addr_of!((*debug).state).read_volatile())
        };
        if state != CONSISTENT {
            return true;
        }
        if version < 2 {
            return false;
        }
        // SAFETY: as above, with version 2.
        let next = unsafe { std::ptr::addr_of!((*debug).next).read_volatile() };
        if next.is_null() {
            return false;
        }
        debug = next;
    }
    false
}

/// Listings from the mappings under way, and `dlclose` calls: the loader's
/// lock kept a library mapped while `dl_iterate_phdr` read it; these keep
/// it mapped while a listing from the mappings reads it.
static LISTINGS: AtomicUsize = AtomicUsize::new(0);
static UNLOADS: AtomicUsize = AtomicUsize::new(0);

/// Calls `each` with each loaded object and `data`, as `dl_iterate_phdr`
/// does; where the loader's list may be locked for ever, with the objects
/// the mappings show (see [`objects_in_mappings`]), or not at all while a
/// `dlclose` is under way: false then.
///
/// # Safety
/// `each` must be sound to call with an object's `dl_phdr_info`, valid for
/// the call, and `data`.
pub unsafe fn for_each(each: EachObject, data: *mut c_void) -> bool {
    if !LIST_MAY_BE_HELD.load(Ordering::Relaxed) {
        // SAFETY: the caller's contract is dl_iterate_phdr's.
        unsafe { libc::dl_iterate_phdr(Some(each), data) };
        return true;
    }
    LISTINGS.fetch_add(1, Ordering::SeqCst);
    let listed = UNLOADS.load(Ordering::SeqCst) == 0;
    if listed {
        // SAFETY: the caller's contract; no dlclose unmaps anything until
        // `LISTINGS` drops back.
        unsafe { objects_in_mappings(each, data) };
    }
    LISTINGS.fetch_sub(1, Ordering::SeqCst);
    listed
}

/// Held across the loader's `dlclose`: where objects are listed from the
/// mappings, it keeps new listings off and, if `may_wait`, waits for those
/// under way (not where this thread may be inside one: a handler of a
/// signal that interrupted it).
pub struct Unloading(bool);

impl Unloading {
    pub fn begin(may_wait: bool) -> Unloading {
        let counted = LIST_MAY_BE_HELD.load(Ordering::Relaxed);
        if counted {
            UNLOADS.fetch_add(1, Ordering::SeqCst);
            // A listing waits for nothing, so this wait ends.
            while may_wait && LISTINGS.load(Ordering::SeqCst) != 0 {
                std::thread::yield_now();
            }
        }
        Unloading(counted)
    }
}

impl Drop for Unloading {
    fn drop(&mut self) {
        if self.0 {
            UNLOADS.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A line of /proc/self/maps, as far as finding objects needs it.
struct Mapping {
    start: u64,
    end: u64,
    readable: bool,
    executable: bool,
    offset: u64,
    path: Vec<u8>,
}

/// Calls `each` with the program (unnamed, first, as the loader lists it),
/// the vDSO, and every file mapped executable somewhere whose first page,
/// mapped readable, holds an ELF header whose loadable segments are all
/// mapped, readable, each from that file where it has file contents: what
/// the loader maps for an object. A file mapped as data covers its own
/// length only, not its segments' places. The names are the kernel's,
/// absolute. A file's headers are read through /proc/self/mem, which
/// fails where another thread has just unmapped them (or the file was cut
/// short) rather than faulting.
///
/// # Safety
/// As [`for_each`]'s.
unsafe fn objects_in_mappings(each: EachObject, data: *mut c_void) {
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    sys::for_each_maps_line(&mut buf, |line| {
        if let (Some((start, end)), Some(fields)) = (sys::parse_range(line), MapsLine::parse(line)) {
            let (readable, executable) = (fields.perms.first() == Some(&b'r'), fields.perms.get(2) == Some(&b'x'));
            let path = fields.path.to_vec();
            mappings.push(Mapping { start, end, readable, executable, offset: fields.offset, path });
        }
        true
    });
    let call = |headers: &Headers, name: &[u8]| {
        let mut name = name.to_vec();
        name.push(0);
        // SAFETY: dl_phdr_info is plain data, for which all zeroes is valid.
        let mut info: libc::dl_phdr_info = unsafe { std::mem::zeroed() };
        info.dlpi_addr = headers.bias;
        info.dlpi_name = name.as_ptr().cast();
        info.dlpi_phdr = headers.program.as_ptr();
        info.dlpi_phnum = headers.program.len() as u16;
        // SAFETY: `info` describes an object whose segments are mapped
        // (checked below), and lives for the call; the caller's contract.
        unsafe { each(&mut info, std::mem::size_of::<libc::dl_phdr_info>(), data) };
    };
    let in_place = |address: u64, out: &mut [u8]| {
        // SAFETY: only called below for the program's and the vDSO's headers,
        // which the kernel mapped and nothing unmaps.
        unsafe { std::ptr::copy_nonoverlapping(address as *const u8, out.as_mut_ptr(), out.len()) };
        true
    };
    let program_headers = auxiliary(libc::AT_PHDR);
    let program_count = auxiliary(libc::AT_PHNUM) as usize;
    if let Some(program) =
        (program_headers != 0).then(|| read_headers(in_place, program_headers, program_count)).flatten()
    {
        let bias = program
            .iter()
            .find(|ph| ph.p_type == libc::PT_PHDR)
            .map_or(0, |ph| program_headers.wrapping_sub(ph.p_vaddr));
        call(&Headers { program, bias }, b"");
    }
    let vdso = auxiliary(libc::AT_SYSINFO_EHDR);
    if let Some(headers) = (vdso != 0).then(|| object_at(in_place, vdso, u64::MAX)).flatten() {
        call(&headers, b"linux-vdso.so.1");
    }
    let Ok(memory) = sys::open_own_memory() else { return };
    let through_memory =
        |address: u64, out: &mut [u8]| sys::read_at(memory, out, address).is_ok_and(|n| n == out.len());
    let code_files: Vec<&[u8]> = mappings.iter().filter(|m| m.executable).map(|m| m.path.as_slice()).collect();
    for mapping in &mappings {
        let is_program = mapping.start <= program_headers && program_headers < mapping.end;
        let candidate = mapping.offset == 0
            && mapping.readable
            && mapping.path.starts_with(b"/")
            && code_files.contains(&mapping.path.as_slice());
        if !candidate || is_program {
            continue;
        }
        let Some(headers) = object_at(through_memory, mapping.start, mapping.end - mapping.start) else { continue };
        let mut loads = headers.program.iter().filter(|ph| ph.p_type == libc::PT_LOAD);
        if loads.clone().count() > 0 && loads.all(|ph| segment_mapped(&mappings, headers.bias, ph, &mapping.path)) {
            call(&headers, &mapping.path);
        }
    }
    sys::close(memory);
}

/// Whether a loadable segment lies in readable mappings without a gap, its
/// first page in one of the file `path`'s where it has file contents, and
/// executable where the segment is code.
fn segment_mapped(mappings: &[Mapping], bias: u64, ph: &libc::Elf64_Phdr, path: &[u8]) -> bool {
    let page = sys::page_size() as u64;
    let start = bias.wrapping_add(ph.p_vaddr) & !(page - 1);
    let end = bias.wrapping_add(ph.p_vaddr).wrapping_add(ph.p_memsz);
    let Some(first) = mappings.iter().position(|m| m.start <= start && start < m.end) else { return false };
    let code = ph.p_flags & libc::PF_X != 0;
    if (ph.p_filesz > 0 && mappings[first].path != path) || (code && !mappings[first].executable) {
        return false;
    }
    let mut reached = start;
    for mapping in &mappings[first..] {
        if reached >= end {
            break;
        }
        if mapping.start > reached || !mapping.readable {
            return false;
        }
        reached = mapping.end;
    }
    reached >= end
}

/// An object's program headers, copied out, and its load bias.
struct Headers {
    program: Vec<libc::Elf64_Phdr>,
    bias: u64,
}

/// The headers of the ELF object whose header is at `start`, where `len`
/// bytes are mapped (`u64::MAX`: as far as the header says), if it is one
/// with its program headers inside those bytes; `read` copies memory out,
/// false where it cannot.
fn object_at(read: impl Fn(u64, &mut [u8]) -> bool, start: u64, len: u64) -> Option<Headers> {
    let mut bytes = [0u8; std::mem::size_of::<libc::Elf64_Ehdr>()];
    if len < bytes.len() as u64 || !read(start, &mut bytes) {
        return None;
    }
    // SAFETY: the bytes are a whole Elf64_Ehdr's, plain data for any bytes.
    let header: libc::Elf64_Ehdr = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let is_object = header.e_ident[..4] == *b"\x7fELF"
        && header.e_ident[libc::EI_CLASS] == libc::ELFCLASS64
        && matches!(header.e_type, libc::ET_DYN | libc::ET_EXEC)
        && usize::from(header.e_phentsize) == std::mem::size_of::<libc::Elf64_Phdr>();
    let count = usize::from(header.e_phnum);
    let headers_end = header.e_phoff.checked_add(count as u64 * u64::from(header.e_phentsize))?;
    if !is_object || count == 0 || headers_end > len {
        return None;
    }
    let program = read_headers(read, start.checked_add(header.e_phoff)?, count)?;
    // The first loadable segment holds the header, at the page its address rounds down to.
    let first = program.iter().find(|ph| ph.p_type == libc::PT_LOAD && ph.p_offset == 0)?;
    let bias = start.wrapping_sub(first.p_vaddr & !(sys::page_size() as u64 - 1));
    Some(Headers { program, bias })
}

/// `count` program headers copied out from `address` through `read`.
fn read_headers(read: impl Fn(u64, &mut [u8]) -> bool, address: u64, count: usize) -> Option<Vec<libc::Elf64_Phdr>> {
    const SIZE: usize = std::mem::size_of::<libc::Elf64_Phdr>();
    let mut bytes = vec![0u8; count * SIZE];
    if count == 0 || !read(address, &mut bytes) {
        return None;
    }
    // SAFETY: each chunk is a whole Elf64_Phdr's bytes, plain data for any bytes.
    Some(bytes.chunks_exact(SIZE).map(|chunk| unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast()) }).collect())
}

fn auxiliary(kind: libc::c_ulong) -> u64 {
    // SAFETY: getauxval reads the process's auxiliary vector; 0 where absent.
    unsafe { libc::getauxval(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a listing gave: each object's name, load bias and program header count.
    unsafe extern "C" fn note(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: both listings pass a valid entry, and `data` is the vector below.
        let (info, seen) = unsafe { (&*info, &mut *data.cast::<Vec<(String, u64, u16)>>()) };
        // SAFETY: a NUL-terminated name, valid for the call.
        let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
        // The loader names by the path it opened, the kernel by the file's real path.
        let name = std::fs::canonicalize(&*name).map_or(name.into_owned(), |p| p.to_string_lossy().into_owned());
        seen.push((name, info.dlpi_addr, info.dlpi_phnum));
        0
    }

    fn listed(by_mappings: bool) -> Vec<(String, u64, u16)> {
        let mut seen: Vec<(String, u64, u16)> = Vec::new();
        let data = (&mut seen as *mut Vec<(String, u64, u16)>).cast();
        if by_mappings {
            // SAFETY: `note` only reads the entry and pushes onto `seen`.
            unsafe { objects_in_mappings(note, data) };
        } else {
            // SAFETY: as above.
            unsafe { libc::dl_iterate_phdr(Some(note), data) };
        }
        seen
    }

    #[test]
    fn the_loaders_list_lock_is_found_and_is_free_outside_a_listing() {
        find_the_list_lock();
        let address = LIST_LOCK.load(Ordering::Relaxed);
        assert_ne!(address, 0, "glibc 2.36's _rtld_global holds one recursive lock dl_iterate_phdr takes");
        assert!(!list_lock_held());
        unsafe extern "C" fn held(_: *mut libc::dl_phdr_info, _: usize, seen: *mut c_void) -> c_int {
            // SAFETY: `seen` is the bool below, for this call only.
            unsafe { *seen.cast::<bool>() = list_lock_held() };
            1
        }
        let mut seen = false;
        // SAFETY: the callback writes only `seen`.
        unsafe { libc::dl_iterate_phdr(Some(held), (&mut seen as *mut bool).cast()) };
        assert!(seen, "held while dl_iterate_phdr calls back");
    }

    #[test]
    fn the_mappings_show_the_objects_the_loader_lists() {
        // Listings allocate, from the freed memory another test counts.
        let _alone = crate::lock(&crate::HEAP_FIGURES);
        let by_loader = listed(false);
        let by_mappings = listed(true);
        assert_eq!(by_mappings[0], by_loader[0], "the program, unnamed, first");
        let mut loader_sorted = by_loader.clone();
        let mut mappings_sorted = by_mappings.clone();
        loader_sorted.sort();
        mappings_sorted.sort();
        assert_eq!(mappings_sorted, loader_sorted);
        assert!(by_loader.iter().any(|(name, _, _)| name.contains("libc.so")), "{by_loader:?}");
    }

    /// Set to stop [`map_and_unmap`].
    static STOP_MAPPING: AtomicBool = AtomicBool::new(false);

    /// Maps the first page of the file open at `fd` and unmaps it at once,
    /// until [`STOP_MAPPING`]: a thread of glibc's, without Rust's start-up,
    /// which allocates nothing (and takes no arena another test counts).
    extern "C" fn map_and_unmap(fd: *mut c_void) -> *mut c_void {
        while !STOP_MAPPING.load(Ordering::Relaxed) {
            // SAFETY: a private read-only mapping of an open file, unmapped at once.
            unsafe {
                let data = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE, fd as c_int, 0);
                libc::munmap(data, 4096);
            }
        }
        std::ptr::null_mut()
    }

    #[test]
    fn a_listing_reads_no_header_another_thread_unmaps_meanwhile() {
        use std::os::fd::AsRawFd;
        let _alone = crate::lock(&crate::HEAP_FIGURES);
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let mut thread: libc::pthread_t = 0;
        let fd = file.as_raw_fd() as usize as *mut c_void;
        // SAFETY: a thread running `map_and_unmap`, joined below.
        assert_eq!(unsafe { libc::pthread_create(&mut thread, std::ptr::null(), map_and_unmap, fd) }, 0);
        for _ in 0..300 {
            assert!(listed(true).len() > 3);
        }
        STOP_MAPPING.store(true, Ordering::Relaxed);
        // SAFETY: the thread created above, joined once.
        assert_eq!(unsafe { libc::pthread_join(thread, std::ptr::null_mut()) }, 0);
    }

    #[test]
    fn a_file_mapped_as_data_is_no_object() {
        // Listings allocate, from the freed memory another test counts.
        let _alone = crate::lock(&crate::HEAP_FIGURES);
        let library = std::fs::canonicalize("/proc/self/exe").unwrap();
        let file = std::fs::File::open(&library).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        use std::os::fd::AsRawFd;
        // SAFETY: a private read-only mapping of a file this test opened, unmapped below.
        let data =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        assert_ne!(data, libc::MAP_FAILED);
        let listed = listed(true);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(data, len) };
        let program = library.to_string_lossy();
        assert!(listed.iter().all(|(name, _, _)| *name != program), "{listed:?}");
        assert!(listed.iter().all(|&(_, bias, _)| bias != data as u64), "{listed:?}");
    }
}
