//! Per-(stack, birth epoch) counters, the form in which snapshots report
//! memory: the heap's allocations and the anonymous mappings keep a set each.

use dashmap::DashMap;
use trace_format::SiteCounters;

use crate::fast_hash::BuildWordHasher;
use crate::stacks::StackId;

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

/// Which counters a snapshot takes.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// The epoch the snapshot opens.
    pub current_epoch: u32,
    /// Every pair, not only those that changed (a new trace file).
    pub everything: bool,
    /// Pairs born earlier are counted in the totals only.
    pub first_birth_epoch: u32,
}

/// Live totals of a set of sites.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub live_bytes: u64,
    pub live_count: u64,
}

#[derive(Default)]
pub struct Sites {
    sites: DashMap<u64, SiteState, BuildWordHasher>,
}

impl Sites {
    /// `count` new objects of `bytes` in all, born in `birth_epoch` at `stack`.
    pub fn born(&self, stack: StackId, birth_epoch: u32, count: u64, bytes: u64) {
        let mut site = self.sites.entry(site_key(stack, birth_epoch)).or_default();
        site.live_count += count;
        site.live_bytes += bytes;
        site.allocated_count += count;
        site.allocated_bytes += bytes;
        site.dirty = true;
    }

    /// `count` objects and `bytes` of the pair are gone. A count of 0 with
    /// bytes is an object that shrank (part of a mapping unmapped).
    pub fn released(&self, stack: StackId, birth_epoch: u32, count: u64, bytes: u64) {
        if let Some(mut site) = self.sites.get_mut(&site_key(stack, birth_epoch)) {
            site.live_count = site.live_count.saturating_sub(count);
            site.live_bytes = site.live_bytes.saturating_sub(bytes);
            site.dirty = true;
        }
    }

    /// The live totals of all pairs, read without changing anything (for
    /// tables a forked child inherited, whose pages it must not copy).
    pub fn totals(&self) -> Totals {
        let mut totals = Totals::default();
        for site in self.sites.iter() {
            totals.live_bytes += site.live_bytes;
            totals.live_count += site.live_count;
        }
        totals
    }

    /// Appends to `counters` the pairs that changed since the last collection
    /// (all of them when `scope.everything`) born in `scope.first_birth_epoch`
    /// or later, and returns the totals of all pairs. Pairs that can never
    /// change again (nothing alive, born before `scope.current_epoch`) are
    /// dropped after being reported, so the table holds only what is alive or
    /// current.
    pub fn collect(&self, scope: Scope, counters: &mut Vec<SiteCounters>) -> Totals {
        let Scope { current_epoch, everything, first_birth_epoch } = scope;
        let mut totals = Totals::default();
        self.sites.retain(|&key, site| {
            let stack = (key >> 32) as StackId;
            let birth_epoch = key as u32;
            totals.live_bytes += site.live_bytes;
            totals.live_count += site.live_count;
            if (site.dirty || everything) && birth_epoch >= first_birth_epoch {
                counters.push(SiteCounters {
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
        totals
    }
}
