//! Memory a library keeps for a reason of its own, told for what it is:
//! tests/python/library_growth.py (torch, from the venv) with a profiler
//! left running over the loop, and with a convolution fed new input shapes
//! every epoch (oneDNN's primitive cache), and with pyplot figures saved
//! and never closed.
//!
//! Needs the venv with torch and matplotlib (scripts/setup-demo.sh) and the release builds;
//! missing pieces fail the tests, they never skip.

use integration_tests::*;
use serde_json::Value;

fn traced_job(args: &[&str], env: &[(&str, &str)]) -> Value {
    let script = python_script("library_growth.py");
    let mut all = vec![script.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = run_traced_with(&venv_python(), &all, env).succeeded();
    assert!(run.stdout().contains("epoch 7"), "{}", run.stdout());
    report_json(&run.trace)
}

/// How a verdict tells the memory a library keeps.
#[derive(PartialEq)]
enum Told {
    /// A leak: the line keeps it.
    KeptByTheLine,
    /// A leak, of memory the line only happened to need more of (the
    /// profiler's next block of records): charged to the line.
    ChargedToTheLine,
    /// No leak: a cache the library keeps up to a bound, charged to the line.
    LevelsOff,
}

/// The top line is `function` in library_growth.py, its best suspect's
/// memory is explained as `what`, and the verdict says so, as `told`.
fn assert_told(report: &Value, function: &str, what: &str, told: Told) {
    let kind = if told == Told::LevelsOff { "bounded_cache" } else { "heap_leak" };
    assert_eq!(report["verdict"]["kind"], kind, "{:#}", report["verdict"]);
    let line = &report["lines"][0];
    assert_eq!(line["frame"]["function"], function, "{line:#}");
    assert!(line["frame"]["file"].as_str().unwrap_or_default().ends_with("library_growth.py"), "{line:#}");
    let best = line["suspect_ranks"][0].as_u64().unwrap();
    let suspect = &report["suspects"][best as usize - 1];
    let explanation = suspect["explanation"].as_str().unwrap_or_default();
    assert!(explanation.starts_with(&format!("{what}: ")), "{suspect:#}");
    let verdict = report["verdict"]["message"].as_str().unwrap();
    if told == Told::LevelsOff {
        assert!(verdict.starts_with(&format!("{what} grew by about ")), "{verdict}");
        assert!(verdict.contains(&format!(", charged to {function} (library_growth.py:")), "{verdict}");
        assert!(verdict.contains(&format!("stops growing once full, not a leak (see suspect #{best})")), "{verdict}");
    } else if told == Told::ChargedToTheLine {
        assert!(verdict.starts_with(&format!("{what} grew by about ")), "{verdict}");
        assert!(verdict.contains(&format!(", charged to {function} (library_growth.py:")), "{verdict}");
        assert!(verdict.ends_with(&format!(" (see suspect #{best})")), "{verdict}");
    } else {
        assert!(verdict.starts_with(&format!("{function} (library_growth.py:")), "{verdict}");
        // Notes on the RSS beside the growth may follow.
        assert!(verdict.contains(&format!("; the memory is {what} (see suspect #{best})")), "{verdict}");
    }
}

#[test]
fn a_profiler_left_running_is_told_as_its_records() {
    // The records grow by about 4 MiB an epoch at 600 steps, in blocks
    // spread over the stacks of the operators that happen to fill them:
    // enough for the largest stacks to stand well above the noise floor.
    let report = traced_job(&["--cause", "profiler", "--steps", "600"], &[]);
    assert_told(&report, "train_steps", "the PyTorch profiler's records", Told::ChargedToTheLine);
}

#[test]
fn new_input_shapes_are_told_as_the_onednn_primitive_cache() {
    let report = traced_job(&["--cause", "onednn-shapes"], &[]);
    // Every suspect is oneDNN's or ideep's cache: no leak.
    assert_told(&report, "new_shapes", "oneDNN's primitive cache", Told::LevelsOff);
    // The compiled kernels are mapped; the primitives' own small objects,
    // each stack below the noise floor, join them with the line.
    let memory = &report["lines"][0]["memory"];
    assert!(memory == "mapped" || memory == "mixed", "{:#}", report["lines"][0]);
    let mapped = report["verdict"]["mapped_growth_bytes"].as_i64().unwrap();
    assert!(mapped >= 16 << 20, "traced mappings grew by {mapped} bytes");
}

/// A leak of the program's own beside a library's bounded cache is a leak,
/// and the verdict names it, however much more the cache grows.
#[test]
fn a_leak_beside_the_primitive_cache_is_a_leak() {
    let report = traced_job(&["--cause", "onednn-shapes", "--leak-too"], &[]);
    assert_eq!(report["verdict"]["kind"], "heap_leak", "{:#}", report["verdict"]);
    let lines: Vec<&str> =
        report["lines"].as_array().unwrap().iter().map(|l| l["frame"]["function"].as_str().unwrap()).collect();
    assert!(lines.contains(&"keep_batch") && lines.contains(&"new_shapes"), "{lines:?}");
    // The verdict names the leak, though the caches grow faster.
    let verdict = report["verdict"]["message"].as_str().unwrap();
    assert!(verdict.starts_with("keep_batch (library_growth.py:"), "{verdict}");
}

#[test]
fn without_the_primitive_cache_the_shapes_keep_no_kernels() {
    let report = traced_job(&["--cause", "onednn-shapes"], &[("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")]);
    let explained = |s: &&Value| s["explanation"].as_str().is_some_and(|e| e.starts_with("oneDNN"));
    let cached: Vec<&Value> = report["suspects"].as_array().unwrap().iter().filter(explained).collect();
    assert!(cached.is_empty(), "the advice did not stop the growth: {cached:#?}");
    // With the cache the traced mappings grow by about 32 MiB over the
    // analysed epochs; without it a pymalloc arena (1 MiB) may still come.
    let mapped = report["verdict"]["mapped_growth_bytes"].as_i64().unwrap();
    assert!(mapped <= 2 << 20, "traced mappings grew by {mapped} bytes");
}

#[test]
fn figures_never_closed_are_told_as_matplotlibs() {
    let report = traced_job(&["--cause", "figures"], &[]);
    assert_told(&report, "plot_losses", "matplotlib's figures", Told::KeptByTheLine);
    let top = report["lines"][0]["growth_bytes_per_epoch"].as_i64().unwrap();
    assert!(top >= 1 << 20, "a pixel buffer of 1.8 MiB an epoch: {:#}", report["lines"][0]);
}

#[test]
fn closed_figures_keep_nothing() {
    let report = traced_job(&["--cause", "figures", "--close-figures"], &[]);
    assert_ne!(report["verdict"]["kind"], "heap_leak", "{:#}", report["verdict"]);
    let explained = |s: &&Value| s["explanation"].as_str().is_some_and(|e| e.starts_with("matplotlib"));
    let kept: Vec<&Value> = report["suspects"].as_array().unwrap().iter().filter(explained).collect();
    assert!(kept.is_empty(), "the advice did not stop the growth: {kept:#?}");
}
