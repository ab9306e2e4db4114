//! Symbolization against a real ELF file with DWARF: a tiny C program built
//! here, its function addresses taken from `nm`.

use std::path::{Path, PathBuf};
use std::process::Command;

use analyzer::synth::{write_temp, Sim};
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
    exe: PathBuf,
    build_id: Vec<u8>,
    symbols: Vec<(String, u64)>,
}

fn build(pie: bool) -> Option<Program> {
    let src = write_temp("tiny.c", SOURCE.as_bytes());
    let exe = src.with_file_name(if pie { "tiny-pie" } else { "tiny" });
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-g", "-fomit-frame-pointer", "-Wl,--build-id", "-o"]).arg(&exe).arg(&src);
    cc.arg(if pie { "-pie" } else { "-no-pie" });
    if pie {
        cc.arg("-fPIE");
    }
    match cc.status() {
        Ok(status) if status.success() => {}
        _ => {
            eprintln!("skipping: no working C compiler");
            return None;
        }
    }
    let nm = Command::new("nm").arg(&exe).output().ok()?;
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
    Some(Program { exe, build_id, symbols })
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
fn leaking_trace(program: &Program, exe: &str, bias: u64, build_id: Vec<u8>) -> PathBuf {
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
    let Some(program) = build(false) else { return };
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
    let Some(program) = build(true) else { return };
    let exe = program.exe.display().to_string();
    let trace = leaking_trace(&program, &exe, 0x5555_5555_0000, program.build_id.clone());
    let (v, _) = report_json(&trace);
    check_frames(&v, &program);
}

#[test]
fn under_an_interpreter_own_code_is_the_first_frame_outside_the_runtime() {
    let Some(program) = build(false) else { return };
    let trace = leaking_trace(&program, "/usr/bin/python3.12", 0, program.build_id.clone());
    let (v, _) = report_json(&trace);
    check_frames(&v, &program);
}

#[test]
fn a_build_id_mismatch_is_said_once_and_frames_fall_back_to_offsets() {
    let Some(program) = build(false) else { return };
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
    let Some(program) = build(false) else { return };
    let exe = program.exe.display().to_string();
    let trace = leaking_trace(&program, &exe, 0, program.build_id.clone());
    std::fs::remove_file(&program.exe).unwrap();
    let (v, stderr) = report_json(&trace);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot open"), "{stderr}");
    assert!(v["suspects"][0]["frames"][0]["function"].as_str().unwrap().starts_with("tiny+0x"));
}
