//! The fast unwinder against libgcc's: with `TRACER_UNWIND_CHECK=1` the
//! tracer captures every stack both ways and reports at exit how many
//! differed; code without frame pointers must give identical stacks.

use std::process::Command;

use integration_tests::{compile, demo_trainer, python_interpreter, traced_command, FULL_CAPTURE};

/// (compared, differed, captured by libgcc alone) from the tracer's check
/// summary on stderr.
fn check_summary(stderr: &str) -> (u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|line| line.starts_with("tracer: unwind check:") && line.contains("compared"))
        .unwrap_or_else(|| panic!("no unwind check summary on stderr:\n{stderr}"));
    let number_before = |word: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| w.trim_end_matches(',') == word).unwrap();
        words[at - 1].parse().unwrap()
    };
    (number_before("stacks"), number_before("differed"), number_before("captured"))
}

fn run_checked(mut command: Command) -> String {
    // Every allocation is unwound twice and compared, the warm-up's too.
    command.env("TRACER_UNWIND_CHECK", "1").envs([FULL_CAPTURE]);
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "the traced program failed:\n{stderr}");
    stderr
}

#[test]
fn fast_stacks_match_libgcc_on_c_without_frame_pointers() {
    let program = compile("unwind_mix.c");
    let (command, _dir) = traced_command(&program);
    let stderr = run_checked(command);
    let (compared, differed, libgcc_alone) = check_summary(&stderr);
    // While a dlclose is in progress captures take libgcc's path alone: how
    // many of the threads' captures do depends on their timing (on a busy
    // machine, more than half). The 2000 the program makes after its last
    // dlclose must all take the fast path.
    let captured = compared + libgcc_alone;
    assert!(captured > 8000, "too few stacks captured: {captured}\n{stderr}");
    assert!(compared >= 2000, "the fast path took only {compared} of {captured} captures\n{stderr}");
    assert_eq!(differed, 0, "{stderr}");
}

#[test]
fn fast_stacks_match_libgcc_in_python() {
    let (mut command, _dir) = traced_command(&python_interpreter("3.11"));
    command.args([
        "-c",
        "import json, decimal, threading, zlib, ctypes\n\
         def f(n): return f(n - 1) if n else [json.dumps({'a': [i] * 3}) for i in range(2000)]\n\
         f(30)\n\
         ts = [threading.Thread(target=f, args=(10,)) for _ in range(2)]\n\
         [t.start() for t in ts]; [t.join() for t in ts]\n\
         print(len(zlib.compress(b'x' * 100000)), decimal.Decimal(1) / 7)\n",
    ]);
    let stderr = run_checked(command);
    let (compared, differed, _) = check_summary(&stderr);
    assert!(compared > 1000, "too few stacks compared: {compared}\n{stderr}");
    assert_eq!(differed, 0, "{stderr}");
}

/// In libtorch framehop unwinds a few frames to a return address of -1,
/// where libgcc finds the caller: such a capture is libgcc's alone. Kept,
/// the word went into the trace as a frame, which the stack table took for
/// a Python one (and the bitmap of code ids written grew to 128 MiB).
#[test]
fn fast_stacks_match_libgcc_in_the_libtorch_trainer() {
    let (mut command, _dir) = traced_command(&demo_trainer());
    command.args(["--epochs", "1", "--workers", "2"]);
    let stderr = run_checked(command);
    let (compared, differed, _) = check_summary(&stderr);
    assert!(compared > 10_000, "too few stacks compared: {compared}\n{stderr}");
    assert_eq!(differed, 0, "{stderr}");
}
