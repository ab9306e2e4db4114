//! The live-allocation table of the heap and its per-(stack, birth epoch)
//! counters.
//!
//! A forked child starts tables of its own and only reads the ones it
//! inherited. A DataLoader worker is forked with the parent's tables in it
//! (hundreds of MB under torch): had it written to them, every page it
//! touched would have been copied, and its snapshots would have scanned
//! them. An inherited allocation freed in the child is looked up there,
//! remembered as freed, and subtracted from the inherited totals; the
//! child's trace counts inherited memory in its totals only (its sites are
//! in the parent's trace).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use dashmap::DashMap;
use trace_format::SiteCounters;

use crate::block_filter::BlockFilter;
use crate::fast_hash::{BuildAddressHasher, BuildWordHasher};
use crate::room::{self, OutOfMemory};
use crate::sampling::Sampling;
use crate::sites::{Scope, Sites, Totals, STRIPES};
use crate::stacks::StackId;

#[derive(Clone, Copy)]
struct LiveAllocation {
    /// The size in the low bits; in the top byte, whether it is a sample
    /// (the top bit) and the stripe of its site counters (no allocation
    /// reaches 2^56 bytes): the entry stays 16 bytes.
    size_and_tag: u64,
    stack: StackId,
    birth_epoch: u32,
}

const TAG_SHIFT: u32 = 56;
const SAMPLE_BIT: u64 = 1 << 63;

impl LiveAllocation {
    fn new(size: usize, sample: bool, stripe: u8, stack: StackId, birth_epoch: u32) -> LiveAllocation {
        let size = (size as u64).min((1 << TAG_SHIFT) - 1);
        let tag = u64::from(stripe) << TAG_SHIFT | if sample { SAMPLE_BIT } else { 0 };
        LiveAllocation { size_and_tag: size | tag, stack, birth_epoch }
    }

    fn size(&self) -> u64 {
        self.size_and_tag & ((1 << TAG_SHIFT) - 1)
    }

    fn stripe(&self) -> u8 {
        ((self.size_and_tag & !SAMPLE_BIT) >> TAG_SHIFT) as u8
    }

    /// Recorded as a sample: it stands for the many allocations it was drawn from.
    fn is_sample(&self) -> bool {
        self.size_and_tag & SAMPLE_BIT != 0
    }
}

/// Fork generations with tables of their own; a deeper descendant keeps
/// writing to the last generation's (inherited) tables.
const GENERATIONS: usize = 8;

/// What one process of a fork lineage records.
#[derive(Default)]
struct Tables {
    live: DashMap<usize, LiveAllocation, BuildAddressHasher>,
    sites: Sites,
    /// Inherited allocations this process freed (their addresses).
    freed_inherited: DashMap<usize, (), BuildWordHasher>,
    freed_inherited_bytes: AtomicU64,
    freed_inherited_count: AtomicU64,
    /// The live totals of everything inherited, as of the fork.
    inherited: OnceLock<Totals>,
}

pub struct Recorder {
    /// Generation 0: the process the tracer started in.
    root: Tables,
    /// Generation `n` (at index `n - 1`): its forked descendant `n` forks down.
    descendants: [OnceLock<Tables>; GENERATIONS - 1],
    current: AtomicUsize,
    /// When set, each sample stands for the many allocations it was drawn from.
    sampling: Option<Sampling>,
    /// Sampling ended with this process's warm-up (`TRACER_WARMUP_SAMPLE_BYTES`):
    /// every allocation is recorded since, and the samples of the warm-up
    /// keep their weights. A forked child starts with its parent's flag and
    /// then has its own: a child forked during its parent's warm-up samples
    /// until its own first epoch closes, and neither ends the other's.
    sampling_ended: AtomicBool,
    /// This process samples for its whole life, whatever `sampling_ended`
    /// says: a forked DataLoader worker, whose recording in full would cost
    /// about as much again as its parent's.
    sampling_for_life: AtomicBool,
    /// While sampling, the addresses that may hold a sample, in this
    /// process and the generations before it.
    recorded_blocks: Option<BlockFilter>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new(None)
    }
}

impl Recorder {
    pub fn new(sampling: Option<Sampling>) -> Recorder {
        Recorder {
            root: Tables::default(),
            descendants: Default::default(),
            current: AtomicUsize::new(0),
            sampling,
            sampling_ended: AtomicBool::new(false),
            sampling_for_life: AtomicBool::new(false),
            recorded_blocks: sampling.map(|_| BlockFilter::default()),
        }
    }

    /// How allocations are sampled now; `None` when every one is recorded.
    #[inline]
    pub fn sampling(&self) -> Option<&Sampling> {
        self.sampling
            .as_ref()
            .filter(|_| !self.sampling_ended.load(Ordering::Relaxed) || self.sampling_for_life.load(Ordering::Relaxed))
    }

    /// Samples until this process ends, even after the warm-up, when there
    /// is sampling to keep. Frees still look every block up when the
    /// warm-up ended before the fork (see [`Recorder::may_hold`]): the
    /// blocks this process inherited were all recorded.
    pub fn sample_for_life(&self) {
        if self.sampling.is_some() {
            self.sampling_for_life.store(true, Ordering::Relaxed);
        }
    }

    /// Undoes [`Recorder::sample_for_life`] before the warm-up ends: the
    /// warm-up's end then ends sampling as in any process.
    pub fn sample_warm_up_only(&self) {
        self.sampling_for_life.store(false, Ordering::Relaxed);
    }

    /// Whether [`Recorder::sample_for_life`] was called.
    pub fn samples_for_life(&self) -> bool {
        self.sampling_for_life.load(Ordering::Relaxed)
    }

    /// Records every allocation from now on; true the first time, when
    /// there was sampling to end (never in a process sampling for life).
    /// A thread that sees sampling ended sees it ended in every later free
    /// of the blocks it records (read-read coherence of the flag), so none
    /// of them is filtered out.
    pub fn end_sampling(&self) -> bool {
        self.sampling.is_some() && !self.samples_for_life() && !self.sampling_ended.swap(true, Ordering::Relaxed)
    }

    /// Whether `address` may be a block this process recorded or inherited;
    /// false means [`Recorder::freed`] would surely find nothing.
    #[inline]
    pub fn may_hold(&self, address: usize) -> bool {
        self.recorded_blocks
            .as_ref()
            .is_none_or(|filter| self.sampling_ended.load(Ordering::Relaxed) || filter.may_hold(address))
    }

    /// How Python's objects are sampled (see `session::object_allocated`):
    /// at the rate allocations are sampled at, even after the warm-up, as
    /// they come by the million an epoch; `None` when every allocation is
    /// recorded from the start.
    #[inline]
    pub fn object_sampling(&self) -> Option<&Sampling> {
        self.sampling.as_ref()
    }

    /// [`Recorder::may_hold`] for a block of Python's object allocator.
    /// Those recorded are all samples when sampling, so the filter holds
    /// them whatever the phase.
    #[inline]
    pub fn may_hold_object(&self, address: usize) -> bool {
        self.recorded_blocks.as_ref().is_none_or(|filter| filter.may_hold(address))
    }

    fn tables(&self, generation: usize) -> Option<&Tables> {
        match generation {
            0 => Some(&self.root),
            _ => self.descendants.get(generation - 1)?.get(),
        }
    }

    /// This process's tables: a generation is set up before it becomes current.
    fn own(&self) -> &Tables {
        self.tables(self.current.load(Ordering::Relaxed)).unwrap_or(&self.root)
    }

    /// In a forked child, while it runs one thread: from now on this
    /// process writes to tables of its own.
    pub fn forked(&self) {
        let generation = self.current.load(Ordering::Relaxed) + 1;
        let Some(slot) = self.descendants.get(generation - 1) else { return };
        if slot.set(Tables::default()).is_ok() {
            self.current.store(generation, Ordering::Relaxed);
        }
    }

    /// The (allocations, bytes) a recorded allocation counts for.
    fn weight(&self, allocation: &LiveAllocation) -> (u64, u64) {
        match &self.sampling {
            Some(sampling) if allocation.is_sample() => sampling.weight(allocation.size()),
            _ => (1, allocation.size()),
        }
    }

    /// `ordinal`: the calling thread's (see [`crate::thread_state::inside`]);
    /// `sample`: the allocation was drawn while [`Recorder::sampling`] held.
    pub fn allocated(
        &self,
        ordinal: usize,
        address: usize,
        size: usize,
        sample: bool,
        stack: StackId,
        birth_epoch: u32,
    ) -> Result<(), OutOfMemory> {
        let own = self.own();
        let stripe = (ordinal % usize::from(STRIPES)) as u8;
        let allocation = LiveAllocation::new(size, sample, stripe, stack, birth_epoch);
        // An address that is still in the table was freed by a path the hooks
        // never saw; count it as freed rather than leaking it forever. (Only
        // this process's table is checked: an inherited block freed that way
        // stays in the inherited totals, which an extra look per allocation
        // in every worker would not be worth.)
        self.note_block(&allocation, address, BlockFilter::add);
        if let Some(stale) = room::insert(&own.live, address, allocation)? {
            self.release(own, ordinal, address, stale);
        }
        let (count, bytes) = self.weight(&allocation);
        own.sites.born(allocation.stripe(), ordinal, stack, birth_epoch, count, bytes)
    }

    /// Records that `address` was freed by the thread of ordinal `ordinal`;
    /// false when the tracer never saw it allocated.
    pub fn freed(&self, ordinal: usize, address: usize) -> Result<bool, OutOfMemory> {
        let own = self.own();
        if let Some((_, allocation)) = own.live.remove(&address) {
            self.release(own, ordinal, address, allocation);
            return Ok(true);
        }
        let Some(allocation) = self.inherited_allocation(address) else { return Ok(false) };
        if room::insert(&own.freed_inherited, address, ())?.is_none() {
            self.note_block(&allocation, address, BlockFilter::remove);
            let (count, bytes) = self.weight(&allocation);
            own.freed_inherited_count.fetch_add(count, Ordering::Relaxed);
            own.freed_inherited_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// The allocation at `address` that this process inherited and has not
    /// freed: the newest generation before this one that had it live, unless
    /// a later one freed it.
    fn inherited_allocation(&self, address: usize) -> Option<LiveAllocation> {
        let current = self.current.load(Ordering::Relaxed);
        for generation in (0..current).rev() {
            if self.tables(generation + 1)?.freed_inherited.contains_key(&address) {
                return None;
            }
            if let Some(allocation) = self.tables(generation)?.live.get(&address) {
                return Some(*allocation);
            }
        }
        None
    }

    fn release(&self, own: &Tables, ordinal: usize, address: usize, allocation: LiveAllocation) {
        self.note_block(&allocation, address, BlockFilter::remove);
        let (count, bytes) = self.weight(&allocation);
        own.sites.released(allocation.stripe(), ordinal, allocation.stack, allocation.birth_epoch, count, bytes);
    }

    /// Adds a sample's address to the filter of samples, or removes it.
    fn note_block(&self, allocation: &LiveAllocation, address: usize, change: fn(&BlockFilter, usize)) {
        if let Some(filter) = self.recorded_blocks.as_ref().filter(|_| allocation.is_sample()) {
            change(filter, address);
        }
    }

    /// The heap's counters for a snapshot (see [`Sites::collect`]); the
    /// totals include what this process inherited and still holds.
    pub fn collect(&self, scope: Scope, report: &mut impl FnMut(SiteCounters)) -> Result<Totals, OutOfMemory> {
        let current = self.current.load(Ordering::Relaxed);
        Ok(self.with_inherited(current, self.own().sites.collect(scope, report)?))
    }

    /// `own`, the totals of generation `generation`'s own sites, plus what it
    /// inherited and has not freed.
    fn with_inherited(&self, generation: usize, mut own: Totals) -> Totals {
        let Some(tables) = self.tables(generation).filter(|_| generation > 0) else { return own };
        let inherited = self.live_totals(generation - 1);
        own.live_bytes += inherited.live_bytes.saturating_sub(tables.freed_inherited_bytes.load(Ordering::Relaxed));
        own.live_count += inherited.live_count.saturating_sub(tables.freed_inherited_count.load(Ordering::Relaxed));
        own
    }

    /// The live totals generation `generation` had when the next one forked
    /// from it; its tables have not changed since, in this process.
    fn live_totals(&self, generation: usize) -> Totals {
        let (Some(tables), Some(successor)) = (self.tables(generation), self.tables(generation + 1)) else {
            return Totals::default();
        };
        *successor.inherited.get_or_init(|| self.with_inherited(generation, tables.sites.totals()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collected {
        counters: Vec<SiteCounters>,
        live_bytes: u64,
        live_count: u64,
    }

    fn collect(recorder: &Recorder, current_epoch: u32, everything: bool, first_birth_epoch: u32) -> Collected {
        let mut counters = Vec::new();
        let scope = Scope { current_epoch, everything, first_birth_epoch };
        let totals = recorder.collect(scope, &mut |c| counters.push(c)).unwrap();
        counters.sort_unstable_by_key(|c| (c.stack, c.birth_epoch));
        Collected { counters, live_bytes: totals.live_bytes, live_count: totals.live_count }
    }

    #[test]
    fn snapshots_carry_only_changes_and_forget_dead_pairs() {
        let recorder = Recorder::default();
        recorder.allocated(0, 0x1000, 100, false, 7, 0).unwrap();
        recorder.allocated(0, 0x2000, 50, false, 7, 0).unwrap();
        recorder.allocated(0, 0x3000, 10, false, 8, 0).unwrap();
        let first = collect(&recorder, 1, false, 0);
        assert_eq!(first.counters.len(), 2);
        assert_eq!((first.live_bytes, first.live_count), (160, 3));

        assert!(recorder.freed(0, 0x3000).unwrap());
        assert!(!recorder.freed(0, 0x9999).unwrap());
        let second = collect(&recorder, 2, false, 0);
        assert_eq!(second.counters.len(), 1);
        assert_eq!(second.counters[0].stack, 8);
        assert_eq!(second.counters[0].live_count, 0);
        assert_eq!(second.counters[0].allocated_count, 1);
        assert_eq!((second.live_bytes, second.live_count), (150, 2));

        // Stack 8's pair is dead and gone; a full collection lists only stack 7.
        let full = collect(&recorder, 2, true, 0);
        assert_eq!(full.counters.len(), 1);
        assert_eq!(full.counters[0].live_bytes, 150);
    }

    #[test]
    fn pairs_born_before_the_first_birth_epoch_count_in_totals_only() {
        let recorder = Recorder::default();
        recorder.allocated(0, 0x1000, 100, false, 1, 0).unwrap();
        recorder.allocated(0, 0x2000, 10, false, 2, 3).unwrap();
        let collected = collect(&recorder, 4, true, 3);
        assert_eq!(collected.counters.len(), 1);
        assert_eq!(collected.counters[0].stack, 2);
        assert_eq!(collected.live_bytes, 110);
    }

    #[test]
    fn a_reused_address_retires_the_stale_allocation() {
        let recorder = Recorder::default();
        recorder.allocated(0, 0x1000, 100, false, 1, 0).unwrap();
        recorder.allocated(0, 0x1000, 30, false, 2, 0).unwrap();
        let collected = collect(&recorder, 1, false, 0);
        assert_eq!((collected.live_bytes, collected.live_count), (30, 1));
    }

    #[test]
    fn a_forked_child_leaves_the_inherited_tables_alone_and_counts_them_in_its_totals() {
        let recorder = Recorder::default();
        recorder.allocated(0, 0x1000, 100, false, 1, 0).unwrap();
        recorder.allocated(0, 0x2000, 50, false, 2, 0).unwrap();
        assert_eq!(collect(&recorder, 1, false, 0).live_bytes, 150);

        recorder.forked();
        assert!(recorder.freed(0, 0x1000).unwrap(), "an inherited allocation is known");
        assert!(!recorder.freed(0, 0x1000).unwrap(), "and freed only once");
        recorder.allocated(0, 0x3000, 7, false, 3, 2).unwrap();
        let child = collect(&recorder, 3, true, 2);
        assert_eq!(child.counters.iter().map(|c| c.stack).collect::<Vec<_>>(), [3], "only its own pairs");
        assert_eq!((child.live_bytes, child.live_count), (57, 2));
        assert!(recorder.root.live.contains_key(&0x1000), "the parent's table is not written");
        assert_eq!(recorder.root.sites.totals().live_bytes, 150);

        // A grandchild inherits both: the root's 0x2000 and the child's 0x3000.
        recorder.forked();
        assert!(!recorder.freed(0, 0x1000).unwrap(), "freed by the child before it forked");
        assert!(recorder.freed(0, 0x3000).unwrap());
        assert!(recorder.freed(0, 0x2000).unwrap());
        recorder.allocated(0, 0x1000, 5, false, 4, 4).unwrap();
        let grandchild = collect(&recorder, 5, true, 4);
        assert_eq!((grandchild.live_bytes, grandchild.live_count), (5, 1));
        assert!(recorder.freed(0, 0x1000).unwrap(), "its own allocation at an address an ancestor had");
        assert_eq!(collect(&recorder, 6, false, 4).live_bytes, 0);
    }

    #[test]
    fn forks_deeper_than_the_generations_keep_counting_in_the_last_ones_tables() {
        let recorder = Recorder::default();
        for generation in 1..=GENERATIONS as u64 + 2 {
            recorder.forked();
            recorder.allocated(0, 0x1000 * generation as usize, 10, false, 1, 0).unwrap();
        }
        assert_eq!(recorder.current.load(Ordering::Relaxed), GENERATIONS - 1);
        let totals = collect(&recorder, 1, false, 0);
        assert_eq!((totals.live_bytes, totals.live_count), (10 * (GENERATIONS as u64 + 2), GENERATIONS as u64 + 2));
        assert!(recorder.freed(0, 0x1000).unwrap());
        assert_eq!(collect(&recorder, 1, false, 0).live_count, GENERATIONS as u64 + 1);
    }

    #[test]
    fn when_sampling_a_recorded_block_may_be_held_until_freed_in_any_generation() {
        let recorder = Recorder::new(Some(Sampling::new(65536)));
        assert!(!recorder.may_hold(0x1000), "nothing recorded yet");
        recorder.allocated(0, 0x1000, 100, true, 1, 0).unwrap();
        recorder.allocated(0, 0x2000, 100, true, 1, 0).unwrap();
        recorder.allocated(0, 0x2000, 30, true, 2, 0).unwrap();
        assert!(recorder.may_hold(0x1000) && recorder.may_hold(0x2000));
        assert!(recorder.freed(0, 0x2000).unwrap());
        assert!(!recorder.may_hold(0x2000), "a reused address's stale record is retired too");

        recorder.forked();
        assert!(recorder.may_hold(0x1000), "inherited");
        assert!(recorder.freed(0, 0x1000).unwrap());
        assert!(!recorder.may_hold(0x1000), "freed in the child");
        recorder.allocated(0, 0x1000, 8, true, 3, 1).unwrap();
        assert!(recorder.may_hold(0x1000), "the child's own block at the same address");
    }

    #[test]
    fn samples_of_the_warm_up_keep_their_weight_after_sampling_ends() {
        let recorder = Recorder::new(Some(Sampling::new(65536)));
        let sample_weight = Sampling::new(65536).weight(100);
        recorder.allocated(0, 0x1000, 100, true, 1, 0).unwrap();
        assert!(recorder.sampling().is_some());
        assert!(recorder.end_sampling(), "ends once");
        assert!(!recorder.end_sampling());
        assert!(recorder.sampling().is_none(), "every allocation is recorded from now on");
        assert!(recorder.may_hold(0x5000), "every free reaches the live table");

        recorder.allocated(0, 0x2000, 100, false, 2, 1).unwrap();
        recorder.allocated(0, 0x3000, 100, false, 2, 1).unwrap();
        let after = collect(&recorder, 2, true, 0);
        assert_eq!(after.live_count, sample_weight.0 + 2);
        assert_eq!(after.live_bytes, sample_weight.1 + 200);
        let exact = after.counters.iter().find(|c| c.stack == 2).unwrap();
        assert_eq!((exact.live_count, exact.live_bytes), (2, 200), "recorded exactly");

        assert!(recorder.freed(0, 0x1000).unwrap(), "the warm-up's sample is found");
        assert!(recorder.freed(0, 0x2000).unwrap());
        let freed = collect(&recorder, 3, true, 0);
        assert_eq!((freed.live_count, freed.live_bytes), (1, 100), "each took back what it added");
    }

    #[test]
    fn python_objects_stay_sampled_and_filtered_after_the_warm_up() {
        let recorder = Recorder::new(Some(Sampling::new(65536)));
        recorder.end_sampling();
        assert!(recorder.sampling().is_none());
        assert!(recorder.object_sampling().is_some(), "objects are still sampled");
        assert!(!recorder.may_hold_object(0x1000), "nothing recorded yet");
        recorder.allocated(0, 0x1000, 64, true, 1, 1).unwrap();
        assert!(recorder.may_hold_object(0x1000));
        let weight = Sampling::new(65536).weight(64);
        let totals = collect(&recorder, 2, true, 1);
        assert_eq!((totals.live_count, totals.live_bytes), weight, "weighed as a sample");
        assert!(recorder.freed(0, 0x1000).unwrap());
        assert!(!recorder.may_hold_object(0x1000), "an object's free skips the live table again");
        assert!(Recorder::new(None).may_hold_object(0x1000), "recording everything, every free looks");
    }

    #[test]
    fn a_child_forked_after_the_warm_up_records_everything_and_weighs_inherited_samples() {
        let recorder = Recorder::new(Some(Sampling::new(65536)));
        let sample_weight = Sampling::new(65536).weight(100);
        recorder.allocated(0, 0x1000, 100, true, 1, 0).unwrap();
        recorder.end_sampling();
        recorder.allocated(0, 0x2000, 100, false, 2, 1).unwrap();
        recorder.forked();
        assert!(recorder.sampling().is_none(), "the child inherits the end of sampling");
        assert!(recorder.may_hold(0x9000));
        recorder.allocated(0, 0x3000, 10, false, 3, 2).unwrap();
        let before = collect(&recorder, 3, true, 2);
        assert_eq!(before.live_bytes, sample_weight.1 + 100 + 10);
        assert!(recorder.freed(0, 0x1000).unwrap(), "the inherited sample");
        assert!(recorder.freed(0, 0x2000).unwrap(), "the inherited exact block");
        let after = collect(&recorder, 4, false, 2);
        assert_eq!((after.live_count, after.live_bytes), (1, 10));
    }

    #[test]
    fn a_worker_forked_after_the_warm_up_samples_for_life_and_finds_what_it_inherited() {
        let recorder = Recorder::new(Some(Sampling::new(65536)));
        recorder.end_sampling();
        recorder.allocated(0, 0x2000, 100, false, 2, 1).unwrap();
        recorder.forked();
        recorder.sample_for_life();
        assert!(recorder.samples_for_life());
        assert!(recorder.sampling().is_some(), "sampling again, though the warm-up has ended");
        assert!(!recorder.end_sampling(), "already ended, before the fork");
        assert!(recorder.sampling().is_some(), "ending the warm-up does not end it");
        recorder.allocated(0, 0x3000, 100, true, 3, 2).unwrap();
        assert!(recorder.may_hold(0x2000), "the inherited block, recorded exactly");
        assert!(recorder.freed(0, 0x2000).unwrap());
        let sample_weight = Sampling::new(65536).weight(100);
        let after = collect(&recorder, 3, false, 2);
        assert_eq!((after.live_count, after.live_bytes), sample_weight, "the child's sample, weighed");
    }

    #[test]
    fn without_sampling_there_is_no_sampling_to_keep() {
        let recorder = Recorder::default();
        recorder.forked();
        recorder.sample_for_life();
        assert!(!recorder.samples_for_life());
        assert!(recorder.sampling().is_none());
    }

    #[test]
    fn a_worker_forked_in_the_warm_up_never_ends_its_sampling() {
        let recorder = Recorder::new(Some(Sampling::new(65536)));
        recorder.allocated(0, 0x1000, 100, true, 1, 0).unwrap();
        recorder.forked();
        recorder.sample_for_life();
        assert!(!recorder.end_sampling(), "its first epoch ends no warm-up");
        assert!(recorder.sampling().is_some());
        assert!(recorder.may_hold(0x1000), "the inherited sample");
        assert!(!recorder.may_hold(0x9000), "frees of blocks never sampled still skip the tables");
    }

    #[test]
    fn without_sampling_there_is_no_sampling_to_end() {
        let recorder = Recorder::default();
        assert!(!recorder.end_sampling());
        assert!(recorder.sampling().is_none());
    }

    #[test]
    fn without_sampling_every_address_may_be_held() {
        assert!(Recorder::default().may_hold(0x1000));
    }
}
