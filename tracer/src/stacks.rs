//! Interning of call stacks as the nodes of a prefix tree.
//!
//! A process such as a CUDA build of PyTorch makes a million distinct stacks
//! of sixty frames while it imports, and they share most of their outer
//! frames. Each distinct (parent, frame) edge is stored and written once; a
//! stack is named by its innermost node. The hot path looks a whole stack up
//! by a 128-bit hash of its frames and touches the tree only for a stack it
//! has never seen. A node's (parent, frame) is stored once, in two arrays
//! indexed by id; the index that finds a child by (parent, frame) holds only
//! ids (12 + ~5 bytes a node: tens of millions of nodes stay affordable).

use std::sync::RwLock;

use dashmap::DashMap;
use hashbrown::HashTable;
use trace_format::{Frame, StackNode};

use crate::fast_hash::BuildWordHasher;
use crate::python;

/// The id of a stack's innermost node (never 0, the root).
pub type StackId = u32;

/// A frame as the tree stores it: a native return address, or a packed Python
/// frame tagged with the top bit (user-space addresses never have it).
type FrameWord = u64;
const PYTHON_TAG: FrameWord = 1 << 63;

/// Stands in for the frames of a stack the unwinder could not capture at all.
const NO_FRAMES: FrameWord = 0;

/// The innermost word of a mapping's stack: no return address is 1.
const MAPPING: FrameWord = 1;

/// What a stack made: the tree keeps a heap stack and a mapping stack with
/// the same frames apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackKind {
    Heap,
    Mapping,
}

#[derive(Default)]
pub struct StackTable {
    by_hash: DashMap<u128, StackId, BuildWordHasher>,
    tree: RwLock<Tree>,
}

/// The prefix tree: node `id` is at index `id - 1` of both arrays.
#[derive(Default)]
struct Tree {
    parents: Vec<u32>,
    frames: Vec<FrameWord>,
    /// Node ids, found by the hash of their (parent, frame).
    children: HashTable<u32>,
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

    fn child(&self, parent: u32, word: FrameWord) -> Option<u32> {
        self.children.find(edge_hash(parent, word), |&id| self.node(id) == Some((parent, word))).copied()
    }

    fn add_child(&mut self, parent: u32, word: FrameWord) -> u32 {
        self.parents.push(parent);
        self.frames.push(word);
        let id = self.parents.len() as u32;
        let (parents, frames) = (&self.parents, &self.frames);
        self.children.insert_unique(edge_hash(parent, word), id, |&id| {
            let index = id as usize - 1;
            edge_hash(parents[index], frames[index])
        });
        id
    }
}

fn edge_hash(parent: u32, word: FrameWord) -> u64 {
    finish((u64::from(parent).rotate_left(32) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

impl StackTable {
    /// The id of the stack of `kind` with these native return addresses
    /// (innermost first) and packed Python frames (innermost first).
    /// `eval_loop` is the address range of the interpreter's eval loop, if known.
    pub fn intern(&self, kind: StackKind, native: &[u64], python: &[u64], eval_loop: Option<(u64, u64)>) -> StackId {
        let hash = stack_hash(kind, native, python);
        if let Some(id) = self.by_hash.get(&hash) {
            return *id;
        }
        let mut path = [0; MAX_PATH + 1];
        let mut len = tree_path(native, python, eval_loop, &mut path);
        if len == 0 {
            path[0] = NO_FRAMES;
            len = 1;
        }
        if kind == StackKind::Mapping {
            path[len] = MAPPING;
            len += 1;
        }
        let node = self.path_node(&path[..len]);
        *self.by_hash.entry(hash).or_insert(node)
    }

    /// The node at the end of `path`, adding the nodes it lacks: a shared
    /// look along the part that exists, the write lock only for the rest.
    fn path_node(&self, path: &[FrameWord]) -> u32 {
        let (mut node, mut known) = (0, 0);
        {
            let tree = self.tree.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            while let Some(child) = path.get(known).and_then(|&word| tree.child(node, word)) {
                node = child;
                known += 1;
            }
        }
        if known < path.len() {
            let mut tree = self.tree.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            for &word in &path[known..] {
                node = match tree.child(node, word) {
                    Some(child) => child,
                    None => tree.add_child(node, word),
                };
            }
        }
        node
    }

    /// Appends to `out` the nodes of `stack`'s path that `written` does not
    /// hold yet, outermost first, and marks them written.
    pub fn unwritten_path(&self, stack: StackId, written: &mut WrittenNodes, out: &mut Vec<StackNode>) {
        let tree = self.tree.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let start = out.len();
        let mut id = stack;
        while id != 0 && !written.contains(id) {
            let Some((parent, word)) = tree.node(id) else { break };
            written.insert(id);
            out.push(StackNode { id, parent, frame: frame_of(word) });
            id = parent;
        }
        out[start..].reverse();
    }
}

const MAX_PATH: usize = crate::unwind::MAX_FRAMES + crate::python::MAX_PY_FRAMES;

/// A stack's frames as a path from the root, outermost first. The reader
/// separates native and Python frames again by kind, so any interleaving that
/// keeps each kind's order is correct; the one chosen shares the most: each
/// run of Python frames follows the eval-loop frame that runs it, as in the
/// real stack, so the native frames outside Python are shared by all stacks.
/// When the eval-loop frames and the runs do not pair up, the Python frames
/// go first. Returns the path's length.
fn tree_path(native: &[u64], python: &[u64], eval_loop: Option<(u64, u64)>, out: &mut [u64]) -> usize {
    let native = &native[..native.len().min(crate::unwind::MAX_FRAMES)];
    let python = &python[..python.len().min(crate::python::MAX_PY_FRAMES)];
    let is_entry = |word: u64| python::unpack(word).entry;
    let in_eval_loop = |ip: &&u64| eval_loop.is_some_and(|(start, end)| start <= **ip && **ip < end);
    // A run ends (outermost) at an entry frame, so the outermost frame must be one.
    let runs = python.iter().filter(|&&w| is_entry(w)).count();
    let pairs_up = !python.is_empty()
        && python.last().is_some_and(|&w| is_entry(w))
        && native.iter().filter(in_eval_loop).count() == runs;
    let mut len = 0;
    let mut push = |word: u64| {
        out[len] = word;
        len += 1;
    };
    if !pairs_up {
        python.iter().rev().for_each(|&w| push(w | PYTHON_TAG));
        native.iter().rev().for_each(|&ip| push(ip));
        return len;
    }
    let mut outer_python = python.iter().rev().peekable();
    for ip in native.iter().rev() {
        push(*ip);
        if in_eval_loop(&ip) {
            if let Some(&entry) = outer_python.next() {
                push(entry | PYTHON_TAG);
            }
            while let Some(&&word) = outer_python.peek() {
                if is_entry(word) {
                    break;
                }
                push(word | PYTHON_TAG);
                outer_python.next();
            }
        }
    }
    len
}

fn frame_of(word: FrameWord) -> Frame {
    if word & PYTHON_TAG != 0 {
        Frame::Python(python::unpack(word & !PYTHON_TAG))
    } else if word == MAPPING {
        Frame::Mapping
    } else {
        Frame::Native(word)
    }
}

/// Two independent 64-bit hashes of the whole stack: a collision (two stacks
/// taken for one) is as likely as guessing a 128-bit key.
fn stack_hash(kind: StackKind, native: &[u64], python: &[u64]) -> u128 {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let kind = match kind {
        StackKind::Heap => 0,
        StackKind::Mapping => 1 << 32,
    };
    let (mut a, mut b) = (native.len() as u64 ^ kind, python.len() as u64 ^ K2);
    for &word in native.iter().chain(python) {
        a = (a.rotate_left(23) ^ word).wrapping_mul(K1);
        b = (b.rotate_left(31) ^ word).wrapping_mul(K2);
    }
    (u128::from(finish(a)) << 64) | u128::from(finish(b))
}

fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Which nodes the current trace file already holds.
#[derive(Default)]
pub struct WrittenNodes {
    bits: Vec<u64>,
}

impl WrittenNodes {
    fn contains(&self, id: u32) -> bool {
        self.bits.get(id as usize / 64).is_some_and(|word| word & (1 << (id % 64)) != 0)
    }

    fn insert(&mut self, id: u32) {
        let index = id as usize / 64;
        if index >= self.bits.len() {
            self.bits.resize(index + 1, 0);
        }
        self.bits[index] |= 1 << (id % 64);
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
        table.unwritten_path(stack, &mut WrittenNodes::default(), &mut out);
        out
    }

    #[test]
    fn stacks_share_their_outer_frames() {
        let table = StackTable::default();
        let a = table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[], None);
        let b = table.intern(StackKind::Heap, &[0x31, 0x20, 0x10], &[], None);
        assert_ne!(a, b);
        assert_eq!(table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[], None), a);
        assert_eq!(table.tree.read().unwrap().len(), 4, "0x10 and 0x20 are shared");

        let frames: Vec<Frame> = path_of(&table, b).iter().map(|n| n.frame).collect();
        assert_eq!(frames, [Frame::Native(0x10), Frame::Native(0x20), Frame::Native(0x31)]);
    }

    #[test]
    fn python_frames_sit_nearest_the_root_and_make_stacks_distinct() {
        let table = StackTable::default();
        let native_only = table.intern(StackKind::Heap, &[0x20, 0x10], &[], None);
        let packed = python::pack(7, 3, true);
        let mixed = table.intern(StackKind::Heap, &[0x20, 0x10], &[packed], None);
        assert_ne!(native_only, mixed);
        let path = path_of(&table, mixed);
        assert_eq!(path[0].parent, 0);
        assert_eq!(path[0].frame, Frame::Python(python::unpack(packed)));
        assert_eq!(path.last().unwrap().frame, Frame::Native(0x20));
    }

    #[test]
    fn python_runs_follow_the_eval_loop_frames_that_run_them() {
        let eval = Some((0x500, 0x600));
        // Innermost first: malloc caller, eval (inner), C call, eval (outer), main.
        let native = [0x10, 0x510, 0x20, 0x520, 0x30];
        // Innermost first: f (inner run, entry), g, h (outer run, entry).
        let (f, g, h) = (python::pack(1, 0, true), python::pack(2, 0, false), python::pack(3, 0, true));
        let table = StackTable::default();
        let stack = table.intern(StackKind::Heap, &native, &[f, g, h], eval);
        let frames: Vec<Frame> = path_of(&table, stack).iter().map(|n| n.frame).collect();
        let py = |w| Frame::Python(python::unpack(w));
        assert_eq!(
            frames,
            [
                Frame::Native(0x30),
                Frame::Native(0x520),
                py(h),
                py(g),
                Frame::Native(0x20),
                Frame::Native(0x510),
                py(f),
                Frame::Native(0x10)
            ]
        );
        // A second stack under the same outer Python frames shares that prefix.
        let nodes_before = table.tree.read().unwrap().len();
        table.intern(StackKind::Heap, &[0x11, 0x510, 0x20, 0x520, 0x30], &[f, g, h], eval);
        assert_eq!(table.tree.read().unwrap().len(), nodes_before + 1);
        // Without a pairing (unknown eval loop) the Python frames go first.
        let other_table = StackTable::default();
        let apart = other_table.intern(StackKind::Heap, &native, &[f, g, h], None);
        assert_eq!(path_of(&other_table, apart)[0].frame, py(h));
    }

    #[test]
    fn each_node_is_written_once_per_file_parents_first() {
        let table = StackTable::default();
        let a = table.intern(StackKind::Heap, &[0x30, 0x20, 0x10], &[], None);
        let b = table.intern(StackKind::Heap, &[0x31, 0x20, 0x10], &[], None);
        let mut written = WrittenNodes::default();
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
    fn a_mapping_stack_ends_in_the_marker_and_differs_from_the_heap_stack() {
        let table = StackTable::default();
        let heap = table.intern(StackKind::Heap, &[0x20, 0x10], &[], None);
        let mapping = table.intern(StackKind::Mapping, &[0x20, 0x10], &[], None);
        assert_ne!(heap, mapping);
        assert_eq!(table.intern(StackKind::Mapping, &[0x20, 0x10], &[], None), mapping);
        let frames: Vec<Frame> = path_of(&table, mapping).iter().map(|n| n.frame).collect();
        assert_eq!(frames, [Frame::Native(0x10), Frame::Native(0x20), Frame::Mapping]);
        let empty = table.intern(StackKind::Mapping, &[], &[], None);
        let frames: Vec<Frame> = path_of(&table, empty).iter().map(|n| n.frame).collect();
        assert_eq!(frames, [Frame::Native(NO_FRAMES), Frame::Mapping]);
    }

    #[test]
    fn an_empty_stack_still_has_a_node() {
        let table = StackTable::default();
        let empty = table.intern(StackKind::Heap, &[], &[], None);
        assert_ne!(empty, 0);
        assert_eq!(path_of(&table, empty)[0].frame, Frame::Native(NO_FRAMES));
    }
}
