//! Symbolization against a real ELF file with DWARF: a tiny C program built
//! here, its function addresses taken from `nm`.

use std::path::{Path, PathBuf};
use std::process::Command;

use analyzer::synth::{write_temp, Sim, TempFile};
use object::Object;
use trace_format::Module;

const SOURCE: &str = r#"#include <stdlib.h>

__attribute__((noinline)) void *__libc_fake_alloc(unsigned long n) {
    return malloc(n + 1);
}

__attribute__((noinline)) void *make_node(unsigned long n) {
    void *p = __libc_fake_alloc(n * 3);
    return p;
}

int main(int argc, char **argv) {
    (void)argv;
    return make_node((unsigned long)argc) != 0;
}
"#;

struct Program {
    /// Its source, in the folder the program is built in: kept for the
    /// program's life.
    _source: TempFile,
    exe: PathBuf,
    build_id: Vec<u8>,
    symbols: Vec<(String, u64)>,
}

fn build(pie: bool) -> Program {
    build_from(SOURCE, "tiny.c", if pie { "tiny-pie" } else { "tiny" }, pie)
}

fn build_from(source: &str, source_name: &str, name: &str, pie: bool) -> Program {
    let src = write_temp(source_name, source.as_bytes());
    let exe = src.with_file_name(name);
    let mut cc = Command::new("cc");
    cc.args([
        if name.starts_with("python") { "-O0" } else { "-O2" },
        "-g",
        "-fomit-frame-pointer",
        "-Wl,--build-id",
        "-o",
    ])
    .arg(&exe)
    .arg(&src);
    cc.arg(if pie { "-pie" } else { "-no-pie" });
    if pie {
        cc.arg("-fPIE");
    }
    let status = cc.status().expect("a C compiler (cc) is needed: scripts/test.sh installs it");
    assert!(status.success(), "compiling {} failed", src.display());
    let nm = Command::new("nm").arg(&exe).output().expect("nm (binutils) is needed: scripts/test.sh installs it");
    let symbols = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
            let kind = parts.next()?;
            let name = parts.next()?;
            (kind == "T" || kind == "t").then(|| (name.to_string(), addr))
        })
        .collect();
    let data = std::fs::read(&exe).unwrap();
    let build_id = object::File::parse(&*data).unwrap().build_id().unwrap().unwrap_or(&[]).to_vec();
    Program { _source: src, exe, build_id, symbols }
}

impl Program {
    fn addr(&self, name: &str) -> u64 {
        self.symbols.iter().find(|s| s.0 == name).unwrap_or_else(|| panic!("{name} in nm output")).1
    }
}

fn line_of(needle: &str) -> u32 {
    SOURCE.lines().position(|l| l.contains(needle)).unwrap() as u32 + 1
}

/// A leaking trace whose one stack is malloc <- __libc_fake_alloc <- make_node <- main.
fn leaking_trace(program: &Program, exe: &str, bias: u64, build_id: Vec<u8>) -> TempFile {
    let mut sim = Sim::new(exe);
    sim.module(Module {
        path: program.exe.display().to_string(),
        load_bias: bias,
        segments: vec![(bias + 0x1000.min(program.addr("main")), bias + 0x20_0000 + program.addr("main"))],
        build_id,
    });
    // Return addresses just past a call: a few bytes into each function.
    let ips = ["__libc_fake_alloc", "make_node", "main"].map(|f| bias + program.addr(f) + 4);
    sim.stack(1, ips.to_vec());
    for e in 0..8 {
        sim.alloc_many(1, 100, 1024);
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    write_temp("trace.bin", &sim.bytes())
}

fn report_json(trace: &Path) -> (serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_analyzer")).arg("report").arg(trace).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&out.stdout).unwrap(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn check_frames(v: &serde_json::Value, program: &Program) {
    let frames = v["suspects"][0]["frames"].as_array().unwrap();
    let names: Vec<&str> = frames.iter().map(|f| f["function"].as_str().unwrap()).collect();
    assert_eq!(names, ["make_node", "main"], "allocator frame trimmed, innermost first: {frames:?}");
    let top = &frames[0];
    assert!(top["file"].as_str().unwrap().ends_with("tiny.c"), "{top}");
    let line = top["line"].as_u64().unwrap() as u32;
    assert!((line_of("void *make_node")..=line_of("return p;")).contains(&line), "line {line}: {top}");
    assert_eq!(top["module"].as_str().unwrap(), program.exe.display().to_string());
    assert_eq!(top["own_code"], true);
    assert_eq!(top["inlined"], false);
    let main = &frames[1];
    let line = main["line"].as_u64().unwrap() as u32;
    assert!((line_of("int main")..=line_of("return make_node")).contains(&line), "{main}");
}

#[test]
fn a_non_pie_executable_resolves_function_file_and_line() {
    let program = build(false);
    let exe = program.exe.display().to_string();
    let trace = leaking_trace(&program, &exe, 0, program.build_id.clone());
    let (v, stderr) = report_json(&trace);
    assert!(stderr.is_empty(), "{stderr}");
    check_frames(&v, &program);
    assert!(v["verdict"]["message"].as_str().unwrap().contains("make_node"));

    let out = Command::new(env!("CARGO_BIN_EXE_analyzer")).arg("report").arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("> make_node"), "{text}");
    assert!(!text.contains("__libc_fake_alloc"), "{text}");
}

#[test]
fn a_pie_executable_resolves_through_its_load_bias() {
    let program = build(true);
    let exe = program.exe.display().to_string();
    let trace = leaking_trace(&program, &exe, 0x5555_5555_0000, program.build_id.clone());
    let (v, _) = report_json(&trace);
    check_frames(&v, &program);
}

#[test]
fn under_an_interpreter_own_code_is_the_first_frame_outside_the_runtime() {
    let program = build(false);
    let trace = leaking_trace(&program, "/usr/bin/python3.12", 0, program.build_id.clone());
    let (v, _) = report_json(&trace);
    check_frames(&v, &program);
}

#[test]
fn a_build_id_mismatch_is_said_once_and_frames_fall_back_to_offsets() {
    let program = build(false);
    let exe = program.exe.display().to_string();
    let trace = leaking_trace(&program, &exe, 0, vec![0xde, 0xad, 0xbe, 0xef]);
    let (v, stderr) = report_json(&trace);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("build id") && stderr.contains("deadbeef"), "{stderr}");
    let f = &v["suspects"][0]["frames"][0];
    let expected = format!("tiny+0x{:x}", program.addr("__libc_fake_alloc") + 3);
    assert_eq!(f["function"], expected.as_str(), "{f}");
}

#[test]
fn a_missing_module_file_is_said_once() {
    let program = build(false);
    let exe = program.exe.display().to_string();
    let trace = leaking_trace(&program, &exe, 0, program.build_id.clone());
    std::fs::remove_file(&program.exe).unwrap();
    let (v, stderr) = report_json(&trace);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot open"), "{stderr}");
    assert!(v["suspects"][0]["frames"][0]["function"].as_str().unwrap().starts_with("tiny+0x"));
}

/// Stands in for a Python interpreter: its eval loop and call plumbing.
const FAKE_PYTHON: &str = r#"
__attribute__((noinline)) int _PyEval_EvalFrameDefault(int n) { return n + 1; }
__attribute__((noinline)) int PyObject_Vectorcall(int n) { return _PyEval_EvalFrameDefault(n) * 2; }
__attribute__((noinline)) int Py_BytesMain(int n) { return PyObject_Vectorcall(n) - 3; }
int main(int argc, char **argv) { (void)argv; return Py_BytesMain(argc); }
"#;

/// The trace of [`FAKE_PYTHON`] running `/job/app.py`, whose `inner`
/// calls `make_node` of `extension`, loaded from `extension_path`: stack 1
/// through both eval-loop calls, stack 2 through an interpreter whose outer
/// eval loop is missing.
fn python_calling(extension: &Program, extension_path: &Path, python: &Program) -> TempFile {
    use trace_format::{Frame, PyCode, PyFrame};
    let bias = 0x5555_0000_0000u64;
    let mut sim = Sim::new(&python.exe.display().to_string());
    sim.process_mut().settings = vec![("python".into(), "3.11.7 frames".into())];
    sim.module(Module {
        path: extension_path.display().to_string(),
        load_bias: 0,
        segments: vec![(0x1000.min(extension.addr("main")), 0x20_0000 + extension.addr("main"))],
        build_id: extension.build_id.clone(),
    });
    sim.module(Module {
        path: python.exe.display().to_string(),
        load_bias: bias,
        segments: vec![(bias, bias + 0x20_0000)],
        build_id: python.build_id.clone(),
    });
    for (id, name, line) in [(1u64, "inner", 10u32), (2, "outer", 20), (3, "<module>", 30)] {
        sim.py_code(PyCode {
            id,
            filename: "/job/app.py".into(),
            qualname: name.into(),
            first_line: line,
            linetable: vec![0x80 | 7, 0x00],
        });
    }
    let ext = |f: &str| Frame::Native(extension.addr(f) + 4);
    let py = |f: &str| Frame::Native(bias + python.addr(f) + 4);
    let code = |code: u64, entry: bool| Frame::Python(PyFrame { code, instruction: 0, entry });
    // malloc <- __libc_fake_alloc <- make_node (the extension) <- inner <- outer
    // (one eval-loop call) <- plumbing <- <module> (another) <- start-up.
    let frames = vec![
        ext("__libc_fake_alloc"),
        ext("make_node"),
        py("PyObject_Vectorcall"),
        py("_PyEval_EvalFrameDefault"),
        py("PyObject_Vectorcall"),
        py("_PyEval_EvalFrameDefault"),
        py("Py_BytesMain"),
        py("main"),
        code(1, false),
        code(2, true),
        code(3, true),
    ];
    sim.stack_frames(1, frames.clone());
    // The same stack through an interpreter whose outer eval loop is missing.
    let mut odd = frames;
    odd.remove(5);
    sim.stack_frames(2, odd);
    for e in 0..8 {
        sim.alloc_many(1, 100, 2048);
        sim.alloc_many(2, 100, 1024);
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    write_temp("trace.bin", &sim.bytes())
}

/// `program` copied into a `site-packages` folder beside it: an extension
/// module installed with a package.
fn installed(program: &Program) -> PathBuf {
    let dir = program.exe.with_file_name("site-packages");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny_ext.so");
    std::fs::copy(&program.exe, &path).unwrap();
    path
}

fn function_names(suspect: &serde_json::Value) -> Vec<String> {
    suspect["frames"].as_array().unwrap().iter().map(|f| f["function"].as_str().unwrap().to_string()).collect()
}

#[test]
fn python_frames_replace_the_eval_loop_calls_that_ran_them() {
    let extension = build(false);
    let python = build_from(FAKE_PYTHON, "python.c", "python3.11", true);
    let trace = python_calling(&extension, &installed(&extension), &python);
    let (v, stderr) = report_json(&trace);
    assert!(stderr.is_empty(), "{stderr}");
    let merged = &v["suspects"][0];
    assert_eq!(merged["stack_id"], 1);
    assert_eq!(function_names(merged), ["make_node", "inner", "outer", "<module>", "main"]);
    let frames = merged["frames"].as_array().unwrap();
    assert_eq!(frames[1]["python"], true);
    assert_eq!(frames[1]["own_code"], true);
    assert_eq!(frames[0]["own_code"], false, "a Python frame of the program comes first, not an installed extension's");
    assert!(v["verdict"]["message"].as_str().unwrap().starts_with("inner (app.py:10) keeps"), "{}", v["verdict"]);

    let fallback = &v["suspects"][1];
    assert_eq!(
        function_names(fallback),
        [
            "make_node",
            "PyObject_Vectorcall",
            "_PyEval_EvalFrameDefault",
            "PyObject_Vectorcall",
            "Py_BytesMain",
            "main",
            "inner",
            "outer",
            "<module>"
        ]
    );
}

#[test]
fn the_users_library_python_calls_is_the_line_called_from_python() {
    let extension = build(false);
    let python = build_from(FAKE_PYTHON, "python.c", "python3.11", true);
    let trace = python_calling(&extension, &extension.exe, &python);
    let (v, stderr) = report_json(&trace);
    assert!(stderr.is_empty(), "{stderr}");
    let merged = &v["suspects"][0];
    assert_eq!(function_names(merged), ["make_node", "inner", "outer", "<module>", "main"]);
    let own: Vec<bool> = merged["frames"].as_array().unwrap().iter().map(|f| f["own_code"] == true).collect();
    assert_eq!(own, [true, true, true, true, false], "the user's C code first, then the Python that called it");
    let line = line_of("__libc_fake_alloc(n * 3)");
    let verdict = v["verdict"]["message"].as_str().unwrap();
    let named = format!("make_node (tiny.c:{line}), called from inner (app.py:10), keeps about ");
    assert!(verdict.starts_with(&named), "{verdict}");
}
