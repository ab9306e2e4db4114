//! The counters a traced process shares with its descendants, in a page of
//! their own (see [`sys::counters_shared_with_descendants`]): how many
//! epochs it closed, how many DataLoader workers it forked, and from which
//! epoch on its epochs are whole after the latest change of what cuts them
//! (a [`Recut`]). A worker following its parent's epochs reads them to
//! close its own, and to say in its trace from which of its own epochs the
//! analysis starts, as its parent's trace says of the parent's.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys;

/// The page's words: the two counts, then one word per kind of [`Recut`].
pub const WORDS: usize = 2 + Recut::ALL.len();

/// Holds the page this process shares, or its parent's.
pub type Slot = sys::SharedCountersSlot<WORDS>;

/// A change of what closes the epochs, after which they are whole only
/// from a later epoch on: the epochs before it were cut inside a period the
/// new cut spans (the analysis starts after them), or belong to another
/// phase of the job (analysed apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recut {
    /// The passes from one place go round several loaders, one epoch a round.
    PassRounds = 0,
    /// An outer loop's passes close the epochs.
    OuterLoop = 1,
    /// Another loop's passes close them, the loop before having stopped.
    MarkingLoopStopped = 2,
}

impl Recut {
    pub const ALL: [Recut; 3] = [Recut::PassRounds, Recut::OuterLoop, Recut::MarkingLoopStopped];

    /// How the trace's notice of this recut starts; the first whole epoch
    /// follows, then a colon.
    pub fn notice_prefix(self) -> &'static str {
        match self {
            Recut::PassRounds => trace_format::PASS_ROUNDS_NOTICE,
            Recut::OuterLoop => trace_format::OUTER_LOOP_NOTICE,
            Recut::MarkingLoopStopped => trace_format::MARKING_LOOP_STOPPED_NOTICE,
        }
    }
}

/// A process's page of shared counters.
#[derive(Clone, Copy)]
pub struct SharedEpochs(&'static [AtomicU32; WORDS]);

impl SharedEpochs {
    pub fn new(words: &'static [AtomicU32; WORDS]) -> SharedEpochs {
        SharedEpochs(words)
    }

    pub fn words(self) -> &'static [AtomicU32; WORDS] {
        self.0
    }

    /// How many epochs the process closed (its exit aside).
    pub fn closed(self) -> u32 {
        self.0[0].load(Ordering::Relaxed)
    }

    /// [`SharedEpochs::closed`], with every recut shared before the count
    /// read seen too.
    pub fn closed_with_recuts(self) -> u32 {
        self.0[0].load(Ordering::Acquire)
    }

    /// Counts an epoch closed, after the recuts shared while closing it.
    pub fn count_closed(self) {
        self.0[0].fetch_add(1, Ordering::Release);
    }

    /// How many DataLoader workers the process forked: each takes its
    /// number as it starts.
    pub fn workers_forked(self) -> &'static AtomicU32 {
        &self.0[1]
    }

    /// Shares, before the epoch that `recut` closed is counted, that the
    /// epochs are whole from `first_whole` on.
    pub fn share_recut(self, recut: Recut, first_whole: u32) {
        self.recut_word(recut).store(first_whole.saturating_add(1), Ordering::Relaxed);
    }

    /// For each kind of recut, one more than the first whole epoch the
    /// latest of its kind named; 0 before any.
    fn recuts(self) -> [u32; Recut::ALL.len()] {
        Recut::ALL.map(|recut| self.recut_word(recut).load(Ordering::Relaxed))
    }

    fn recut_word(self, recut: Recut) -> &'static AtomicU32 {
        &self.0[2 + recut as usize]
    }
}

/// A recut of its parent's that a worker following its parent's epochs
/// found as it closed one of its own. Shared before the parent counted the
/// epoch before its first whole one closed, it is found by the worker's
/// first epoch to follow that one or a later one: the worker's next epoch
/// is its first whole one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParentsRecut {
    pub recut: Recut,
    /// The parent's first whole epoch since.
    pub parents_first_whole: u32,
}

/// The parent's recuts a worker has seen (see [`ParentsRecuts::since`]).
#[derive(Default)]
pub struct ParentsRecuts {
    seen: [AtomicU32; Recut::ALL.len()],
}

impl ParentsRecuts {
    /// As the worker starts following `parent`'s epochs: the recuts made
    /// before are no concern of its epochs.
    pub fn start(&self, parent: SharedEpochs) {
        for (seen, now) in self.seen.iter().zip(parent.recuts()) {
            seen.store(now, Ordering::Relaxed);
        }
    }

    /// The recuts `parent` shared since the worker last looked; to be
    /// called after [`SharedEpochs::closed_with_recuts`]. Should two of a
    /// kind come between two looks, the latest is told.
    pub fn since(&self, parent: SharedEpochs) -> Vec<ParentsRecut> {
        let recuts = Recut::ALL.iter().zip(&self.seen).zip(parent.recuts());
        recuts
            .filter(|((_, seen), now)| *now != 0 && seen.swap(*now, Ordering::Relaxed) != *now)
            .map(|((&recut, _), now)| ParentsRecut { recut, parents_first_whole: now - 1 })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> SharedEpochs {
        SharedEpochs::new(Box::leak(Box::new(std::array::from_fn(|_| AtomicU32::new(0)))))
    }

    #[test]
    fn a_worker_tells_each_recut_of_its_parent_once() {
        let parent = page();
        parent.share_recut(Recut::PassRounds, 2);
        let seen = ParentsRecuts::default();
        // A recut before the worker started is not its concern.
        seen.start(parent);
        assert_eq!(seen.since(parent), vec![]);
        // The outer loop's pass closing the parent's epoch 5 shares that
        // its epochs are whole from 6 on, then counts the epoch closed.
        parent.share_recut(Recut::OuterLoop, 6);
        parent.count_closed();
        assert_eq!(parent.closed_with_recuts(), 1);
        assert_eq!(seen.since(parent), vec![ParentsRecut { recut: Recut::OuterLoop, parents_first_whole: 6 }]);
        assert_eq!(seen.since(parent), vec![], "told once");
        // Two of a kind between two looks: the latest.
        parent.share_recut(Recut::MarkingLoopStopped, 9);
        parent.share_recut(Recut::MarkingLoopStopped, 12);
        assert_eq!(
            seen.since(parent),
            vec![ParentsRecut { recut: Recut::MarkingLoopStopped, parents_first_whole: 12 }]
        );
    }
}
