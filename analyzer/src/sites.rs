//! Stacks that symbolize the same frames are one allocation site.
//!
//! The tracer names a stack by its chain of return addresses, and two
//! chains can read the same once symbolized: one source line calling an
//! allocator from two call sites the compiler keeps apart, or CPython's
//! specializing interpreter running the same Python line along another
//! native path through its eval loop, whose calls [`crate::merge::merge`]
//! replaces by the Python frames they ran. Split, each stack would hold the
//! survivors of some epochs only, and a leak would read low, or not be a
//! suspect at all; the leak analysis counts them as one site.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use trace_format::PyFrame;

use crate::merge::{assemble, maps_a_pymalloc_arena, FrameKind, HeldFrame};
use crate::modules::Generation;
use crate::symbolize::{Frame, Symbolizer};
use crate::trace::{pymalloc_untraced, IntMap, Memory, NativeFrame, Trace};

/// Each stack's site, for the stacks grouped by their keys.
#[derive(Debug, Default)]
pub struct Sites {
    /// The first (lowest) id of its group, for each stack of a group of two
    /// or more.
    first: IntMap<u32, u32>,
    /// The other ids of each group, by its first.
    others: IntMap<u32, Vec<u32>>,
}

impl Sites {
    /// `stacks` grouped by `key`. The keys (a hundred thousand stacks'
    /// frames) are not kept: the stacks are bucketed by the keys' hashes,
    /// and only the stacks that share a bucket are asked their keys again
    /// and compared.
    pub fn group<K: Hash + Eq>(stacks: impl IntoIterator<Item = u32>, mut key: impl FnMut(u32) -> K) -> Sites {
        let mut stacks: Vec<u32> = stacks.into_iter().collect();
        stacks.sort_unstable();
        stacks.dedup();
        let mut buckets: IntMap<u64, Vec<u32>> = IntMap::default();
        for stack in stacks {
            let mut hasher = DefaultHasher::new();
            key(stack).hash(&mut hasher);
            buckets.entry(hasher.finish()).or_default().push(stack);
        }
        let mut sites = Sites::default();
        for bucket in buckets.into_values().filter(|bucket| bucket.len() > 1) {
            let mut by_key: HashMap<K, Vec<u32>> = HashMap::new();
            for stack in bucket {
                by_key.entry(key(stack)).or_default().push(stack);
            }
            for group in by_key.into_values().filter(|group| group.len() > 1) {
                let first = group[0];
                sites.first.extend(group.iter().map(|&stack| (stack, first)));
                sites.others.insert(first, group[1..].to_vec());
            }
        }
        sites
    }

    /// The site `stack` counts under: the first stack of its group, or itself.
    pub fn of(&self, stack: u32) -> u32 {
        self.first.get(&stack).copied().unwrap_or(stack)
    }

    /// Whether `stack` shares its site with others.
    pub fn is_shared(&self, stack: u32) -> bool {
        self.first.contains_key(&stack)
    }

    /// The stacks counted with `site` (given by its first), besides it.
    pub fn others(&self, site: u32) -> &[u32] {
        self.others.get(&site).map_or(&[], Vec::as_slice)
    }
}

/// What tells a stack's site: its frames as the report shows them, each
/// frame by its number (see [`SiteKeys`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SiteKey {
    Frames {
        memory: Memory,
        frames: Vec<u32>,
        broken_at: Option<u32>,
    },
    /// pymalloc's arenas charged to one line of the program's own code
    /// (the number of its frame): which object happened to need a new
    /// arena, along which native path, is chance, and counted by stack an
    /// arena leak would be spread over a few stacks, each piling up for a
    /// few epochs only.
    Arenas {
        own_line: u32,
    },
    /// A stack without frames, or not in the trace: a site of its own.
    Alone(u32),
}

/// A frame held by its number, with its kind, while a stack is put together.
#[derive(Debug, Clone, Copy)]
struct Numbered {
    number: u32,
    kind: FrameKind,
}

impl HeldFrame for Numbered {
    fn kind(&self) -> FrameKind {
        self.kind
    }
}

/// The keys of stacks by their symbolized frames. Each distinct frame gets
/// a number, each return address and Python location is resolved once,
/// and a stack is put together from numbers: a trace of a hundred thousand
/// stacks a hundred frames deep clones no frame per stack.
pub struct SiteKeys<'a, 's, 't> {
    trace: &'a Trace,
    symbolizer: &'s mut Symbolizer<'t>,
    numbers: HashMap<Frame, u32>,
    /// The frames of each return address (in its module generation),
    /// inlined ones included, and of each Python location, by number.
    native: IntMap<(u64, Generation), Rc<[Numbered]>>,
    python: IntMap<(u64, u32), Numbered>,
    /// The process's small Python objects were not traced, their arenas were.
    pymalloc_untraced: bool,
}

impl<'a, 's, 't> SiteKeys<'a, 's, 't> {
    pub fn new(trace: &'a Trace, symbolizer: &'s mut Symbolizer<'t>) -> Self {
        SiteKeys {
            trace,
            symbolizer,
            numbers: HashMap::new(),
            native: IntMap::default(),
            python: IntMap::default(),
            pymalloc_untraced: pymalloc_untraced(&trace.process),
        }
    }

    /// The key of `stack`: its frames as [`Symbolizer::stack`] puts them
    /// together (trimmed, interpreter frames merged), with its kind of
    /// memory, told apart by everything but their return addresses. A frame
    /// without a line keeps its address: without one, two calls in one
    /// function cannot be told to be one line. The own-code marks are left
    /// out: the same frames get the same marks.
    pub fn key(&mut self, stack: u32) -> SiteKey {
        let Some(s) = self.trace.stacks.get(stack) else { return SiteKey::Alone(stack) };
        if s.native.is_empty() && s.python.is_empty() {
            return SiteKey::Alone(stack);
        }
        if s.memory == Memory::Mapped && self.pymalloc_untraced {
            let frames = self.symbolizer.stack(&s);
            if let Some(own) = frames.iter().find(|f| f.own_code).filter(|_| maps_a_pymalloc_arena(&frames)) {
                return SiteKey::Arenas { own_line: self.numbered(own.clone()).number };
            }
        }
        let native: Vec<Rc<[Numbered]>> = s.native.iter().map(|&frame| self.native_frames(frame)).collect();
        let python: Vec<(Numbered, bool)> = s.python.iter().map(|f| (self.python_frame(f), f.entry)).collect();
        let frames = assemble(&native, &python).iter().map(|f| f.number).collect();
        SiteKey::Frames { memory: s.memory, frames, broken_at: s.broken_at }
    }

    fn native_frames(&mut self, NativeFrame { address, generation }: NativeFrame) -> Rc<[Numbered]> {
        if let Some(frames) = self.native.get(&(address, generation)) {
            return frames.clone();
        }
        let symbolized = self.symbolizer.frames(address, generation);
        let frames: Rc<[Numbered]> = symbolized.iter().map(|f| self.numbered(f.clone())).collect();
        self.native.insert((address, generation), frames.clone());
        frames
    }

    fn python_frame(&mut self, frame: &PyFrame) -> Numbered {
        if let Some(&numbered) = self.python.get(&(frame.code, frame.instruction)) {
            return numbered;
        }
        let symbolized = self.symbolizer.python_frame(frame);
        let numbered = self.numbered(symbolized);
        self.python.insert((frame.code, frame.instruction), numbered);
        numbered
    }

    fn numbered(&mut self, mut frame: Frame) -> Numbered {
        if frame.line.is_some() {
            frame.address = 0;
            frame.module_offset = None;
        }
        let kind = FrameKind::of(&frame);
        let next = self.numbers.len() as u32;
        Numbered { number: *self.numbers.entry(frame).or_insert(next), kind }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stacks_sharing_a_key_are_one_site_named_by_their_first() {
        let sites = Sites::group([7, 1, 4, 2, 9, 5, 3, 4, 8], |stack| if stack == 8 { 8 } else { stack % 3 });
        assert_eq!([1, 4, 7, 2, 5, 3, 9, 8].map(|stack| sites.of(stack)), [1, 1, 1, 2, 2, 3, 3, 8]);
        assert_eq!((sites.others(1), sites.others(2), sites.others(3)), (&[4, 7][..], &[5][..], &[9][..]));
        assert!(sites.is_shared(4) && sites.is_shared(1) && !sites.is_shared(8) && !sites.is_shared(6));
        assert_eq!((sites.of(6), sites.others(8)), (6, &[][..]), "a stack alone, or not grouped, is its own site");
    }
}
