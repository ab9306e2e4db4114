//! Helpers for the end-to-end tests: build the test programs, run them under
//! the tracer, read their traces and the analyzer's JSON report.
//!
//! The tests use the release builds of `libtracer.so` and `analyzer`;
//! `scripts/test.sh` builds them first. A missing build is a test failure
//! with instructions, never a skip.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use trace_format::{Process, Record, RecordReader, TraceEnd};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// A Python program of the tests, `tests/python/<name>`.
pub fn python_script(name: &str) -> PathBuf {
    repo_root().join("tests/python").join(name)
}

/// The number of the first line of `file` (under tests/) that contains `text`.
pub fn line_of(file: &str, text: &str) -> u64 {
    let source = std::fs::read_to_string(repo_root().join("tests").join(file)).unwrap();
    let index = source.lines().position(|line| line.contains(text)).unwrap_or_else(|| panic!("{file} has no {text:?}"));
    index as u64 + 1
}

fn release_artifact(name: &str) -> PathBuf {
    let path = repo_root().join("target/release").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --release` (scripts/test.sh does) before the tests",
        path.display()
    );
    path
}

pub fn tracer_lib() -> PathBuf {
    release_artifact("libtracer.so")
}

pub fn analyzer() -> PathBuf {
    release_artifact("analyzer")
}

/// CPython `version` ("3.11"): `TRACER_TEST_PYTHON3_11` (and so on), then
/// `~/.pyenv/versions/3.11.*/bin/python3`, then `python3.11` on the PATH; a
/// missing interpreter is a failure with instructions, never a skip.
pub fn python_interpreter(version: &str) -> PathBuf {
    let var = format!("TRACER_TEST_PYTHON{}", version.replace('.', "_"));
    if let Some(path) = std::env::var_os(&var) {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    let pyenv = std::env::var_os("PYENV_ROOT").map(PathBuf::from).unwrap_or_else(|| home.join(".pyenv"));
    let mut found: Vec<PathBuf> = std::fs::read_dir(pyenv.join("versions"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_prefix(version)
                .is_some_and(|rest| rest.starts_with('.') && rest[1..].chars().all(|c| c.is_ascii_digit()))
        })
        .map(|entry| entry.path().join("bin/python3"))
        .filter(|path| path.exists())
        .collect();
    found.sort();
    if let Some(path) = found.pop() {
        return path;
    }
    let on_path = format!("python{version}");
    if Command::new(&on_path).arg("-c").arg("pass").status().is_ok_and(|s| s.success()) {
        return PathBuf::from(on_path);
    }
    panic!("Python {version} is missing: install it (`pyenv install {version}` or apt's python{version}) or set {var}");
}

/// The Python of the project's venv, which has torch (scripts/setup-demo.sh makes it).
pub fn venv_python() -> PathBuf {
    let path = repo_root().join(".venv/bin/python");
    assert!(path.exists(), "{} is missing: run scripts/setup-demo.sh (scripts/test.sh does) first", path.display());
    path
}

/// The demo trainer (Rust on libtorch), built by scripts/setup-demo.sh.
pub fn demo_trainer() -> PathBuf {
    let path = repo_root().join("demo-trainer/target/release/demo-trainer");
    assert!(path.exists(), "{} is missing: run scripts/setup-demo.sh (scripts/test.sh does) first", path.display());
    path
}

/// Compiles `tests/programs/<name>` (C or C++) the way production code is
/// built: optimized and without frame pointers, with debug info for names.
/// Each program is built once per test process; the binary is written under a
/// temporary name and renamed into place, so a test running the previous
/// build never sees a half-written file.
pub fn compile(name: &str) -> PathBuf {
    build(name, Built::Program)
}

/// Compiles `tests/programs/<name>` as [`compile`] does, but as
/// position-dependent code in a program without PIE (loaded at a fixed
/// address), as Debian's python3 is.
pub fn compile_without_pie(name: &str) -> PathBuf {
    build(name, Built::ProgramWithoutPie)
}

/// Compiles `tests/programs/<name>` as [`compile`] does, but without debug
/// information, as programs are often shipped: optimized (`-O2`) or not
/// (`-O0`).
pub fn compile_without_debug_info(name: &str, optimized: bool) -> PathBuf {
    build(name, Built::WithoutDebugInfo { optimized })
}

/// Compiles `tests/programs/<name>` as a shared library, `lib<stem>.so`, as
/// [`compile`] builds programs.
pub fn compile_library(name: &str) -> PathBuf {
    build(name, Built::Library)
}

/// A copy of `library` in `dir` with its debug information split off into
/// `<name>.debug` beside it and named by its `.gnu_debuglink`, as release
/// builds and distributions ship libraries: `objcopy --only-keep-debug`,
/// `strip -g`, `objcopy --add-gnu-debuglink`. Returns the copy's path.
pub fn split_debug_info(library: &Path, dir: &Path) -> PathBuf {
    let copy = dir.join(library.file_name().unwrap());
    let debug = debug_file_of(&copy);
    std::fs::copy(library, &copy).unwrap();
    let only_debug = [OsStr::new("--only-keep-debug"), copy.as_os_str(), debug.as_os_str()];
    binutils("objcopy", &only_debug);
    binutils("strip", &[OsStr::new("-g"), copy.as_os_str()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    binutils("objcopy", &[OsStr::new(&link), copy.as_os_str()]);
    copy
}

/// The debug file [`split_debug_info`] puts beside `library`.
pub fn debug_file_of(library: &Path) -> PathBuf {
    let mut name = library.as_os_str().to_owned();
    name.push(".debug");
    PathBuf::from(name)
}

/// Runs one of binutils' tools, which the C toolchain brings.
pub fn binutils(tool: &str, args: &[&OsStr]) {
    let status = Command::new(tool).args(args).status().unwrap_or_else(|err| {
        panic!("cannot run {tool}: {err}; install binutils (scripts/install-build-deps.sh does)")
    });
    assert!(status.success(), "{tool} {args:?} failed");
}

#[derive(Clone, Copy, PartialEq)]
enum Built {
    Program,
    ProgramWithoutPie,
    Library,
    WithoutDebugInfo { optimized: bool },
}

fn build(name: &str, kind: Built) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, Built, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, _, binary)) = built.iter().find(|(n, k, _)| n == name && *k == kind) {
        return binary.clone();
    }
    let source = repo_root().join("tests/programs").join(name);
    let out_dir = repo_root().join("target/test-programs");
    std::fs::create_dir_all(&out_dir).unwrap();
    let stem = Path::new(name).file_stem().unwrap().to_string_lossy();
    let (binary, flags) = match kind {
        Built::Program => (out_dir.join(&*stem), &["-O2", "-g"][..]),
        Built::ProgramWithoutPie => (out_dir.join(format!("{stem}-no-pie")), &["-O2", "-g", "-fno-pic", "-no-pie"][..]),
        Built::Library => (out_dir.join(format!("lib{stem}.so")), &["-O2", "-g", "-shared", "-fPIC"][..]),
        Built::WithoutDebugInfo { optimized: true } => (out_dir.join(format!("{stem}-O2-no-g")), &["-O2"][..]),
        Built::WithoutDebugInfo { optimized: false } => (out_dir.join(format!("{stem}-O0-no-g")), &["-O0"][..]),
    };
    let partial = out_dir.join(format!(".{stem}.{}", std::process::id()));
    let compiler = if name.ends_with(".cpp") { "c++" } else { "cc" };
    let status = Command::new(compiler)
        .args(flags)
        .args(["-fomit-frame-pointer", "-pthread"])
        .arg("-o")
        .arg(&partial)
        .arg(&source)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|err| panic!("cannot run {compiler}: {err}; install a C/C++ toolchain (scripts/test.sh does)"));
    assert!(status.success(), "compiling {} failed", source.display());
    std::fs::rename(&partial, &binary).unwrap();
    built.push((name.to_string(), kind, binary.clone()));
    binary
}

/// jemalloc's shared library, which scripts/install-build-deps.sh installs.
pub fn jemalloc() -> PathBuf {
    installed_library("libjemalloc.so.2", "libjemalloc2")
}

/// tcmalloc's (gperftools' minimal build), which scripts/install-build-deps.sh installs.
pub fn tcmalloc() -> PathBuf {
    installed_library("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4")
}

/// LD_PRELOAD for the tracer with `allocator` preloaded after it, or alone.
pub fn preload_after_tracer(allocator: Option<&Path>) -> String {
    match allocator {
        Some(allocator) => format!("{} {}", tracer_lib().display(), allocator.display()),
        None => tracer_lib().display().to_string(),
    }
}

/// Where the loader's cache has `soname`, from Debian's `package`.
fn installed_library(soname: &str, package: &str) -> PathBuf {
    let listed = Command::new("ldconfig").arg("-p").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let prefix = format!("{soname} ");
    listed
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.trim().strip_prefix(&prefix)?.split(" => ").nth(1).map(PathBuf::from))
        .unwrap_or_else(|| {
            panic!("{soname} is not installed; scripts/install-build-deps.sh installs it (Debian: {package})")
        })
}

/// A program's run under the tracer, in a directory of its own.
pub struct TracedRun {
    pub dir: tempfile::TempDir,
    pub trace: PathBuf,
    pub output: Output,
}

impl TracedRun {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// The run, once it is known to have exited successfully.
    #[track_caller]
    pub fn succeeded(self) -> TracedRun {
        assert!(self.output.status.success(), "{}:\n{}{}", self.output.status, self.stdout(), self.stderr());
        self
    }

    /// Every trace file the run left: the named one and its descendants'.
    pub fn trace_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.file_name().unwrap().to_string_lossy().starts_with("trace.bin"))
            .collect();
        files.sort();
        files
    }
}

/// A command set up to run under the tracer, writing `trace.bin` in a fresh directory.
pub fn traced_command(program: &Path) -> (Command, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(program);
    // The tracer's settings, and what a traced ancestor hands down, come
    // from the test alone.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TRACER_") {
            command.env_remove(name);
        }
    }
    command.current_dir(dir.path()).env("LD_PRELOAD", tracer_lib()).env("TRACER_OUTPUT", dir.path().join("trace.bin"));
    (command, dir)
}

/// Every allocation from the start, the warm-up included (by default the
/// first epoch is sampled): for tests that read what the first epoch allocated.
pub const FULL_CAPTURE: (&str, &str) = ("TRACER_WARMUP_SAMPLE_BYTES", "0");

pub fn run_traced(program: &Path, args: &[&str]) -> TracedRun {
    run_traced_with(program, args, &[])
}

/// [`run_traced`] with extra environment variables (tracer settings).
pub fn run_traced_with(program: &Path, args: &[&str], env: &[(&str, &str)]) -> TracedRun {
    let (mut command, dir) = traced_command(program);
    command.args(args).envs(env.iter().copied());
    let output = output_once_writable_files_close(&mut command);
    let trace = dir.path().join("trace.bin");
    TracedRun { dir, trace, output }
}

/// Runs `command`, retrying while exec fails with ETXTBSY: a test that has
/// just written the program it runs (a launcher script) can find it still
/// open for writing in a child that another test's thread forked and has
/// not yet exec'd, which closes it.
fn output_once_writable_files_close(command: &mut Command) -> std::process::Output {
    for _ in 0..50 {
        match command.output() {
            Err(err) if err.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            result => return result.unwrap(),
        }
    }
    panic!("{command:?}: the program stayed open for writing (ETXTBSY) for a second")
}

/// All records of a trace and how it ended.
pub fn read_trace(path: &Path) -> (Vec<Record>, TraceEnd) {
    let mut reader = RecordReader::open(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let records: Vec<Record> = reader.by_ref().collect();
    (records, reader.end().clone())
}

/// The process record the trace at `path` starts with.
pub fn process_record(path: &Path) -> Process {
    match read_trace(path).0.into_iter().next() {
        Some(Record::Process(process)) => process,
        _ => panic!("{} has no process record", path.display()),
    }
}

pub fn snapshot_count(records: &[Record]) -> usize {
    records.iter().filter(|r| matches!(r, Record::Snapshot(_))).count()
}

/// The text report of a trace (its flamegraph drawn beside it).
pub fn report_text(trace: &Path) -> String {
    let output = Command::new(analyzer()).arg("report").arg(trace).output().unwrap();
    assert!(
        output.status.success(),
        "analyzer report {} failed: {}",
        trace.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `analyzer report --json` and parses its output.
pub fn report_json(trace: &Path) -> serde_json::Value {
    let output = Command::new(analyzer()).arg("report").arg(trace).arg("--json").output().unwrap();
    assert!(
        output.status.success(),
        "analyzer report {} failed: {}",
        trace.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("analyzer --json prints one JSON object")
}

/// The function names of a suspect's frames, innermost first.
pub fn suspect_functions(suspect: &serde_json::Value) -> Vec<String> {
    suspect["frames"]
        .as_array()
        .expect("a suspect has frames")
        .iter()
        .map(|frame| frame["function"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The suspects of a report, each as its list of function names.
pub fn suspects(report: &serde_json::Value) -> Vec<Vec<String>> {
    report["suspects"].as_array().expect("a report has suspects").iter().map(suspect_functions).collect()
}

pub fn mentions(functions: &[String], name: &str) -> bool {
    functions.iter().any(|f| f.contains(name))
}

/// A stack rebuilt from a trace's prefix tree: native return addresses and
/// Python frames, each innermost first.
#[derive(Debug, Clone, Default)]
pub struct Stack {
    pub native: Vec<u64>,
    pub python: Vec<trace_format::PyFrame>,
    /// The stack made an anonymous mapping (its innermost node is the marker).
    pub mapping: bool,
}

/// The stack nodes of a trace, by id.
#[derive(Default)]
pub struct StackTree {
    nodes: std::collections::HashMap<u32, trace_format::StackNode>,
}

impl StackTree {
    /// Adds nodes, checking that each parent came first.
    pub fn add(&mut self, nodes: &trace_format::StackNodes) {
        for node in &nodes.nodes {
            assert!(
                node.parent == 0 || self.nodes.contains_key(&node.parent),
                "node {} comes before its parent",
                node.id
            );
            if let trace_format::Frame::PythonLeaf(leaf) = node.frame {
                assert!(self.nodes.contains_key(&leaf), "node {} comes before the Python leaf it names", node.id);
            }
            self.nodes.insert(node.id, *node);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn has_python_frames(&self) -> bool {
        self.nodes.values().any(|node| matches!(node.frame, trace_format::Frame::Python(_)))
    }

    pub fn contains(&self, id: u32) -> bool {
        self.nodes.contains_key(&id)
    }

    /// The stack whose innermost node is `id`: its native path, and the
    /// path of Python frames its innermost node names, if any.
    pub fn stack(&self, id: u32) -> Stack {
        let mut stack = Stack::default();
        let mut next = Some(id);
        while let Some(mut id) = next.take() {
            while id != 0 {
                let node = self.nodes[&id];
                match node.frame {
                    trace_format::Frame::Native(address) => stack.native.push(address),
                    trace_format::Frame::Python(frame) => stack.python.push(frame),
                    trace_format::Frame::PythonLeaf(leaf) => next = Some(leaf),
                    trace_format::Frame::Mapping | trace_format::Frame::SharedMapping => stack.mapping = true,
                }
                id = node.parent;
            }
        }
        stack
    }
}

/// Runs `command` with its output in files, killing it after `limit`.
pub fn output_within(mut command: Command, dir: &Path, limit: std::time::Duration) -> std::process::Output {
    let stdout = std::fs::File::create(dir.join("stdout.txt")).unwrap();
    let stderr = std::fs::File::create(dir.join("stderr.txt")).unwrap();
    let mut child = command.stdin(std::process::Stdio::null()).stdout(stdout).stderr(stderr).spawn().unwrap();
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the traced program did not finish within {limit:?}; stderr:\n{}",
                std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: std::fs::read(dir.join("stdout.txt")).unwrap(),
        stderr: std::fs::read(dir.join("stderr.txt")).unwrap(),
    }
}
