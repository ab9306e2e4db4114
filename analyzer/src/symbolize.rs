//! Offline symbolization of the recorded return addresses.
//!
//! Each module file is opened only when an address in it needs resolving,
//! and each distinct address is resolved once in each module record that
//! names it (see [`crate::modules`]). DWARF (through `addr2line`), the
//! module's own or its separate debug file's (see [`crate::debug_file`]),
//! gives function, file, line and inlined frames; without it the ELF symbol
//! table (`.symtab`, else `.dynsym`) gives the function; when nothing
//! resolves a frame reads `module+0xoffset`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use object::{Object, ObjectSymbol, SymbolKind};
use trace_format::{Module, Process, PyCode, PyFrame};

use crate::demangle::demangle;
use crate::merge::{python_file_kind, PythonFile};
use crate::modules::{Generation, ModuleMap, ModuleRecords};
use crate::pylines::{ranges, shown_line, LineRange};
use crate::trace::{IntMap, NativeFrame, Stack};

/// One frame of a symbolized stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The return address this frame came from.
    pub address: u64,
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Path of the module the address lies in.
    pub module: Option<String>,
    /// Where the address lies in the module's file, as `addr2line -e
    /// <module>` takes it; `None` for a frame outside every module.
    pub module_offset: Option<u64>,
    /// Inlined into the frame that follows it.
    pub inlined: bool,
    /// In the program's own code (see [`OwnCode`] and [`crate::merge::mark_own_code`]).
    pub own_code: bool,
    /// A Python frame: `function` is the code's qualified name, `file` and
    /// `line` its source, `address` the code object's id in the trace.
    pub python: bool,
}

impl Frame {
    /// A native frame known only by its address and name, with nothing else
    /// resolved; callers fill in what they know.
    pub fn named(address: u64, function: String) -> Frame {
        Frame {
            address,
            function,
            file: None,
            line: None,
            module: None,
            module_offset: None,
            inlined: false,
            own_code: false,
            python: false,
        }
    }

    /// The frame's name in a flamegraph: Python frames add their source
    /// file's name and line, `train_step (train.py:42)`.
    pub fn label(&self) -> String {
        if self.python {
            self.located()
        } else {
            self.function.clone()
        }
    }

    /// The function with its source file's name and line, as much of them
    /// as is known: `train_step (train.py:42)`.
    pub fn located(&self) -> String {
        self.located_as(&self.function)
    }

    /// [`Frame::located`] with the function shown as `function` (a long
    /// C++ name shortened).
    pub fn located_as(&self, function: &str) -> String {
        let file = self.file.as_deref().map(|f| f.rsplit('/').next().unwrap_or(f)).filter(|f| !f.is_empty());
        match (file, self.line) {
            (Some(file), Some(line)) => format!("{function} ({file}:{line})"),
            (Some(file), None) => format!("{function} ({file})"),
            (None, _) => function.to_string(),
        }
    }

    /// Whether the frame is named by its module and offset
    /// (`libfoo.so+0x1a2b`), nothing in the module having resolved it: the
    /// name says the module already.
    pub fn named_by_offset(&self) -> bool {
        let Some(module) = &self.module else { return false };
        self.function
            .strip_prefix(module_file_name(module))
            .and_then(|rest| rest.strip_prefix("+0x"))
            .is_some_and(|hex| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()))
    }
}

/// Which frames are the program's own code.
#[derive(Debug, Clone)]
pub enum OwnCode {
    /// Frames in the program's modules (by module index): the main
    /// executable and the shared libraries beside it.
    Program(Vec<usize>),
    /// The executable is an interpreter or a system program: frames outside
    /// the C/C++ runtime and the interpreter. `installation` holds the
    /// library directories of the interpreter's installation (`lib` beside
    /// its `bin`: a conda environment's or pyenv version's), whose other
    /// libraries come with it.
    OutsideRuntime { installation: Vec<PathBuf> },
}

/// Whether `path` is a runtime library or interpreter, never the program's
/// own code: the C/C++ runtime, the Python interpreter and its standard
/// library's extension modules (`lib-dynload`: `_pickle`, `_ctypes`), and
/// the native libraries PyTorch ships (its wheel's `torch/lib`, its `_C`
/// extension, the CUDA and OpenMP runtimes).
pub fn is_runtime_module(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    const PREFIXES: &[&str] = &[
        "libc.so",
        "libc-",
        "libm.so",
        "libm-",
        "libpthread",
        "libdl.so",
        "libdl-",
        "librt.so",
        "librt-",
        "libstdc++",
        "libc++",
        "libc++abi",
        "ld-linux",
        "ld64.so",
        "ld-",
        "libgcc_s",
        "libpython",
        "python",
        "pypy",
        "libtracer",
        // PyTorch and the runtimes it brings.
        "libtorch",
        "libc10",
        "libshm",
        "libcaffe2",
        "libnvfuser",
        "libgomp",
        "libiomp",
        "libomp",
        "libcudart",
        "libcuda.so",
        "libcublas",
        "libcudnn",
        "libcufft",
        "libcurand",
        "libcusparse",
        "libcusolver",
        "libnccl",
        "libnvrtc",
        "libnvToolsExt",
        "libnvJitLink",
        "libcupti",
        "libnvidia-",
    ];
    const DIRECTORIES: &[&str] = &["/lib-dynload/", "/torch/lib/", "/torch/_C.", "/torch/_C/", "/nvidia/"];
    PREFIXES.iter().any(|p| name.starts_with(p)) || DIRECTORIES.iter().any(|d| path.contains(d))
}

/// Directories of the system's libraries, everyone's.
const SYSTEM_LIBRARY_DIRECTORIES: &[&str] =
    &["/lib/", "/lib32/", "/lib64/", "/usr/lib/", "/usr/lib32/", "/usr/lib64/", "/usr/local/lib/", "/usr/local/lib64/"];

/// The `lib` and `lib64` beside the `bin` directory `exe` is in, unless
/// that is a system prefix's.
fn libraries_beside(exe: &Path) -> Option<[PathBuf; 2]> {
    let exe_dir = exe.parent()?;
    let root = exe_dir.parent()?;
    (exe_dir.ends_with("bin") && !["/", "/usr", "/usr/local"].iter().any(|p| root == Path::new(p)))
        .then(|| [root.join("lib"), root.join("lib64")])
}

fn is_interpreter_or_system(exe: &str) -> bool {
    let name = exe.rsplit('/').next().unwrap_or(exe);
    name.starts_with("python")
        || name.starts_with("pypy")
        || ["/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/", "/usr/lib/", "/lib/", "/lib64/", "/usr/libexec/"]
            .iter()
            .any(|p| exe.starts_with(p))
}

impl OwnCode {
    pub fn for_process(process: &Process, modules: &[Module]) -> OwnCode {
        let exe = resolved(&process.exe);
        let outside_runtime =
            || OwnCode::OutsideRuntime { installation: libraries_beside(&exe).map(Vec::from).unwrap_or_default() };
        if is_interpreter_or_system(&process.exe) {
            return outside_runtime();
        }
        let Some(exe_dir) = exe.parent() else { return outside_runtime() };
        // Where a program keeps its own libraries: beside it, or in a `lib`
        // directory beside its `bin`, but for a system prefix's, which is
        // everyone's.
        let beside = libraries_beside(&exe);
        let is_programs = |path: &Path| {
            path == exe
                || path.parent().is_some_and(|dir| {
                    (dir == exe_dir || beside.as_ref().is_some_and(|b| b.iter().any(|lib| dir == lib)))
                        && !is_runtime_module(&path.to_string_lossy())
                })
        };
        let matches: Vec<usize> = modules
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.path.is_empty() && is_programs(&resolved(&m.path)))
            .map(|(i, _)| i)
            .collect();
        if matches.is_empty() {
            outside_runtime()
        } else {
            OwnCode::Program(matches)
        }
    }

    fn is_own(&self, module: Option<usize>, modules: &[Module]) -> bool {
        let Some(index) = module else { return false };
        match self {
            OwnCode::Program(program) => program.contains(&index),
            OwnCode::OutsideRuntime { .. } => !is_runtime_module(&modules[index].path),
        }
    }

    /// Whether the native library at `path` is the user's own, as C code a
    /// Python program calls through ctypes: a file of its own, not the
    /// runtime's, an installed package's or the standard library's, the
    /// system's or the interpreter's installation's.
    pub fn is_users_library(&self, path: &str) -> bool {
        let installation = match self {
            OwnCode::OutsideRuntime { installation } => installation.as_slice(),
            OwnCode::Program(_) => &[],
        };
        path.starts_with('/')
            && !is_runtime_module(path)
            && python_file_kind(path) == PythonFile::Own
            && !SYSTEM_LIBRARY_DIRECTORIES.iter().any(|dir| path.starts_with(dir))
            && !installation.iter().any(|dir| Path::new(path).starts_with(dir))
    }
}

/// `path` with its links resolved where it still exists here (a trace may
/// be read on another machine), else as recorded.
fn resolved(path: &str) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path))
}

/// Source files of libraries compiled into the program: Rust's standard
/// library, crates from the registry, C/C++ headers of installed packages.
fn is_dependency_source(file: &str) -> bool {
    ["/rustc/", "/.cargo/registry/", "/.cargo/git/", "/site-packages/", "/dist-packages/", "/usr/include/"]
        .iter()
        .any(|marker| file.contains(marker))
}

/// Whether a demangled function name is of the C++ runtime: the standard
/// library's templates (and the functions of a statically linked
/// libstdc++), which a program instantiates in its own executable, and
/// their clones (`[clone .isra.0]`). Without line information this is how
/// a frame of them in the executable is told from the program's code (with
/// it, their files under `/usr/include` tell; see [`is_dependency_source`]).
/// A function of the program's own returning a `std::` type is its own:
/// the return type is not looked at.
fn is_cxx_runtime_function(demangled: &str) -> bool {
    let name = crate::demangle::function_name(demangled);
    const NAMESPACES: &[&str] = &["std::", "__gnu_cxx::", "__cxxabiv1::", "__gnu_debug::", "__cxa_"];
    NAMESPACES.iter().any(|prefix| name.starts_with(prefix))
        || ["operator new", "operator delete"]
            .iter()
            .any(|op| name.strip_prefix(op).is_some_and(|rest| rest.is_empty() || rest == "[]"))
}

/// Whether a frame belongs to the allocator or the tracer (trimmed from the
/// innermost end of each stack).
pub fn is_allocator_frame(frame: &Frame) -> bool {
    if let Some(module) = &frame.module {
        let name = module.rsplit('/').next().unwrap_or(module);
        if name.starts_with("libtracer") {
            return true;
        }
    }
    let f = frame.function.as_str();
    let base = f.split('(').next().unwrap_or(f).trim();
    const NAMES: &[&str] = &[
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "free",
        "posix_memalign",
        "memalign",
        "aligned_alloc",
        "valloc",
        "pvalloc",
        "operator new",
        "operator new[]",
        "__rust_alloc",
        "__rust_alloc_zeroed",
        "__rust_realloc",
    ];
    const PREFIXES: &[&str] = &["__libc_", "_Znw", "_Zna", "__rdl_", "__rg_", "tracer_"];
    NAMES.contains(&base) || PREFIXES.iter().any(|p| base.starts_with(p))
}

struct SymbolTable {
    /// (address, size, raw name), sorted by address.
    symbols: Vec<(u64, u64, String)>,
}

impl SymbolTable {
    fn find(&self, probe: u64) -> Option<&str> {
        let at = self.symbols.partition_point(|s| s.0 <= probe);
        let (addr, size, name) = self.symbols.get(at.checked_sub(1)?)?;
        if *size == 0 || probe < addr.saturating_add(*size) {
            Some(name)
        } else {
            None
        }
    }
}

struct LoadedModule {
    dwarf: Option<addr2line::Loader>,
    symbols: SymbolTable,
}

fn read_symbols(file: &object::File<'_>) -> SymbolTable {
    let collect = |iter: &mut dyn Iterator<Item = object::Symbol<'_, '_>>| {
        iter.filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && !s.is_undefined())
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .filter(|s| !s.2.is_empty())
            .collect::<Vec<_>>()
    };
    let mut symbols = collect(&mut file.symbols());
    if symbols.is_empty() {
        symbols = collect(&mut file.dynamic_symbols());
    }
    // Prefer sized symbols when several share an address.
    symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    symbols.dedup_by_key(|s| s.0);
    SymbolTable { symbols }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Opens a module file; `Err` says why its frames cannot be resolved.
/// A debug file that was found but not used is said in `skipped`.
fn load_module(module: &Module, skipped: &mut Vec<String>) -> Result<LoadedModule, String> {
    let path = Path::new(&module.path);
    let file = File::open(path).map_err(|err| format!("cannot open it ({err})"))?;
    // SAFETY: the map is read-only; a file truncated underneath would fault,
    // the same hazard every symbolizer reading mapped ELF files accepts.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|err| format!("cannot map it ({err})"))?;
    let object = object::File::parse(&*map).map_err(|err| format!("it is not a readable ELF file ({err})"))?;
    let file_id = object.build_id().ok().flatten().unwrap_or(&[]);
    if !module.build_id.is_empty() && file_id != module.build_id.as_slice() {
        return Err(format!(
            "its build id {} differs from the recorded {} (the file changed since the run)",
            if file_id.is_empty() { "(none)".to_string() } else { hex(file_id) },
            hex(&module.build_id)
        ));
    }
    let symbols = read_symbols(&object);
    let dwarf = if object.section_by_name(".debug_info").is_some() {
        addr2line::Loader::new(path).ok()
    } else {
        crate::debug_file::find(path, &object, file_id, skipped)
            .and_then(|separate| addr2line::Loader::new(separate).ok())
    };
    Ok(LoadedModule { dwarf, symbols })
}

/// Resolves addresses and Python code locations of one trace, lazily and
/// with caching.
pub struct Symbolizer<'t> {
    modules: &'t ModuleRecords,
    pycode: &'t IntMap<u64, PyCode>,
    map: ModuleMap,
    own: OwnCode,
    loaded: Vec<Option<Option<LoadedModule>>>,
    /// The frames of each (module record, return address) met; an address
    /// outside every module under [`NO_MODULE`].
    cache: IntMap<(u32, u64), Rc<[Frame]>>,
    /// Line of each (code, instruction) met, and the location table of
    /// each code object met, decoded.
    lines: IntMap<(u64, u32), Option<u32>>,
    line_tables: IntMap<u64, Vec<LineRange>>,
    warnings: Vec<String>,
}

impl<'t> Symbolizer<'t> {
    pub fn new(process: &Process, modules: &'t ModuleRecords, pycode: &'t IntMap<u64, PyCode>) -> Self {
        Symbolizer {
            modules,
            pycode,
            map: ModuleMap::new(&modules.records),
            own: OwnCode::for_process(process, &modules.records),
            loaded: (0..modules.records.len()).map(|_| None).collect(),
            cache: IntMap::default(),
            lines: IntMap::default(),
            line_tables: IntMap::default(),
            warnings: Vec::new(),
        }
    }

    /// Problems met while loading modules, one line each, each said once.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Adds a warning unless it was given already: a library loaded
    /// several times has a module record for each.
    fn warn(&mut self, warning: String) {
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }

    fn module(&mut self, index: usize) -> Option<&LoadedModule> {
        if self.loaded[index].is_none() {
            let module = &self.modules.records[index];
            let mut skipped = Vec::new();
            let loaded = load_module(module, &mut skipped);
            let failure = loaded.as_ref().err().map(|why| {
                format!(
                    "cannot symbolize {}: {why}; its frames are shown as module+offset",
                    if module.path.is_empty() { "(unnamed module)" } else { &module.path }
                )
            });
            for warning in skipped.into_iter().chain(failure) {
                self.warn(warning);
            }
            self.loaded[index] = Some(loaded.ok());
        }
        self.loaded[index].as_ref().and_then(|m| m.as_ref())
    }

    /// The frames (innermost first, inlined ones included) of one return
    /// address, in the modules of the generation its stack node was written in.
    pub fn frames(&mut self, ip: u64, generation: Generation) -> Rc<[Frame]> {
        let records = &self.modules.records;
        let located = self.map.locate(records, ip, self.modules.in_force(generation));
        let key = (located.map_or(NO_MODULE, |(index, _)| index as u32), ip);
        if let Some(frames) = self.cache.get(&key) {
            return frames.clone();
        }
        let frames: Rc<[Frame]> = match located {
            Some((index, probe)) => self.resolve(ip, index, probe),
            None => vec![Frame::named(ip, format!("0x{ip:x}"))],
        }
        .into();
        self.cache.insert(key, frames.clone());
        frames
    }

    /// The frames of return address `ip`, found at `probe` in module record `index`.
    fn resolve(&mut self, ip: u64, index: usize, probe: u64) -> Vec<Frame> {
        let modules = &self.modules.records;
        let own = self.own.is_own(Some(index), modules);
        let module_path = modules[index].path.clone();
        let base = |function: String| Frame {
            module: Some(module_path.clone()),
            module_offset: Some(probe),
            own_code: own,
            ..Frame::named(ip, function)
        };
        let mut out = Vec::new();
        let Some(loaded) = self.module(index) else {
            return vec![base(offset_name(&module_path, probe))];
        };
        let symbol = loaded.symbols.find(probe).map(demangle);
        if let Some(dwarf) = &loaded.dwarf {
            if let Ok(mut iter) = dwarf.find_frames(probe) {
                while let Ok(Some(frame)) = iter.next() {
                    let function = frame.function.as_ref().and_then(|f| f.raw_name().ok()).map(|name| demangle(&name));
                    let (file, line) = match &frame.location {
                        Some(loc) => (loc.file.map(str::to_string), loc.line),
                        None => (None, None),
                    };
                    let mut f = base(function.unwrap_or_default());
                    // Code inlined from a dependency's headers or crates is
                    // not the program's own, even inside its executable.
                    f.own_code = own && !file.as_deref().is_some_and(is_dependency_source);
                    f.file = file;
                    f.line = line;
                    f.inlined = true;
                    out.push(f);
                }
            }
        }
        if let Some(last) = out.last_mut() {
            last.inlined = false;
        }
        let n = out.len();
        for (i, f) in out.iter_mut().enumerate() {
            if f.function.is_empty() {
                f.function =
                    if i + 1 == n { symbol.clone() } else { None }.unwrap_or_else(|| offset_name(&module_path, probe));
            }
        }
        if out.is_empty() {
            out.push(base(symbol.unwrap_or_else(|| offset_name(&module_path, probe))));
        }
        // Without line information the C++ runtime's templates compiled
        // into the executable are told by their names.
        for f in out.iter_mut().filter(|f| f.own_code && f.file.is_none()) {
            f.own_code = !is_cxx_runtime_function(&f.function);
        }
        out
    }

    /// One Python frame: the code's qualified name, file and line.
    pub fn python_frame(&mut self, frame: &PyFrame) -> Frame {
        let mut out = Frame { python: true, ..Frame::named(frame.code, String::new()) };
        let Some(code) = self.pycode.get(&frame.code) else {
            out.function = format!("(unknown Python code 0x{:x})", frame.code);
            return out;
        };
        let line_tables = &mut self.line_tables;
        let line = *self.lines.entry((frame.code, frame.instruction)).or_insert_with(|| {
            let ranges = line_tables.entry(frame.code).or_insert_with(|| ranges(&code.linetable, code.first_line));
            shown_line(ranges, frame.instruction)
        });
        out.function = if code.qualname.is_empty() { "?".to_string() } else { code.qualname.clone() };
        out.file = (!code.filename.is_empty()).then(|| code.filename.clone());
        out.line = line;
        out
    }

    /// A stack's frames, innermost first: allocator and tracer frames
    /// trimmed from the innermost end, the Python frames merged in (see
    /// [`crate::merge::assemble`]) and the own-code frames marked.
    pub fn stack(&mut self, stack: &Stack) -> Vec<Frame> {
        let groups: Vec<Rc<[Frame]>> =
            stack.native.iter().map(|&NativeFrame { address, generation }| self.frames(address, generation)).collect();
        let python: Vec<(Frame, bool)> = stack.python.iter().map(|f| (self.python_frame(f), f.entry)).collect();
        let mut frames = crate::merge::assemble(&groups, &python);
        crate::merge::mark_own_code(&mut frames, &self.own);
        frames
    }
}

/// The cache's module index for an address outside every module.
const NO_MODULE: u32 = u32::MAX;

fn offset_name(path: &str, offset: u64) -> String {
    format!("{}+0x{offset:x}", module_file_name(path))
}

fn module_file_name(path: &str) -> &str {
    path.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("?")
}

#[cfg(test)]
mod dependency_source_tests {
    use super::is_dependency_source;

    #[test]
    fn headers_and_crates_are_not_own_code() {
        assert!(is_dependency_source("/venv/lib/python3.11/site-packages/torch/include/ATen/ops/relu.h"));
        assert!(is_dependency_source("/root/.cargo/registry/src/index.crates.io-1/tch-0.26.0/src/nn/sequential.rs"));
        assert!(is_dependency_source("/rustc/59807616e/library/core/src/iter/mod.rs"));
        assert!(!is_dependency_source("/work/app/src/main.rs"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record of a process running `exe`, without settings.
    fn process(exe: &str) -> Process {
        Process { pid: 1, forked_from: None, start_unix_ns: 0, exe: exe.into(), cmdline: vec![], settings: vec![] }
    }

    #[test]
    fn runtime_modules() {
        for path in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
            "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
            "/venv/lib/python3.11/site-packages/torch/lib/libc10.so",
            "/venv/lib/python3.11/site-packages/torch/lib/libtorch_python.so",
            "/venv/lib/python3.11/site-packages/torch/lib/libgomp-a34b3233.so.1",
            "/venv/lib/python3.11/site-packages/torch/_C.cpython-311-x86_64-linux-gnu.so",
            "/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublasLt.so.12",
            "/usr/local/cuda/lib64/libcudart.so.12",
            "/opt/intel/lib/libiomp5.so",
            "/usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/_pickle.cpython-311-x86_64-linux-gnu.so",
            "/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so",
        ] {
            assert!(is_runtime_module(path), "{path}");
        }
        for path in ["/opt/app/train", "/opt/app/libmine.so", "/venv/lib/python3.11/site-packages/mine/_ext.so"] {
            assert!(!is_runtime_module(path), "{path}");
        }
    }

    /// The executable's own libraries are those beside it or in the `lib`
    /// beside its `bin`, the runtime's excepted; a system prefix's `lib` is
    /// everyone's.
    #[test]
    fn own_code_is_the_executable_and_the_libraries_beside_it() {
        fn own<'p>(exe: &str, paths: &[&'p str]) -> Vec<&'p str> {
            let process = process(exe);
            let modules: Vec<Module> = paths
                .iter()
                .map(|path| Module { path: path.to_string(), load_bias: 0, segments: Vec::new(), build_id: Vec::new() })
                .collect();
            let own = OwnCode::for_process(&process, &modules);
            paths
                .iter()
                .enumerate()
                .filter(|&(i, _)| own.is_own(Some(i), &modules))
                .map(|(_, p)| *p)
                .collect::<Vec<_>>()
        }
        let app = [
            "/opt/app/bin/train",
            "/opt/app/bin/libmodel.so",
            "/opt/app/lib/libdata.so.1",
            "/opt/app/lib/libtorch_cpu.so",
            "/opt/app/plugins/libextra.so",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ];
        assert_eq!(
            own("/opt/app/bin/train", &app),
            ["/opt/app/bin/train", "/opt/app/bin/libmodel.so", "/opt/app/lib/libdata.so.1"]
        );
        let build = ["/work/build/train", "/work/build/libmodel.so", "/work/lib/libother.so"];
        assert_eq!(
            own("/work/build/train", &build),
            ["/work/build/train", "/work/build/libmodel.so"],
            "no bin, no lib"
        );
        let installed = ["/usr/local/bin/train", "/usr/local/lib/libfoo.so"];
        assert_eq!(own("/usr/local/bin/train", &installed), ["/usr/local/bin/train"]);
    }

    #[test]
    fn python_frame_labels() {
        let mut f = Frame {
            file: Some("/job/train.py".into()),
            line: Some(42),
            own_code: true,
            python: true,
            ..Frame::named(7, "train_step".into())
        };
        assert_eq!(f.label(), "train_step (train.py:42)");
        f.line = None;
        assert_eq!(f.label(), "train_step (train.py)");
        f.python = false;
        assert_eq!(f.label(), "train_step");
    }

    #[test]
    fn an_address_is_named_by_the_module_of_its_nodes_generation() {
        let process = process("/opt/app");
        let module = |path: &str| Module {
            path: path.into(),
            load_bias: 0x1000,
            segments: vec![(0x1000, 0x2000)],
            build_id: vec![],
        };
        let mut modules = ModuleRecords::default();
        modules.push(module("/gone/first.so"));
        modules.push(module("/gone/second.so"));
        let pycode = IntMap::default();
        let mut symbolizer = Symbolizer::new(&process, &modules, &pycode);
        let named = |symbolizer: &mut Symbolizer, generation| {
            let stack = Stack { native: vec![NativeFrame { address: 0x1234, generation }], ..Stack::default() };
            let frame = symbolizer.stack(&stack).remove(0);
            (frame.function, frame.module.unwrap_or_default())
        };
        assert_eq!(named(&mut symbolizer, 0), ("first.so+0x233".to_string(), "/gone/first.so".to_string()));
        assert_eq!(named(&mut symbolizer, 1), ("second.so+0x233".to_string(), "/gone/second.so".to_string()));
        assert_eq!(named(&mut symbolizer, 0).1, "/gone/first.so", "each (module, address) cached apart");
    }

    #[test]
    fn a_library_loaded_twice_is_warned_about_once() {
        let process = process("/opt/app");
        let at = |start: u64| Module {
            path: "/gone/plugin.so".into(),
            load_bias: start,
            segments: vec![(start, start + 0x1000)],
            build_id: vec![],
        };
        let mut modules = ModuleRecords::default();
        modules.push(at(0x10000));
        modules.push(at(0x20000));
        let pycode = IntMap::default();
        let mut symbolizer = Symbolizer::new(&process, &modules, &pycode);
        for address in [0x10100, 0x20100] {
            assert_eq!(&*symbolizer.frames(address, 0)[0].function, "plugin.so+0xff", "the return address less one");
        }
        assert_eq!(symbolizer.warnings().len(), 1, "{:?}", symbolizer.warnings());
    }

    #[test]
    fn the_cxx_runtime_is_no_own_code() {
        for name in [
            "std::_Rb_tree_iterator<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > > std::_Rb_tree<int, std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::_Select1st<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > >, std::less<int>, std::allocator<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > > >::_M_emplace_hint_unique<std::piecewise_construct_t const&, std::tuple<int&&>, std::tuple<> >(std::_Rb_tree_const_iterator<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > >, std::piecewise_construct_t const&, std::tuple<int&&>&&, std::tuple<>&&) [clone .isra.0]",
            "std::__new_allocator<int>::allocate(unsigned long, void const*)",
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > std::operator+<char, std::char_traits<char>, std::allocator<char> >(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >&&, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >&&)",
            "__gnu_cxx::__ops::_Iter_comp_iter<main::{lambda(int, int)#1}>::operator()<int*, int*>(int*, int*)",
            "__gnu_cxx::__enable_if<true, float*>::__type std::__copy_move_a1<false, float*, float>(float*, float*, float*)",
            "__cxxabiv1::__si_class_type_info::__do_dyncast(long, __cxxabiv1::__class_type_info::__sub_kind, __cxxabiv1::__class_type_info const*, void const*, __cxxabiv1::__class_type_info const*, void const*, __cxxabiv1::__class_type_info::__dyncast_result&) const",
            "__cxa_allocate_exception",
            "operator new(unsigned long)",
            "operator new[](unsigned long, std::nothrow_t const&)",
            "operator delete(void*, unsigned long)",
            "std::vector<int, std::allocator<int> >::_M_default_append(unsigned long) [clone .part.0]",
        ] {
            assert!(is_cxx_runtime_function(name), "{name}");
        }
        for name in [
            "register_user()",
            "main",
            "app::Pool<app::detail::Blob>::make()",
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > app::make_name<int>(int)",
            "std::vector<int, std::allocator<int> > keep<std::vector<int, std::allocator<int> > >()",
            "lambdas(int)::{lambda(int)#1}::operator()(int) const",
            "app::Arena::operator new(unsigned long)",
            "operator_newest()",
            "(anonymous namespace)::fill(std::vector<int, std::allocator<int> >&)",
            "maps+0x1234",
        ] {
            assert!(!is_cxx_runtime_function(name), "{name}");
        }
    }

    #[test]
    fn frames_named_by_their_module_and_offset() {
        let frame = |function: &str, module: Option<&str>| Frame {
            module: module.map(Into::into),
            ..Frame::named(0x1234, function.into())
        };
        assert!(frame("first.so+0x233", Some("/gone/first.so")).named_by_offset());
        assert!(frame("first+0x1a2b", Some("/opt/app/first")).named_by_offset());
        for (function, module) in [
            ("first_leak", Some("/opt/app/first")),
            ("first+0x", Some("/opt/app/first")),
            ("first+0x12g", Some("/opt/app/first")),
            ("first.so+0x233", Some("/opt/app/second.so")),
            ("0x1234", None),
        ] {
            assert!(!frame(function, module).named_by_offset(), "{function} in {module:?}");
        }
    }

    #[test]
    fn allocator_frames() {
        let f = |name: &str| Frame::named(0, name.into());
        for name in ["malloc", "operator new(unsigned long)", "operator new[](unsigned long)", "_Znwm", "__libc_malloc"]
        {
            assert!(is_allocator_frame(&f(name)), "{name}");
        }
        for name in ["main", "make_buffer", "std::vector<int>::push_back"] {
            assert!(!is_allocator_frame(&f(name)), "{name}");
        }
    }
}
