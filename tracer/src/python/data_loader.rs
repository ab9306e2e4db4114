//! What a walked stack says about passes over a PyTorch DataLoader.
//!
//! Each `for batch in loader:` calls `torch.utils.data.DataLoader.__iter__`,
//! so a stack holding a frame of that code object is inside the start of a
//! pass. The frames outside it (the code that iterates the loader, down to
//! `<module>`) name where the pass was started from: the training loop's
//! passes all start from one place, the evaluation loop's from another, even
//! when each epoch builds a new loader object. The loader object itself
//! (`self` of the `DataLoader.__iter__` frame) tells apart the loaders one
//! place iterates in turn (an evaluation over several validation sets).

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
#[allow(
    clippy::large_enum_variant,
    reason = "made in the allocation hooks, which must not allocate; a pass's frames are copied only as it starts"
)]
pub enum LoaderFrames {
    /// The walk failed or was cut short: a loader frame may lie beyond it.
    Unknown,
    /// No DataLoader pass is starting on this thread.
    Absent,
    /// A pass is starting.
    Present(PassStart),
}

/// A pass over a DataLoader: where it starts from and which loader it iterates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassStart {
    /// The key of the frames it starts from, exactly (never 0 or `u64::MAX`).
    pub place: u64,
    /// The address of the loader object, an identity (read only to tell
    /// whether a loader met before is still alive); 0 when it could not
    /// be read.
    pub loader: u64,
    /// The frames it starts from: to tell passes from one place (see
    /// [`PassStart::same_place`]) and a pass started inside another's loop.
    pub outer: OuterFrames,
}

/// Calls this many code units apart or less, in the same function, are
/// taken for one call that moved (see [`PassStart::same_place`]).
const MOVED_UNITS: u32 = 2;

impl PassStart {
    /// Whether `other` starts from the same place: the same functions, each
    /// called from the same instruction or from one at most [`MOVED_UNITS`]
    /// away. The specializing interpreter of 3.11 calls from another
    /// instruction of the same line once it specialized a call (`for batch
    /// in enumerate(loader)`: CALL calls `DataLoader.__iter__` until the
    /// PRECALL two code units before it is specialized, which then calls
    /// it itself), and so in any frame of the path, at its own time (a
    /// framework's loop, whose path to `DataLoader.__iter__` is twenty
    /// frames deep, has frame after frame moved over its first epochs):
    /// the passes from one loop would otherwise be several places. Two
    /// calls, even on lines next to each other, are further apart.
    pub fn same_place(&self, other: &PassStart) -> bool {
        self.place == other.place || self.outer.near(&other.outer)
    }
}

/// Whether two packed frames are the same function called from the same
/// instruction, or from one at most [`MOVED_UNITS`] away. Whether the
/// interpreter entered the frame anew or ran it inline is left aside:
/// CPython 3.12 resumes a generator from a `for` loop through a new
/// entry until the loop's `FOR_ITER` is specialized, then inline, so the
/// passes over a loader wrapped in a generator (tqdm) would otherwise be
/// two places, the first pass's and the later ones'.
fn near_frames(a: u64, b: u64) -> bool {
    let (a, b) = (super::unpack(a), super::unpack(b));
    a.code == b.code && a.instruction.abs_diff(b.instruction) <= MOVED_UNITS
}

/// Frames kept of where a pass starts, counted from the outermost.
const OUTER_FRAMES: usize = 32;

/// The packed frames outside a pass's `DataLoader.__iter__` frame,
/// outermost first; the outermost [`OUTER_FRAMES`] of a deeper stack, and
/// the key of the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OuterFrames {
    words: [u64; OUTER_FRAMES],
    len: usize,
    /// The key of the frames inside the kept ones (0 when there are none),
    /// which are compared exactly.
    rest: u64,
}

impl OuterFrames {
    /// Of `frames`, innermost first.
    pub fn of(frames: &[u64]) -> OuterFrames {
        let mut outer = OuterFrames::default();
        for (slot, &word) in outer.words.iter_mut().zip(frames.iter().rev()) {
            *slot = word;
        }
        outer.len = frames.len().min(OUTER_FRAMES);
        let rest = &frames[..frames.len() - outer.len];
        outer.rest = if rest.is_empty() { 0 } else { pass_key(rest) };
        outer
    }

    /// Whether `other` holds the same frames, each called from the same
    /// instruction or from one moved by specialization ([`near_frames`]).
    fn near(&self, other: &OuterFrames) -> bool {
        self.len == other.len && self.rest == other.rest && self.shared_with(other) == self.len
    }

    /// Whether the pass started from these frames was called, in the
    /// function where its frames and `earlier`'s part, from an instruction
    /// after the one that started `earlier`: code that runs after that pass
    /// started, inside its loop (an evaluation every N steps of training,
    /// in the training function or in a function it calls) or after it.
    /// Frames that only moved by specialization are not where they part.
    pub fn start_after(&self, earlier: &OuterFrames) -> bool {
        let at = self.shared_with(earlier);
        if at == self.len.min(earlier.len) {
            return false;
        }
        let (mine, theirs) = (super::unpack(self.words[at]), super::unpack(earlier.words[at]));
        mine.code == theirs.code && mine.instruction > theirs.instruction
    }

    /// How many frames, from the outermost, these and `other` share: the
    /// same calls, or calls that only moved by specialization.
    fn shared_with(&self, other: &OuterFrames) -> usize {
        let shared = self.len.min(other.len);
        (0..shared).find(|&i| !near_frames(self.words[i], other.words[i])).unwrap_or(shared)
    }

    /// Where on these frames the loop starting passes from them is named,
    /// among the loops starting theirs from `others`: the frame where this
    /// path parts from the nearest of theirs; the frame below it, where both
    /// go on in one function (which calls them from two of its lines); the
    /// innermost, where the path ends there (the loop runs in that
    /// function). `None` without other paths, or past the frames kept.
    fn naming_frame<'a>(&self, others: impl Iterator<Item = &'a OuterFrames>) -> Option<usize> {
        let mut nearest: Option<(usize, bool)> = None;
        for other in others {
            let at = self.shared_with(other);
            let same_function = at < self.len.min(other.len)
                && super::unpack(self.words[at]).code == super::unpack(other.words[at]).code;
            nearest = match nearest {
                Some((kept, _)) if kept > at => nearest,
                Some((kept, same)) if kept == at => Some((at, same || same_function)),
                _ => Some((at, same_function)),
            };
        }
        let (at, same_function) = nearest?;
        let index = at + usize::from(same_function);
        if index < self.len {
            Some(index)
        } else {
            (self.rest == 0 && self.len > 0).then(|| self.len - 1)
        }
    }

    /// The code object of the frame at `index`, and of its caller's.
    fn code_and_caller(&self, index: usize) -> (u64, Option<u64>) {
        let code = |i: usize| super::unpack(self.words[i]).code;
        (code(index), index.checked_sub(1).map(code))
    }
}

/// How an epoch's label names the loop whose pass closed it: the code
/// objects of its function and, where that alone would name another loop
/// too, of the function calling it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopName {
    pub function: u64,
    pub caller: Option<u64>,
}

/// The name of the loop starting passes from `paths[index]`, among the
/// loops starting theirs from the other `paths` (one path a place); `None`
/// where it is the only loop, or no name tells it from the others (two
/// loops in one function).
pub fn loop_name(paths: &[&OuterFrames], index: usize) -> Option<LoopName> {
    let others = |i: usize| paths.iter().enumerate().filter(move |&(j, _)| j != i).map(|(_, path)| *path);
    let name = |i: usize, with_caller: bool| {
        let (function, caller) = paths[i].code_and_caller(paths[i].naming_frame(others(i))?);
        Some(LoopName { function, caller: caller.filter(|_| with_caller) })
    };
    [false, true].into_iter().find_map(|with_caller| {
        let mine = name(index, with_caller)?;
        (0..paths.len()).filter(|&j| j != index).all(|j| name(j, with_caller) != Some(mine)).then_some(mine)
    })
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

/// A frame as a glance reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlancedFrame {
    pub address: u64,
    pub code: u64,
    pub instr: u64,
}

/// Frames of a thread's latest glance kept for the next one.
const MEMO_FRAMES: usize = 8;

/// A thread's latest conclusive glance: the innermost frames it followed,
/// innermost first, each with whether a `DataLoader.__iter__` frame is at
/// it or further out. Cells, so that a glance changes the frames it read
/// in place.
#[derive(Debug)]
pub struct GlanceMemo {
    frames: [Cell<GlancedFrame>; MEMO_FRAMES],
    loader_outside: [Cell<bool>; MEMO_FRAMES],
    len: Cell<usize>,
}

impl GlanceMemo {
    /// An empty memo; on x86_64 the loader zeroes the thread's instead.
    #[cfg(any(test, not(target_arch = "x86_64")))]
    pub const fn empty() -> GlanceMemo {
        GlanceMemo {
            frames: [const { Cell::new(GlancedFrame { address: 0, code: 0, instr: 0 }) }; MEMO_FRAMES],
            loader_outside: [const { Cell::new(false) }; MEMO_FRAMES],
            len: Cell::new(0),
        }
    }

    /// Where the memo holds `frame` unchanged.
    fn position(&self, frame: &GlancedFrame) -> Option<usize> {
        self.frames[..self.len.get()].iter().position(|f| f.get() == *frame)
    }

    fn forget(&self) {
        self.len.set(0);
    }

    /// Puts the `fresh` frames (innermost first, with `loader_outside`)
    /// in place of the memo's frames inside its frame `held`, or of all of
    /// them when `held` is `None`, and `last` (a frame not held) after them.
    fn update(&self, fresh: &[GlancedFrame], loader_outside: bool, held: Option<usize>, last: Option<GlancedFrame>) {
        let len = self.len.get();
        let (tail_from, tail_to) = match held {
            Some(at) => (at, len.min(at + MEMO_FRAMES - fresh.len())),
            None => (0, 0),
        };
        // The frames kept outside move to follow the fresh ones; most
        // glances read as many frames as they replace, and none move.
        let mut new_len = fresh.len();
        if tail_to > tail_from && tail_from != fresh.len() {
            let moved: [(GlancedFrame, bool); MEMO_FRAMES] =
                std::array::from_fn(|i| (self.frames[i].get(), self.loader_outside[i].get()));
            for (i, (frame, outside)) in moved[tail_from..tail_to].iter().enumerate() {
                self.frames[fresh.len() + i].set(*frame);
                self.loader_outside[fresh.len() + i].set(*outside);
            }
        }
        new_len += tail_to - tail_from;
        for (i, frame) in fresh.iter().enumerate() {
            self.frames[i].set(*frame);
            self.loader_outside[i].set(loader_outside);
        }
        if let Some(frame) = last.filter(|_| new_len < MEMO_FRAMES) {
            self.frames[new_len].set(frame);
            self.loader_outside[new_len].set(loader_outside);
            new_len += 1;
        }
        self.len.set(new_len);
    }
}

/// Whether a `DataLoader.__iter__` frame (code object `wanted`) is in the
/// chain from the frame at `innermost` out, `read` giving each frame's
/// code object, instruction pointer and caller (`None` when it cannot be
/// followed). The follow stops at the first frame the thread's previous
/// glance read with the same code object at the same instruction, and
/// takes that glance's outcome there: a frame that has not moved has the
/// same frames outside it, unless in between it returned and the same
/// code was called again at the same address and reached the same
/// instruction (the next allocation from another line looks again). Most
/// allocations so follow a frame or two, never the cold frames further
/// out, a cache miss each.
pub fn glance(
    memo: &GlanceMemo,
    innermost: u64,
    wanted: u64,
    max_steps: usize,
    read: impl Fn(u64) -> Option<(u64, u64, u64)>,
) -> Glance {
    let mut fresh = [GlancedFrame::default(); MEMO_FRAMES];
    let mut fresh_len = 0;
    let mut frame = innermost;
    for _ in 0..max_steps {
        if frame == 0 {
            memo.update(&fresh[..fresh_len], false, None, None);
            return Glance::Absent;
        }
        let Some((code, instr, caller)) = read(frame) else { break };
        let glanced = GlancedFrame { address: frame, code, instr };
        if code == wanted {
            memo.update(&fresh[..fresh_len], true, None, Some(glanced));
            return Glance::Present;
        }
        if let Some(held) = memo.position(&glanced) {
            let loader_outside = memo.loader_outside[held].get();
            memo.update(&fresh[..fresh_len], loader_outside, Some(held), None);
            return if loader_outside { Glance::Present } else { Glance::Absent };
        }
        if fresh_len < MEMO_FRAMES {
            fresh[fresh_len] = glanced;
            fresh_len += 1;
        }
        frame = caller;
    }
    memo.forget();
    Glance::Unknown
}

/// The key of the place a pass starts from: the packed frames outside the
/// outermost `DataLoader.__iter__` frame, which are the same for every pass
/// started by the same line of the same loop.
pub fn pass_key(outer_frames: &[u64]) -> u64 {
    key_of(outer_frames.iter().copied())
}

fn key_of(words: impl Iterator<Item = u64>) -> u64 {
    let mut hasher = WordHasher::default();
    words.for_each(|word| hasher.write_u64(word));
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

    /// A chain of frames at 0x1000, 0x2000, ... innermost first, each
    /// frame's code object its address plus one, at `instrs[i]`.
    fn chain(instrs: &[u64], codes: &[(usize, u64)]) -> impl Fn(u64) -> Option<(u64, u64, u64)> {
        let (instrs, codes) = (instrs.to_vec(), codes.to_vec());
        move |frame| {
            let i = (frame / 0x1000 - 1) as usize;
            let code = codes.iter().find(|(at, _)| *at == i).map_or(frame + 1, |(_, code)| *code);
            let caller = if i + 1 < instrs.len() { frame + 0x1000 } else { 0 };
            Some((code, instrs[i], caller))
        }
    }

    #[test]
    fn a_glance_stops_at_the_first_frame_the_previous_one_read_unchanged() {
        const LOADER: u64 = 0xdead;
        let memo = GlanceMemo::empty();
        let reads = Cell::new(0);
        let look = |instrs: &[u64], codes: &[(usize, u64)]| {
            reads.set(0);
            let read = chain(instrs, codes);
            let outcome = glance(&memo, 0x1000, LOADER, 64, |frame| {
                reads.set(reads.get() + 1);
                read(frame)
            });
            (outcome, reads.get())
        };
        // Twelve frames, no loader: all read once.
        let frames = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        assert_eq!(look(&frames, &[]), (Glance::Absent, 12));
        // The innermost frame moved to another line: its caller has not.
        let moved = [100, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        assert_eq!(look(&moved, &[]), (Glance::Absent, 2));
        // The two innermost moved, then the four innermost: read up to the first that did not.
        assert_eq!(look(&[101, 200, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], &[]), (Glance::Absent, 3));
        assert_eq!(look(&[102, 201, 301, 400, 5, 6, 7, 8, 9, 10, 11, 12], &[]), (Glance::Absent, 5));
        // The memo keeps eight frames: past them, the chain is read to its end.
        assert_eq!(look(&[103, 202, 302, 401, 501, 601, 701, 801, 9, 10, 11, 12], &[]), (Glance::Absent, 12));
        // A loader frame called in place of the fifth: found, and remembered for the frames inside it.
        let pass = [100, 200, 3, 400, 5, 6, 7, 8, 9, 10, 11, 12];
        memo.forget();
        assert_eq!(look(&pass, &[(4, LOADER)]), (Glance::Present, 5));
        assert_eq!(look(&[101, 200, 3, 400, 5, 6, 7, 8, 9, 10, 11, 12], &[(4, LOADER)]), (Glance::Present, 2));
        // The pass over, a frame at the loader's place with other code: followed past it.
        assert_eq!(look(&[102, 201, 301, 401, 501, 6, 7, 8, 9, 10, 11, 12], &[]), (Glance::Absent, 12));
        // A frame that cannot be read leaves the glance unknown and the memo empty.
        assert_eq!(glance(&memo, 0x1000, LOADER, 64, |_| None), Glance::Unknown);
        assert_eq!(memo.len.get(), 0);
        // So does a chain longer than the steps allowed.
        assert_eq!(glance(&memo, 0x1000, LOADER, 4, chain(&frames, &[])), Glance::Unknown);
    }

    /// Frames innermost first, each `(code, instruction)`.
    fn frames(codes: &[(u64, u32)]) -> OuterFrames {
        let words: Vec<u64> =
            codes.iter().map(|&(code, instruction)| super::super::pack(code, instruction, false)).collect();
        OuterFrames::of(&words)
    }

    #[test]
    fn a_pass_starts_after_another_from_a_later_instruction_where_their_frames_part() {
        const MODULE: (u64, u32) = (1, 40);
        let train = frames(&[(2, 10), MODULE]);
        // Called from the training loop's body, inline or through a function.
        assert!(frames(&[(2, 30), MODULE]).start_after(&train));
        assert!(frames(&[(3, 5), (2, 30), MODULE]).start_after(&train));
        // Started on a line before, or from the same instruction.
        assert!(!frames(&[(2, 4), MODULE]).start_after(&train));
        assert!(!frames(&[(3, 5), (2, 10), MODULE]).start_after(&train));
        // From another function called from the same place (a test loop
        // beside the training function), or from elsewhere.
        let test = frames(&[(4, 10), (5, 12), MODULE]);
        assert!(!frames(&[(3, 30), (5, 12), MODULE]).start_after(&test));
        // From a later line of the function the training was called from.
        assert!(frames(&[(9, 99), (1, 48)]).start_after(&train));
        // Not from an instruction that only moved as the interpreter
        // specialized a call: then where the frames part is further in.
        assert!(!frames(&[(9, 99), (1, 42)]).start_after(&train));
        assert!(frames(&[(2, 30), (1, 38)]).start_after(&train));
        // A stack deeper than the frames kept is compared on its outermost ones.
        let deep: Vec<(u64, u32)> = (0..40).map(|i| (100 + i, 1)).collect();
        let mut deeper = deep.clone();
        deeper[39] = (139, 9);
        assert!(frames(&deeper).start_after(&frames(&deep)));
        assert!(!frames(&deep).start_after(&frames(&deep)));
    }

    #[test]
    fn a_loop_is_named_by_its_function_where_its_path_parts_from_the_others() {
        const MODULE: (u64, u32) = (1, 40);
        const MAIN: u64 = 2;
        const TRAIN: u64 = 3;
        const EVALUATE: u64 = 4;
        let name = |function, caller| Some(LoopName { function, caller });
        // Training and evaluation functions called from main: each by its own.
        let train = frames(&[(TRAIN, 10), (MAIN, 20), MODULE]);
        let evaluate = frames(&[(EVALUATE, 8), (MAIN, 24), MODULE]);
        assert_eq!(loop_name(&[&train, &evaluate], 0), name(TRAIN, None));
        assert_eq!(loop_name(&[&train, &evaluate], 1), name(EVALUATE, None));
        // Alone, a loop needs no name.
        assert_eq!(loop_name(&[&train], 0), None);
        // An evaluation every N steps, from inside the training loop: the
        // training loop runs in the function where the paths part.
        let inside = frames(&[(EVALUATE, 8), (TRAIN, 30), (MAIN, 20), MODULE]);
        assert_eq!(loop_name(&[&train, &inside], 0), name(TRAIN, None));
        assert_eq!(loop_name(&[&train, &inside], 1), name(EVALUATE, None));
        // The same evaluation after each training pass too: its two loops are
        // told apart by their callers.
        let paths = [&train, &inside, &evaluate];
        assert_eq!(loop_name(&paths, 0), name(TRAIN, None));
        assert_eq!(loop_name(&paths, 1), name(EVALUATE, Some(TRAIN)));
        assert_eq!(loop_name(&paths, 2), name(EVALUATE, Some(MAIN)));
        // Two loops in one function have no name that tells them apart.
        let first = frames(&[(MAIN, 20), MODULE]);
        let second = frames(&[(MAIN, 44), MODULE]);
        assert_eq!(loop_name(&[&first, &second], 0), None);
        // A call that only moved by specialization is no parting.
        let moved = frames(&[(EVALUATE, 8), (MAIN, 22), MODULE]);
        assert_eq!(loop_name(&[&train, &moved], 1), name(EVALUATE, None));
        // Parting past the frames kept: the function is unknown.
        let deep = |inner: u64| {
            let mut codes: Vec<(u64, u32)> = (0..40).map(|i| (100 + i, 10)).collect();
            codes[0].0 = inner;
            frames(&codes)
        };
        assert_eq!(loop_name(&[&deep(TRAIN), &deep(EVALUATE)], 0), None);
    }

    #[test]
    fn passes_whose_calls_moved_by_specialization_are_one_place() {
        let pass = |codes: &[(u64, u32)]| {
            let words: Vec<u64> = codes.iter().map(|&(code, at)| super::super::pack(code, at, false)).collect();
            PassStart { place: pass_key(&words), loader: 0, outer: OuterFrames::of(&words) }
        };
        let first = pass(&[(5, 56), (4, 15), (3, 308), (2, 90), (1, 40)]);
        // Three frames moved two code units back, each at its own time.
        assert!(first.same_place(&pass(&[(5, 54), (4, 13), (3, 306), (2, 90), (1, 40)])));
        // A generator's frame entered anew by the first pass and run inline
        // by the later ones (a loop over tqdm(loader) on 3.12).
        let entered = [(5, 56, false), (4, 15, true), (3, 308, false), (2, 90, false), (1, 40, false)];
        let words: Vec<u64> = entered.iter().map(|&(code, at, entry)| super::super::pack(code, at, entry)).collect();
        let anew = PassStart { place: pass_key(&words), loader: 0, outer: OuterFrames::of(&words) };
        assert!(first.same_place(&anew));
        // Another call in the same function, another function, a frame more.
        assert!(!first.same_place(&pass(&[(5, 56), (4, 15), (3, 308), (2, 84), (1, 40)])));
        assert!(!first.same_place(&pass(&[(6, 56), (4, 15), (3, 308), (2, 90), (1, 40)])));
        assert!(!first.same_place(&pass(&[(7, 2), (5, 56), (4, 15), (3, 308), (2, 90), (1, 40)])));
        // Past the frames kept, the inner ones are compared exactly.
        let deep = |inner: u32, outer: u32| {
            let mut codes: Vec<(u64, u32)> = (0..40).map(|i| (100 + i, 10)).collect();
            codes[0].1 = inner;
            codes[39].1 = outer;
            pass(&codes)
        };
        assert!(deep(10, 10).same_place(&deep(10, 12)));
        assert!(!deep(10, 10).same_place(&deep(12, 10)));
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
