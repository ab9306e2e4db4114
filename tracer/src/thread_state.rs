//! Per-thread flags that keep the tracer from re-entering itself.
//!
//! Anything the tracer calls (glibc's unwinder, `pthread_getattr_np`, file
//! I/O) may call malloc again on the same thread; those nested calls must go
//! straight to glibc. The flags live in const-initialized thread-locals without
//! destructors, which glibc keeps in the static TLS block of a preloaded
//! library: reading them never allocates.

use std::cell::Cell;

use crate::python::GlanceMemo;

struct ThreadFlags {
    inside_tracer: Cell<bool>,
    /// This thread is running `fork` (between the prepare and parent handlers).
    forking: Cell<bool>,
    /// Allocations made on this thread, to pace the epoch clock checks.
    allocations: Cell<u32>,
    /// The DataLoader pass this thread's latest complete walk was in (see
    /// `auto_epochs`); 0 for none.
    loader_pass: Cell<u64>,
    /// Bytes to allocate before the next sampled one (sampling mode); 0 until drawn.
    bytes_until_sample: Cell<u64>,
    /// xorshift64* state for the sampling gaps; 0 until seeded.
    random: Cell<u64>,
    /// What this thread's latest conclusive glance for a DataLoader frame saw.
    last_glance: Cell<GlanceMemo>,
    /// This thread's place among the threads that entered the tracer, in
    /// order; `NO_ORDINAL` until it first asks.
    ordinal: Cell<u32>,
}

const NO_ORDINAL: u32 = u32::MAX;

thread_local! {
    static FLAGS: ThreadFlags = const {
        ThreadFlags {
            inside_tracer: Cell::new(false),
            forking: Cell::new(false),
            allocations: Cell::new(0),
            loader_pass: Cell::new(0),
            bytes_until_sample: Cell::new(0),
            random: Cell::new(0),
            last_glance: Cell::new(GlanceMemo::NONE),
            ordinal: Cell::new(NO_ORDINAL),
        }
    };
}

/// Runs `work` with this thread marked inside the tracer, handing it the
/// thread's ordinal (see [`ordinal_of`]); `None`, without running it, if the
/// thread already is inside (a nested call from the tracer's own work) or
/// is in the middle of `fork`. One thread-local access for the check, the
/// ordinal and the clearing: this runs at every allocation and free.
#[inline]
pub fn inside<R>(work: impl FnOnce(usize) -> R) -> Option<R> {
    FLAGS
        .try_with(|flags| {
            if flags.inside_tracer.get() || flags.forking.get() {
                return None;
            }
            flags.inside_tracer.set(true);
            // Cleared however `work` ends.
            let _leave = Leave(&flags.inside_tracer);
            Some(work(ordinal_of(flags)))
        })
        .ok()
        .flatten()
}

/// Runs `call` with the hooks quiet on this thread, whether or not they
/// already were: the allocations and mappings it makes are not recorded.
/// For the calls made on the program's behalf whose result is recorded
/// otherwise (Python's object allocator mapping an arena for the objects
/// its hooks record).
pub fn quietly<R>(call: impl FnOnce() -> R) -> R {
    match FLAGS.try_with(|flags| flags.inside_tracer.replace(true)) {
        Ok(was_inside) => {
            let result = call();
            let _ = FLAGS.try_with(|flags| flags.inside_tracer.set(was_inside));
            result
        }
        // The thread's locals are gone: the hooks record nothing anyway.
        Err(_) => call(),
    }
}

struct Leave<'a>(&'a Cell<bool>);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

pub fn set_forking(forking: bool) {
    let _ = FLAGS.try_with(|flags| flags.forking.set(forking));
}

/// Replaces this thread's DataLoader pass with `next(current)`; returns what `next` returned besides.
pub fn update_loader_pass<T>(next: impl FnOnce(u64) -> (u64, T)) -> Option<T> {
    FLAGS
        .try_with(|flags| {
            let (pass, result) = next(flags.loader_pass.get());
            flags.loader_pass.set(pass);
            result
        })
        .ok()
}

/// Runs `glance` with this thread's memo of its latest glance; `None` while
/// its thread-locals are gone.
#[inline]
pub fn with_last_glance<R>(glance: impl FnOnce(&Cell<GlanceMemo>) -> R) -> Option<R> {
    FLAGS.try_with(|flags| glance(&flags.last_glance)).ok()
}

/// Counts an allocation of `size` bytes on this thread, in one thread-local
/// access (this runs at every allocation). Returns how many it has made
/// (wrapping; 1 while its thread-locals are gone, never a multiple of a
/// period) and whether the allocation is one to record: always without
/// `next_gap`; when sampling, whether it holds a sampled byte, the bytes to
/// the next one being drawn with `next_gap`. A call made inside the tracer
/// (or [`quietly`]) is never recorded and leaves the sampling gap alone:
/// its bytes are not the program's, or are counted by the hook around it.
#[inline]
pub fn count_allocation(size: u64, next_gap: Option<impl Fn() -> u64>) -> (u32, bool) {
    FLAGS
        .try_with(|flags| {
            let n = flags.allocations.get().wrapping_add(1);
            flags.allocations.set(n);
            if flags.inside_tracer.get() {
                return (n, false);
            }
            let Some(next_gap) = next_gap else { return (n, true) };
            let mut left = flags.bytes_until_sample.get();
            if left == 0 {
                left = next_gap();
            }
            if size < left {
                flags.bytes_until_sample.set(left - size);
                (n, false)
            } else {
                flags.bytes_until_sample.set(next_gap());
                (n, true)
            }
        })
        .unwrap_or((1, false))
}

/// How many allocations the hooks have counted on this thread (wrapping;
/// see [`count_allocation`]): a call that leaves it unchanged reached no
/// allocation hook.
pub fn allocations_counted() -> u32 {
    FLAGS.try_with(|flags| flags.allocations.get()).unwrap_or(0)
}

/// A uniform number in (0, 1] from this thread's generator.
pub fn next_random_unit() -> f64 {
    FLAGS
        .try_with(|flags| {
            let mut x = flags.random.get();
            if x == 0 {
                // Seeded per thread from where its flags live and the clock.
                x = (flags as *const ThreadFlags as u64) ^ crate::sys::monotonic_ns() ^ 0x9e37_79b9_7f4a_7c15;
                x |= 1;
            }
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            flags.random.set(x);
            ((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 1.0) / (1u64 << 53) as f64
        })
        .unwrap_or(1.0)
}

/// This thread's ordinal: its place in the order in which threads first
/// entered the tracer, which spreads them over per-thread slots (site
/// counter stripes, live totals, the fork gate's counters): the first
/// thread, usually the main one, is 0.
fn ordinal_of(flags: &ThreadFlags) -> usize {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mut ordinal = flags.ordinal.get();
    if ordinal == NO_ORDINAL {
        // Wrapping past the sentinel, never onto it.
        ordinal = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % NO_ORDINAL;
        flags.ordinal.set(ordinal);
    }
    ordinal as usize
}
