//! Thin, allocation-aware wrappers over the system calls the tracer makes.
//! Everything here is safe to call from inside an allocation hook.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
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

pub fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// Resident set size from /proc/self/statm, 0 when it cannot be read.
pub fn rss_bytes() -> u64 {
    let mut buf = [0u8; 128];
    let len = read_small_file(c"/proc/self/statm", &mut buf);
    let text = std::str::from_utf8(&buf[..len]).unwrap_or("");
    let resident_pages: u64 = text.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    resident_pages * page_size
}

/// Reads up to `buf.len()` bytes of a file into a stack buffer without allocating.
pub fn read_small_file(path: &std::ffi::CStr, buf: &mut [u8]) -> usize {
    // SAFETY: `path` is NUL-terminated; the descriptor is closed before return.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return 0;
    }
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled part of `buf`.
        let n = unsafe { libc::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled) };
        if n > 0 {
            filled += n as usize;
        } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    // SAFETY: `fd` was opened above and is not used after this.
    unsafe { libc::close(fd) };
    filled
}

/// Writes a whole message to stderr, ignoring failure (there is nowhere else to report it).
pub fn print_stderr(message: &str) {
    let _ = write_all(2, message.as_bytes());
}

pub fn write_all(fd: i32, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe the live slice `bytes`.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
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

/// Creates (or truncates, unless `exclusive`) a file for writing, close-on-exec
/// so that an exec'd program does not inherit it.
pub fn create_file(path: &Path, exclusive: bool) -> io::Result<i32> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let mut flags = libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC;
    flags |= if exclusive { libc::O_EXCL } else { libc::O_TRUNC };
    // SAFETY: `c_path` is NUL-terminated and outlives the call.
    let fd = unsafe { libc::open(c_path.as_ptr(), flags, 0o644 as libc::c_uint) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

pub fn close(fd: i32) {
    // SAFETY: closing a descriptor the caller owns; errors leave nothing to undo.
    unsafe { libc::close(fd) };
}

/// Ends the process at once, as `_exit` does, without running exit handlers.
pub fn exit_group(status: i32) -> ! {
    loop {
        // SAFETY: exit_group ends the process and has no memory-safety
        // preconditions; the loop only satisfies the type checker.
        unsafe { libc::syscall(libc::SYS_exit_group, status as libc::c_long) };
    }
}
