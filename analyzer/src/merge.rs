//! One stack from a stack's native and Python frames, and its own-code frame.
//!
//! CPython runs Python code in its eval loop, `_PyEval_EvalFrameDefault`:
//! each native call of it executes the Python frames from one entry frame
//! (entered from C) inward to the next. The trace records both kinds of
//! frames; [`merge`] puts each run of Python frames in the place of the
//! eval-loop call that ran it, so a stack reads from the C++ allocation
//! through the extension module that made it to the Python line that called
//! it, and on out to the script's top level.
//!
//! [`mark_own_code`] then picks the frame the report points at: under an
//! interpreter, the innermost Python frame outside the standard library and
//! the installed packages, or the user's own C code it called.

use crate::symbolize::{is_allocator_frame, Frame, OwnCode};

/// What a frame is to the putting together of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// The allocator's or the tracer's (see [`is_allocator_frame`]).
    Allocator,
    /// The interpreter's object allocator (see [`is_object_allocator`]).
    ObjectAllocator,
    /// A call of the interpreter's eval loop (see [`is_eval_loop`]).
    EvalLoop,
    /// The interpreter's call plumbing (see [`is_interpreter_plumbing`]).
    Plumbing,
    Other,
}

impl FrameKind {
    pub fn of(frame: &Frame) -> FrameKind {
        if is_allocator_frame(frame) {
            FrameKind::Allocator
        } else if is_object_allocator(frame) {
            FrameKind::ObjectAllocator
        } else if is_eval_loop(frame) {
            FrameKind::EvalLoop
        } else if is_interpreter_plumbing(frame) {
            FrameKind::Plumbing
        } else {
            FrameKind::Other
        }
    }
}

/// How the frames of a stack are held while it is put together: as
/// frames, or as numbers that stand for them, each with its kind (see
/// [`crate::sites`]).
pub trait HeldFrame: Clone {
    fn kind(&self) -> FrameKind;
}

impl HeldFrame for Frame {
    fn kind(&self) -> FrameKind {
        FrameKind::of(self)
    }
}

/// The name of a symbol without the suffixes compilers add to its parts
/// and clones (`.cold`, `.part.0`, `.isra.0`, `.constprop.0`, `.lto_priv.0`).
pub fn base_name(function: &str) -> &str {
    function.split('.').next().unwrap_or(function)
}

/// Whether `module` is the Python interpreter (libpython or a python executable).
pub fn is_python_module(module: Option<&str>) -> bool {
    let Some(path) = module else { return false };
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libpython") || name.starts_with("python")
}

/// The interpreter functions that map pymalloc's arenas (3.11 and 3.12+ names).
const ARENA_MAPPERS: &[&str] = &["_PyObject_ArenaMmap", "_PyMem_ArenaAlloc", "new_arena"];

/// Whether a mapping's stack (`frames`) is pymalloc mapping a new arena.
pub fn maps_a_pymalloc_arena(frames: &[Frame]) -> bool {
    frames
        .iter()
        .any(|f| !f.python && is_python_module(f.module.as_deref()) && ARENA_MAPPERS.contains(&base_name(&f.function)))
}

/// Whether a native frame is pymalloc's, which passes objects over 512
/// bytes on to malloc: between the tracer's hook on it (with
/// `TRACER_PYTHON_OBJECTS=1`) and malloc's, it is the tracer's doing.
fn is_object_allocator(frame: &Frame) -> bool {
    const FUNCTIONS: &[&str] =
        &["_PyObject_Malloc", "_PyObject_Calloc", "_PyObject_Realloc", "pymalloc_alloc", "pymalloc_realloc"];
    !frame.python && is_python_module(frame.module.as_deref()) && FUNCTIONS.contains(&base_name(&frame.function))
}

/// Whether a native frame is a call of the interpreter's eval loop.
pub fn is_eval_loop(frame: &Frame) -> bool {
    !frame.python
        && base_name(&frame.function) == "_PyEval_EvalFrameDefault"
        && is_python_module(frame.module.as_deref())
}

/// The interpreter's call machinery and start-up: frames that only pass a
/// call from Python to C, from C back to Python, or from `main` to the
/// script, and say nothing about where memory went.
fn is_interpreter_plumbing(frame: &Frame) -> bool {
    if frame.python || !is_python_module(frame.module.as_deref()) {
        return false;
    }
    let name = base_name(&frame.function);
    const NAMES: &[&str] = &[
        "_PyEval_Vector",
        "_PyEval_EvalFrame",
        "PyEval_EvalCode",
        "PyEval_EvalCodeEx",
        "PyObject_Vectorcall",
        "PyObject_VectorcallDict",
        "PyObject_VectorcallMethod",
        "PyVectorcall_Call",
        "_PyVectorcall_Call",
        "_PyObject_Vectorcall",
        "_PyObject_VectorcallTstate",
        "_PyObject_MakeTpCall",
        "_PyObject_Call",
        "_PyObject_Call_Prepend",
        "_PyObject_FastCallDictTstate",
        "PyObject_Call",
        "PyObject_CallObject",
        "PyObject_CallOneArg",
        "PyObject_CallNoArgs",
        "_PyFunction_Vectorcall",
        "_PyCFunction_Call",
        "method_vectorcall",
        "cfunction_call",
        "slot_tp_call",
        "slot_tp_init",
        "vectorcall_method",
        "vectorcall_unbound",
        "object_vacall",
        "Py_RunMain",
        "Py_BytesMain",
        "Py_Main",
        "run_mod",
        "run_eval_code_obj",
        "builtin_exec",
        "builtin_exec_impl",
    ];
    const PREFIXES: &[&str] = &["pymain_", "_PyRun_", "PyRun_", "method_vectorcall_", "cfunction_vectorcall_"];
    NAMES.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Python frames (innermost first) cut into the runs one eval-loop call
/// executes: each run ends at, and includes, an entry frame. Frames outside
/// the last entry frame (a chain that did not end with one) form a run too.
fn runs<T>(python: &[(T, bool)]) -> Vec<&[(T, bool)]> {
    python.split_inclusive(|(_, entry)| *entry).collect()
}

/// A stack's frames, innermost first, from `native` (the symbolized frames
/// of each return address, innermost address first) and `python` (the
/// Python frames with their entry flags, innermost first): allocator and
/// tracer frames trimmed from the innermost end, then [`merge`]d.
pub fn assemble<T: HeldFrame, G: AsRef<[T]>>(native: &[G], python: &[(T, bool)]) -> Vec<T> {
    let total: usize = native.iter().map(|group| group.as_ref().len()).sum();
    // Through the outermost allocator or tracer frame of the innermost run
    // of those and pymalloc's: pymalloc called by the tracer's hook on it.
    let innermost = native.iter().flat_map(AsRef::as_ref).map(HeldFrame::kind);
    let run = innermost.take_while(|kind| matches!(kind, FrameKind::Allocator | FrameKind::ObjectAllocator));
    let mut trim = run.enumerate().filter(|(_, kind)| *kind == FrameKind::Allocator).last().map_or(0, |(i, _)| i + 1);
    // Keep at least one frame so a stack never draws empty.
    if trim == total && python.is_empty() {
        trim = trim.saturating_sub(1);
    }
    let mut trimmed: Vec<&[T]> = Vec::with_capacity(native.len());
    for group in native {
        let group = group.as_ref();
        let n = trim.min(group.len());
        trim -= n;
        if n < group.len() {
            trimmed.push(&group[n..]);
        }
    }
    merge(&trimmed, python)
}

/// One stack from `native` — the symbolized frames of each return address,
/// innermost address first — and `python`, the Python frames with their
/// entry flags, innermost first.
///
/// When the stack holds as many eval-loop calls as runs of Python frames,
/// each eval-loop call is replaced by its run (innermost call by innermost
/// run), and the interpreter's call plumbing is dropped; extension modules'
/// frames stay where they are. Otherwise (an interpreter without symbols, a
/// PEP 523 frame evaluator) the native frames are kept as they are and the
/// Python frames go outermost of them.
pub fn merge<T: HeldFrame, G: AsRef<[T]>>(native: &[G], python: &[(T, bool)]) -> Vec<T> {
    let all_native = || native.iter().flat_map(AsRef::as_ref).cloned();
    if python.is_empty() {
        return all_native().collect();
    }
    let runs = runs(python);
    let is_eval = |group: &[T]| group.iter().any(|f| f.kind() == FrameKind::EvalLoop);
    let evals = native.iter().filter(|group| is_eval(group.as_ref())).count();
    if evals != runs.len() {
        return all_native().chain(python.iter().map(|(f, _)| f.clone())).collect();
    }
    let mut runs = runs.into_iter();
    let mut out = Vec::with_capacity(native.iter().map(|group| group.as_ref().len()).sum::<usize>() + python.len());
    for group in native {
        let group = group.as_ref();
        if is_eval(group) {
            out.extend(runs.next().unwrap_or_default().iter().map(|(f, _)| f.clone()));
        } else if group.last().is_some_and(|f| f.kind() == FrameKind::Plumbing) {
            // Inlined frames are listed first; the group is the call of its last frame.
        } else {
            out.extend_from_slice(group);
        }
    }
    out
}

/// How a Python source file counts for the own-code frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PythonFile {
    /// The standard library, installed packages, frozen modules, and code
    /// a library generated (see [`is_compiled_by_inductor`]).
    Library,
    /// Code without a file (`<string>`, `<stdin>`): own code when nothing better.
    NoFile,
    /// A script or module of the program.
    Own,
}

pub fn python_file_kind(file: &str) -> PythonFile {
    if file.starts_with("<frozen") {
        return PythonFile::Library;
    }
    if file.starts_with('<') || file.is_empty() {
        return PythonFile::NoFile;
    }
    let library =
        ["/site-packages/", "/dist-packages/", "/lib/python3.", "/lib64/python3.", "/lib/python2.", "/lib/pypy"]
            .iter()
            .any(|p| file.contains(p));
    if library || is_compiled_by_inductor(file) || crate::install_dirs::is_under_an_installation(file) {
        PythonFile::Library
    } else {
        PythonFile::Own
    }
}

/// Whether a file is a module that `torch.compile` wrote (its inductor's
/// output code): a name made of `c` and a hash of 51 lowercase letters and
/// digits, in a directory named after the hash's first two characters,
/// wherever its cache lies (`/tmp/torchinductor_<user>` unless
/// `TORCHINDUCTOR_CACHE_DIR` says). A model compiled anew for each shape
/// runs a module of its own for each, so the line of the program that
/// called the compiled model is the one its memory piles up at.
fn is_compiled_by_inductor(file: &str) -> bool {
    let path = std::path::Path::new(file);
    let (Some(stem), Some(extension)) = (path.file_stem().and_then(|s| s.to_str()), path.extension()) else {
        return false;
    };
    let directory = path.parent().and_then(|dir| dir.file_name()).and_then(|name| name.to_str());
    extension == "py"
        && stem.len() == 52
        && stem.starts_with('c')
        && stem.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && directory == stem.get(1..3)
}

/// Chooses the own-code frames of a merged stack (innermost first). With
/// Python frames, the own Python frames are those of the program's own
/// files (else of `<string>`-like code); the native frames the innermost of
/// them calls stay own code where their library is the user's (C code
/// called through ctypes, see [`OwnCode::is_users_library`]), so the first
/// own-code frame is the user's C line, else the innermost own Python
/// frame; the native frames outside it are not marked. Without an own
/// Python frame the native frames keep the marks the symbolizer gave them
/// (see [`OwnCode`]).
pub fn mark_own_code(frames: &mut [Frame], own: &OwnCode) {
    let kind = |f: &Frame| f.file.as_deref().map_or(PythonFile::NoFile, python_file_kind);
    let best = frames.iter().filter(|f| f.python).map(kind).filter(|k| *k != PythonFile::Library).max();
    let Some(best) = best else {
        frames.iter_mut().filter(|f| f.python).for_each(|f| f.own_code = false);
        return;
    };
    let mut inside_own_python = true;
    for f in frames.iter_mut() {
        if f.python {
            f.own_code = kind(f) == best;
            inside_own_python &= !f.own_code;
        } else {
            f.own_code = inside_own_python
                && f.own_code
                && f.module.as_deref().is_some_and(|module| own.is_users_library(module));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBPYTHON: &str = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0";
    const TORCH: &str = "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so";

    fn native(function: &str, module: &str) -> Frame {
        Frame { module: Some(module.into()), ..Frame::named(0x1000, function.into()) }
    }

    fn py(function: &str, file: &str, line: u32) -> Frame {
        Frame { file: Some(file.into()), line: Some(line), python: true, ..Frame::named(0, function.into()) }
    }

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames.iter().map(|f| f.function.as_str()).collect()
    }

    /// at::empty called from Python (train_step), which was called back from
    /// C++ (a hook run by libtorch) called from Python (main, the module).
    fn torch_stack() -> (Vec<Vec<Frame>>, Vec<(Frame, bool)>) {
        let native = vec![
            vec![native("c10::alloc_cpu", TORCH)],
            vec![native("at::empty", TORCH)],
            vec![native("THPVariable_empty", "/venv/lib/python3.11/site-packages/torch/lib/libtorch_python.so")],
            vec![native("cfunction_call", LIBPYTHON)],
            vec![native("_PyObject_MakeTpCall", LIBPYTHON)],
            vec![native("_Py_EnterRecursiveCall", LIBPYTHON), native("_PyEval_EvalFrameDefault", LIBPYTHON)],
            vec![native("_PyFunction_Vectorcall", LIBPYTHON)],
            vec![native("PyObject_Call", LIBPYTHON)],
            vec![native("torch::autograd::run_hook", TORCH)],
            vec![native("_PyEval_EvalFrameDefault.cold", LIBPYTHON)],
            vec![native("PyEval_EvalCode", LIBPYTHON)],
            vec![native("run_eval_code_obj", LIBPYTHON)],
            vec![native("run_mod", LIBPYTHON)],
            vec![native("_PyRun_SimpleFileObject", LIBPYTHON)],
            vec![native("pymain_run_python.constprop.0", LIBPYTHON)],
            vec![native("Py_BytesMain", LIBPYTHON)],
            vec![native("main", "/usr/bin/python3.11")],
            vec![native("__libc_start_main", "/usr/lib/x86_64-linux-gnu/libc.so.6")],
        ];
        let python = vec![
            (py("Tensor.new_empty", "/venv/lib/python3.11/site-packages/torch/_tensor.py", 90), false),
            (py("train_step", "/job/train.py", 42), false),
            (py("hook", "/job/train.py", 12), true),
            (py("main", "/job/train.py", 60), false),
            (py("<module>", "/job/train.py", 70), true),
        ];
        (native, python)
    }

    /// pymalloc called by the tracer's hook on it passes a large object on
    /// to malloc: both its frame and the hook's go with malloc's. Called by
    /// the interpreter itself, it stays.
    #[test]
    fn pymalloc_under_the_tracers_hook_is_trimmed_with_it() {
        const TRACER: &str = "/opt/tracer/libtracer.so";
        let stack = |hooked: bool| {
            let mut frames = vec![vec![native("malloc", TRACER)], vec![native("_PyObject_Calloc", LIBPYTHON)]];
            if hooked {
                frames.push(vec![native("calloc_body", TRACER)]);
            }
            frames.push(vec![native("_PyBytes_FromSize", LIBPYTHON)]);
            frames
        };
        assert_eq!(names(&assemble(&stack(true), &[])), ["_PyBytes_FromSize"]);
        assert_eq!(names(&assemble(&stack(false), &[])), ["_PyObject_Calloc", "_PyBytes_FromSize"]);
    }

    #[test]
    fn each_eval_loop_call_becomes_its_python_frames() {
        let (groups, python) = torch_stack();
        let merged = merge(&groups, &python);
        assert_eq!(
            names(&merged),
            [
                "c10::alloc_cpu",
                "at::empty",
                "THPVariable_empty",
                "Tensor.new_empty",
                "train_step",
                "hook",
                "torch::autograd::run_hook",
                "main",
                "<module>",
                "main",
                "__libc_start_main",
            ]
        );
        assert!(merged[3..6].iter().all(|f| f.python) && !merged[6].python && merged[7].python);
    }

    #[test]
    fn mismatched_counts_keep_the_native_frames_and_put_python_outermost() {
        let (mut groups, python) = torch_stack();
        // A frame evaluator replaced the outer eval loop: one call, two runs.
        groups[9] = vec![native_frame_evaluator()];
        let count = groups.len();
        let merged = merge(&groups, &python);
        assert_eq!(merged.len(), count + 1 + python.len(), "every native frame kept");
        assert_eq!(merged[5].function, "_Py_EnterRecursiveCall");
        assert_eq!(merged[3].function, "cfunction_call");
        assert_eq!(names(&merged[count + 1..]), ["Tensor.new_empty", "train_step", "hook", "main", "<module>"]);

        // A stripped interpreter: no eval loop found at all.
        let stripped =
            vec![vec![native("libpython3.11.so.1.0+0x1234", LIBPYTHON)], vec![native("main", "/usr/bin/python3")]];
        let merged = merge(&stripped, &python[3..]);
        assert_eq!(names(&merged), ["libpython3.11.so.1.0+0x1234", "main", "main", "<module>"]);
    }

    fn native_frame_evaluator() -> Frame {
        native("custom_eval_frame", "/venv/lib/python3.11/site-packages/jit/_eval.so")
    }

    #[test]
    fn the_eval_loop_outside_the_interpreter_does_not_count() {
        let python = vec![(py("f", "/job/a.py", 3), true)];
        let groups = vec![vec![native("_PyEval_EvalFrameDefault", "/opt/other/libfake.so")]];
        let merged = merge(&groups, &python);
        assert_eq!(names(&merged), ["_PyEval_EvalFrameDefault", "f"]);
    }

    #[test]
    fn no_python_frames_leave_the_native_stack_alone() {
        let (groups, _) = torch_stack();
        let count: usize = groups.iter().map(Vec::len).sum();
        let merged = merge(&groups, &[]);
        assert_eq!(merged.len(), count);
        assert_eq!(merged[3].function, "cfunction_call");
        assert!(merged.iter().all(|f| !f.python));
    }

    #[test]
    fn python_without_native_frames() {
        let python = vec![(py("f", "/job/a.py", 3), false), (py("<module>", "/job/a.py", 9), true)];
        assert_eq!(names(&merge(&Vec::<Vec<Frame>>::new(), &python)), ["f", "<module>"]);
    }

    #[test]
    fn a_chain_without_its_outer_entry_is_a_run_of_its_own() {
        let python = vec![(py("f", "/job/a.py", 3), true), (py("<module>", "/job/a.py", 9), false)];
        let groups = vec![
            vec![native("_PyEval_EvalFrameDefault", LIBPYTHON)],
            vec![native("_PyEval_EvalFrameDefault", LIBPYTHON)],
        ];
        assert_eq!(names(&merge(&groups, &python)), ["f", "<module>"]);
    }

    /// The own code of a Python process whose interpreter is conda's.
    fn python_process() -> OwnCode {
        OwnCode::OutsideRuntime { installation: vec!["/opt/conda/lib".into(), "/opt/conda/lib64".into()] }
    }

    fn own(frames: &[Frame]) -> Option<&str> {
        frames.iter().find(|f| f.own_code).map(|f| f.function.as_str())
    }

    #[test]
    fn own_code_is_the_innermost_python_frame_of_the_program() {
        let (groups, python) = torch_stack();
        let mut merged = merge(&groups, &python);
        // The symbolizer's native rule may have marked an extension module.
        merged[2].own_code = true;
        mark_own_code(&mut merged, &python_process());
        assert_eq!(own(&merged), Some("train_step"));
        assert!(merged.iter().filter(|f| !f.python).all(|f| !f.own_code));
    }

    #[test]
    fn own_code_skips_the_standard_library_and_packages() {
        for file in [
            "/usr/lib/python3.11/json/decoder.py",
            "/root/.pyenv/versions/3.12.1/lib/python3.12/threading.py",
            "/venv/lib/python3.11/site-packages/numpy/core/numeric.py",
            "/usr/lib/python3/dist-packages/yaml/loader.py",
            "<frozen importlib._bootstrap>",
        ] {
            assert_eq!(python_file_kind(file), PythonFile::Library, "{file}");
        }
        // Modules torch.compile wrote, in its default cache and in another.
        let compiled = "xr/cxr4mfprg7moeqnrhee4qyuvqbdj52mcxlv5avnjl5fpewehz5lb.py";
        assert_eq!(python_file_kind(&format!("/tmp/torchinductor_me/{compiled}")), PythonFile::Library);
        assert_eq!(python_file_kind(&format!("/scratch/cache/{compiled}")), PythonFile::Library);
        // Not in the directory of its hash's first characters, or not named so.
        assert_eq!(python_file_kind(&format!("/home/me/job/{}", &compiled[3..])), PythonFile::Own);
        assert_eq!(python_file_kind("/home/me/job/xr/cxr_model.py"), PythonFile::Own);
        assert_eq!(python_file_kind("/home/me/job/train.py"), PythonFile::Own);
        assert_eq!(python_file_kind("train.py"), PythonFile::Own);
        assert_eq!(python_file_kind("<string>"), PythonFile::NoFile);

        let mut frames = vec![
            native("PyList_New", LIBPYTHON),
            py("JSONDecoder.decode", "/usr/lib/python3.11/json/decoder.py", 337),
            py("<module>", "<string>", 1),
            py("load", "/home/me/job/data.py", 8),
            py("<module>", "/home/me/job/train.py", 3),
        ];
        frames[0].own_code = true;
        mark_own_code(&mut frames, &python_process());
        assert_eq!(own(&frames), Some("load"));
        assert!(frames[4].own_code && !frames[2].own_code && !frames[0].own_code);
    }

    #[test]
    fn string_code_counts_only_when_nothing_better() {
        let mut frames = vec![
            native("PyList_New", LIBPYTHON),
            py("decode", "/usr/lib/python3.11/json/decoder.py", 337),
            py("<module>", "<string>", 1),
        ];
        mark_own_code(&mut frames, &python_process());
        assert_eq!(own(&frames), Some("<module>"));
    }

    #[test]
    fn without_own_python_frames_the_native_rule_stands() {
        let mut frames = vec![
            native("make_buffer", "/opt/ext/libmine.so"),
            native("PyList_New", LIBPYTHON),
            py("decode", "/usr/lib/python3.11/json/decoder.py", 337),
            py("<module>", "<frozen runpy>", 1),
        ];
        frames[0].own_code = true;
        mark_own_code(&mut frames, &python_process());
        assert_eq!(own(&frames), Some("make_buffer"));
        let mut native_only = vec![native("make_buffer", "/opt/ext/libmine.so")];
        native_only[0].own_code = true;
        mark_own_code(&mut native_only, &python_process());
        assert_eq!(own(&native_only), Some("make_buffer"));
    }

    /// A stack through ctypes, as the symbolizer marks it: every frame
    /// outside the runtime marked.
    fn ctypes_stack(library: &str) -> Vec<Frame> {
        let marked = |function: &str, module: &str| Frame { own_code: true, ..native(function, module) };
        vec![
            marked("compute_features", library),
            marked("ffi_call", "/usr/lib/x86_64-linux-gnu/libffi.so.8"),
            marked("_ctypes_callproc", "/opt/conda/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"),
            py("featurize", "/job/native_job.py", 15),
            py("main", "/job/native_job.py", 24),
            marked("helper_main", library),
        ]
    }

    #[test]
    fn the_users_c_library_called_from_own_python_is_own_code() {
        let mut frames = ctypes_stack("/job/libfeat.so");
        mark_own_code(&mut frames, &python_process());
        let marked: Vec<&str> = frames.iter().filter(|f| f.own_code).map(|f| f.function.as_str()).collect();
        assert_eq!(marked, ["compute_features", "featurize", "main"], "not ctypes, not libffi, not outside the Python");
    }

    #[test]
    fn installed_system_and_interpreter_libraries_are_not_the_users() {
        for library in [
            "/venv/lib/python3.11/site-packages/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
            "/venv/lib/python3.11/site-packages/numpy.libs/libopenblas64_p-r0-0cf96a72.3.23.dev.so",
            "/usr/lib/python3/dist-packages/yaml/_yaml.cpython-311-x86_64-linux-gnu.so",
            "/usr/lib/x86_64-linux-gnu/libz.so.1",
            "/lib/x86_64-linux-gnu/libcrypto.so.3",
            "/usr/local/lib/libfoo.so",
            "/opt/conda/lib/libssl.so.3",
            "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "",
        ] {
            let mut frames = ctypes_stack(library);
            mark_own_code(&mut frames, &python_process());
            assert_eq!(own(&frames), Some("featurize"), "{library}");
        }
    }
}
