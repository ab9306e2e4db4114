//! The planted leak is found, and none of the decoys next to it is reported.

use integration_tests::*;

const DECOYS: [&str; 4] = ["warm_up_once", "fill_cache", "rotate_buffer", "step_temporaries"];

fn assert_only_suspect_is(report: &serde_json::Value, leak: &str, decoys: &[&str]) {
    let suspects = suspects(report);
    assert!(!suspects.is_empty(), "no suspect reported: {report:#}");
    assert!(mentions(&suspects[0], leak), "top suspect is not {leak}: {:?}", suspects[0]);
    for suspect in &suspects {
        for decoy in decoys {
            assert!(!mentions(suspect, decoy), "decoy {decoy} reported as a suspect: {suspect:?}");
        }
    }
}

#[test]
fn planted_leak_is_the_top_suspect_and_no_decoy_is_listed() {
    let program = compile("leaky.c");
    let run = run_traced(&program, &["8"]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.stdout(), "leaky: 8 epochs, 1600 blocks leaked\n", "the tracer changed the program's output");
    let report = report_json(&run.trace);
    assert_eq!(report["epochs"].as_array().unwrap().len(), 9, "8 marks and the exit snapshot");
    assert_only_suspect_is(&report, "leak_per_epoch", &DECOYS);
    assert_eq!(suspects(&report).len(), 1, "{report:#}");
    let top = &report["suspects"][0];
    // 200 blocks of 1000..1199 bytes per epoch.
    let growth = top["growth_bytes_per_epoch"].as_f64().unwrap();
    assert!((200.0 * 1000.0..=200.0 * 1200.0).contains(&growth), "growth {growth}");
    let own =
        top["frames"].as_array().unwrap().iter().find(|f| f["own_code"] == true).expect("an own-code frame is marked");
    assert_eq!(own["function"], "leak_per_epoch");
    assert!(own["file"].as_str().unwrap_or_default().ends_with("leaky.c"), "{own}");
    assert_eq!(report["verdict"]["kind"], "heap_leak");
}

#[test]
fn text_report_names_the_leak_and_the_flamegraph_shows_only_it() {
    let program = compile("leaky.c");
    let run = run_traced(&program, &["8"]);
    let svg = run.dir.path().join("leaks.svg");
    let output =
        std::process::Command::new(analyzer()).arg("report").arg(&run.trace).arg("-o").arg(&svg).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("leak_per_epoch"), "{text}");
    assert!(text.contains(&svg.display().to_string()), "the report prints the flamegraph's path: {text}");
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(drawing.starts_with("<?xml") && drawing.contains("<svg"), "not an SVG");
    assert!(drawing.contains("leak_per_epoch"));
    for decoy in DECOYS {
        assert!(!drawing.contains(decoy), "the leak flamegraph draws the decoy {decoy}");
    }
}

#[test]
fn threads_allocating_at_once_are_all_traced() {
    let program = compile("threads.c");
    let run = run_traced(&program, &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let report = report_json(&run.trace);
    assert_only_suspect_is(&report, "thread_leak", &["churn"]);
    // 4 threads x 100 blocks x 512 bytes per epoch.
    let growth = report["suspects"][0]["growth_bytes_per_epoch"].as_f64().unwrap();
    assert_eq!(growth, 4.0 * 100.0 * 512.0, "{report:#}");
}

#[test]
fn cxx_new_reaches_the_tracer_through_malloc() {
    let program = compile("cxx_leak.cpp");
    let run = run_traced(&program, &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let report = report_json(&run.trace);
    assert_only_suspect_is(&report, "leak_nodes", &["balanced_work"]);
    let growth = report["suspects"][0]["growth_bytes_per_epoch"].as_f64().unwrap();
    assert_eq!(growth, 200.0 * 488.0, "200 Nodes of 488 bytes per epoch");
}

#[test]
fn rss_growth_outside_the_heap_is_said_plainly() {
    let program = compile("outside_heap.c");
    let run = run_traced(&program, &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let report = report_json(&run.trace);
    assert!(suspects(&report).is_empty(), "a heap or mapping site was blamed: {report:#}");
    assert_eq!(report["verdict"]["kind"], "growth_outside_heap", "{report:#}");
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(message.contains("outside what the tracer sees"), "{message}");
}

/// One sample per 16 KiB allocated on average: the leak (about 215 KiB per
/// epoch) is sampled many times an epoch, the decoys' bytes are estimated.
const SAMPLING: (&str, &str) = ("TRACER_SAMPLE_BYTES", "16k");

#[test]
fn sampling_still_names_the_planted_leak_first_and_no_decoy() {
    let program = compile("leaky.c");
    let run = run_traced_with(&program, &["8"], &[SAMPLING]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let report = report_json(&run.trace);
    assert!(report["process"]["settings"]["sampling"].as_str().unwrap().starts_with("Poisson by bytes"), "{report:#}");
    assert_only_suspect_is(&report, "leak_per_epoch", &DECOYS);
    // The estimate is unbiased; with ~13 samples an epoch it lands near the truth.
    let growth = report["suspects"][0]["growth_bytes_per_epoch"].as_f64().unwrap();
    assert!((100e3..=400e3).contains(&growth), "estimated growth {growth} for about 220 KB");
}

#[test]
fn sampling_threads_still_names_the_leaking_site() {
    let program = compile("threads.c");
    let run = run_traced_with(&program, &[], &[SAMPLING]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_only_suspect_is(&report_json(&run.trace), "thread_leak", &["churn"]);
}
