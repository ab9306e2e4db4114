//! What a walked stack says about passes over a PyTorch DataLoader.
//!
//! Each `for batch in loader:` calls `torch.utils.data.DataLoader.__iter__`,
//! so a stack holding a frame of that code object is inside the start of a
//! pass. The frames outside it (the code that iterates the loader, down to
//! `<module>`) name where the pass was started from: the training loop's
//! passes all start from one place, the evaluation loop's from another, even
//! when each epoch builds a new loader object.

use std::cell::Cell;
use std::hash::Hasher;

use crate::fast_hash::WordHasher;

/// Where `DataLoader` is defined, as a code object's filename ends.
const DATA_LOADER_FILE: &str = "torch/utils/data/dataloader.py";
/// The qualified name of the class body's code object.
pub const DATA_LOADER_CLASS: &str = "DataLoader";
/// `DataLoader.__iter__`, not the samplers' and iterators' methods of the same name.
pub const DATA_LOADER_ITER: &str = "DataLoader.__iter__";

/// Whether a code object is `DataLoader.__iter__` of an installed torch.
pub fn is_data_loader_iter(filename: &str, qualname: &str) -> bool {
    qualname == DATA_LOADER_ITER && filename.ends_with(DATA_LOADER_FILE)
}

/// Whether a code object is the body of the module that defines `DataLoader`.
pub fn is_data_loader_module(filename: &str, qualname: &str) -> bool {
    qualname == "<module>" && filename.ends_with(DATA_LOADER_FILE)
}

/// What one walk of a thread's Python frames shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoaderFrames {
    /// The walk failed or was cut short: a loader frame may lie beyond it.
    Unknown,
    /// No DataLoader pass is starting on this thread.
    Absent,
    /// A pass is starting, from the place this key names (never 0 or `u64::MAX`).
    Present(u64),
}

/// What a look at the code pointers of a thread's frames shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glance {
    /// `DataLoader.__iter__` has not been met yet: a full walk must find it.
    Unlearned,
    /// The frames could not be followed to the end.
    Unknown,
    Absent,
    /// A `DataLoader.__iter__` frame is there (or another code object now at its address).
    Present,
}

/// Where a glance starts from: the innermost frame (address, code object)
/// and the frame that called it (address, code object, instruction
/// pointer; zeroes when there is none). The innermost frame's own
/// instruction is left out: it moves at each line, while the frames
/// outside it stay what they are until it returns.
pub type GlanceStart = [u64; 5];

/// A thread's latest conclusive glance: where it started from and whether
/// it saw a `DataLoader.__iter__` frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlanceMemo {
    start: GlanceStart,
    loader_present: bool,
}

impl GlanceMemo {
    /// Matches no frame: a frame's address is never 0.
    pub const NONE: GlanceMemo = GlanceMemo { start: [0; 5], loader_present: false };
}

/// The outcome of a glance from `start`: the thread's previous one when it
/// started from the same place, else `follow`'s, remembered when conclusive.
pub fn glance_once_per_frame(memo: &Cell<GlanceMemo>, start: GlanceStart, follow: impl FnOnce() -> Glance) -> Glance {
    let last = memo.get();
    if last.start == start {
        return if last.loader_present { Glance::Present } else { Glance::Absent };
    }
    let glance = follow();
    memo.set(match glance {
        Glance::Present | Glance::Absent => GlanceMemo { start, loader_present: glance == Glance::Present },
        Glance::Unknown | Glance::Unlearned => GlanceMemo::NONE,
    });
    glance
}

/// The key of the place a pass starts from: the packed frames outside the
/// outermost `DataLoader.__iter__` frame, which are the same for every pass
/// started by the same line of the same loop.
pub fn pass_key(outer_frames: &[u64]) -> u64 {
    let mut hasher = WordHasher::default();
    outer_frames.iter().for_each(|&word| hasher.write_u64(word));
    match hasher.finish() {
        0 | u64::MAX => 1,
        key => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_loaders_own_iter_is_recognised() {
        let torch = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py";
        assert!(is_data_loader_iter(torch, "DataLoader.__iter__"));
        // The same file's other __iter__ methods run inside a pass, not at its start.
        assert!(!is_data_loader_iter(torch, "_BaseDataLoaderIter.__iter__"));
        assert!(!is_data_loader_iter(torch, "_InfiniteConstantSampler.__iter__"));
        assert!(!is_data_loader_iter(torch, "DataLoader.__len__"));
        // A class of that name elsewhere is not torch's.
        assert!(!is_data_loader_iter("/job/dataloader.py", "DataLoader.__iter__"));
        assert!(!is_data_loader_iter("/job/torch/utils/data/dataloader.pyc", "DataLoader.__iter__"));
        assert!(is_data_loader_module(torch, "<module>"));
        assert!(!is_data_loader_module(torch, DATA_LOADER_CLASS));
    }

    #[test]
    fn a_glance_from_the_same_frame_and_call_site_is_not_repeated() {
        let memo = Cell::new(GlanceMemo::NONE);
        // The innermost frame at 0x7000_1000, called at `instr` of its caller.
        let at = |instr| [0x7000_1000, 0x7000_2000, 0x7000_0800, 0x7000_3000, instr];
        let follows = Cell::new(0);
        let glance = |innermost, outcome| {
            glance_once_per_frame(&memo, innermost, || {
                follows.set(follows.get() + 1);
                outcome
            })
        };
        assert_eq!(glance(at(1), Glance::Absent), Glance::Absent);
        assert_eq!(glance(at(1), Glance::Present), Glance::Absent, "the same frame and call site: remembered");
        assert_eq!(glance(at(2), Glance::Present), Glance::Present, "called from another instruction: followed");
        assert_eq!(glance(at(2), Glance::Absent), Glance::Present);
        assert_eq!(follows.get(), 2);
        // An inconclusive glance is not remembered: the next one follows the chain again.
        assert_eq!(glance(at(3), Glance::Unknown), Glance::Unknown);
        assert_eq!(glance(at(3), Glance::Absent), Glance::Absent);
        assert_eq!(follows.get(), 4);
    }

    #[test]
    fn pass_keys_tell_places_apart_and_avoid_the_reserved_values() {
        let train = pass_key(&[10 << 33, 20 << 33]);
        assert_eq!(train, pass_key(&[10 << 33, 20 << 33]));
        assert_ne!(train, pass_key(&[11 << 33, 20 << 33]));
        assert_ne!(train, pass_key(&[10 << 33]));
        for key in [train, pass_key(&[])] {
            assert!(key != 0 && key != u64::MAX);
        }
    }
}
