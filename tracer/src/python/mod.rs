//! Python frames for the stacks of a CPython process.
//!
//! At load time the tracer looks for an interpreter in the process
//! (`Py_Version`, `_PyRuntime` and `PyGILState_GetThisThreadState` resolving
//! through `dlsym(RTLD_DEFAULT)`, which finds them in a statically linked
//! `python3` and in a `libpython3.X.so` it depends on alike). Every symbol is
//! resolved then, never from a hook. An interpreter loaded later with
//! `dlopen` (a program embedding Python) is not seen: its stacks stay native.
//!
//! In the allocation hook the walk reads the allocating thread's own frame
//! chain as raw memory, innermost first, and turns each frame into a compact
//! reference (code object id, instruction offset, entry flag). It never calls
//! into the Python C API beyond the two functions that neither allocate nor
//! need the GIL (`PyGILState_GetThisThreadState`, a thread-specific-storage
//! lookup, and `Py_IsFinalizing`). Only the owning thread changes its frame
//! chain, and it is inside malloc, so the chain is consistent without the GIL.
//!
//! A walk also tells whether the thread is starting a pass over a PyTorch
//! DataLoader (`data_loader`); a glance follows the same chain reading only
//! the code pointers, for the allocations a sampling tracer does not record.
//! A process just forked walks its frames once to tell whether Python's
//! `multiprocessing` forked it (`multiprocessing`).
//!
//! Supported: CPython 3.11, 3.12 and 3.13 on x86_64, release builds with the
//! GIL. Anything else gets native-only stacks and one line on stderr.

mod codes;
mod data_loader;
mod layout;
mod memory;
mod multiprocessing;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::MaybeUninit;

use trace_format::{PyCode, PyFrame, PYMALLOC_OBJECTS_TRACED, PYMALLOC_OBJECTS_UNTRACED, PYTHON_ALLOCATOR_SETTING};

use self::codes::{CodeTable, FrameKey, Types, WalkCache};
#[cfg(test)]
pub use self::data_loader::OuterFrames;
pub use self::data_loader::{loop_name, Glance, GlanceMemo, LoaderFrames, LoopName, PassStart};
use self::layout::{Layout, OWNED_BY_CSTACK, OWNED_BY_GENERATOR};
pub use self::multiprocessing::{started_as, Started};
use crate::config::{PYTHON_FRAMES_VAR, PYTHON_OBJECTS_VAR as OBJECTS_VAR};
use crate::sys;
use crate::thread_state;

/// Deeper Python stacks keep their innermost frames only.
pub const MAX_PY_FRAMES: usize = 64;
/// Frames looked at per walk, skipped ones included; a longer chain is taken
/// as corrupt (or cyclic) and the allocation gets a native-only stack.
const MAX_WALK_STEPS: usize = 1024;

/// Python frames of one allocation, each packed into a word (see [`pack`]).
pub struct PyStack {
    /// The first `len` are initialized; the rest is left as it is, as this
    /// is made on every allocation (zeroing it was 3% of a capture).
    words: [MaybeUninit<u64>; MAX_PY_FRAMES],
    len: usize,
    /// The walk reached the outermost frame.
    complete: bool,
    /// Index of the outermost `DataLoader.__iter__` frame.
    outermost_loader: Option<usize>,
    /// The `self` of that frame (0 when unread): the loader it iterates.
    loader_object: u64,
}

impl PyStack {
    /// Empty. Made once per thread, in its capture room (see
    /// `capture_room`), whose words are written over by each capture.
    pub const fn new() -> Self {
        PyStack {
            words: [MaybeUninit::uninit(); MAX_PY_FRAMES],
            len: 0,
            complete: false,
            outermost_loader: None,
            loader_object: 0,
        }
    }

    pub fn words(&self) -> &[u64] {
        // SAFETY: the first `len` entries were written by `push`, and
        // MaybeUninit<u64> has the layout of u64.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u64>(), self.len) }
    }

    /// Whether, and from where, this stack is starting a pass over a DataLoader.
    pub fn loader_frames(&self) -> LoaderFrames {
        match (self.complete, self.outermost_loader) {
            (false, _) => LoaderFrames::Unknown,
            (true, None) => LoaderFrames::Absent,
            (true, Some(at)) => LoaderFrames::Present(PassStart {
                place: data_loader::pass_key(&self.words()[at + 1..]),
                loader: self.loader_object,
                outer: data_loader::OuterFrames::of(&self.words()[at + 1..]),
            }),
        }
    }

    fn clear(&mut self) {
        self.len = 0;
        self.complete = false;
        self.outermost_loader = None;
        self.loader_object = 0;
    }

    fn push(&mut self, word: u64) -> bool {
        self.words[self.len] = MaybeUninit::new(word);
        self.len += 1;
        self.len < MAX_PY_FRAMES
    }

    fn mark_last_entry(&mut self) {
        if let Some(last) = self.len.checked_sub(1) {
            let marked = self.words()[last] | 1;
            self.words[last] = MaybeUninit::new(marked);
        }
    }
}

/// A frame as one word of a stack key: code id (30 bits; the top bit is the
/// stack tree's Python tag), instruction offset (32 bits), entry flag (bit 0).
pub fn pack(code: u64, instruction: u32, entry: bool) -> u64 {
    (code << 33) | (u64::from(instruction) << 1) | u64::from(entry)
}

pub fn unpack(word: u64) -> PyFrame {
    PyFrame { code: word >> 33, instruction: (word >> 1) as u32, entry: word & 1 != 0 }
}

type GetThreadState = unsafe extern "C" fn() -> *mut c_void;
type IsFinalizing = unsafe extern "C" fn() -> c_int;

struct Walker {
    layout: Layout,
    types: Types,
    thread_state: GetThreadState,
    is_finalizing: IsFinalizing,
    codes: CodeTable,
}

/// What the tracer knows of the process's Python interpreter.
pub struct Python {
    walker: Option<Walker>,
    settings: Vec<(String, String)>,
    /// Its objects are to be traced through its allocator's hooks.
    traces_objects: bool,
}

fn symbol(name: &CStr) -> Option<u64> {
    sys::global_symbol(name).map(|address| address as u64)
}

fn version_text(hex: u64) -> String {
    let (major, minor, micro) = (hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff);
    let serial = hex & 0xf;
    match (hex >> 4) & 0xf {
        0xa => format!("{major}.{minor}.{micro}a{serial}"),
        0xb => format!("{major}.{minor}.{micro}b{serial}"),
        0xc => format!("{major}.{minor}.{micro}rc{serial}"),
        _ => format!("{major}.{minor}.{micro}"),
    }
}

/// Whether Python's objects come from pymalloc through hooks the tracer
/// may set: `PYTHONMALLOC` and `PYTHONDEVMODE` unset, and no `-X dev`
/// option. Their other values either send every object to malloc or make
/// Python replace the hooks the tracer set with its debug hooks.
fn objects_use_pymalloc(command_line: &[String]) -> bool {
    let unset = |name| std::env::var_os(name).is_none_or(|v| v.is_empty());
    let pymalloc = unset("PYTHONMALLOC") || std::env::var("PYTHONMALLOC").is_ok_and(|v| v == "pymalloc");
    pymalloc && unset("PYTHONDEVMODE") && !asks_for_dev_mode(command_line)
}

/// Whether the interpreter's options (the arguments before the script,
/// `-c` or `-m`) include `-X dev`.
fn asks_for_dev_mode(command_line: &[String]) -> bool {
    let mut options = command_line.iter().skip(1).map(String::as_str);
    while let Some(option) = options.next() {
        match option {
            "-X" => {
                if options.next().is_some_and(|value| value.starts_with("dev")) {
                    return true;
                }
            }
            "-W" => {
                options.next();
            }
            "-c" | "-m" | "-" => return false,
            _ if option.starts_with("-Xdev") => return true,
            _ if option.starts_with('-') => {}
            _ => return false,
        }
    }
    false
}

/// Whether Python's small objects can be, or are, traced through its
/// object allocator's hooks.
#[derive(Clone, Copy)]
enum Objects {
    Traced,
    /// Left to the arenas: they could be traced (`TRACER_PYTHON_OBJECTS=1`).
    Untraced,
    /// Their frames are not read: other versions, `TRACER_PYTHON_FRAMES=0`.
    NoFrames,
    /// Python replaces the hooks (see [`objects_use_pymalloc`]).
    HooksReplaced,
}

/// Which allocator served Python objects, from `PYTHONMALLOC` (the `-X dev`
/// option keeps pymalloc, with debug hooks), and what became of its small
/// objects; the analyzer repeats what follows [`PYMALLOC_OBJECTS_UNTRACED`].
fn allocator_setting(objects: Objects) -> String {
    let untraced = |why: &str| format!("{PYMALLOC_OBJECTS_UNTRACED}{why})");
    match (std::env::var("PYTHONMALLOC").as_deref(), objects) {
        (Ok("malloc") | Ok("malloc_debug"), _) => {
            "malloc (every Python object reaches malloc, traced one by one)".into()
        }
        (_, Objects::Traced) => format!("{PYMALLOC_OBJECTS_TRACED} ({OBJECTS_VAR}=1)"),
        (_, Objects::Untraced) => untraced(&format!("run with {OBJECTS_VAR}=1 to trace them")),
        (_, Objects::NoFrames) => untraced(&format!("tracing them ({OBJECTS_VAR}=1) needs the frames of Python 3.11 to 3.13 read")),
        (_, Objects::HooksReplaced) => untraced(&format!(
            "tracing them ({OBJECTS_VAR}=1) needs PYTHONMALLOC, PYTHONDEVMODE and -X dev unset: under them Python replaces the hooks"
        )),
    }
}

impl Python {
    /// Looks for a CPython interpreter in the process; says on stderr, once,
    /// when one is there whose frames cannot be read. `frames_wanted`: its
    /// frames are to be read (not `TRACER_PYTHON_FRAMES=0`). `objects_wanted`: its
    /// small objects are to be traced (`TRACER_PYTHON_OBJECTS=1`), which
    /// needs its frames and pymalloc. `command_line`: the process's
    /// arguments, whose interpreter options may ask for `-X dev`.
    pub fn detect(frames_wanted: bool, objects_wanted: bool, command_line: &[String]) -> Python {
        let Some(get_version) = symbol(c"Py_GetVersion") else {
            return Python { walker: None, settings: Vec::new(), traces_objects: false };
        };
        let version = match symbol(c"Py_Version") {
            Some(address) => memory::u32_at(address, 0).map(u64::from),
            None => None,
        };
        let text = match version {
            Some(hex) => version_text(hex),
            None => {
                // Before 3.11 there is no Py_Version; Py_GetVersion formats
                // constant strings into a static buffer.
                // SAFETY: a function taking nothing and returning a static string.
                let get: unsafe extern "C" fn() -> *const c_char = unsafe { std::mem::transmute(get_version as usize) };
                let full = unsafe { CStr::from_ptr(get()) }.to_string_lossy().into_owned();
                full.split_whitespace().next().unwrap_or("?").to_string()
            }
        };
        let walker = if !frames_wanted { Err(None) } else { Walker::new(version).map_err(Some) };
        let objects = match (walker.is_ok(), objects_use_pymalloc(command_line)) {
            (false, _) => Objects::NoFrames,
            (true, false) => Objects::HooksReplaced,
            (true, true) if objects_wanted => Objects::Traced,
            (true, true) => Objects::Untraced,
        };
        let frames = match &walker {
            Ok(_) => format!("{text} frames"),
            Err(None) => format!("{text}{}({PYTHON_FRAMES_VAR}=0)", trace_format::PYTHON_FRAMES_OFF),
            Err(Some(why)) => {
                sys::print_stderr(&format!(
                    "tracer: Python {text} frames unavailable: {why}; stacks are native only\n"
                ));
                format!("{text}{}{why}", trace_format::PYTHON_FRAMES_UNSUPPORTED)
            }
        };
        let settings = vec![
            (trace_format::PYTHON_SETTING.to_string(), frames),
            (PYTHON_ALLOCATOR_SETTING.to_string(), allocator_setting(objects)),
        ];
        Python { walker: walker.ok(), settings, traces_objects: matches!(objects, Objects::Traced) }
    }

    /// Whether its small objects are to be traced through the hooks of its
    /// object allocator.
    pub fn traces_objects(&self) -> bool {
        self.traces_objects
    }

    /// Settings for the Process record (empty when the process is not Python).
    pub fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    /// Whether the process runs a CPython interpreter, whatever its frames.
    pub fn present(&self) -> bool {
        !self.settings.is_empty()
    }

    /// Whether the interpreter is shutting down (its modules torn down, their
    /// objects freed); false where its frames are not read.
    pub fn finalizing(&self) -> bool {
        // SAFETY: Py_IsFinalizing (or 3.11's _Py_IsFinalizing) takes nothing,
        // reads one field of the runtime, and needs neither the GIL nor memory.
        self.walker.as_ref().is_some_and(|walker| unsafe { (walker.is_finalizing)() } != 0)
    }

    /// Whether Python frames are read (and DataLoader passes can be seen).
    pub fn walks_frames(&self) -> bool {
        self.walker.is_some()
    }

    /// The calling thread's Python frames, innermost first; empty when Python
    /// frames are unavailable, the thread runs no Python, or its frame chain
    /// does not look right.
    #[inline]
    pub fn capture(&self, stack: &mut PyStack) {
        stack.clear();
        if let Some(walker) = &self.walker {
            match walker.walk(stack) {
                Some(Walked::Complete) => stack.complete = true,
                Some(Walked::Cut) => {}
                None => stack.clear(),
            }
        }
    }

    /// Whether a `DataLoader.__iter__` frame is on the calling thread's stack,
    /// from its frames' code pointers alone: a fraction of a full walk.
    #[inline]
    pub fn glance_for_data_loader(&self) -> Glance {
        match &self.walker {
            Some(walker) => walker.glance_for_data_loader(),
            None => Glance::Unknown,
        }
    }

    /// Whether the object that was at `address` is still alive with the
    /// type of the live object `like`: its type pointer is `like`'s and its
    /// reference count a count. A freed object's first words hold its
    /// allocator's free-list links, or its memory was unmapped (read through
    /// the kernel, which fails there, where a load would fault). One that
    /// cannot be told is taken to be alive.
    pub fn alive_as(&self, address: u64, like: u64) -> bool {
        // The two words read are the reference count and the type pointer.
        let Some(walker) = self.walker.as_ref().filter(|walker| walker.layout.ob_type == 8) else { return true };
        let Some(kind) = memory::word(like, walker.layout.ob_type) else { return true };
        match sys::read_own_words::<2>(address) {
            sys::OwnMemory::Words([count, its_kind]) => its_kind == kind && count > 0 && count < 1 << 32,
            sys::OwnMemory::Unmapped => false,
            sys::OwnMemory::Unknown => true,
        }
    }

    /// Whether `stack`, walked in a process just forked, holds the frame
    /// through which Python's `multiprocessing` forks its children.
    pub fn forked_by_multiprocessing(&self, stack: &PyStack) -> bool {
        let Some(launch) = self.walker.as_ref().and_then(|w| w.codes.fork_launch_id()) else { return false };
        stack.words().iter().any(|&word| unpack(word).code == launch)
    }

    /// The records of the code objects with these ids.
    pub fn code_records(&self, ids: &[u64]) -> Vec<PyCode> {
        self.walker.as_ref().map(|w| w.codes.records_of(ids)).unwrap_or_default()
    }
}

impl Walker {
    fn new(version: Option<u64>) -> Result<Walker, String> {
        let Some(hex) = version else { return Err("versions before 3.11 are not supported".into()) };
        let minor = ((hex >> 16) & 0xff) as u32;
        if hex >> 24 != 3 || !(11..=13).contains(&minor) {
            return Err("only 3.11, 3.12 and 3.13 are supported".into());
        }
        if !cfg!(target_arch = "x86_64") {
            return Err("only x86_64 is supported".into());
        }
        if symbol(c"_Py_NegativeRefcount").is_some() || symbol(c"_Py_RefTotal").is_some() {
            return Err("debug builds are not supported".into());
        }
        let missing = |name: &str| format!("the interpreter does not export {name}");
        let runtime = symbol(c"_PyRuntime").ok_or_else(|| missing("_PyRuntime"))?;
        let thread_state =
            symbol(c"PyGILState_GetThisThreadState").ok_or_else(|| missing("PyGILState_GetThisThreadState"))?;
        let is_finalizing = symbol(c"Py_IsFinalizing")
            .or_else(|| symbol(c"_Py_IsFinalizing"))
            .ok_or_else(|| missing("Py_IsFinalizing"))?;
        let types = Types {
            code: symbol(c"PyCode_Type").ok_or_else(|| missing("PyCode_Type"))?,
            unicode: symbol(c"PyUnicode_Type").ok_or_else(|| missing("PyUnicode_Type"))?,
            bytes: symbol(c"PyBytes_Type").ok_or_else(|| missing("PyBytes_Type"))?,
            tuple: symbol(c"PyTuple_Type").ok_or_else(|| missing("PyTuple_Type"))?,
        };
        let table = layout::table(minor).ok_or("no layout known")?;
        let layout = if minor >= 13 { layout::from_debug_offsets(runtime, hex, table)? } else { table };
        layout::check_types(&layout, &types)?;
        // SAFETY: both are plain C functions of these signatures in 3.11–3.13.
        let (thread_state, is_finalizing) = unsafe {
            (
                std::mem::transmute::<usize, GetThreadState>(thread_state as usize),
                std::mem::transmute::<usize, IsFinalizing>(is_finalizing as usize),
            )
        };
        Ok(Walker { layout, types, thread_state, is_finalizing, codes: CodeTable::default() })
    }

    /// The calling thread's innermost frame; `None` when something read does
    /// not look right.
    fn innermost_frame(&self) -> Option<Innermost> {
        let l = &self.layout;
        // SAFETY: a TSS lookup that neither allocates nor needs the GIL.
        let tstate = unsafe { (self.thread_state)() } as u64;
        if tstate == 0 {
            return Some(Innermost::NoPython);
        }
        // SAFETY: reads one word of `_PyRuntime`; no lock, no allocation.
        if unsafe { (self.is_finalizing)() } != 0 && !sys::is_main_thread() {
            return Some(Innermost::Finalizing);
        }
        if !memory::plausible(tstate, 8, 8) {
            return None;
        }
        let holder = match l.tstate_cframe {
            Some(offset) => memory::word(tstate, offset)?,
            None => tstate,
        };
        if holder == 0 {
            return Some(Innermost::NoPython);
        }
        Some(Innermost::Frame(memory::word(holder, l.current_frame)?))
    }

    /// Follows the frame chain reading only each frame's code pointer and
    /// instruction (see [`data_loader::glance`]).
    fn glance_for_data_loader(&self) -> Glance {
        let wanted = self.codes.data_loader_iter();
        if wanted == 0 {
            return Glance::Unlearned;
        }
        let innermost = match self.innermost_frame() {
            Some(Innermost::Frame(frame)) => frame,
            Some(Innermost::NoPython) => return Glance::Absent,
            Some(Innermost::Finalizing) | None => return Glance::Unknown,
        };
        let l = &self.layout;
        thread_state::with_last_glance(|memo| {
            data_loader::glance(memo, innermost, wanted, MAX_WALK_STEPS, |frame| {
                let code = self.followable(frame)?;
                Some((code, memory::word(frame, l.frame_instr)?, memory::word(frame, l.frame_previous)?))
            })
        })
    }

    /// `frame`'s code pointer, when the frame passes the checks a full walk
    /// makes before it follows one.
    #[inline]
    fn followable(&self, frame: u64) -> Option<u64> {
        let l = &self.layout;
        if !memory::plausible(frame, 80, 8) || memory::u8_at(frame, l.frame_owner)? > OWNED_BY_CSTACK {
            return None;
        }
        memory::word(frame, l.frame_code)
    }

    /// Fills `stack`; `None` when something read does not look right.
    fn walk(&self, stack: &mut PyStack) -> Option<Walked> {
        let frame = match self.innermost_frame()? {
            Innermost::Frame(frame) => frame,
            Innermost::NoPython => return Some(Walked::Complete),
            Innermost::Finalizing => return Some(Walked::Cut),
        };
        codes::with_walk_cache(|cache| self.walk_from(frame, stack, cache))
    }

    /// [`Walker::walk`]'s steps from the innermost frame `frame` out.
    fn walk_from(&self, mut frame: u64, stack: &mut PyStack, cache: &mut WalkCache<'_>) -> Option<Walked> {
        let l = &self.layout;
        for _ in 0..MAX_WALK_STEPS {
            if frame == 0 {
                return Some(Walked::Complete);
            }
            if !memory::plausible(frame, 80, 8) {
                return None;
            }
            let owner = memory::u8_at(frame, l.frame_owner)?;
            if owner > OWNED_BY_CSTACK {
                return None;
            }
            let previous = memory::word(frame, l.frame_previous)?;
            if owner == OWNED_BY_CSTACK && l.frame_is_entry.is_none() {
                // A shim pushed by a C call into the interpreter: the frame
                // above it was entered from C.
                stack.mark_last_entry();
                frame = previous;
                continue;
            }
            let code = memory::object_pointer(frame, l.frame_code)?;
            if memory::word(code, l.ob_type)? != self.types.code {
                if l.minor >= 13 {
                    // f_executable may hold something else than code; not a Python frame.
                    frame = previous;
                    continue;
                }
                return None;
            }
            let instr = memory::word(frame, l.frame_instr)?;
            let entry = match l.frame_is_entry {
                Some(at) => memory::u8_at(frame, at)? != 0,
                None => false,
            };
            // A frame that holds what it held when a walk last decoded it
            // (its code object by address, name, line table and constants,
            // the instruction) is
            // what it was then.
            let key = FrameKey {
                frame,
                code,
                instr,
                qualname: memory::word(code, l.code_qualname)?,
                linetable: memory::word(code, l.code_linetable)?,
                consts: memory::word(code, l.code_consts)?,
                owner,
                entry,
            };
            let decoded = match cache.frame(&key) {
                Some(known) => Some(known),
                None => self.decode(key, cache)?,
            };
            if let Some((word, data_loader_iter)) = decoded {
                if data_loader_iter {
                    stack.outermost_loader = Some(stack.len);
                    // `self`, the method's first local, lies in the frame
                    // itself, which this thread keeps alive while it runs.
                    stack.loader_object = memory::word(frame, l.frame_localsplus).unwrap_or(0);
                }
                if !stack.push(word) {
                    return Some(Walked::Cut);
                }
            }
            frame = previous;
        }
        None
    }

    /// The packed word of the frame `key` describes and whether it runs
    /// `DataLoader.__iter__`, remembered in `cache`; `Some(None)` for a frame
    /// that has not started running its code yet, `None` when something read
    /// does not look right.
    fn decode(&self, key: FrameKey, cache: &mut WalkCache<'_>) -> Option<Option<(u64, bool)>> {
        let l = &self.layout;
        let code_units = memory::word(key.code, l.var_size)? as i64;
        let first_traceable = memory::u32_at(key.code, l.code_firsttraceable)? as i32 as i64;
        let offset = (key.instr as i64).wrapping_sub((key.code + l.code_adaptive) as i64) >> 1;
        if key.owner != OWNED_BY_GENERATOR && offset < first_traceable {
            return Some(None);
        }
        if !(0..code_units).contains(&offset) {
            return None;
        }
        let code = self.codes.code_at(key.code, l, &self.types, cache)?;
        let word = pack(code.id, offset as u32, key.entry);
        cache.note_frame(key, word, code.data_loader_iter);
        Some(Some((word, code.data_loader_iter)))
    }
}

enum Innermost {
    Frame(u64),
    /// The thread runs no Python now.
    NoPython,
    /// The interpreter is finalizing and this is not the main thread, whose
    /// frames may be freed under it.
    Finalizing,
}

/// How far a walk that found nothing wrong went.
enum Walked {
    /// To the thread's outermost frame (or the thread runs no Python).
    Complete,
    /// Not to the end: the stack is deeper than [`MAX_PY_FRAMES`], or the
    /// interpreter is finalizing.
    Cut,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_mode_is_an_interpreter_option_before_the_script() {
        let asks = |line: &str| asks_for_dev_mode(&line.split(' ').map(String::from).collect::<Vec<_>>());
        assert!(asks("python3 -X dev train.py"));
        assert!(asks("python3 -Xdev train.py"));
        assert!(asks("python3 -W error -u -X dev -m pkg"));
        assert!(!asks("python3 -X importtime train.py"));
        assert!(!asks("python3 train.py -X dev"), "the script's own arguments");
        assert!(!asks("python3 -c print() -X dev"));
        assert!(!asks("python3"));
    }
}
