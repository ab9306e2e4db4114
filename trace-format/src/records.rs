//! The records of a trace and their payload encoding.

use crate::codec::{DecodeError, Decoder, Encoder};

/// Version 3 added [`Frame::Mapping`], [`Frame::PythonLeaf`] and the mapped
/// totals of [`Snapshot`].
const VERSION_3: u16 = 3;
/// Version 4 added [`EpochCause::Parent`], [`Frame::SharedMapping`], and the
/// private memory and the allocator's free bytes of [`Snapshot`].
const VERSION_4: u16 = 4;
/// Version 5 added the resident pages of mapped files to [`Snapshot`].
const VERSION_5: u16 = 5;
/// Version 6 added [`EpochCause::Exec`].
const VERSION_6: u16 = 6;

/// The kind byte of each record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    Process = 1,
    Module = 2,
    StackNodes = 3,
    PyCode = 4,
    Snapshot = 5,
    Notice = 6,
    End = 7,
}

impl RecordKind {
    pub fn from_byte(byte: u8) -> Option<RecordKind> {
        Some(match byte {
            1 => RecordKind::Process,
            2 => RecordKind::Module,
            3 => RecordKind::StackNodes,
            4 => RecordKind::PyCode,
            5 => RecordKind::Snapshot,
            6 => RecordKind::Notice,
            7 => RecordKind::End,
            _ => return None,
        })
    }
}

/// One record of a trace.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Process(Process),
    Module(Module),
    StackNodes(StackNodes),
    PyCode(PyCode),
    Snapshot(Snapshot),
    Notice(Notice),
    End(End),
}

/// The traced process; the first record of every trace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Process {
    pub pid: u32,
    /// The process this one was forked from, when the tracer followed a fork.
    pub forked_from: Option<u32>,
    /// Wall-clock time the trace started, in nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    pub exe: String,
    pub cmdline: Vec<String>,
    /// The tracer's settings in force, as (name, value), for the report.
    pub settings: Vec<(String, String)>,
}

/// The setting of a first traced process that found its named trace file
/// held by another (two programs started side by side, both preloaded): it
/// wrote `<path>.<pid>` beside that file instead, and is no descendant of
/// the process whose trace that file is.
pub const NAMED_OUTPUT_IN_USE_SETTING: &str = "instead_of";

/// The setting naming the run a process belongs to: the first traced
/// process picks it, and every process it forks or execs, down the tree,
/// writes the same. Descendants' traces are found by their file names,
/// which an earlier run of the same command left too: the run tells them
/// apart.
pub const RUN_SETTING: &str = "run";

/// The setting naming a process image in its run: its pid and when it
/// started (a forked child is an image of its own, and so is each program
/// a process execs).
pub const IMAGE_SETTING: &str = "image";

/// The setting naming the image (see [`IMAGE_SETTING`]) that forked this
/// process, or that this program was exec'd from or spawned by; absent in
/// the first traced process.
pub const PARENT_IMAGE_SETTING: &str = "parent_image";

/// The setting naming the pipes a process's standard input and output
/// were as it started (see [`StdioPipes`]); absent where neither was one.
pub const STDIO_PIPES_SETTING: &str = "stdio_pipes";

/// The settings that place a process in its run's tree, or in a pipeline,
/// for tools rather than for reading.
pub const LINEAGE_SETTINGS: [&str; 4] = [RUN_SETTING, IMAGE_SETTING, PARENT_IMAGE_SETTING, STDIO_PIPES_SETTING];

/// The pipes (device and inode) a process's standard input and output
/// were, `in=<device>:<inode> out=<device>:<inode>` in its
/// [`STDIO_PIPES_SETTING`], a stream that was no pipe left out: the ends
/// of one pipeline share one, the output of one the input of the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StdioPipes {
    pub input: Option<(u64, u64)>,
    pub output: Option<(u64, u64)>,
}

impl StdioPipes {
    /// The setting's value; `None` where neither stream was a pipe.
    pub fn setting(&self) -> Option<String> {
        let words: Vec<String> = [("in", self.input), ("out", self.output)]
            .into_iter()
            .filter_map(|(name, pipe)| pipe.map(|(device, inode)| format!("{name}={device}:{inode}")))
            .collect();
        (!words.is_empty()).then(|| words.join(" "))
    }

    /// From the setting's value; what does not read as a pipe is left out.
    pub fn parse(value: &str) -> StdioPipes {
        let mut pipes = StdioPipes::default();
        for word in value.split(' ') {
            let Some((name, id)) = word.split_once('=') else { continue };
            let Some((device, inode)) = id.split_once(':') else { continue };
            let (Ok(device), Ok(inode)) = (device.parse(), inode.parse()) else { continue };
            match name {
                "in" => pipes.input = Some((device, inode)),
                "out" => pipes.output = Some((device, inode)),
                _ => {}
            }
        }
        pipes
    }

    /// Whether one process's output went into the other's input: next to
    /// each other in a pipeline.
    pub fn neighbours(&self, other: &StdioPipes) -> bool {
        let joins = |from: Option<(u64, u64)>, to: Option<(u64, u64)>| from.is_some() && from == to;
        joins(self.output, other.input) || joins(other.output, self.input)
    }
}

/// The settings of a process a distributed launcher started, from the
/// variables it set in the process's environment (`RANK`, `LOCAL_RANK`,
/// `WORLD_SIZE`, as torchrun does): its rank in the job, its rank on its
/// machine and how many ranks there are; each a number, each absent where
/// the variable was not set (see [`Process::rank`]).
pub const RANK_SETTING: &str = "rank";
pub const LOCAL_RANK_SETTING: &str = "local_rank";
pub const WORLD_SIZE_SETTING: &str = "world_size";
/// The rank settings, with the variable each is read from.
pub const RANK_SETTINGS: [(&str, &str); 3] =
    [(RANK_SETTING, "RANK"), (LOCAL_RANK_SETTING, "LOCAL_RANK"), (WORLD_SIZE_SETTING, "WORLD_SIZE")];

/// A process's place in a distributed job (see [`RANK_SETTING`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rank {
    pub rank: u32,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
}

/// The setting of a run's first process giving how many traces the
/// programs the run execs may write ([`EXEC_TRACE_LIMIT_SETTING`]'s value
/// is a number); absent when there is no limit.
pub const EXEC_TRACE_LIMIT_SETTING: &str = "exec_trace_limit";

/// The setting giving how many native frames the tracer keeps of a stack
/// (a number): a deeper stack loses its outer frames, and one that holds
/// this many was cut.
pub const MAX_FRAMES_SETTING: &str = "max_frames";

/// The setting of a warning the tracer gave on stderr as the process
/// started (there may be several).
pub const WARNING_SETTING: &str = "warning";
/// What a [`WARNING_SETTING`] says when the program's malloc is not the
/// tracer's (the program's own, or an allocator loaded before it): the
/// trace then holds none of the heap.
pub const HEAP_NOT_TRACED: &str = "heap does not reach the tracer";

/// How the notice of the epoch that ended a sampled warm-up starts; the
/// epoch's number follows, then a colon. The allocations born in that
/// epoch and before were sampled: their counts and bytes are estimates.
pub const WARM_UP_ENDED_NOTICE: &str = "the warm-up ended with epoch ";

/// How the notice starts that the DataLoader passes closing the epochs go
/// round several loaders from one place (an evaluation over a few
/// validation sets); the first epoch that holds a whole round follows, then
/// a colon. The epochs before it since the first round began each held one
/// pass over a loader of that round (the tracer learns that the place goes
/// round its loaders when the first comes again): the analysis starts with
/// that epoch.
pub const PASS_ROUNDS_NOTICE: &str = "the DataLoader passes go round several loaders, one epoch a round, from epoch ";
/// The start of the notice at the first epoch that an outer loop's pass
/// closes, inside whose passes the loop that closed the epochs before ran;
/// the index of the first epoch the outer loop's passes hold whole follows,
/// then a colon: the analysis starts with it.
pub const OUTER_LOOP_NOTICE: &str = "the passes of an outer DataLoader loop close the epochs, whole from epoch ";
/// The start of the notice at the first epoch that a loop's pass closes
/// after the loop that closed them before stopped (training, then
/// fine-tuning on another loader); the index of the first epoch its passes
/// hold whole follows, then a colon. The epochs before it are another
/// phase of the job, analysed apart.
pub const MARKING_LOOP_STOPPED_NOTICE: &str = "another DataLoader loop's passes close the epochs, whole from epoch ";

/// How the notice at the exit starts that passes over DataLoaders were
/// seen but none repeated from one place, so that none closed an epoch.
pub const UNREPEATED_PASSES_NOTICE: &str = "passes over a DataLoader were seen, but never two from the same place";

/// How a notice ends that the tracer stopped recording where it stands
/// (its words before say why): the trace goes no further.
pub const RECORDING_STOPPED_HERE: &str = ": recording stopped here";

/// Why the tracer stops when its own memory runs out (an address-space
/// limit, or a program that filled what it may have): the words before
/// [`RECORDING_STOPPED_HERE`], and before the exit's note.
pub const TRACER_OUT_OF_MEMORY: &str = "out of memory for the tracer's own tables and buffers";

/// The setting saying how allocations are recorded.
pub const SAMPLING_SETTING: &str = "sampling";
/// How [`SAMPLING_SETTING`]'s value starts when allocations are sampled
/// from the start; the mean bytes between samples follow, then ` bytes`.
pub const SAMPLED_BY_BYTES: &str = "Poisson by bytes, one sample per ";
/// In [`SAMPLING_SETTING`]'s value, after the rate, when the sampling ends
/// with the warm-up: every allocation of the epochs after it is recorded.
pub const SAMPLED_UNTIL_WARM_UP_ENDS: &str = " until the warm-up";
/// In [`SAMPLING_SETTING`]'s value, after the rate, when the whole run is
/// sampled at `TRACER_SAMPLE_BYTES`'s rate.
pub const SAMPLED_WHOLE_RUN: &str = " (TRACER_SAMPLE_BYTES)";

/// The setting saying how the process's epochs are cut.
pub const EPOCHS_SETTING: &str = "epochs";
/// In [`EPOCHS_SETTING`]'s value, before the length of a time slice in
/// seconds and " s": the run was cut into time slices of that length
/// (until its first mark or DataLoader pass, when the words go on so).
pub const TIME_SLICES_OF: &str = "time slices of ";
/// What [`EPOCHS_SETTING`]'s value ends with when the default time slices
/// come back while no DataLoader pass is seen, after passes closed epochs.
pub const SLICES_WHILE_PASSES_UNSEEN: &str =
    ", and again while no pass is seen for three times the longest time between two (5 s at least)";
/// How [`EPOCHS_SETTING`]'s value starts in a forked DataLoader worker,
/// which closes an epoch each time its parent does.
pub const FOLLOWS_PARENTS_EPOCHS: &str = "its parent's epochs";

/// The setting of a Python process saying whether its frames were read:
/// `3.11.7 frames`, or its version, [`PYTHON_FRAMES_UNSUPPORTED`] and why,
/// or its version and [`PYTHON_FRAMES_OFF`].
pub const PYTHON_SETTING: &str = "python";
/// What [`PYTHON_SETTING`]'s value has after the version when the
/// interpreter's frames could not be read: the stacks are native only.
pub const PYTHON_FRAMES_UNSUPPORTED: &str = " unsupported: ";
/// What [`PYTHON_SETTING`]'s value has after the version when the frames
/// were turned off by the setting that reads them (then the setting's
/// name, `(TRACER_PYTHON_FRAMES=0)`): the stacks are native only.
pub const PYTHON_FRAMES_OFF: &str = " frames off ";

/// The setting of a Python process naming what served its objects:
/// `malloc (...)`, [`PYMALLOC`] with its objects untraced (only the arenas
/// that hold them recorded), or [`PYMALLOC_OBJECTS_TRACED`].
pub const PYTHON_ALLOCATOR_SETTING: &str = "python_allocator";
/// The first word of [`PYTHON_ALLOCATOR_SETTING`]'s value for pymalloc.
pub const PYMALLOC: &str = "pymalloc";
/// How [`PYTHON_ALLOCATOR_SETTING`]'s value starts when pymalloc's objects
/// were not traced: what follows, up to the closing parenthesis, says how
/// to trace them or what that needs.
pub const PYMALLOC_OBJECTS_UNTRACED: &str = "pymalloc (objects ≤512 B not traced one by one; ";
/// How [`PYTHON_ALLOCATOR_SETTING`]'s value starts when pymalloc's objects
/// were traced through its hooks, sampled.
pub const PYMALLOC_OBJECTS_TRACED: &str = "pymalloc, its objects traced through its hooks";

/// The setting that names the allocator the program's calls went on to,
/// when it was not glibc's: "jemalloc (<path>)", "tcmalloc (<path>)", or a
/// library's path. `allocator_free_bytes` is then that allocator's count.
pub const ALLOCATOR_SETTING: &str = "allocator";
/// The first word of [`ALLOCATOR_SETTING`]'s value for jemalloc.
pub const JEMALLOC: &str = "jemalloc";
/// The first word of [`ALLOCATOR_SETTING`]'s value for tcmalloc.
pub const TCMALLOC: &str = "tcmalloc";

impl Process {
    /// How far into its trace's clock this process's own image began: a
    /// forked child's times count from its parent's start (0 for others).
    pub fn started_late_ns(&self) -> u64 {
        self.setting(IMAGE_SETTING)
            .and_then(|image| image.split_once('.')?.1.parse::<u64>().ok())
            .map_or(0, |image_start| image_start.saturating_sub(self.start_unix_ns))
    }

    /// Whether this process started beside another traced one rather than
    /// from it (see [`NAMED_OUTPUT_IN_USE_SETTING`]).
    pub fn started_beside_another(&self) -> bool {
        self.setting(NAMED_OUTPUT_IN_USE_SETTING).is_some()
    }

    /// The run this process belongs to (see [`RUN_SETTING`]); `None` in a
    /// trace from a tracer that did not write it.
    pub fn run(&self) -> Option<&str> {
        self.setting(RUN_SETTING)
    }

    /// This process image's name in its run (see [`IMAGE_SETTING`]).
    pub fn image(&self) -> Option<&str> {
        self.setting(IMAGE_SETTING)
    }

    /// The image this one descends from (see [`PARENT_IMAGE_SETTING`]).
    pub fn parent_image(&self) -> Option<&str> {
        self.setting(PARENT_IMAGE_SETTING)
    }

    /// Its place in a distributed job, when a launcher gave it a rank (see
    /// [`RANK_SETTING`]).
    pub fn rank(&self) -> Option<Rank> {
        let number = |name| self.setting(name)?.parse::<u32>().ok();
        Some(Rank {
            rank: number(RANK_SETTING)?,
            local_rank: number(LOCAL_RANK_SETTING),
            world_size: number(WORLD_SIZE_SETTING),
        })
    }

    /// The length in seconds of the time slices the tracer cut the run
    /// into (see [`TIME_SLICES_OF`]); `None` when they were off.
    pub fn time_slice_seconds(&self) -> Option<f64> {
        let epochs = self.setting(EPOCHS_SETTING)?;
        let (_, after) = epochs.split_once(TIME_SLICES_OF)?;
        after.split_once(" s")?.0.parse().ok()
    }

    /// The value of the setting `name`, if the tracer wrote it.
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings.iter().find(|(setting, _)| setting == name).map(|(_, value)| value.as_str())
    }
}

/// A loaded ELF object (the executable, a shared library, a dlopen'd module).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Module {
    /// The file's absolute path, as the kernel names it; the loader's name
    /// where /proc could not tell (a relative name, "linux-vdso.so.1"), and
    /// empty for the program when /proc/self/exe could not be read.
    pub path: String,
    /// Load bias: a runtime address minus this is the address in the file's symbol tables.
    pub load_bias: u64,
    /// Runtime address ranges `[start, end)` of the module's loaded segments.
    pub segments: Vec<(u64, u64)>,
    /// The GNU build id, empty when the object has none.
    pub build_id: Vec<u8>,
}

/// Nodes of the prefix tree that all stacks of a trace file form. A stack is
/// named by the id of its innermost node: following `parent` links up to the
/// root (parent 0) gives its frames from innermost to outermost, Python frames
/// (outermost Python frame nearest the root) before native ones. Stacks share
/// their common outer parts, so each new stack adds only the frames in which
/// it differs from those already written. A node is written before any node
/// or snapshot that refers to it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StackNodes {
    pub nodes: Vec<StackNode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackNode {
    /// Non-zero, unique within the file.
    pub id: u32,
    /// The node one frame further out, 0 for the outermost frame.
    pub parent: u32,
    pub frame: Frame,
}

/// One frame of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Frame {
    /// A native return address (the tracer's own frames are never recorded).
    Native(u64),
    Python(PyFrame),
    /// The innermost node of a stack that made an anonymous memory mapping
    /// (`mmap` with `MAP_ANONYMOUS`) rather than a heap allocation; the frames
    /// further out are the mapping call's stack. Format version 3 and later.
    Mapping,
    /// The innermost node of a stack that mapped shared memory shared and
    /// writable (`MAP_SHARED` of a descriptor with `PROT_WRITE`, a file of
    /// tmpfs or hugetlbfs such as /dev/shm's or a memfd, through which
    /// DataLoader workers hand their batches over). Format version 4 and later.
    SharedMapping,
    /// The stack's Python frames are the path that ends at this node (a path
    /// of Python frames only). Such a node is the innermost of its stack and
    /// its parent is the stack's innermost native frame, so a stack's native
    /// and Python frames are two paths, each shared by the stacks that have
    /// it, however the other kind differs.
    PythonLeaf(u32),
}

/// One Python frame: a code object and the instruction it was executing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PyFrame {
    /// Refers to a [`PyCode`] record.
    pub code: u64,
    /// Offset of the current instruction in 2-byte code units.
    pub instruction: u32,
    /// The interpreter was entered from C at this frame (one native
    /// `_PyEval_EvalFrameDefault` call covers frames up to and including it).
    pub entry: bool,
}

/// What the analyzer needs of a Python code object, copied when first seen.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PyCode {
    pub id: u64,
    pub filename: String,
    pub qualname: String,
    pub first_line: u32,
    /// The code object's location table (`co_linetable`, CPython 3.11+ format).
    pub linetable: Vec<u8>,
}

/// What closed an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EpochCause {
    /// The program called `tracer_mark`.
    #[default]
    Mark,
    /// The time slice (`TRACER_EPOCH_SECONDS`) ran out.
    Timer,
    /// The process ended (exit or `_exit`; `exec` before version 6).
    Exit,
    /// Detected automatically (a new pass over a data loader).
    Auto,
    /// The parent process closed an epoch: a forked DataLoader worker
    /// follows the epochs of the process that forked it. Format version 4
    /// and later.
    Parent,
    /// The process called `exec`: the snapshot closes the epoch only if
    /// the image is replaced. The epoch stays open meanwhile, so when the
    /// exec fails and the process goes on, its next snapshot is of the same
    /// epoch and takes this one's place. Format version 6 and later.
    Exec,
}

impl EpochCause {
    fn to_byte(self) -> u8 {
        match self {
            EpochCause::Mark => 0,
            EpochCause::Timer => 1,
            EpochCause::Exit => 2,
            EpochCause::Auto => 3,
            EpochCause::Parent => 4,
            EpochCause::Exec => 5,
        }
    }

    fn from_byte(byte: u8, version: u16) -> Result<Self, DecodeError> {
        Ok(match byte {
            0 => EpochCause::Mark,
            1 => EpochCause::Timer,
            2 => EpochCause::Exit,
            3 => EpochCause::Auto,
            4 if version >= VERSION_4 => EpochCause::Parent,
            5 if version >= VERSION_6 => EpochCause::Exec,
            _ => return Err(DecodeError::BadValue("epoch cause")),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            EpochCause::Mark => "mark",
            EpochCause::Timer => "timer",
            EpochCause::Exit => "exit",
            EpochCause::Auto => "auto",
            EpochCause::Parent => "parent",
            EpochCause::Exec => "exec",
        }
    }

    /// Whether the process ended or was replacing its image: the trace's
    /// last snapshot, unless an exec failed.
    pub fn ends_the_process(self) -> bool {
        matches!(self, EpochCause::Exit | EpochCause::Exec)
    }
}

/// Counters of one (stack, birth epoch) pair as they stand at a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SiteCounters {
    pub stack: u32,
    /// The epoch in which these allocations were made.
    pub birth_epoch: u32,
    /// Allocations from this pair still alive.
    pub live_count: u64,
    pub live_bytes: u64,
    /// All allocations this pair made (alive or freed).
    pub allocated_count: u64,
    pub allocated_bytes: u64,
}

impl SiteCounters {
    pub(crate) fn encode(&self, e: &mut Encoder) {
        e.u32(self.stack);
        e.u32(self.birth_epoch);
        e.u64(self.live_count);
        e.u64(self.live_bytes);
        e.u64(self.allocated_count);
        e.u64(self.allocated_bytes);
    }
}

/// The end of an epoch: process totals and the counters that changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// Index of the epoch this snapshot closes (0 for the first).
    pub epoch: u32,
    pub cause: EpochCause,
    pub label: String,
    /// Nanoseconds since the trace started.
    pub elapsed_ns: u64,
    /// Resident set size of the process.
    pub rss_bytes: u64,
    /// Bytes and number of heap allocations alive (malloc and friends only).
    pub heap_live_bytes: u64,
    pub heap_live_count: u64,
    /// Bytes and number of anonymous mappings alive, counted apart from the
    /// heap (0 in version 2 traces, which did not trace mappings).
    pub mapped_live_bytes: u64,
    pub mapped_live_count: u64,
    /// Memory written by this process alone (`Private_Dirty` of
    /// `/proc/self/smaps_rollup`): its own heap and mappings, and the pages
    /// it shared with its parent and copied when it wrote them. Measured in
    /// forked processes only, not at exit; 0 elsewhere, and in traces
    /// before version 4.
    pub private_dirty_bytes: u64,
    /// Freed memory glibc's malloc holds in its arenas rather than handing
    /// it back to the system (`fordblks` of `mallinfo2`, the tracer's own
    /// small freed blocks included; less the count right after the
    /// program's last `malloc_trim`, whose free chunks' pages are handed
    /// back though glibc still counts them); 0 before version 4 and at an
    /// exit by `_exit`, which leaves malloc alone.
    pub allocator_free_bytes: u64,
    /// The resident pages of files mapped into the process (`RssFile` of
    /// `/proc/self/status`, part of `rss_bytes`): the libraries' code and
    /// data, and memory-mapped files such as a dataset read through
    /// `np.memmap` or Arrow; pages the kernel can take back and read again.
    /// 0 before version 5, and where the kernel does not say.
    pub rss_file_bytes: u64,
    /// Memory the tracer itself holds for its tables and buffers: its blocks
    /// from malloc as allocated, its large blocks as far as they are resident.
    pub tracer_bytes: u64,
    /// When set, `counters` holds every pair with live allocations and
    /// replaces all earlier state; otherwise it holds only the pairs that
    /// changed since the previous snapshot, and pairs not listed are unchanged.
    pub full: bool,
    pub counters: Vec<SiteCounters>,
}

impl Snapshot {
    /// Everything before the counters.
    pub(crate) fn encode_header(&self, version: u16, e: &mut Encoder) {
        e.u32(self.epoch);
        e.byte(self.cause.to_byte());
        e.str(&self.label);
        e.u64(self.elapsed_ns);
        e.u64(self.rss_bytes);
        e.u64(self.heap_live_bytes);
        e.u64(self.heap_live_count);
        if version >= VERSION_3 {
            e.u64(self.mapped_live_bytes);
            e.u64(self.mapped_live_count);
        }
        if version >= VERSION_4 {
            e.u64(self.private_dirty_bytes);
            e.u64(self.allocator_free_bytes);
        }
        if version >= VERSION_5 {
            e.u64(self.rss_file_bytes);
        }
        e.u64(self.tracer_bytes);
        e.bool(self.full);
    }
}

/// Something the tracer wants the reader of the report to know (it stopped
/// recording, a feature was unavailable, ...).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Notice {
    pub elapsed_ns: u64,
    pub text: String,
}

/// How the traced process ended; its presence means the trace is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EndReason {
    #[default]
    Exit,
    /// `_exit` or `_Exit`, which skip exit handlers.
    ImmediateExit,
    /// The process image was replaced by `exec`.
    Exec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct End {
    pub reason: EndReason,
    pub elapsed_ns: u64,
}

impl Record {
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::Process(_) => RecordKind::Process,
            Record::Module(_) => RecordKind::Module,
            Record::StackNodes(_) => RecordKind::StackNodes,
            Record::PyCode(_) => RecordKind::PyCode,
            Record::Snapshot(_) => RecordKind::Snapshot,
            Record::Notice(_) => RecordKind::Notice,
            Record::End(_) => RecordKind::End,
        }
    }

    /// Encodes the payload as format `version` lays it out (the writer uses
    /// [`crate::FORMAT_VERSION`]; older versions exist for compatibility tests).
    pub fn encode_payload(&self, version: u16, e: &mut Encoder) {
        match self {
            Record::Process(p) => {
                e.u32(p.pid);
                e.u32(p.forked_from.unwrap_or(0));
                e.u64(p.start_unix_ns);
                e.str(&p.exe);
                e.u64(p.cmdline.len() as u64);
                p.cmdline.iter().for_each(|arg| e.str(arg));
                e.u64(p.settings.len() as u64);
                for (name, value) in &p.settings {
                    e.str(name);
                    e.str(value);
                }
            }
            Record::Module(m) => {
                e.str(&m.path);
                e.u64(m.load_bias);
                e.u64(m.segments.len() as u64);
                for &(start, end) in &m.segments {
                    e.u64(start);
                    e.u64(end);
                }
                e.bytes(&m.build_id);
            }
            Record::StackNodes(nodes) => {
                e.u64(nodes.nodes.len() as u64);
                for node in &nodes.nodes {
                    e.u32(node.id);
                    e.u32(node.parent);
                    match node.frame {
                        Frame::Native(address) => {
                            e.byte(0);
                            e.u64(address);
                        }
                        Frame::Python(frame) => {
                            e.byte(1);
                            e.u64(frame.code);
                            e.u32(frame.instruction);
                            e.bool(frame.entry);
                        }
                        Frame::Mapping => e.byte(2),
                        Frame::SharedMapping => e.byte(4),
                        Frame::PythonLeaf(node) => {
                            e.byte(3);
                            e.u32(node);
                        }
                    }
                }
            }
            Record::PyCode(c) => {
                e.u64(c.id);
                e.str(&c.filename);
                e.str(&c.qualname);
                e.u32(c.first_line);
                e.bytes(&c.linetable);
            }
            Record::Snapshot(s) => {
                s.encode_header(version, e);
                e.u64(s.counters.len() as u64);
                s.counters.iter().for_each(|c| c.encode(e));
            }
            Record::Notice(n) => {
                e.u64(n.elapsed_ns);
                e.str(&n.text);
            }
            Record::End(end) => {
                e.u32(match end.reason {
                    EndReason::Exit => 0,
                    EndReason::ImmediateExit => 1,
                    EndReason::Exec => 2,
                });
                e.u64(end.elapsed_ns);
            }
        }
    }

    /// Decodes a payload written in format `version`.
    pub fn decode_payload(kind: RecordKind, version: u16, payload: &[u8]) -> Result<Record, DecodeError> {
        let mut d = Decoder::new(payload);
        let record = match kind {
            RecordKind::Process => {
                let pid = d.u32()?;
                let forked_from = Some(d.u32()?).filter(|&pid| pid != 0);
                let start_unix_ns = d.u64()?;
                let exe = d.string()?;
                let cmdline = (0..d.count(1)?).map(|_| d.string()).collect::<Result<_, _>>()?;
                let settings = (0..d.count(2)?).map(|_| Ok((d.string()?, d.string()?))).collect::<Result<_, _>>()?;
                Record::Process(Process { pid, forked_from, start_unix_ns, exe, cmdline, settings })
            }
            RecordKind::Module => {
                let path = d.string()?;
                let load_bias = d.u64()?;
                let segments = (0..d.count(2)?).map(|_| Ok((d.u64()?, d.u64()?))).collect::<Result<_, _>>()?;
                let build_id = d.bytes()?.to_vec();
                Record::Module(Module { path, load_bias, segments, build_id })
            }
            RecordKind::StackNodes => {
                // A mapping node is the shortest: id, parent and kind, a byte each at least.
                let nodes = (0..d.count(3)?)
                    .map(|_| {
                        let id = d.u32()?;
                        let parent = d.u32()?;
                        let frame = match d.byte()? {
                            0 => Frame::Native(d.u64()?),
                            1 => Frame::Python(PyFrame { code: d.u64()?, instruction: d.u32()?, entry: d.bool()? }),
                            2 if version >= VERSION_3 => Frame::Mapping,
                            3 if version >= VERSION_3 => Frame::PythonLeaf(d.u32()?),
                            4 if version >= VERSION_4 => Frame::SharedMapping,
                            _ => return Err(DecodeError::BadValue("frame kind")),
                        };
                        if id == 0 {
                            return Err(DecodeError::BadValue("stack node id 0"));
                        }
                        Ok(StackNode { id, parent, frame })
                    })
                    .collect::<Result<_, _>>()?;
                Record::StackNodes(StackNodes { nodes })
            }
            RecordKind::PyCode => Record::PyCode(PyCode {
                id: d.u64()?,
                filename: d.string()?,
                qualname: d.string()?,
                first_line: d.u32()?,
                linetable: d.bytes()?.to_vec(),
            }),
            RecordKind::Snapshot => {
                let epoch = d.u32()?;
                let cause = EpochCause::from_byte(d.byte()?, version)?;
                let label = d.string()?;
                let elapsed_ns = d.u64()?;
                let rss_bytes = d.u64()?;
                let heap_live_bytes = d.u64()?;
                let heap_live_count = d.u64()?;
                let (mapped_live_bytes, mapped_live_count) =
                    if version >= VERSION_3 { (d.u64()?, d.u64()?) } else { (0, 0) };
                let (private_dirty_bytes, allocator_free_bytes) =
                    if version >= VERSION_4 { (d.u64()?, d.u64()?) } else { (0, 0) };
                let rss_file_bytes = if version >= VERSION_5 { d.u64()? } else { 0 };
                let tracer_bytes = d.u64()?;
                let full = d.bool()?;
                // Sized up front: collecting through `Result` grows the list
                // by doubling, and a snapshot can hold a million counters.
                let count = d.count(6)?;
                let mut counters = Vec::with_capacity(count);
                for _ in 0..count {
                    counters.push(SiteCounters {
                        stack: d.u32()?,
                        birth_epoch: d.u32()?,
                        live_count: d.u64()?,
                        live_bytes: d.u64()?,
                        allocated_count: d.u64()?,
                        allocated_bytes: d.u64()?,
                    });
                }
                Record::Snapshot(Snapshot {
                    epoch,
                    cause,
                    label,
                    elapsed_ns,
                    rss_bytes,
                    heap_live_bytes,
                    heap_live_count,
                    mapped_live_bytes,
                    mapped_live_count,
                    private_dirty_bytes,
                    allocator_free_bytes,
                    rss_file_bytes,
                    tracer_bytes,
                    full,
                    counters,
                })
            }
            RecordKind::Notice => Record::Notice(Notice { elapsed_ns: d.u64()?, text: d.string()? }),
            RecordKind::End => {
                let reason = match d.u32()? {
                    0 => EndReason::Exit,
                    1 => EndReason::ImmediateExit,
                    2 => EndReason::Exec,
                    _ => return Err(DecodeError::BadValue("end reason")),
                };
                Record::End(End { reason, elapsed_ns: d.u64()? })
            }
        };
        d.finish()?;
        Ok(record)
    }
}
