//! Leak ranking and the RSS-versus-heap verdict.
//!
//! The analysis looks at the allocations still alive at a reference snapshot
//! and asks, for every stack, from how many past epochs they survive. A leak
//! leaves survivors from every epoch; a cache fills once; buffers and
//! temporaries are freed within an epoch or the next; warm-up allocations
//! belong to epoch 0, which is never counted.
//!
//! * Analysis snapshots: all snapshots, without the final Exit snapshot when
//!   at least 3 others exist (teardown frees things, the exit epoch is partial).
//!   K of them; the reference is snapshot K-1. When the run was cut into time
//!   slices until its first tracer_mark or auto-detected epoch (the tracer's
//!   default), those slices are start-up: the analysis snapshots begin at the
//!   first marked one, which plays the part of the warm-up epoch 0.
//! * Settled birth epochs: 1..=K-3 (epoch 0 is warm-up; allocations of the
//!   last two epochs have not had time to be freed).
//! * Stacks that symbolize the same frames are one site (see
//!   [`crate::sites`]): the rules below count their survivors together.
//!   Only the stacks with survivors of a settled epoch can pile up, so only
//!   they are symbolized and grouped.
//! * A stack is a suspect when its allocations survive from at least
//!   max(1, floor(settled/2)) settled epochs, or from three spread from the
//!   first third of them to the last (see [`Analysis::pile`]),
//!   its live bytes grew between
//!   snapshot 1 and the reference, and its growth — survivor bytes of the
//!   settled epochs divided by their number, or by the number since its
//!   first survivor's when it left survivors of half of those (a leak that
//!   began late, see [`GrowthSpan`]) — is above the noise floor.
//! * Heap and mapping stacks (the stacks of anonymous mappings) are ranked
//!   together, by the same rules.
//! * Noise floor: max(4 KiB, 0.1% of the live heap and mappings at
//!   snapshot 1) per epoch. Snapshot 1 is the memory after warm-up; the memory at the
//!   reference would not do, since a long-running leak becomes most of it and
//!   would raise the floor above its own growth after a thousand epochs.
//! * Memory the tracer sees is the live heap plus the traced mappings; RSS
//!   growing well beyond it is growth outside what the tracer sees.
//! * RSS growth outside it that malloc's freed-but-kept memory accounts for
//!   (at least half) is the allocator's retention, not an unseen mapping.
//! * A forked process's private memory growing well beyond it, while no
//!   suspect explains it, is memory copied from its parent as the process
//!   writes pages they shared (its RSS counted them from the fork on).

use std::borrow::Cow;
use std::hash::Hash;

use crate::format::bytes;
use crate::sites::Sites;
use crate::trace::{settled_by, Counts, IntMap, Memory, Sampling, Trace};
use trace_format::EpochCause;

/// Fewest analysis snapshots the leak analysis needs.
pub const MIN_EPOCHS: usize = 4;
/// The noise floor never goes below this many bytes per epoch.
pub const NOISE_FLOOR_MIN: u64 = 4096;
/// Over more settled epochs than this, the floors per epoch (the scaled
/// noise floor, [`NOISE_FLOOR_MIN`] where it bounds a growth) are lowered
/// in proportion, so that a stack must keep as much in all as over this
/// many epochs: a job marking every step cuts its run into thousands of
/// epochs, each growing by a few hundred bytes.
pub const FLOOR_FULL_EPOCHS: u64 = 100;

/// `bytes` an epoch over up to [`FLOOR_FULL_EPOCHS`] settled epochs, lowered
/// in proportion over more (at least 1).
fn per_epoch_floor(bytes: u64, settled_epochs: u64) -> u64 {
    (bytes * FLOOR_FULL_EPOCHS / settled_epochs.max(FLOOR_FULL_EPOCHS)).max(1)
}
/// The noise floor is at least this fraction (1/N) of the live heap.
pub const NOISE_FLOOR_HEAP_DIVISOR: u64 = 1000;

/// The growth per epoch a stack must exceed to be a suspect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NoiseFloor {
    /// [`NOISE_FLOOR_MIN`], or 1/[`NOISE_FLOOR_HEAP_DIVISOR`] of the memory
    /// traced at analysis epoch 1 if more: in a large process the
    /// caches that settle slowly stay out of the ranking.
    #[default]
    Scaled,
    /// Chosen by the user (`analyzer report --noise-floor`).
    Bytes(u64),
}

/// Stacks that keep memory alive epoch after epoch as suspects do, but
/// each by no more than the noise floor.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BelowFloor {
    pub stacks: usize,
    /// Their growth per epoch, all together.
    pub growth_bytes_per_epoch: u64,
    /// The largest one's.
    pub largest_bytes_per_epoch: u64,
    /// The [`STACKS_BY_LINE`] that grow the most, as suspects, for the
    /// report to sum by line: a leak of many small stacks under one line of
    /// code (a traced model's graph, hundreds of objects of a few hundred
    /// bytes) has each stack below the floor and the line far above any of
    /// them (see [`Analysis::promote`]).
    pub largest: Vec<Suspect>,
}

/// The most stacks the report sums by line (the best suspects, or the
/// stacks below the floor that grow the most), so that a trace of thousands
/// of growing stacks does not symbolize them all.
pub const STACKS_BY_LINE: usize = 1000;

impl BelowFloor {
    /// "3 stacks keep 12.0 KiB/epoch alive", "1 stack keeps ...".
    pub fn keep_words(&self) -> String {
        let (noun, verb) = if self.stacks == 1 { ("stack", "keeps") } else { ("stacks", "keep") };
        format!("{} {noun} {verb} {}/epoch alive", self.stacks, bytes(self.growth_bytes_per_epoch))
    }
}

/// Allocations from one birth epoch still alive at the reference snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Survivor {
    pub birth_epoch: u32,
    pub count: u64,
    pub bytes: u64,
}

/// A site whose allocations pile up epoch after epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspect {
    /// The site's first stack id, whose frames are shown.
    pub stack: u32,
    /// The other stack ids that symbolize the same frames, counted with it.
    pub other_stacks: Vec<u32>,
    pub growth_bytes_per_epoch: u64,
    /// The settled epochs its growth is over.
    pub growth_span: GrowthSpan,
    /// Live at the reference snapshot.
    pub live_bytes: u64,
    pub live_count: u64,
    /// Settled epochs that left survivors.
    pub settled_with_survivors: usize,
    /// Every birth epoch with allocations alive at the reference, oldest first.
    pub survivors: Vec<Survivor>,
    /// What the stack's allocations are.
    pub memory: Memory,
    /// Its growth is below the noise floor: it is a suspect because the
    /// line it comes from keeps more than the floor (see [`Analysis::promote`]),
    /// or because the traced memory rose steadily (see
    /// [`Analysis::steady_growth_promoted`]).
    pub below_floor: bool,
    /// Its live bytes grew while its allocations did not pile up, and its
    /// survivors are of one birth epoch at most: a block made larger again
    /// and again (a buffer realloc'd larger, a growing vector, string or
    /// Python list), whose survivor is the newest copy.
    pub grown_in_place: bool,
    /// Its survivors come from too few settled epochs for it to pile up
    /// alone: it is a suspect because the stacks of its line together
    /// leave survivors of enough (see [`Analysis::promote`]), as a helper
    /// called from one caller in some epochs and another in the others.
    pub piles_up_only_with_line: bool,
}

/// Whether the survivors of some settled epochs piled up (see [`Analysis::pile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pile {
    No,
    /// Over the earlier settled epochs, none of the last third.
    Stopped,
    Growing,
}

/// The settled epochs a growth per epoch is over: from the first that left
/// survivors on, so that a leak that began in the middle of the run keeps
/// its rate, not that rate spread over the epochs before it began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrowthSpan {
    pub epochs: u64,
    /// The first of them.
    pub since: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictKind {
    HeapLeak,
    /// Every suspect is a cache or ring buffer a library keeps up to a
    /// bound of its own (see `render::explain`): it levels off.
    BoundedCache,
    CopiedFromParent,
    AllocatorRetention,
    FilePages,
    GrowthOutsideHeap,
    /// The program's malloc was not the tracer's: nothing of the heap was
    /// recorded, and its growth cannot be told.
    HeapNotTraced,
    NoGrowth,
    TooFewEpochs,
}

impl VerdictKind {
    pub const ALL: [VerdictKind; 9] = [
        VerdictKind::HeapLeak,
        VerdictKind::BoundedCache,
        VerdictKind::CopiedFromParent,
        VerdictKind::AllocatorRetention,
        VerdictKind::FilePages,
        VerdictKind::GrowthOutsideHeap,
        VerdictKind::HeapNotTraced,
        VerdictKind::NoGrowth,
        VerdictKind::TooFewEpochs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            VerdictKind::HeapLeak => "heap_leak",
            VerdictKind::BoundedCache => "bounded_cache",
            VerdictKind::CopiedFromParent => "copy_on_write",
            VerdictKind::AllocatorRetention => "allocator_retention",
            VerdictKind::FilePages => "file_pages",
            VerdictKind::GrowthOutsideHeap => "growth_outside_heap",
            VerdictKind::HeapNotTraced => "heap_not_traced",
            VerdictKind::NoGrowth => "no_growth",
            VerdictKind::TooFewEpochs => "too_few_epochs",
        }
    }
}

/// What the memory did over the analysis epochs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub kind: VerdictKind,
    /// Epochs between snapshot 1 and the reference.
    pub epochs: usize,
    pub rss_start: u64,
    pub rss_end: u64,
    pub heap_start: u64,
    pub heap_end: u64,
    /// Live bytes in traced mappings: anonymous, and shared memory.
    pub mapped_start: u64,
    pub mapped_end: u64,
    /// The tracer's own memory (its tables), part of the RSS.
    pub tracer_start: u64,
    pub tracer_end: u64,
    /// Memory written by the process alone (forked processes only; 0 when
    /// not measured).
    pub private_start: u64,
    pub private_end: u64,
    /// Freed memory the allocator kept (0 before format 4).
    pub allocator_free_start: u64,
    pub allocator_free_end: u64,
    pub allocator: Allocator,
    /// Resident pages of mapped files (0 before format 5).
    pub file_start: u64,
    pub file_end: u64,
    /// The program's RSS (the tracer's own memory left out) rose at every
    /// epoch from epoch 1 to the reference, steadily (see [`rose_steadily`]).
    pub rss_rose_steadily: bool,
    /// It was still rising in the second half of those epochs (see
    /// [`still_rising`]).
    pub rss_still_rising: bool,
    /// Why the trace holds none of the heap (the tracer's warning), when
    /// the program's malloc was not the tracer's.
    pub heap_not_traced: Option<String>,
}

/// Whose count of the freed memory it kept a trace holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    /// glibc's arenas: also under an allocator whose statistics the tracer
    /// does not read.
    Glibc,
    Jemalloc,
    Tcmalloc,
}

impl Allocator {
    /// From the trace's [`trace_format::ALLOCATOR_SETTING`].
    pub fn of(process: &trace_format::Process) -> Allocator {
        match process.setting(trace_format::ALLOCATOR_SETTING).map(|value| value.split(' ').next().unwrap_or_default())
        {
            Some(trace_format::JEMALLOC) => Allocator::Jemalloc,
            Some(trace_format::TCMALLOC) => Allocator::Tcmalloc,
            _ => Allocator::Glibc,
        }
    }

    /// Who kept the memory, what it is, and how to have it handed back.
    fn retention(self) -> Retention {
        match self {
            Allocator::Glibc => Retention {
                who: "glibc's malloc",
                what: "memory the program freed and malloc kept instead of handing it back to the system, spread over its arenas (one per thread, up to eight per CPU) or cut into pieces between blocks still in use",
                remedy: "set MALLOC_ARENA_MAX=2 for fewer arenas, call malloc_trim(0) after each epoch, or preload jemalloc or tcmalloc",
            },
            Allocator::Jemalloc => Retention {
                who: "jemalloc",
                what: "memory the program freed and jemalloc keeps resident instead of handing it back to the system: dirty pages it has not purged yet (after dirty_decay_ms, 10 s by default, and only as it runs), or pieces between blocks still in use",
                remedy: "set MALLOC_CONF=background_thread:true,dirty_decay_ms:1000 for it to purge sooner",
            },
            Allocator::Tcmalloc => Retention {
                who: "tcmalloc",
                what: "memory the program freed and tcmalloc keeps in its page heap and caches instead of handing it back to the system",
                remedy: "set TCMALLOC_RELEASE_RATE=10 (1 by default) for it to release sooner, or call MallocExtension::instance()->ReleaseFreeMemory() after each epoch",
            },
        }
    }
}

/// Freed memory an allocator keeps, in the verdict's words.
struct Retention {
    who: &'static str,
    what: &'static str,
    /// How to have it handed back, as a clause starting in lower case.
    remedy: &'static str,
}

impl Verdict {
    pub fn rss_growth(&self) -> i128 {
        i128::from(self.rss_end) - i128::from(self.rss_start)
    }
    pub fn heap_growth(&self) -> i128 {
        i128::from(self.heap_end) - i128::from(self.heap_start)
    }
    pub fn mapped_growth(&self) -> i128 {
        i128::from(self.mapped_end) - i128::from(self.mapped_start)
    }
    /// Growth of all the memory the tracer sees: the heap and the mappings.
    pub fn traced_growth(&self) -> i128 {
        self.heap_growth() + self.mapped_growth()
    }
    /// A growth over the verdict's epochs, per epoch (none when it shrank).
    pub fn per_epoch(&self, growth: i128) -> u64 {
        (growth.max(0) / self.epochs.max(1) as i128) as u64
    }
    pub fn allocator_free_growth(&self) -> i128 {
        i128::from(self.allocator_free_end) - i128::from(self.allocator_free_start)
    }
    pub fn file_growth(&self) -> i128 {
        i128::from(self.file_end) - i128::from(self.file_start)
    }
    pub fn private_growth(&self) -> i128 {
        i128::from(self.private_end) - i128::from(self.private_start)
    }
    /// Growth of the tracer's own memory: new stacks grow its tables.
    pub fn tracer_growth(&self) -> i128 {
        i128::from(self.tracer_end) - i128::from(self.tracer_start)
    }
    /// What the heap and traced mappings held at epoch 1 beyond the
    /// program's resident memory other than file pages: pages allocated
    /// and not yet written, which writing makes resident without any new
    /// allocation (a buffer allocated once and filled as the run goes).
    pub fn unwritten_at_start(&self) -> u64 {
        let resident = self.rss_start.saturating_sub(self.tracer_start).saturating_sub(self.file_start);
        (self.heap_start + self.mapped_start).saturating_sub(resident)
    }

    /// RSS growth less the tracer's own (at most all of it): what the
    /// program's memory did. The tracer counts what it allocated, some of
    /// which may not be resident, so this errs towards less growth.
    pub fn program_rss_growth(&self) -> i128 {
        let rss = self.rss_growth();
        rss - self.tracer_growth().clamp(0, rss.max(0))
    }
}

/// What cut the run into epochs: the advice for a run with too few
/// depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochSource {
    /// The program's marks.
    Marks,
    /// Time slices, or nothing yet.
    Program,
    /// The tracer found the passes over a DataLoader: `seen` of them, the
    /// one the last epoch began with among them.
    DataLoaderPasses { seen: usize },
    /// A worker closing an epoch each time its parent (the process of this
    /// pid, when known: a fork's) does: a forked DataLoader worker, or a
    /// child that multiprocessing spawned.
    ParentsEpochs { parent: Option<u32> },
}

impl EpochSource {
    fn of(trace: &Trace) -> EpochSource {
        let cut_by = |cause: EpochCause| trace.snapshots.iter().any(|s| s.cause == cause);
        // A spawned child follows them once its parent closed one; until
        // then it cuts its own, and one that cut none ended inside its
        // parent's first epoch, as a worker of one pass does.
        let own_epochs = [EpochCause::Mark, EpochCause::Auto, EpochCause::Timer].into_iter().any(cut_by);
        let follows = trace
            .process
            .setting(trace_format::EPOCHS_SETTING)
            .is_some_and(|how| how.starts_with(trace_format::FOLLOWS_PARENTS_EPOCHS))
            && (trace.process.forked_from.is_some() || !own_epochs);
        if follows || cut_by(EpochCause::Parent) {
            EpochSource::ParentsEpochs { parent: trace.process.forked_from }
        } else if cut_by(EpochCause::Mark) {
            EpochSource::Marks
        } else if cut_by(EpochCause::Auto) {
            // The first pass's epoch closes as the second begins.
            let seen = 1 + trace.snapshots.iter().filter(|s| s.cause == EpochCause::Auto).count();
            EpochSource::DataLoaderPasses { seen }
        } else {
            EpochSource::Program
        }
    }
}

/// The result of the leak analysis.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub epochs_from: EpochSource,
    /// Index of the first analysis snapshot: 0, or the first marked (or
    /// auto-detected) snapshot of a run that was cut by time until then, or
    /// the one that begins the first whole round of DataLoader passes over
    /// several loaders, or the first whole pass of an outer loop.
    pub first: usize,
    /// Number of analysis snapshots (K).
    pub snapshots: usize,
    /// The final Exit snapshot was left out.
    pub dropped_exit: bool,
    /// The trace ends with the snapshot of the process's end (not cut short
    /// by a kill, nor read while the process runs).
    pub exit_recorded: bool,
    /// The trace file was cut or damaged: the epochs after its last
    /// complete one are lost, however many the program ran.
    pub trace_cut: bool,
    /// The length of the time slices the tracer was set to cut the run
    /// into, in seconds; `None` when they were off.
    pub time_slices_set: Option<f64>,
    /// Index of the reference snapshot (first + K-1).
    pub reference: usize,
    /// The settled birth epochs, first and last, inclusive.
    pub settled: Option<(u32, u32)>,
    /// The epoch of the reference snapshot.
    pub reference_epoch: u32,
    pub noise_floor: u64,
    /// [`NOISE_FLOOR_MIN`] as this run's epochs lower it (see
    /// [`FLOOR_FULL_EPOCHS`]): the least growth an epoch that counts.
    pub least_growth: u64,
    /// How the analysed epochs were sampled, when they were.
    pub sampling: Option<Sampling>,
    /// Sites whose survivors piled up, but whose own live bytes grew from an
    /// epoch of the earlier half of the analysed ones to the last by less
    /// than half of what they kept an epoch, or that left none of the last
    /// epochs (see [`Pile::Stopped`]): what grew stopped or slowed. No
    /// suspects, nor below the floor.
    pub stopped: Option<Stopped>,
    /// The piles [`Analysis::stopped`] counts.
    stopped_piles: Vec<StoppedPile>,
    /// The analysed epochs were cut both by time slices and by marks or
    /// DataLoader passes (`TRACER_EPOCH_SECONDS` set beside them, or
    /// while passes went unseen): epochs
    /// of unlike lengths, whose figures per epoch mix them.
    pub mixed_epoch_causes: bool,
    /// The time slices among them were the default's, cut while no
    /// DataLoader pass was seen (see [`trace_format::SLICES_WHILE_PASSES_UNSEEN`]).
    pub slices_while_passes_unseen: bool,
    /// The tracer saw DataLoader passes, none repeated from one place (see
    /// [`trace_format::UNREPEATED_PASSES_NOTICE`]).
    pub passes_unrepeated: bool,
    /// The analysed epochs were all time slices, of this many seconds on
    /// average: the figures per epoch are per slice.
    pub time_slice_seconds: Option<f64>,
    pub suspects: Vec<Suspect>,
    pub below_floor: BelowFloor,
    /// Stacks whose live bytes grew though their allocations did not pile
    /// up, each by at least `least_growth` an epoch, the most first
    /// (at most [`STACKS_BY_LINE`]): suspects only in a steady rise (see
    /// [`Analysis::promote_steady_growth`]).
    pub grown_in_place: Vec<Suspect>,
    /// Stacks whose live bytes grew and that left survivors of settled
    /// epochs, but of too few to pile up alone, the most growth first (at
    /// most [`STACKS_BY_LINE`]): suspects only with their line (see
    /// [`Analysis::promote`]).
    pub few_settled_epochs: Vec<Suspect>,
    /// Those of [`Analysis::few_settled_epochs`] that held nothing settled
    /// at the snapshot a pile is compared from: a bounded FIFO that keeps
    /// the entries of the last few epochs held older ones there.
    pub few_new_since_middle: Vec<u32>,
    /// Those of [`Analysis::few_settled_epochs`] there because their pile
    /// stopped: part of a leak only where their line's other stacks began
    /// after them (see [`Analysis::stopped`]).
    pub stopped_with_line: Vec<u32>,
    /// The sites a verdict without suspects speaks of beside its culprit
    /// (the one that stopped holding the most, one that began late), by
    /// stack id, as the report names them (see
    /// `render::analyze_by_line`); unnamed, the verdict leaves them out.
    pub site_names: IntMap<u32, String>,
    /// The stack holding the most live bytes at the reference, and how
    /// many: the block a growth of the RSS alone may be the filling of
    /// (see [`Verdict::unwritten_at_start`]).
    pub largest_live: Option<(u32, u64)>,
    /// How the heap and traced mappings rose from epoch 1 to the reference.
    pub traced_rise: TracedRise,
    /// The suspects are stacks below the noise floor, or blocks grown in
    /// place, made suspects because the heap and mappings rose steadily
    /// (see [`TracedRise`]) by more than the floor while no line kept more
    /// than it.
    pub steady_growth_promoted: bool,
    pub verdict: Verdict,
}

fn signed(v: i128) -> String {
    if v < 0 {
        format!("-{}", bytes(v.unsigned_abs() as u64))
    } else {
        bytes(v as u64)
    }
}

/// Memory growth counts as "noticeable" above both of these.
const NOTICEABLE_FRACTION: f64 = 0.10;
const NOTICEABLE_BYTES: i128 = 4 << 20;

/// RSS growth is noticeable above [`NOTICEABLE_BYTES`] when it is a tenth
/// of the RSS and had not stopped by the second half of the epochs (a
/// process settling, new threads' arenas made once, is not growing), or
/// when it came epoch after epoch: a few MiB an epoch are lost in the RSS
/// of a process that imported torch, and kill it all the same after a
/// thousand epochs.
fn rss_grew_noticeably(v: &Verdict) -> bool {
    let g = v.program_rss_growth();
    let tenth = (g as f64) > NOTICEABLE_FRACTION * v.rss_start as f64;
    g > NOTICEABLE_BYTES && (tenth && v.rss_still_rising || v.rss_rose_steadily)
}

/// Whether `readings` rose in their second half by at least a quarter of
/// what they rose in all.
fn still_rising(readings: &[u64]) -> bool {
    rose_since(readings, readings.len() / 2)
}

/// Whether `readings` rose after the one at `index` by at least a quarter
/// of what they rose in all.
fn rose_since(readings: &[u64], index: usize) -> bool {
    let (Some(&first), Some(&last), Some(&then)) = (readings.first(), readings.last(), readings.get(index)) else {
        return false;
    };
    last > first && 4 * last.saturating_sub(then) >= last - first
}

/// How the heap and traced mappings rose over the analysed epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TracedRise {
    /// At every epoch (see [`rose_steadily`]).
    EveryEpoch,
    /// In steps, never falling, while the RSS rose at every epoch (see [`rose_by_steps`]).
    InSteps,
    NotSteadily,
}

/// Whether `readings` never fell and still rose in their second half, the
/// rise into its first reading counted (see [`rose_since`]): the live bytes
/// of containers that grow by doubling (a `std::vector`, a Python list),
/// whose buffer is replaced by one twice its size at a few epochs while
/// the RSS rises at every epoch as the buffer's pages are filled. Epochs
/// 1 to n hold such a step after epoch n/2 - 1 however they fall (one
/// at the power of two in (n/2, n]), and a buffer doubled at epoch 4 of
/// 1 to 7 has not stopped growing.
fn rose_by_steps(readings: &[u64]) -> bool {
    readings.len() >= STEADY_MIN_READINGS
        && readings.windows(2).all(|step| step[1] >= step[0])
        && rose_since(readings, (readings.len() / 2).saturating_sub(1))
}

/// The birth epochs of `suspect`'s survivors within `settled` (first and
/// last), oldest first.
fn settled_births(suspect: &Suspect, (lo, hi): (u32, u32)) -> impl DoubleEndedIterator<Item = u32> + '_ {
    suspect.survivors.iter().map(|v| v.birth_epoch).filter(move |e| (lo..=hi).contains(e))
}

/// A pile that stopped: its live bytes, its site, and the birth epochs of
/// its settled survivors, first and last.
type StoppedPile = (u64, u32, Option<(u32, u32)>);

/// What `piles` that stopped come to.
fn stopped_of(piles: &[StoppedPile]) -> Option<Stopped> {
    let &(bytes, site, born) = piles.iter().max()?;
    Some(Stopped { sites: piles.len(), largest: (site, bytes), largest_born: born })
}

/// Sites that piled up but stopped (see [`Analysis::stopped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub sites: usize,
    /// The one that holds the most, and how much.
    pub largest: (u32, u64),
    /// The birth epochs of the settled survivors it holds, first and last:
    /// when its leak stopped.
    pub largest_born: Option<(u32, u32)>,
}

/// The fewest settled epochs after a pile's last survivors that can tell
/// it stopped, by the third of its own span (see [`Analysis::pile`]).
const OWN_SPAN_LEAST_GAP: u32 = 3;
/// Settled epochs without survivors after a pile from which the epochs up
/// to the reference, with none born there either, count to its quiet (see
/// [`Analysis::still`]).
const QUIET_SETTLED_EPOCHS: u32 = 2;

/// Values read at least this many times can rise steadily: three epochs.
const STEADY_MIN_READINGS: usize = 4;

/// Over more steps than this, a rise is judged over this many windows of
/// about equal length: the epochs of a long run (steps marked one by one)
/// each hold noise as large as a small leak's growth, which a window of
/// them averages out.
const STEADY_WINDOWS: usize = 10;

/// How [`rose_steadily`] rose over `epochs` steps.
/// How the heap and traced mappings rose, `every` epoch or in steps while
/// the RSS rose `every` epoch, and whether by more than the noise floor an
/// epoch on average (said of them, not of the RSS).
fn traced_rise_words(rise: TracedRise, every: &str, above_floor: bool) -> String {
    let by_more = if above_floor { ", by more than the floor an epoch on average" } else { "" };
    match rise {
        TracedRise::InSteps => format!("in steps, never falling{by_more}, while the RSS rose {every}"),
        _ => format!("{every}{by_more}"),
    }
}

fn steadily_words(epochs: usize) -> &'static str {
    if epochs > STEADY_WINDOWS {
        "in every tenth of the epochs"
    } else {
        "at every epoch"
    }
}

/// Whether `readings` rose at every step, each step by at least a quarter
/// of the mean step: growth a pause or a fall would break is not a trend.
/// Over more than [`STEADY_WINDOWS`] steps, at every window of them.
fn rose_steadily(readings: &[u64]) -> bool {
    let (Some(&first), Some(&last)) = (readings.first(), readings.last()) else { return false };
    if readings.len() < STEADY_MIN_READINGS || last <= first {
        return false;
    }
    let steps = readings.len() - 1;
    if steps > STEADY_WINDOWS {
        let window_ends: Vec<u64> = (0..=STEADY_WINDOWS).map(|i| readings[i * steps / STEADY_WINDOWS]).collect();
        return rose_steadily(&window_ends);
    }
    let mean_step = (last - first) / (readings.len() as u64 - 1);
    readings.windows(2).all(|step| step[1] > step[0] && 4 * (step[1] - step[0]) >= mean_step)
}

fn rss_outgrew_traced_memory(v: &Verdict) -> bool {
    rss_grew_noticeably(v) && v.program_rss_growth() > 2 * v.traced_growth().max(0)
}

/// The traced mappings grew noticeably, by more than twice what the RSS
/// grew by: mapped and not resident, as a reservation is.
fn mappings_outgrew_rss(v: &Verdict) -> bool {
    let mapped = v.mapped_growth();
    mapped > NOTICEABLE_BYTES && mapped > 2 * v.program_rss_growth().max(0)
}

/// Freed memory the allocator keeps grew noticeably, by half the growth
/// of the heap and mappings at least, while the RSS did not outgrow them
/// (see [`rss_outgrew_traced_memory`]): a leak's report that leaves it out
/// leaves that much of the RSS's growth unexplained.
fn allocator_kept_much_beside(v: &Verdict) -> bool {
    let kept = v.allocator_free_growth();
    kept > NOTICEABLE_BYTES && 2 * kept >= v.traced_growth().max(0) && !rss_outgrew_traced_memory(v)
}

/// Private memory growing noticeably, beyond twice what the heap, the
/// mappings and the tracer's tables (all private) grew by, and beyond
/// twice what the RSS grew by: pages copied from the parent were resident
/// already, where new memory outside the heap grows both.
fn private_outgrew_traced_memory(v: &Verdict) -> bool {
    let own = v.traced_growth().max(0) + v.tracer_growth().max(0);
    let g = v.private_growth();
    g > NOTICEABLE_BYTES
        && (g as f64) > NOTICEABLE_FRACTION * v.private_start as f64
        && g > 2 * own
        && g > 2 * v.program_rss_growth().max(0)
}

/// RSS growth outside the traced memory that malloc's freed-but-kept
/// memory accounts for, at least half of it.
fn allocator_kept_the_growth(v: &Verdict) -> bool {
    rss_outgrew_traced_memory(v) && 2 * v.allocator_free_growth() >= v.program_rss_growth()
}

/// An RSS change worth naming (more than [`NOTICEABLE_BYTES`], though not
/// enough to be growth) that malloc's freed-but-kept memory accounts for,
/// at least half of it: a verdict of no growth says so.
fn allocator_kept_the_change(v: &Verdict) -> bool {
    let rss = v.program_rss_growth();
    rss > NOTICEABLE_BYTES && 2 * v.allocator_free_growth() >= rss
}

/// RSS growth outside the traced memory that the pages of mapped files
/// account for, at least half of it.
fn file_pages_made_the_growth(v: &Verdict) -> bool {
    rss_outgrew_traced_memory(v) && 2 * v.file_growth() >= v.program_rss_growth()
}

/// Growth of the pages of mapped files is named beside an RSS change
/// when it is above this.
const FILE_GROWTH_NAMED: i128 = 1 << 20;

/// The tracer's own growth is named when it is above this.
const TRACER_GROWTH_NAMED: i128 = 1 << 20;

/// "RSS grew by X over N epochs (Y/epoch)": the opening of the verdicts
/// about growth outside what piles up on the heap.
fn rss_growth_over_words(v: &Verdict, over: &str) -> String {
    format!("{} over {over} ({}/epoch)", rss_growth_words(v, "grew"), bytes(v.per_epoch(v.program_rss_growth())))
}

/// "RSS grew by X", less the tracer's own growth when that is worth naming.
fn rss_growth_words(v: &Verdict, verb: &str) -> String {
    let tracer = v.tracer_growth();
    if tracer > TRACER_GROWTH_NAMED {
        format!(
            "RSS {verb} by {} (not counting the tracer's own memory, which grew by {})",
            signed(v.program_rss_growth()),
            bytes(tracer as u64)
        )
    } else {
        format!("RSS {verb} by {}", signed(v.rss_growth()))
    }
}

/// What the live heap and the traced mappings did beside an RSS growth
/// outside them: "stayed at X" or "changed only by X to Y".
fn traced_change_words(v: &Verdict) -> String {
    let traced_end = v.heap_end + v.mapped_end;
    if v.traced_growth().abs() * 10 < v.program_rss_growth() {
        format!("stayed at {}", bytes(traced_end))
    } else {
        format!("changed only by {} to {}", signed(v.traced_growth()), bytes(traced_end))
    }
}

/// "the live heap grew by X", with the mappings when there are any.
fn traced_growth_words(v: &Verdict) -> String {
    let mapped = (v.mapped_start != 0 || v.mapped_end != 0).then(|| v.mapped_growth());
    heap_and_mappings_change_words(v.heap_growth(), mapped)
}

/// How the live heap changed, and the traced mappings where there are any
/// ("and traced mappings by Y" where both grew).
fn heap_and_mappings_change_words(heap: i128, mapped: Option<i128>) -> String {
    match mapped {
        None => format!("the live heap {}", change_words(heap)),
        Some(0) if heap == 0 => "the live heap and traced mappings did not change".to_string(),
        Some(mapped) if heap > 0 && mapped > 0 => {
            format!("the live heap grew by {} and traced mappings by {}", bytes(heap as u64), bytes(mapped as u64))
        }
        Some(mapped) => format!("the live heap {} and traced mappings {}", change_words(heap), change_words(mapped)),
    }
}

/// "grew by X", "shrank by X" or "did not change".
fn change_words(change: i128) -> String {
    match change {
        0 => "did not change".to_string(),
        ..0 => format!("shrank by {}", bytes(change.unsigned_abs() as u64)),
        _ => format!("grew by {}", bytes(change as u64)),
    }
}

/// What a line's suspects hold: one kind of memory, or several (a line
/// whose call both mallocs and maps, or a pymalloc arena mapped while the
/// line's shared-memory batches arrive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineMemory {
    Only(Memory),
    Mixed,
}

impl LineMemory {
    /// As the JSON names it.
    pub fn name(self) -> &'static str {
        match self {
            LineMemory::Only(memory) => memory.name(),
            LineMemory::Mixed => "mixed",
        }
    }

    /// How the memory is said in words; `None` for the heap's.
    pub fn words(self) -> Option<&'static str> {
        match self {
            LineMemory::Only(memory) => memory.words(),
            LineMemory::Mixed => Some("several kinds of memory"),
        }
    }
}

/// What a `heap_leak` verdict names: the top line of the program's own code
/// with the suspects it sums (see [`crate::lines`]), or the top suspect.
#[derive(Debug, Clone)]
pub struct Culprit<'a> {
    /// The line's function, with its file and line when known.
    pub name: Cow<'a, str>,
    /// The Python line that called it, named the same way, when the line
    /// is native code of the user's that Python called (through ctypes).
    pub called_from: Option<Cow<'a, str>>,
    pub growth_bytes_per_epoch: u64,
    pub live_bytes: u64,
    pub suspects: usize,
    pub memory: LineMemory,
    /// What the memory of the line's best suspect is, when the report
    /// knows (a library's cache or records).
    pub known_as: Option<KnownAs<'a>>,
    /// The bytes of its suspects' survivors by birth epoch, oldest first.
    pub born: Vec<(u32, u64)>,
    /// The first settled epoch its growth per epoch is over.
    pub growth_since: u32,
}

/// What a culprit's memory is (see [`Culprit::known_as`]).
#[derive(Debug, Clone, Copy)]
pub struct KnownAs<'a> {
    pub what: &'a str,
    /// The rank of the suspect it was told of.
    pub rank: usize,
    /// The line was only where the memory happened to grow (it needed a
    /// new block of something another part keeps filling): it keeps none
    /// of it, and the verdict must not say it does.
    pub incidental: bool,
}

impl<'a> Culprit<'a> {
    /// One suspect, known as `name`.
    pub fn suspect(suspect: &Suspect, name: &'a str) -> Culprit<'a> {
        Culprit {
            name: Cow::Borrowed(name),
            called_from: None,
            growth_bytes_per_epoch: suspect.growth_bytes_per_epoch,
            live_bytes: suspect.live_bytes,
            suspects: 1,
            memory: LineMemory::Only(suspect.memory),
            known_as: None,
            born: suspect.survivors.iter().map(|s| (s.birth_epoch, s.bytes)).collect(),
            growth_since: suspect.growth_span.since,
        }
    }

    /// When what the line kept in the later half of the settled epochs (in
    /// `settled`, first and last) is a quarter at most of what it kept in
    /// the earlier half, an epoch: the first epoch of each half with its
    /// mean. The growth per epoch, their mean, then overstates what comes.
    fn slowing_down(&self, settled: (u32, u32)) -> Option<((u32, u64), (u32, u64))> {
        let (lo, hi) = settled;
        if hi < lo + 3 {
            return None;
        }
        let later = lo + (hi - lo).div_ceil(2);
        let mean = |from: u32, to: u32| {
            let bytes: u64 = self.born.iter().filter(|(birth, _)| (from..=to).contains(birth)).map(|(_, b)| b).sum();
            bytes / u64::from(to - from + 1)
        };
        let (earlier_mean, later_mean) = (mean(lo, later - 1), mean(later, hi));
        (earlier_mean > 0 && 4 * later_mean <= earlier_mean).then_some(((lo, earlier_mean), (later, later_mean)))
    }

    /// When none of the line's survivors is younger than a settled epoch
    /// (of `settled`, first and last) some epochs before the last, more
    /// than twice as many as its survivors' epochs are apart: the first and
    /// last epochs it kept memory of, how many settled epochs came after,
    /// and what it kept an epoch from the first to the last. A leak that
    /// stopped there (its growth per epoch, over the epochs since it began,
    /// is diluted by those after).
    fn quiet_since(&self, settled: (u32, u32)) -> Option<(u32, u32, u32, u64)> {
        let kept: Vec<(u32, u64)> =
            self.born.iter().copied().filter(|&(birth, bytes)| birth >= self.growth_since && bytes > 0).collect();
        let (&(first, _), &(last, _)) = (kept.first()?, kept.last()?);
        let gap = settled.1.checked_sub(last)?;
        let apart = (last - first) / (kept.len().max(2) as u32 - 1);
        let bytes: u64 = kept.iter().map(|&(_, bytes)| bytes).sum();
        (gap >= OWN_SPAN_LEAST_GAP && gap > 2 * apart.max(1))
            .then(|| (first, last, gap, bytes / u64::from(last - first + 1)))
    }

    /// When what the line keeps grew faster at every settled epoch (in
    /// `settled`, first and last), to at least twice as much: the first
    /// and last settled epochs with what each left alive. The growth per
    /// epoch, their mean, then understates what comes.
    fn speeding_up(&self, settled: (u32, u32)) -> Option<((u32, u64), (u32, u64))> {
        let born: Vec<(u32, u64)> = (settled.0..=settled.1)
            .map(|epoch| (epoch, self.born.iter().filter(|(b, _)| *b == epoch).map(|(_, bytes)| bytes).sum()))
            .collect();
        let (&first, &last) = (born.first()?, born.last()?);
        let rising = born.windows(2).all(|pair| pair[1].1 >= pair[0].1);
        (born.len() >= 3 && rising && first.1 > 0 && last.1 >= 2 * first.1).then_some((first, last))
    }
}

/// `name` with the Python line that called it, when one did.
pub fn with_caller<'a>(name: &'a str, caller: Option<&str>) -> Cow<'a, str> {
    match caller {
        Some(caller) => Cow::Owned(format!("{name}, called from {caller}")),
        None => Cow::Borrowed(name),
    }
}

impl Culprit<'_> {
    /// The line with the Python line that called it, when one did:
    /// `compute_features (featlib.c:12), called from featurize (job.py:15)`.
    pub fn named(&self) -> Cow<'_, str> {
        with_caller(&self.name, self.called_from.as_deref())
    }

    /// [`Culprit::named`] where a sentence goes on after it: its caller set
    /// off by commas.
    fn subject(&self) -> Cow<'_, str> {
        match self.called_from {
            Some(_) => Cow::Owned(format!("{},", self.named())),
            None => self.named(),
        }
    }
}

/// A settled birth epoch whose survivors hold less than 1/N of the mean of
/// the epochs with survivors does not count to a pile: a bounded FIFO's own
/// small blocks, made as it filled over the earlier epochs, beside the
/// entries of the last few that it keeps; the odd object a cycle collector
/// left of each of its rounds, beside the garbage of the round to come.
pub const SHARE_OF_AN_EPOCH: u64 = 16;

/// The birth epochs of `by_birth` (bytes of survivors by birth epoch, a
/// birth epoch perhaps more than once) that count to a pile (see
/// [`SHARE_OF_AN_EPOCH`]), in order.
pub fn births_that_count(by_birth: impl IntoIterator<Item = (u32, u64)>) -> Vec<u32> {
    let mut bytes_by_birth: std::collections::BTreeMap<u32, u64> = Default::default();
    for (birth, bytes) in by_birth {
        *bytes_by_birth.entry(birth).or_default() += bytes;
    }
    let mean = bytes_by_birth.values().sum::<u64>() / (bytes_by_birth.len() as u64).max(1);
    bytes_by_birth.into_iter().filter(|&(_, bytes)| bytes * SHARE_OF_AN_EPOCH >= mean).map(|(birth, _)| birth).collect()
}

impl Analysis {
    /// The snapshots that close the job's epochs the analysis counts: the
    /// `snapshots` from the `first` on, but for the exit's own, which those
    /// keep while there are too few to analyse (its figures shown beside
    /// theirs) but which never is one.
    pub fn analysed_snapshots(&self) -> std::ops::Range<usize> {
        let exit_kept = usize::from(self.exit_recorded && !self.dropped_exit);
        self.first..self.first + self.snapshots.saturating_sub(exit_kept)
    }

    /// The settled birth epochs a stack's survivors, or a line's, must come
    /// from to pile up: half of them, rounded down, at least 1 (a leak of
    /// every other epoch leaves 3 of 7, whichever epochs they are).
    pub fn settled_epochs_needed(&self) -> usize {
        (self.snapshots.saturating_sub(3) / 2).max(1)
    }

    /// `since`, the first epoch a growth is over, when it is not the first
    /// settled epoch: the growth began late, and is over the epochs since.
    pub fn late_start(&self, since: u32) -> Option<u32> {
        self.settled.filter(|&(first, _)| since > first).map(|_| since)
    }

    /// How survivors of `hits` settled epochs, `first` and `last` of them,
    /// pile up: of half the settled epochs (see
    /// [`Analysis::settled_epochs_needed`]), or of three at least, from
    /// the first third of the settled epochs (a leak of every few epochs:
    /// a validation every third epoch that keeps its outputs, a record
    /// kept every tenth step); still, when some are of the last third of
    /// the settled epochs, or as near the last as they are apart on
    /// average (a leak of every other epoch left none of the last when it
    /// is even). Survivors of one settled epoch pile up only with some of
    /// an epoch after it (`newest`, the newest survivors' birth, settled or
    /// not): alone they are a block made once (a cache filled in that
    /// epoch) as much as a leak's first keep.
    pub fn pile(&self, hits: usize, first: u32, last: u32, newest: u32) -> Pile {
        let Some((lo, hi)) = self.settled else { return Pile::No };
        let third = (hi - lo + 1) / 3;
        let alone = hits == 1 && newest <= last;
        let too_few = hits < self.settled_epochs_needed() && (hits < 3 || first > lo + third);
        if alone || too_few {
            Pile::No
        } else {
            self.still(hits, first, last, newest, lo)
        }
    }

    /// Whether survivors of `hits` settled epochs that pile up, `first`
    /// and `last` of them, `newest` the newest survivors' birth (settled or
    /// not), still do (see [`Analysis::pile`]), with `since` the first
    /// settled epoch the pile is over.
    fn still(&self, hits: usize, first: u32, last: u32, newest: u32, since: u32) -> Pile {
        let Some((_, hi)) = self.settled else { return Pile::No };
        // Quiet for two settled epochs at least, and none born since, not
        // even in the epochs after the settled ones, whose leaked
        // allocations would be alive at the reference: the quiet runs to
        // the reference (a cache full four epochs before it). A shorter
        // quiet may be chance: a line's allocations may take other paths
        // for an epoch (which pymalloc arena a line's objects need is
        // chance). Sampled, survivors may be undrawn.
        let quiet_to = if last + QUIET_SETTLED_EPOCHS <= hi && newest <= last && self.sampling.is_none() {
            self.reference_epoch.max(hi)
        } else {
            hi
        };
        // Their own span's third too, three epochs at least: a leak of
        // epochs 100 to 199 of 300 stopped, though 199 is of the run's
        // last third; two epochs without survivors tell little.
        let third = ((hi - since + 1) / 3).min(((last - first + 1) / 3).max(OWN_SPAN_LEAST_GAP));
        let apart = (last - first) / (hits.max(2) as u32 - 1);
        // Sampled, the last settled epoch's survivors may all have gone
        // undrawn: one quiet epoch is no stop.
        let least = if self.sampling.is_some() { 2 } else { 1 };
        if last + third.max(apart).max(least) > quiet_to {
            Pile::Growing
        } else {
            // A cache filled over the earlier epochs, flat since.
            Pile::Stopped
        }
    }

    /// Makes suspects of the stacks in `stacks` kept below the noise floor
    /// (in [`BelowFloor::largest`]) or with too few settled epochs (in
    /// [`Analysis::few_settled_epochs`]): stacks whose line keeps more than
    /// the floor with them, however little each keeps, or leaves survivors
    /// of enough settled epochs with them, however few each leaves. The
    /// verdict becomes a leak.
    pub fn promote(&mut self, stacks: &[u32]) {
        let (with_line, few): (Vec<Suspect>, Vec<Suspect>) =
            std::mem::take(&mut self.few_settled_epochs).into_iter().partition(|s| stacks.contains(&s.stack));
        self.few_settled_epochs = few;
        // A pile that stopped but goes on with its line is no longer one.
        self.stopped_piles.retain(|&(_, stack, _)| !stacks.contains(&stack));
        self.stopped = stopped_of(&self.stopped_piles);
        if !with_line.is_empty() {
            self.grown_in_place.retain(|s| !stacks.contains(&s.stack));
            self.suspects.extend(with_line);
            self.suspects.sort_by(by_rank);
            self.verdict.kind = verdict_kind(true, &self.verdict);
        }
        let below = &mut self.below_floor;
        let (promoted, kept): (Vec<Suspect>, Vec<Suspect>) =
            std::mem::take(&mut below.largest).into_iter().partition(|s| stacks.contains(&s.stack));
        if promoted.is_empty() {
            below.largest = kept;
            return;
        }
        below.stacks -= promoted.len();
        below.growth_bytes_per_epoch -= promoted.iter().map(|s| s.growth_bytes_per_epoch).sum::<u64>();
        // Those not kept grow less than any kept, the promoted included.
        let last_promoted = promoted.last().map_or(0, |s| s.growth_bytes_per_epoch);
        below.largest_bytes_per_epoch =
            if below.stacks == 0 { 0 } else { kept.first().map_or(last_promoted, |s| s.growth_bytes_per_epoch) };
        below.largest = kept;
        self.suspects.extend(promoted);
        self.suspects.sort_by(by_rank);
        self.verdict.kind = verdict_kind(true, &self.verdict);
    }

    /// Without suspects, while the heap and traced mappings rose at every
    /// epoch by more than the least growth that counts, or in steps by more
    /// than the noise floor ([`TracedRise`]): makes suspects of the stacks
    /// that make that rise (see [`promote_steady_growth`]). The verdict
    /// becomes a leak.
    pub fn promote_steady_growth(&mut self) {
        let traced_growth = self.verdict.per_epoch(self.verdict.traced_growth());
        // A rise at every epoch is no noise from the least growth that
        // counts on (a stack keeping one 4 KiB page an epoch); a rise in
        // steps must pass the floor.
        let counts = match self.traced_rise {
            TracedRise::EveryEpoch => traced_growth >= self.least_growth,
            TracedRise::InSteps => traced_growth > self.noise_floor,
            TracedRise::NotSteadily => return,
        };
        if !counts {
            return;
        }
        // A block grown in place grew by the rise at most (what it held at
        // epoch 1 may have been made by another stack, and so not counted
        // out of its growth); by steps, by the RSS's rise at most, as the
        // pages of a doubled buffer are filled (its capacity runs ahead).
        let rise = match self.traced_rise {
            TracedRise::InSteps => traced_growth.min(self.verdict.per_epoch(self.verdict.program_rss_growth())),
            _ => traced_growth,
        };
        let mut grown = std::mem::take(&mut self.grown_in_place);
        for block in &mut grown {
            block.growth_bytes_per_epoch = block.growth_bytes_per_epoch.min(rise);
        }
        if !self.suspects.is_empty() {
            self.promote_grown_beside_suspects(grown, traced_growth);
            return;
        }
        self.suspects = promote_steady_growth(&mut self.below_floor, grown, traced_growth, self.least_growth);
        self.steady_growth_promoted = !self.suspects.is_empty();
        self.verdict.kind = verdict_kind(self.steady_growth_promoted, &self.verdict);
    }

    /// Beside the suspects, in a steady rise they do not account for:
    /// makes suspects of the blocks grown in place by more than the noise
    /// floor, the most first, each counted for no more than the rise left
    /// (a buffer realloc'd larger every epoch beside allocations that pile
    /// up elsewhere is a leak of its own). Only one block, its newest copy:
    /// a stack whose few allocations of some epochs stay (a cache refreshed
    /// now and then) is part of the rise, but no leak beside a leak.
    fn promote_grown_beside_suspects(&mut self, grown: Vec<Suspect>, traced_growth: u64) {
        let mut unaccounted = traced_growth.saturating_sub(self.suspects_growth());
        let mut kept = Vec::new();
        for mut block in grown {
            let growth = block.growth_bytes_per_epoch.min(unaccounted);
            if block.grown_in_place
                && growth > self.noise_floor
                && !self.suspects.iter().any(|s| s.stack == block.stack)
            {
                block.growth_bytes_per_epoch = growth;
                unaccounted -= growth;
                self.suspects.push(block);
            } else {
                kept.push(block);
            }
        }
        self.grown_in_place = kept;
        self.suspects.sort_by(by_rank);
    }

    /// No suspect, while stacks below the noise floor kept more than
    /// [`NOISE_FLOOR_MIN`] an epoch alive and the traced memory grew by more
    /// than that too: a leak too small for this process's floor, or caches
    /// settling slowly; the user decides, with the floor lowered.
    pub fn growth_below_floor(&self) -> bool {
        self.suspects.is_empty()
            && self.below_floor.growth_bytes_per_epoch > self.least_growth
            && self.verdict.per_epoch(self.verdict.traced_growth()) > self.least_growth
    }

    /// The verdict in words; `culprit` is what a leak verdict names, the
    /// top suspect (unnamed) when `None`, and for growth below the floor
    /// the line the stacks below it keep the most through.
    /// What the suspects keep an epoch, all together.
    pub fn suspects_growth(&self) -> u64 {
        self.suspects.iter().map(|s| s.growth_bytes_per_epoch).sum()
    }

    pub fn verdict_message(&self, culprit: Option<Culprit<'_>>) -> String {
        let mut message = self.verdict_words(culprit);
        if let Some(hint) = self.sparse_samples_hint() {
            message.push_str("; ");
            message.push_str(&hint);
        }
        if let Some(stopped) = self.stopped.filter(|_| self.verdict.kind == VerdictKind::NoGrowth) {
            message.push_str(&format!(
                "; {} piled up allocations in the earlier epochs, then stopped or slowed: too little of what the later epochs allocated there is alive for a leak that goes on. Something filled up (a cache, a buffer at its bound, or one replacing its entries), or a leak ran for a while; a longer run tells them from a leak that slowed",
                if stopped.sites == 1 { "1 site".to_string() } else { format!("{} sites", stopped.sites) },
            ));
            if let Some(named) = self.site_names.get(&stopped.largest.0) {
                let held = match stopped.largest_born {
                    Some((first, last)) if first < last => {
                        format!("{} now, born in epochs {first} to {last}", bytes(stopped.largest.1))
                    }
                    _ => format!("{} now", bytes(stopped.largest.1)),
                };
                message.push_str(&match stopped.sites {
                    1 => format!("; it is {named} ({held})"),
                    _ => format!("; of those, {named} holds the most ({held})"),
                });
            }
        }
        if let Some(recent) = self.recent_start() {
            if let Some(named) = self.site_names.get(&recent.stack) {
                message.push_str(&self.recent_start_words(named, recent));
            }
        }
        if let Some(sometimes) = self.now_and_then() {
            if let Some(named) = self.site_names.get(&sometimes.stack) {
                message.push_str(&self.now_and_then_words(named, sometimes));
            }
        }
        if self.mixed_epoch_causes && self.verdict.kind != VerdictKind::TooFewEpochs {
            message.push_str(if self.slices_while_passes_unseen {
                "; the epochs were cut by DataLoader passes and, while no pass was seen, by time slices, which are of unlike lengths: a figure per epoch mixes them. A pass can go unseen (one that starts with small objects alone, as a loader keeping its workers over an unshuffled dataset does); call tracer_mark(label) at the end of each epoch for epochs of training"
            } else {
                "; the epochs were cut both by time slices and by marks or DataLoader passes, which are of unlike lengths: a figure per epoch mixes them (leave TRACER_EPOCH_SECONDS unset, or set it to 0, for marks and passes alone)"
            });
        }
        if let Some(seconds) = self.time_slice_seconds.filter(|_| self.verdict.kind != VerdictKind::TooFewEpochs) {
            let slice = match seconds {
                s if s < 0.01 => format!("{:.2} ms", s * 1e3),
                s if s < 1.0 => format!("{:.0} ms", s * 1e3),
                s if s < 10.0 => format!("{s:.1} s"),
                s => format!("{s:.0} s"),
            };
            message.push_str(&format!(
                "; an epoch here is a time slice of about {slice}, and a figure per epoch is per slice (call tracer_mark(label) at the end of each epoch for figures per epoch of training)"
            ));
        }
        message
    }

    /// Without suspects, a stack that began keeping memory in the later
    /// half of the settled epochs (it held nothing at the snapshot a pile
    /// is compared from) and kept some of each epoch since, to the last,
    /// by more than the noise floor an epoch: too few epochs to
    /// pile up, and too many to say nothing of (a leak that began at epoch
    /// 9 of 12). The one that keeps the most.
    pub fn recent_start(&self) -> Option<&Suspect> {
        let (lo, hi) = self.settled?;
        if self.verdict.kind != VerdictKind::NoGrowth || !self.suspects.is_empty() {
            return None;
        }
        let began_recently = |s: &&Suspect| {
            let (Some(first), Some(last)) = (s.survivors.first(), s.survivors.last()) else { return false };
            let epochs = s.survivors.len() as u64;
            self.few_new_since_middle.contains(&s.stack)
                && first.birth_epoch > lo + (hi - lo) / 2
                && last.birth_epoch > hi
                && u64::from(last.birth_epoch - first.birth_epoch) + 1 == epochs
                && epochs >= 3
                && s.live_bytes / epochs > self.noise_floor
        };
        self.few_settled_epochs.iter().filter(began_recently).max_by_key(|s| s.live_bytes)
    }

    /// Without suspects and a recent start, a stack that kept memory born
    /// in a few settled epochs only, in the earlier half and the later one,
    /// by more than the noise floor an epoch over them: a leak that comes
    /// now and then (an allocation every 5th epoch kept) looks so over 16
    /// epochs, too few to pile up. The one that keeps the most.
    pub fn now_and_then(&self) -> Option<&Suspect> {
        let (lo, hi) = self.settled?;
        if self.verdict.kind != VerdictKind::NoGrowth || !self.suspects.is_empty() || self.recent_start().is_some() {
            return None;
        }
        let middle = lo + (hi - lo) / 2;
        let stopped = self.stopped.map(|stopped| stopped.largest.0);
        let now_and_then = |s: &&Suspect| {
            let mut settled = settled_births(s, (lo, hi));
            let (Some(first), Some(last)) = (settled.next(), settled.next_back()) else { return false };
            first <= middle
                && last > middle
                && s.live_bytes / u64::from(hi - lo + 1) > self.noise_floor
                && stopped != Some(s.stack)
        };
        self.few_settled_epochs.iter().filter(now_and_then).max_by_key(|s| s.live_bytes)
    }

    /// What the verdict adds of [`Analysis::now_and_then`]'s stack, `named`.
    fn now_and_then_words(&self, named: &str, sometimes: &Suspect) -> String {
        let (lo, hi) = self.settled.unwrap_or_default();
        let births: Vec<String> = settled_births(sometimes, (lo, hi)).map(|e| e.to_string()).collect();
        format!(
            "; {named} kept memory born in {} of the {} settled epochs only (epochs {}; {} now): too few to tell a leak that comes now and then from memory kept for a while; a longer run tells",
            births.len(),
            hi - lo + 1,
            births.join(", "),
            bytes(sometimes.live_bytes),
        )
    }

    /// What the verdict adds of [`Analysis::recent_start`]'s stack, `named`.
    fn recent_start_words(&self, named: &str, recent: &Suspect) -> String {
        let epochs = recent.survivors.len() as u64;
        format!(
            "; {named} began keeping memory at epoch {} and kept some of each epoch since ({} now, about {}/epoch): too few epochs to tell a leak from a cache filling up; a longer run tells",
            recent.survivors.first().map_or(0, |s| s.birth_epoch),
            bytes(recent.live_bytes),
            bytes(recent.live_bytes / epochs.max(1)),
        )
    }

    /// The allocations were sampled too sparsely to tell the growth the
    /// run had from chance (see [`Analysis::sparse_samples_hint`]).
    pub fn too_few_samples(&self) -> bool {
        self.sparse_samples_hint().is_some()
    }

    /// When the RSS grew by no more than the heap and traced mappings held
    /// unwritten at epoch 1 (see [`Verdict::unwritten_at_start`]): the
    /// words saying that the growth may be their filling, naming the
    /// block that holds the most when the report named it.
    fn filling_words(&self) -> Option<String> {
        let v = &self.verdict;
        let unwritten = v.unwritten_at_start();
        let growth = v.program_rss_growth() - v.file_growth().max(0);
        if growth <= 0 || growth > i128::from(unwritten) {
            return None;
        }
        let largest = self
            .largest_live
            .and_then(|(stack, held)| {
                Some(format!(" (the largest block is {}, {})", self.site_names.get(&stack)?, bytes(held)))
            })
            .unwrap_or_default();
        Some(format!(
            "they held {} more than was resident at epoch 1{largest}: the growth may be their pages written for the first time, as a buffer allocated once and filled as the run goes does (np.empty, torch.empty, a preallocated replay buffer), which stops at its size and is no leak",
            bytes(unwritten)
        ))
    }

    /// With the allocations sampled, and no suspect while the heap and
    /// mappings grew by less than a few samples an epoch: a leak of that
    /// size leaves too few survivors an epoch to be told from chance, also
    /// beside freed memory that malloc keeps.
    fn sparse_samples_hint(&self) -> Option<String> {
        let sampling = self.sampling?;
        let mean = sampling.mean_bytes;
        // A leak no sample fell in leaves the traced memory flat: the RSS
        // shows it, less what malloc kept and the mapped files' pages.
        let v = &self.verdict;
        let traced = v.per_epoch(v.traced_growth());
        // The traced memory is its samples: one sample more or less over the
        // run is chance (a healthy worker's one drawn block that stayed).
        let two_samples = v.traced_growth() >= 2 * i128::from(mean);
        let (grew, growth) = if traced > self.least_growth && two_samples {
            ("the traced memory", traced)
        } else if traced > self.least_growth {
            ("the traced memory", 0)
        } else {
            let explained = v.allocator_free_growth().max(0) + v.file_growth().max(0);
            // The RSS drifts by some pages an epoch: only above the floor.
            let rss = v.per_epoch(v.program_rss_growth() - explained);
            ("the RSS", if rss > self.noise_floor { rss } else { 0 })
        };
        let finer = (growth / SAMPLES_TO_TELL_AN_EPOCH).max(1024);
        // A rate no finer than the one in use would not tell more; a
        // growth of less than a sixteenth of a sample an epoch is noise
        // in a long healthy run.
        // A pile that seems to have stopped may be the chance of where
        // few samples fell: said beside it.
        let sparse = matches!(
            self.verdict.kind,
            VerdictKind::NoGrowth | VerdictKind::AllocatorRetention | VerdictKind::GrowthOutsideHeap
        ) && growth > self.least_growth
            && growth >= mean / SPARSE_SAMPLES_LEAST_SHARE
            && growth < SAMPLES_TO_TELL_AN_EPOCH * mean
            && (finer < mean || !sampling.whole_run);
        let what_to_do = if sampling.whole_run {
            format!("run with TRACER_SAMPLE_BYTES={} (or without it)", floor_argument(finer))
        } else {
            "run with TRACER_WARMUP_SAMPLE_BYTES=0, which records every allocation of the workers".to_string()
        };
        sparse.then(|| {
            format!(
                "the allocations were sampled, one per {} on average, and {grew} grew by {}/epoch, about {} samples an epoch: too few to tell a leak of that size from chance; {what_to_do} to rank what grows",
                bytes(mean),
                bytes(growth),
                samples_words(growth as f64 / mean as f64),
            )
        })
    }

    fn verdict_words(&self, culprit: Option<Culprit<'_>>) -> String {
        let v = &self.verdict;
        let over = format!("{} epoch{}", v.epochs, if v.epochs == 1 { "" } else { "s" });
        match v.kind {
            VerdictKind::TooFewEpochs => {
                let what_to_do = match self.epochs_from {
                    _ if self.trace_cut => "the trace was cut after them (see the warning), and the epochs the program ran after them are not in it: report the whole trace (copied again once the run has ended), or run the job again".to_string(),
                    EpochSource::Program if self.passes_unrepeated => "passes over a DataLoader were seen, but none repeated from one place, so the run was cut into time slices: where a loader keeps its workers (persistent_workers=True) and does not shuffle, run with TRACER_PYTHON_OBJECTS=1 so that its passes are seen, or call tracer_mark(label) at the end of each epoch".to_string(),
                    EpochSource::Program => match self.time_slices_set {
                        Some(seconds) => format!(
                            "the run was cut into time slices of {seconds} s: call tracer_mark(label) at the end of each training step or epoch, or set TRACER_EPOCH_SECONDS shorter, or run longer"
                        ),
                        None => "call tracer_mark(label) at the end of each training step or epoch, or set TRACER_EPOCH_SECONDS to cut the run into time slices, and run longer".to_string(),
                    },
                    EpochSource::Marks => format!(
                        "each tracer_mark closed one{}: run {MIN_EPOCHS} marked epochs or more",
                        if self.exit_recorded { ", and the exit closes the last, which is not analysed" } else { "" }
                    ),
                    EpochSource::DataLoaderPasses { seen } => format!(
                        "the epochs were cut where DataLoader passes began, {seen} passes were seen, and the last {}, which is not analysed: run {} passes or more, or call tracer_mark(label) at the end of each epoch (where the job made more passes, the later ones went unseen: a loader with persistent_workers=True that does not shuffle starts them without an allocation the tracer sees unless TRACER_PYTHON_OBJECTS=1)",
                        if self.exit_recorded { "ends with the exit" } else { "had not ended where the trace stops" },
                        MIN_EPOCHS + 1
                    ),
                    EpochSource::ParentsEpochs { parent } => format!(
                        "this process follows its parent's epochs{} and closed too few of them. Either it ended early, as a DataLoader's worker does without persistent_workers=True (started again for every pass) or a multiprocessing pool's with maxtasksperchild, and what it allocated went when it exited: that cannot pile up from epoch to epoch, and its parent's report covers the job; or its parent closed too few epochs, which its parent's report says how to mend",
                        parent.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
                    ),
                };
                let analysable = self.analysed_snapshots().len();
                format!(
                    "only {analysable} epoch{} to analyze; the leak analysis needs at least {MIN_EPOCHS} (epoch 0 is warm-up and the last two have not had time to free their allocations): {what_to_do}",
                    if analysable == 1 { "" } else { "s" }
                )
            }
            VerdictKind::HeapLeak | VerdictKind::BoundedCache => {
                let top = culprit.unwrap_or_else(|| Culprit::suspect(&self.suspects[0], "the top suspect"));
                let growth = format!(
                    "about {}/epoch {}",
                    bytes(top.growth_bytes_per_epoch),
                    top.memory.words().map(|words| format!("of {words} ")).unwrap_or_default(),
                );
                let through = if top.suspects > 1 { format!(" through {} stacks", top.suspects) } else { String::new() };
                // Other lines may keep as much again (a kept loss's graph:
                // each of the forward's lines keeps its activations).
                let in_all = if self.suspects.len() > top.suspects {
                    let all = bytes(self.suspects_growth());
                    format!(", {} suspects in all keeping about {all}/epoch", self.suspects.len())
                } else {
                    String::new()
                };
                let live = match self.late_start(top.growth_since) {
                    Some(epoch) => format!("since epoch {epoch} ({} now)", bytes(top.live_bytes)),
                    None => format!("({} now)", bytes(top.live_bytes)),
                };
                let traced = traced_growth_words(v);
                let mut msg = match top.known_as {
                    Some(known) if v.kind == VerdictKind::BoundedCache => format!(
                        "{} grew by {growth}{live}, charged to {}{through}{in_all}: a cache or buffer the library keeps up to a bound of its own, which stops growing once full, not a leak (see suspect #{}); {traced} over {over}",
                        known.what,
                        top.named(),
                        known.rank
                    ),
                    Some(known) if known.incidental => format!(
                        "{} grew by {growth}{live}, charged to {}{through}{in_all}: that line needed more of them, and need not be what holds them; {traced} over {over} (see suspect #{})",
                        known.what,
                        top.named(),
                        known.rank
                    ),
                    Some(known) => format!(
                        "{} keeps {growth}alive {live}{through}{in_all}; {traced} over {over}; the memory is {} (see suspect #{})",
                        top.subject(),
                        known.what,
                        known.rank
                    ),
                    None => {
                        format!("{} keeps {growth}alive {live}{through}{in_all}; {traced} over {over}", top.subject())
                    }
                };
                // Sampled survivors jump about from epoch to epoch.
                if let Some(((a, first), (b, last))) =
                    self.settled.filter(|_| self.sampling.is_none()).and_then(|settled| top.speeding_up(settled))
                {
                    msg.push_str(&format!(
                        "; it keeps more every epoch ({} of epoch {a}, {} of epoch {b}): the figure per epoch, their mean, understates what is to come",
                        bytes(first),
                        bytes(last)
                    ));
                } else if let Some(((a, earlier), (b, later))) =
                    self.settled.filter(|_| self.sampling.is_none()).and_then(|settled| top.slowing_down(settled))
                {
                    msg.push_str(&format!(
                        "; it keeps less and less (the settled epochs from {a} kept {}/epoch, those from {b} {}/epoch): a cache filling up towards its bound slows so, and a longer run tells whether it stops",
                        bytes(earlier),
                        bytes(later)
                    ));
                }
                if let Some((first, last, gap, rate)) = self
                    .settled
                    .filter(|_| self.sampling.is_none() && !self.suspects.first().is_some_and(|s| s.grown_in_place))
                    .and_then(|settled| top.quiet_since(settled))
                {
                    msg.push_str(&format!(
                        "; it kept nothing born after epoch {last}, {gap} settled epochs before the last: it may have stopped, and from epoch {first} to {last} it kept {}/epoch",
                        bytes(rate)
                    ));
                }
                if self.suspects.first().is_some_and(|s| s.grown_in_place) {
                    msg.push_str("; the top suspect is one block, larger at every epoch's end, its newest copy alive: one made larger (realloc, a growing vector, string or list), or a temporary alive at the marks that grows with its input (a batch of a growing sequence length)");
                }
                if self.steady_growth_promoted && self.suspects.iter().any(|s| s.below_floor) {
                    let above_floor = self.verdict.per_epoch(v.traced_growth()) > self.noise_floor;
                    msg.push_str(&format!(
                        "; stacks below the noise floor ({}/epoch) are ranked because the heap and traced mappings rose {}",
                        bytes(self.noise_floor),
                        traced_rise_words(self.traced_rise, steadily_words(v.epochs), above_floor)
                    ));
                }
                if rss_outgrew_traced_memory(v) {
                    let rest = v.program_rss_growth() - v.traced_growth().max(0);
                    // Freed memory the allocator kept is resident, counted
                    // in the RSS and in none of the live bytes.
                    let kept_free = v.allocator_free_growth().clamp(0, rest);
                    // Pages of mapped files (a worker reading its dataset)
                    // are resident too, and in no live bytes.
                    let files = v.file_growth().clamp(0, rest);
                    let rest_words = if files > FILE_GROWTH_NAMED {
                        format!("{}, {} of it pages of mapped files", signed(rest), signed(files))
                    } else {
                        signed(rest)
                    };
                    let outside = if 4 * kept_free >= rest {
                        let retention = v.allocator.retention();
                        // Mending the suspect's line leaves this memory kept.
                        let remedy = if kept_free >= v.traced_growth() {
                            format!("; for the freed memory kept, {}", retention.remedy)
                        } else {
                            String::new()
                        };
                        format!(
                            "the rest ({rest_words}) is freed memory {} kept ({} of it, the `malloc free` column) and memory outside what the tracer sees{remedy}",
                            retention.who,
                            signed(kept_free)
                        )
                    } else {
                        format!("the rest ({rest_words}) is outside what the tracer sees")
                    };
                    msg.push_str(&format!(
                        "; {}, much more than the heap and mappings: {outside}",
                        rss_growth_words(v, "grew")
                    ));
                } else if mappings_outgrew_rss(v) {
                    msg.push_str(&format!(
                        "; the mappings' bytes are address space, and the {}: most of what they grew by is not resident (reserved, or not yet written)",
                        rss_growth_words(v, "grew")
                    ));
                } else if allocator_kept_much_beside(v) {
                    msg.push_str(&format!(
                        "; {} also kept {} more freed memory than at epoch 1 (the `malloc free` column), resident and part of the RSS's growth ({})",
                        v.allocator.retention().who,
                        signed(v.allocator_free_growth()),
                        signed(v.program_rss_growth())
                    ));
                }
                if let Some(warning) = &v.heap_not_traced {
                    msg.push_str(&format!("; the heap was not traced: {warning}"));
                }
                if private_outgrew_traced_memory(v) {
                    msg.push_str(&format!(
                        "; this forked process's private memory grew by {}, much more than the heap and mappings: it is also copying pages it shares with its parent as it writes them",
                        signed(v.private_growth())
                    ));
                }
                msg
            }
            VerdictKind::CopiedFromParent => format!(
                "this forked process's private memory grew by {} over {over} ({}/epoch), while {}; {}: it is copying the pages it shares with its parent as it writes them. In a DataLoader worker that is usually the Dataset's Python objects (lists, dicts, strings made before the workers were forked): reading one writes its reference count, which copies its page; hold such data in numpy arrays, tensors or Arrow tables, whose elements are not Python objects",
                signed(v.private_growth()),
                bytes(v.per_epoch(v.private_growth())),
                rss_growth_words(v, "changed"),
                traced_growth_words(v),
            ),
            VerdictKind::AllocatorRetention => {
                let Retention { who: allocator, what, remedy } = v.allocator.retention();
                format!(
                    "{} while the live heap and traced mappings {}, and {allocator} held {} more freed memory than at the start ({} now): {what}; {remedy}; no heap or mapping site is responsible",
                    rss_growth_over_words(v, &over),
                    traced_change_words(v),
                    signed(v.allocator_free_growth()),
                    bytes(v.allocator_free_end),
                )
            }
            VerdictKind::FilePages => format!(
                "{} while the live heap and traced mappings {}, and the resident pages of files mapped into the process grew by {} ({} now): pages of mapped files, such as a dataset read through np.memmap, Arrow or Hugging Face datasets, weights loaded with mmap, or libraries' code run for the first time. The kernel takes such pages back when memory runs short and reads them again when they are used, so they do not run the machine out of memory as a leak does (a mapping the program keeps, as tensors of torch.load(mmap=True) kept in a list, keeps its address space and files open); no heap or anonymous mapping site piles up memory",
                rss_growth_over_words(v, &over),
                traced_change_words(v),
                signed(v.file_growth()),
                bytes(v.file_end),
            ),
            VerdictKind::GrowthOutsideHeap => {
                let outside = "outside what the tracer sees (private or read-only file mappings, mappings made by raw system calls or inside glibc, allocator arenas not returned to the OS, thread stacks, GPU driver)";
                let why = self.filling_words().map_or(
                    format!("the growth is {outside}; no heap or mapping site is responsible"),
                    |filling| format!("{filling}; or the growth is {outside}; no heap or mapping site piles up memory epoch after epoch"),
                );
                format!(
                    "{} while the live heap and traced mappings {}; {why}",
                    rss_growth_over_words(v, &over),
                    traced_change_words(v),
                )
            }
            VerdictKind::HeapNotTraced => format!(
                "the trace holds none of the heap, whose growth cannot be told: {}; no traced mapping keeps memory alive epoch after epoch, and over {over} {}",
                v.heap_not_traced.as_deref().unwrap_or_default(),
                rss_growth_words(v, "changed"),
            ),
            VerdictKind::NoGrowth if self.growth_below_floor() => {
                let below = &self.below_floor;
                let largest = if below.stacks > 1 {
                    format!(", the largest {}/epoch", bytes(below.largest_bytes_per_epoch))
                } else {
                    String::new()
                };
                let through = match culprit {
                    Some(line) if line.suspects == below.stacks => format!(", all of it through {}", line.named()),
                    Some(line) => format!(
                        ", {}/epoch of it through {} in {} stack{}",
                        bytes(line.growth_bytes_per_epoch),
                        line.subject(),
                        line.suspects,
                        if line.suspects == 1 { "" } else { "s" }
                    ),
                    None => String::new(),
                };
                format!(
                    "no stack keeps more than the noise floor ({}/epoch) alive epoch after epoch, but {} over {over}: {} below that floor{largest}{through}; run the report with --noise-floor {} to rank them",
                    bytes(self.noise_floor),
                    traced_growth_words(v),
                    below.keep_words(),
                    floor_argument(below.largest_bytes_per_epoch / 2),
                )
            }
            VerdictKind::NoGrowth => format!(
                "no leak found: no allocation or mapping site keeps {} alive epoch after epoch; over {over} {}{} and the live heap by {}{}{}",
                // A rise at every epoch below the least growth that counts
                // is one: the sentence says how small.
                if self.traced_rise == TracedRise::EveryEpoch {
                    format!("{}/epoch or more", bytes(self.least_growth))
                } else {
                    "memory".to_string()
                },
                rss_growth_words(v, "changed"),
                if v.file_growth() > FILE_GROWTH_NAMED {
                    format!(" ({} of it pages of mapped files)", signed(v.file_growth()))
                } else {
                    String::new()
                },
                signed(v.heap_growth()),
                if v.mapped_start == 0 && v.mapped_end == 0 {
                    String::new()
                } else {
                    format!(", traced mappings by {}", signed(v.mapped_growth()))
                },
                if allocator_kept_the_change(v) {
                    format!(
                        "; {} of that change is freed memory {} kept (the `malloc free` column), not memory the program holds",
                        signed(v.allocator_free_growth()),
                        v.allocator.retention().who
                    )
                } else {
                    String::new()
                }
            ),
        }
    }
}

/// Samples an epoch a sampled leak needs for its survivors to show in most
/// epochs (at fewer, an epoch has none with some chance: e^-n).
const SAMPLES_TO_TELL_AN_EPOCH: u64 = 8;

/// A block of this many samples' bytes at least is sampled at each of its
/// copies with all but certainty (1 - e^-4 each): one grown in place can be
/// told so when sampled.
const SAMPLES_TO_SEE_A_BLOCK: u64 = 4;

/// Growth of less than 1/N of a sample an epoch, sampled, is too little to
/// send a user to a finer rate: a long healthy run's drift.
const SPARSE_SAMPLES_LEAST_SHARE: u64 = 16;

/// A number of samples, to two places below one tenth (a sampled run
/// marking every step has a few hundredths of a sample an epoch).
fn samples_words(samples: f64) -> String {
    if samples < 0.1 {
        format!("{samples:.2}")
    } else {
        format!("{samples:.1}")
    }
}

/// A byte count as `--noise-floor` and `TRACER_SAMPLE_BYTES` take it:
/// whole KiB as "12k".
fn floor_argument(bytes: u64) -> String {
    if bytes >= 1024 {
        format!("{}k", bytes / 1024)
    } else {
        bytes.to_string()
    }
}

/// The number of analysis snapshots for a trace with `total` snapshots
/// whose last one has cause Exit or not.
pub fn analysis_snapshot_count(total: usize, last_is_exit: bool) -> usize {
    if last_is_exit && total > MIN_EPOCHS - 1 {
        total - 1
    } else {
        total
    }
}

/// Runs the leak analysis on a loaded trace; stacks with the same
/// `site_key` (their symbolized frames: see [`crate::sites::SiteKeys`])
/// count as one site.
pub fn analyze<K: Hash + Eq>(trace: &Trace, floor: NoiseFloor, site_key: impl FnMut(u32) -> K) -> Analysis {
    let first = trace.warm_up_snapshots();
    let total = trace.snapshots.len() - first;
    let last_is_exit = trace.snapshots.last().is_some_and(|s| s.cause.ends_the_process());
    let k = analysis_snapshot_count(total, last_is_exit);
    let dropped_exit = k < total;
    let reference = first + k.saturating_sub(1);
    let snap = |i: usize| &trace.snapshots[i.min(trace.snapshots.len() - 1)];
    let start = first + usize::from(k > 1);
    let program_rss: Vec<u64> =
        (start..=reference).map(|i| snap(i).rss_bytes.saturating_sub(snap(i).tracer_bytes)).collect();
    let mut verdict = Verdict {
        kind: VerdictKind::TooFewEpochs,
        epochs: reference.saturating_sub(start),
        rss_start: snap(start).rss_bytes,
        rss_end: snap(reference).rss_bytes,
        heap_start: snap(start).heap_live_bytes,
        heap_end: snap(reference).heap_live_bytes,
        mapped_start: snap(start).mapped_live_bytes,
        mapped_end: snap(reference).mapped_live_bytes,
        tracer_start: snap(start).tracer_bytes,
        tracer_end: snap(reference).tracer_bytes,
        private_start: snap(start).private_dirty_bytes,
        private_end: snap(reference).private_dirty_bytes,
        allocator_free_start: snap(start).allocator_free_bytes,
        allocator_free_end: snap(reference).allocator_free_bytes,
        allocator: Allocator::of(&trace.process),
        file_start: snap(start).rss_file_bytes,
        file_end: snap(reference).rss_file_bytes,
        heap_not_traced: trace
            .process
            .settings
            .iter()
            .find(|(name, warning)| {
                name == trace_format::WARNING_SETTING && warning.contains(trace_format::HEAP_NOT_TRACED)
            })
            .map(|(_, warning)| warning.clone()),
        rss_rose_steadily: rose_steadily(&program_rss),
        rss_still_rising: still_rising(&program_rss),
    };
    let traced_at_start = snap(start).heap_live_bytes + snap(start).mapped_live_bytes;
    let settled_epochs = (k as u64).saturating_sub(3);
    let least_growth = per_epoch_floor(NOISE_FLOOR_MIN, settled_epochs);
    let noise_floor = match floor {
        NoiseFloor::Scaled => {
            per_epoch_floor(NOISE_FLOOR_MIN.max(traced_at_start / NOISE_FLOOR_HEAP_DIVISOR), settled_epochs)
        }
        NoiseFloor::Bytes(bytes) => bytes,
    };
    let mut analysis = Analysis {
        epochs_from: EpochSource::of(trace),
        first,
        snapshots: k,
        dropped_exit,
        exit_recorded: last_is_exit,
        trace_cut: !matches!(trace.end, crate::trace::EndKind::Complete),
        time_slices_set: trace.process.time_slice_seconds(),
        reference,
        settled: None,
        reference_epoch: 0,
        noise_floor,
        least_growth,
        sampling: trace.sampling(),
        stopped: None,
        stopped_piles: Vec::new(),
        slices_while_passes_unseen: trace
            .process
            .setting(trace_format::EPOCHS_SETTING)
            .is_some_and(|epochs| epochs.ends_with(trace_format::SLICES_WHILE_PASSES_UNSEEN)),
        passes_unrepeated: trace.passes_never_repeated(),
        mixed_epoch_causes: {
            let causes = || trace.snapshots.iter().skip(first).take(k).map(|s| s.cause);
            causes().any(|c| c == EpochCause::Timer)
                && causes().any(|c| matches!(c, EpochCause::Mark | EpochCause::Auto))
        },
        time_slice_seconds: {
            let analysed = &trace.snapshots[start.min(reference)..=reference];
            let seconds = |s: &trace_format::Snapshot| s.elapsed_ns as f64 / 1e9;
            match analysed {
                [first, .., last] if analysed.iter().all(|s| s.cause == EpochCause::Timer) => {
                    Some((seconds(last) - seconds(first)) / (analysed.len() - 1) as f64)
                }
                _ => None,
            }
        },
        suspects: Vec::new(),
        below_floor: BelowFloor::default(),
        grown_in_place: Vec::new(),
        few_settled_epochs: Vec::new(),
        few_new_since_middle: Vec::new(),
        stopped_with_line: Vec::new(),
        site_names: IntMap::default(),
        largest_live: None,
        traced_rise: TracedRise::NotSteadily,
        steady_growth_promoted: false,
        verdict: verdict.clone(),
    };
    if k < MIN_EPOCHS {
        return analysis;
    }
    let (Some(state), Some(first_state)) = (trace.state(reference), trace.state(start)) else {
        // The loader always keeps these; without them nothing can be said.
        return analysis;
    };
    analysis.largest_live = state.live_bytes_by_stack().into_iter().max_by_key(|&(stack, bytes)| (bytes, stack));
    // The last two epochs before the reference are not settled (see
    // `trace::settled_by`): the newest survivors may be a loop's latest.
    let settled_hi_index = first + k - 3;
    let settled_lo = trace.snapshots[start].epoch;
    let settled_hi = trace.snapshots[settled_hi_index].epoch;
    analysis.settled = Some((settled_lo, settled_hi));
    analysis.reference_epoch = trace.snapshots[reference].epoch;
    let settled_survivor = |birth: u32, c: &Counts| (settled_lo..=settled_hi).contains(&birth) && c.live_count > 0;

    let sites = Sites::group(
        state.pairs.iter().filter(|((_, birth), c)| settled_survivor(*birth, c)).map(|&((stack, _), _)| stack),
        site_key,
    );
    #[derive(Default)]
    struct PerSite {
        live_bytes: u64,
        live_count: u64,
        settled_hits: usize,
        settled_bytes: u64,
        /// The first and last settled birth epochs with survivors.
        settled_births: Option<(u32, u32)>,
        /// The first and last birth epochs with survivors, settled or not.
        births: Option<(u32, u32)>,
    }
    let with_birth = |births: Option<(u32, u32)>, birth: u32| {
        Some(births.map_or((birth, birth), |(lo, hi)| (lo.min(birth), hi.max(birth))))
    };
    let mut per_site: IntMap<u32, PerSite> = IntMap::default();
    // The settled survivors' bytes of each site by birth epoch (a site's
    // stacks may each have survivors of one epoch).
    let mut settled_by_birth: IntMap<u32, Vec<(u32, u64)>> = IntMap::default();
    for &((stack, birth), c) in &state.pairs {
        if c.live_count == 0 && c.live_bytes == 0 {
            continue;
        }
        let site = sites.of(stack);
        let entry = per_site.entry(site).or_default();
        entry.live_bytes += c.live_bytes;
        entry.live_count += c.live_count;
        if c.live_count > 0 {
            entry.births = with_birth(entry.births, birth);
        }
        if settled_survivor(birth, &c) {
            entry.settled_bytes += c.live_bytes;
            settled_by_birth.entry(site).or_default().push((birth, c.live_bytes));
        }
    }
    for (site, by_birth) in settled_by_birth {
        let births = births_that_count(by_birth);
        let entry = per_site.entry(site).or_default();
        entry.settled_hits = births.len();
        entry.settled_births = births.first().copied().zip(births.last().copied());
    }
    let mut live_at_1: IntMap<u32, u64> = IntMap::default();
    for (stack, bytes) in first_state.live_bytes_by_stack() {
        *live_at_1.entry(sites.of(stack)).or_default() += bytes;
    }
    let traced: Vec<u64> = (start..=reference).map(|i| snap(i).heap_live_bytes + snap(i).mapped_live_bytes).collect();
    // From a snapshot of the earlier half of the epochs on, a site piling
    // up keeps what it allocates: its live bytes grow by what its survivors
    // of the settled epochs since hold. One that left none filled and
    // stopped (the survivors of the last, unsettled epochs may be a loop's
    // latest, freed at its next turn); one whose live bytes grew by less
    // than half of them freed older entries as it made new ones (a cache
    // or buffer at its bound, an LRU, a replay buffer), with survivors of
    // every epoch and a total that stays put. Both sides count what was
    // settled at their snapshot: a batch alive at the snapshot's mark is
    // not what the site kept.
    // Two settled epochs after it at least: a site leaking every other
    // epoch leaves survivors in one of them.
    let earlier_half = start + 1..=((start + reference) / 2).min(settled_hi_index.saturating_sub(2));
    let middle = if earlier_half.is_empty() { None } else { trace.live_at_checkpoint_in(earlier_half) };
    // What a site held at the middle, settled by then, and still holds of
    // it; what it kept of the settled epochs since.
    let (mut held_at_middle, mut still_held, mut born_since): (IntMap<u32, u64>, IntMap<u32, u64>, IntMap<u32, u64>) =
        Default::default();
    if let Some((index, at_middle)) = middle {
        for (&stack, &bytes) in at_middle {
            *held_at_middle.entry(sites.of(stack)).or_default() += bytes;
        }
        let since = snap(index).epoch;
        for &((stack, birth), c) in &state.pairs {
            let table = if settled_by(birth, since) {
                &mut still_held
            } else if birth > since && birth <= settled_hi {
                &mut born_since
            } else {
                continue;
            };
            *table.entry(sites.of(stack)).or_default() += c.live_bytes;
        }
    }
    // A block made larger again and again (see `grown_in_place`) has one
    // survivor, its newest copy: not a pile to stop.
    let stopped = |site: u32, s: &PerSite| {
        if s.settled_hits < 2 {
            return false;
        }
        let of = |table: &IntMap<u32, u64>| table.get(&site).copied().unwrap_or(0);
        let born = of(&born_since);
        let grew = (of(&still_held) + born).saturating_sub(of(&held_at_middle));
        middle.is_some() && (born == 0 || 2 * grew < born)
    };
    let mut stopped_piles = Vec::new();
    let mut stopped_with_line = Vec::new();
    let mut below_floor = BelowFloor::default();
    let mut grown_in_place = Vec::new();
    let mut few_settled_epochs = Vec::new();
    let epochs = verdict.epochs.max(1) as u64;
    let settled_births: Vec<u32> = (start..=settled_hi_index).map(|i| snap(i).epoch).collect();
    let whole_span = GrowthSpan { epochs: settled_epochs, since: settled_lo };
    // Over the epochs since its first survivor's when it left survivors in
    // half of them at least (a leak that began late), else over all (a
    // stack that leaks now and then, as a helper's called from one place
    // in some epochs and another in others).
    // A leak of every other epoch whose first settled epoch left none did
    // not begin late; survivors of one settled epoch show no rate (a
    // pymalloc arena opened in the last of two).
    let span_of = |s: &PerSite| match s.settled_births {
        Some((first, last)) => {
            let epochs = (settled_births.len() - settled_births.partition_point(|&e| e < first)) as u64;
            let dense = 2 * s.settled_hits as u64 >= epochs;
            let apart = (last - first) / (s.settled_hits.max(2) as u32 - 1);
            if dense && s.settled_hits >= 2 && first - settled_lo >= apart.max(1) {
                GrowthSpan { epochs, since: first }
            } else {
                whole_span
            }
        }
        None => whole_span,
    };
    // A leak that began after the snapshot a pile is compared from, where
    // it held nothing settled, with survivors of half the settled epochs
    // since it began, three at least: too late to leave survivors of half
    // of them all. A bounded FIFO that keeps its last epochs' entries held
    // older ones there.
    let middle_epoch = middle.map(|(index, _)| snap(index).epoch);
    analysis.traced_rise = if rose_steadily(&traced) {
        TracedRise::EveryEpoch
    } else if analysis.verdict.rss_rose_steadily && rose_by_steps(&traced) {
        TracedRise::InSteps
    } else {
        TracedRise::NotSteadily
    };
    // A buffer that doubles (see [`rose_by_steps`]) may have made its
    // newest copy at the middle epoch itself.
    let made_by_middle = |birth: u32| {
        middle_epoch.is_some_and(|epoch| birth < epoch || birth == epoch && analysis.traced_rise != TracedRise::InSteps)
    };
    let began_late = |site: u32, s: &PerSite, first: u32| {
        s.settled_hits >= 3
            && middle_epoch.is_some_and(|epoch| first > epoch)
            && !held_at_middle.contains_key(&site)
            && span_of(s).since == first
    };
    let pile = |site: u32, s: &PerSite| {
        let Some((first, last)) = s.settled_births else { return Pile::No };
        let newest = s.births.map_or(last, |(_, newest)| newest);
        match analysis.pile(s.settled_hits, first, last, newest) {
            Pile::No if began_late(site, s, first) => analysis.still(s.settled_hits, first, last, newest, first),
            pile => pile,
        }
    };
    let mut suspects: Vec<Suspect> = per_site
        .into_iter()
        .filter_map(|(stack, s)| {
            let span = span_of(&s);
            let growth = s.settled_bytes / span.epochs;
            let live_before = live_at_1.get(&stack).copied().unwrap_or(0);
            let grew = s.live_bytes > live_before;
            let site_pile = pile(stack, &s);
            let suspect = |growth: u64, growth_span: GrowthSpan, grown_in_place: bool| Suspect {
                stack,
                other_stacks: sites.others(stack).to_vec(),
                growth_bytes_per_epoch: growth,
                growth_span,
                live_bytes: s.live_bytes,
                live_count: s.live_count,
                settled_with_survivors: s.settled_hits,
                survivors: Vec::new(),
                memory: trace.stacks.memory(stack),
                below_floor: growth <= noise_floor,
                grown_in_place,
                piles_up_only_with_line: false,
            };
            if grew && (stopped(stack, &s) || site_pile == Pile::Stopped) {
                // One that keeps less than the least growth that counts
                // is not worth a word (a few small blocks left by each of
                // the earlier evaluations).
                if site_pile != Pile::No && s.live_bytes >= least_growth {
                    stopped_piles.push((s.live_bytes, stack, s.settled_births));
                }
                // Its line may go on piling up along another path (a
                // helper called from one caller, then from another): with
                // it, the stack is part of a leak still.
                if site_pile == Pile::Stopped && growth > 0 {
                    few_settled_epochs.push(Suspect { piles_up_only_with_line: true, ..suspect(growth, span, false) });
                    stopped_with_line.push(stack);
                }
                return None;
            }
            let piles_up = site_pile == Pile::Growing && grew && growth > 0;
            if !piles_up {
                let grown = (s.live_bytes - live_before.min(s.live_bytes)) / epochs;
                // A block whose newest copy was there at the middle
                // snapshot has not grown since (made once, or grown and
                // stopped), nor has one made after the first snapshot, when
                // no site's block was there, and settled since: a block made
                // once, an arena opened. Nor has a mapping the site held
                // none of at the first snapshot or the middle one, made in
                // the last epochs (a pymalloc arena opened late): a heap
                // block made there may be a buffer's newest copy whose older
                // ones came from another stack, a mapping is made whole.
                let mapped_late = trace.stacks.memory(stack) != Memory::Heap
                    && live_before == 0
                    && !held_at_middle.contains_key(&stack);
                let made_once = s.births.is_some_and(|(lo, hi)| {
                    lo == hi && (made_by_middle(hi) || (live_before == 0 && hi <= settled_hi) || mapped_late)
                });
                // Sampled, a block is seen at each of its copies only when
                // it is several samples large: a small one, sampled once,
                // is no block made larger.
                let seen_whole = analysis
                    .sampling
                    .is_none_or(|sampling| s.live_bytes >= SAMPLES_TO_SEE_A_BLOCK * sampling.mean_bytes);
                if grown >= least_growth && !made_once && seen_whole {
                    // One block made larger leaves the survivors of one
                    // birth epoch at most, its newest copy; survivors of
                    // more are allocations that piled up in some epochs.
                    grown_in_place.push(suspect(grown, whole_span, s.births.is_none_or(|(lo, hi)| lo == hi)));
                }
                // Survivors of settled epochs, too few of them.
                if grew && growth > 0 {
                    few_settled_epochs.push(Suspect { piles_up_only_with_line: true, ..suspect(growth, span, false) });
                }
                return None;
            }
            let suspect = suspect(growth, span, false);
            if growth > noise_floor {
                return Some(suspect);
            }
            below_floor.stacks += 1;
            below_floor.growth_bytes_per_epoch += growth;
            below_floor.largest_bytes_per_epoch = below_floor.largest_bytes_per_epoch.max(growth);
            below_floor.largest.push(suspect);
            None
        })
        .collect();
    analysis.stopped = stopped_of(&stopped_piles);
    analysis.stopped_piles = stopped_piles;
    suspects.sort_by(by_rank);
    below_floor.largest.sort_by(by_rank);
    below_floor.largest.truncate(STACKS_BY_LINE);
    grown_in_place.sort_by(by_rank);
    grown_in_place.truncate(STACKS_BY_LINE);
    few_settled_epochs.sort_by(by_rank);
    few_settled_epochs.truncate(STACKS_BY_LINE);
    // Survivors for the suspects and the stacks kept that may become
    // suspects: below the floor or with too few settled epochs, with
    // their line, or in a steady rise (a stack may be kept twice).
    let mut listed: Vec<&mut Suspect> = suspects
        .iter_mut()
        .chain(below_floor.largest.iter_mut())
        .chain(grown_in_place.iter_mut())
        .chain(few_settled_epochs.iter_mut())
        .collect();
    let mut survivors: IntMap<u32, Vec<Survivor>> = listed.iter().map(|s| (s.stack, Vec::new())).collect();
    for &((stack, birth), c) in &state.pairs {
        if let Some(site) = survivors.get_mut(&sites.of(stack)) {
            if c.live_count > 0 {
                site.push(Survivor { birth_epoch: birth, count: c.live_count, bytes: c.live_bytes });
            }
        }
    }
    for site in survivors.values_mut() {
        site.sort_by_key(|v| v.birth_epoch);
        // A site's stacks may each have survivors of one epoch.
        site.dedup_by(|later, kept| {
            let same = later.birth_epoch == kept.birth_epoch;
            if same {
                kept.count += later.count;
                kept.bytes += later.bytes;
            }
            same
        });
    }
    for s in &mut listed {
        s.survivors = survivors.get(&s.stack).cloned().unwrap_or_default();
    }

    verdict.kind = verdict_kind(!suspects.is_empty(), &verdict);
    analysis.verdict = verdict;
    analysis.suspects = suspects;
    analysis.below_floor = below_floor;
    analysis.grown_in_place = grown_in_place;
    analysis.few_new_since_middle =
        few_settled_epochs.iter().map(|s| s.stack).filter(|site| !held_at_middle.contains_key(site)).collect();
    stopped_with_line.retain(|stack| few_settled_epochs.iter().any(|s| s.stack == *stack));
    analysis.stopped_with_line = stopped_with_line;
    analysis.few_settled_epochs = few_settled_epochs;
    analysis
}

/// The stacks that make a steady growth of the traced memory
/// (`traced_growth` an epoch, above the noise floor, while no stack is),
/// largest first, until they account for it: those below the floor that
/// pile up like suspects (taken out of `below_floor`) and blocks grown in
/// place, each keeping at least `least_growth` an epoch.
fn promote_steady_growth(
    below_floor: &mut BelowFloor,
    grown_in_place: Vec<Suspect>,
    traced_growth: u64,
    least_growth: u64,
) -> Vec<Suspect> {
    // Each with whether it is below the floor's (else it grew without piling up).
    let mut candidates: Vec<(Suspect, bool)> = std::mem::take(&mut below_floor.largest)
        .into_iter()
        .map(|s| (s, true))
        .chain(grown_in_place.into_iter().map(|s| (s, false)))
        .collect();
    candidates.sort_by(|a, b| by_rank(&a.0, &b.0));
    let mut accounted = 0;
    let mut promoted = Vec::new();
    for (candidate, below) in candidates {
        let growth = candidate.growth_bytes_per_epoch;
        if accounted >= traced_growth || growth < least_growth {
            if below {
                below_floor.largest.push(candidate);
            }
            continue;
        }
        accounted += growth;
        if below {
            below_floor.stacks -= 1;
            below_floor.growth_bytes_per_epoch -= growth;
        }
        promoted.push(candidate);
    }
    below_floor.largest_bytes_per_epoch = below_floor.largest.first().map_or(0, |s| s.growth_bytes_per_epoch);
    promoted
}

/// The verdict's kind, from whether there are suspects and how the memory grew.
fn verdict_kind(suspects: bool, verdict: &Verdict) -> VerdictKind {
    if suspects {
        VerdictKind::HeapLeak
    } else if verdict.heap_not_traced.is_some() {
        VerdictKind::HeapNotTraced
    } else if private_outgrew_traced_memory(verdict) {
        VerdictKind::CopiedFromParent
    } else if allocator_kept_the_growth(verdict) {
        VerdictKind::AllocatorRetention
    } else if file_pages_made_the_growth(verdict) {
        VerdictKind::FilePages
    } else if rss_outgrew_traced_memory(verdict) {
        VerdictKind::GrowthOutsideHeap
    } else {
        VerdictKind::NoGrowth
    }
}

/// The suspects' order: growth, then live bytes, then stack id.
fn by_rank(a: &Suspect, b: &Suspect) -> std::cmp::Ordering {
    b.growth_bytes_per_epoch
        .cmp(&a.growth_bytes_per_epoch)
        .then(b.live_bytes.cmp(&a.live_bytes))
        .then(a.stack.cmp(&b.stack))
}

#[cfg(test)]
mod tests;
