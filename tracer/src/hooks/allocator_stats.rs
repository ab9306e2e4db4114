//! What an allocator preloaded after the tracer keeps of the memory the
//! program freed, from its own statistics: glibc's `mallinfo2` counts
//! glibc's arenas only, and a job that preloads jemalloc or tcmalloc
//! against fragmentation had what they kept shown as growth outside the
//! heap, not as the allocator's.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::next_allocator::object_of;

/// An allocator whose statistics the tracer reads.
pub struct KnownAllocator {
    /// Its name, for the trace's settings and the report's advice.
    pub name: &'static str,
    /// The freed memory it keeps resident, in bytes.
    pub free_bytes: fn() -> u64,
}

/// jemalloc's `mallctl`, or tcmalloc's `MallocExtension_GetNumericProperty`.
static STATISTICS: AtomicUsize = AtomicUsize::new(0);

type Mallctl = unsafe extern "C" fn(*const c_char, *mut c_void, *mut usize, *mut c_void, usize) -> c_int;
type GetNumericProperty = unsafe extern "C" fn(*const c_char, *mut usize) -> c_int;

/// The allocator loaded as `object`, if it is one whose statistics the
/// tracer knows how to read.
pub fn known(object: usize) -> Option<KnownAllocator> {
    let (address, allocator) = [
        (c"mallctl", KnownAllocator { name: trace_format::JEMALLOC, free_bytes: jemalloc_free_bytes }),
        (
            c"MallocExtension_GetNumericProperty",
            KnownAllocator { name: trace_format::TCMALLOC, free_bytes: tcmalloc_free_bytes },
        ),
    ]
    .into_iter()
    .find_map(|(name, allocator)| {
        let address = super::next_symbol(name) as usize;
        (address != 0 && object_of(address) == object).then_some((address, allocator))
    })?;
    STATISTICS.store(address, Ordering::Release);
    Some(allocator)
}

/// The statistics function, as `F`, the signature of the one `known` found.
fn statistics<F: Copy>() -> Option<F> {
    // SAFETY: each reader asks for the signature of the function `known`
    // stored for the allocator that chose that reader.
    unsafe { super::as_function(STATISTICS.load(Ordering::Acquire)) }
}

/// jemalloc's resident pages beyond its live blocks: the dirty pages of
/// freed blocks it has not purged yet, fragmentation and its metadata.
fn jemalloc_free_bytes() -> u64 {
    let Some(mallctl) = statistics::<Mallctl>() else { return 0 };
    let read = |name: &CStr| {
        let (mut value, mut len) = (0usize, std::mem::size_of::<usize>());
        // SAFETY: reads a size_t statistic into `value`, its length in `len`.
        let status = unsafe { mallctl(name.as_ptr(), (&raw mut value).cast(), &mut len, std::ptr::null_mut(), 0) };
        (status == 0).then_some(value as u64)
    };
    let mut epoch = 1u64;
    let mut len = std::mem::size_of::<u64>();
    // SAFETY: writing "epoch" refreshes the statistics read below; it reads
    // and writes one u64.
    unsafe { mallctl(c"epoch".as_ptr(), (&raw mut epoch).cast(), &mut len, (&raw mut epoch).cast(), len) };
    match (read(c"stats.resident"), read(c"stats.allocated")) {
        (Some(resident), Some(allocated)) => resident.saturating_sub(allocated),
        _ => 0,
    }
}

/// tcmalloc's free bytes in its page heap and caches, not given back to the system.
fn tcmalloc_free_bytes() -> u64 {
    let Some(get) = statistics::<GetNumericProperty>() else { return 0 };
    [
        c"tcmalloc.pageheap_free_bytes",
        c"tcmalloc.central_cache_free_bytes",
        c"tcmalloc.transfer_cache_free_bytes",
        c"tcmalloc.thread_cache_free_bytes",
    ]
    .into_iter()
    .map(|name| {
        let mut value = 0usize;
        // SAFETY: reads a numeric property into `value`.
        let found = unsafe { get(name.as_ptr(), &mut value) } != 0;
        if found {
            value as u64
        } else {
            0
        }
    })
    .sum()
}
