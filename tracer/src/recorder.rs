//! The live-allocation table and the per-(stack, birth epoch) counters that
//! snapshots are made of.

use dashmap::DashMap;
use trace_format::SiteCounters;

use crate::fast_hash::BuildWordHasher;
use crate::sampling::Sampling;
use crate::stacks::StackId;

#[derive(Clone, Copy)]
struct LiveAllocation {
    size: u64,
    stack: StackId,
    birth_epoch: u32,
}

#[derive(Default)]
struct SiteState {
    live_count: u64,
    live_bytes: u64,
    allocated_count: u64,
    allocated_bytes: u64,
    /// Changed since the last snapshot.
    dirty: bool,
}

fn site_key(stack: StackId, birth_epoch: u32) -> u64 {
    (u64::from(stack) << 32) | u64::from(birth_epoch)
}

/// What a snapshot needs from the recorder.
pub struct Collected {
    pub counters: Vec<SiteCounters>,
    pub live_bytes: u64,
    pub live_count: u64,
}

#[derive(Default)]
pub struct Recorder {
    live: DashMap<usize, LiveAllocation, BuildWordHasher>,
    sites: DashMap<u64, SiteState, BuildWordHasher>,
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
        let mut site = self.sites.entry(site_key(stack, birth_epoch)).or_default();
        site.live_count += count;
        site.live_bytes += bytes;
        site.allocated_count += count;
        site.allocated_bytes += bytes;
        site.dirty = true;
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
        if let Some(mut site) = self.sites.get_mut(&site_key(allocation.stack, allocation.birth_epoch)) {
            site.live_count = site.live_count.saturating_sub(count);
            site.live_bytes = site.live_bytes.saturating_sub(bytes);
            site.dirty = true;
        }
    }

    /// The counters that changed since the last call (all of them when
    /// `everything`) of pairs born in `first_birth_epoch` or later, with the
    /// heap totals of all pairs. Pairs that can never change again (nothing
    /// alive, born before `current_epoch`) are dropped after being reported,
    /// so the table holds only what is alive or current.
    pub fn collect(&self, current_epoch: u32, everything: bool, first_birth_epoch: u32) -> Collected {
        let mut collected = Collected { counters: Vec::new(), live_bytes: 0, live_count: 0 };
        self.sites.retain(|&key, site| {
            let stack = (key >> 32) as StackId;
            let birth_epoch = key as u32;
            collected.live_bytes += site.live_bytes;
            collected.live_count += site.live_count;
            if (site.dirty || everything) && birth_epoch >= first_birth_epoch {
                collected.counters.push(SiteCounters {
                    stack,
                    birth_epoch,
                    live_count: site.live_count,
                    live_bytes: site.live_bytes,
                    allocated_count: site.allocated_count,
                    allocated_bytes: site.allocated_bytes,
                });
                site.dirty = false;
            }
            site.live_count != 0 || birth_epoch >= current_epoch
        });
        collected.counters.sort_unstable_by_key(|c| (c.stack, c.birth_epoch));
        collected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_carry_only_changes_and_forget_dead_pairs() {
        let recorder = Recorder::default();
        recorder.allocated(0x1000, 100, 7, 0);
        recorder.allocated(0x2000, 50, 7, 0);
        recorder.allocated(0x3000, 10, 8, 0);
        let first = recorder.collect(1, false, 0);
        assert_eq!(first.counters.len(), 2);
        assert_eq!((first.live_bytes, first.live_count), (160, 3));

        assert!(recorder.freed(0x3000));
        assert!(!recorder.freed(0x9999));
        let second = recorder.collect(2, false, 0);
        assert_eq!(second.counters.len(), 1);
        assert_eq!(second.counters[0].stack, 8);
        assert_eq!(second.counters[0].live_count, 0);
        assert_eq!(second.counters[0].allocated_count, 1);
        assert_eq!((second.live_bytes, second.live_count), (150, 2));

        // Stack 8's pair is dead and gone; a full collection lists only stack 7.
        let full = recorder.collect(2, true, 0);
        assert_eq!(full.counters.len(), 1);
        assert_eq!(full.counters[0].live_bytes, 150);
    }

    #[test]
    fn pairs_born_before_the_first_birth_epoch_count_in_totals_only() {
        let recorder = Recorder::default();
        recorder.allocated(0x1000, 100, 1, 0);
        recorder.allocated(0x2000, 10, 2, 3);
        let collected = recorder.collect(4, true, 3);
        assert_eq!(collected.counters.len(), 1);
        assert_eq!(collected.counters[0].stack, 2);
        assert_eq!(collected.live_bytes, 110);
    }

    #[test]
    fn a_reused_address_retires_the_stale_allocation() {
        let recorder = Recorder::default();
        recorder.allocated(0x1000, 100, 1, 0);
        recorder.allocated(0x1000, 30, 2, 0);
        let collected = recorder.collect(1, false, 0);
        assert_eq!((collected.live_bytes, collected.live_count), (30, 1));
    }
}
