//! The demonstration training jobs under the tracer: demo-trainer (Rust, tch)
//! and scripts/train.py (PyTorch), each with every planted leak, checked
//! through `analyzer report --json`.
//!
//! Needs what scripts/setup-demo.sh builds (the venv with torch and
//! demo-trainer) and `cargo build --release` (libtracer.so and analyzer);
//! scripts/test.sh does both. Missing pieces fail the tests, they never skip.

use std::path::Path;
use std::process::{Command, Output};

use integration_tests::{analyzer, demo_trainer, repo_root, tracer_lib, venv_python};
use serde_json::Value;

/// Planted leaks and the function each one lives in.
const LEAKS: &[(&str, &str)] = &[
    ("loss-history", "leak_loss_history"),
    ("batch-cache", "leak_batch_cache"),
    ("grad-snapshots", "leak_grad_snapshots"),
];
const EPOCHS: usize = 4;
/// Steps per epoch: demo-trainer's default; fewer for train.py, which is much
/// slower under the tracer (every allocation unwinds a deep interpreter stack).
const RUST_STEPS: usize = 48;
const PYTHON_STEPS: usize = 16;
/// Sampling, one sample per 64 KiB allocated on average: the planted leaks
/// (1 to 4 MiB an epoch) are sampled tens of times an epoch, and each must
/// still be the top suspect. At 512 KiB they got 2 to 8 samples an epoch,
/// too few for the leak to show in every epoch of every run; a leak is
/// found reliably once it grows by a dozen sampling intervals or more an
/// epoch. train.py runs as many steps as demo-trainer then.
const SAMPLING: &[(&str, &str)] = &[("TRACER_SAMPLE_BYTES", "64k")];
const SAMPLED_PYTHON_STEPS: usize = RUST_STEPS;

fn check(output: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs `program args` under the tracer in a fresh temporary directory and
/// returns the report of its trace with what it printed; `env` adds tracer
/// settings.
///
/// Epochs come from the jobs' marks only (TRACER_EPOCH_SECONDS=0): importing
/// torch under the tracer takes longer than the tracer's default time slice,
/// and slices cut before the first mark would count as epochs in which the
/// planted leak did not yet grow.
fn traced_report(program: &Path, args: &[&str], env: &[(&str, &str)]) -> (Value, String, tempfile::TempDir) {
    let (tracer, analyzer) = (tracer_lib(), analyzer());
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("trace.bin");
    let output = Command::new(program)
        .args(args)
        .current_dir(dir.path())
        .env("LD_PRELOAD", &tracer)
        .env("TRACER_OUTPUT", &trace)
        .env("TRACER_EPOCH_SECONDS", "0")
        .envs(env.iter().copied())
        .output()
        .expect("start the traced job");
    let what = format!("{} {} (with {env:?})", program.display(), args.join(" "));
    let stdout = check(&output, &what);
    assert!(trace.exists(), "{what} wrote no trace at {}:\n{stdout}", trace.display());

    let output = Command::new(analyzer)
        .arg("report")
        .arg(&trace)
        .arg("--json")
        .arg("-o")
        .arg(dir.path().join("leaks.svg"))
        .output()
        .expect("start the analyzer");
    let json = check(&output, &format!("analyzer report {} --json", trace.display()));
    let report: Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("analyzer --json printed no JSON object ({e}):\n{json}"));
    (report, stdout, dir)
}

fn suspects(report: &Value) -> &Vec<Value> {
    report["suspects"].as_array().unwrap_or_else(|| panic!("report without suspects: {report:#}"))
}

fn function_names(suspect: &Value) -> Vec<&str> {
    suspect["frames"]
        .as_array()
        .map(|frames| frames.iter().filter_map(|f| f["function"].as_str()).collect())
        .unwrap_or_default()
}

/// The report's top leaking line: its own-code frame's function, which
/// must be `function`, and at least the top suspect's growth.
fn assert_top_line_is(report: &Value, function: &str) {
    let line = &report["lines"][0];
    let found = line["frame"]["function"].as_str().unwrap_or_default();
    assert!(found.contains(function), "the top line is {found:?}, not {function}: {}", report["lines"]);
    let growth = |v: &Value| v["growth_bytes_per_epoch"].as_u64().unwrap_or(0);
    assert!(growth(line) >= growth(&suspects(report)[0]), "{}", report["lines"]);
    let file = line["frame"]["file"].as_str().unwrap_or_default();
    let at = format!("{found} ({}:{})", file.rsplit('/').next().unwrap_or_default(), line["frame"]["line"]);
    let verdict = report["verdict"]["message"].as_str().unwrap_or_default();
    assert!(verdict.starts_with(&at), "the verdict names another culprit than {at}: {verdict}");
}

fn summary(report: &Value) -> String {
    let mut text = String::new();
    for (rank, s) in suspects(report).iter().enumerate().take(5) {
        text += &format!(
            "#{} growth {}/epoch live {}: {}\n",
            rank + 1,
            s["growth_bytes_per_epoch"],
            s["live_bytes"],
            function_names(s).iter().take(12).cloned().collect::<Vec<_>>().join(" < ")
        );
    }
    text
}

/// Every epoch the job marked is in the trace, in order.
fn assert_marked_epochs(report: &Value, epochs: usize) {
    let labels: Vec<&str> = report["epochs"]
        .as_array()
        .unwrap_or_else(|| panic!("report without epochs: {report:#}"))
        .iter()
        .filter_map(|e| e["label"].as_str())
        .collect();
    let marked: Vec<String> = (1..=epochs).map(|n| format!("epoch {n}")).collect();
    let found: Vec<&str> = labels.iter().copied().filter(|l| marked.iter().any(|m| m == l)).collect();
    assert_eq!(found, marked, "the trace's epoch labels are {labels:?}");
}

fn trainer_args(leak: &str, steps: usize) -> Vec<String> {
    let (epochs, steps) = (EPOCHS.to_string(), steps.to_string());
    ["--leak", leak, "--epochs", &epochs, "--steps", &steps, "--workers", "2", "--accumulate", "4"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The trace's settings say the whole run was sampled exactly when `env`
/// asked for it, and only the warm-up otherwise (the default).
fn assert_sampling_as_asked(report: &Value, env: &[(&str, &str)]) {
    let sampling = report["process"]["settings"]["sampling"].as_str().unwrap_or_default();
    let asked = env.iter().any(|(name, _)| *name == "TRACER_SAMPLE_BYTES");
    assert!(sampling.starts_with("Poisson by bytes"), "settings say sampling {sampling:?}");
    assert_eq!(sampling.contains("until the warm-up"), !asked, "settings say sampling {sampling:?}");
}

fn rust_leak_is_found(leak: &str, function: &str, env: &[(&str, &str)]) {
    let args = trainer_args(leak, RUST_STEPS);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (report, stdout, _dir) = traced_report(&demo_trainer(), &args, env);
    assert_marked_epochs(&report, EPOCHS);
    assert_sampling_as_asked(&report, env);
    let suspects = suspects(&report);
    let top = suspects.first().unwrap_or_else(|| panic!("no suspects for --leak {leak}:\n{stdout}"));
    assert!(
        function_names(top).iter().any(|f| f.contains(function)),
        "the top suspect for --leak {leak} does not pass through {function}:\n{}",
        summary(&report)
    );
    assert!(top["growth_bytes_per_epoch"].as_f64().unwrap_or(0.0) > 0.0, "{}", summary(&report));
    assert_top_line_is(&report, function);
}

#[test]
fn rust_trainer_loss_history_leak_is_found() {
    rust_leak_is_found(LEAKS[0].0, LEAKS[0].1, &[]);
}

#[test]
fn rust_trainer_batch_cache_leak_is_found() {
    rust_leak_is_found(LEAKS[1].0, LEAKS[1].1, &[]);
}

#[test]
fn rust_trainer_grad_snapshots_leak_is_found() {
    rust_leak_is_found(LEAKS[2].0, LEAKS[2].1, &[]);
}

#[test]
fn rust_trainer_loss_history_leak_is_found_when_sampling() {
    rust_leak_is_found(LEAKS[0].0, LEAKS[0].1, SAMPLING);
}

#[test]
fn rust_trainer_batch_cache_leak_is_found_when_sampling() {
    rust_leak_is_found(LEAKS[1].0, LEAKS[1].1, SAMPLING);
}

#[test]
fn rust_trainer_grad_snapshots_leak_is_found_when_sampling() {
    rust_leak_is_found(LEAKS[2].0, LEAKS[2].1, SAMPLING);
}

fn rust_trainer_has_no_suspects_without_a_leak(env: &[(&str, &str)]) {
    let args = trainer_args("none", RUST_STEPS);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (report, _stdout, _dir) = traced_report(&demo_trainer(), &args, env);
    assert_marked_epochs(&report, EPOCHS);
    assert_sampling_as_asked(&report, env);
    assert!(suspects(&report).is_empty(), "a clean run has suspects:\n{}", summary(&report));
}

#[test]
fn rust_trainer_without_a_leak_has_no_suspects() {
    rust_trainer_has_no_suspects_without_a_leak(&[]);
}

#[test]
fn rust_trainer_without_a_leak_has_no_suspects_when_sampling() {
    rust_trainer_has_no_suspects_without_a_leak(SAMPLING);
}

/// Without the tracer the trainer runs the same: marking is a no-op, and so
/// is emptying the device cache on a CPU-only machine.
#[test]
fn rust_trainer_runs_without_the_tracer() {
    let output = Command::new(demo_trainer())
        .args(["--epochs", "2", "--steps", "4", "--workers", "0", "--leak", "batch-cache"])
        .env_remove("LD_PRELOAD")
        .output()
        .expect("start demo-trainer");
    let stdout = check(&output, "demo-trainer");
    assert!(stdout.contains("tracer not loaded"), "{stdout}");
    assert!(stdout.contains("epoch 2/2:"), "{stdout}");
    assert!(!stdout.contains("empty failed"), "{stdout}");
}

fn python_job(leak: &str, steps: usize, env: &[(&str, &str)]) -> (Value, String, tempfile::TempDir) {
    let python = venv_python();
    let script = repo_root().join("scripts/train.py");
    let script = script.to_str().expect("UTF-8 path").to_string();
    let mut args = vec![script];
    args.extend(trainer_args(leak, steps));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    traced_report(&python, &args, env)
}

/// The planted leak is the top suspect, and its merged stack names the
/// planted function's line in train.py as a Python frame.
fn python_leak_is_found(leak: &str, steps: usize, env: &[(&str, &str)]) {
    let function = LEAKS.iter().find(|(mode, _)| *mode == leak).expect("a planted leak").1;
    let (report, stdout, _dir) = python_job(leak, steps, env);
    assert!(stdout.contains("tracer loaded"), "{stdout}");
    assert_marked_epochs(&report, EPOCHS);
    assert_sampling_as_asked(&report, env);
    let top = suspects(&report).first().unwrap_or_else(|| panic!("no suspects for train.py --leak {leak}:\n{stdout}"));
    assert!(
        top["growth_bytes_per_epoch"].as_f64().unwrap_or(0.0) > 0.0,
        "the top suspect for train.py --leak {leak} does not grow:\n{}",
        summary(&report)
    );
    let planted = top["frames"].as_array().expect("frames").iter().find(|frame| frame["function"] == function);
    let planted = planted.unwrap_or_else(|| {
        panic!("the top suspect for train.py --leak {leak} misses {function}:\n{}", summary(&report))
    });
    assert_eq!(planted["python"], true, "{planted}");
    assert!(planted["file"].as_str().unwrap_or_default().ends_with("scripts/train.py"), "{planted}");
    assert!(planted["line"].as_u64().unwrap_or(0) > 0, "{planted}");
    assert_top_line_is(&report, function);
    assert_eq!(report["lines"][0]["frame"]["line"], planted["line"], "{}", report["lines"]);
}

#[test]
fn python_trainer_loss_history_leak_is_found_at_its_line() {
    python_leak_is_found(LEAKS[0].0, PYTHON_STEPS, &[]);
}

#[test]
fn python_trainer_loss_history_leak_is_found_at_its_line_when_sampling() {
    python_leak_is_found(LEAKS[0].0, SAMPLED_PYTHON_STEPS, SAMPLING);
}

#[test]
fn python_trainer_batch_cache_leak_is_found_at_its_line() {
    python_leak_is_found(LEAKS[1].0, PYTHON_STEPS, &[]);
}

#[test]
fn python_trainer_batch_cache_leak_is_found_at_its_line_when_sampling() {
    python_leak_is_found(LEAKS[1].0, SAMPLED_PYTHON_STEPS, SAMPLING);
}

#[test]
fn python_trainer_grad_snapshots_leak_is_found_at_its_line() {
    python_leak_is_found(LEAKS[2].0, PYTHON_STEPS, &[]);
}

#[test]
fn python_trainer_grad_snapshots_leak_is_found_at_its_line_when_sampling() {
    python_leak_is_found(LEAKS[2].0, SAMPLED_PYTHON_STEPS, SAMPLING);
}

#[test]
fn python_trainer_without_a_leak_completes() {
    let (report, stdout, _dir) = python_job("none", PYTHON_STEPS, &[]);
    assert!(stdout.contains(&format!("epoch {EPOCHS}/{EPOCHS}:")), "{stdout}");
    assert_marked_epochs(&report, EPOCHS);
}
