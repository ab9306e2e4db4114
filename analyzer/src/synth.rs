//! Synthetic traces for tests: a tiny allocation simulator that writes the
//! same records the tracer writes (delta-encoded snapshots included).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use trace_format::{
    file_header, frame_record, End, EndReason, EpochCause, Frame, Module, Notice, Process, PyCode, Record,
    SiteCounters, Snapshot, StackNode, StackNodes,
};

/// Ids of the synthetic stacks' outer nodes start here; a stack's innermost
/// node has the stack's own id.
const INNER_NODE_IDS: u32 = 0x8_0000;

/// Builds a trace by simulating allocations and frees epoch by epoch.
pub struct Sim {
    records: Vec<Record>,
    epoch: u32,
    pairs: BTreeMap<(u32, u32), SiteCounters>,
    changed: BTreeSet<(u32, u32)>,
    objects: HashMap<u64, (u32, u32, u64)>,
    next_object: u64,
    stacks: BTreeSet<u32>,
    /// The stacks that make anonymous mappings rather than heap allocations.
    mapping_stacks: BTreeSet<u32>,
    /// Outer nodes of the prefix tree, by (parent, frame).
    nodes: HashMap<(u32, Frame), u32>,
    next_node: u32,
    /// Resident memory outside the heap and the mappings (added to both for RSS).
    pub rss_extra: u64,
    /// Bytes of the heap and mappings not yet written, so not resident
    /// (taken from the RSS).
    pub unwritten: u64,
    /// The tracer's own memory, also part of the RSS.
    pub tracer_bytes: u64,
    /// Pages a forked process copied from its parent; when set, snapshots
    /// carry the private memory (these, the heap, the mappings and the
    /// tracer's), as a forked process's do.
    pub copied_from_parent: Option<u64>,
    /// Freed memory malloc keeps (part of `rss_extra` when it is resident).
    pub allocator_free: u64,
    /// Resident pages of mapped files (part of `rss_extra`).
    pub file_pages: u64,
    /// Nanoseconds added to the clock at each snapshot.
    pub epoch_ns: u64,
    elapsed_ns: u64,
    /// Write every snapshot with `full` set.
    pub full_snapshots: bool,
}

impl Sim {
    pub fn new(exe: &str) -> Sim {
        let process = Process {
            pid: 4242,
            forked_from: None,
            start_unix_ns: 1_700_000_000_000_000_000,
            exe: exe.into(),
            cmdline: vec![exe.into(), "--steps".into(), "10".into()],
            settings: vec![("TRACER_OUTPUT".into(), "trace.bin".into())],
        };
        Sim {
            records: vec![Record::Process(process)],
            epoch: 0,
            pairs: BTreeMap::new(),
            changed: BTreeSet::new(),
            objects: HashMap::new(),
            next_object: 1,
            stacks: BTreeSet::new(),
            mapping_stacks: BTreeSet::new(),
            nodes: HashMap::new(),
            next_node: INNER_NODE_IDS,
            rss_extra: 64 << 20,
            unwritten: 0,
            tracer_bytes: 1 << 20,
            copied_from_parent: None,
            allocator_free: 0,
            file_pages: 0,
            epoch_ns: 1_000_000_000,
            elapsed_ns: 0,
            full_snapshots: false,
        }
    }

    /// The Process record the trace starts with.
    pub fn process_mut(&mut self) -> &mut Process {
        match &mut self.records[0] {
            Record::Process(process) => process,
            _ => unreachable!("a synthetic trace starts with its process"),
        }
    }

    pub fn module(&mut self, module: Module) {
        self.records.push(Record::Module(module));
    }

    /// Declares stack `id` (non-zero) with the given return addresses (innermost first).
    pub fn stack(&mut self, id: u32, native: Vec<u64>) {
        self.stack_frames(id, native.into_iter().map(Frame::Native).collect());
    }

    /// Declares stack `id` as a mapping stack: the mapping marker, then the
    /// given return addresses (innermost first). Its objects are mappings.
    pub fn mapping_stack(&mut self, id: u32, native: Vec<u64>) {
        self.marked_mapping_stack(id, Frame::Mapping, native);
    }

    /// [`Sim::mapping_stack`] for a stack that maps shared memory.
    pub fn shared_mapping_stack(&mut self, id: u32, native: Vec<u64>) {
        self.marked_mapping_stack(id, Frame::SharedMapping, native);
    }

    fn marked_mapping_stack(&mut self, id: u32, marker: Frame, native: Vec<u64>) {
        self.mapping_stacks.insert(id);
        self.stack_frames(id, std::iter::once(marker).chain(native.into_iter().map(Frame::Native)).collect());
    }

    /// Declares stack `id` (non-zero) with the given frames, innermost first
    /// (native frames before Python ones, as the tracer records them): its
    /// outer frames are interned as a path of the prefix tree, written with
    /// its innermost node, whose id is `id`, in one StackNodes record.
    pub fn stack_frames(&mut self, id: u32, frames: Vec<Frame>) {
        assert!(id != 0 && id < INNER_NODE_IDS, "synthetic stack ids are 1 to {INNER_NODE_IDS:#x}");
        let (&leaf, outer) = frames.split_first().expect("a stack has frames");
        self.stacks.insert(id);
        let mut new = Vec::new();
        let mut parent = 0;
        for &frame in outer.iter().rev() {
            parent = match self.nodes.get(&(parent, frame)) {
                Some(&node) => node,
                None => {
                    let node = self.next_node;
                    self.next_node += 1;
                    self.nodes.insert((parent, frame), node);
                    new.push(StackNode { id: node, parent, frame });
                    node
                }
            };
        }
        new.push(StackNode { id, parent, frame: leaf });
        self.records.push(Record::StackNodes(StackNodes { nodes: new }));
    }

    /// Adds a PyCode record.
    pub fn py_code(&mut self, code: PyCode) {
        self.records.push(Record::PyCode(code));
    }

    fn ensure_stack(&mut self, id: u32) {
        if !self.stacks.contains(&id) {
            self.stack(id, vec![0x40_0000 + u64::from(id) * 0x100, 0x40_0000 + 0x10]);
        }
    }

    /// Allocates `bytes` from `stack`; returns an object handle.
    pub fn alloc(&mut self, stack: u32, bytes: u64) -> u64 {
        self.ensure_stack(stack);
        let key = (stack, self.epoch);
        let c = self.pairs.entry(key).or_insert(SiteCounters { stack, birth_epoch: self.epoch, ..Default::default() });
        c.live_count += 1;
        c.live_bytes += bytes;
        c.allocated_count += 1;
        c.allocated_bytes += bytes;
        self.changed.insert(key);
        let id = self.next_object;
        self.next_object += 1;
        self.objects.insert(id, (stack, self.epoch, bytes));
        id
    }

    /// Allocates `count` objects of `bytes` each.
    pub fn alloc_many(&mut self, stack: u32, count: usize, bytes: u64) -> Vec<u64> {
        (0..count).map(|_| self.alloc(stack, bytes)).collect()
    }

    pub fn free(&mut self, object: u64) {
        if let Some((stack, birth, bytes)) = self.objects.remove(&object) {
            let c = self.pairs.get_mut(&(stack, birth)).expect("pair of a live object");
            c.live_count -= 1;
            c.live_bytes -= bytes;
            self.changed.insert((stack, birth));
        }
    }

    pub fn free_all(&mut self, objects: impl IntoIterator<Item = u64>) {
        objects.into_iter().for_each(|o| self.free(o));
    }

    /// Live (bytes, count) of the heap's stacks.
    pub fn live_heap(&self) -> (u64, u64) {
        self.live_totals(false)
    }

    fn live_totals(&self, mapped: bool) -> (u64, u64) {
        self.pairs
            .values()
            .filter(|c| self.mapping_stacks.contains(&c.stack) == mapped)
            .fold((0, 0), |(b, n), c| (b + c.live_bytes, n + c.live_count))
    }

    /// Closes the current epoch with a snapshot.
    pub fn snapshot(&mut self, cause: EpochCause, label: &str) {
        self.write_snapshot(cause, label);
        self.epoch += 1;
    }

    /// An exec that fails, as the tracer writes it: the exec's snapshot,
    /// which leaves the epoch open, its End record and the notice that the
    /// process went on.
    pub fn failed_exec(&mut self) {
        self.write_snapshot(EpochCause::Exec, "exec");
        self.records.push(Record::End(End { reason: EndReason::Exec, elapsed_ns: self.elapsed_ns }));
        let text = "exec failed; the process went on".into();
        self.records.push(Record::Notice(Notice { elapsed_ns: self.elapsed_ns, text }));
    }

    /// A snapshot of the current epoch with the counters changed since the last.
    fn write_snapshot(&mut self, cause: EpochCause, label: &str) {
        let (heap_bytes, heap_count) = self.live_heap();
        let (mapped_bytes, mapped_count) = self.live_totals(true);
        self.elapsed_ns += self.epoch_ns;
        let counters: Vec<SiteCounters> = if self.full_snapshots {
            self.pairs.values().filter(|c| c.live_count > 0).copied().collect()
        } else {
            self.changed.iter().map(|k| self.pairs[k]).collect()
        };
        self.changed.clear();
        self.records.push(Record::Snapshot(Snapshot {
            epoch: self.epoch,
            cause,
            label: label.into(),
            elapsed_ns: self.elapsed_ns,
            rss_bytes: (heap_bytes + mapped_bytes + self.rss_extra + self.tracer_bytes).saturating_sub(self.unwritten),
            heap_live_bytes: heap_bytes,
            heap_live_count: heap_count,
            mapped_live_bytes: mapped_bytes,
            mapped_live_count: mapped_count,
            private_dirty_bytes: self
                .copied_from_parent
                .map_or(0, |copied| copied + heap_bytes + mapped_bytes + self.tracer_bytes),
            allocator_free_bytes: self.allocator_free,
            rss_file_bytes: self.file_pages,
            tracer_bytes: self.tracer_bytes,
            full: self.full_snapshots,
            counters,
        }));
    }

    pub fn mark(&mut self, label: &str) {
        self.snapshot(EpochCause::Mark, label)
    }

    /// The current epoch (the one the next snapshot closes).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Ends the run: an Exit snapshot and an End record.
    pub fn exit(&mut self) {
        self.snapshot(EpochCause::Exit, "exit");
        self.records.push(Record::End(End { reason: EndReason::Exit, elapsed_ns: self.elapsed_ns }));
    }

    pub fn push(&mut self, record: Record) {
        self.records.push(record);
    }

    /// The trace file bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = file_header().to_vec();
        for record in &self.records {
            frame_record(record, &mut out);
        }
        out
    }

    /// Byte offsets where each record starts (after the file header).
    pub fn record_offsets(&self) -> Vec<usize> {
        let mut offsets = Vec::new();
        let mut at = trace_format::FILE_HEADER_LEN;
        for record in &self.records {
            offsets.push(at);
            let mut framed = Vec::new();
            frame_record(record, &mut framed);
            at += framed.len();
        }
        offsets
    }
}

/// The five kinds of memory behaviour the analysis must tell apart, each on
/// its own stack: 1 = leak, 2 = cache filled once, 3 = buffers freed one
/// epoch later, 4 = per-step temporaries, 5 = warm-up kept forever.
pub fn all_behaviours(epochs: u32, exit_frees: bool) -> Sim {
    behaviours(epochs, exit_frees, false)
}

/// [`all_behaviours`], with every snapshot written full when `full` is set.
pub fn behaviours(epochs: u32, exit_frees: bool, full: bool) -> Sim {
    let mut sim = Sim::new("/opt/app/train");
    sim.full_snapshots = full;
    let mut keep = Vec::new();
    let mut previous_buffers = Vec::new();
    for e in 0..epochs {
        if e == 0 {
            keep.extend(sim.alloc_many(5, 200, 4096));
        }
        if e == 1 {
            keep.extend(sim.alloc_many(2, 500, 4096));
        }
        keep.extend(sim.alloc_many(1, 100, 1024));
        let buffers = sim.alloc_many(3, 50, 8192);
        sim.free_all(std::mem::take(&mut previous_buffers));
        previous_buffers = buffers;
        for _ in 0..20 {
            let t = sim.alloc_many(4, 10, 65536);
            sim.free_all(t);
        }
        sim.mark(&format!("epoch {e}"));
    }
    if exit_frees {
        sim.free_all(keep);
        sim.free_all(previous_buffers);
    }
    sim.exit();
    sim
}

/// A file written in a folder of its own under the system's temporary
/// folder. Dropping it removes the folder with what the test wrote beside
/// the file (reports, flamegraphs, descendants' traces).
pub struct TempFile(std::path::PathBuf);

impl std::ops::Deref for TempFile {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempFile {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempFile {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Writes `bytes` to a fresh file under the system temporary folder.
pub fn write_temp(name: &str, bytes: &[u8]) -> TempFile {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "analyzer-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a temporary folder");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write a temporary file");
    TempFile(path)
}
