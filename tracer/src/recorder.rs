//! The live-allocation table of the heap and its per-(stack, birth epoch)
//! counters.

use dashmap::DashMap;
use trace_format::SiteCounters;

use crate::fast_hash::BuildWordHasher;
use crate::sampling::Sampling;
use crate::sites::{Scope, Sites, Totals};
use crate::stacks::StackId;

#[derive(Clone, Copy)]
struct LiveAllocation {
    size: u64,
    stack: StackId,
    birth_epoch: u32,
}

#[derive(Default)]
pub struct Recorder {
    live: DashMap<usize, LiveAllocation, BuildWordHasher>,
    sites: Sites,
    /// When set, each recorded allocation stands for the many it was sampled from.
    sampling: Option<Sampling>,
}

impl Recorder {
    pub fn new(sampling: Option<Sampling>) -> Recorder {
        Recorder { sampling, ..Recorder::default() }
    }

    /// The (allocations, bytes) a recorded allocation of `size` bytes counts for.
    fn weight(&self, size: u64) -> (u64, u64) {
        match &self.sampling {
            Some(sampling) => sampling.weight(size),
            None => (1, size),
        }
    }

    pub fn allocated(&self, address: usize, size: usize, stack: StackId, birth_epoch: u32) {
        let allocation = LiveAllocation { size: size as u64, stack, birth_epoch };
        // An address that is still in the table was freed by a path the hooks
        // never saw; count it as freed rather than leaking it forever.
        if let Some(stale) = self.live.insert(address, allocation) {
            self.forget(stale);
        }
        let (count, bytes) = self.weight(allocation.size);
        self.sites.born(stack, birth_epoch, count, bytes);
    }

    /// Records that `address` was freed; false when the tracer never saw it allocated.
    pub fn freed(&self, address: usize) -> bool {
        match self.live.remove(&address) {
            Some((_, allocation)) => {
                self.forget(allocation);
                true
            }
            None => false,
        }
    }

    fn forget(&self, allocation: LiveAllocation) {
        let (count, bytes) = self.weight(allocation.size);
        self.sites.released(allocation.stack, allocation.birth_epoch, count, bytes);
    }

    /// The heap's counters for a snapshot (see [`Sites::collect`]).
    pub fn collect(&self, scope: Scope, counters: &mut Vec<SiteCounters>) -> Totals {
        self.sites.collect(scope, counters)
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
        let totals = recorder.collect(Scope { current_epoch, everything, first_birth_epoch }, &mut counters);
        counters.sort_unstable_by_key(|c| (c.stack, c.birth_epoch));
        Collected { counters, live_bytes: totals.live_bytes, live_count: totals.live_count }
    }

    #[test]
    fn snapshots_carry_only_changes_and_forget_dead_pairs() {
        let recorder = Recorder::default();
        recorder.allocated(0x1000, 100, 7, 0);
        recorder.allocated(0x2000, 50, 7, 0);
        recorder.allocated(0x3000, 10, 8, 0);
        let first = collect(&recorder, 1, false, 0);
        assert_eq!(first.counters.len(), 2);
        assert_eq!((first.live_bytes, first.live_count), (160, 3));

        assert!(recorder.freed(0x3000));
        assert!(!recorder.freed(0x9999));
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
        recorder.allocated(0x1000, 100, 1, 0);
        recorder.allocated(0x2000, 10, 2, 3);
        let collected = collect(&recorder, 4, true, 3);
        assert_eq!(collected.counters.len(), 1);
        assert_eq!(collected.counters[0].stack, 2);
        assert_eq!(collected.live_bytes, 110);
    }

    #[test]
    fn a_reused_address_retires_the_stale_allocation() {
        let recorder = Recorder::default();
        recorder.allocated(0x1000, 100, 1, 0);
        recorder.allocated(0x1000, 30, 2, 0);
        let collected = collect(&recorder, 1, false, 0);
        assert_eq!((collected.live_bytes, collected.live_count), (30, 1));
    }
}
