//! Loading a trace file into an in-memory model: the process, its modules,
//! the interned stacks, the snapshot headers and the per-pair counters at the
//! snapshots the analysis needs.
//!
//! The counters are kept sparse: one map entry per (stack, birth epoch) pair
//! that still has live allocations (or was born in the current epoch). Pairs
//! whose allocations are all freed and whose epoch is over never change again
//! and are dropped as the file is read, so memory follows the live state, not
//! stacks times epochs. Full copies of the state are kept only for the
//! snapshots asked for; the state before the last snapshot is rebuilt from an
//! undo log of the last snapshot's changes.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use trace_format::{
    EpochCause, Module, Notice, Process, PyCode, ReadError, Record, RecordReader, SiteCounters, Stack, TraceEnd,
};

use crate::error::Failure;

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

/// The counters of every pair that matters at one snapshot.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub pairs: IntMap<PairKey, Counts>,
}

impl State {
    /// Live bytes per stack.
    pub fn live_bytes_by_stack(&self) -> IntMap<u32, u64> {
        let mut out: IntMap<u32, u64> = IntMap::default();
        for (&(stack, _), c) in &self.pairs {
            if c.live_bytes > 0 {
                *out.entry(stack).or_default() += c.live_bytes;
            }
        }
        out
    }

    /// Bytes allocated per stack during `epoch` (allocations born in it).
    pub fn allocated_bytes_by_stack(&self, epoch: u32) -> IntMap<u32, u64> {
        let mut out: IntMap<u32, u64> = IntMap::default();
        for (&(stack, birth), c) in &self.pairs {
            if birth == epoch && c.allocated_bytes > 0 {
                *out.entry(stack).or_default() += c.allocated_bytes;
            }
        }
        out
    }
}

/// A snapshot without its counters.
#[derive(Debug, Clone)]
pub struct SnapshotHeader {
    pub epoch: u32,
    pub cause: EpochCause,
    pub label: String,
    pub elapsed_ns: u64,
    pub rss_bytes: u64,
    pub heap_live_bytes: u64,
    pub heap_live_count: u64,
    pub tracer_bytes: u64,
}

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

/// The stacks of a trace, read from the file when first asked for: a
/// large job interns millions of stacks, and only the ones shown are needed.
pub struct Stacks {
    path: PathBuf,
    /// File offset of each Stack record, by stack id.
    offsets: IntMap<u32, u64>,
    file: RefCell<Option<File>>,
    cache: RefCell<IntMap<u32, Rc<Stack>>>,
}

impl std::fmt::Debug for Stacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stacks").field("path", &self.path).field("count", &self.offsets.len()).finish()
    }
}

impl Stacks {
    /// Number of distinct stacks in the trace.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// The stack with this id; `None` when the trace has no such stack or
    /// its record cannot be read again.
    pub fn get(&self, id: u32) -> Option<Rc<Stack>> {
        if let Some(stack) = self.cache.borrow().get(&id) {
            return Some(stack.clone());
        }
        let offset = *self.offsets.get(&id)?;
        let stack = Rc::new(self.read_at(offset).filter(|s| s.id == id)?);
        self.cache.borrow_mut().insert(id, stack.clone());
        Some(stack)
    }

    fn read_at(&self, offset: u64) -> Option<Stack> {
        let mut slot = self.file.borrow_mut();
        if slot.is_none() {
            *slot = File::open(&self.path).ok();
        }
        let file = slot.as_mut()?;
        file.seek(SeekFrom::Start(offset)).ok()?;
        let header = trace_format::file_header();
        let input = (&header[..]).chain(BufReader::with_capacity(16 << 10, &mut *file));
        let mut reader = RecordReader::new(input).ok()?;
        match reader.next()? {
            Record::Stack(stack) => Some(stack),
            _ => None,
        }
    }
}

/// A trace in memory.
#[derive(Debug)]
pub struct Trace {
    pub path: PathBuf,
    pub process: Process,
    /// Module records in file order (later ones win where ranges overlap).
    pub modules: Vec<Module>,
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
}

/// Whether snapshots `0..=index` are time slices ended by the first mark.
fn is_first_mark(causes: impl Iterator<Item = EpochCause>, cause: EpochCause) -> bool {
    let mut any = false;
    for c in causes {
        if c != EpochCause::Timer {
            return false;
        }
        any = true;
    }
    any && matches!(cause, EpochCause::Mark | EpochCause::Auto)
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

    /// Snapshots before the analysis starts: when the run was cut into time
    /// slices until its first tracer_mark, the slices before that mark
    /// (start-up, imports, data loading) are not epochs of the job.
    pub fn warm_up_snapshots(&self) -> usize {
        (1..self.snapshots.len())
            .find(|&i| is_first_mark(self.snapshots[..i].iter().map(|s| s.cause), self.snapshots[i].cause))
            .unwrap_or(0)
    }

    /// The counters at snapshot `index`, when it was captured.
    pub fn state(&self, index: usize) -> Option<&State> {
        self.states.get(&index)
    }
}

/// What to keep while reading: the states at snapshot 1, at the last two
/// snapshots, and at the explicitly requested indices.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub capture: BTreeSet<usize>,
}

enum Undo {
    Changes(Vec<(PairKey, Option<Counts>)>),
    Whole(IntMap<PairKey, Counts>),
}

/// Reads the trace at `path`.
pub fn load(path: &Path, options: &LoadOptions) -> Result<Trace, Failure> {
    let shown = path.display();
    let mut reader = RecordReader::open(path).map_err(|err| match err {
        ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            Failure::new(format!("cannot open {shown}: no such file"), "check the path of the trace file")
        }
        ReadError::Io(io) => Failure::new(format!("cannot read {shown}: {io}"), "check the path and its permissions"),
        ReadError::NotATrace => Failure::new(
            format!("{shown} is not a trace written by libtracer.so (wrong magic bytes)"),
            "pass the trace file the tracer wrote (trace.bin by default)",
        ),
        ReadError::NewerVersion { found } => Failure::new(
            format!(
                "{shown} has trace format version {found}, newer than the version {} this analyzer reads",
                trace_format::FORMAT_VERSION
            ),
            "use the analyzer built together with that tracer",
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
    let mut modules = Vec::new();
    let mut stack_offsets: IntMap<u32, u64> = IntMap::default();
    let mut pycode: IntMap<u64, PyCode> = IntMap::default();
    let mut snapshots: Vec<SnapshotHeader> = Vec::new();
    let mut notices = Vec::new();
    let mut saw_end_record = false;
    let mut states: BTreeMap<usize, State> = BTreeMap::new();

    let mut current: IntMap<PairKey, Counts> = IntMap::default();
    // Pairs of the last epoch that ended with nothing alive: dropped at the next snapshot.
    let mut pending_dead: Vec<PairKey> = Vec::new();
    let mut undo = Undo::Changes(Vec::new());

    loop {
        let offset = reader.offset();
        let Some(record) = reader.next() else { break };
        match record {
            Record::Process(p) => {
                if process.is_none() {
                    process = Some(p);
                }
            }
            Record::Module(m) => modules.push(m),
            Record::Stack(s) => {
                stack_offsets.insert(s.id, offset);
            }
            Record::PyCode(c) => {
                pycode.insert(c.id, c);
            }
            Record::Notice(n) => notices.push(n),
            Record::End(_) => saw_end_record = true,
            Record::Snapshot(snap) => {
                let index = snapshots.len();
                if snap.full {
                    undo = Undo::Whole(std::mem::take(&mut current));
                    pending_dead.clear();
                    for c in &snap.counters {
                        current.insert((c.stack, c.birth_epoch), Counts::from(c));
                    }
                } else {
                    let mut changes = Vec::with_capacity(snap.counters.len() + pending_dead.len());
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
                        changes.push((key, old));
                    }
                    undo = Undo::Changes(changes);
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
                snapshots.push(SnapshotHeader {
                    epoch: snap.epoch,
                    cause: snap.cause,
                    label: snap.label,
                    elapsed_ns: snap.elapsed_ns,
                    rss_bytes: snap.rss_bytes,
                    heap_live_bytes: snap.heap_live_bytes,
                    heap_live_count: snap.heap_live_count,
                    tracer_bytes: snap.tracer_bytes,
                });
                let after_first_mark = index >= 2
                    && is_first_mark(snapshots[..index - 1].iter().map(|s| s.cause), snapshots[index - 1].cause);
                if index == 1 || after_first_mark || options.capture.contains(&index) {
                    states.insert(index, State { pairs: current.clone() });
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
        let why = match &end {
            EndKind::Complete => "the process ended before the first epoch closed".to_string(),
            EndKind::Truncated { offset } => format!("the trace was cut at byte {offset} before the first epoch closed"),
            EndKind::Damaged { offset, .. } => {
                format!("the trace is damaged at byte {offset}, before the first epoch closed")
            }
        };
        return Err(Failure::new(
            format!("{shown} has no complete snapshot ({why})"),
            "call tracer_mark(label) at each epoch or set TRACER_EPOCH_SECONDS, and let the run go longer",
        ));
    }

    // The last state, and the one before it rebuilt from the undo log.
    let last = snapshots.len() - 1;
    if last >= 1 {
        let mut before = current.clone();
        match undo {
            Undo::Whole(prev) => before = prev,
            Undo::Changes(changes) => {
                for (key, old) in changes.into_iter().rev() {
                    match old {
                        Some(c) => before.insert(key, c),
                        None => before.remove(&key),
                    };
                }
            }
        }
        states.entry(last - 1).or_insert(State { pairs: before });
    }
    states.insert(last, State { pairs: current });

    Ok(Trace {
        path: path.to_path_buf(),
        process,
        modules,
        stacks: Stacks {
            path: path.to_path_buf(),
            offsets: stack_offsets,
            file: RefCell::new(None),
            cache: RefCell::new(IntMap::default()),
        },
        pycode,
        snapshots,
        notices,
        end,
        saw_end_record,
        states,
    })
}
