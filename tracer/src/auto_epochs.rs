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
//! An evaluation every N steps of training repeats first, inside the first
//! training pass. When another place's passes then repeat with the marking
//! loop's passes started inside their loop (from a later instruction of the
//! function where the two call paths part) at least twice in between, that
//! place is the outer loop, and its passes mark the epochs from then on.
//!
//! One place may iterate several loaders in turn (an evaluation over a few
//! validation sets, `for loader in loaders: for batch in loader:`): once the
//! first of them comes again, the place is known to go round them, and only
//! the passes over that one close epochs, one per round ([`Round`]).
//!
//! A forked child (a DataLoader worker) starts inside its parent's pass,
//! whose frames stay on its stack for its whole life: it must not take them
//! for a pass of its own.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::python::{loop_name, LoaderFrames, LoopName, PassStart};
use crate::{lock, sys, thread_state};

/// A thread's pass state after a fork: inside a pass it did not start.
const INHERITED: u64 = u64::MAX;
/// Places remembered while no loader has repeated yet; passes from further
/// places are not candidates (a job has a handful).
const PLACES: usize = 16;
/// Loaders a round over one place's loaders may hold; past them, the place
/// is taken to build a new loader for each pass.
const ROUND_LOADERS: usize = 16;

pub struct AutoEpochs {
    /// Off for good once the program marks its own epochs (and in workers).
    watching: AtomicBool,
    passes: Mutex<Passes>,
    /// Loaders of the rounds just found, for the notice of the epoch being
    /// closed; 0 when there is none to give.
    rounds_found: AtomicUsize,
    /// Why another loop just took the epochs over, for the notice of the
    /// epoch being closed ([`Takeover`] as 1 or 2); 0 when there is none.
    taken_over: AtomicU8,
}

impl AutoEpochs {
    pub fn new(watching: bool) -> AutoEpochs {
        AutoEpochs {
            watching: AtomicBool::new(watching),
            passes: Mutex::new(Passes::default()),
            rounds_found: AtomicUsize::new(0),
            taken_over: AtomicU8::new(0),
        }
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
    /// pass that closes the epoch, returns what ended with it. `alive(other,
    /// loader)` says whether the loader object that was at `other` is still
    /// alive, `loader` the live one whose pass starts.
    pub fn walked(&self, frames: LoaderFrames, alive: &dyn Fn(u64, u64) -> bool) -> Option<PassCut> {
        if !self.watching() {
            return None;
        }
        let pass = thread_state::update_loader_pass(|current| next_state(current, frames))?;
        let cut = lock(&self.passes).started(pass, sys::monotonic_ns(), &|other| alive(other, pass.loader))?;
        if cut.rounds_found {
            self.rounds_found.store(cut.loaders, Ordering::Relaxed);
        }
        if let Some(takeover) = cut.taken_over {
            self.taken_over.store(takeover as u8 + 1, Ordering::Relaxed);
        }
        Some(cut)
    }

    /// Why the pass closing the epoch is the first of another loop's that
    /// marks the epochs from now on, if it is; once.
    pub fn take_takeover(&self) -> Option<Takeover> {
        match self.taken_over.swap(0, Ordering::Relaxed) {
            1 => Some(Takeover::OuterLoop),
            2 => Some(Takeover::MarkingLoopStopped),
            _ => None,
        }
    }

    /// The loaders of a round over several that the pass closing the epoch
    /// found, once: the epochs it closed before, from the first round's
    /// second loader on, each held one pass of that round.
    pub fn take_rounds_found(&self) -> Option<usize> {
        Some(self.rounds_found.swap(0, Ordering::Relaxed)).filter(|&loaders| loaders > 0)
    }

    /// Whether, still watching, it saw passes over DataLoaders but never two
    /// from one place: each loader ran once, or a loader's later passes
    /// went unseen (one that keeps its workers and does not shuffle makes
    /// only Python objects as a later pass starts).
    pub fn saw_no_repeated_pass(&self) -> bool {
        self.watching() && lock(&self.passes).saw_no_repeated_pass()
    }

    /// At the end, the most passes another loop made since the marking
    /// loop's latest (too few, or too soon, to take the epochs over), once
    /// the marking loop is overdue (an evaluation inside its last pass is
    /// no other loop's).
    pub fn passes_after_the_marking_loop(&self) -> u32 {
        lock(&self.passes).after_the_marking_loop(sys::monotonic_ns())
    }

    /// Whether another loop made a pass since the marking loop's latest,
    /// less than `within_ns` ago: passes are seen, and should that loop
    /// repeat, it takes the epochs over.
    pub fn another_loop_passes(&self, within_ns: u64) -> bool {
        let passes = lock(&self.passes);
        let now = sys::monotonic_ns();
        passes.marking.is_some()
            && passes.places[..passes.places_count]
                .iter()
                .any(|place| place.since_marking >= 1 && now.saturating_sub(place.at_ns) < within_ns)
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

/// A thread's new pass state (the place of its pass), and the pass that has just started.
fn next_state(current: u64, frames: LoaderFrames) -> (u64, Option<PassStart>) {
    match frames {
        LoaderFrames::Unknown => (current, None),
        LoaderFrames::Absent => (0, None),
        LoaderFrames::Present(_) if current == INHERITED => (INHERITED, None),
        LoaderFrames::Present(pass) if pass.place == current => (current, None),
        LoaderFrames::Present(pass) => (pass.place, Some(pass)),
    }
}

/// An epoch closed by a pass from the place that marks the epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassCut {
    /// The number, among the marking loop's passes (or its rounds, when it
    /// goes round loaders), of the pass (or round) that ran in the epoch
    /// it closes.
    pub number: u32,
    /// Loaders the place goes round (1 when it iterates one loader, or
    /// builds a new one for each pass).
    pub loaders: usize,
    /// It ends the first round over more than two loaders: the epochs the
    /// round's later loaders closed before it were parts of a round.
    pub rounds_found: bool,
    /// Another place's loop took the epochs over with this pass.
    pub taken_over: Option<Takeover>,
    /// How the label names the loop, among the places' loops.
    pub loop_name: Option<LoopName>,
}

/// Why another loop's passes close the epochs from a pass on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// The loop that marked the epochs ran inside the passes of this one:
    /// the epochs it closed were parts of one of this loop's.
    OuterLoop = 0,
    /// The loop that marked the epochs made no pass for a long while, and
    /// this one, which made none between two of its passes, repeated
    /// meanwhile (training, then fine-tuning on another loader).
    MarkingLoopStopped = 1,
}

/// How long the marking loop may make no pass, in times the longest time
/// between two of its passes, and at least (a pause of a few seconds
/// between passes of a fraction of one is no sign that it stopped), before
/// a loop repeating meanwhile takes the epochs over, or, none seen, the
/// default time slices come back.
const MARKING_LOOP_IDLE_GAPS: u64 = 3;
const MARKING_LOOP_IDLE_LEAST_NS: u64 = 5_000_000_000;

/// How long the marking loop, whose passes came at most `longest_gap_ns`
/// apart, may make none before it is taken to have stopped (see
/// [`MARKING_LOOP_IDLE_GAPS`]): its passes unseen, or another loop's
/// running instead.
pub fn marking_loop_idle_ns(longest_gap_ns: u64) -> u64 {
    longest_gap_ns.saturating_mul(MARKING_LOOP_IDLE_GAPS).max(MARKING_LOOP_IDLE_LEAST_NS)
}

/// That rule in words, for the notices that apply it.
pub fn marking_loop_idle_words() -> String {
    format!(
        "{MARKING_LOOP_IDLE_GAPS} times the longest time between two of its passes, {}s at least",
        MARKING_LOOP_IDLE_LEAST_NS / 1_000_000_000
    )
}

impl PassCut {
    /// The label of the epoch it closes, with the loop's name where
    /// `qualname` names the code objects of [`PassCut::loop_name`].
    pub fn label(&self, qualname: &dyn Fn(u64) -> Option<String>) -> String {
        let what = match self.loaders {
            0 | 1 => format!("DataLoader pass {}", self.number),
            loaders => format!("DataLoader round {} ({loaders} loaders)", self.number),
        };
        let Some(name) = self.loop_name else { return what };
        let caller = match name.caller {
            None => Some(String::new()),
            Some(code) => qualname(code).map(|caller| format!(" (from {caller})")),
        };
        match (qualname(name.function), caller) {
            (Some(function), Some(caller)) => format!("{what} in {function}{caller}"),
            _ => what,
        }
    }
}

#[derive(Default)]
struct Passes {
    /// Places seen, each with its latest pass; passes from further places
    /// are not followed.
    places: [Place; PLACES],
    places_count: usize,
    /// The place of the loader whose passes mark the epochs, as its latest
    /// pass started from it.
    marking: Option<PassStart>,
    /// The loaders that place iterates.
    round: Round,
    /// The number, among its passes, of the pass that ran in the epoch its
    /// latest pass closed.
    closed: u32,
    /// A round over more than two loaders was found.
    rounds_found: bool,
    /// The number, among the marking place's rounds, of the round that ran
    /// in the epoch its latest pass closed, when it goes round loaders.
    rounds_closed: u32,
    /// Passes started, from every place.
    passes: u64,
    /// When the marking loop's latest pass started, and the longest time
    /// between two of its passes.
    marking_at_ns: u64,
    longest_marking_gap_ns: u64,
}

/// A place passes start from, and the passes from other places that began
/// inside the loop of its latest pass or after it (see
/// [`crate::python::data_loader::OuterFrames::start_after`]), where that
/// pass is the latest such one: an evaluation every N steps of training runs
/// again and again inside one training pass, where a validation after each
/// of two training loops taking turns (even epochs on one line, odd ones on
/// another) runs after the latest of the two.
#[derive(Clone, Copy, Default)]
struct Place {
    latest: PassStart,
    /// The number of its latest pass among all places' passes, and when it started.
    serial: u64,
    at_ns: u64,
    /// It made passes between two of the marking loop's: a loop that
    /// goes on beside it (an evaluation after each training pass, or every
    /// N steps inside one), no later phase of the job.
    beside_marking: bool,
    inner: [(PassStart, u32); INNER_PLACES],
    inner_count: usize,
    /// Its passes since the marking loop's latest.
    since_marking: u32,
    /// Its passes.
    passes: u32,
}

/// Places whose passes inside another's a place counts.
const INNER_PLACES: usize = 4;

/// Passes of the marking loop inside one pass of another place's loop
/// that make that loop the outer one, which then marks the epochs.
const INNER_PASSES_OF_AN_OUTER_LOOP: u32 = 2;

impl Place {
    fn new(pass: PassStart, serial: u64, at_ns: u64) -> Place {
        Place { latest: pass, serial, at_ns, passes: 1, ..Place::default() }
    }

    /// Passes from `place` counted inside this place's latest pass.
    fn inner_passes(&self, place: &PassStart) -> u32 {
        self.inner[..self.inner_count].iter().find(|(inner, _)| inner.same_place(place)).map_or(0, |&(_, n)| n)
    }

    /// Whether the loop marking the epochs from `marking` ran again and
    /// again inside this place's latest pass: this place's loop is the
    /// outer one (training, with an evaluation every N steps).
    fn held_the_marking_loop(&self, marking: &PassStart) -> bool {
        self.inner_passes(marking) >= INNER_PASSES_OF_AN_OUTER_LOOP
    }

    fn count_inner(&mut self, pass: &PassStart) {
        match self.inner[..self.inner_count].iter_mut().find(|(inner, _)| inner.same_place(pass)) {
            Some((_, n)) => *n += 1,
            None if self.inner_count < INNER_PLACES => {
                self.inner[self.inner_count] = (*pass, 1);
                self.inner_count += 1;
            }
            None => {}
        }
    }
}

impl Passes {
    /// See [`AutoEpochs::passes_after_the_marking_loop`], at `now_ns`.
    fn after_the_marking_loop(&self, now_ns: u64) -> u32 {
        let idle = now_ns.saturating_sub(self.marking_at_ns);
        match self.marking {
            Some(_) if self.longest_marking_gap_ns > 0 && idle > self.longest_marking_gap_ns => self.places
                [..self.places_count]
                .iter()
                .filter(|place| !place.beside_marking)
                .map(|place| place.since_marking)
                .max()
                .unwrap_or(0),
            _ => 0,
        }
    }

    fn saw_no_repeated_pass(&self) -> bool {
        self.marking.is_none() && self.places_count > 0
    }

    /// A pass started; what ended when it closes the epoch. `alive` says
    /// whether the loader object that was at an address is still alive.
    fn started(&mut self, pass: PassStart, now_ns: u64, alive: &dyn Fn(u64) -> bool) -> Option<PassCut> {
        self.passes += 1;
        let places = &mut self.places[..self.places_count];
        let enclosing = places
            .iter_mut()
            .filter(|place| !place.latest.same_place(&pass) && pass.outer.start_after(&place.latest.outer))
            .max_by_key(|place| place.serial);
        if let Some(place) = enclosing {
            place.count_inner(&pass);
        }
        let mut started = Place::new(pass, self.passes, now_ns);
        let Some(index) = places.iter().position(|place| place.latest.same_place(&pass)) else {
            // A loop whose first pass another place started: a framework
            // that makes the first epoch's iterator where it sets the loop
            // up, and each later one where an epoch starts (Lightning's fit
            // loop). The latest pass over the same loader, that place's
            // only one, was this loop's first, and this one repeats it:
            // when it was the pass just before, with no loop marking the
            // epochs yet, or when the marking loop ran again and again
            // inside it (an evaluation every N steps), as a repeat's would.
            let first = places
                .iter()
                .filter(|place| pass.loader != 0 && place.latest.loader == pass.loader)
                .max_by_key(|place| place.serial)
                .filter(|place| place.passes == 1)
                .filter(|place| match self.marking {
                    None => place.serial + 1 == self.passes,
                    Some(marking) => place.held_the_marking_loop(&marking),
                })
                .map(|place| place.latest);
            // Its first pass counts among those since the marking loop's latest.
            started.since_marking = u32::from(self.marking.is_some());
            if self.places_count < PLACES {
                self.places[self.places_count] = started;
                self.places_count += 1;
            }
            let first = first?;
            return match self.marking {
                None => self.mark_from(first, pass, now_ns, alive, None),
                Some(_) => self.outer_loop_takes_over(first, pass, now_ns, alive),
            };
        };
        started.since_marking = self.places[index].since_marking + 1;
        started.passes = self.places[index].passes + 1;
        started.beside_marking = self.places[index].beside_marking;
        let previous = std::mem::replace(&mut self.places[index], started);
        match self.marking {
            Some(marking) if marking.same_place(&pass) => {
                self.marking = Some(pass);
                let gap = now_ns.saturating_sub(self.marking_at_ns);
                self.longest_marking_gap_ns = self.longest_marking_gap_ns.max(gap);
                for place in &mut self.places[..self.places_count] {
                    place.beside_marking |= place.since_marking > 0;
                }
                self.marking_passed(now_ns);
                let closes = self.round.begins_round(pass.loader, alive);
                self.close_if(closes, None)
            }
            Some(marking) if previous.held_the_marking_loop(&marking) => {
                self.outer_loop_takes_over(previous.latest, pass, now_ns, alive)
            }
            Some(_)
                if self.places[index].since_marking >= 2
                    && !self.places[index].beside_marking
                    && self.marking_loop_stopped(now_ns) =>
            {
                // Its passes before this one ran in the epoch this one closes.
                self.closed = self.places[index].since_marking - 2;
                self.mark_from(previous.latest, pass, now_ns, alive, Some(Takeover::MarkingLoopStopped))
            }
            Some(_) => None,
            None => self.mark_from(previous.latest, pass, now_ns, alive, None),
        }
    }

    /// Whether the marking loop has made no pass for long enough that a
    /// loop repeating meanwhile takes the epochs over: it is known to
    /// repeat at some pace (a time between two of its passes seen), and has been idle for
    /// [`MARKING_LOOP_IDLE_GAPS`] times its longest gap.
    fn marking_loop_stopped(&self, now_ns: u64) -> bool {
        let longest = self.longest_marking_gap_ns;
        let idle = now_ns.saturating_sub(self.marking_at_ns);
        longest > 0 && idle > marking_loop_idle_ns(longest)
    }

    /// The marking loop's pass started at `now_ns`: every place's passes
    /// are counted from it on.
    fn marking_passed(&mut self, now_ns: u64) {
        self.marking_at_ns = now_ns;
        for place in &mut self.places[..self.places_count] {
            place.since_marking = 0;
        }
    }

    /// The loop that started `first` and now `pass` (at `now_ns`), inside
    /// whose first pass the marking loop ran again and again, is the outer
    /// loop, which marks the epochs from now on.
    fn outer_loop_takes_over(
        &mut self,
        first: PassStart,
        pass: PassStart,
        now_ns: u64,
        alive: &dyn Fn(u64) -> bool,
    ) -> Option<PassCut> {
        // Its first pass ran in the epoch this one closes.
        self.closed = 0;
        self.mark_from(first, pass, now_ns, alive, Some(Takeover::OuterLoop))
    }

    /// The place that started `first` and now `pass` (at `now_ns`) marks the epochs.
    fn mark_from(
        &mut self,
        first: PassStart,
        pass: PassStart,
        now_ns: u64,
        alive: &dyn Fn(u64) -> bool,
        taken_over: Option<Takeover>,
    ) -> Option<PassCut> {
        self.marking = Some(pass);
        self.longest_marking_gap_ns = 0;
        // Nothing has run beside the new marking loop yet.
        for place in &mut self.places[..self.places_count] {
            place.beside_marking = false;
        }
        self.marking_passed(now_ns);
        self.round = Round::default();
        self.rounds_closed = 0;
        self.round.begins_round(first.loader, alive);
        let closes = self.round.begins_round(pass.loader, alive);
        self.close_if(closes, taken_over)
    }

    fn close_if(&mut self, closes: bool, taken_over: Option<Takeover>) -> Option<PassCut> {
        if !closes {
            return None;
        }
        self.closed += 1;
        let loaders = self.round.loaders();
        let rounds_found = loaders > 2 && !self.rounds_found;
        self.rounds_found |= rounds_found;
        // The epoch that ends the first round found held its last pass.
        self.rounds_closed = if rounds_found { 1 } else { self.rounds_closed + 1 };
        let number = if loaders > 1 { self.rounds_closed } else { self.closed };
        Some(PassCut { number, loaders, rounds_found, taken_over, loop_name: self.marking_loop_name() })
    }

    /// The marking loop's name among the places' loops (see [`loop_name`]).
    fn marking_loop_name(&self) -> Option<LoopName> {
        let marking = self.marking?;
        let places = &self.places[..self.places_count];
        let index = places.iter().position(|place| place.latest.same_place(&marking))?;
        let mut paths = [&places[index].latest.outer; PLACES];
        for (path, place) in paths.iter_mut().zip(places) {
            *path = &place.latest.outer;
        }
        loop_name(&paths[..places.len()], index)
    }
}

/// The loaders the marking place iterates, in the order of their first
/// passes since the round began. A job that goes round several loaders from
/// one place (A, B, C, A, B, C, ...) closes an epoch at each pass over the
/// first only; one that iterates one loader again and again, or builds a
/// new loader for each pass, closes one at every pass. Loaders are known
/// by their addresses, which a loop building a new loader each pass reuses
/// (the new loader is made while the one before is alive, then that one is
/// freed: A, B, A, B, ...): the first loader coming again begins a round
/// only while the others of the round are alive (in a list of validation
/// loaders), not freed.
#[derive(Default)]
struct Round {
    loaders: [u64; ROUND_LOADERS],
    len: usize,
    /// The first loader came again after the others: the place goes round them.
    cycles: bool,
}

impl Round {
    /// Takes in a pass over `loader` (0: not known); whether it begins a
    /// round. `alive` says whether the loader that was at an address is.
    fn begins_round(&mut self, loader: u64, alive: &dyn Fn(u64) -> bool) -> bool {
        if loader == 0 {
            return true;
        }
        match self.loaders[..self.len].iter().position(|&known| known == loader) {
            Some(0) if self.cycles => true,
            Some(0) if self.loaders[1..self.len].iter().all(|&other| alive(other)) => {
                self.cycles = true;
                true
            }
            // A new loader where the first was, the others freed.
            Some(0) => self.restart(loader, alive),
            Some(_) if self.cycles => false,
            // A later loader came again before the first: the rounds begin at it.
            Some(_) => self.restart(loader, alive),
            // A new loader each pass, or the first round over several, which
            // only the first loader's next pass tells apart; or, once the
            // place goes round, a new set of loaders.
            None if self.cycles || self.len == ROUND_LOADERS => self.restart(loader, alive),
            None => {
                self.loaders[self.len] = loader;
                self.len += 1;
                true
            }
        }
    }

    /// Begins the rounds again at `loader`; true.
    fn restart(&mut self, loader: u64, alive: &dyn Fn(u64) -> bool) -> bool {
        *self = Round::default();
        self.begins_round(loader, alive)
    }

    /// Loaders the place goes round; 1 until it is known to.
    fn loaders(&self) -> usize {
        if self.cycles {
            self.len
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRAIN: u64 = 11;
    const EVAL: u64 = 22;
    const WARM_UP: u64 = 33;

    /// Loader objects, by address.
    const TRAIN_LOADER: u64 = 0x1000;
    const EVAL_LOADER: u64 = 0x2000;
    const WARM_UP_LOADER: u64 = 0x3000;

    /// A pass from `place`, a function called from its first instruction.
    fn pass(place: u64, loader: u64) -> PassStart {
        let outer = crate::python::OuterFrames::of(&[crate::python::pack(place, 0, false)]);
        PassStart { place, loader, outer }
    }

    /// A pass started from `frames`, innermost first, each `(code, instruction)`.
    fn pass_from(place: u64, loader: u64, frames: &[(u64, u32)]) -> PassStart {
        let words: Vec<u64> = frames.iter().map(|&(code, at)| crate::python::pack(code, at, false)).collect();
        PassStart { outer: crate::python::OuterFrames::of(&words), ..pass(place, loader) }
    }

    /// Code objects of a job, and the passes it starts: `main` calls
    /// `train_epoch` (which iterates the training loader) and, on later
    /// lines, `validate` and `test`; `train_epoch` calls `evaluate` from its
    /// loop's body.
    const MODULE: (u64, u32) = (1, 40);
    const MAIN: u64 = 2;
    const TRAIN_EPOCH: u64 = 3;
    const EVALUATE: u64 = 4;
    const TEST: u64 = 5;
    const TEST_PLACE: u64 = 44;

    /// The names of the code objects above.
    fn qualname(code: u64) -> Option<String> {
        let name = match code {
            MAIN => "main",
            TRAIN_EPOCH => "train_epoch",
            EVALUATE => "evaluate",
            TEST => "test",
            _ => return None,
        };
        Some(name.to_string())
    }

    fn training() -> PassStart {
        pass_from(TRAIN, TRAIN_LOADER, &[(TRAIN_EPOCH, 10), (MAIN, 20), MODULE])
    }

    fn evaluation_every_n_steps() -> PassStart {
        pass_from(EVAL, EVAL_LOADER, &[(EVALUATE, 6), (TRAIN_EPOCH, 30), (MAIN, 20), MODULE])
    }

    fn validation_after_training() -> PassStart {
        pass_from(EVAL, EVAL_LOADER, &[(EVALUATE, 6), (MAIN, 30), MODULE])
    }

    fn test_every_few_epochs() -> PassStart {
        pass_from(TEST_PLACE, 0x4000, &[(TEST, 8), (MAIN, 25), MODULE])
    }

    /// An evaluation every N steps of training repeats first, inside the
    /// first training pass: its passes close epochs until the training
    /// loop's second pass, which marks the epochs from then on, one each.
    #[test]
    fn an_outer_loop_takes_the_epochs_from_a_loop_inside_it() {
        let (train, eval) = (training(), evaluation_every_n_steps());
        let passes = [train, eval, eval, eval, train, eval, eval, eval, train, eval, eval, eval, train];
        // Labels name the pass of the loop closing the epochs that ran in
        // it, and the loop by the function it runs in.
        let expected = [
            None,
            None,
            Some("DataLoader pass 1 in evaluate"),
            Some("DataLoader pass 2 in evaluate"),
            Some("DataLoader pass 1 in train_epoch"),
            None,
            None,
            None,
            Some("DataLoader pass 2 in train_epoch"),
            None,
            None,
            None,
            Some("DataLoader pass 3 in train_epoch"),
        ];
        assert_eq!(cuts(&passes), labels(&expected));
        let mut seen = Passes::default();
        let found: Vec<Option<Takeover>> = passes
            .iter()
            .zip(0..)
            .filter_map(|(&pass, at)| seen.started(pass, at * SECOND, &|_| true))
            .map(|cut| cut.taken_over)
            .collect();
        assert_eq!(found, [None, None, Some(Takeover::OuterLoop), None, None]);
        // Two evaluations every N steps, from two lines in turn: the first marks until the training repeats.
        let test = pass_from(EVAL + 1, 0x5000, &[(EVALUATE, 6), (TRAIN_EPOCH, 36), (MAIN, 20), MODULE]);
        let passes = [train, eval, test, eval, test, train, eval, test, eval, test, train];
        let closing: Vec<bool> = cuts(&passes).iter().map(Option::is_some).collect();
        assert_eq!(closing, [false, false, false, true, false, true, false, false, false, false, true]);
        // An evaluation once a training pass: the training loop repeats first.
        let expected =
            [None, None, Some("DataLoader pass 1 in train_epoch"), None, Some("DataLoader pass 2 in train_epoch")];
        assert_eq!(cuts(&[train, eval, train, eval, train]), labels(&expected));
        // Streaming training (one endless pass): the evaluation marks for good.
        let closing: Vec<bool> = cuts(&[train, eval, eval, eval, eval]).iter().map(Option::is_some).collect();
        assert_eq!(closing, [false, false, true, true, true]);
    }

    /// Loops beside the training loop never take its epochs: a validation
    /// after each training pass that repeated first (evaluated once before
    /// training), a test every few epochs from a function of its own.
    #[test]
    fn loops_beside_the_marking_one_leave_it_the_epochs() {
        let (train, validation) = (training(), validation_after_training());
        let expected = [
            None,
            None,
            Some("DataLoader pass 1 in evaluate"),
            None,
            Some("DataLoader pass 2 in evaluate"),
            None,
            Some("DataLoader pass 3 in evaluate"),
        ];
        assert_eq!(cuts(&[validation, train, validation, train, validation, train, validation]), labels(&expected));
        // Two training lines taking turns (even epochs on one, odd ones on
        // the other), a validation after each: one run of it after each.
        let even = pass_from(TRAIN, TRAIN_LOADER, &[(MAIN, 20), MODULE]);
        let odd = pass_from(TRAIN + 1, TRAIN_LOADER, &[(MAIN, 26), MODULE]);
        let eval = pass_from(EVAL, EVAL_LOADER, &[(EVALUATE, 6), (MAIN, 32), MODULE]);
        let passes = [even, eval, odd, eval, even, eval, odd, eval, even, eval];
        let closing: Vec<bool> = cuts(&passes).iter().map(Option::is_some).collect();
        assert_eq!(closing, [false, false, false, true, false, true, false, true, false, true]);
        let test = test_every_few_epochs();
        let passes = [train, test, train, train, train, test, train, train, train, test, train];
        let closing: Vec<bool> = cuts(&passes).iter().map(Option::is_some).collect();
        let training_passes: Vec<bool> = passes.iter().enumerate().map(|(i, p)| i > 0 && p.place == TRAIN).collect();
        assert_eq!(closing, training_passes);
    }

    /// The label of the epoch each pass closes, every loader seen alive.
    const SECOND: u64 = 1_000_000_000;

    /// Whether each pass, started at the second given, closes the epoch, and why another loop took them over.
    fn timed_cuts(passes: &[(PassStart, u64)]) -> Vec<Option<Option<Takeover>>> {
        let mut seen = Passes::default();
        passes.iter().map(|&(pass, at)| seen.started(pass, at * SECOND, &|_| true).map(|cut| cut.taken_over)).collect()
    }

    /// Training on one loader, then fine-tuning on another: once the
    /// training loop has made no pass for three times the longest time
    /// between two of its passes, the fine-tuning loop, which repeated
    /// meanwhile, closes the epochs. Passes of another loop that stop
    /// sooner (a few passes of testing at the end) leave them to training.
    #[test]
    fn a_loop_repeating_after_the_marking_one_stopped_takes_the_epochs() {
        let tune = pass(TRAIN + 100, 0x7000);
        let mut passes: Vec<(PassStart, u64)> = (0..5).map(|k| (pass(TRAIN, TRAIN_LOADER), 10 * k)).collect();
        passes.extend((5..10).map(|k| (tune, 10 * k)));
        let stopped = Some(Takeover::MarkingLoopStopped);
        let expected =
            [None, Some(None), Some(None), Some(None), Some(None), None, None, None, Some(stopped), Some(None)];
        assert_eq!(timed_cuts(&passes), expected);
        // A fine-tuning loader looked at once before the training (a batch
        // printed) is no loop beside it all the same.
        let mut peeked = vec![(tune, 0)];
        peeked.extend(passes.iter().map(|&(pass, at)| (pass, at + 1)));
        assert_eq!(timed_cuts(&peeked)[1..], expected);
        // The epoch the takeover closes held fine-tuning passes 1 to 3.
        let mut seen = Passes::default();
        let labels: Vec<String> = passes
            .iter()
            .filter_map(|&(pass, at)| seen.started(pass, at * SECOND, &|_| true))
            .map(|cut| cut.label(&qualname))
            .collect();
        assert_eq!(labels[4..], ["DataLoader pass 3", "DataLoader pass 4"]);
        let mut passes: Vec<(PassStart, u64)> = (0..5).map(|k| (pass(TRAIN, TRAIN_LOADER), 10 * k)).collect();
        passes.extend((0..3).map(|k| (tune, 45 + 10 * k)));
        assert!(timed_cuts(&passes)[5..].iter().all(Option::is_none));
        // At the end, the three passes it made after training's last are
        // told, once training is overdue; an evaluation inside training's
        // last pass, before that, is not.
        let mut seen = Passes::default();
        for &(pass, at) in &passes {
            seen.started(pass, at * SECOND, &|_| true);
        }
        assert_eq!(seen.after_the_marking_loop(70 * SECOND), 3);
        assert_eq!(seen.after_the_marking_loop(48 * SECOND), 0);
    }

    /// A loop that ran beside the marking one before its latest pass (an
    /// evaluation every N steps of the training it took the epochs from)
    /// goes on with it: a training pass three times as long as any before
    /// (a long checkpoint) leaves the epochs to the training, and the
    /// evaluations inside its last pass are no other phase at the end.
    #[test]
    fn a_loop_that_ran_beside_the_marking_one_is_no_later_phase() {
        let (train, eval) = (training(), evaluation_every_n_steps());
        // Passes 10 s apart, four evaluations in each; then one of 60 s.
        let mut passes = Vec::new();
        for k in 0..4 {
            passes.push((train, 10 * k));
            passes.extend((1..=4).map(|e| (eval, 10 * k + 2 * e)));
        }
        passes.push((train, 40));
        passes.extend((1..=20).map(|e| (eval, 40 + 3 * e)));
        passes.push((train, 100));
        let found: Vec<Option<Takeover>> = timed_cuts(&passes).into_iter().flatten().collect();
        assert_eq!(found, [None, None, None, Some(Takeover::OuterLoop), None, None, None, None], "{found:?}");
        let mut seen = Passes::default();
        for &(pass, at) in &passes {
            seen.started(pass, at * SECOND, &|_| true);
        }
        seen.started(eval, 105 * SECOND, &|_| true);
        assert_eq!(seen.after_the_marking_loop(130 * SECOND), 0, "the evaluation goes on with the training");
    }

    fn cuts(passes: &[PassStart]) -> Vec<Option<String>> {
        cuts_with(passes, &|_| true)
    }

    fn cuts_with(passes: &[PassStart], alive: &dyn Fn(u64) -> bool) -> Vec<Option<String>> {
        let mut seen = Passes::default();
        passes
            .iter()
            .zip(0..)
            .map(|(&pass, at)| seen.started(pass, at * SECOND, alive).map(|cut| cut.label(&qualname)))
            .collect()
    }

    fn labels(labels: &[Option<&str>]) -> Vec<Option<String>> {
        labels.iter().map(|label| label.map(str::to_string)).collect()
    }

    #[test]
    fn the_first_loader_to_repeat_marks_the_epochs() {
        let (train, eval, warm_up) =
            (pass(TRAIN, TRAIN_LOADER), pass(EVAL, EVAL_LOADER), pass(WARM_UP, WARM_UP_LOADER));
        let passes = [warm_up, train, eval, train, eval, train, eval];
        let expected = [None, None, None, Some("DataLoader pass 1"), None, Some("DataLoader pass 2"), None];
        assert_eq!(cuts(&passes), labels(&expected));
        // Evaluating before training: the evaluation loop repeats first, once an epoch all the same.
        let expected = [None, None, Some("DataLoader pass 1"), None, Some("DataLoader pass 2")];
        assert_eq!(cuts(&[eval, train, eval, train, eval]), labels(&expected));
    }

    #[test]
    fn a_loader_built_for_each_pass_closes_an_epoch_at_each() {
        let passes: Vec<PassStart> = (1..=40).map(|n| pass(TRAIN, n * 0x100)).collect();
        let cut = cuts(&passes);
        assert_eq!(cut[0], None);
        let expected: Vec<Option<String>> = (1..40).map(|n| Some(format!("DataLoader pass {n}"))).collect();
        assert_eq!(cut[1..], expected[..], "past the loaders a round may hold too");
    }

    #[test]
    fn loaders_gone_round_from_one_place_close_an_epoch_a_round() {
        let loaders = [0xa0, 0xb0, 0xc0, 0xd0];
        let round = loaders.map(|loader| pass(EVAL, loader));
        let passes: Vec<PassStart> = round.iter().cycle().take(4 * 4).copied().collect();
        // The first round cannot be told from loaders built for each pass
        // until the first loader comes again.
        // The epochs are numbered by the rounds they held from then on, the
        // first round's last pass in the one its end closes.
        let mut expected = vec![None, Some("DataLoader pass 1".into()), Some("DataLoader pass 2".into())];
        expected.push(Some("DataLoader pass 3".into()));
        for n in 1..=3 {
            expected.extend([Some(format!("DataLoader round {n} (4 loaders)")), None, None, None]);
        }
        assert_eq!(cuts(&passes), expected);
        // A training loader that never repeats (one endless pass) changes nothing.
        let mut with_training = vec![pass(TRAIN, TRAIN_LOADER)];
        with_training.extend(&passes);
        assert_eq!(cuts(&with_training)[1..], expected[..]);
    }

    #[test]
    fn rounds_follow_the_loaders_the_place_iterates() {
        let (a, b, c) = (pass(EVAL, 0xa0), pass(EVAL, 0xb0), pass(EVAL, 0xc0));
        // A loader iterated first once, then another again and again: the rounds begin at the other.
        let expected = [None, Some("DataLoader pass 1"), Some("DataLoader pass 2"), Some("DataLoader pass 3")];
        assert_eq!(cuts(&[a, b, b, b]), labels(&expected));
        // Gone round in another order: still one cut a round.
        let passes = [a, b, c, a, c, b, a, b, c];
        let closing: Vec<bool> = cuts(&passes).iter().map(Option::is_some).collect();
        assert_eq!(closing, [false, true, true, true, false, false, true, false, false]);
        // New loaders after the rounds were known: a cut at each again.
        let (d, e) = (pass(EVAL, 0xd0), pass(EVAL, 0xe0));
        let closing: Vec<bool> = cuts(&[a, b, a, b, d, e]).iter().map(Option::is_some).collect();
        assert_eq!(closing, [false, true, true, false, true, true]);
    }

    /// A loop that builds a new loader each pass, the new one made while
    /// the one before is alive, then that one freed: their addresses take
    /// turns. The first address coming again, the other's loader freed, is a
    /// new loader, not a round: every pass closes an epoch. Two validation
    /// loaders kept in a list, both alive, go round.
    #[test]
    fn a_new_loader_where_the_first_was_begins_no_round() {
        let (a, b) = (pass(TRAIN, 0xa0), pass(TRAIN, 0xb0));
        let passes = [a, b, a, b, a, b];
        let every: Vec<Option<String>> =
            std::iter::once(None).chain((1..6).map(|n| Some(format!("DataLoader pass {n}")))).collect();
        assert_eq!(cuts_with(&passes, &|_| false), every);
        let closing: Vec<bool> = cuts(&passes).iter().map(Option::is_some).collect();
        assert_eq!(closing, [false, true, true, false, true, false]);
    }

    /// `for i, x in enumerate(loader)` on 3.11: the first passes call
    /// `DataLoader.__iter__` from another instruction of the line than the
    /// later ones, once the call is specialized, and a framework's deeper
    /// path has frame after frame moved over its first epochs: passes whose
    /// frames moved by two code units are the same place, and the training
    /// loop repeats first, each of its passes closing an epoch, not the
    /// evaluation's. A call further away is another place (a statistics
    /// pass over the same loader on the line before).
    #[test]
    fn a_loop_whose_calls_were_specialized_is_the_same_place() {
        // Each with a key of its own, as frames at other instructions have.
        let train_at = |epoch: u32, fit: u32| {
            let place = TRAIN << 16 | u64::from(epoch << 8 | fit);
            pass_from(place, TRAIN_LOADER, &[(TRAIN_EPOCH, epoch), (MAIN + 10, fit), (MAIN, 14), MODULE])
        };
        let eval_at = |evaluate: u32| {
            pass_from(EVAL << 16 | u64::from(evaluate), EVAL_LOADER, &[(EVALUATE, evaluate), (MAIN, 40), MODULE])
        };
        // One frame moved, then another (each by two units, in turn).
        let (train_first, train_moved, train) = (train_at(10, 20), train_at(8, 20), train_at(8, 18));
        let (eval_first, eval) = (eval_at(6), eval_at(4));
        let passes = [train_first, eval_first, train_moved, eval_first, train, eval, train, eval];
        let expected = [
            None,
            None,
            Some("DataLoader pass 1"),
            None,
            Some("DataLoader pass 2"),
            None,
            Some("DataLoader pass 3"),
            None,
        ];
        assert_eq!(cuts(&passes), labels(&expected));
        // The training loop's first pass, right after the statistics pass
        // over its loader, repeats it (see the next test); the statistics
        // passes from then on cut nothing.
        let stats = train_at(4, 20);
        let expected = [None, Some("DataLoader pass 1"), None, Some("DataLoader pass 2"), None];
        assert_eq!(cuts(&[stats, train_first, stats, train_moved, stats]), labels(&expected));
        // The moved frames are not where the two paths part.
        assert!(!train.outer.start_after(&train_first.outer));
        assert!(eval.outer.start_after(&train_first.outer));
    }

    /// Lightning's fit loop makes the first epoch's iterator where it sets
    /// the loop up, and each later one where an epoch starts: the loop's
    /// first pass from its own place repeats the pass just before over the
    /// same loader, and closes the first epoch. Not after another pass in
    /// between, over another loader, or a place that made passes before.
    #[test]
    fn a_loops_first_pass_over_the_loader_set_up_just_before_repeats_it() {
        let set_up = pass_from(WARM_UP, TRAIN_LOADER, &[(MAIN + 20, 8), (MAIN, 12), MODULE]);
        let train = training();
        let expected = [
            None,
            Some("DataLoader pass 1 in train_epoch"),
            Some("DataLoader pass 2 in train_epoch"),
            Some("DataLoader pass 3 in train_epoch"),
        ];
        assert_eq!(cuts(&[set_up, train, train, train]), labels(&expected));
        // A validation after each epoch, its sanity pass before it all: the
        // validation repeats first, at its second pass, as before.
        let sanity = pass_from(WARM_UP + 1, EVAL_LOADER, &[(EVALUATE, 6), (MAIN + 30, 4), (MAIN, 10), MODULE]);
        let validation = validation_after_training();
        let passes = [sanity, set_up, validation, train, validation, train, validation];
        let expected = [
            None,
            None,
            None,
            None,
            Some("DataLoader pass 1 in evaluate"),
            None,
            Some("DataLoader pass 2 in evaluate"),
        ];
        assert_eq!(cuts(&passes), labels(&expected));
        // Another loader's pass in between, or a loader not read: no repeat.
        let other = pass_from(EVAL + 5, EVAL_LOADER, &[(MAIN + 40, 8), (MAIN, 16), MODULE]);
        let expected = [None, None, None, Some("DataLoader pass 1 in train_epoch")];
        assert_eq!(cuts(&[set_up, other, train, train]), labels(&expected));
        let unread = |p: PassStart| PassStart { loader: 0, ..p };
        let passes = [unread(set_up), unread(train), unread(train)];
        assert_eq!(cuts(&passes), labels(&[None, None, Some("DataLoader pass 1 in train_epoch")]));
    }

    /// Lightning's fit loop with an evaluation every quarter epoch: the
    /// evaluation repeats first, inside the training's first pass (made
    /// where the loop is set up), and closes epochs until the training
    /// loop's first pass from its own place, which repeats that one and
    /// takes the epochs over, as its second pass from one place would.
    #[test]
    fn an_outer_loop_set_up_elsewhere_takes_the_epochs_at_its_second_pass() {
        let (fit, setup, sanity_loop, epoch_loop) = (60, 61, 62, 63);
        let sanity = pass_from(EVAL + 1, EVAL_LOADER, &[(EVALUATE, 6), (sanity_loop, 4), (fit, 8), (MAIN, 12), MODULE]);
        let set_up = pass_from(TRAIN + 1, TRAIN_LOADER, &[(setup, 4), (fit, 10), (MAIN, 12), MODULE]);
        let train = pass_from(TRAIN, TRAIN_LOADER, &[(epoch_loop, 6), (fit, 30), (MAIN, 12), MODULE]);
        let eval = pass_from(EVAL, EVAL_LOADER, &[(EVALUATE, 6), (epoch_loop, 40), (fit, 30), (MAIN, 12), MODULE]);
        let mut passes = vec![sanity, set_up, eval, eval, eval, eval];
        for _ in 0..3 {
            passes.extend([train, eval, eval, eval, eval]);
        }
        let (p1, p2, p3) = (Some("DataLoader pass 1"), Some("DataLoader pass 2"), Some("DataLoader pass 3"));
        let expected = [None, None, None, p1, p2, p3, p1, None, None, None, None, p2, None, None, None, None]
            .into_iter()
            .chain([p3, None, None, None, None]);
        assert_eq!(cuts(&passes), labels(&expected.collect::<Vec<_>>()));
        let mut seen = Passes::default();
        let takeovers: Vec<usize> = passes
            .iter()
            .zip(0..)
            .filter_map(|(&pass, at)| Some((seen.started(pass, at * SECOND, &|_| true)?, at)))
            .filter(|(cut, _)| cut.taken_over == Some(Takeover::OuterLoop))
            .map(|(_, at)| at as usize)
            .collect();
        assert_eq!(takeovers, [6], "the training loop's first pass from its own place");
    }

    #[test]
    fn an_unread_loader_closes_an_epoch_at_each_pass() {
        let unread = pass(EVAL, 0);
        let closing: Vec<bool> = cuts(&[unread, unread, unread]).iter().map(Option::is_some).collect();
        assert_eq!(closing, [false, true, true]);
    }

    #[test]
    fn a_single_pass_cuts_nothing() {
        assert_eq!(cuts(&[pass(WARM_UP, WARM_UP_LOADER), pass(TRAIN, TRAIN_LOADER)]), [None, None]);
    }

    #[test]
    fn passes_that_never_repeat_are_told_apart() {
        let mut passes = Passes::default();
        assert!(!passes.saw_no_repeated_pass(), "no pass at all");
        passes.started(pass(TRAIN, TRAIN_LOADER), 0, &|_| true);
        passes.started(pass(EVAL, EVAL_LOADER), 0, &|_| true);
        assert!(passes.saw_no_repeated_pass());
        passes.started(pass(TRAIN, TRAIN_LOADER), 0, &|_| true);
        assert!(!passes.saw_no_repeated_pass(), "the training loader repeated");
    }

    #[test]
    fn a_pass_starts_when_the_loader_frame_appears() {
        let train = pass(TRAIN, TRAIN_LOADER);
        let present = LoaderFrames::Present(train);
        assert_eq!(next_state(0, present), (TRAIN, Some(train)));
        assert_eq!(next_state(TRAIN, present), (TRAIN, None), "the same pass, walked again");
        assert_eq!(next_state(TRAIN, LoaderFrames::Unknown), (TRAIN, None), "a cut-short walk proves nothing");
        assert_eq!(next_state(TRAIN, LoaderFrames::Absent), (0, None));
        assert_eq!(next_state(EVAL, present), (TRAIN, Some(train)), "another pass began between two walks");
    }

    #[test]
    fn a_forked_worker_never_starts_the_pass_it_was_forked_in() {
        let train = pass(TRAIN, TRAIN_LOADER);
        let (state, started) = next_state(INHERITED, LoaderFrames::Present(train));
        assert_eq!((state, started), (INHERITED, None));
        // Once the inherited frames are gone, its own passes count.
        let (state, _) = next_state(state, LoaderFrames::Absent);
        assert_eq!(next_state(state, LoaderFrames::Present(train)), (TRAIN, Some(train)));
    }

    #[test]
    fn only_a_child_forked_inside_a_pass_inherits_it() {
        assert_eq!(state_after_fork(TRAIN), (INHERITED, true));
        assert_eq!(state_after_fork(INHERITED), (INHERITED, true), "a worker's own child");
        assert_eq!(state_after_fork(0), (0, false), "nor does the child of a child forked outside one");
    }
}
