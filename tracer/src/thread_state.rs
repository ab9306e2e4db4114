//! Per-thread flags that keep the tracer from re-entering itself.
//!
//! Anything the tracer calls (glibc's unwinder, `pthread_getattr_np`, file
//! I/O) may call malloc again on the same thread; those nested calls must go
//! straight to glibc. The flags are read at every allocation and free, so
//! where it can they live in the initial-exec static TLS block: one load
//! from the thread pointer, where a Rust `thread_local!` in a shared library
//! goes through a call to `__tls_get_addr` at each access (see [`flags`]).
//! Either way reading them never allocates.

use std::cell::Cell;

use crate::python::GlanceMemo;

/// All zeroes is each field's starting value: the static TLS block is
/// zeroed by the loader for every thread.
struct ThreadFlags {
    inside_tracer: Cell<bool>,
    /// This thread is inside the program's allocator, called by a hook.
    inside_allocator: Cell<bool>,
    /// This thread is running `fork` (between the prepare and parent handlers).
    forking: Cell<bool>,
    /// Allocations made on this thread, to pace the epoch clock checks.
    allocations: Cell<u32>,
    /// The count at which the thread's next allocation looks at the clock
    /// (see [`clock_check_due`]); 0 at first, so the first one does.
    clock_check_at: Cell<u32>,
    /// The thread's count and the monotonic time at its latest look.
    clock_checked_count: Cell<u32>,
    clock_checked_ns: Cell<u64>,
    /// The DataLoader pass this thread's latest complete walk was in (see
    /// `auto_epochs`); 0 for none.
    loader_pass: Cell<u64>,
    /// Bytes to allocate before the next sampled one (sampling mode); 0 until drawn.
    bytes_until_sample: Cell<u64>,
    /// xorshift64* state for the sampling gaps; 0 until seeded.
    random: Cell<u64>,
    /// What this thread's latest conclusive glance for a DataLoader frame
    /// saw; empty (zeroes) for none.
    last_glance: GlanceMemo,
    /// One more than this thread's place among the threads that entered
    /// the tracer, in order; 0 until it first asks.
    ordinal_plus_one: Cell<u32>,
}

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    // Hidden: shared by this library's objects, not exported.
    ".globl tracer_thread_flags",
    ".hidden tracer_thread_flags",
    ".type tracer_thread_flags, @object",
    ".pushsection .tbss,\"awT\",@nobits",
    ".balign {align}",
    "tracer_thread_flags:",
    ".zero {size}",
    ".size tracer_thread_flags, {size}",
    ".popsection",
    size = const std::mem::size_of::<ThreadFlags>(),
    align = const std::mem::align_of::<ThreadFlags>(),
);

/// This thread's flags, in the static TLS block the loader sets up for the
/// libraries loaded at start (and for a few small ones loaded later): the
/// thread pointer plus the offset the loader wrote into the GOT.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn flags() -> &'static ThreadFlags {
    let address: *const ThreadFlags;
    // SAFETY: the initial-exec TLS sequence: `fs:0` holds the thread
    // pointer, and the GOT slot the TPOFF relocation fills holds the
    // (negative) offset of this thread's `tracer_thread_flags` from it. It
    // reads memory that never changes for the thread and writes none.
    unsafe {
        core::arch::asm!(
            "mov {address}, qword ptr fs:[0]",
            "add {address}, qword ptr [rip + tracer_thread_flags@GOTTPOFF]",
            address = out(reg) address,
            options(pure, readonly, nostack),
        );
    }
    // SAFETY: the block is this thread's own, lives as long as the thread
    // (static TLS is freed with the thread's stack, after its last code
    // runs), holds zeroes at the thread's start, which are valid flags (see
    // `ThreadFlags`), is sized and aligned for them (the `global_asm!`
    // above), and only this module touches it, through `Cell`s: the
    // reference, neither `Send` nor `Sync`, never leaves the thread.
    unsafe { &*address }
}

/// Elsewhere, a const-initialized `thread_local!` without a destructor.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn flags() -> &'static ThreadFlags {
    thread_local! {
        static FLAGS: ThreadFlags = const {
            ThreadFlags {
                inside_tracer: Cell::new(false),
                inside_allocator: Cell::new(false),
                forking: Cell::new(false),
                allocations: Cell::new(0),
                clock_check_at: Cell::new(0),
                clock_checked_count: Cell::new(0),
                clock_checked_ns: Cell::new(0),
                loader_pass: Cell::new(0),
                bytes_until_sample: Cell::new(0),
                random: Cell::new(0),
                last_glance: GlanceMemo::empty(),
                ordinal_plus_one: Cell::new(0),
            }
        };
    }
    // SAFETY: a thread-local without a destructor is never torn down while
    // its thread runs; the reference, neither `Send` nor `Sync`, never
    // leaves the thread.
    FLAGS.with(|flags| unsafe { &*(flags as *const ThreadFlags) })
}

/// Runs `work` with this thread marked inside the tracer, handing it the
/// thread's ordinal (see [`ordinal_of`]); `None`, without running it, if the
/// thread already is inside (a nested call from the tracer's own work) or
/// is in the middle of `fork`.
#[inline]
pub fn inside<R>(work: impl FnOnce(usize) -> R) -> Option<R> {
    let flags = flags();
    if flags.inside_tracer.get() || flags.forking.get() {
        return None;
    }
    flags.inside_tracer.set(true);
    // Cleared however `work` ends.
    let _leave = Leave(&flags.inside_tracer);
    Some(work(ordinal_of(flags)))
}

/// Runs `call` with the hooks quiet on this thread, whether or not they
/// already were: the allocations and mappings it makes are not recorded.
/// For the calls made on the program's behalf whose result is recorded
/// otherwise (Python's object allocator mapping an arena for the objects
/// its hooks record).
pub fn quietly<R>(call: impl FnOnce() -> R) -> R {
    with_flag_set(&flags().inside_tracer, call)
}

/// Runs `call` with `flag` set, then puts it back as it was.
#[inline(always)]
fn with_flag_set<R>(flag: &Cell<bool>, call: impl FnOnce() -> R) -> R {
    let was_set = flag.replace(true);
    let result = call();
    flag.set(was_set);
    result
}

struct Leave<'a>(&'a Cell<bool>);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Runs `call`, a hook's call into the program's allocator, with the
/// thread marked inside it (see [`interrupted_inside`]).
#[inline(always)]
pub fn in_allocator<R>(call: impl FnOnce() -> R) -> R {
    with_flag_set(&flags().inside_allocator, call)
}

/// Whether this thread is inside the tracer or inside the allocator a
/// hook called: a signal handler that runs on it then interrupted that
/// work, which may hold the tracer's tables or malloc's heap half updated.
pub fn interrupted_inside() -> bool {
    let flags = flags();
    flags.inside_tracer.get() || flags.inside_allocator.get()
}

pub fn set_forking(forking: bool) {
    flags().forking.set(forking);
}

/// Replaces this thread's DataLoader pass with `next(current)`; returns what `next` returned besides.
pub fn update_loader_pass<T>(next: impl FnOnce(u64) -> (u64, T)) -> T {
    let flags = flags();
    let (pass, result) = next(flags.loader_pass.get());
    flags.loader_pass.set(pass);
    result
}

/// Runs `glance` with this thread's memo of its latest glance.
#[inline]
pub fn with_last_glance<R>(glance: impl FnOnce(&GlanceMemo) -> R) -> R {
    glance(&flags().last_glance)
}

/// What [`count_allocation`] found of an allocation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Counted {
    /// Not to be recorded: made inside the tracer (or [`quietly`]), or,
    /// when sampling, short of the next sampled byte.
    Unrecorded,
    /// To be recorded: without sampling, every allocation is.
    Recorded,
    /// When sampling, it reaches the next sampled byte, or the thread has
    /// no gap drawn yet: [`Counted::recorded`] says.
    AtSampleGap,
}

impl Counted {
    /// Whether the allocation of `size` bytes counted so is recorded: at
    /// the sample gap, whether it holds a sampled byte, the bytes to the
    /// next one being drawn with `next_gap` (the thread's first gap too).
    pub fn recorded(self, size: u64, next_gap: impl Fn() -> u64) -> bool {
        match self {
            Counted::Unrecorded => false,
            Counted::Recorded => true,
            Counted::AtSampleGap => reach_sample_gap(size, next_gap),
        }
    }
}

/// Counts an allocation of `size` bytes on this thread, with loads and
/// stores only (this runs at every allocation). Returns how many it has
/// made (wrapping), whether it is one to record, and whether it is due to
/// look at the clock (see [`clock_checked`]). A call made inside the
/// tracer (or [`quietly`]) is never recorded and leaves the sampling gap
/// alone: its bytes are not the program's, or are counted by the hook
/// around it.
#[inline]
pub fn count_allocation(size: u64, sampling: bool) -> (u32, Counted, bool) {
    let flags = flags();
    let n = flags.allocations.get().wrapping_add(1);
    flags.allocations.set(n);
    let clock_due = clock_check_due(flags, n);
    let counted = if flags.inside_tracer.get() {
        Counted::Unrecorded
    } else if !sampling {
        Counted::Recorded
    } else if short_of_sample_gap(flags, size) {
        Counted::Unrecorded
    } else {
        Counted::AtSampleGap
    };
    (n, counted, clock_due)
}

/// Whether this thread's allocation number `count` is due to look at the
/// clock: one load and a compare. Past the due count it stays due (the
/// look may be skipped, the thread being inside the tracer) until
/// [`clock_checked`] sets the next.
#[inline(always)]
fn clock_check_due(flags: &ThreadFlags, count: u32) -> bool {
    count.wrapping_sub(flags.clock_check_at.get()) as i32 >= 0
}

/// Sets when this thread next looks at the clock, having looked at
/// allocation `count` and seen `now_ns` (`None`: there is no clock to
/// watch, and it looks again `most` allocations on). The allocations
/// between two looks are as many as the thread made in `interval_ns` at its
/// rate since the previous look, from 1 (a thread allocating rarely looks
/// at each allocation) to `most` (a busy one looks rarely), and at most
/// twice as many as since the previous look: a burst of allocations (a
/// program's start) does not leave the thread looking only hundreds of
/// allocations on when it then allocates rarely.
pub fn clock_checked(count: u32, now_ns: Option<u64>, interval_ns: u64, most: u32) {
    let flags = flags();
    let stride = match now_ns {
        None => most,
        Some(now) => {
            let since = count.wrapping_sub(flags.clock_checked_count.get()).max(1);
            let elapsed = now.saturating_sub(flags.clock_checked_ns.get()).max(1);
            flags.clock_checked_count.set(count);
            flags.clock_checked_ns.set(now);
            let at_rate = u64::from(since).saturating_mul(interval_ns) / elapsed;
            at_rate.min(2 * u64::from(since)).clamp(1, u64::from(most)) as u32
        }
    };
    flags.clock_check_at.set(count.wrapping_add(stride));
}

/// Whether `size` bytes the program maps (outside the allocation hooks)
/// hold this thread's next sampled byte: they are drawn from the same gaps
/// as allocations, without counting as one. Never for a call made inside
/// the tracer (or [`quietly`]).
pub fn mapping_sampled(size: u64, next_gap: impl Fn() -> u64) -> bool {
    let flags = flags();
    !flags.inside_tracer.get() && !short_of_sample_gap(flags, size) && reach_sample_gap(size, next_gap)
}

/// Takes `size` bytes off the gap to the thread's next sampled byte, unless
/// they reach it (or no gap is drawn yet: 0 is never above a size).
#[inline(always)]
fn short_of_sample_gap(flags: &ThreadFlags, size: u64) -> bool {
    let left = flags.bytes_until_sample.get();
    let short = size < left;
    if short {
        flags.bytes_until_sample.set(left - size);
    }
    short
}

/// [`Counted::recorded`] at the sample gap.
fn reach_sample_gap(size: u64, next_gap: impl Fn() -> u64) -> bool {
    let flags = flags();
    let left = flags.bytes_until_sample.get();
    if left == 0 {
        let first = next_gap();
        if size < first {
            flags.bytes_until_sample.set(first - size);
            return false;
        }
    }
    flags.bytes_until_sample.set(next_gap());
    true
}

/// How many allocations the hooks have counted on this thread (wrapping;
/// see [`count_allocation`]): a call that leaves it unchanged reached no
/// allocation hook.
pub fn allocations_counted() -> u32 {
    flags().allocations.get()
}

/// A uniform number in (0, 1] from this thread's generator.
pub fn next_random_unit() -> f64 {
    let flags = flags();
    let mut x = flags.random.get();
    if x == 0 {
        // Seeded per thread from where its flags live, the process and the
        // clock: forked siblings (a loader's workers) have their flags at
        // the same address and may start within the clock's tick.
        let process = u64::from(crate::sys::pid()).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (flags as *const ThreadFlags as u64) ^ crate::sys::monotonic_ns() ^ process ^ 0x9e37_79b9_7f4a_7c15;
        x |= 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    flags.random.set(x);
    ((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

/// In a forked child, on the thread that forked: the sampling generator
/// and the gap to the next sample start over. The child inherited both, so
/// without this every worker a loader forks from one state would draw the
/// same samples as its siblings; a gap drawn afresh is as good as the one
/// left, the gaps being exponential (memoryless).
pub fn sample_afresh_after_fork() {
    let flags = flags();
    flags.random.set(0);
    flags.bytes_until_sample.set(0);
}

/// This thread's ordinal: its place in the order in which threads first
/// entered the tracer, which spreads them over per-thread slots (site
/// counter stripes, live totals, the fork gate's counters): the first
/// thread, usually the main one, is 0.
fn ordinal_of(flags: &ThreadFlags) -> usize {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mut ordinal_plus_one = flags.ordinal_plus_one.get();
    if ordinal_plus_one == 0 {
        // Wrapping past 0, never onto it.
        ordinal_plus_one = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % u32::MAX + 1;
        flags.ordinal_plus_one.set(ordinal_plus_one);
    }
    (ordinal_plus_one - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_first_gap_is_drawn_then_counted_down_and_the_tracers_own_calls_leave_it() {
        // A thread of its own: its flags start at zero.
        std::thread::spawn(|| {
            let first = count_allocation(10, true).1;
            assert_eq!(first, Counted::AtSampleGap, "no gap drawn yet");
            assert!(!first.recorded(10, || 100), "10 bytes of a first gap of 100");
            assert_eq!(count_allocation(89, true).1, Counted::Unrecorded);
            let last = count_allocation(1, true).1;
            assert_eq!(last, Counted::AtSampleGap);
            assert!(last.recorded(1, || 50), "the gap's last byte is sampled");
            quietly(|| assert_eq!(count_allocation(1000, true).1, Counted::Unrecorded));
            assert_eq!(count_allocation(49, true).1, Counted::Unrecorded, "the quiet call left 50 bytes");
            assert_eq!(count_allocation(49, false).1, Counted::Recorded, "without sampling every call is");
            assert_eq!(allocations_counted(), 6);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_looks_at_the_clock_as_often_as_its_allocation_rate_needs() {
        std::thread::spawn(|| {
            const MS: u64 = 1_000_000;
            let checks = |allocations: u32, ns_apart: u64, start_ns: u64| {
                let mut looked = 0;
                for i in 0..allocations {
                    let (count, _, due) = count_allocation(8, false);
                    if due {
                        looked += 1;
                        clock_checked(count, Some(start_ns + u64::from(i) * ns_apart), MS, 256);
                    }
                }
                looked
            };
            assert_eq!(checks(30, 100 * MS, 1_000 * MS), 30, "allocations 100 ms apart each look");
            let busy = checks(100_000, 10, 10_000 * MS);
            assert!((390..=420).contains(&busy), "one in 256 at 100 million a second, after the ramp: {busy}");
            // Only the look one stride after the burst sees the rate fall.
            let after_burst = checks(300, 100 * MS, 20_000 * MS);
            assert!(after_burst >= 300 - 256, "each allocation looks from the first look on: {after_burst}");
            // No clock to watch: one look in `most`.
            let (count, _, _) = count_allocation(8, false);
            clock_checked(count, None, MS, 256);
            let due = || (0..300).map(|_| count_allocation(8, false).2).collect::<Vec<_>>();
            let looks = due();
            assert_eq!(looks.iter().position(|&due| due), Some(255), "one look in 256");
            // A look that was due and not taken is due at each allocation after it.
            assert!(looks[255..].iter().all(|&due| due));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn mappings_are_drawn_from_the_allocations_gaps_without_counting_as_one() {
        std::thread::spawn(|| {
            assert!(!mapping_sampled(30, || 100), "30 bytes of a first gap of 100");
            assert_eq!(count_allocation(60, true).1, Counted::Unrecorded, "10 bytes left");
            assert!(mapping_sampled(4096, || 7), "a mapping past the gap holds its sampled byte");
            assert_eq!(count_allocation(6, true).1, Counted::Unrecorded, "the next gap, 7 bytes");
            assert!(!quietly(|| mapping_sampled(4096, || 1)), "the tracer's own mappings are never drawn");
            assert_eq!(allocations_counted(), 2, "only the allocations counted");
        })
        .join()
        .unwrap();
    }
}
