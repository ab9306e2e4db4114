//! Loading a trace file into an in-memory model: the process, its modules,
//! the prefix tree of its stacks, the snapshot headers and the per-pair counters at the
//! snapshots the analysis needs.
//!
//! The counters are kept sparse: one map entry per (stack, birth epoch) pair
//! that still has live allocations (or was born in the current epoch). Pairs
//! whose allocations are all freed and whose epoch is over never change again
//! and are dropped as the file is read, so memory follows the live state, not
//! stacks times epochs. Full copies of the state are kept only for the
//! snapshots asked for; the state before the last snapshot is rebuilt from an
//! undo log of the last snapshot's changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use trace_format::{
    EpochCause, Frame, Notice, Process, PyCode, PyFrame, ReadError, Record, RecordReader, SiteCounters, Snapshot,
    StackNode, TraceEnd, PYMALLOC, PYMALLOC_OBJECTS_TRACED, PYTHON_ALLOCATOR_SETTING,
};

use crate::error::Failure;
use crate::modules::{Generation, ModuleRecords};
use crate::progress::Progress;

/// A small, fast hasher for integer keys (the pair maps are hot).
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// (stack id, birth epoch).
pub type PairKey = (u32, u32);

/// The counters of one pair at a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Counts {
    pub live_count: u64,
    pub live_bytes: u64,
    pub allocated_count: u64,
    pub allocated_bytes: u64,
}

impl From<&SiteCounters> for Counts {
    fn from(c: &SiteCounters) -> Self {
        Counts {
            live_count: c.live_count,
            live_bytes: c.live_bytes,
            allocated_count: c.allocated_count,
            allocated_bytes: c.allocated_bytes,
        }
    }
}

/// The counters of every pair that matters at one snapshot, in no
/// particular order. A list of exactly their number: a copy of the
/// loader's table would keep its capacity, and after the first epoch of a
/// full capture of torch that is two million buckets (86 MB) for a few
/// hundred thousand pairs still alive.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub pairs: Vec<(PairKey, Counts)>,
}

/// Snapshots whose live bytes per stack the loader keeps: powers of two
/// and one and a half times them (2, 3, 4, 6, 8, 12, ...), each at most
/// half again the one before, so that one lies near the middle of a run.
fn is_checkpoint(index: usize) -> bool {
    index.is_power_of_two() || (index.is_multiple_of(3) && (index / 3).is_power_of_two())
}

/// Whether allocations born in epoch `birth` have had time to be freed by
/// the end of `epoch`: those of its last two epochs may be a loop's latest,
/// alive until its next turn.
pub fn settled_by(birth: u32, epoch: u32) -> bool {
    birth + 2 <= epoch
}

/// Live bytes per stack of `pairs`.
fn live_bytes_by_stack<'a>(pairs: impl Iterator<Item = (&'a PairKey, &'a Counts)>) -> IntMap<u32, u64> {
    let mut out: IntMap<u32, u64> = IntMap::default();
    for (&(stack, _), c) in pairs.filter(|(_, c)| c.live_bytes > 0) {
        *out.entry(stack).or_default() += c.live_bytes;
    }
    out
}

impl State {
    fn of(pairs: &IntMap<PairKey, Counts>) -> State {
        State { pairs: pairs.iter().map(|(&key, &counts)| (key, counts)).collect() }
    }

    /// Live bytes per stack.
    pub fn live_bytes_by_stack(&self) -> IntMap<u32, u64> {
        live_bytes_by_stack(self.pairs.iter().map(|(key, counts)| (key, counts)))
    }

    /// Bytes allocated per stack during `epoch` (allocations born in it).
    pub fn allocated_bytes_by_stack(&self, epoch: u32) -> IntMap<u32, u64> {
        let mut out: IntMap<u32, u64> = IntMap::default();
        for &((stack, birth), c) in &self.pairs {
            if birth == epoch && c.allocated_bytes > 0 {
                *out.entry(stack).or_default() += c.allocated_bytes;
            }
        }
        out
    }
}

/// A snapshot whose counters were folded into the counter state as it was
/// read (its `counters` are left empty).
pub type SnapshotHeader = Snapshot;

/// How the trace file ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndKind {
    /// Every record is complete.
    Complete,
    /// The file stops in the middle of a record at `offset`.
    Truncated { offset: u64 },
    /// The record at `offset` is damaged.
    Damaged { offset: u64, reason: String },
}

impl EndKind {
    pub fn name(&self) -> &'static str {
        match self {
            EndKind::Complete => "complete",
            EndKind::Truncated { .. } => "truncated",
            EndKind::Damaged { .. } => "damaged",
        }
    }
}

/// What a stack's allocations are (and a suspect's, or a line's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Memory {
    /// Heap allocations (malloc and friends); for a line, also a mix of kinds.
    #[default]
    Heap,
    /// Anonymous mappings.
    Mapped,
    /// Shared memory (files of tmpfs or hugetlbfs) mapped shared and writable.
    Shared,
}

impl Memory {
    /// As the JSON names it.
    pub fn name(self) -> &'static str {
        match self {
            Memory::Heap => "heap",
            Memory::Mapped => "mapped",
            Memory::Shared => "shared",
        }
    }

    /// How a mapping stack's memory is said in words; `None` for the heap.
    pub fn words(self) -> Option<&'static str> {
        match self {
            Memory::Heap => None,
            Memory::Mapped => Some("anonymous mapped memory"),
            Memory::Shared => Some("shared memory"),
        }
    }
}

/// A native frame of a stack: its return address, and the module
/// generation its node was written in (see [`crate::modules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeFrame {
    pub address: u64,
    pub generation: Generation,
}

/// One stack put back together from the prefix tree: its frames as the
/// trace records them, innermost first within each kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stack {
    /// Native frames, innermost first.
    pub native: Vec<NativeFrame>,
    /// Python frames, innermost first.
    pub python: Vec<PyFrame>,
    /// The walk to the root stopped at a node the trace lacks (or looped).
    pub broken_at: Option<u32>,
    /// What the stack made: heap allocations, or mappings of either kind.
    pub memory: Memory,
}

/// No stack is followed further than this many frames (a guard against
/// damaged parent links).
const MAX_STACK_DEPTH: usize = 1 << 16;

/// Node kinds in [`Stacks::tag`].
const TAG_NONE: u8 = 0;
const TAG_NATIVE: u8 = 1;
const TAG_PYTHON: u8 = 2;
const TAG_PYTHON_ENTRY: u8 = 3;
const TAG_PYTHON_LEAF: u8 = 4;
const TAG_MAPPING: u8 = 5;
const TAG_SHARED_MAPPING: u8 = 6;

/// What a stack whose innermost node has `tag` made.
fn memory_of_tag(tag: u8) -> Memory {
    match tag {
        TAG_MAPPING => Memory::Mapped,
        TAG_SHARED_MAPPING => Memory::Shared,
        _ => Memory::Heap,
    }
}

/// A function whose callers [`Stacks::has_several_callers`] counts: a
/// native one by its return address, a Python one by its code object's
/// id (whichever of its lines called on).
#[derive(Clone, Copy, Debug)]
pub enum Callee {
    Native(u64),
    Python(u64),
}

/// One node as stored: parent, kind, and the frame packed in a u64 (a native
/// address, or the interned code index in the high half and the instruction
/// in the low half).
type Packed = (u32, u8, u64);

/// The prefix tree of every stack in the trace, kept compactly in memory:
/// parallel vectors indexed by node id (13 bytes per node), with a map for
/// ids too far beyond the others to index densely. A stack is named by its
/// innermost node; its frames are rebuilt by following the parents.
#[derive(Default)]
pub struct Stacks {
    parent: Vec<u32>,
    tag: Vec<u8>,
    value: Vec<u64>,
    /// Nodes whose ids are too large for the dense vectors.
    sparse: IntMap<u32, Packed>,
    /// The module generation of each native node written after the first
    /// generation, by id: empty in a trace where no library took another's
    /// addresses, and no longer than the last such node's id.
    generations: Vec<Generation>,
    sparse_generations: IntMap<u32, Generation>,
    /// Code ids of the Python frames, by interned index.
    codes: Vec<u64>,
    code_index: IntMap<u64, u32>,
    count: usize,
    /// Nodes given again with different contents: how many, and the first.
    conflicts: u64,
    first_conflict: Option<u32>,
}

impl std::fmt::Debug for Stacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stacks").field("nodes", &self.count).field("conflicts", &self.conflicts).finish()
    }
}

impl Stacks {
    /// Number of distinct stack nodes in the trace.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn pack(&mut self, frame: &Frame) -> (u8, u64) {
        match *frame {
            Frame::Native(address) => (TAG_NATIVE, address),
            Frame::Python(py) => {
                let next = self.codes.len() as u32;
                let index = *self.code_index.entry(py.code).or_insert(next);
                if index == next {
                    self.codes.push(py.code);
                }
                let tag = if py.entry { TAG_PYTHON_ENTRY } else { TAG_PYTHON };
                (tag, (u64::from(index) << 32) | u64::from(py.instruction))
            }
            Frame::PythonLeaf(node) => (TAG_PYTHON_LEAF, u64::from(node)),
            Frame::Mapping => (TAG_MAPPING, 0),
            Frame::SharedMapping => (TAG_SHARED_MAPPING, 0),
        }
    }

    /// Whether `callee` is reached from more than one caller in the
    /// trace's stacks: its nodes' parents are frames at different return
    /// addresses, or Python instructions (or of other kinds).
    pub fn has_several_callers(&self, callee: Callee) -> bool {
        let is_callee = |tag: u8, value: u64| match callee {
            Callee::Native(address) => tag == TAG_NATIVE && value == address,
            Callee::Python(code) => {
                matches!(tag, TAG_PYTHON | TAG_PYTHON_ENTRY) && self.codes[(value >> 32) as usize] == code
            }
        };
        // Whether a Python frame was entered from C is no other caller.
        let caller = |(_, tag, value): Packed| (if tag == TAG_PYTHON_ENTRY { TAG_PYTHON } else { tag }, value);
        let dense = (0..self.tag.len()).filter_map(|i| self.lookup(i as u32));
        let mut callers = dense
            .chain(self.sparse.values().copied())
            .filter(|&(_, tag, value)| is_callee(tag, value))
            .map(|(parent, _, _)| self.lookup(parent).map(caller));
        let Some(first) = callers.next() else { return false };
        callers.any(|caller| caller != first)
    }

    fn lookup(&self, id: u32) -> Option<Packed> {
        let i = id as usize;
        if i < self.tag.len() {
            let tag = self.tag[i];
            return (tag != TAG_NONE).then(|| (self.parent[i], tag, self.value[i]));
        }
        self.sparse.get(&id).copied()
    }

    /// Adds one node, read while the module records of `generation` were
    /// the latest; a node given again must have the same contents (a forked
    /// child's file repeats its parent's nodes), otherwise the first one is
    /// kept and the conflict counted.
    pub fn insert(&mut self, node: &StackNode, generation: Generation) {
        if node.id == 0 {
            return;
        }
        let (tag, value) = self.pack(&node.frame);
        if let Some(old) = self.lookup(node.id) {
            if old != (node.parent, tag, value) {
                self.conflicts += 1;
                self.first_conflict.get_or_insert(node.id);
            }
            return;
        }
        self.count += 1;
        let i = node.id as usize;
        // Dense while ids stay near the number of nodes (tracers number them
        // from 1); a stray huge id must not make the vectors huge.
        if i < self.tag.len() || i < 2 * self.count + (1 << 20) {
            if i >= self.tag.len() {
                if i >= self.tag.capacity() {
                    // A quarter more at a time, not double: a full capture of
                    // torch has millions of nodes, and realloc grows these
                    // large blocks by remapping rather than by copying.
                    let more = (i + 1 - self.tag.len()).max(self.tag.len() / 4).max(1024);
                    self.parent.reserve_exact(more);
                    self.tag.reserve_exact(more);
                    self.value.reserve_exact(more);
                }
                self.parent.resize(i + 1, 0);
                self.tag.resize(i + 1, TAG_NONE);
                self.value.resize(i + 1, 0);
            }
            self.parent[i] = node.parent;
            self.tag[i] = tag;
            self.value[i] = value;
        } else {
            self.sparse.insert(node.id, (node.parent, tag, value));
        }
        if tag == TAG_NATIVE {
            self.set_generation(node.id, generation);
        }
    }

    fn set_generation(&mut self, id: u32, generation: Generation) {
        if generation == 0 {
            return;
        }
        let i = id as usize;
        if i < self.tag.len() {
            if i >= self.generations.len() {
                self.generations.resize(i + 1, 0);
            }
            self.generations[i] = generation;
        } else {
            self.sparse_generations.insert(id, generation);
        }
    }

    fn generation(&self, id: u32) -> Generation {
        match self.generations.get(id as usize) {
            Some(&generation) => generation,
            None => self.sparse_generations.get(&id).copied().unwrap_or(0),
        }
    }

    /// The one-line warning for nodes that were given conflicting contents.
    pub fn conflict_warning(&self) -> Option<String> {
        let first = self.first_conflict?;
        Some(format!(
            "the trace gives {} stack node{} conflicting contents (first: node {first}); the first contents were kept, so stacks through them may show wrong frames",
            self.conflicts,
            if self.conflicts == 1 { "" } else { "s" }
        ))
    }

    /// What the stack `id` made: the tracer writes a mapping marker as a
    /// mapping stack's innermost node; a stack without one (or unknown)
    /// made heap allocations.
    pub fn memory(&self, id: u32) -> Memory {
        self.lookup(id).map_or(Memory::Heap, |(_, tag, _)| memory_of_tag(tag))
    }

    /// The stack whose innermost node is `id`; `None` when the trace has no
    /// such node.
    pub fn get(&self, id: u32) -> Option<Stack> {
        self.lookup(id)?;
        let mut stack = Stack::default();
        let mut steps = 0;
        // A stack's Python frames may be a path of their own, named by its
        // innermost node (format 3); they are followed after the native ones.
        if let Some(python_leaf) = self.follow(id, &mut stack, &mut steps) {
            self.follow(python_leaf, &mut stack, &mut steps);
        }
        Some(stack)
    }

    /// Adds the frames of the path ending at `at` to `stack`; returns the
    /// Python leaf it names, if any.
    fn follow(&self, mut at: u32, stack: &mut Stack, steps: &mut usize) -> Option<u32> {
        let limit = MAX_STACK_DEPTH.min(self.count + 1);
        let mut python_leaf = None;
        while at != 0 && stack.broken_at.is_none() {
            let Some((parent, tag, value)) = self.lookup(at) else {
                stack.broken_at = Some(at);
                break;
            };
            *steps += 1;
            if *steps > limit {
                stack.broken_at = Some(at);
                break;
            }
            match tag {
                TAG_NATIVE => stack.native.push(NativeFrame { address: value, generation: self.generation(at) }),
                TAG_PYTHON_LEAF => python_leaf = python_leaf.or(Some(value as u32)),
                TAG_MAPPING | TAG_SHARED_MAPPING => stack.memory = memory_of_tag(tag),
                _ => stack.python.push(PyFrame {
                    code: self.codes[(value >> 32) as usize],
                    instruction: value as u32,
                    entry: tag == TAG_PYTHON_ENTRY,
                }),
            }
            at = parent;
        }
        python_leaf
    }
}

/// A trace in memory.
#[derive(Debug)]
pub struct Trace {
    pub path: PathBuf,
    pub process: Process,
    /// Module records in file order, by generation.
    pub modules: ModuleRecords,
    pub stacks: Stacks,
    pub pycode: IntMap<u64, PyCode>,
    /// Every complete snapshot, in file order; index = position.
    pub snapshots: Vec<SnapshotHeader>,
    pub notices: Vec<Notice>,
    pub end: EndKind,
    /// An End record was read (the process ended normally).
    pub saw_end_record: bool,
    /// Counters at the snapshots captured, by snapshot index.
    states: BTreeMap<usize, State>,
    /// Live bytes per stack at the last three checkpoints read (see
    /// [`is_checkpoint`]), of the allocations settled by then (see
    /// [`settled_by`]).
    live_at_checkpoints: BTreeMap<usize, IntMap<u32, u64>>,
}

/// Snapshots before the analysis starts (see [`Trace::warm_up_snapshots`]);
/// also those that close the epochs cut inside the first round of DataLoader
/// passes that go round several loaders, or inside a pass of an outer loop
/// found later, and those of a phase whose loop stopped before another's
/// passes closed the epochs (analysed apart: see [`Trace::phase_starts`]),
/// which the tracer's notices tell ([`trace_format::PASS_ROUNDS_NOTICE`],
/// [`trace_format::OUTER_LOOP_NOTICE`],
/// [`trace_format::MARKING_LOOP_STOPPED_NOTICE`]).
fn warm_up_snapshots(snapshots: &[Snapshot], notices: &[Notice]) -> usize {
    // Time slices ended by the first auto-detected epoch; time slices and
    // auto-detected epochs (a DataLoader's passes, or an evaluation's
    // every N steps) ended by the first mark: from there the program cuts
    // its epochs itself, and the epochs before were of other lengths.
    let ended_by = |cut_before: &[EpochCause], cause: EpochCause| {
        let first = snapshots.iter().position(|s| !cut_before.contains(&s.cause));
        first.filter(|&first| first > 0 && snapshots[first].cause == cause).unwrap_or(0)
    };
    let before_first_mark = ended_by(&[EpochCause::Timer], EpochCause::Auto)
        .max(ended_by(&[EpochCause::Timer, EpochCause::Auto], EpochCause::Mark));
    // Epochs that each held part of a period the epochs were cut by later.
    // The first round's and outer loop's; the last phase's.
    let first_whole = [
        notice_epochs(notices, trace_format::PASS_ROUNDS_NOTICE).next(),
        notice_epochs(notices, trace_format::OUTER_LOOP_NOTICE).next(),
        notice_epochs(notices, trace_format::MARKING_LOOP_STOPPED_NOTICE).last(),
    ];
    let before_whole_periods = first_whole
        .into_iter()
        .flatten()
        .filter_map(|epoch| snapshots.iter().position(|s| s.epoch + 1 == epoch))
        .max()
        .unwrap_or(0);
    before_first_mark.max(before_whole_periods)
}

/// Why the tracer stopped recording before the process ended, when a
/// notice says so.
fn recording_stopped(notices: &[Notice]) -> Option<&str> {
    notices.iter().rev().find_map(|notice| notice.text.strip_suffix(trace_format::RECORDING_STOPPED_HERE))
}

/// The epochs the notices starting with `prefix` name (after the prefix,
/// before a colon), in order.
fn notice_epochs<'a>(notices: &'a [Notice], prefix: &'a str) -> impl Iterator<Item = u32> + 'a {
    notices.iter().filter_map(move |notice| notice.text.strip_prefix(prefix)?.split(':').next()?.parse().ok())
}

impl Trace {
    /// How the trace ended, as the report names it: "complete" only when the
    /// process ended normally; "unfinished" when every record is whole but
    /// the end record is missing (killed between epochs, or still running).
    pub fn end_name(&self) -> &'static str {
        match (&self.end, self.saw_end_record) {
            (EndKind::Complete, false) => "unfinished",
            (end, _) => end.name(),
        }
    }

    /// Why the tracer stopped recording before the process ended, when it
    /// said so in the trace.
    pub fn recording_stopped(&self) -> Option<&str> {
        recording_stopped(&self.notices)
    }

    /// Snapshots before the analysis starts: when the run was cut into time
    /// slices until its first tracer_mark, the slices before that mark
    /// (start-up, imports, data loading) are not epochs of the job.
    pub fn warm_up_snapshots(&self) -> usize {
        warm_up_snapshots(&self.snapshots, &self.notices)
    }

    /// Whether the tracer found an outer DataLoader loop after another
    /// loop's passes had closed epochs inside its first pass.
    pub fn outer_loop_found(&self) -> bool {
        self.notices.iter().any(|notice| notice.text.starts_with(trace_format::OUTER_LOOP_NOTICE))
    }

    /// Whether the tracer saw passes over DataLoaders, none repeated from
    /// one place (see [`trace_format::UNREPEATED_PASSES_NOTICE`]).
    pub fn passes_never_repeated(&self) -> bool {
        self.notices.iter().any(|notice| notice.text.starts_with(trace_format::UNREPEATED_PASSES_NOTICE))
    }

    /// The first whole epoch of each of the job's phases after its first, in
    /// order: another DataLoader loop's passes closed the epochs from the
    /// one before it on, after the loop that closed them before stopped.
    /// Each phase is analysed apart.
    pub fn phase_starts(&self) -> Vec<u32> {
        notice_epochs(&self.notices, trace_format::MARKING_LOOP_STOPPED_NOTICE).collect()
    }

    /// Where the snapshot closing `epoch` is, if the trace has it.
    pub fn snapshot_of(&self, epoch: u32) -> Option<usize> {
        self.snapshots.iter().position(|s| s.epoch == epoch)
    }

    /// The last epoch of a sampled warm-up, when the tracer noted its end:
    /// the survivors born in it and before are estimates.
    pub fn sampled_warm_up_end(&self) -> Option<u32> {
        notice_epochs(&self.notices, trace_format::WARM_UP_ENDED_NOTICE).next()
    }

    /// How the analysed epochs' allocations were sampled, when they were.
    /// A warm-up that ended (a spawned child that closed an epoch of its
    /// own) left the epochs after it recorded in full.
    pub fn sampling(&self) -> Option<Sampling> {
        let sampling = self.process.setting(trace_format::SAMPLING_SETTING)?;
        if sampling.contains(trace_format::SAMPLED_UNTIL_WARM_UP_ENDS) || self.sampled_warm_up_end().is_some() {
            return None;
        }
        let (bytes, _) = sampling.strip_prefix(trace_format::SAMPLED_BY_BYTES)?.split_once(' ')?;
        let whole_run = sampling.contains(trace_format::SAMPLED_WHOLE_RUN);
        Some(Sampling { mean_bytes: bytes.parse().ok()?, whole_run })
    }

    /// Live bytes per stack at the latest checkpoint in `range` (see
    /// [`is_checkpoint`]; the last three read are kept) of the allocations
    /// settled by then (see [`settled_by`]), with its index.
    pub fn live_at_checkpoint_in(&self, range: std::ops::RangeInclusive<usize>) -> Option<(usize, &IntMap<u32, u64>)> {
        self.live_at_checkpoints.range(range).next_back().map(|(&index, live)| (index, live))
    }

    /// The counters at snapshot `index`, when it was captured.
    pub fn state(&self, index: usize) -> Option<&State> {
        self.states.get(&index)
    }
}

/// How a process's analysed epochs were sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    /// The mean bytes between samples.
    pub mean_bytes: u64,
    /// By `TRACER_SAMPLE_BYTES`; else a worker sampled for its life at the
    /// warm-up's rate (`TRACER_WARMUP_SAMPLE_BYTES`).
    pub whole_run: bool,
}

/// What to keep while reading: the states at snapshot 1, after the warm-up,
/// at the last two snapshots, and at the explicitly requested indices.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub capture: BTreeSet<usize>,
    /// Read no further than the snapshot at this index (an earlier phase
    /// of the job, see [`Trace::phase_starts`]).
    pub until: Option<usize>,
}

/// What brings the counters back to the state before the last snapshot.
enum Undo {
    /// Each pair the snapshot changed, with its counters before (`None`:
    /// absent), in the order of the changes.
    Changes(Vec<(PairKey, Option<Counts>)>),
    Whole(IntMap<PairKey, Counts>),
}

impl Undo {
    /// The undo of this snapshot and then `later`, back to the state before
    /// both; `later`'s `Whole` is the state this snapshot left.
    fn and_then(self, later: Undo) -> Undo {
        match (self, later) {
            (Undo::Whole(before), _) => Undo::Whole(before),
            (Undo::Changes(mut changes), Undo::Changes(more)) => {
                // A pair's first change holds its counters before both.
                changes.extend(more);
                Undo::Changes(changes)
            }
            (Undo::Changes(changes), Undo::Whole(mut state)) => {
                for (key, old) in changes.into_iter().rev() {
                    match old {
                        Some(counts) => state.insert(key, counts),
                        None => state.remove(&key),
                    };
                }
                Undo::Whole(state)
            }
        }
    }
}

/// Reads the trace at `path`.
pub fn load(path: &Path, options: &LoadOptions) -> Result<Trace, Failure> {
    load_showing(path, options, &mut Progress::hidden())
}

/// Format versions past this analyzer's that a newer tracer could write;
/// a header reading more is damaged.
const VERSIONS_AHEAD_AT_MOST: u16 = 64;

/// [`load`], showing how much of the file it has read on `progress`.
pub fn load_showing(path: &Path, options: &LoadOptions, progress: &mut Progress) -> Result<Trace, Failure> {
    let shown = path.display();
    // Opening a FIFO to read waits for a writer that may never come.
    if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_socket()) {
        return Err(Failure::new(
            format!("{shown} is a FIFO or a socket, not a trace file"),
            "pass the trace file the tracer wrote (it writes <name>.<pid> beside such a name)",
        ));
    }
    let mut reader = RecordReader::open(path).map_err(|err| match err {
        ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            Failure::new(format!("cannot open {shown}: no such file"), "check the path of the trace file")
        }
        ReadError::Io(io) => Failure::new(format!("cannot read {shown}: {io}"), "check the path and its permissions"),
        ReadError::NotATrace => Failure::new(
            format!("{shown} is not a trace written by libtracer.so (wrong magic bytes)"),
            "pass the trace file the tracer wrote (trace.bin by default; where TRACER_OUTPUT named a file that was no trace, it wrote <that name>.<pid> and said so on stderr)",
        ),
        // Versions go up by one a change: one far past this analyzer's is a
        // damaged header, not a newer tracer's.
        ReadError::NewerVersion { found } if found > trace_format::FORMAT_VERSION + VERSIONS_AHEAD_AT_MOST => {
            Failure::new(
                format!(
                    "{shown} has a damaged file header (its format version reads {found}, where this analyzer's is {})",
                    trace_format::FORMAT_VERSION
                ),
                "copy the trace again from where the run wrote it, or run the program again under the tracer",
            )
        }
        ReadError::NewerVersion { found } => Failure::new(
            format!(
                "{shown} has trace format version {found}, newer than the version {} this analyzer reads",
                trace_format::FORMAT_VERSION
            ),
            "use the analyzer built together with that tracer",
        ),
        ReadError::OlderVersion { found } => Failure::new(
            format!(
                "{shown} has trace format version {found}, older than version {}, the oldest this analyzer reads",
                trace_format::OLDEST_READABLE_VERSION
            ),
            "trace the program again with the tracer built together with this analyzer",
        ),
        ReadError::TooShort => Failure::new(
            format!("{shown} is empty or too short to be a trace (no complete file header)"),
            "the traced process probably died at start-up; run it again under the tracer",
        ),
    })?;
    if std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
        return Err(Failure::new(format!("{shown} is a directory"), "pass the trace file, not its folder"));
    }

    let mut process: Option<Process> = None;
    let mut modules = ModuleRecords::default();
    let mut stacks = Stacks::default();
    let mut pycode: IntMap<u64, PyCode> = IntMap::default();
    let mut snapshots: Vec<SnapshotHeader> = Vec::new();
    let mut notices = Vec::new();
    let mut saw_end_record = false;
    let mut states: BTreeMap<usize, State> = BTreeMap::new();
    let mut live_at_checkpoints: BTreeMap<usize, IntMap<u32, u64>> = BTreeMap::new();

    let mut current: IntMap<PairKey, Counts> = IntMap::default();
    // Pairs of the last epoch that ended with nothing alive: dropped at the next snapshot.
    let mut pending_dead: Vec<PairKey> = Vec::new();
    let mut undo = Undo::Changes(Vec::new());

    progress.phase(&format!("reading {shown}"), std::fs::metadata(path).map_or(0, |m| m.len()));
    while let Some(record) = reader.next() {
        progress.advance(reader.offset());
        match record {
            Record::Process(p) => {
                if process.is_none() {
                    process = Some(p);
                }
            }
            Record::Module(m) => modules.push(m),
            Record::StackNodes(nodes) => {
                let generation = modules.current_generation();
                for node in &nodes.nodes {
                    stacks.insert(node, generation);
                }
            }
            Record::PyCode(c) => {
                pycode.insert(c.id, c);
            }
            Record::Notice(n) => notices.push(n),
            Record::End(_) => saw_end_record = true,
            Record::Snapshot(snap) => {
                // A snapshot after an exec's: the exec failed and the process
                // went on in the same epoch, which this snapshot closes in its
                // place (its counters follow on from the exec's).
                let after_failed_exec = snapshots.last().is_some_and(|last| last.cause == EpochCause::Exec);
                let (undo_before_exec, dead_at_exec) = if after_failed_exec {
                    snapshots.pop();
                    saw_end_record = false;
                    (Some(std::mem::replace(&mut undo, Undo::Changes(Vec::new()))), std::mem::take(&mut pending_dead))
                } else {
                    (None, Vec::new())
                };
                let index = snapshots.len();
                // A full snapshot replaces everything; one that starts from
                // nothing (a file's first, a million pairs in a full capture
                // of torch) needs no log of its changes to be undone either.
                let starts_over = snap.full || current.is_empty();
                if starts_over {
                    undo = Undo::Whole(std::mem::take(&mut current));
                    pending_dead.clear();
                    current.reserve(snap.counters.len());
                }
                if snap.full {
                    for c in &snap.counters {
                        current.insert((c.stack, c.birth_epoch), Counts::from(c));
                    }
                } else {
                    let mut changes =
                        Vec::with_capacity(if starts_over { 0 } else { snap.counters.len() + pending_dead.len() });
                    for key in pending_dead.drain(..) {
                        if let Some(old) = current.remove(&key) {
                            changes.push((key, Some(old)));
                        }
                    }
                    for c in &snap.counters {
                        let key = (c.stack, c.birth_epoch);
                        let new = Counts::from(c);
                        let old = if new.live_count == 0 && c.birth_epoch < snap.epoch {
                            current.remove(&key)
                        } else {
                            current.insert(key, new)
                        };
                        if !starts_over {
                            changes.push((key, old));
                        }
                    }
                    if !starts_over {
                        undo = Undo::Changes(changes);
                    }
                }
                // Pairs of this epoch that ended with nothing alive never change
                // again; they are kept for this snapshot (their allocated
                // counters) and dropped at the next one.
                pending_dead.extend(
                    snap.counters
                        .iter()
                        .filter(|c| c.live_count == 0 && c.birth_epoch >= snap.epoch)
                        .map(|c| (c.stack, c.birth_epoch)),
                );
                // Those the exec's snapshot left so are of this epoch too,
                // unless this snapshot changed them.
                pending_dead
                    .extend(dead_at_exec.into_iter().filter(|key| current.get(key).is_some_and(|c| c.live_count == 0)));
                if let Some(before_exec) = undo_before_exec {
                    undo = before_exec.and_then(undo);
                }
                snapshots.push(Snapshot { counters: Vec::new(), ..snap });
                // The analysis compares the state after its first epoch with the last.
                let after_warm_up = index >= 2 && warm_up_snapshots(&snapshots, &notices) == index - 1;
                if index == 1 || after_warm_up || options.capture.contains(&index) {
                    states.insert(index, State::of(&current));
                }
                if is_checkpoint(index) {
                    // The last three checkpoints: one of them lies in the
                    // earlier half of the epochs, near its end, whatever
                    // their number.
                    let epoch = snapshots[index].epoch;
                    let settled = current.iter().filter(|(&(_, birth), _)| settled_by(birth, epoch));
                    live_at_checkpoints.insert(index, live_bytes_by_stack(settled));
                    if live_at_checkpoints.len() > 3 {
                        live_at_checkpoints.pop_first();
                    }
                }
                if options.until == Some(index) {
                    break;
                }
            }
        }
    }

    let end = match reader.end() {
        TraceEnd::Truncated { offset } => EndKind::Truncated { offset: *offset },
        TraceEnd::Damaged { offset, reason } => EndKind::Damaged { offset: *offset, reason: reason.clone() },
        TraceEnd::EndOfFile | TraceEnd::Open => EndKind::Complete,
    };

    let Some(process) = process else {
        return Err(match &end {
            EndKind::Complete => Failure::new(
                format!("{shown} holds no records"),
                "the traced process ended before the tracer wrote anything; run it again under the tracer",
            ),
            _ => Failure::new(
                format!("{shown} is cut or damaged before its first record"),
                "the traced process was probably killed at start-up; run it again under the tracer",
            ),
        });
    };
    if snapshots.is_empty() {
        const INCOMPLETE: &str = "the file is incomplete (copied or read before the tracer finished writing it, cut short, the process killed early, or the tracer stopped at a file-size limit or a full disk, which it said on stderr): copy it again once the run has ended, or lift the limit or free the space, and run it again";
        let stopped_here = recording_stopped(&notices);
        let (why, what_to_do) = match (&end, stopped_here) {
            (EndKind::Complete, Some(stopped)) if !saw_end_record => (
                format!("the tracer stopped recording before the first epoch closed: {stopped}"),
                if stopped == trace_format::TRACER_OUT_OF_MEMORY {
                    "the program had used the memory it may have by then (an address-space limit such as ulimit -v, or all the machine would give): raise the limit to leave the tracer room for its tables, or call tracer_mark(label) earlier, so that an epoch closes before the memory runs out".to_string()
                } else {
                    "call tracer_mark(label) before that point, so that the trace holds an epoch of what the program did until then".to_string()
                },
            ),
            (EndKind::Complete, _) if saw_end_record => {
                let what_to_do = match process.time_slice_seconds() {
                    Some(seconds) => format!(
                        "it ran less than one time slice of {seconds} s: call tracer_mark(label) at each epoch, or set TRACER_EPOCH_SECONDS shorter, and let the run go longer"
                    ),
                    None => "call tracer_mark(label) at each epoch or set TRACER_EPOCH_SECONDS, and let the run go longer".to_string(),
                };
                ("the process ended before the first epoch closed".to_string(), what_to_do)
            }
            // The trace stops without its end: the process was killed or
            // still runs, or the tracer stopped writing (a file-size limit,
            // a full disk), which it said on stderr. It may have marked.
            (EndKind::Complete, _) => {
                let slice = process.time_slice_seconds().map(|seconds| format!(", or a time slice of {seconds} s")).unwrap_or_default();
                (
                    "no epoch had closed where the trace stops: the process was killed or is still running, or the tracer stopped writing the trace, which it then said on stderr".to_string(),
                    format!(
                        "where the tracer stopped, its line on stderr says why (a file-size limit, ulimit -f, or a full disk): lift the limit or free the space and run it again; where the process still runs, report the trace once an epoch has closed (a tracer_mark call{slice})"
                    ),
                )
            }
            (EndKind::Truncated { offset }, _) => {
                (format!("the trace was cut at byte {offset} before the first epoch closed"), INCOMPLETE.to_string())
            }
            (EndKind::Damaged { offset, .. }, _) => (
                format!("the trace is damaged at byte {offset}, before the first epoch closed"),
                "the file was changed or damaged after the tracer wrote it: copy it again from where the run wrote it, or run it again".to_string(),
            ),
        };
        return Err(Failure::new(format!("{shown} has no complete snapshot ({why})"), what_to_do));
    }

    // The last state, and the one before it rebuilt from the undo log.
    let last = snapshots.len() - 1;
    if last >= 1 && !states.contains_key(&(last - 1)) {
        let before = match undo {
            Undo::Whole(previous) => State::of(&previous),
            Undo::Changes(mut changes) => {
                // What each changed pair was before its first change (None:
                // absent), sorted in place: a table of them took as much
                // memory again as the log.
                changes.sort_by_key(|&(key, _)| key);
                changes.dedup_by_key(|&mut (key, _)| key);
                let changed = |key: &PairKey| changes.binary_search_by_key(key, |&(k, _)| k).is_ok();
                let mut pairs = Vec::with_capacity(current.len() + changes.len());
                pairs.extend(current.iter().filter(|(key, _)| !changed(key)).map(|(&k, &c)| (k, c)));
                pairs.extend(changes.iter().filter_map(|&(key, old)| Some((key, old?))));
                State { pairs }
            }
        };
        states.insert(last - 1, before);
    }
    states.insert(last, State::of(&current));

    Ok(Trace {
        path: path.to_path_buf(),
        process,
        modules,
        stacks,
        pycode,
        snapshots,
        notices,
        end,
        saw_end_record,
        states,
        live_at_checkpoints,
    })
}

/// Whether `process`'s small Python objects came from pymalloc untraced,
/// only the arenas that hold them traced.
pub fn pymalloc_untraced(process: &Process) -> bool {
    process
        .setting(PYTHON_ALLOCATOR_SETTING)
        .is_some_and(|value| value.starts_with(PYMALLOC) && !value.starts_with(PYMALLOC_OBJECTS_TRACED))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(id: u32, parent: u32, address: u64) -> StackNode {
        StackNode { id, parent, frame: Frame::Native(address) }
    }

    fn addresses(stack: &Stack) -> Vec<u64> {
        stack.native.iter().map(|frame| frame.address).collect()
    }

    fn python(id: u32, parent: u32, code: u64, instruction: u32, entry: bool) -> StackNode {
        StackNode { id, parent, frame: Frame::Python(PyFrame { code, instruction, entry }) }
    }

    /// Two stacks sharing their outer part: <module> (entry) <- f <- two native frames,
    /// and <module> <- g <- one native frame.
    fn tree() -> Stacks {
        let mut stacks = Stacks::default();
        for node in [
            python(1, 0, 0x7f00_0000_1000, 40, true),
            python(2, 1, 0x7f00_0000_2000, 7, false),
            native(3, 2, 0x4000),
            native(4, 3, 0x5000),
            python(5, 1, 0x7f00_0000_3000, u32::MAX, false),
            native(6, 5, u64::MAX),
        ] {
            stacks.insert(&node, 0);
        }
        stacks
    }

    #[test]
    fn stacks_are_rebuilt_from_their_innermost_node() {
        let stacks = tree();
        assert_eq!(stacks.len(), 6);
        let s = stacks.get(4).unwrap();
        assert_eq!(addresses(&s), vec![0x5000, 0x4000]);
        assert_eq!(
            s.python,
            vec![
                PyFrame { code: 0x7f00_0000_2000, instruction: 7, entry: false },
                PyFrame { code: 0x7f00_0000_1000, instruction: 40, entry: true },
            ]
        );
        assert_eq!(s.broken_at, None);
        let s = stacks.get(6).unwrap();
        assert_eq!(addresses(&s), vec![u64::MAX]);
        assert_eq!(s.python[0], PyFrame { code: 0x7f00_0000_3000, instruction: u32::MAX, entry: false });
        assert_eq!(addresses(&stacks.get(2).unwrap()), Vec::<u64>::new());
        assert!(stacks.get(7).is_none());
        assert!(stacks.get(0).is_none());
        assert!(stacks.conflict_warning().is_none());
    }

    #[test]
    fn a_python_leaf_joins_a_path_of_python_frames_to_the_native_one() {
        let mut stacks = tree();
        // Native path 10 <- 11, Python path 1 <- 2 (from `tree`), joined by 12.
        for node in [native(10, 0, 0x100), native(11, 10, 0x200)] {
            stacks.insert(&node, 0);
        }
        stacks.insert(&StackNode { id: 12, parent: 11, frame: Frame::PythonLeaf(2) }, 0);
        let s = stacks.get(12).unwrap();
        assert_eq!(addresses(&s), vec![0x200, 0x100]);
        assert_eq!(s.python.iter().map(|f| f.instruction).collect::<Vec<_>>(), vec![7, 40]);
        assert_eq!(s.broken_at, None);
        // A leaf naming a node the trace lacks breaks the stack there.
        stacks.insert(&StackNode { id: 13, parent: 11, frame: Frame::PythonLeaf(99) }, 0);
        let s = stacks.get(13).unwrap();
        assert_eq!((s.native.len(), s.broken_at), (2, Some(99)));
    }

    #[test]
    fn a_mapping_marker_makes_a_mapping_stack() {
        let mut stacks = tree();
        stacks.insert(&StackNode { id: 7, parent: 4, frame: Frame::Mapping }, 0);
        assert_eq!(stacks.memory(7), Memory::Mapped);
        assert_eq!((stacks.memory(4), stacks.memory(99)), (Memory::Heap, Memory::Heap));
        let s = stacks.get(7).unwrap();
        assert_eq!(s.memory, Memory::Mapped);
        assert_eq!(addresses(&s), vec![0x5000, 0x4000], "the marker is not a frame");
        assert_eq!(stacks.get(4).unwrap().memory, Memory::Heap);
        stacks.insert(&StackNode { id: 8, parent: 4, frame: Frame::SharedMapping }, 0);
        assert_eq!((stacks.memory(8), stacks.get(8).unwrap().memory), (Memory::Shared, Memory::Shared));
    }

    #[test]
    fn identical_duplicates_are_accepted_and_conflicts_keep_the_first() {
        let mut stacks = tree();
        stacks.insert(&native(3, 2, 0x4000), 0);
        stacks.insert(&python(1, 0, 0x7f00_0000_1000, 40, true), 0);
        assert_eq!(stacks.len(), 6);
        assert!(stacks.conflict_warning().is_none());
        stacks.insert(&native(4, 3, 0x9999), 0);
        stacks.insert(&native(3, 1, 0x4000), 0);
        stacks.insert(&python(1, 0, 0x7f00_0000_1000, 40, false), 0);
        assert_eq!(stacks.len(), 6);
        assert_eq!(addresses(&stacks.get(4).unwrap()), vec![0x5000, 0x4000]);
        let warning = stacks.conflict_warning().unwrap();
        assert!(warning.contains("3 stack nodes") && warning.contains("node 4"), "{warning}");
        assert!(!warning.contains('\n'));
    }

    #[test]
    fn far_away_ids_and_missing_parents() {
        let mut stacks = Stacks::default();
        stacks.insert(&native(u32::MAX, 0, 1), 0);
        stacks.insert(&native(u32::MAX - 1, u32::MAX, 2), 0);
        stacks.insert(&native(3, u32::MAX - 1, 3), 0);
        stacks.insert(&native(4, 77, 4), 0);
        assert!(stacks.parent.len() < 1 << 22, "huge ids are not indexed densely");
        assert_eq!(addresses(&stacks.get(3).unwrap()), vec![3, 2, 1]);
        let s = stacks.get(4).unwrap();
        assert_eq!((addresses(&s), s.broken_at), (vec![4], Some(77)));
    }

    #[test]
    fn each_native_node_keeps_the_module_generation_it_was_read_in() {
        let mut stacks = Stacks::default();
        stacks.insert(&native(1, 0, 0x100), 0);
        stacks.insert(&native(2, 1, 0x200), 3);
        stacks.insert(&native(u32::MAX, 2, 0x300), 5);
        // Given again in a later generation: the first reading stands.
        stacks.insert(&native(1, 0, 0x100), 4);
        let generations = |id| stacks.get(id).unwrap().native.iter().map(|f| f.generation).collect::<Vec<_>>();
        assert_eq!(generations(u32::MAX), vec![5, 3, 0]);
        assert_eq!(generations(2), vec![3, 0]);
        assert!(stacks.generations.len() <= 3, "only ids up to the last node of a later generation");
    }

    #[test]
    fn a_looping_chain_stops() {
        let mut stacks = Stacks::default();
        // Damage: node 1's parent is node 2, whose parent is node 1.
        stacks.insert(&native(1, 2, 1), 0);
        stacks.insert(&native(2, 1, 2), 0);
        let s = stacks.get(1).unwrap();
        assert!(s.native.len() <= 3 && s.broken_at.is_some(), "{s:?}");
    }

    #[test]
    fn a_million_nodes_take_little_memory() {
        let mut stacks = Stacks::default();
        for id in 1..=1_000_000u32 {
            stacks.insert(&native(id, id - 1, u64::from(id) * 16), 0);
        }
        let bytes = stacks.parent.capacity() * 4 + stacks.tag.capacity() + stacks.value.capacity() * 8;
        assert!(bytes < 30 << 20, "{bytes} bytes for a million nodes");
        assert_eq!(stacks.get(1000).unwrap().native.len(), 1000);
    }
}

/// The trace of a process that descends from the traced one (a forked
/// worker, an exec'd program), found beside the trace as `<trace>.<pid>…`;
/// or of a process started beside it that found its file in use.
#[derive(Debug, Clone)]
pub struct Descendant {
    pub path: PathBuf,
    pub pid: u32,
    pub forked_from: Option<u32>,
    /// No descendant: a traced process started beside this one, not from
    /// it, that found the named file in use (see
    /// [`trace_format::NAMED_OUTPUT_IN_USE_SETTING`]), or a descendant of
    /// such a process (a trace of its run, not this one's).
    pub started_beside: bool,
    pub cmdline: Vec<String>,
    /// Its place in a distributed job (see [`trace_format::Process::rank`]).
    pub rank: Option<trace_format::Rank>,
}

/// The traces found beside a trace, by file name.
#[derive(Debug, Default)]
pub struct Beside {
    /// Its descendants' (and, for the first process of a run, those of
    /// processes started beside it, with their descendants), in pid order.
    pub traces: Vec<Descendant>,
    /// Traces named like descendants' that belong to other runs: an earlier
    /// run with the same output path left them.
    pub other_runs: usize,
}

/// A process started beside the traced one may have started this long
/// before it by the two clocks' reading and still be of its run.
const BESIDE_CLOCK_SLACK_NS: u64 = 1_000_000_000;

/// The traces beside `path` (see [`Beside`]); unreadable ones are left out.
///
/// Descendants write `<output>.<pid>` (then `.1`, ... after an exec), where
/// `<output>` is the first traced process's file: every trace of its run
/// is named so, and names its run, its own image and its parent's. The
/// first process's descendants are its whole run; another's are the
/// images whose parents lead back to it (under a launcher, the program's
/// DataLoader workers are its own, not the launcher's helpers). A trace
/// without a run (from an older tracer) takes every trace named after it.
pub fn descendant_traces(path: &Path) -> Beside {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Beside::default();
    };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let Ok(entries) = std::fs::read_dir(dir) else { return Beside::default() };
    let root = process_of(path);
    let run = root.as_ref().and_then(|root| Some((root, root.run()?)));
    // The first traced process's file name, which descendants suffix.
    let output = match run {
        Some(_) => without_number_suffixes(name),
        None => name,
    };
    let mut found: Vec<(Vec<u64>, Descendant, Process)> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|candidate| candidate.file_name().and_then(|n| n.to_str()) != Some(name))
        .filter_map(|candidate| {
            let numbers = trace_format::descendant_trace_numbers(candidate.file_name()?.to_str()?, output)?;
            let process = process_of(&candidate)?;
            let descendant = Descendant {
                path: candidate,
                pid: process.pid,
                forked_from: process.forked_from,
                started_beside: process.started_beside_another(),
                cmdline: process.cmdline.clone(),
                rank: process.rank(),
            };
            Some((numbers, descendant, process))
        })
        .collect();
    let mut other_runs = 0;
    if let Some((root, run)) = run {
        let runs = runs_beside(&found, root, run);
        let of_these_runs = |process: &Process| process.run().is_some_and(|run| runs.iter().any(|r| r == run));
        other_runs = found.iter().filter(|(_, _, process)| !of_these_runs(process)).count();
        found.retain(|(_, _, process)| of_these_runs(process));
        // The other runs are of processes started beside this one: their
        // descendants are not this one's.
        for (_, descendant, process) in &mut found {
            descendant.started_beside |= process.run() != Some(run);
        }
        if root.parent_image().is_some() {
            keep_descendants_of(&mut found, root);
        }
    }
    // By pid, as numbers (`t.bin.99` before `t.bin.100`): the order the
    // processes started in, unless the pids wrapped.
    found.sort_by(|(a, x, _), (b, y, _)| (a, &x.path).cmp(&(b, &y.path)));
    Beside { traces: found.into_iter().map(|(_, descendant, _)| descendant).collect(), other_runs }
}

/// The first record of the trace at `path`, when it is a process's.
fn process_of(path: &Path) -> Option<Process> {
    match RecordReader::open(path).ok()?.next() {
        Some(Record::Process(process)) => Some(process),
        _ => None,
    }
}

/// `name` without the `.<number>` parts a descendant's trace adds to it.
fn without_number_suffixes(name: &str) -> &str {
    let mut name = name;
    while let Some((head, tail)) = name.rsplit_once('.') {
        if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        name = head;
    }
    name
}

/// The runs whose traces go in `root`'s report: its own and, when it is
/// the first process of its run, the runs of processes started beside it
/// since it started (two programs with the tracer preloaded writing the
/// same output, as the two ends of a pipeline do).
fn runs_beside(found: &[(Vec<u64>, Descendant, Process)], root: &Process, run: &str) -> Vec<String> {
    let mut runs = vec![run.to_string()];
    if root.parent_image().is_none() {
        let started_since =
            |p: &Process| p.started_beside_another() && p.start_unix_ns + BESIDE_CLOCK_SLACK_NS >= root.start_unix_ns;
        runs.extend(
            found.iter().filter(|(_, _, p)| started_since(p)).filter_map(|(_, _, p)| p.run().map(str::to_owned)),
        );
    }
    runs
}

/// Keeps the traces whose chain of parent images leads to `root`'s image.
fn keep_descendants_of(found: &mut Vec<(Vec<u64>, Descendant, Process)>, root: &Process) {
    let mut images: std::collections::HashSet<&str> = root.image().into_iter().collect();
    let mut kept = vec![false; found.len()];
    // A pass for each generation: few, even for a long job's thousands of workers.
    loop {
        let before = images.len();
        for (index, (_, _, process)) in found.iter().enumerate() {
            if !kept[index] && process.parent_image().is_some_and(|parent| images.contains(parent)) {
                kept[index] = true;
                images.extend(process.image());
            }
        }
        if images.len() == before {
            break;
        }
    }
    let mut kept = kept.into_iter();
    found.retain(|_| kept.next().unwrap_or(false));
}
