//! Interning of call stacks as the nodes of a prefix tree.
//!
//! A process such as a CUDA build of PyTorch makes a million distinct stacks
//! of sixty frames while it imports, and they share most of their outer
//! frames. A (parent, frame) edge is stored and written once, or a few
//! times where the index lost it (see [`EdgeIndex`]); a stack is named by
//! its innermost node, and each distinct stack has one. The hot path looks
//! a whole stack up by a 96-bit hash of its frames and touches the tree only
//! for a stack it has never seen. A node's (parent, frame) is stored in two
//! arrays indexed by id (12 bytes a node: tens of millions stay affordable);
//! the index that finds a child by (parent, frame) is bounded.
//!
//! A stack with Python frames is two paths: its native frames and its Python
//! frames, each in the tree with parents of its own kind, joined by a node
//! below the native leaf that names the Python leaf. Kept in one path, every
//! new line of Python would repeat the native frames below it, and every new
//! native call path the Python frames above it: even with each run of Python
//! frames placed after the eval-loop frame that ran it, a quarter more nodes
//! while PyTorch imports. A thread's new stack is found starting from the
//! paths of its previous new stack, whose outer frames it mostly shares.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::RwLock;

use dashmap::DashMap;
use trace_format::{Frame, StackNode};

use crate::fast_hash::BuildWordHasher;
use crate::python;
use crate::room::{self, OutOfMemory};
use crate::unwind::CapturedStack;

/// The id of a stack's innermost node (never 0, the root).
pub type StackId = u32;

/// A frame as the tree stores it: a native return address; a packed Python
/// frame tagged with the top bit (the unwinders keep only return addresses
/// below [`crate::unwind::USER_SPACE_END`], which never have it); or the
/// join of a stack's native leaf (the parent) and its Python leaf (the low
/// bits), tagged with the next bit (addresses never have that one either).
type FrameWord = u64;
const PYTHON_TAG: FrameWord = 1 << 63;
const PYTHON_LEAF_TAG: FrameWord = 1 << 62;

/// Stands in for the frames of a stack the unwinder could not capture at all.
const NO_FRAMES: FrameWord = 0;

/// The innermost word of a mapping's stack: no return address is 1 (or 2).
const MAPPING: FrameWord = 1;
/// The innermost word of a shared-memory mapping's stack.
const SHARED_MAPPING: FrameWord = 2;

/// What a stack made: the tree keeps a heap stack and a mapping stack with
/// the same frames apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackKind {
    Heap,
    /// An anonymous mapping.
    Mapping,
    /// Shared memory (a file of tmpfs or hugetlbfs) mapped shared and writable.
    SharedMapping,
}

impl StackKind {
    /// The word that ends a stack of this kind's path; none for the heap.
    fn marker(self) -> Option<FrameWord> {
        match self {
            StackKind::Heap => None,
            StackKind::Mapping => Some(MAPPING),
            StackKind::SharedMapping => Some(SHARED_MAPPING),
        }
    }
}

pub struct StackTable {
    /// Whole stacks by the first word of their hash, with 32 bits of the
    /// second beside the id: 16 bytes an entry where the whole hash as key
    /// took 24 (a torch process holds a million).
    by_hash: DashMap<u64, (u32, StackId), BuildWordHasher>,
    /// The rare stack whose first word is another's (among a million
    /// stacks, a chance of about 3 in 10^8 that two share one), by its
    /// whole hash.
    colliding: DashMap<(u64, u64), StackId, BuildWordHasher>,
    tree: RwLock<Tree>,
    /// Tells this table's paths from another's in a thread's [`LastPath`].
    table_id: u32,
}

impl Default for StackTable {
    fn default() -> Self {
        static NEXT_TABLE_ID: AtomicU32 = AtomicU32::new(1);
        StackTable {
            by_hash: DashMap::default(),
            colliding: DashMap::default(),
            tree: RwLock::default(),
            table_id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// A path this thread added to the tree last, with the node each step
/// reached. The thread's next new stack is usually the same caller one line
/// further or one call deeper: the frames it shares with this path are found
/// here, where a look in the tree would cost a cache miss a frame.
struct LastPath {
    table_id: u32,
    len: usize,
    words: [FrameWord; MAX_PATH],
    nodes: [u32; MAX_PATH],
}

impl LastPath {
    const EMPTY: LastPath = LastPath { table_id: 0, len: 0, words: [0; MAX_PATH], nodes: [0; MAX_PATH] };
}

/// Native and Python paths are kept apart: they never share a prefix.
const NATIVE_PATH: usize = 0;
const PYTHON_PATH: usize = 1;

/// The stack this thread interned last, by the capture it came from: an
/// allocation from the same place as the one before (a loop) repeats its
/// native stack, which the unwinder can tell, and usually its Python frames.
struct LastStack {
    table_id: u32,
    capture: u64,
    kind: StackKind,
    python_len: usize,
    python: [u64; python::MAX_PY_FRAMES],
    id: StackId,
}

thread_local! {
    // Const-initialized without a destructor: static TLS, never allocates.
    static LAST_PATHS: RefCell<[LastPath; 2]> = const { RefCell::new([LastPath::EMPTY, LastPath::EMPTY]) };
    /// Where a new stack's path is built, off the program's stack (which may
    /// be a coroutine's or an alternate signal stack of a few KiB).
    static PATH_ROOM: RefCell<[FrameWord; MAX_PATH]> = const { RefCell::new([0; MAX_PATH]) };
    static LAST_STACK: RefCell<LastStack> = const {
        RefCell::new(LastStack {
            table_id: 0,
            capture: 0,
            kind: StackKind::Heap,
            python_len: 0,
            python: [0; python::MAX_PY_FRAMES],
            id: 0,
        })
    };
}

/// Runs `intern_new` with a path built on the stack, where the thread's
/// [`PATH_ROOM`] cannot be reached; out of line, so that the path's room
/// is taken from the stack only then.
#[cold]
#[inline(never)]
fn with_path_on_stack(
    intern_new: impl FnOnce(&mut [FrameWord; MAX_PATH]) -> Result<StackId, OutOfMemory>,
) -> Result<StackId, OutOfMemory> {
    intern_new(&mut [0; MAX_PATH])
}

/// The prefix tree: node `id` is at index `id - 1` of both arrays.
#[derive(Default)]
struct Tree {
    parents: Vec<u32>,
    frames: Vec<FrameWord>,
    children: EdgeIndex,
}

impl Tree {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.parents.len()
    }

    fn node(&self, id: u32) -> Option<(u32, FrameWord)> {
        let index = (id as usize).checked_sub(1)?;
        Some((*self.parents.get(index)?, self.frames[index]))
    }

    /// The child of `parent` with `word`, if the index holds it.
    fn indexed_child(&self, parent: u32, word: FrameWord) -> Option<u32> {
        if ends_a_stack(word) {
            return None;
        }
        self.children.find(parent, word)
    }

    fn add_child(&mut self, parent: u32, word: FrameWord) -> Result<u32, OutOfMemory> {
        self.frames.try_reserve(1).map_err(|_| OutOfMemory)?;
        room::push(&mut self.parents, parent)?;
        self.frames.push(word);
        let id = self.parents.len() as u32;
        if ends_a_stack(word) {
            return Ok(id);
        }
        if self.children.wants_room(self.parents.len()) {
            self.children.grow(&self.parents, &self.frames)?;
        } else {
            self.children.put(parent, word, id);
        }
        Ok(id)
    }
}

/// Finds a node by its (parent, frame). Each hash picks a set of four
/// slots in one cache line, each slot an edge's key with its node: a look
/// is one cache miss. A probing table kept node ids only and read the node
/// arrays to compare keys, three or four dependent misses for a node found,
/// and a million-node import of torch spent a tenth of its time there. A
/// new edge takes a free slot of its set, or of one of the next three sets
/// when its own is full (a look reads the next set only past a full one);
/// only when all four are full, or once the index at its largest is half
/// full, does it push out the edge in the way its node's id picks. An edge
/// pushed out is simply not found: the stack that needs it again gets a
/// node of its own, and the stacks below it then grow under that node, so
/// an edge may be stored twice, while whole stacks stay unique through the
/// stack hashes. (With one set and no free-slot search, a program whose
/// 131,072 stacks spread over a binary tree of calls had 2.4 times the
/// nodes its stacks needed: a lost edge near the root repeated the subtree
/// below it.) The slots double, up to [`MAX_EDGE_SLOTS`], to stay at least
/// four times the indexed nodes (fewer full sets); zeroed pages never
/// touched cost no memory.
#[derive(Default)]
struct EdgeIndex {
    /// An edge's frame, then its parent in the low half of the second word
    /// and its node in the high half (0 in an empty slot: no node is 0, the
    /// root). Plain words, so that new slots come zeroed from calloc.
    slots: Vec<[u64; 2]>,
    /// The slot set 0 starts at, on a cache line's first byte.
    first: usize,
    /// Sets of [`WAYS`] slots (a power of two; 0 before the first growth).
    sets: usize,
    /// Slots filled by edges that found a free one. Past half the slots
    /// (only at [`MAX_EDGE_SLOTS`]), most sets are full and a search for a
    /// free slot would read four lines for nothing: an edge then takes its
    /// way of its own set unread.
    filled: usize,
}

/// Slots in a set: 4 x 16 bytes, one 64-byte cache line.
const WAYS: usize = 4;
/// Sets an edge may go to: its own, then the next while the one before is full.
const PROBED_SETS: usize = 4;
const MIN_EDGE_SLOTS: usize = 1 << 16;
/// 16 MiB of slots at most.
const MAX_EDGE_SLOTS: usize = 1 << 20;

impl EdgeIndex {
    fn with_slots(slots: usize) -> Result<EdgeIndex, OutOfMemory> {
        let line = WAYS * std::mem::size_of::<[u64; 2]>();
        // A line's worth more, for set 0 to start where a line does.
        let memory = crate::real_alloc::zeroed_pairs(slots + WAYS - 1).ok_or(OutOfMemory)?;
        let misalignment = memory.as_ptr() as usize % line;
        let first = (line - misalignment) % line / std::mem::size_of::<[u64; 2]>();
        Ok(EdgeIndex { slots: memory, first, sets: slots / WAYS, filled: 0 })
    }

    /// The first slots of the sets an edge may take, its own set first: the
    /// edge is hashed once for all of them.
    fn set_starts(&self, parent: u32, word: FrameWord) -> [usize; PROBED_SETS] {
        let home = edge_hash(parent, word) as usize;
        std::array::from_fn(|probe| self.first + WAYS * (home.wrapping_add(probe) & (self.sets - 1)))
    }

    fn find(&self, parent: u32, word: FrameWord) -> Option<u32> {
        if self.sets == 0 {
            return None;
        }
        for start in self.set_starts(parent, word) {
            let mut full = true;
            for &[frame, ids] in &self.slots[start..start + WAYS] {
                let child = (ids >> 32) as u32;
                if child != 0 && ids as u32 == parent && frame == word {
                    return Some(child);
                }
                full &= child != 0;
            }
            if !full {
                return None;
            }
        }
        None
    }

    fn put(&mut self, parent: u32, frame: FrameWord, child: u32) {
        let edge = [frame, u64::from(child) << 32 | u64::from(parent)];
        let starts = self.set_starts(parent, frame);
        if 2 * self.filled < self.sets * WAYS {
            let free = starts.iter().flat_map(|&start| start..start + WAYS).find(|&slot| self.slots[slot][1] == 0);
            if let Some(slot) = free {
                self.slots[slot] = edge;
                self.filled += 1;
                return;
            }
        }
        self.slots[starts[0] + child as usize % WAYS] = edge;
    }

    /// Whether a tree of `nodes` nodes should have more slots first.
    fn wants_room(&self, nodes: usize) -> bool {
        let slots = self.sets * WAYS;
        slots < MAX_EDGE_SLOTS && 4 * nodes > slots
    }

    /// Doubles the slots and puts the tree's edges in, in id order.
    fn grow(&mut self, parents: &[u32], frames: &[FrameWord]) -> Result<(), OutOfMemory> {
        *self = EdgeIndex::with_slots((2 * self.sets * WAYS).clamp(MIN_EDGE_SLOTS, MAX_EDGE_SLOTS))?;
        for (index, (&parent, &frame)) in parents.iter().zip(frames).enumerate() {
            if !ends_a_stack(frame) {
                self.put(parent, frame, index as u32 + 1);
            }
        }
        Ok(())
    }
}

/// Whether a node of `word` is the last of a stack's path and never a step
/// inside another: a join naming a Python leaf (before a mapping marker at
/// most) or a mapping marker. Such a node is only ever reached through the
/// whole stack's hash or a thread's last path, so the child index leaves it
/// out: a million fewer inserts while torch imports. (Where neither finds
/// it, the rare mapping stack whose heap twin was interned first by another
/// path gets a join of its own, which costs a node, not correctness.)
fn ends_a_stack(word: FrameWord) -> bool {
    word == MAPPING || word == SHARED_MAPPING || word & (PYTHON_TAG | PYTHON_LEAF_TAG) == PYTHON_LEAF_TAG
}

fn edge_hash(parent: u32, word: FrameWord) -> u64 {
    finish((u64::from(parent).rotate_left(32) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

impl StackTable {
    /// The id of the stack of `kind` with the `native` frames just captured
    /// and these packed Python frames (innermost first). A stack that
    /// repeats the thread's previous one is known without hashing it.
    pub fn intern_capture(
        &self,
        kind: StackKind,
        native: &CapturedStack,
        python: &[u64],
    ) -> Result<StackId, OutOfMemory> {
        let repeated = LAST_STACK.try_with(|last| {
            let mut last = last.try_borrow_mut().ok()?;
            let same = last.table_id == self.table_id
                && native.repeats(last.capture)
                && last.kind == kind
                && last.python[..last.python_len] == *python;
            last.capture = native.serial();
            same.then_some(last.id)
        });
        if let Ok(Some(id)) = repeated {
            return Ok(id);
        }
        let id = self.intern(kind, native.frames(), python);
        let _ = LAST_STACK.try_with(|last| {
            if let Ok(mut last) = last.try_borrow_mut() {
                let python = &python[..python.len().min(python::MAX_PY_FRAMES)];
                last.python[..python.len()].copy_from_slice(python);
                // A stack that found no room is no stack to repeat.
                let table_id = if id.is_ok() { self.table_id } else { 0 };
                (last.table_id, last.kind, last.python_len) = (table_id, kind, python.len());
                last.id = id.unwrap_or_default();
            }
        });
        id
    }

    /// The id of the stack of `kind` with these native return addresses
    /// (innermost first) and packed Python frames (innermost first).
    pub fn intern(&self, kind: StackKind, native: &[u64], python: &[u64]) -> Result<StackId, OutOfMemory> {
        let hash = stack_hash(kind, native, python);
        if let Some(id) = self.known(hash) {
            return Ok(id);
        }
        let mut intern_new = Some(|path: &mut [FrameWord; MAX_PATH]| self.intern_new(kind, native, python, hash, path));
        let interned = PATH_ROOM.try_with(|room| {
            let mut path = room.try_borrow_mut().ok()?;
            intern_new.take().map(|intern_new| intern_new(&mut path))
        });
        match (interned.ok().flatten(), intern_new) {
            (Some(id), _) => id,
            (None, Some(intern_new)) => with_path_on_stack(intern_new),
            (None, None) => unreachable!("a stack taken is a stack interned"),
        }
    }

    /// [`StackTable::intern`] of a stack not known by its `hash`, its path
    /// built in `path`.
    fn intern_new(
        &self,
        kind: StackKind,
        native: &[u64],
        python: &[u64],
        hash: (u64, u64),
        path: &mut [FrameWord; MAX_PATH],
    ) -> Result<StackId, OutOfMemory> {
        let native = &native[..native.len().min(crate::unwind::MAX_FRAMES)];
        let python = &python[..python.len().min(crate::python::MAX_PY_FRAMES)];
        let outermost_first = |frames: &[u64], tag: FrameWord, path: &mut [u64; MAX_PATH]| {
            frames.iter().rev().zip(path.iter_mut()).for_each(|(&frame, slot)| *slot = frame | tag);
            frames.len()
        };
        let mut len = if python.is_empty() {
            match outermost_first(native, 0, path) {
                0 => {
                    path[0] = NO_FRAMES;
                    1
                }
                len => len,
            }
        } else {
            let python_len = outermost_first(python, PYTHON_TAG, path);
            let python_leaf = self.path_node(PYTHON_PATH, &path[..python_len])?;
            let len = outermost_first(native, 0, path);
            path[len] = PYTHON_LEAF_TAG | FrameWord::from(python_leaf);
            len + 1
        };
        if let Some(marker) = kind.marker() {
            path[len] = marker;
            len += 1;
        }
        let node = self.path_node(NATIVE_PATH, &path[..len])?;
        self.remember(hash, node)
    }

    fn known(&self, (first, second): (u64, u64)) -> Option<StackId> {
        let (check, id) = *self.by_hash.get(&first)?;
        if check == second as u32 {
            Some(id)
        } else {
            self.colliding.get(&(first, second)).map(|id| *id)
        }
    }

    /// The id of the stack with `hash`: `node`, unless another thread
    /// interned the same stack first.
    fn remember(&self, (first, second): (u64, u64), node: StackId) -> Result<StackId, OutOfMemory> {
        let (check, id) = room::with_entry(&self.by_hash, first, || (second as u32, node), |known| *known)?;
        if check == second as u32 {
            Ok(id)
        } else {
            room::with_entry(&self.colliding, (first, second), || node, |known| *known)
        }
    }

    /// The node at the end of `path`, adding the nodes it lacks, starting
    /// after the part it shares with this thread's last path of its `kind`.
    fn path_node(&self, kind: usize, path: &[FrameWord]) -> Result<u32, OutOfMemory> {
        let from_last_path = LAST_PATHS.try_with(|last| {
            let mut last = last.try_borrow_mut().ok()?;
            let last = &mut last[kind];
            let shared = if last.table_id == self.table_id {
                path.iter().zip(&last.words[..last.len]).take_while(|(a, b)| a == b).count()
            } else {
                0
            };
            let start = shared.checked_sub(1).map_or(0, |i| last.nodes[i]);
            last.words[shared..path.len()].copy_from_slice(&path[shared..]);
            let node = self.descend(path, shared, start, &mut last.nodes[..path.len()]);
            // A path cut short holds nodes for only some of its words.
            last.len = if node.is_ok() { path.len() } else { 0 };
            last.table_id = self.table_id;
            Some(node)
        });
        match from_last_path {
            Ok(Some(node)) => node,
            _ => self.descend_from_root(path),
        }
    }

    /// [`StackTable::descend`] from the root, with the nodes of the steps
    /// kept nowhere; out of line, so that their room is taken from the stack
    /// only where the thread's last paths cannot be reached.
    #[cold]
    #[inline(never)]
    fn descend_from_root(&self, path: &[FrameWord]) -> Result<u32, OutOfMemory> {
        self.descend(path, 0, 0, &mut [0; MAX_PATH][..path.len()])
    }

    /// The node at the end of `path`, whose first `known` words lead to
    /// `node`; `nodes[i]` gets the node of step `i`. A shared look along the
    /// part that exists, the write lock only for the rest.
    fn descend(
        &self,
        path: &[FrameWord],
        mut known: usize,
        mut node: u32,
        nodes: &mut [u32],
    ) -> Result<u32, OutOfMemory> {
        {
            let tree = self.tree.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            while let Some(child) = path.get(known).and_then(|&word| tree.indexed_child(node, word)) {
                node = child;
                nodes[known] = node;
                known += 1;
            }
        }
        if known < path.len() {
            let mut tree = self.tree.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            // Another thread may have added the next nodes since the shared
            // look; below a node added here, nothing can exist yet.
            let mut added = false;
            for (step, &word) in path.iter().enumerate().skip(known) {
                let existing = if added { None } else { tree.indexed_child(node, word) };
                node = match existing {
                    Some(child) => child,
                    None => {
                        added = true;
                        tree.add_child(node, word)?
                    }
                };
                nodes[step] = node;
            }
        }
        Ok(node)
    }

    /// What `stack` made: its innermost word is a mapping kind's marker, or
    /// a heap stack's frame.
    pub fn kind(&self, stack: StackId) -> StackKind {
        let tree = self.tree.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        match tree.node(stack).map(|(_, word)| word) {
            Some(MAPPING) => StackKind::Mapping,
            Some(SHARED_MAPPING) => StackKind::SharedMapping,
            _ => StackKind::Heap,
        }
    }

    /// Appends to `out` the nodes of `stack`'s paths that `written` does not
    /// hold yet, each after its parent and after the Python leaf it names,
    /// and marks them written.
    pub fn unwritten_path(&self, stack: StackId, written: &mut WrittenIds, out: &mut Vec<StackNode>) {
        let tree = self.tree.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let start = out.len();
        // Python nodes after the native ones, so that each list ends up
        // outermost first, the Python leaf before the join naming it.
        if let Some(python_leaf) = tree.push_unwritten(stack, written, out) {
            tree.push_unwritten(python_leaf, written, out);
        }
        out[start..].reverse();
    }

    /// How many nodes the tree holds: the next one's id is one more.
    pub fn nodes_made(&self) -> u32 {
        self.tree.read().unwrap_or_else(|poisoned| poisoned.into_inner()).parents.len() as u32
    }

    /// Appends to `out` the nodes after the first `skipped` that `written`
    /// does not hold whose native frame lies in one of `ranges` (`[start,
    /// end)`, a return address at `end` being a call at its last byte),
    /// each after its parents that `written` does not hold, and marks them
    /// written.
    pub fn unwritten_through(
        &self,
        ranges: &[(u64, u64)],
        skipped: u32,
        written: &mut WrittenIds,
        out: &mut Vec<StackNode>,
    ) {
        let tree = self.tree.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let through = |word: FrameWord| matches!(frame_of(word), Frame::Native(address) if ranges.iter().any(|&(start, end)| start <= address && address <= end));
        let last = tree.parents.len() as u32;
        let mut id = written.next_missing(skipped + 1);
        while id <= last {
            // Its parents have lower ids: none is written yet by a later one.
            if through(tree.frames[id as usize - 1]) {
                let start = out.len();
                tree.push_unwritten(id, written, out);
                out[start..].reverse();
            }
            id = written.next_missing(id + 1);
        }
    }
}

impl Tree {
    /// Appends the nodes from `id` towards the root, innermost first, until
    /// one `written` holds, marking them written; returns the Python leaf a
    /// join among them names.
    fn push_unwritten(&self, mut id: u32, written: &mut WrittenIds, out: &mut Vec<StackNode>) -> Option<u32> {
        let mut python_leaf = None;
        while id != 0 && !written.contains(id) {
            let Some((parent, word)) = self.node(id) else { break };
            written.insert(id);
            let frame = frame_of(word);
            if let Frame::PythonLeaf(leaf) = frame {
                python_leaf = Some(leaf);
            }
            out.push(StackNode { id, parent, frame });
            id = parent;
        }
        python_leaf
    }
}

/// The longer of the two kinds of path, and below a native one the join
/// and the mapping marker.
const MAX_PATH: usize = 2 + if crate::unwind::MAX_FRAMES > crate::python::MAX_PY_FRAMES {
    crate::unwind::MAX_FRAMES
} else {
    crate::python::MAX_PY_FRAMES
};

fn frame_of(word: FrameWord) -> Frame {
    if word & PYTHON_TAG != 0 {
        Frame::Python(python::unpack(word & !PYTHON_TAG))
    } else if word == MAPPING {
        Frame::Mapping
    } else if word == SHARED_MAPPING {
        Frame::SharedMapping
    } else if word & PYTHON_LEAF_TAG != 0 {
        Frame::PythonLeaf((word & !PYTHON_LEAF_TAG) as u32)
    } else {
        Frame::Native(word)
    }
}

/// Two independent 64-bit hashes of the whole stack, of which the table
/// keeps 96 bits: a collision (two stacks taken for one) is as likely as
/// guessing a 96-bit key: among ten million stacks, a chance of about one
/// in 10^15.
///
/// Every allocation hashes its whole stack, sixty words and more under
/// torch. One chain of multiplications over the words waits for each
/// product before the next (its latency, not the multiplier, bounds it):
/// the words are dealt to [`HASH_LANES`] chains of each hash, which run side
/// by side, and the chains are folded together at the end.
fn stack_hash(kind: StackKind, native: &[u64], python: &[u64]) -> (u64, u64) {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let kind = kind.marker().unwrap_or(0) << 32;
    let mut a: [u64; HASH_LANES] = [native.len() as u64 ^ kind, K1, K2, K1 ^ K2];
    let mut b: [u64; HASH_LANES] = [python.len() as u64 ^ K2, K2, K1, !K1];
    let mut mix = |lane: usize, word: u64| {
        a[lane] = (a[lane].rotate_left(23) ^ word).wrapping_mul(K1);
        b[lane] = (b[lane].rotate_left(31) ^ word).wrapping_mul(K2);
    };
    for words in [native, python] {
        let mut chunks = words.chunks_exact(HASH_LANES);
        for chunk in &mut chunks {
            (0..HASH_LANES).for_each(|lane| mix(lane, chunk[lane]));
        }
        chunks.remainder().iter().enumerate().for_each(|(lane, &word)| mix(lane, word));
    }
    let fold = |lanes: [u64; HASH_LANES]| {
        lanes.iter().enumerate().fold(0u64, |h, (i, &lane)| h ^ lane.rotate_left(16 * i as u32))
    };
    (finish(fold(a)), finish(fold(b)))
}

/// Chains per hash in [`stack_hash`].
const HASH_LANES: usize = 4;

fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Which ids (of stack nodes, or of code objects) the current trace file
/// already holds.
#[derive(Default)]
pub struct WrittenIds {
    bits: Vec<u64>,
}

impl WrittenIds {
    pub fn contains(&self, id: u32) -> bool {
        self.bits.get(id as usize / 64).is_some_and(|word| word & (1 << (id % 64)) != 0)
    }

    /// Marks `id` held; false if it already was.
    pub fn insert(&mut self, id: u32) -> bool {
        let index = id as usize / 64;
        if index >= self.bits.len() {
            self.bits.resize(index + 1, 0);
        }
        let bit = 1 << (id % 64);
        let new = self.bits[index] & bit == 0;
        self.bits[index] |= bit;
        new
    }

    /// The lowest id from `from` on that this does not hold, passing over
    /// whole words of held ones.
    pub fn next_missing(&self, from: u32) -> u32 {
        let mut index = from as usize / 64;
        let below_from = (1u64 << (from % 64)) - 1;
        let mut held = self.bits.get(index).copied().unwrap_or(0) | below_from;
        while held == u64::MAX {
            index += 1;
            held = self.bits.get(index).copied().unwrap_or(0);
        }
        index as u32 * 64 + held.trailing_ones()
    }

    /// A new trace file holds nothing yet.
    pub fn clear(&mut self) {
        self.bits.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_of(table: &StackTable, stack: StackId) -> Vec<StackNode> {
        let mut out = Vec::new();
        table.unwritten_path(stack, &mut WrittenIds::default(), &mut out);
        out
    }

    #[test]
    fn the_unwritten_stacks_through_a_range_come_with_their_parents() {
        let table = StackTable::default();
        let in_range = [0x5010, 0x20, 0x10];
        table.intern(StackKind::Heap, &in_range, &[]).unwrap();
        let elsewhere = table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[]).unwrap();
        table.intern(StackKind::Heap, &[0x40, 0x6000, 0x10], &[]).unwrap();
        let mut written = WrittenIds::default();
        let mut out = Vec::new();
        table.unwritten_through(&[(0x5000, 0x6000)], 0, &mut written, &mut out);
        let frames: Vec<Frame> = out.iter().map(|n| n.frame).collect();
        // A return address at the range's end: a call at its last byte.
        let expected = [0x10, 0x20, 0x5010, 0x6000].map(Frame::Native);
        assert_eq!(frames, expected, "parents first, the frames outside the range only as parents");
        let mut unwritten = Vec::new();
        table.unwritten_path(elsewhere, &mut written, &mut unwritten);
        assert_eq!(unwritten.iter().map(|n| n.frame).collect::<Vec<_>>(), [Frame::Native(0x30)]);
        out.clear();
        table.unwritten_through(&[(0x5000, 0x6000)], 0, &mut written, &mut out);
        assert!(out.is_empty(), "written already");
        let later = table.intern(StackKind::Heap, &[0x5020, 0x20, 0x10], &[]).unwrap();
        table.unwritten_through(&[(0x5000, 0x6000)], later, &mut written, &mut out);
        assert!(out.is_empty(), "made before the range was loaded: not looked at");
        table.unwritten_through(&[(0x5000, 0x6000)], later - 1, &mut written, &mut out);
        assert_eq!(out.iter().map(|n| n.frame).collect::<Vec<_>>(), [Frame::Native(0x5020)]);
    }

    #[test]
    fn the_next_missing_id_passes_over_held_words() {
        let mut written = WrittenIds::default();
        assert_eq!(written.next_missing(1), 1);
        (1..=130).for_each(|id| _ = written.insert(id));
        written.insert(132);
        assert_eq!(written.next_missing(1), 131);
        assert_eq!(written.next_missing(132), 133);
        assert_eq!(written.next_missing(500), 500, "past the words held");
    }

    #[test]
    fn stacks_share_their_outer_frames() {
        let table = StackTable::default();
        let a = table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[]).unwrap();
        let b = table.intern(StackKind::Heap, &[0x31, 0x20, 0x10], &[]).unwrap();
        assert_ne!(a, b);
        assert_eq!(table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[]).unwrap(), a);
        assert_eq!(table.tree.read().unwrap().len(), 4, "0x10 and 0x20 are shared");

        let frames: Vec<Frame> = path_of(&table, b).iter().map(|n| n.frame).collect();
        assert_eq!(frames, [Frame::Native(0x10), Frame::Native(0x20), Frame::Native(0x31)]);
    }

    /// The stack as the reader rebuilds it from the written nodes: native
    /// and Python frames, innermost first.
    fn frames_of(table: &StackTable, stack: StackId) -> (Vec<u64>, Vec<u64>) {
        let nodes = path_of(table, stack);
        let by_id: std::collections::HashMap<u32, StackNode> = nodes.iter().map(|n| (n.id, *n)).collect();
        for (i, node) in nodes.iter().enumerate() {
            let earlier = |id| nodes[..i].iter().any(|n: &StackNode| n.id == id);
            assert!(node.parent == 0 || earlier(node.parent), "node {} before its parent", node.id);
            if let Frame::PythonLeaf(leaf) = node.frame {
                assert!(earlier(leaf), "join {} before its Python leaf", node.id);
            }
        }
        let (mut native, mut python) = (Vec::new(), Vec::new());
        let mut follow = |mut id: u32| {
            let mut leaf = None;
            while id != 0 {
                let node = by_id[&id];
                match node.frame {
                    Frame::Native(address) => native.push(address),
                    Frame::Python(frame) => python.push(python::pack(frame.code, frame.instruction, frame.entry)),
                    Frame::PythonLeaf(python_leaf) => leaf = Some(python_leaf),
                    Frame::Mapping | Frame::SharedMapping => {}
                }
                id = node.parent;
            }
            leaf
        };
        if let Some(leaf) = follow(stack) {
            follow(leaf);
        }
        (native, python)
    }

    #[test]
    fn python_frames_make_a_path_of_their_own_joined_below_the_native_leaf() {
        let table = StackTable::default();
        let native_only = table.intern(StackKind::Heap, &[0x20, 0x10], &[]).unwrap();
        let (f, g) = (python::pack(1, 4, false), python::pack(2, 8, true));
        let mixed = table.intern(StackKind::Heap, &[0x20, 0x10], &[f, g]).unwrap();
        assert_ne!(native_only, mixed);
        assert_eq!(frames_of(&table, mixed), (vec![0x20, 0x10], vec![f, g]));
        let path = path_of(&table, mixed);
        assert_eq!(path.last().unwrap().parent, native_only, "the join sits below the native leaf");
        assert_eq!(path.len(), 5, "two native nodes, two Python nodes, the join");
    }

    #[test]
    fn each_kind_is_shared_however_the_other_differs() {
        let table = StackTable::default();
        let (f, g, h) = (python::pack(1, 4, false), python::pack(2, 8, false), python::pack(3, 0, true));
        table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[f, g, h]).unwrap();
        let nodes = || table.tree.read().unwrap().len();
        let before = nodes();
        // Another line in the innermost function: one Python node and a join.
        let other_line = python::pack(1, 6, false);
        let a = table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[other_line, g, h]).unwrap();
        assert_eq!(nodes(), before + 2);
        assert_eq!(frames_of(&table, a), (vec![0x30, 0x20, 0x10], vec![other_line, g, h]));
        // Another native call path from the same Python line: one native node and a join.
        let before = nodes();
        let b = table.intern(StackKind::Heap, &[0x31, 0x20, 0x10], &[f, g, h]).unwrap();
        assert_eq!(nodes(), before + 2);
        assert_eq!(frames_of(&table, b), (vec![0x31, 0x20, 0x10], vec![f, g, h]));
    }

    #[test]
    fn a_stack_of_python_frames_only_joins_at_the_root() {
        let table = StackTable::default();
        let f = python::pack(5, 2, true);
        let stack = table.intern(StackKind::Heap, &[], &[f]).unwrap();
        assert_eq!(frames_of(&table, stack), (vec![], vec![f]));
        assert_eq!(path_of(&table, stack).last().unwrap().parent, 0);
    }

    #[test]
    fn each_node_is_written_once_per_file_parents_first() {
        let table = StackTable::default();
        let a = table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[]).unwrap();
        let b = table.intern(StackKind::Heap, &[0x31, 0x20, 0x10], &[]).unwrap();
        let mut written = WrittenIds::default();
        let mut out = Vec::new();
        table.unwritten_path(a, &mut written, &mut out);
        table.unwritten_path(b, &mut written, &mut out);
        table.unwritten_path(a, &mut written, &mut out);
        assert_eq!(out.len(), 4);
        for (i, node) in out.iter().enumerate() {
            assert!(node.parent == 0 || out[..i].iter().any(|n| n.id == node.parent), "parent after child");
        }
        written.clear();
        let mut again = Vec::new();
        table.unwritten_path(b, &mut written, &mut again);
        assert_eq!(again.len(), 3, "a new file gets the whole path");
    }

    #[test]
    fn a_threads_last_path_serves_only_its_own_table() {
        let (first, second) = (StackTable::default(), StackTable::default());
        let a = first.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[]).unwrap();
        // Shares two frames with the last path, which belongs to `first`.
        let b = second.intern(StackKind::Heap, &[0x31, 0x20, 0x10], &[]).unwrap();
        assert_eq!(second.tree.read().unwrap().len(), 3, "no node of `first` was taken");
        let frames = |table: &StackTable, id| path_of(table, id).iter().map(|n| n.frame).collect::<Vec<_>>();
        assert_eq!(frames(&second, b), [Frame::Native(0x10), Frame::Native(0x20), Frame::Native(0x31)]);
        // Back on `first`, whose path the thread no longer holds.
        let c = first.intern(StackKind::Heap, &[0x32, 0x20, 0x10], &[]).unwrap();
        assert_eq!(first.tree.read().unwrap().len(), 4);
        assert_eq!(frames(&first, c), [Frame::Native(0x10), Frame::Native(0x20), Frame::Native(0x32)]);
        assert_eq!(path_of(&first, c)[1].id, path_of(&first, a)[1].id, "0x20 is shared");
    }

    #[test]
    fn a_stack_sharing_the_last_paths_outer_frames_extends_it() {
        let table = StackTable::default();
        table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[]).unwrap();
        let deeper = table.intern(StackKind::Heap, &[0x40, 0x30, 0x20, 0x10], &[]).unwrap();
        let shallower = table.intern(StackKind::Heap, &[0x20, 0x10], &[]).unwrap();
        assert_eq!(table.tree.read().unwrap().len(), 4);
        assert_eq!(path_of(&table, deeper).len(), 4);
        assert_eq!(path_of(&table, shallower).last().unwrap().frame, Frame::Native(0x20));
        assert_eq!(path_of(&table, shallower).last().unwrap().id, path_of(&table, deeper)[1].id);
    }

    #[test]
    fn a_mapping_stack_ends_in_the_marker_and_differs_from_the_heap_stack() {
        let table = StackTable::default();
        let heap = table.intern(StackKind::Heap, &[0x20, 0x10], &[]).unwrap();
        let mapping = table.intern(StackKind::Mapping, &[0x20, 0x10], &[]).unwrap();
        assert_ne!(heap, mapping);
        assert_eq!(table.intern(StackKind::Mapping, &[0x20, 0x10], &[]).unwrap(), mapping);
        let frames: Vec<Frame> = path_of(&table, mapping).iter().map(|n| n.frame).collect();
        assert_eq!(frames, [Frame::Native(0x10), Frame::Native(0x20), Frame::Mapping]);
        let empty = table.intern(StackKind::Mapping, &[], &[]).unwrap();
        let frames: Vec<Frame> = path_of(&table, empty).iter().map(|n| n.frame).collect();
        assert_eq!(frames, [Frame::Native(NO_FRAMES), Frame::Mapping]);
        // With Python frames the marker sits below the join.
        let f = python::pack(3, 1, true);
        let from_python = table.intern(StackKind::Mapping, &[0x20, 0x10], &[f]).unwrap();
        assert_eq!(frames_of(&table, from_python), (vec![0x20, 0x10], vec![f]));
        assert_eq!(path_of(&table, from_python).last().unwrap().frame, Frame::Mapping);
        // Shared memory mapped at the same place is a stack of its own.
        let shared = table.intern(StackKind::SharedMapping, &[0x20, 0x10], &[]).unwrap();
        assert!(shared != heap && shared != mapping);
        assert_eq!(table.intern(StackKind::SharedMapping, &[0x20, 0x10], &[]).unwrap(), shared);
        assert_eq!(path_of(&table, shared).last().unwrap().frame, Frame::SharedMapping);
        // Each stack tells what made it, Python frames or not.
        let kinds = [heap, mapping, empty, from_python, shared].map(|id| table.kind(id));
        use StackKind::*;
        assert_eq!(kinds, [Heap, Mapping, Mapping, Mapping, SharedMapping]);
        let python_heap = table.intern(Heap, &[0x20], &[f]).unwrap();
        assert_eq!(table.kind(python_heap), Heap);
    }

    #[test]
    fn the_ends_of_stacks_stay_out_of_the_child_index_and_are_found_by_the_stack() {
        let table = StackTable::default();
        let (f, g) = (python::pack(3, 1, true), python::pack(4, 2, false));
        let heap = table.intern(StackKind::Heap, &[0x20, 0x10], &[f]).unwrap();
        let mapping = table.intern(StackKind::Mapping, &[0x20, 0x10], &[f]).unwrap();
        let other = table.intern(StackKind::Heap, &[0x20, 0x10], &[g]).unwrap();
        let native_only = table.intern(StackKind::Mapping, &[0x30], &[]).unwrap();
        // Interned again after other stacks, from another starting path.
        for (kind, native, python, id) in [
            (StackKind::Heap, &[0x20, 0x10][..], &[f][..], heap),
            (StackKind::Mapping, &[0x30], &[], native_only),
            (StackKind::Mapping, &[0x20, 0x10], &[f], mapping),
            (StackKind::Heap, &[0x20, 0x10], &[g], other),
        ] {
            assert_eq!(table.intern(kind, native, python).unwrap(), id);
        }
        let tree = table.tree.read().unwrap();
        let indexed = tree.children.slots.iter().filter(|[_, ids]| ids >> 32 != 0).count();
        let ends = tree.frames.iter().filter(|&&word| ends_a_stack(word)).count();
        assert_eq!(ends, 4, "two joins, two mapping markers");
        assert_eq!(indexed + ends, tree.len());
    }

    #[test]
    fn each_word_of_a_stack_and_where_it_lies_change_its_hash() {
        let native: Vec<u64> = (1..=9).map(|i| 0x7f00_0000_1000 + i * 0x40).collect();
        let python: Vec<u64> = (1..=6).map(|i| PYTHON_TAG | i).collect();
        let base = stack_hash(StackKind::Heap, &native, &python);
        let mut seen = std::collections::HashSet::from([base.0, base.1]);
        // A word changed in any lane, of either part.
        for i in 0..native.len() {
            let mut changed = native.clone();
            changed[i] ^= 0x10;
            let hash = stack_hash(StackKind::Heap, &changed, &python);
            assert!(seen.insert(hash.0) && seen.insert(hash.1), "native word {i}");
        }
        for i in 0..python.len() {
            let mut changed = python.clone();
            changed[i] ^= 0x10;
            let hash = stack_hash(StackKind::Heap, &native, &changed);
            assert!(seen.insert(hash.0) && seen.insert(hash.1), "python word {i}");
        }
        // Two words of different lanes swapped; a word moved across the parts.
        let mut swapped = native.clone();
        swapped.swap(0, 1);
        assert_ne!(stack_hash(StackKind::Heap, &swapped, &python), base);
        let moved: Vec<u64> = python[1..].to_vec();
        let longer: Vec<u64> = native.iter().copied().chain([python[0]]).collect();
        assert_ne!(stack_hash(StackKind::Heap, &longer, &moved), base);
        assert_ne!(stack_hash(StackKind::Mapping, &native, &python), base);
    }

    #[test]
    fn an_edge_pushed_out_of_the_index_costs_a_node_never_a_stacks_identity() {
        let table = StackTable::default();
        let a = table.intern(StackKind::Heap, &[0xa1, 0x10], &[]).unwrap();
        let b = table.intern(StackKind::Heap, &[0xb1, 0x20], &[]).unwrap();
        // Push the root's edge to 0x10 out, as four full sets would.
        for slot in &mut table.tree.write().unwrap().children.slots {
            if slot[0] == 0x10 {
                *slot = [0, 0];
            }
        }
        // Neither this thread's last path (b's) nor the index leads to 0x10.
        let c = table.intern(StackKind::Heap, &[0xc1, 0x10], &[]).unwrap();
        assert_eq!(table.tree.read().unwrap().len(), 6, "0x10 stored again");
        assert_eq!(frames_of(&table, c), (vec![0xc1, 0x10], vec![]));
        assert_ne!(path_of(&table, c)[1].id, path_of(&table, a)[1].id);
        assert_eq!(table.intern(StackKind::Heap, &[0xa1, 0x10], &[]).unwrap(), a, "a stack keeps its id");
        assert_eq!(table.intern(StackKind::Heap, &[0xb1, 0x20], &[]).unwrap(), b);
        assert_eq!(table.intern(StackKind::Heap, &[0xc1, 0x10], &[]).unwrap(), c);
    }

    #[test]
    fn an_edge_goes_to_the_next_sets_when_its_own_is_full_and_out_only_when_all_are() {
        let mut index = EdgeIndex::with_slots(MIN_EDGE_SLOTS).unwrap();
        let home = index.set_starts(0, 0x10)[0];
        let rivals: Vec<FrameWord> =
            (0x10..).filter(|&word| index.set_starts(0, word)[0] == home).take(WAYS * PROBED_SETS + 1).collect();
        let (fitting, last) = rivals.split_at(WAYS * PROBED_SETS);
        for (child, &word) in (1..).zip(fitting) {
            index.put(0, word, child);
        }
        for (child, &word) in (1..).zip(fitting) {
            assert_eq!(index.find(0, word), Some(child), "edge {child} of {} kept", fitting.len());
        }
        assert_eq!(index.find(0, last[0]), None, "a look stops after the probed sets");
        // The next one pushes out the edge in the way its id picks.
        let child = WAYS as u32 * 7;
        index.put(0, last[0], child);
        assert_eq!(index.find(0, last[0]), Some(child));
        let lost = fitting.iter().filter(|&&word| index.find(0, word).is_none()).count();
        assert_eq!(lost, 1);
    }

    #[test]
    fn stacks_whose_hashes_share_the_first_word_are_told_apart() {
        let table = StackTable::default();
        assert_eq!(table.remember((1, 2), 5).unwrap(), 5);
        assert_eq!(table.remember((1, 3), 6).unwrap(), 6);
        assert_eq!(table.remember((1, 2), 9).unwrap(), 5, "interned first by another thread");
        assert_eq!(table.remember((1, 3), 9).unwrap(), 6);
        assert_eq!((table.known((1, 2)), table.known((1, 3))), (Some(5), Some(6)));
        assert_eq!(table.known((1, 4)), None);
        assert_eq!(table.known((7, 2)), None);
    }

    #[test]
    fn a_capture_repeating_the_threads_last_one_is_known_without_a_lookup() {
        let table = StackTable::default();
        let f = python::pack(1, 4, false);
        let first = table.intern_capture(StackKind::Heap, &CapturedStack::for_test(&[0x20, 0x10], 1, 0), &[f]).unwrap();
        // The unwinder says capture 2 repeats capture 1: its frames are not
        // even looked at (these differ, which a real repeat never does).
        let repeat = CapturedStack::for_test(&[0x99], 2, 1);
        assert_eq!(table.intern_capture(StackKind::Heap, &repeat, &[f]).unwrap(), first);
        // Other Python frames, another kind, or a repeat of an older capture: looked up.
        let other_line = python::pack(1, 6, false);
        let moved = table
            .intern_capture(StackKind::Heap, &CapturedStack::for_test(&[0x20, 0x10], 3, 2), &[other_line])
            .unwrap();
        assert_ne!(moved, first);
        assert_eq!(moved, table.intern(StackKind::Heap, &[0x20, 0x10], &[other_line]).unwrap());
        let mapping = table
            .intern_capture(StackKind::Mapping, &CapturedStack::for_test(&[0x20, 0x10], 4, 3), &[other_line])
            .unwrap();
        assert_eq!(mapping, table.intern(StackKind::Mapping, &[0x20, 0x10], &[other_line]).unwrap());
        let stale =
            table.intern_capture(StackKind::Heap, &CapturedStack::for_test(&[0x30], 5, 3), &[other_line]).unwrap();
        assert_eq!(stale, table.intern(StackKind::Heap, &[0x30], &[other_line]).unwrap());
        // Another table never takes this table's last stack.
        let other_table = StackTable::default();
        let elsewhere = other_table
            .intern_capture(StackKind::Heap, &CapturedStack::for_test(&[0x77], 6, 5), &[other_line])
            .unwrap();
        assert_eq!(elsewhere, other_table.intern(StackKind::Heap, &[0x77], &[other_line]).unwrap());
    }

    #[test]
    fn a_wide_tree_of_calls_gets_one_node_per_edge() {
        // 2^14 stacks: at each of 14 levels, one of two call sites, then the
        // function it called; consecutive stacks differ at the outermost
        // level, so every subtree grows a little at a time.
        const LEVELS: u32 = 14;
        let table = StackTable::default();
        for number in 0..1u64 << LEVELS {
            let mut outermost_first = vec![0x1000];
            for level in 0..u64::from(LEVELS) {
                let side = number >> level & 1;
                outermost_first.push(0x2000 + 0x10 * side);
                outermost_first.push(0x3000 + 0x10 * side);
            }
            outermost_first.reverse();
            table.intern(StackKind::Heap, &outermost_first, &[]).unwrap();
        }
        // The root's child, then 2 nodes for each of the 2^(l+1) prefixes
        // of level l.
        let edges = 1 + (0..LEVELS).map(|level| 2 << (level + 1)).sum::<usize>();
        assert_eq!(table.tree.read().unwrap().len(), edges);
    }

    #[test]
    fn an_empty_stack_still_has_a_node() {
        let table = StackTable::default();
        let empty = table.intern(StackKind::Heap, &[], &[]).unwrap();
        assert_ne!(empty, 0);
        assert_eq!(path_of(&table, empty)[0].frame, Frame::Native(NO_FRAMES));
    }
}
