//! Per-(stack, birth epoch) counters, the form in which snapshots report
//! memory: the heap's allocations and the anonymous mappings keep a set each.
//!
//! Threads that allocate at the same stack would all update one pair's
//! counters, and the cache line holding them (and its shard's lock) would
//! move between their cores at every allocation. Each thread writes its own
//! stripe instead: a table of its own, holding its part of each pair it
//! touched since the last snapshot. A snapshot first folds every other
//! stripe into the home stripe (the first thread's), where each pair is
//! then whole; a release whose part was folded away finds it at home.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use dashmap::DashMap;
use trace_format::SiteCounters;

use crate::fast_hash::BuildWordHasher;
use crate::room::{self, OutOfMemory};
use crate::stacks::StackId;

/// A pair's counters in 32 bytes: with its key an entry is 40, not 48
/// (a torch process holds over a million).
#[derive(Default, Clone, Copy)]
struct SiteState {
    /// The live count, and in the top bit whether the pair changed since
    /// the last snapshot.
    live_count_and_dirty: u64,
    live_bytes: u64,
    allocated_count: u64,
    allocated_bytes: u64,
}

const DIRTY: u64 = 1 << 63;

impl SiteState {
    fn live_count(&self) -> u64 {
        self.live_count_and_dirty & !DIRTY
    }

    fn dirty(&self) -> bool {
        self.live_count_and_dirty & DIRTY != 0
    }

    fn set_live_count(&mut self, count: u64, dirty: bool) {
        self.live_count_and_dirty = count.min(!DIRTY) | if dirty { DIRTY } else { 0 };
    }

    fn clean(&mut self) {
        self.live_count_and_dirty &= !DIRTY;
    }

    /// Takes up to `count` objects and `bytes` out of the live ones; returns
    /// what was left to take.
    fn release(&mut self, count: u64, bytes: u64) -> (u64, u64) {
        let (taken_count, taken_bytes) = (count.min(self.live_count()), bytes.min(self.live_bytes));
        self.set_live_count(self.live_count() - taken_count, true);
        self.live_bytes -= taken_bytes;
        (count - taken_count, bytes - taken_bytes)
    }

    /// `count` objects of `bytes` in all, just born: alive, allocated, changed.
    fn born(count: u64, bytes: u64) -> SiteState {
        let mut site =
            SiteState { live_count_and_dirty: 0, live_bytes: bytes, allocated_count: count, allocated_bytes: bytes };
        site.set_live_count(count, true);
        site
    }

    /// Adds `part`'s counters, and its change, to this pair's.
    fn take(&mut self, part: &SiteState) {
        self.set_live_count(self.live_count() + part.live_count(), self.dirty() || part.dirty());
        self.live_bytes += part.live_bytes;
        self.allocated_count += part.allocated_count;
        self.allocated_bytes += part.allocated_bytes;
    }
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

/// Stripes of a pair's counters; threads past this many share them.
pub const STRIPES: u8 = 8;

type Stripe = DashMap<u64, SiteState, BuildWordHasher>;

/// Slots of the running live totals; threads past the last but one share
/// the last.
const LIVE_SLOTS: usize = 64;
/// An ordinal for counting from any thread: the shared slot's.
pub const ANY_THREAD: usize = usize::MAX;

/// What one thread added to the live totals and took from them (wrapping:
/// a thread may free more than it allocated; the sum of the slots does not
/// wrap). Only its thread writes a slot below the last, with a plain load
/// and store; the last is shared, with atomic adds.
#[repr(align(128))]
#[derive(Default)]
struct LiveSlot {
    count: AtomicU64,
    bytes: AtomicU64,
}

/// Keys a change log holds at most; past them a collection reads every pair.
const LOGGED_CHANGES: usize = 1 << 16;

/// The home stripe's pairs the next collection must look at: those that
/// changed since the last one (each logged as it changes from clean), and
/// those it left dead in an epoch still open. A first collection, or one
/// after more changes than the log holds, reads every pair instead; later
/// ones, in a long run with a million pairs, read only these.
#[derive(Default)]
struct ChangeLog {
    keys: Vec<u64>,
    overflowed: bool,
}

impl ChangeLog {
    /// A log that cannot grow is as good as overflowed.
    fn note(&mut self, key: u64) {
        if self.keys.len() >= LOGGED_CHANGES || room::push(&mut self.keys, key).is_err() {
            self.overflowed = true;
        }
    }
}

pub struct Sites {
    stripes: [Stripe; STRIPES as usize],
    /// Taken while a home shard is held, never the other way round.
    changes: Mutex<ChangeLog>,
    /// The live totals kept as they change: a forked child adds up what it
    /// inherited from these alone, where reading a million pairs took a
    /// DataLoader worker longer than the tracer's work for all its own
    /// allocations.
    live: [LiveSlot; LIVE_SLOTS],
}

impl Default for Sites {
    fn default() -> Self {
        Sites {
            stripes: Default::default(),
            // A first collection reads every pair.
            changes: Mutex::new(ChangeLog { keys: Vec::new(), overflowed: true }),
            live: std::array::from_fn(|_| LiveSlot::default()),
        }
    }
}

impl Sites {
    /// `count` new objects of `bytes` in all, born in `birth_epoch` at
    /// `stack`, counted in stripe `stripe` (below [`STRIPES`]) by the thread
    /// of ordinal `ordinal` (see [`crate::thread_state::inside`]; or
    /// [`ANY_THREAD`]).
    pub fn born(
        &self,
        stripe: u8,
        ordinal: usize,
        stack: StackId,
        birth_epoch: u32,
        count: u64,
        bytes: u64,
    ) -> Result<(), OutOfMemory> {
        let key = site_key(stack, birth_epoch);
        let counted = self.stripe(stripe);
        room::with_entry(counted, key, SiteState::default, |site| {
            self.log_change(counted, key, site);
            site.take(&SiteState::born(count, bytes));
        })?;
        self.add_live(ordinal, count, bytes);
        Ok(())
    }

    /// `count` objects and `bytes` of the pair are gone. A count of 0 with
    /// bytes is an object that shrank (part of a mapping unmapped).
    ///
    /// They were counted in stripe `stripe`, whose part of the pair may
    /// have been folded into the home stripe since: what the stripe's
    /// current part cannot cover is taken from home. The pair's sum comes
    /// out the same whichever part an object is taken from. `ordinal` is the
    /// releasing thread's, as in [`Sites::born`].
    pub fn released(&self, stripe: u8, ordinal: usize, stack: StackId, birth_epoch: u32, count: u64, bytes: u64) {
        let key = site_key(stack, birth_epoch);
        let counted = self.stripe(stripe);
        let mut left = (count, bytes);
        if let Some(mut part) = counted.get_mut(&key) {
            self.log_change(counted, key, &part);
            left = part.release(left.0, left.1);
        }
        // The guard above is gone: no thread waits for a home shard while it
        // holds another stripe's (a fold does the reverse).
        if left != (0, 0) && !std::ptr::eq(counted, self.home()) {
            if let Some(mut site) = self.home().get_mut(&key) {
                self.log_change(self.home(), key, &site);
                left = site.release(left.0, left.1);
            }
        }
        // What was taken, which is all of it unless the pair had less.
        self.add_live(ordinal, left.0.wrapping_sub(count), left.1.wrapping_sub(bytes));
    }

    /// Adds the wrapping `count` and `bytes` to the slot of the thread of
    /// ordinal `ordinal` (its caller: the caller already has it).
    fn add_live(&self, ordinal: usize, count: u64, bytes: u64) {
        let own = ordinal < LIVE_SLOTS - 1;
        let slot = &self.live[ordinal.min(LIVE_SLOTS - 1)];
        for (total, change) in [(&slot.count, count), (&slot.bytes, bytes)] {
            if own {
                total.store(total.load(Ordering::Relaxed).wrapping_add(change), Ordering::Relaxed);
            } else {
                total.fetch_add(change, Ordering::Relaxed);
            }
        }
    }

    /// The live totals of all pairs, read without changing anything (for
    /// tables a forked child inherited, whose pages it must not copy).
    pub fn totals(&self) -> Totals {
        let (mut live_count, mut live_bytes) = (0u64, 0u64);
        for slot in &self.live {
            live_count = live_count.wrapping_add(slot.count.load(Ordering::Relaxed));
            live_bytes = live_bytes.wrapping_add(slot.bytes.load(Ordering::Relaxed));
        }
        Totals { live_bytes, live_count }
    }

    fn stripe(&self, stripe: u8) -> &Stripe {
        &self.stripes[usize::from(stripe) % self.stripes.len()]
    }

    /// Logs a home pair about to change from clean; its shard is held.
    fn log_change(&self, stripe: &Stripe, key: u64, site: &SiteState) {
        if !site.dirty() && std::ptr::eq(stripe, self.home()) {
            crate::lock(&self.changes).note(key);
        }
    }

    /// Where every pair is whole after a snapshot's fold.
    fn home(&self) -> &Stripe {
        &self.stripes[0]
    }

    /// Adds every other stripe's parts into the home stripe's pairs and
    /// empties them. A part is moved under its stripe shard's lock, which a
    /// release of it waits for, and then finds the part at home. A part
    /// for which home has no room stays where it is.
    fn fold_into_home(&self) -> Result<(), OutOfMemory> {
        let home = self.home();
        let mut folded = Ok(());
        for stripe in &self.stripes[1..] {
            if stripe.is_empty() {
                continue;
            }
            stripe.retain(|&key, part| {
                let moved = folded.and_then(|()| {
                    room::with_entry(home, key, SiteState::default, |site| {
                        self.log_change(home, key, site);
                        site.take(part);
                    })
                });
                folded = folded.and(moved);
                moved.is_err()
            });
            give_back_room(stripe);
        }
        folded
    }

    /// Hands `report` the pairs that changed since the last collection
    /// (all of them when `scope.everything`) born in `scope.first_birth_epoch`
    /// or later, and returns the totals of all pairs. Pairs that can never
    /// change again (nothing alive, born before `scope.current_epoch`) are
    /// dropped after being reported, so the table holds only what is alive or
    /// current.
    /// Fails, having reported nothing, when the pairs cannot be made whole.
    pub fn collect(&self, scope: Scope, report: &mut impl FnMut(SiteCounters)) -> Result<Totals, OutOfMemory> {
        self.fold_into_home()?;
        let home = self.home();
        let logged = std::mem::take(&mut *crate::lock(&self.changes));
        // Decides a pair's fate, and whether the next collection must see it.
        let mut settle = |key: u64, site: &mut SiteState| {
            let (_, birth_epoch) = split_key(key);
            if scope.reports(site, birth_epoch) {
                report(counters_of(key, site));
                site.clean();
            }
            let dead = site.live_count() == 0;
            let retired = scope.retires(dead, birth_epoch);
            if dead && !retired {
                crate::lock(&self.changes).note(key);
            }
            !retired
        };
        if scope.everything || logged.overflowed {
            home.retain(|&key, site| settle(key, site));
        } else {
            for key in logged.keys {
                let Some(mut site) = home.get_mut(&key) else { continue };
                if !settle(key, &mut site) {
                    drop(site);
                    home.remove(&key);
                }
            }
        }
        give_back_room(home);
        Ok(self.totals())
    }
}

/// Tables below this many slots keep their room: giving it back and
/// growing again would cost more than it frees.
const ROOM_KEPT: usize = 1 << 12;

/// A table keeps its room when pairs leave it: after the first epoch of a
/// full capture of torch, the home stripe held two million buckets (86 MB)
/// for the few hundred thousand pairs still alive, until the process
/// ended. Room beyond twice what the pairs need is given back.
fn give_back_room(table: &Stripe) {
    if table.capacity() > 2 * table.len() + ROOM_KEPT {
        room::shrink(table);
    }
}

impl Scope {
    fn reports(&self, site: &SiteState, birth_epoch: u32) -> bool {
        (site.dirty() || self.everything) && birth_epoch >= self.first_birth_epoch
    }

    /// Whether a pair that is `dead` can be dropped.
    fn retires(&self, dead: bool, birth_epoch: u32) -> bool {
        dead && birth_epoch < self.current_epoch
    }
}

fn split_key(key: u64) -> (StackId, u32) {
    ((key >> 32) as StackId, key as u32)
}

fn counters_of(key: u64, site: &SiteState) -> SiteCounters {
    let (stack, birth_epoch) = split_key(key);
    SiteCounters {
        stack,
        birth_epoch,
        live_count: site.live_count(),
        live_bytes: site.live_bytes,
        allocated_count: site.allocated_count,
        allocated_bytes: site.allocated_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(sites: &Sites, current_epoch: u32, everything: bool) -> (Vec<SiteCounters>, Totals) {
        let mut counters = Vec::new();
        let totals = sites
            .collect(Scope { current_epoch, everything, first_birth_epoch: 0 }, &mut |c| counters.push(c))
            .unwrap();
        counters.sort_unstable_by_key(|c| (c.stack, c.birth_epoch));
        (counters, totals)
    }

    fn live_and_allocated(c: &SiteCounters) -> (u64, u64, u64, u64) {
        (c.live_count, c.live_bytes, c.allocated_count, c.allocated_bytes)
    }

    #[test]
    fn a_pair_counted_in_several_stripes_is_reported_whole() {
        let sites = Sites::default();
        sites.born(0, 0, 7, 0, 1, 100).unwrap();
        sites.born(3, 0, 7, 0, 2, 40).unwrap();
        sites.born(3, 0, 8, 0, 1, 5).unwrap();
        let (counters, totals) = collect(&sites, 1, false);
        assert_eq!(counters.len(), 2);
        assert_eq!(live_and_allocated(&counters[0]), (3, 140, 3, 140));
        assert_eq!((totals.live_count, totals.live_bytes), (4, 145));

        // Only stripe 3's part changes; the report still adds stripe 0's.
        sites.released(3, 0, 7, 0, 1, 20);
        let (counters, _) = collect(&sites, 2, false);
        assert_eq!(counters.len(), 1);
        assert_eq!(live_and_allocated(&counters[0]), (2, 120, 3, 140));
    }

    #[test]
    fn tables_give_back_their_room_once_their_pairs_are_gone() {
        let sites = Sites::default();
        // A first epoch with many pairs, in the home stripe and in another,
        // nearly all of them dead by its end.
        for stack in 1..=100_000 {
            sites.born(0, 0, stack, 0, 1, 8).unwrap();
            sites.born(5, 0, stack, 0, 1, 8).unwrap();
            if stack > 1_000 {
                sites.released(0, 0, stack, 0, 1, 8);
                sites.released(5, 0, stack, 0, 1, 8);
            }
        }
        let grown = sites.home().capacity();
        assert!(grown >= 100_000);
        let (_, totals) = collect(&sites, 1, false);
        assert_eq!((totals.live_count, totals.live_bytes), (2_000, 16_000));
        assert_eq!(sites.home().len(), 1_000, "the live pairs stay");
        assert!(sites.home().capacity() <= 2 * 1_000 + ROOM_KEPT, "{} of {grown} slots kept", sites.home().capacity());
        assert!(sites.stripes[5].capacity() <= ROOM_KEPT, "the folded stripe's room is given back");
        // The pairs left are whole.
        sites.released(0, 0, 1, 0, 2, 16);
        let (counters, _) = collect(&sites, 2, false);
        assert_eq!(live_and_allocated(&counters[0]), (0, 0, 2, 16));
    }

    #[test]
    fn a_dead_part_stays_while_another_part_of_its_pair_lives() {
        let sites = Sites::default();
        sites.born(0, 0, 7, 0, 1, 100).unwrap();
        sites.born(1, 0, 7, 0, 1, 10).unwrap();
        sites.released(1, 0, 7, 0, 1, 10);
        collect(&sites, 1, false);
        collect(&sites, 2, false);
        sites.released(0, 0, 7, 0, 1, 100);
        let (counters, _) = collect(&sites, 3, false);
        assert_eq!(live_and_allocated(&counters[0]), (0, 0, 2, 110), "stripe 1's allocation is still counted");

        // Dead in every part and from a past epoch: gone from all stripes.
        sites.born(1, 0, 9, 3, 1, 1).unwrap();
        let (counters, totals) = collect(&sites, 4, true);
        assert_eq!(counters.iter().map(|c| c.stack).collect::<Vec<_>>(), [9]);
        assert_eq!((totals.live_count, totals.live_bytes), (1, 1));
        assert!(sites.stripes.iter().all(|stripe| !stripe.contains_key(&site_key(7, 0))));
    }

    #[test]
    fn a_release_after_its_part_was_folded_home_is_counted_there() {
        let sites = Sites::default();
        sites.born(4, 0, 7, 0, 2, 64).unwrap();
        collect(&sites, 1, false);
        assert!(sites.stripes[4].is_empty(), "folded into the home stripe");
        sites.born(4, 0, 7, 0, 1, 32).unwrap();
        sites.released(4, 0, 7, 0, 1, 32);
        sites.released(4, 0, 7, 0, 1, 32);
        let (counters, totals) = collect(&sites, 2, false);
        assert_eq!(live_and_allocated(&counters[0]), (1, 32, 3, 96));
        assert_eq!((totals.live_count, totals.live_bytes), (1, 32));
    }

    #[test]
    fn the_running_totals_hold_when_threads_free_each_others_objects() {
        let sites = Sites::default();
        std::thread::scope(|scope| {
            scope.spawn(|| sites.born(1, 1, 7, 0, 3, 300)).join().unwrap().unwrap();
            scope.spawn(|| sites.released(1, 2, 7, 0, 2, 200)).join().unwrap();
        });
        assert_eq!(sites.totals(), Totals { live_count: 1, live_bytes: 100 });
        // Releasing more than the pair holds takes only what it holds.
        sites.released(1, 0, 7, 0, 5, 500);
        assert_eq!(sites.totals(), Totals::default());
        let (counters, totals) = collect(&sites, 1, false);
        assert_eq!(live_and_allocated(&counters[0]), (0, 0, 3, 300));
        assert_eq!(totals, Totals::default());
    }

    #[test]
    fn later_collections_look_at_the_logged_pairs_and_still_drop_the_dead() {
        let sites = Sites::default();
        for stack in 1..=3 {
            sites.born(0, 0, stack, 0, 1, 10).unwrap();
        }
        assert_eq!(collect(&sites, 1, false).0.len(), 3, "the first reads every pair");
        assert!(crate::lock(&sites.changes).keys.is_empty());
        sites.released(0, 0, 2, 0, 1, 10);
        sites.born(0, 0, 3, 1, 1, 5).unwrap();
        assert_eq!(crate::lock(&sites.changes).keys, [site_key(2, 0), site_key(3, 1)]);
        let (counters, totals) = collect(&sites, 2, false);
        assert_eq!(counters.iter().map(|c| (c.stack, c.birth_epoch)).collect::<Vec<_>>(), [(2, 0), (3, 1)]);
        assert_eq!((totals.live_count, totals.live_bytes), (3, 25));
        assert!(!sites.home().contains_key(&site_key(2, 0)), "dead and old: dropped");

        // Dead in the epoch still open: kept, and dropped by the next one.
        sites.born(0, 0, 4, 2, 1, 1).unwrap();
        sites.released(0, 0, 4, 2, 1, 1);
        assert_eq!(collect(&sites, 2, false).0.len(), 1);
        assert!(sites.home().contains_key(&site_key(4, 2)));
        assert!(collect(&sites, 3, false).0.is_empty());
        assert!(!sites.home().contains_key(&site_key(4, 2)));
    }

    #[test]
    fn more_changes_than_the_log_holds_make_a_collection_read_every_pair() {
        let sites = Sites::default();
        collect(&sites, 1, false);
        let pairs = LOGGED_CHANGES as u32 + 10;
        (0..pairs).for_each(|stack| sites.born(0, 0, stack, 1, 1, 1).unwrap());
        assert!(crate::lock(&sites.changes).overflowed);
        let (counters, totals) = collect(&sites, 2, false);
        assert_eq!(counters.len(), pairs as usize);
        assert_eq!(totals.live_count, u64::from(pairs));
        assert!(!crate::lock(&sites.changes).overflowed);
    }

    #[test]
    fn a_full_collection_reports_every_pair_whole_and_totals_add_all_stripes() {
        let sites = Sites::default();
        sites.born(2, 0, 5, 1, 1, 8).unwrap();
        sites.born(5, 0, 5, 1, 1, 8).unwrap();
        sites.born(5, 0, 6, 1, 1, 3).unwrap();
        collect(&sites, 2, false);
        let (counters, totals) = collect(&sites, 2, true);
        assert_eq!(counters.iter().map(live_and_allocated).collect::<Vec<_>>(), [(2, 16, 2, 16), (1, 3, 1, 3)]);
        assert_eq!(totals, sites.totals());
        assert_eq!((totals.live_count, totals.live_bytes), (3, 19));
    }
}
