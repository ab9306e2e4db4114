//! Epochs cut at the passes over a PyTorch DataLoader (`TRACER_AUTO_EPOCHS`,
//! on by default in a Python process whose frames are read).
//!
//! A thread starts a pass when a walk of its Python frames shows a
//! `DataLoader.__iter__` frame and its previous complete walk did not. A job
//! iterates several loaders (training, evaluation, a one-off pass at
//! start-up), and may build a new loader object every epoch, so a pass is
//! known by where it starts from (`LoaderFrames::Present`). The loader that
//! marks the epochs is the first whose passes repeat from one place: its
//! second pass and every later one close the epoch. Passes from elsewhere,
//! and a loader iterated only once (one long pass), cut nothing; time slices
//! cover those runs.
//!
//! A forked child (a DataLoader worker) starts inside its parent's pass,
//! whose frames stay on its stack for its whole life: it must not take them
//! for a pass of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::python::LoaderFrames;
use crate::{lock, thread_state};

/// A thread's pass state after a fork: inside a pass it did not start.
const INHERITED: u64 = u64::MAX;
/// Places remembered while no loader has repeated yet; passes from further
/// places are not candidates (a job has a handful).
const PLACES: usize = 16;

pub struct AutoEpochs {
    /// Off for good once the program marks its own epochs (and in workers).
    watching: AtomicBool,
    passes: Mutex<Passes>,
}

impl AutoEpochs {
    pub fn new(watching: bool) -> AutoEpochs {
        AutoEpochs { watching: AtomicBool::new(watching), passes: Mutex::new(Passes::default()) }
    }

    pub fn watching(&self) -> bool {
        self.watching.load(Ordering::Relaxed)
    }

    /// The program marks its epochs itself (`tracer_mark`), or this process
    /// is a DataLoader worker, whose epochs are its parent's.
    pub fn stop(&self) {
        self.watching.store(false, Ordering::Relaxed);
    }

    /// Takes in what a walk of this thread's frames showed. When it starts a
    /// pass of the loader that marks the epochs, returns the number of the
    /// pass that ran in the epoch to close (1 for the first).
    pub fn walked(&self, frames: LoaderFrames) -> Option<u32> {
        if !self.watching() {
            return None;
        }
        let place = thread_state::update_loader_pass(|current| next_state(current, frames))?;
        lock(&self.passes).started(place)
    }

    /// Whether, still watching, it saw passes over DataLoaders but never two
    /// from one place: each loader ran once, or a loader's later passes
    /// went unseen (one that keeps its workers and does not shuffle makes
    /// only Python objects as a later pass starts).
    pub fn saw_no_repeated_pass(&self) -> bool {
        self.watching() && lock(&self.passes).saw_no_repeated_pass()
    }

    /// Whether this thread's latest walk showed no pass (a pass seen in a
    /// glance then needs a walk to say where it starts from).
    pub fn outside_pass(&self) -> bool {
        thread_state::update_loader_pass(|current| (current, current == 0))
    }
}

/// Called in a forked child on the forking thread, the child's only one;
/// true when that thread was inside a DataLoader pass (the child is one of
/// the pass's workers).
pub fn forked_inside_parents_pass() -> bool {
    thread_state::update_loader_pass(state_after_fork)
}

/// A forked child's pass state, and whether it was forked inside a pass:
/// then it is inside a pass it never starts itself (a worker's own fork
/// is inside it too); outside one, it starts its own passes.
fn state_after_fork(current: u64) -> (u64, bool) {
    match current {
        0 => (0, false),
        _ => (INHERITED, true),
    }
}

/// A thread's new pass state, and the place of a pass that has just started.
fn next_state(current: u64, frames: LoaderFrames) -> (u64, Option<u64>) {
    match frames {
        LoaderFrames::Unknown => (current, None),
        LoaderFrames::Absent => (0, None),
        LoaderFrames::Present(_) if current == INHERITED => (INHERITED, None),
        LoaderFrames::Present(place) if place == current => (current, None),
        LoaderFrames::Present(place) => (place, Some(place)),
    }
}

#[derive(Default)]
struct Passes {
    /// Places seen once, while no loader has repeated.
    seen: [u64; PLACES],
    seen_count: usize,
    /// The place of the loader whose passes mark the epochs.
    marking: Option<u64>,
    /// Passes of that loader so far.
    marking_passes: u32,
}

impl Passes {
    fn saw_no_repeated_pass(&self) -> bool {
        self.marking.is_none() && self.seen_count > 0
    }

    /// A pass started from `place`; the number of the marking loader's pass
    /// that ended when it is that loader's.
    fn started(&mut self, place: u64) -> Option<u32> {
        match self.marking {
            Some(marking) if marking == place => {
                self.marking_passes += 1;
                Some(self.marking_passes - 1)
            }
            Some(_) => None,
            None if self.seen[..self.seen_count].contains(&place) => {
                self.marking = Some(place);
                self.marking_passes = 2;
                Some(1)
            }
            None => {
                if self.seen_count < PLACES {
                    self.seen[self.seen_count] = place;
                    self.seen_count += 1;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRAIN: u64 = 11;
    const EVAL: u64 = 22;
    const WARM_UP: u64 = 33;

    fn cuts(places: &[u64]) -> Vec<Option<u32>> {
        let mut passes = Passes::default();
        places.iter().map(|&place| passes.started(place)).collect()
    }

    #[test]
    fn the_first_loader_to_repeat_marks_the_epochs() {
        let passes = [WARM_UP, TRAIN, EVAL, TRAIN, EVAL, TRAIN, EVAL];
        assert_eq!(cuts(&passes), [None, None, None, Some(1), None, Some(2), None]);
        // Evaluating before training: the evaluation loop repeats first, once an epoch all the same.
        assert_eq!(cuts(&[EVAL, TRAIN, EVAL, TRAIN, EVAL]), [None, None, Some(1), None, Some(2)]);
    }

    #[test]
    fn a_single_pass_cuts_nothing() {
        assert_eq!(cuts(&[WARM_UP, TRAIN]), [None, None]);
    }

    #[test]
    fn passes_that_never_repeat_are_told_apart() {
        let mut passes = Passes::default();
        assert!(!passes.saw_no_repeated_pass(), "no pass at all");
        passes.started(TRAIN);
        passes.started(EVAL);
        assert!(passes.saw_no_repeated_pass());
        passes.started(TRAIN);
        assert!(!passes.saw_no_repeated_pass(), "the training loader repeated");
    }

    #[test]
    fn a_pass_starts_when_the_loader_frame_appears() {
        let present = LoaderFrames::Present(TRAIN);
        assert_eq!(next_state(0, present), (TRAIN, Some(TRAIN)));
        assert_eq!(next_state(TRAIN, present), (TRAIN, None), "the same pass, walked again");
        assert_eq!(next_state(TRAIN, LoaderFrames::Unknown), (TRAIN, None), "a cut-short walk proves nothing");
        assert_eq!(next_state(TRAIN, LoaderFrames::Absent), (0, None));
        assert_eq!(next_state(EVAL, present), (TRAIN, Some(TRAIN)), "another pass began between two walks");
    }

    #[test]
    fn a_forked_worker_never_starts_the_pass_it_was_forked_in() {
        let (state, started) = next_state(INHERITED, LoaderFrames::Present(TRAIN));
        assert_eq!((state, started), (INHERITED, None));
        // Once the inherited frames are gone, its own passes count.
        let (state, _) = next_state(state, LoaderFrames::Absent);
        assert_eq!(next_state(state, LoaderFrames::Present(TRAIN)), (TRAIN, Some(TRAIN)));
    }

    #[test]
    fn only_a_child_forked_inside_a_pass_inherits_it() {
        assert_eq!(state_after_fork(TRAIN), (INHERITED, true));
        assert_eq!(state_after_fork(INHERITED), (INHERITED, true), "a worker's own child");
        assert_eq!(state_after_fork(0), (0, false), "nor does the child of a child forked outside one");
    }
}
