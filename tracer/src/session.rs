//! The tracing session of this process: what the hooks record into, how
//! epochs are closed, and what happens at fork, exec and exit.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

use trace_format::{
    EncodedCounters, End, EndReason, EpochCause, Frame, Notice, Process, Record, SiteCounters, Snapshot, StackNode,
    StackNodes, ALLOCATOR_SETTING, EXEC_TRACE_LIMIT_SETTING, IMAGE_SETTING, NAMED_OUTPUT_IN_USE_SETTING,
    PARENT_IMAGE_SETTING, RUN_SETTING,
};

use crate::auto_epochs::{self, marking_loop_idle_ns, marking_loop_idle_words, AutoEpochs, Takeover};
use crate::config::{
    self, Config, AUTO_EPOCHS_VAR, PARENT_COUNTERS_VAR, PARENT_IMAGE_VAR, PYTHON_OBJECTS_VAR, REPORTED_FAILURE,
    REPORTED_OK, REPORTED_VAR, WARM_UP_SAMPLE_VAR, WORKER_TRACES_VAR,
};
use crate::mappings::{self, Locked, Mappings};
use crate::modules::{self, ModuleMap};
use crate::python::{self, Glance, LoaderFrames, PyStack, Python, Started};
use crate::recorder::Recorder;
use crate::room::{self, OutOfMemory};
use crate::sampling::Sampling;
use crate::shared_epochs::{self, ParentsRecut, ParentsRecuts, Recut, SharedEpochs};
use crate::sites::Scope;
use crate::stacks::{StackId, StackKind, StackTable, WrittenIds};
use crate::thread_state::Counted;
use crate::unwind::Entry;
use crate::writer::{self, ThisProcess, TraceWriter};
use crate::{capture_room, gate, lock, own_stack, real_alloc, sys, thread_state, unwind};

const NOT_STARTED: u8 = 0;
const RECORDING: u8 = 1;
const STOPPED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
static SESSION: OnceLock<Session> = OnceLock::new();

/// Stack nodes in one record, and the rest of the path that reaches this
/// many (about 1.5 MiB encoded).
const NODES_PER_RECORD: usize = 1 << 16;

/// How often a thread looks at the clock for the end of a time slice: as
/// many allocations apart as it makes in this time (a thread that
/// allocates rarely looks at each allocation), and at most
/// [`CLOCK_CHECK_MOST`] apart (a thread making millions a second).
const CLOCK_CHECK_NS: u64 = 1_000_000;
const CLOCK_CHECK_MOST: u32 = 256;
/// A recorded allocation of this many bytes or more looks at the coarse
/// clock whenever it comes (see [`record_allocation`]).
const LOOKS_AT_THE_CLOCK_BYTES: usize = 4096;
/// When sampling, allocations per thread between two walks of the Python
/// frames (a power of two, minus one) that look for the module defining
/// `DataLoader` while it is imported; it runs for thousands of allocations.
const LEARNING_WALK_MASK: u32 = 63;
/// One object allocation in this many (by the thread's count) glances at
/// its frames for a DataLoader pass: glancing at each took 3.6% of a
/// PyTorch loop's time. A later pass of a loader that keeps its workers
/// makes dozens of objects in `DataLoader.__iter__` and may make no
/// other allocation there, so its start is still seen.
const OBJECT_GLANCE_MASK: u32 = 31;

/// How Python's multiprocessing started a process that follows its
/// parent's epochs from the first its parent closes after it started.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum MultiprocessingChild {
    /// Not started by multiprocessing (or not following its parent that way).
    No,
    /// A fresh interpreter run with `--multiprocessing-fork`.
    Spawned,
    /// Forked by the `fork` start method (`Popen._launch`).
    Forked,
    /// Forked by a forkserver: it follows the epochs of the process that
    /// started the server.
    ForkServed,
}

struct Session {
    config: Config,
    recorder: Recorder,
    /// Anonymous and shared mappings, sampled by bytes as allocations are.
    mappings: Mappings,
    stacks: StackTable,
    /// The Python interpreter of the process, if any, whose frames join the stacks.
    python: Python,
    /// The process's arguments, read once as it starts.
    command_line: Vec<String>,
    /// Epochs cut at DataLoader passes.
    auto_epochs: AutoEpochs,
    /// The tracer's own code, left out of captured stacks.
    own_code: (u64, u64),
    /// The epoch new allocations are born in.
    epoch: AtomicU32,
    started_ns: u64,
    /// When the current time slice ends (monotonic ns); 0 when slices are off.
    slice_deadline_ns: AtomicU64,
    /// Once DataLoader passes close the epochs (and no slices were asked
    /// for): the slices cut while no pass is seen, this long (see
    /// [`Session::watch_for_unseen_passes`]); 0 before.
    unseen_pass_slice_ns: AtomicU64,
    /// When the last pass closed an epoch, and the longest time between
    /// two that did (monotonic ns; 0 before there were two).
    last_pass_ns: AtomicU64,
    longest_pass_gap_ns: AtomicU64,
    /// The process the session belongs to: a `vfork` child shares this memory
    /// and must leave it alone.
    pid: AtomicU32,
    /// How many epochs this process closed (its exit aside), and the rest
    /// of what it shares with its descendants, in a page its forked
    /// children share: a DataLoader worker closes one of its own each time
    /// its parent does.
    shared: shared_epochs::Slot,
    /// `shared`'s count of closed epochs as the last fork began, read while no thread could
    /// close an epoch: the epochs a forked child has followed as it starts
    /// (its parent may close one between reopening the gate and the child
    /// reading the counter).
    epochs_closed_at_fork: AtomicU32,
    /// In a DataLoader worker, its parent's `shared`.
    parents_shared: shared_epochs::Slot,
    /// In a multiprocessing forkserver, the `shared` of the process that
    /// started it, whose epochs the children it forks follow.
    forkserver_parent: shared_epochs::Slot,
    /// In a DataLoader worker, the recuts of its parent's epochs it has told.
    parents_recuts: ParentsRecuts,
    /// The worker following its parent's epochs is a child that Python's
    /// multiprocessing started (a [`MultiprocessingChild`]), not a forked
    /// DataLoader worker.
    multiprocessing_child: AtomicU8,
    /// In a multiprocessing child: it has become a worker (at the first
    /// epoch its parent closed since it started), or gave up following its
    /// parent's epochs (it closed one of its own first, by a mark or a pass).
    multiprocessing_settled: AtomicBool,
    /// Where the children this process spawns find `shared` (set
    /// as it starts, in a Python process).
    counters_address: OnceLock<sys::SharedCountersAddress>,
    /// How many of the parent's epochs this process has followed.
    parent_epochs_followed: AtomicU32,
    /// The trace says that later workers write none.
    untraced_workers_noted: AtomicBool,
    /// Whether the trace said that /proc could not be read at a snapshot.
    unread_rss_noted: AtomicBool,
    output: Mutex<Output>,
    stop_reported: AtomicBool,
    /// See [`Allocators`].
    other_allocator: Option<String>,
    other_allocator_free_bytes: Option<fn() -> u64>,
}

struct Output {
    /// `None` in a forked child until its first snapshot opens its own file.
    writer: Option<TraceWriter>,
    modules: ModuleMap,
    forked_from: Option<u32>,
    /// This process image's name in the run, and its parent's (empty in
    /// the first traced process): see [`trace_format::IMAGE_SETTING`].
    image: String,
    parent_image: String,
    /// The next snapshot must list every counter (a new file starts from scratch).
    next_is_full: bool,
    /// Stack nodes this file already holds.
    written: WrittenIds,
    /// Code objects this file already holds.
    written_codes: WrittenIds,
    /// Allocations born before this epoch are not this file's to report: a
    /// forked child reports what it allocated itself, not its parent's heap.
    first_birth_epoch: u32,
}

/// The name of the process image starting now (see [`trace_format::IMAGE_SETTING`]).
fn image_name() -> String {
    format!("{}.{}", sys::pid(), sys::unix_ns())
}

/// Whether a process that is no descendant of a traced one writes `path`
/// rather than the named file: another traced process held it as this one
/// started, or wrote it having started after this one (two programs
/// started side by side with the tracer preloaded, one of which may have
/// ended already).
fn named_output_in_use(config: &Config, forked_from: Option<u32>, path: &Path) -> bool {
    !config.is_descendant && forked_from.is_none() && path != config.base_output
}

fn active_session() -> Option<&'static Session> {
    if STATE.load(Ordering::Acquire) != RECORDING {
        return None;
    }
    SESSION.get()
}

/// Runs recording work on behalf of a hook: not re-entrantly, not across a
/// fork, and never letting a failure reach the program.
/// `work` gets the thread's ordinal too (see [`thread_state::inside`]).
fn record(work: impl FnOnce(&'static Session, usize)) {
    if let Some(session) = active_session() {
        record_in(session, work);
    }
}

/// [`record`] for a hook that already has the active session. Once the
/// tracer's memory ran out (see [`real_alloc::out_of_memory`]), recording
/// stops: the work that found out stops short, or has its memory from the
/// allocator's reserve.
fn record_in(session: &'static Session, work: impl FnOnce(&'static Session, usize)) {
    thread_state::inside(|ordinal| {
        let _pass = gate::pass(ordinal);
        if STATE.load(Ordering::Acquire) != RECORDING {
            return;
        }
        if !real_alloc::out_of_memory() && panic::catch_unwind(AssertUnwindSafe(|| work(session, ordinal))).is_err() {
            session.stop_saying_so_in_trace("an internal error occurred");
        }
        if real_alloc::out_of_memory() {
            session.stop_saying_so_in_trace(OutOfMemory::WHY);
        }
    });
}

/// What the hooks found of the program's allocators as the library loaded.
#[derive(Default)]
pub struct Allocators {
    /// What keeps the heap from the tracer, or what the trace cannot tell
    /// there: said on stderr and kept in the trace's settings.
    pub warnings: Vec<String>,
    /// The allocator the program's calls go on to, when it is not glibc's
    /// (the trace's [`ALLOCATOR_SETTING`]).
    pub other: Option<String>,
    /// Reads the freed memory that allocator keeps; glibc's count when `None`.
    pub free_bytes: Option<fn() -> u64>,
}

/// Starts tracing this process; called once when the library is loaded.
pub fn start(allocators: Allocators) {
    thread_state::inside(|_| begin(allocators));
}

/// `start`'s work, with the thread inside the tracer.
fn begin(allocators: Allocators) {
    // Panics are caught and turned into one line; the default hook's report
    // would be noise in the traced program's stderr.
    panic::set_hook(Box::new(|_| {}));
    sys::note_stderr();
    // Before the program may limit its memory (see real_alloc::from_reserve).
    real_alloc::set_reserve_aside();
    // Before any thread of the program's may hold it.
    crate::loaded_objects::find_the_list_lock();
    config::make_own_preload_absolute();
    let mut config = Config::from_env();
    config.warnings.extend(allocators.warnings);
    let (unsaid, said) = config.warnings_unsaid();
    for warning in unsaid {
        sys::print_stderr(&format!("tracer: {warning}\n"));
    }
    if !said.is_empty() {
        std::env::set_var(config::WARNINGS_SAID_VAR, said);
    }
    if config.is_descendant && config.run_traces_at_limit() {
        // The report on the run's first trace says the limit was reached.
        STATE.store(STOPPED, Ordering::Release);
        return;
    }
    // `TRACER_OUTPUT=/dev/stdout`: the trace would be mixed into the
    // program's own output, and descendants would make files beside it.
    let created = if sys::names_standard_stream(&config.base_output) {
        let why = io::Error::other("it is this process's standard output or error");
        Err((config.base_output.clone(), why))
    } else {
        let candidates = config.output_candidates(config.is_descendant, sys::pid());
        let this =
            sys::process_start_unix_ns().map(|start_unix_ns| ThisProcess { start_unix_ns, pipes: sys::stdio_pipes() });
        TraceWriter::create(candidates, this)
    };
    let writer = match created {
        Ok(writer) => writer,
        Err((path, err)) => {
            if config.ancestor_reported.as_deref() != Some(REPORTED_FAILURE) {
                let what_to_do = match err.kind() {
                    io::ErrorKind::FileTooLarge => "lift the file-size limit",
                    io::ErrorKind::StorageFull => "free some space, or set TRACER_OUTPUT to a file system with room",
                    _ => "set TRACER_OUTPUT to a writable path",
                };
                sys::print_stderr(&format!(
                    "tracer: cannot create the trace file {}: {err}; not tracing ({what_to_do})\n",
                    path.display()
                ));
            }
            std::env::set_var(REPORTED_VAR, REPORTED_FAILURE);
            STATE.store(STOPPED, Ordering::Release);
            return;
        }
    };
    std::env::set_var(REPORTED_VAR, REPORTED_OK);
    if let Some(kept) = writer.kept_other_file() {
        sys::print_stderr(&format!(
            "tracer: {} is not a trace file and is left as it is; the trace is written to {} (set TRACER_OUTPUT to a new file's name)\n",
            kept.display(),
            writer.path().display()
        ));
    } else if named_output_in_use(&config, None, writer.path()) {
        sys::print_stderr(&format!(
            "tracer: {} is the trace of another traced process started beside this one; this one (pid {}) writes {}\n",
            config.base_output.display(),
            sys::pid(),
            writer.path().display()
        ));
    }
    // Read before this process hands its own on.
    let parents_counters =
        std::env::var(PARENT_COUNTERS_VAR).ok().and_then(|text| sys::SharedCountersAddress::from_env(&text));
    let image = image_name();
    if !config.is_descendant {
        // Descendants must not write this process's file; they add their pid.
        config.start_run(&image);
    }
    std::env::set_var(PARENT_IMAGE_VAR, &image);
    let parent_image = config.parent_image.clone();
    let sampling = config.sample_bytes.map(Sampling::new);
    let own_code = modules::module_range_containing(start as fn(Allocators) as usize as u64).unwrap_or((0, 0));
    unwind::prepare_fallback(own_code);
    let now = sys::monotonic_ns();
    let slice_deadline_ns = slice_deadline(config.epoch_seconds, now);
    let command_line = sys::command_line();
    let python = Python::detect(config.python_frames, config.python_objects, &command_line);
    let auto_epochs = AutoEpochs::new(config.auto_epochs && python.walks_frames());
    let session = Session {
        config,
        recorder: Recorder::new(sampling),
        mappings: Mappings::new(sys::page_size()),
        stacks: StackTable::default(),
        python,
        command_line,
        auto_epochs,
        own_code,
        epoch: AtomicU32::new(0),
        started_ns: now,
        slice_deadline_ns: AtomicU64::new(slice_deadline_ns),
        unseen_pass_slice_ns: AtomicU64::new(0),
        last_pass_ns: AtomicU64::new(0),
        longest_pass_gap_ns: AtomicU64::new(0),
        pid: AtomicU32::new(sys::pid()),
        shared: shared_epochs::Slot::default(),
        epochs_closed_at_fork: AtomicU32::new(0),
        parents_shared: shared_epochs::Slot::default(),
        forkserver_parent: shared_epochs::Slot::default(),
        parents_recuts: ParentsRecuts::default(),
        multiprocessing_child: AtomicU8::new(MultiprocessingChild::No as u8),
        multiprocessing_settled: AtomicBool::new(false),
        counters_address: OnceLock::new(),
        parent_epochs_followed: AtomicU32::new(0),
        untraced_workers_noted: AtomicBool::new(false),
        unread_rss_noted: AtomicBool::new(false),
        output: Mutex::new(Output {
            writer: Some(writer),
            modules: ModuleMap::default(),
            forked_from: None,
            image,
            parent_image,
            next_is_full: false,
            written: WrittenIds::default(),
            written_codes: WrittenIds::default(),
            first_birth_epoch: 0,
        }),
        stop_reported: AtomicBool::new(false),
        other_allocator: allocators.other,
        other_allocator_free_bytes: allocators.free_bytes,
    };
    if SESSION.set(session).is_err() {
        return;
    }
    let session = SESSION.get().expect("just set");
    session.share_counters_with_descendants();
    session.follow_starting_parent(parents_counters);
    let started = {
        let mut output = lock(&session.output);
        session.write_preamble(&mut output)
    };
    if started {
        STATE.store(RECORDING, Ordering::Release);
    }
}

/// `entry`: where the program called the hook.
#[inline]
pub fn allocated(address: *mut std::ffi::c_void, size: usize, entry: Entry) {
    allocated_as(address, size, entry, Block::Heap);
}

/// A block from Python's object allocator (see [`traces_python_objects`]).
#[inline]
pub fn object_allocated(address: *mut std::ffi::c_void, size: usize, entry: Entry) {
    allocated_as(address, size, entry, Block::PythonObject);
}

/// Where an allocated block came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    /// malloc and friends, or another allocator's operator new.
    Heap,
    /// Python's object allocator: sampled for the whole run, whatever
    /// allocations are, and too busy to glance at the frames for a
    /// DataLoader at each (see [`OBJECT_GLANCE_MASK`]).
    PythonObject,
}

#[inline(always)]
fn allocated_as(address: *mut std::ffi::c_void, size: usize, entry: Entry, block: Block) {
    if address.is_null() {
        return;
    }
    let Some(session) = active_session() else { return };
    // Every allocation paces the time slices and the DataLoader checks, recorded or not.
    let sampling = match block {
        Block::Heap => session.recorder.sampling(),
        Block::PythonObject => session.recorder.object_sampling(),
    };
    let (count, counted, clock_due) = thread_state::count_allocation(size as u64, sampling.is_some());
    let glances = match block {
        Block::Heap => true,
        Block::PythonObject => count & OBJECT_GLANCE_MASK == 0,
    };
    let may_walk = glances && session.auto_epochs.watching();
    let parent_closed_epoch = session.parent_closed_epoch();
    if counted == Counted::Unrecorded && !clock_due && !parent_closed_epoch {
        if may_walk {
            look_for_pass(session, count);
        }
        return;
    }
    let due = AllocationWork { counted, sampling, count, may_walk, clock_due, parent_closed_epoch };
    record_allocation(session, address, size, entry, due);
}

/// What an allocation may ask of the tracer beyond being counted.
#[derive(Clone, Copy)]
struct AllocationWork {
    counted: Counted,
    /// How it is sampled; `None` when every allocation is recorded.
    sampling: Option<&'static Sampling>,
    /// The thread's allocations so far, this one included.
    count: u32,
    /// The DataLoader detection is watching, and this allocation may look.
    may_walk: bool,
    clock_due: bool,
    parent_closed_epoch: bool,
}

/// The rare part of [`allocated_as`], out of line, so that the common case
/// (an allocation neither recorded nor due for a check) is a few loads and
/// branches inlined into each hook, with no call before it returns (see
/// docs/performance-notes.md).
#[inline(never)]
fn record_allocation(
    session: &'static Session,
    address: *mut std::ffi::c_void,
    size: usize,
    entry: Entry,
    due: AllocationWork,
) {
    let AllocationWork { counted, sampling, count, may_walk, clock_due, parent_closed_epoch } = due;
    // Only a sampled allocation can be at a sample gap, whose draw this is.
    let recorded = counted.recorded(size as u64, || sampling.map_or(u64::MAX, Sampling::next_gap));
    if !recorded && may_walk {
        look_for_pass(session, count);
    }
    // A thread that allocated in a burst (importing torch) looks at the
    // clock hundreds of allocations apart until a look shows it slowed
    // down: a recorded block of a page or more, whose writing costs far
    // more than the coarse clock's read, reads it too (a few ns each on
    // every small block cost 5% of the C workload's recording).
    let slice_due = if clock_due {
        session.look_at_clock(count)
    } else {
        recorded && size >= LOOKS_AT_THE_CLOCK_BYTES && session.slice_over_coarsely()
    };
    if !recorded && !slice_due && !parent_closed_epoch {
        return;
    }
    let sample = sampling.is_some();
    record_in(session, |session, ordinal| {
        if parent_closed_epoch {
            // Before this allocation, which belongs to the next epoch.
            session.follow_parent_epoch();
        }
        if recorded {
            // The capture sees a pass starting as a walk would.
            let stack_id = session.capture_stack(StackKind::Heap, entry);
            let epoch = session.epoch.load(Ordering::Relaxed);
            room::noted(stack_id.and_then(|stack_id| {
                session.recorder.allocated(ordinal, address as usize, size, sample, stack_id, epoch)
            }));
        }
        if slice_due {
            session.close_slice_if_due();
        }
    });
}

/// What an allocation that is not recorded does for the DataLoader
/// detection: a glance, and the rare walk. Out of line and apart from
/// [`record_allocation`], whose frame it would otherwise set up at every
/// allocation while the detection watches.
#[inline(never)]
fn look_for_pass(session: &'static Session, count: u32) {
    if session.loader_walk_due(count) {
        record_in(session, |session, _| {
            session.with_python_frames(|frames| session.see_loader_frames(frames.loader_frames()));
        });
    }
}

#[inline]
pub fn freed(address: *mut std::ffi::c_void) {
    forget(address, Recorder::may_hold);
}

/// A block going back to Python's object allocator, freed or resized.
pub fn object_freed(address: *mut std::ffi::c_void) {
    forget(address, Recorder::may_hold_object);
}

/// Forgets `address` before realloc hands it back to glibc, so that another
/// thread that receives the same address cannot have its record removed.
/// Returns whether the tracer knew it, so a failed realloc can restore it.
pub fn forget_for_realloc(address: *mut std::ffi::c_void) -> bool {
    forget(address, Recorder::may_hold)
}

/// Removes the record of the block at `address`, if there is one; whether
/// there was. `may_hold` first rules out, without a lock, the blocks that
/// surely have none (when sampling, most): their frees skip the tracer, the
/// fork gate and the live table.
#[inline(always)]
fn forget(address: *mut std::ffi::c_void, may_hold: impl Fn(&Recorder, usize) -> bool) -> bool {
    if address.is_null() {
        return false;
    }
    let Some(session) = active_session().filter(|session| may_hold(&session.recorder, address as usize)) else {
        return false;
    };
    forget_recorded(session, address as usize)
}

/// The part of [`forget`] that may find a record, out of line (see
/// [`record_allocation`]).
#[inline(never)]
fn forget_recorded(session: &'static Session, address: usize) -> bool {
    let mut known = false;
    // Only a block the tracer knew can find no room to be forgotten in.
    record_in(session, |session, ordinal| {
        known = room::noted(session.recorder.freed(ordinal, address)).unwrap_or(true)
    });
    known
}

/// Whether Python's small objects are to be traced through its object
/// allocator's hooks (see [`Python::traces_objects`]).
pub fn traces_python_objects() -> bool {
    active_session().is_some_and(|session| session.python.traces_objects())
}

/// Runs the mapping call `call` with the mapping table locked, then lets
/// `update` record its result (with the call's stack, captured as a stack of
/// kind `stack_kind` when there is one, and the current epoch). The lock
/// spans the call: once a range is unmapped, another thread may be handed
/// it, and its record must come second. When the tracer does not record,
/// `call` simply runs.
fn change_mappings<R: Copy>(
    stack_kind: impl FnOnce(&Session) -> Option<StackKind>,
    call: impl FnOnce() -> R,
    update: impl FnOnce(R, &mut Locked<'_>, Option<StackId>, u32),
) -> R {
    // mmap is async-signal-safe: a handler that interrupted malloc on this
    // thread (a hook's call into it: its heap half updated, its arena's
    // lock held) may map memory, and recording it would call malloc.
    if thread_state::interrupted_inside() {
        return call();
    }
    let mut call = Some(call);
    let mut result = None;
    // The call made inside the recording sees the program's errno, and the
    // program sees what the call left, whatever the tracer's reads of
    // /proc left before or after it.
    let (before, mut after) = (sys::errno(), None);
    record(|session, _| {
        // Unwinding is slow; it happens before the lock is taken.
        let stack = stack_kind(session).and_then(|kind| room::noted(session.capture_stack(kind, Entry::UNKNOWN)));
        let mut table = session.mappings.lock();
        let Some(call) = call.take() else { return };
        sys::set_errno(before);
        let value = call();
        after = Some(sys::errno());
        result = Some(value);
        update(value, &mut table, stack, session.epoch.load(Ordering::Relaxed));
    });
    if let Some(errno) = after {
        sys::set_errno(errno);
    }
    match (result, call) {
        (Some(value), _) => value,
        (None, Some(call)) => call(),
        (None, None) => unreachable!("a call taken is a call made"),
    }
}

/// What a successful `mmap` of `len` bytes of `fd` with `flags` and `prot`
/// means for the table. Anonymous mappings that can hold memory are
/// recorded (a `PROT_NONE` one reserves address space), and shared memory
/// mapped shared and writable: files of tmpfs or hugetlbfs, such as the
/// /dev/shm files and memfds through which DataLoader workers hand their
/// batches over, which the process keeps as long as it keeps the tensors.
/// Other file mappings (libraries, memory-mapped datasets, a file on disk
/// written through its mapping) are the file's pages, which the kernel may
/// write back and take, not the program's memory to rank. A `MAP_FIXED`
/// mapping of any kind replaces the pages it covers. When sampling, the mappings that could be recorded are drawn
/// by their bytes as allocations are: CPython maps each 16 KiB chunk of its
/// frame stack, thousands in a training loop, and capturing each was a
/// third of the tracer's time in a loop sampled at 512 KiB.
pub fn mapping(
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    call: impl FnOnce() -> *mut std::ffi::c_void,
) -> *mut std::ffi::c_void {
    let anonymous = flags & libc::MAP_ANONYMOUS != 0;
    let shared_writable = flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0;
    let kind = if anonymous && prot != libc::PROT_NONE {
        Some(StackKind::Mapping)
    } else if !anonymous && shared_writable && sys::is_shared_memory_file(fd) {
        Some(StackKind::SharedMapping)
    } else {
        None
    };
    let replaces = flags & libc::MAP_FIXED != 0;
    if kind.is_none() && !replaces {
        return call();
    }
    // A mapping not drawn still clears what the table held at its pages.
    let scale = kind.and_then(|_| mapping_scale(len));
    // A program whose memory comes in mappings (Python's small-object
    // arenas) may call malloc too rarely to look at the clock; a system
    // call costs far more than the coarse clock's read.
    if kind.is_some() && !thread_state::interrupted_inside() {
        if let Some(session) = active_session().filter(|session| session.slice_over_coarsely()) {
            record_in(session, |session, _| session.close_slice_if_due());
        }
    }
    change_mappings(
        |_| kind.filter(|_| scale.is_some()),
        call,
        |address, table, stack, epoch| {
            if address == libc::MAP_FAILED {
                return;
            }
            match (stack, scale) {
                (Some(stack), Some(scale)) => {
                    room::noted(table.mapped(address as usize, len, stack, epoch, scale));
                }
                _ => table.unmapped(address as usize, len),
            }
        },
    )
}

/// How many of its kind a new mapping of `len` bytes stands for: 1 unless
/// sampling, `None` when sampling passes it over.
fn mapping_scale(len: usize) -> Option<f64> {
    let Some(sampling) = active_session().and_then(|session| session.recorder.sampling()) else {
        return Some(1.0);
    };
    let size = len as u64;
    thread_state::mapping_sampled(size, || sampling.next_gap()).then(|| sampling.scale(size))
}

pub fn unmapping(address: *mut std::ffi::c_void, len: usize, call: impl FnOnce() -> i32) -> i32 {
    change_mappings(
        |_| None,
        call,
        |result, table, _, _| {
            if result == 0 {
                table.unmapped(address as usize, len);
            }
        },
    )
}

/// `mremap(old, old_len, new_len, flags, ...)`: the pages kept move with
/// their owners (recorded or not), pages cut off are unmapped, and the
/// pages a mapping grows by are the call's own new memory: they belong to
/// the `mremap` call, born in the current epoch, of the mapping's kind
/// (shared memory stays shared memory), and when sampling they are drawn by
/// their own bytes, whether or not the old pages were drawn. With
/// `MREMAP_DONTUNMAP` (or an `old_len` of 0, which duplicates a shared
/// mapping) the old pages stay and the new range belongs to the call.
///
/// The kind of a mapping the table does not hold (one the warm-up did not
/// draw, or made before the tracer started) is read from /proc/self/maps,
/// and only for pages that are to be recorded: `mremap` is rare.
pub fn remapping(
    old: *mut std::ffi::c_void,
    old_len: usize,
    new_len: usize,
    flags: i32,
    fixed_at: *mut std::ffi::c_void,
    call: impl FnOnce() -> *mut std::ffi::c_void,
) -> *mut std::ffi::c_void {
    let (old, fixed_at) = (old as usize, fixed_at as usize);
    let keeps_old = flags & libc::MREMAP_DONTUNMAP != 0 || old_len == 0;
    // The call's own new memory: the whole new range when the old one
    // stays, else what it grows by.
    let grown = if keeps_old { new_len } else { new_len.saturating_sub(old_len) };
    // Drawn before anything is looked up, as a new mapping is.
    let scale = if grown > 0 { mapping_scale(grown) } else { None };
    let grown_kind = |session: &Session| {
        scale?;
        let recorded = session.mappings.lock().owner_at(old);
        match recorded {
            Some(stack) => Some(session.stacks.kind(stack)),
            None => sys::maps_line_containing(old as u64, mappings::kind_in_maps_line).flatten(),
        }
    };
    change_mappings(grown_kind, call, |new, table, stack, epoch| {
        if new == libc::MAP_FAILED {
            return;
        }
        let new = new as usize;
        if flags & libc::MREMAP_FIXED != 0 {
            // The kernel unmapped whatever was at the target first.
            table.unmapped(fixed_at, new_len);
        }
        let grown_at = if keeps_old {
            new
        } else {
            table.unmapped(old.saturating_add(new_len), old_len.saturating_sub(new_len));
            table.moved(old, old_len.min(new_len), new);
            new.saturating_add(old_len)
        };
        match (stack, scale) {
            (Some(stack), Some(scale)) => {
                room::noted(table.mapped(grown_at, grown, stack, epoch, scale));
            }
            // Not drawn, or not memory the tracer records: whatever the
            // table still held there is gone.
            _ => table.unmapped(grown_at, grown),
        }
    })
}

/// `dlclose` is about to run on the object `closing` gives (its load bias
/// and path): the objects loaded now are listed (see
/// [`ModuleMap::refresh`]) before it may unload some, and the stack nodes
/// not yet written that run through those it may unload are written now,
/// with their modules' records. A library loaded later at their addresses
/// has its record written after them, so the analyzer names them by the
/// library they ran through.
pub fn objects_unloading(closing: impl FnOnce() -> Option<(u64, String)>) {
    // Listing the modules may read /proc: the caller's errno is kept.
    sys::keeping_errno(|| {
        record(|session, _| {
            // Asked of the loader before the output lock is taken: no lock of
            // the loader's is then waited for while holding it.
            let closing = closing();
            let mut output = lock(&session.output);
            let nodes_made = session.stacks.nodes_made();
            output.modules.refresh(nodes_made);
            if output.writer.is_none() {
                // A forked child before its first snapshot: its file is not open.
                return;
            }
            let Some((load_bias, path)) = closing else { return };
            let (segments, nodes_before) = output.modules.closing(load_bias, &path, nodes_made);
            session.write_stacks_through(&mut output, &segments, nodes_before);
        })
    });
}

/// `tracer_mark`: the program closes the current epoch.
pub fn mark(label: Option<String>) {
    record(|session, _| {
        // The program marks its own epochs; time slices and DataLoader
        // passes would only cut them up.
        session.end_default_time_slices();
        session.auto_epochs.stop();
        let label = label.unwrap_or_else(|| format!("epoch {}", session.epoch.load(Ordering::Relaxed)));
        session.close_epoch(EpochCause::Mark, label);
    });
}

/// The process is ending or replacing its image: write the final snapshot
/// (an exec's leaves the epoch open, in case the exec fails).
pub fn finish(reason: EndReason) {
    record(|session, _| {
        if session.pid.load(Ordering::Relaxed) != sys::pid() {
            return; // a vfork child: this memory is its parent's
        }
        if reason == EndReason::Exec && lock(&session.output).writer.is_none() {
            // A forked child that execs before its first snapshot has nothing
            // of its own to report; the new image writes its own trace.
            return;
        }
        if reason == EndReason::ImmediateExit {
            // _exit may run in a signal handler that interrupted malloc on
            // this thread (see real_alloc::stop_using_malloc).
            real_alloc::stop_using_malloc();
        }
        let cause = if reason == EndReason::Exec { EpochCause::Exec } else { EpochCause::Exit };
        session.close_epoch(cause, cause.name().into());
        let mut output = lock(&session.output);
        let elapsed_ns = session.elapsed_ns();
        let mut records = Vec::new();
        if real_alloc::out_of_memory() {
            // The program used the memory it may have: the trace says that its
            // last snapshot (made with the tracer's reserve) may be short,
            // where stderr says recording stopped.
            let text = format!(
                "{} at the {}: its snapshot may lack some of the program's allocations, or be missing",
                OutOfMemory::WHY,
                cause.name()
            );
            records.push(Record::Notice(Notice { elapsed_ns, text }));
        }
        records.push(Record::End(End { reason, elapsed_ns }));
        session.write(&mut output, &records);
        // Out of memory, recording stops here too, said by the note above:
        // an exec's trace that goes on after a failed exec would end without
        // a word.
        if reason != EndReason::Exec || real_alloc::out_of_memory() {
            STATE.store(STOPPED, Ordering::Release);
        }
    });
}

/// The program is about to enter seccomp's strict mode, after which the
/// tracer's clock reads and system calls would have the kernel kill it:
/// recording stops here, said in the trace and once on stderr.
pub fn stop_before_strict_mode() {
    record(|session, _| {
        session.stop_saying_so_in_trace("the program enters seccomp's strict mode, in which the tracer cannot run");
    });
}

/// `exec` failed and the process goes on: say so in the trace.
pub fn exec_failed() {
    record(|session, _| {
        let mut output = lock(&session.output);
        let notice = Notice { elapsed_ns: session.elapsed_ns(), text: "exec failed; the process went on".into() };
        session.write(&mut output, &[Record::Notice(notice)]);
    });
}

/// Whether this process (not a vfork child sharing its memory) is being traced.
pub fn owns_process() -> bool {
    active_session().is_some_and(|session| session.pid.load(Ordering::Relaxed) == sys::pid())
}

/// A `fork` from a signal handler that interrupted this thread inside the
/// tracer (its tables half updated, its locks perhaps held by the work the
/// handler interrupted) or inside malloc called by a hook (its heap half
/// updated in a single-threaded process, which takes no lock): the gate,
/// which waits for every thread to leave, would wait for this one forever,
/// and the child's tracer would allocate from a heap that is not whole.
/// The fork goes ahead without the gate and the child is not traced.
/// `fork`'s handlers run one fork at a time.
static FORKING_INSIDE: AtomicBool = AtomicBool::new(false);

pub fn before_fork() {
    let Some(session) = active_session() else { return };
    if thread_state::interrupted_inside() {
        FORKING_INSIDE.store(true, Ordering::Relaxed);
        return;
    }
    thread_state::set_forking(true);
    gate::close();
    let closed = session.epochs_forks_follow().map_or(0, SharedEpochs::closed);
    session.epochs_closed_at_fork.store(closed, Ordering::Relaxed);
}

pub fn after_fork_in_parent() {
    if active_session().is_none() || FORKING_INSIDE.swap(false, Ordering::Relaxed) {
        return;
    }
    gate::open();
    thread_state::set_forking(false);
}

pub fn after_fork_in_child() {
    let Some(session) = active_session() else { return };
    if FORKING_INSIDE.swap(false, Ordering::Relaxed) {
        // Nothing is taken that the interrupted work may hold; when the
        // handler returns, that work goes on here and writes nothing.
        STATE.store(STOPPED, Ordering::Release);
        writer::forbid_writes();
        return;
    }
    gate::reset_in_child();
    thread_state::set_forking(false);
    thread_state::sample_afresh_after_fork();
    thread_state::inside(|_| adopt_child(session));
}

/// `after_fork_in_child`'s work, with the thread inside the tracer.
fn adopt_child(session: &Session) {
    // The children it spawns cannot reach its parent's counters (they look
    // for their own parent's): its copy of the descriptor is closed, as
    // long as it is still that page's.
    if let Some(address) = session.counters_address.get().filter(|address| address.open_here()) {
        sys::close(address.fd());
    }
    // The pass state is the child's to update whatever the walk shows; the
    // walk finds the loader also when the program's marks turned the pass
    // detection off.
    let inside_parents_pass = auto_epochs::forked_inside_parents_pass();
    // The page whose count `before_fork` read; a forkserver forks only
    // children of the process that started it, and the child serves none.
    let parents_page = session.epochs_forks_follow();
    let forkserver_child = session.forkserver_parent.get().is_some();
    session.forkserver_parent.set(None);
    let (worker, forked_by_multiprocessing) = session
        .with_python_frames(|python_frames| {
            let worker = inside_parents_pass || matches!(python_frames.loader_frames(), LoaderFrames::Present(_));
            (worker, !worker && session.python.forked_by_multiprocessing(python_frames))
        })
        .unwrap_or((inside_parents_pass, false));
    let multiprocessing_child = match (worker, forkserver_child, forked_by_multiprocessing) {
        (true, ..) => None,
        (false, true, _) => Some(MultiprocessingChild::ForkServed),
        (false, false, true) => Some(MultiprocessingChild::Forked),
        (false, false, false) => None,
    };
    if (worker || multiprocessing_child.is_some()) && !session.takes_a_worker_trace() {
        // Its parent's next snapshot says so; the worker runs untraced,
        // and its copy of the parent's descriptor is closed.
        STATE.store(STOPPED, Ordering::Release);
        lock(&session.output).writer = None;
        return;
    }
    session.recorder.forked();
    if worker {
        session.multiprocessing_child.store(MultiprocessingChild::No as u8, Ordering::Relaxed);
        session.become_worker(parents_page);
    } else if let Some((kind, parent)) = multiprocessing_child.zip(parents_page) {
        // Its own slices, until it follows its parent's epochs, start at its
        // fork: the inherited one would end with its parent's, just before
        // the child sees the parent's epoch, and cut an empty epoch.
        session.restart_time_slice();
        let followed = session.epochs_closed_at_fork.load(Ordering::Relaxed);
        session.follow_multiprocessing_parent(kind, parent, followed);
    }
    // What this process closes is for its own children to follow, and its
    // workers are its own to count.
    session.share_counters_with_forks();
    session.untraced_workers_noted.store(false, Ordering::Relaxed);
    let parent = session.pid.swap(sys::pid(), Ordering::Relaxed);
    let mut output = lock(&session.output);
    // The child writes a file of its own, opened when it first has something
    // to say; the parent's descriptor is closed here, in the child only.
    output.writer = None;
    output.forked_from = Some(parent);
    // Programs this child execs name the parent's image as theirs (setting
    // the environment here, between fork and exec, is not safe): it is an
    // ancestor all the same.
    output.parent_image = std::mem::replace(&mut output.image, image_name());
    output.next_is_full = true;
    output.modules.forget_written();
    // The child's own allocations start a new epoch; what it inherited stays
    // out of its trace (it is in the parent's).
    output.first_birth_epoch = session.epoch.fetch_add(1, Ordering::Relaxed) + 1;
}

impl Session {
    /// The calling thread's stack, native and Python frames, as a stack id;
    /// the stack without frames should the thread's room be taken (see
    /// [`capture_room`]).
    fn capture_stack(&self, kind: StackKind, entry: Entry) -> Result<StackId, OutOfMemory> {
        let captured = capture_room::with_room(|stack, python_frames| {
            unwind::capture(self.own_code, entry, stack);
            self.python.capture(python_frames);
            // What the capture belongs to is born in the epoch a pass it starts opens.
            self.see_loader_frames(python_frames.loader_frames());
            self.stacks.intern_capture(kind, stack, python_frames.words())
        });
        captured.unwrap_or_else(|| self.stacks.intern(kind, &[], &[]))
    }

    /// `read` applied to the calling thread's Python frames; `None` should
    /// the thread's room be taken (see [`capture_room`]).
    fn with_python_frames<R>(&self, read: impl FnOnce(&PyStack) -> R) -> Option<R> {
        capture_room::with_room(|_, python_frames| {
            self.python.capture(python_frames);
            read(python_frames)
        })
    }

    /// Makes this forked DataLoader worker follow the epochs of its
    /// parent, whose shared page is `parent`.
    fn become_worker(&self, parent: Option<SharedEpochs>) {
        self.stop_cutting_own_epochs();
        if !self.config.asks_for_time_slices() {
            // Unless time slices were asked for, it closes an epoch each time
            // its parent does: a persistent worker (one that lives through
            // many passes) has its growth compared epoch by epoch, a worker
            // of one pass has its exit snapshot.
            self.watch_parents_epochs(parent, self.epochs_closed_at_fork.load(Ordering::Relaxed));
        }
    }

    /// A worker cuts no epochs of its own.
    fn stop_cutting_own_epochs(&self) {
        // A DataLoader worker's epochs are its parent's; the default time
        // slices, inherited from a parent that had not yet seen its loader
        // repeat, would cut the worker's trace by how long it ran.
        self.end_default_time_slices();
        // Nor does it start passes: the parent's loader frames stay on its
        // stack for its whole life, and glancing for them at each of its
        // allocations would only cost.
        self.auto_epochs.stop();
    }

    /// Closes an epoch each time the parent, which counts the epochs it
    /// closed at `parent`, closes one past the `followed` first.
    /// Recording each of a worker's allocations, when the user let the
    /// warm-up be sampled, would cost as much again as the parent's own
    /// recording: its samples show what grows in it by tens of KiB an
    /// epoch and more.
    fn watch_parents_epochs(&self, parent: Option<SharedEpochs>, followed: u32) {
        self.parent_epochs_followed.store(followed, Ordering::Relaxed);
        if let Some(parent) = parent {
            self.parents_recuts.start(parent);
        }
        self.parents_shared.set(parent.map(SharedEpochs::words));
        if self.config.sample_warm_up_only {
            self.recorder.sample_for_life();
        }
    }

    /// As it starts, in a process that Python's multiprocessing started as
    /// a fresh interpreter, when it finds its parent's counters at `parents`
    /// (see [`sys::parents_counters`]). A spawned child (a DataLoader's
    /// workers with `multiprocessing_context="spawn"`, a spawned `Pool`'s,
    /// but also the ranks of `torch.multiprocessing.spawn`, which run
    /// training loops of their own) follows them as
    /// [`Session::follow_multiprocessing_parent`] says. A forkserver keeps
    /// them for the children it forks (it only waits for requests itself).
    /// Otherwise the process cuts its own epochs.
    fn follow_starting_parent(&self, parents: Option<sys::SharedCountersAddress>) {
        let Some(started) = python::started_as(&self.command_line) else { return };
        let Some(parent) = parents.and_then(sys::parents_counters).map(SharedEpochs::new) else { return };
        match started {
            Started::Spawned => {
                self.follow_multiprocessing_parent(MultiprocessingChild::Spawned, parent, parent.closed())
            }
            Started::ForkServer => self.forkserver_parent.set(Some(parent.words())),
        }
    }

    /// In a child that Python's multiprocessing started, spawned or forked
    /// (a `Pool`'s workers, a `Process`), whose parent counts the epochs it
    /// shared page is `parent`, `followed` of its epochs closed before it started:
    /// unless time slices were asked for, it
    /// watches that count, sampled for life, and becomes a worker following
    /// its parent's epochs at the first its parent closes (see
    /// [`Session::follow_parent_epoch`]). Until then it also cuts its own
    /// epochs as any process does, and for good if it closes one by a mark
    /// or a DataLoader pass first (a rank, whose parent waits for it).
    fn follow_multiprocessing_parent(&self, child: MultiprocessingChild, parent: SharedEpochs, followed: u32) {
        if self.config.asks_for_time_slices() {
            return;
        }
        self.multiprocessing_child.store(child as u8, Ordering::Relaxed);
        self.multiprocessing_settled.store(false, Ordering::Relaxed);
        self.watch_parents_epochs(Some(parent), followed);
    }

    /// What started this process, as far as following its parent's epochs goes.
    fn multiprocessing_child(&self) -> MultiprocessingChild {
        match self.multiprocessing_child.load(Ordering::Relaxed) {
            x if x == MultiprocessingChild::Spawned as u8 => MultiprocessingChild::Spawned,
            x if x == MultiprocessingChild::Forked as u8 => MultiprocessingChild::Forked,
            x if x == MultiprocessingChild::ForkServed as u8 => MultiprocessingChild::ForkServed,
            _ => MultiprocessingChild::No,
        }
    }

    /// In a multiprocessing child watching its parent's epochs, before it
    /// closes one of its own (`cause`): a mark or a DataLoader pass makes it
    /// stop watching, and sample only its warm-up as any process does.
    fn settle_multiprocessing_child_on_own_epoch(&self, cause: EpochCause) {
        if !matches!(cause, EpochCause::Mark | EpochCause::Auto)
            || self.multiprocessing_child() == MultiprocessingChild::No
            || self.multiprocessing_settled.swap(true, Ordering::Relaxed)
        {
            return;
        }
        self.parents_shared.set(None);
        self.recorder.sample_warm_up_only();
    }

    /// As it starts: gives this process the counters its forks share and, in
    /// a Python process, puts them in a page that the children it spawns can
    /// reach too, whose address it hands down in the environment. Falls back
    /// to counters for its forks only.
    fn share_counters_with_descendants(&self) {
        let shared = if self.python.present() { sys::counters_shared_with_descendants() } else { None };
        let Some((counters, address)) = shared else {
            std::env::remove_var(PARENT_COUNTERS_VAR);
            self.share_counters_with_forks();
            return;
        };
        self.shared.set(Some(counters));
        std::env::set_var(PARENT_COUNTERS_VAR, address.to_env());
        let _ = self.counters_address.set(address);
    }

    /// Gives this process counters of its own that its forked children
    /// share: the epochs it closes, the DataLoader workers it forks.
    fn share_counters_with_forks(&self) {
        let counters = sys::counters_shared_with_forks();
        self.shared.set(counters);
    }

    /// Called in a newly forked DataLoader worker, or child of Python's
    /// multiprocessing: whether it is one of the workers of its parent that
    /// write traces ([`Config::worker_traces`]).
    fn takes_a_worker_trace(&self) -> bool {
        let (Some(limit), Some(shared)) = (self.config.worker_traces, self.shared()) else { return true };
        shared.workers_forked().fetch_add(1, Ordering::Relaxed) < limit
    }

    /// The notice, once, that this process's DataLoader workers past the
    /// limit write no trace, when some did not.
    fn untraced_workers_notice(&self) -> Option<Notice> {
        let limit = self.config.worker_traces?;
        let forked = self.shared()?.workers_forked().load(Ordering::Relaxed);
        if forked <= limit || self.untraced_workers_noted.swap(true, Ordering::Relaxed) {
            return None;
        }
        let text = untraced_workers_words(limit);
        Some(Notice { elapsed_ns: self.elapsed_ns(), text })
    }

    /// At exit, the notice that another loop's passes repeated after the
    /// marking loop's last, too soon to take the epochs over: they ran in
    /// the last epochs, the exit's among them, which the analysis leaves out.
    fn untaken_loop_notice(&self) -> Option<Notice> {
        let passes = self.auto_epochs.passes_after_the_marking_loop();
        (passes >= 2).then(|| Notice {
            elapsed_ns: self.elapsed_ns(),
            text: format!(
                "another DataLoader loop made {passes} passes after the last pass of the loop that closed the epochs, too soon to take the epochs over (that loop idle for {}): they ran in the last epoch, which the analysis leaves out; call tracer_mark(label) at the end of each epoch to see what they keep",
                marking_loop_idle_words()
            ),
        })
    }

    /// At exit, the notice that passes over DataLoaders were seen but none
    /// repeated, unless Python's objects were traced: a loader that keeps
    /// its workers and does not shuffle may be why.
    fn unrepeated_passes_notice(&self) -> Option<Notice> {
        if self.python.traces_objects() || !self.auto_epochs.saw_no_repeated_pass() {
            return None;
        }
        let text = format!(
            "{}, so none closed an epoch: each loader ran once, or a loader keeps its workers (persistent_workers=True) and does not shuffle, whose later passes make only Python objects ({PYTHON_OBJECTS_VAR}=1 traces them and lets those passes be seen; tracer_mark marks epochs in any job)",
            trace_format::UNREPEATED_PASSES_NOTICE
        );
        Some(Notice { elapsed_ns: self.elapsed_ns(), text })
    }

    /// When the pass closing epoch `closing` ends the first round over
    /// several loaders: the epochs cut inside that round are not whole.
    fn pass_rounds_notice(&self, closing: u32) -> Option<Notice> {
        let loaders = self.auto_epochs.take_rounds_found()?;
        let why = format!(
            "the passes from one place go round {loaders} loaders, and each pass over the first closes an epoch; the epochs before, from its first round on, each held part of that round (epoch {closing} its last loader's pass)"
        );
        Some(self.shared_recut_notice(Recut::PassRounds, closing, &why))
    }

    /// When the pass closing epoch `closing` is the first of another loop's
    /// to mark the epochs: of an outer loop (the epochs the inner loop closed
    /// before were parts of one of its passes), or of a loop that repeated
    /// after the marking one stopped.
    fn takeover_notice(&self, closing: u32) -> Option<Notice> {
        let (recut, why) = match self.auto_epochs.take_takeover()? {
            Takeover::OuterLoop => (
                Recut::OuterLoop,
                format!("another loop's passes began inside each pass of this one (an evaluation every N steps of training), so this loop's passes close the epochs from epoch {closing} on; the epochs before, from the first of the other loop's, each held part of this loop's first pass"),
            ),
            Takeover::MarkingLoopStopped => (
                Recut::MarkingLoopStopped,
                format!(
                    "the loop whose passes closed them before made none for {}, while this one repeated (training, then fine-tuning or testing on another loader); epoch {closing} held the end of the one and the start of the other",
                    marking_loop_idle_words()
                ),
            ),
        };
        Some(self.shared_recut_notice(recut, closing, &why))
    }

    /// The notice of `recut` (`why` it came), which the pass closing epoch
    /// `closing` made: the epochs are whole from the next on, as this
    /// process shares with the workers following its epochs.
    fn shared_recut_notice(&self, recut: Recut, closing: u32, why: &str) -> Notice {
        if let Some(shared) = self.shared() {
            shared.share_recut(recut, closing + 1);
        }
        self.recut_notice(recut, closing, why)
    }

    /// The notice that, after `recut`, the epochs are whole from the one
    /// after `closing` on; `why` follows.
    fn recut_notice(&self, recut: Recut, closing: u32, why: &str) -> Notice {
        let text = format!("{}{}: {why}", recut.notice_prefix(), closing + 1);
        Notice { elapsed_ns: self.elapsed_ns(), text }
    }

    /// In a worker following its parent's epochs, as it closes `closing`:
    /// the notice of a recut of the parent's that it found, naming the
    /// first of its own epochs that began at the parent's first whole one
    /// or later, its next (the analysis of the worker's trace starts there).
    fn parents_recut_notice(&self, closing: u32, found: &ParentsRecut) -> Notice {
        let why = format!(
            "this worker follows its parent's epochs, whose trace says so from the parent's epoch {} on, where the worker's epoch {} is the first to begin",
            found.parents_first_whole,
            closing + 1
        );
        self.recut_notice(found.recut, closing, &why)
    }

    /// The page of counters this process shares with its descendants.
    fn shared(&self) -> Option<SharedEpochs> {
        self.shared.get().map(SharedEpochs::new)
    }

    /// In a worker following its parent's epochs, its parent's page.
    fn parents_shared(&self) -> Option<SharedEpochs> {
        self.parents_shared.get().map(SharedEpochs::new)
    }

    /// The page whose epochs this process's forked children follow: its
    /// own, or in a forkserver that of the process that started it.
    fn epochs_forks_follow(&self) -> Option<SharedEpochs> {
        self.forkserver_parent.get().map(SharedEpochs::new).or_else(|| self.shared())
    }

    /// At the end of a process whose warm-up never ended (it closed no
    /// epoch): the sampling setting promises estimates for the warm-up
    /// only, and here that was all of it.
    fn unended_warm_up_notice(&self, cause: EpochCause) -> Option<Notice> {
        if !self.config.sample_warm_up_only || self.recorder.sampling().is_none() || self.recorder.samples_for_life() {
            return None;
        }
        let text = format!(
            "no epoch closed before the {}, so the warm-up's sampling lasted until then: every count and byte of this trace up to here is an estimate ({WARM_UP_SAMPLE_VAR}=0 records every allocation)",
            cause.name()
        );
        Some(Notice { elapsed_ns: self.elapsed_ns(), text })
    }

    /// Whether this DataLoader worker's parent closed an epoch the worker
    /// has not followed yet. Two loads of words that change once an epoch:
    /// it runs at every allocation, so that a worker allocating little
    /// still follows each epoch.
    #[inline]
    fn parent_closed_epoch(&self) -> bool {
        self.parents_shared()
            .is_some_and(|parent| parent.closed() != self.parent_epochs_followed.load(Ordering::Relaxed))
    }

    /// In a DataLoader worker: closes an epoch when its parent closed one
    /// since the worker last allocated (one for several, should the worker
    /// have allocated nothing in between).
    fn follow_parent_epoch(&self) {
        let Some(parent) = self.parents_shared() else { return };
        let closed = parent.closed_with_recuts();
        let followed = self.parent_epochs_followed.load(Ordering::Relaxed);
        if closed != followed
            && self
                .parent_epochs_followed
                .compare_exchange(followed, closed, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            if self.multiprocessing_child() != MultiprocessingChild::No
                && !self.multiprocessing_settled.swap(true, Ordering::Relaxed)
            {
                // A multiprocessing child's first: from now on it is a worker.
                self.stop_cutting_own_epochs();
            }
            // Where the parent's analysis starts, its own starts too.
            let recuts = self.parents_recuts.since(parent);
            // Labelled by the parent's index of the epoch it closed last, as
            // its own table numbers it (`closed` counts them from one).
            self.close_epoch_telling(EpochCause::Parent, format!("parent's epoch {}", closed - 1), &recuts);
        }
    }

    fn elapsed_ns(&self) -> u64 {
        sys::monotonic_ns().saturating_sub(self.started_ns)
    }

    /// At this thread's allocation number `count`, due to look at the
    /// clock: whether the time slice is over, and when the thread looks next.
    fn look_at_clock(&self, count: u32) -> bool {
        let deadline = self.slice_deadline_ns.load(Ordering::Relaxed);
        let now = (deadline != 0).then(sys::monotonic_ns);
        thread_state::clock_checked(count, now, CLOCK_CHECK_NS, CLOCK_CHECK_MOST);
        now.is_some_and(|now| now >= deadline)
    }

    /// Whether the time slice is over by the coarse clock (a few ns to read,
    /// up to a clock tick behind).
    fn slice_over_coarsely(&self) -> bool {
        let deadline = self.slice_deadline_ns.load(Ordering::Relaxed);
        deadline != 0 && sys::coarse_monotonic_ns() >= deadline
    }

    fn close_slice_if_due(&self) {
        let deadline = self.slice_deadline_ns.load(Ordering::Relaxed);
        if deadline == 0 {
            return;
        }
        let now = sys::monotonic_ns();
        let Some(seconds) = self.config.epoch_seconds else { return };
        if now < deadline {
            return;
        }
        if self.python.finalizing() {
            // What the interpreter frees as it shuts down belongs to the exit's
            // epoch: a slice cut there would end with the program's memory
            // freed, and the analysis would find no survivors.
            self.slice_deadline_ns.store(0, Ordering::Relaxed);
            return;
        }
        let unseen_passes = self.unseen_pass_slice_ns.load(Ordering::Relaxed);
        if unseen_passes != 0 && self.auto_epochs.another_loop_passes(unseen_passes.saturating_mul(2)) {
            // Passes are seen, of a loop that takes the epochs over should it repeat.
            let _ = self.slice_deadline_ns.compare_exchange(
                deadline,
                now + unseen_passes,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return;
        }
        let next = match unseen_passes {
            0 => slice_deadline(Some(seconds), now),
            slice => now + slice,
        };
        if self.slice_deadline_ns.compare_exchange(deadline, next, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            let label = match unseen_passes {
                0 => slice_label(now - self.started_ns, seconds),
                _ => format!("{} (no pass seen)", slice_label(now - self.started_ns, 1.0)),
            };
            self.close_epoch(EpochCause::Timer, label);
        }
    }

    /// Whether an allocation that is not sampled must walk the Python frames
    /// to see a DataLoader pass start. A pass starts with a handful of
    /// allocations only, so every one glances at its frames' code pointers,
    /// and the first of a pass walks them to learn where the pass starts from.
    #[inline]
    fn loader_walk_due(&self, count: u32) -> bool {
        if !self.auto_epochs.watching() {
            return false;
        }
        match self.python.glance_for_data_loader() {
            Glance::Unlearned => count & LEARNING_WALK_MASK == 0,
            Glance::Unknown => false,
            Glance::Absent => {
                self.auto_epochs.walked(LoaderFrames::Absent, &|_, _| true);
                false
            }
            Glance::Present => self.auto_epochs.outside_pass(),
        }
    }

    /// Starts the current time slice now, if slices are cut.
    fn restart_time_slice(&self) {
        if self.slice_deadline_ns.load(Ordering::Relaxed) != 0 {
            let deadline = slice_deadline(self.config.epoch_seconds, sys::monotonic_ns());
            self.slice_deadline_ns.store(deadline, Ordering::Relaxed);
        }
    }

    /// Stops the time slices, unless TRACER_EPOCH_SECONDS asked for them.
    fn end_default_time_slices(&self) {
        if !self.config.epoch_seconds_explicit {
            self.slice_deadline_ns.store(0, Ordering::Relaxed);
        }
    }

    /// Closes the epoch when a walk shows the training loader's next pass starting.
    fn see_loader_frames(&self, frames: LoaderFrames) {
        let alive = |other, loader| self.python.alive_as(other, loader);
        let Some(cut) = self.auto_epochs.walked(frames, &alive) else { return };
        let qualname = |code| self.python.code_records(&[code]).pop().map(|record| record.qualname);
        self.close_epoch(EpochCause::Auto, cut.label(&qualname));
        self.watch_for_unseen_passes(cut.taken_over.is_some());
    }

    /// After a pass closed the epoch: the job's passes mark its epochs, and
    /// time slices would only cut them up, unless asked for. But a pass is
    /// seen by an allocation through malloc as it starts, and one that
    /// starts with small objects alone (persistent workers over an
    /// unshuffled dataset) goes unseen, by chance after some that were
    /// seen: the run would be one long epoch. Slices come back while no
    /// pass is seen for three times the longest time between two that were
    /// (the default slice before there were two, 5 s at least), that long.
    /// A loop that took the epochs over (`new_loop`) has a pace of its own.
    fn watch_for_unseen_passes(&self, new_loop: bool) {
        // Slices asked for go on as asked; none (TRACER_EPOCH_SECONDS=0), none.
        let Some(default_slice) = self.config.epoch_seconds.filter(|_| !self.config.epoch_seconds_explicit) else {
            return;
        };
        let now = sys::monotonic_ns();
        let last = self.last_pass_ns.swap(now, Ordering::Relaxed);
        if new_loop {
            self.longest_pass_gap_ns.store(0, Ordering::Relaxed);
        } else if last != 0 {
            self.longest_pass_gap_ns.fetch_max(now.saturating_sub(last), Ordering::Relaxed);
        }
        let slice = match self.longest_pass_gap_ns.load(Ordering::Relaxed) {
            0 => (default_slice * 1e9) as u64,
            longest => marking_loop_idle_ns(longest),
        };
        self.unseen_pass_slice_ns.store(slice, Ordering::Relaxed);
        self.slice_deadline_ns.store(now + slice, Ordering::Relaxed);
    }

    /// Closes the current epoch, on a stack with room for a snapshot (see
    /// [`own_stack::with_room`]): a hook may run on a coroutine's stack or
    /// an alternate signal stack.
    /// The program's errno is left as it was: the snapshot's reads of /proc
    /// and writes may fail where the program's call succeeded (every
    /// descriptor taken, /proc absent).
    fn close_epoch(&self, cause: EpochCause, label: String) {
        self.close_epoch_telling(cause, label, &[]);
    }

    /// Closes an epoch, in a worker telling the recuts of its parent's
    /// epochs that it found as it followed the parent's.
    fn close_epoch_telling(&self, cause: EpochCause, label: String, parents_recuts: &[ParentsRecut]) {
        sys::keeping_errno(|| own_stack::with_room(|| self.close_epoch_here(cause, label, parents_recuts)));
    }

    fn close_epoch_here(&self, cause: EpochCause, label: String, parents_recuts: &[ParentsRecut]) {
        self.settle_multiprocessing_child_on_own_epoch(cause);
        let mut output = lock(&self.output);
        if output.writer.is_none() && !self.open_child_file(&mut output) {
            return;
        }
        // An exec's snapshot leaves the epoch open: should the exec fail,
        // the process goes on in it, and the next snapshot takes its place.
        let opens_next = u32::from(cause != EpochCause::Exec);
        let closing = self.epoch.fetch_add(opens_next, Ordering::Relaxed);
        // The first epoch, whatever closes it, is the warm-up: the analysis never
        // ranks what it allocated.
        let warm_up_ended =
            self.config.sample_warm_up_only && !cause.ends_the_process() && self.recorder.end_sampling();
        let scope = Scope {
            current_epoch: closing + opens_next,
            everything: output.next_is_full,
            first_birth_epoch: output.first_birth_epoch,
        };
        // Encoded as they are collected, with their stacks kept apart for
        // the nodes that must precede them.
        let mut counters = EncodedCounters::default();
        let mut stacks = Vec::new();
        let mut take = |c: SiteCounters| {
            stacks.push(c.stack);
            counters.push(&c);
        };
        let (Some(heap), Some(mapped)) = (
            room::noted(self.recorder.collect(scope, &mut take)),
            room::noted(self.mappings.collect(scope, &mut take)),
        ) else {
            return;
        };
        stacks.sort_unstable();
        stacks.dedup();
        // Libraries unloaded before the stacks that ran through them are
        // written must still be named then.
        output.modules.refresh(self.stacks.nodes_made());
        let mut records: Vec<Record> = Vec::new();
        if warm_up_ended {
            let objects = if self.python.traces_objects() { ", Python's objects still sampled" } else { "" };
            let text = format!(
                "{}{closing}: every allocation is recorded from epoch {} on{objects}; the warm-up's counts and bytes are estimates ({WARM_UP_SAMPLE_VAR}=0 records it all)",
                trace_format::WARM_UP_ENDED_NOTICE,
                closing + 1
            );
            records.push(Record::Notice(Notice { elapsed_ns: self.elapsed_ns(), text }));
        }
        records.extend(self.untraced_workers_notice().map(Record::Notice));
        if cause == EpochCause::Auto {
            records.extend(self.pass_rounds_notice(closing).map(Record::Notice));
            records.extend(self.takeover_notice(closing).map(Record::Notice));
        }
        records.extend(parents_recuts.iter().map(|recut| Record::Notice(self.parents_recut_notice(closing, recut))));
        if cause.ends_the_process() {
            records.extend(self.unrepeated_passes_notice().map(Record::Notice));
            records.extend(self.untaken_loop_notice().map(Record::Notice));
            records.extend(self.unended_warm_up_notice(cause).map(Record::Notice));
        }
        // The first snapshot of a process importing torch names millions of
        // nodes: they go out in records of a bounded size as they are found,
        // rather than all held (and then all encoded) at once.
        let mut nodes = Vec::new();
        for &stack in &stacks {
            self.stacks.unwritten_path(stack, &mut output.written, &mut nodes);
            if nodes.len() >= NODES_PER_RECORD {
                self.push_nodes(&mut output, &mut records, std::mem::take(&mut nodes));
                if !self.write(&mut output, &std::mem::take(&mut records)) {
                    return;
                }
            }
        }
        if !nodes.is_empty() {
            self.push_nodes(&mut output, &mut records, nodes);
        }
        let snapshot = Snapshot {
            epoch: closing,
            cause,
            label,
            elapsed_ns: self.elapsed_ns(),
            rss_bytes: sys::rss_bytes(),
            // What a forked child copied of its parent's memory shows here,
            // not in its RSS, which counted the shared pages from the fork on.
            // Not at exit: the analysis compares closed epochs only, the
            // kernel walks every page table entry for it (milliseconds in a
            // process of a GB), and a DataLoader worker's parent waits for
            // its exit: reading it there took 90 ms of a 6 s PyTorch loop's
            // CPU time, on the path to each epoch's first batch.
            private_dirty_bytes: if output.forked_from.is_some() && !cause.ends_the_process() {
                sys::private_dirty_bytes()
            } else {
                0
            },
            allocator_free_bytes: real_alloc::allocator_free_bytes(self.other_allocator_free_bytes),
            rss_file_bytes: sys::rss_file_bytes(),
            heap_live_bytes: heap.live_bytes,
            heap_live_count: heap.live_count,
            mapped_live_bytes: mapped.live_bytes,
            mapped_live_count: mapped.live_count,
            tracer_bytes: real_alloc::tracer_bytes(),
            full: output.next_is_full,
            counters: Vec::new(),
        };
        output.next_is_full = false;
        // A running process has some memory resident: 0 is a read that failed.
        if snapshot.rss_bytes == 0 && !self.unread_rss_noted.swap(true, Ordering::Relaxed) {
            let text = format!(
                "the RSS could not be read from /proc at epoch {closing}'s snapshot (every descriptor taken, /proc not mounted, or a sandbox refusing open): the RSS and file pages read 0 B at the snapshots where it could not, and the RSS figures of the verdict are wrong there"
            );
            records.push(Record::Notice(Notice { elapsed_ns: self.elapsed_ns(), text }));
        }
        let written = self.write_with(&mut output, |writer| {
            records.iter().for_each(|record| writer.append(record));
            writer.write_snapshot(&snapshot, &counters)
        });
        if written && !cause.ends_the_process() {
            if let Some(shared) = self.shared() {
                shared.count_closed();
            }
        }
    }

    /// A forked child's own file: header, process, every module.
    fn open_child_file(&self, output: &mut Output) -> bool {
        let candidates = self.config.output_candidates(true, sys::pid());
        match TraceWriter::create(candidates, None) {
            Ok(writer) => {
                output.writer = Some(writer);
                output.written.clear();
                output.written_codes.clear();
                self.write_preamble(output)
            }
            Err((path, err)) => {
                self.stop(&format!(
                    "cannot create the trace file {} for forked process {}: {err}",
                    path.display(),
                    sys::pid()
                ));
                false
            }
        }
    }

    /// The records every trace file starts with.
    fn write_preamble(&self, output: &mut Output) -> bool {
        let path = output.writer.as_ref().map(|w| w.path());
        let mut settings = vec![
            ("output".to_string(), path.map(|path| path.display().to_string()).unwrap_or_default()),
            (trace_format::EPOCHS_SETTING.to_string(), self.epochs_setting()),
            (trace_format::MAX_FRAMES_SETTING.to_string(), unwind::MAX_FRAMES.to_string()),
            (trace_format::SAMPLING_SETTING.to_string(), self.sampling_setting()),
        ];
        let kept_other_file = output.writer.as_ref().and_then(|w| w.kept_other_file());
        if let Some(kept) = kept_other_file.filter(|_| output.forked_from.is_none()) {
            settings.push(("not_overwritten".to_string(), format!("{}, which is not a trace file", kept.display())));
        } else if path.is_some_and(|path| named_output_in_use(&self.config, output.forked_from, path)) {
            let why = format!(
                "{}, the trace of another traced process started beside this one",
                self.config.base_output.display()
            );
            settings.push((NAMED_OUTPUT_IN_USE_SETTING.to_string(), why));
        }
        if let Some(allocator) = &self.other_allocator {
            settings.push((ALLOCATOR_SETTING.to_string(), allocator.clone()));
        }
        if !self.config.run.is_empty() {
            settings.push((RUN_SETTING.to_string(), self.config.run.clone()));
        }
        let first_of_run = !self.config.is_descendant && output.forked_from.is_none();
        if let Some(limit) = self.config.exec_traces.filter(|_| first_of_run) {
            settings.push((EXEC_TRACE_LIMIT_SETTING.to_string(), limit.to_string()));
        }
        settings.push((IMAGE_SETTING.to_string(), output.image.clone()));
        if let Some(pipes) = sys::stdio_pipes().setting() {
            settings.push((trace_format::STDIO_PIPES_SETTING.to_string(), pipes));
        }
        if !output.parent_image.is_empty() {
            settings.push((PARENT_IMAGE_SETTING.to_string(), output.parent_image.clone()));
        }
        settings.extend(self.config.rank.iter().cloned());
        settings.extend(self.python.settings().iter().cloned());
        settings.extend(self.config.warnings.iter().map(|w| (trace_format::WARNING_SETTING.to_string(), w.clone())));
        let process = Process {
            pid: sys::pid(),
            forked_from: output.forked_from,
            start_unix_ns: sys::unix_ns().saturating_sub(self.elapsed_ns()),
            exe: std::fs::read_link("/proc/self/exe").map(|p| p.display().to_string()).unwrap_or_default(),
            cmdline: self.command_line.clone(),
            settings,
        };
        self.write(output, &[Record::Process(process)])
    }

    /// Appends `nodes` as a record, after the records of the modules and
    /// the code objects they name that this file lacks. Both go out with
    /// the first stack that names them: a DataLoader worker's file holds
    /// the few its own stacks name, not the hundreds of libraries and the
    /// thousands of code objects (megabytes of line tables) of a process
    /// that imported torch.
    fn push_nodes(&self, output: &mut Output, records: &mut Vec<Record>, nodes: Vec<StackNode>) {
        let return_addresses: Vec<u64> = nodes
            .iter()
            .filter_map(|node| match node.frame {
                Frame::Native(address) => Some(address),
                _ => None,
            })
            .collect();
        records.extend(output.modules.holding(&return_addresses).into_iter().map(Record::Module));
        let named: Vec<u64> = nodes
            .iter()
            .filter_map(|node| match node.frame {
                Frame::Python(frame) => Some(frame.code),
                _ => None,
            })
            .filter(|&code| output.written_codes.insert(code as u32))
            .collect();
        records.extend(self.python.code_records(&named).into_iter().map(Record::PyCode));
        records.push(Record::StackNodes(StackNodes { nodes }));
    }

    /// Writes the stack nodes not yet written, made after the first
    /// `nodes_before`, whose return addresses lie in `segments`, each with
    /// the unwritten nodes above it and the records of their modules.
    fn write_stacks_through(&self, output: &mut Output, segments: &[(u64, u64)], nodes_before: u32) {
        let mut nodes = Vec::new();
        self.stacks.unwritten_through(segments, nodes_before, &mut output.written, &mut nodes);
        let mut records = Vec::new();
        for chunk in nodes.chunks(NODES_PER_RECORD) {
            self.push_nodes(output, &mut records, chunk.to_vec());
        }
        if !records.is_empty() {
            self.write(output, &records);
        }
    }

    /// How allocations are recorded, as the Process record says.
    fn sampling_setting(&self) -> String {
        let Some(mean_bytes) = self.config.sample_bytes else { return "every allocation recorded".to_string() };
        let allocations = self.allocation_sampling_setting(mean_bytes);
        if self.python.traces_objects() && self.config.sample_warm_up_only {
            format!("{allocations}; Python's objects sampled at that rate for the whole run ({PYTHON_OBJECTS_VAR}=1)")
        } else {
            allocations
        }
    }

    fn allocation_sampling_setting(&self, mean_bytes: u64) -> String {
        let poisson = format!("{}{mean_bytes} bytes on average", trace_format::SAMPLED_BY_BYTES);
        match (self.config.sample_warm_up_only, self.recorder.sampling().is_some()) {
            (false, _) => format!("{poisson}{}; counts and bytes are estimates", trace_format::SAMPLED_WHOLE_RUN),
            (true, true) if self.recorder.samples_for_life() => format!(
                "{poisson} for the whole life of this {} ({WARM_UP_SAMPLE_VAR}=0 records it all){}; counts and bytes are estimates",
                self.worker_kind(),
                if self.multiprocessing_child() != MultiprocessingChild::No {
                    ", unless it closes an epoch by a mark or a DataLoader pass before its parent closes one: then until that epoch, and every allocation after it"
                } else {
                    ""
                }
            ),
            (true, true) => format!(
                "{poisson}{} (the first epoch) ends, then every allocation ({WARM_UP_SAMPLE_VAR}=0 records it all); the warm-up's counts and bytes are estimates",
                trace_format::SAMPLED_UNTIL_WARM_UP_ENDS
            ),
            (true, false) => format!(
                "every allocation recorded since the warm-up (the first epoch) ended; the warm-up was sampled, {poisson} ({WARM_UP_SAMPLE_VAR}=0 records it all)"
            ),
        }
    }

    /// What kind of worker follows its parent's epochs.
    fn worker_kind(&self) -> &'static str {
        match self.multiprocessing_child() {
            MultiprocessingChild::Spawned => "spawned multiprocessing child",
            MultiprocessingChild::Forked => "forked multiprocessing child",
            MultiprocessingChild::ForkServed => {
                "multiprocessing child of a forkserver (its parent here: the process that started the server)"
            }
            MultiprocessingChild::No => "forked DataLoader worker",
        }
    }

    /// How epochs are cut, as the Process record says.
    fn epochs_setting(&self) -> String {
        if self.parents_shared().is_some() {
            let from_first = if self.multiprocessing_child() != MultiprocessingChild::No {
                " from the first its parent closes after it started; until then it cuts its own, and keeps to them if it closes one by a mark or a DataLoader pass first"
            } else {
                ""
            };
            return format!(
                "{}: this {} closes one each time its parent does{from_first}",
                trace_format::FOLLOWS_PARENTS_EPOCHS,
                self.worker_kind()
            );
        }
        let python = self.python.walks_frames();
        let passes = match (python, self.config.auto_epochs) {
            (false, _) => "",
            (true, true) => "; DataLoader passes until the first mark",
            (true, false) => &format!("; DataLoader passes off ({AUTO_EPOCHS_VAR}=0)"),
        };
        let slices_end =
            if python && self.config.auto_epochs { "the first mark or DataLoader pass" } else { "the first mark" };
        match (self.config.epoch_seconds, self.config.epoch_seconds_explicit) {
            (None, _) => format!("marks{passes}; no time slices (TRACER_EPOCH_SECONDS=0)"),
            (Some(s), true) => format!("marks{passes}; {}{s} s", trace_format::TIME_SLICES_OF),
            (Some(s), false) => {
                let unseen =
                    if python && self.config.auto_epochs { trace_format::SLICES_WHILE_PASSES_UNSEEN } else { "" };
                format!("marks{passes}; {}{s} s until {slices_end}{unseen}", trace_format::TIME_SLICES_OF)
            }
        }
    }

    /// Appends and flushes; on failure tracing stops and the program goes on.
    fn write(&self, output: &mut Output, records: &[Record]) -> bool {
        self.write_with(output, |writer| {
            records.iter().for_each(|record| writer.append(record));
            writer.flush()
        })
    }

    /// Runs `write` on the trace file; a failure stops recording.
    fn write_with(&self, output: &mut Output, write: impl FnOnce(&mut TraceWriter) -> std::io::Result<()>) -> bool {
        let Some(writer) = output.writer.as_mut() else { return false };
        match write(writer) {
            Ok(()) => true,
            Err(err) => {
                let message = format!("cannot write the trace file {}: {err}", writer.path().display());
                output.writer = None;
                self.stop(&message);
                false
            }
        }
    }

    /// [`Session::stop`], and says why in the trace too, where the trace
    /// goes no further: a trace that stops before its first epoch closed
    /// is then reported with the reason, not taken for a killed process's.
    /// Called with no lock of the session held.
    fn stop_saying_so_in_trace(&self, why: &str) {
        if STATE.load(Ordering::Acquire) == RECORDING {
            // After an internal error the writer may fail the same way: a
            // panic must not unwind into the program.
            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let mut output = lock(&self.output);
                let text = format!("{why}{}", trace_format::RECORDING_STOPPED_HERE);
                self.write(&mut output, &[Record::Notice(Notice { elapsed_ns: self.elapsed_ns(), text })]);
            }));
        }
        self.stop(why);
    }

    /// Stops recording for good and says why, once.
    fn stop(&self, why: &str) {
        STATE.store(STOPPED, Ordering::Release);
        if !self.stop_reported.swap(true, Ordering::Relaxed) {
            sys::print_stderr(&format!("tracer: {why}; recording stopped, the program continues\n"));
        }
    }
}

/// When a time slice of `seconds` starting at `now_ns` ends; 0 (never)
/// without slices.
fn slice_deadline(seconds: Option<f64>, now_ns: u64) -> u64 {
    seconds.map_or(0, |seconds| now_ns + (seconds * 1e9) as u64)
}

/// The label of a time slice ending `elapsed_ns` into the run, with as many
/// decimals as the slice length `seconds` has (up to three): slices of 10 s
/// end at `10s`, `20s`, slices of 0.2 s at `0.2s`, `0.4s`, slices of 0.25 s
/// at `0.25s`, `0.50s`.
fn slice_label(elapsed_ns: u64, seconds: f64) -> String {
    let decimals = (0..3).find(|&d| {
        let scaled = seconds * 10f64.powi(d);
        (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
    });
    let decimals = decimals.unwrap_or(3) as usize;
    format!("{:.*}s", decimals, elapsed_ns as f64 / 1e9)
}

/// The notice that a process's forked workers past `limit` write no trace;
/// a limit of 0 is none of them, not a first 0.
fn untraced_workers_words(limit: u32) -> String {
    const WORKERS: &str = "DataLoader workers and the children Python's multiprocessing forks";
    match limit {
        0 => format!(
            "the workers ({WORKERS}) that this process forked write no trace ({WORKER_TRACES_VAR}=0; {WORKER_TRACES_VAR}=all traces every one)"
        ),
        _ => format!(
            "workers ({WORKERS}) after the first {limit} that this process forked write no trace ({WORKER_TRACES_VAR}=all traces every one)"
        ),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_slices_are_labelled_as_precisely_as_their_length_needs() {
        let ms = 1_000_000;
        assert_eq!(slice_label(10_004 * ms, 10.0), "10s");
        assert_eq!(slice_label(20_600 * ms, 10.0), "21s");
        assert_eq!(slice_label(201 * ms, 0.2), "0.2s");
        assert_eq!(slice_label(402 * ms, 0.2), "0.4s");
        assert_eq!(slice_label(1_003 * ms, 0.2), "1.0s");
        assert_eq!(slice_label(3_001 * ms, 1.5), "3.0s");
        assert_eq!(slice_label(251 * ms, 0.25), "0.25s");
        assert_eq!(slice_label(101 * ms, 0.1), "0.1s");
        assert_eq!(slice_label(2_001 * ms, 0.001), "2.001s");
        assert_eq!(slice_label(2_000_400_000, 0.0001), "2.000s", "at most three decimals");
    }

    #[test]
    fn a_limit_of_no_worker_traces_is_no_first_0() {
        assert!(untraced_workers_words(3).starts_with(
            "workers (DataLoader workers and the children Python's multiprocessing forks) after the first 3 that"
        ));
        let none = untraced_workers_words(0);
        assert!(
            none.starts_with("the workers (") && none.contains("write no trace (TRACER_WORKER_TRACES=0; "),
            "{none}"
        );
        assert!(!none.contains("first"), "{none}");
    }
}
