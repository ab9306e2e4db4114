//! Epochs cut at the passes over a PyTorch DataLoader in jobs that never call
//! tracer_mark: tests/python/loader_epochs.py (torch, from the venv) with and
//! without worker processes, fully traced and sampled, and
//! tests/python/stand_in_epochs.py (a stand-in for torch's module) on every
//! supported interpreter. Also how TRACER_AUTO_EPOCHS=0 and the program's own
//! marks turn them off, and how a loader's workers spawned by multiprocessing
//! follow the epochs their parent marks (tests/python/spawn_loader_epochs.py),
//! as the workers of a pool it forks do (tests/python/forked_pool.py), and
//! how an evaluation going round several loaders from one line cuts one
//! epoch a round (tests/python/eval_rounds.py), and an evaluation every few
//! steps inside the training loop leaves it the epochs, as a fine-tuning
//! loop after the training takes them.
//!
//! Needs the venv with torch (scripts/setup-demo.sh) and the release builds;
//! missing pieces fail the tests, they never skip.

use std::path::PathBuf;

use integration_tests::*;
use serde_json::Value;

/// Epochs of the jobs: each makes one training and one evaluation pass.
const EPOCHS: usize = 6;
/// Worker processes per loader pass in the tests with workers.
const WORKERS: usize = 2;
/// A sample every 512 KiB on average, as the README suggests for always-on use.
const SAMPLING: (&str, &str) = ("TRACER_SAMPLE_BYTES", "524288");

/// Runs `python script args` under the tracer and checks it finished every epoch.
fn run_job(python: &std::path::Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> TracedRun {
    let script = python_script(name);
    let mut all = vec![script.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    let run = run_traced_with(python, &all, env);
    assert!(
        run.output.status.success(),
        "{name} {args:?} failed ({}):\n{}\n{}",
        run.output.status,
        run.stdout(),
        run.stderr()
    );
    assert!(run.stdout().contains(&format!("epoch {EPOCHS}:")), "{}", run.stdout());
    assert!(!run.stderr().contains("tracer:"), "the tracer complained: {}", run.stderr());
    run
}

fn torch_job(args: &[&str], env: &[(&str, &str)]) -> TracedRun {
    run_job(&venv_python(), "loader_epochs.py", args, env)
}

/// The cause of each epoch, in order.
fn causes(report: &Value) -> Vec<String> {
    let epochs = report["epochs"].as_array().unwrap_or_else(|| panic!("report without epochs: {report:#}"));
    epochs.iter().map(|e| e["cause"].as_str().unwrap_or_default().to_string()).collect()
}

fn labels(report: &Value, cause: &str) -> Vec<String> {
    let epochs = report["epochs"].as_array().unwrap_or_else(|| panic!("report without epochs: {report:#}"));
    epochs.iter().filter(|e| e["cause"] == cause).map(|e| e["label"].as_str().unwrap_or_default().to_string()).collect()
}

/// Start-up time slices, then one auto-detected epoch per training pass from
/// the second on (the first pass is where the loader is found to repeat),
/// labelled with `function`, the one the training loop runs in, where that
/// tells it from the job's other loops (`train` for the evaluation's
/// `evaluate`, none for a job's only loop or two loops in one function),
/// then the exit snapshot; the analysis starts at the first auto epoch.
fn assert_cut_by_training_passes(report: &Value, function: Option<&str>) {
    let causes = causes(report);
    let slices = causes.iter().take_while(|c| *c == "timer").count();
    let mut expected = vec!["timer".to_string(); slices];
    expected.extend(std::iter::repeat_n("auto".to_string(), EPOCHS - 1));
    expected.push("exit".into());
    assert_eq!(causes, expected, "epochs of {}", report["trace"]);
    let named = function.map(|function| format!(" in {function}")).unwrap_or_default();
    let passes: Vec<String> = (1..EPOCHS).map(|n| format!("DataLoader pass {n}{named}")).collect();
    assert_eq!(labels(report, "auto"), passes);
    assert_eq!(report["analysis"]["first_analysed_epoch"], slices, "{:#}", report["analysis"]);
}

/// The texts of the report's notes.
fn note_texts(report: &Value) -> Vec<&str> {
    report["notes"].as_array().expect("notes").iter().filter_map(|n| n["text"].as_str()).collect()
}

/// One of `notes` starts with `start`.
fn assert_noted(notes: &[&str], start: &str) {
    assert!(notes.iter().any(|n| n.starts_with(start)), "no note starting {start:?}: {notes:?}");
}

/// The message of `report`'s verdict, which is too_few_epochs.
fn too_few_epochs_message(report: &Value) -> &str {
    let verdict = &report["verdict"];
    assert_eq!(verdict["kind"], "too_few_epochs", "{verdict:#}");
    verdict["message"].as_str().expect("a verdict message")
}

/// Runs loader_epochs.py with `args` under the tracer: its epochs are cut
/// by its training passes and its planted leak is the top suspect.
fn training_job_cut_by_its_passes(args: &[&str], env: &[(&str, &str)]) -> (TracedRun, Value) {
    let run = torch_job(args, env);
    let report = report_json(&run.trace);
    assert_cut_by_training_passes(&report, Some("train"));
    assert_top_suspect_is_planted(&report, "loader_epochs.py");
    (run, report)
}

/// The line of `tests/python/<name>` that allocates the planted leak.
fn planted_line(name: &str) -> u64 {
    line_of(&format!("python/{name}"), "KEPT.append(bytearray(64 * 1024))")
}

/// The report's top suspect is the planted leak, at its line.
fn assert_top_suspect_is_planted(report: &Value, name: &str) {
    let top = report["suspects"].get(0).unwrap_or_else(|| panic!("no suspects: {:#}", report["verdict"]));
    let own = top["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .find(|f| f["own_code"] == true)
        .unwrap_or_else(|| panic!("no own-code frame: {top:#}"));
    assert_eq!(own["python"], true, "{own}");
    assert!(own["file"].as_str().unwrap_or_default().ends_with(name), "{own}");
    assert_eq!(own["line"], planted_line(name), "{own}");
    assert_eq!(report["verdict"]["kind"], "heap_leak");
}

/// How the workers record: each samples for its whole life when the parent
/// samples only its warm-up.
const WORKER_SAMPLED_FOR_LIFE: &str = "for the whole life of this forked DataLoader worker";
const WHOLE_RUN_SAMPLED: &str = "(TRACER_SAMPLE_BYTES); counts and bytes are estimates";

/// The traces of the run's descendants (its forked DataLoader workers).
fn worker_traces(run: &TracedRun) -> Vec<PathBuf> {
    // Reports leave their flamegraphs beside the traces.
    let is_trace = |t: &PathBuf| *t != run.trace && t.extension().is_none_or(|e| e != "svg");
    run.trace_files().into_iter().filter(is_trace).collect()
}

/// How the workers cut their traces. Persistent ones follow each epoch
/// their parent closes after their fork. Workers of one pass live inside
/// it: the passes that close their parent's epochs do so as they start,
/// before forking theirs, and a mark comes after the pass's workers have
/// exited; but the start-up time slices, which the parent cuts until its
/// training loader repeats or it marks, may end during one of the first
/// passes, and its workers follow such a slice as any worker follows its
/// parent's epochs (a worker of a job that makes one long pass must, to
/// have its growth compared).
#[derive(Clone, Copy)]
enum WorkerEpochs {
    OnePass,
    Parents,
}

/// Every descendant trace is complete, cut as `epochs` says, and says it
/// recorded as `sampling` describes; their reports.
fn assert_workers(run: &TracedRun, at_least: usize, sampling: &str, epochs: WorkerEpochs) -> Vec<Value> {
    let workers = worker_traces(run);
    assert!(workers.len() >= at_least, "{} worker traces, expected {at_least} or more", workers.len());
    let parent = report_json(&run.trace);
    let mut reports = Vec::new();
    for worker in workers {
        let report = report_json(&worker);
        assert_eq!(report["trace_end"], "complete", "{}", worker.display());
        assert!(report["process"]["forked_from"].is_u64(), "{} is not a forked worker's", worker.display());
        let causes = causes(&report);
        let (exit, followed) = causes.split_last().expect("at least the exit snapshot");
        assert_eq!(exit, "exit", "{}", worker.display());
        assert!(followed.iter().all(|c| c == "parent"), "{}: {causes:?}", worker.display());
        let closed_by = parents_epochs_followed(&report, &parent);
        match epochs {
            WorkerEpochs::OnePass => {
                assert!(closed_by.iter().all(|e| e["cause"] == "timer"), "{}: {closed_by:?}", worker.display())
            }
            WorkerEpochs::Parents => assert!(followed.len() >= EPOCHS - 1, "{}: {causes:?}", worker.display()),
        }
        let setting = report["process"]["settings"]["sampling"].as_str().unwrap_or_default();
        assert!(setting.contains(sampling), "{}: {setting:?}", worker.display());
        reports.push(report);
    }
    reports
}

/// The parent's epochs that the worker's `parent` epochs followed, as
/// their labels name them: each by the parent's index of the epoch, which
/// had closed by then (the index one above it names an epoch that closed
/// after the worker's).
fn parents_epochs_followed<'a>(worker: &Value, parent: &'a Value) -> Vec<&'a Value> {
    let parents = parent["epochs"].as_array().expect("epochs");
    let followed = worker["epochs"].as_array().expect("epochs").iter().filter(|e| e["cause"] == "parent");
    followed
        .map(|epoch| {
            let label = epoch["label"].as_str().expect("label");
            let index: usize = label.strip_prefix("parent's epoch ").and_then(|n| n.parse().ok()).expect(label);
            let closed_by = parents.get(index).unwrap_or_else(|| panic!("{label}: the parent has {}", parents.len()));
            assert_ne!(closed_by["cause"], "exit", "{label}: {closed_by}");
            // The worker closes its epoch at an allocation after the parent's;
            // a sampled worker may meet none before the parent's next, so no
            // upper bound.
            assert!(closed_by["elapsed_ns"].as_u64() <= epoch["elapsed_ns"].as_u64(), "{label}: {closed_by} {epoch}");
            closed_by
        })
        .collect()
}

/// The kinds of the findings the report gives for its descendants' traces.
fn descendant_findings(report: &Value) -> Vec<String> {
    let descendants = report["descendant_traces"].as_array().expect("descendant traces");
    descendants.iter().filter_map(|d| d["finding"]["kind"].as_str()).map(str::to_string).collect()
}

/// The lines the findings the report gives for its descendants' traces name.
fn descendant_finding_lines(report: &Value) -> Vec<String> {
    let descendants = report["descendant_traces"].as_array().expect("descendant traces");
    descendants.iter().filter_map(|d| d["finding"]["line"].as_str()).map(str::to_string).collect()
}

/// The function of the report's top leaking line, if it has one.
fn top_line_function(report: &Value) -> Option<String> {
    report["lines"].get(0).and_then(|line| line["frame"]["function"].as_str()).map(str::to_string)
}

#[test]
fn training_passes_cut_the_epochs_without_workers() {
    let (run, report) = training_job_cut_by_its_passes(&["--workers", "0"], &[]);
    let epochs = report["process"]["settings"]["epochs"].as_str().unwrap_or_default();
    assert!(epochs.contains("DataLoader passes until the first mark"), "{epochs}");

    let text = report_text(&run.trace);
    assert!(text.contains(&format!("auto-detected {}, exit 1)", EPOCHS - 1)), "{text}");
    assert!(text.contains("DataLoader pass 1 in train  auto"), "{text}");
}

/// Loops over `enumerate(loader)`, whose call CPython 3.11 specializes
/// after the first passes, so that later passes start from another
/// instruction of the same line: each training pass still closes an epoch.
#[test]
fn training_passes_over_enumerate_cut_the_epochs() {
    training_job_cut_by_its_passes(&["--workers", "0", "--enumerate"], &[]);
}

/// A framework's data fetcher reaches `DataLoader.__iter__` through
/// wrappers whose `iter()` calls CPython 3.11 specializes once they are
/// warm, two of them between the same two passes (Lightning's fit loop
/// does so, twenty frames deep): the frames the training passes start from
/// move, and each pass still closes an epoch.
#[test]
fn training_passes_through_wrappers_whose_calls_specialize_cut_the_epochs() {
    let run = run_job(&venv_python(), "framework_passes.py", &[], &[]);
    let report = report_json(&run.trace);
    assert_cut_by_training_passes(&report, None);
    assert_top_suspect_is_planted(&report, "framework_passes.py");
}

/// A new training loader every epoch, made while the one before is alive
/// and taking its address in turn: each of its passes closes an epoch, as
/// one loader's do, not one every round over two loaders.
#[test]
fn a_new_training_loader_every_epoch_cuts_an_epoch_at_each_pass() {
    training_job_cut_by_its_passes(&["--workers", "0", "--new-loaders"], &[]);
}

/// Also: the first training pass ends the warm-up, sampled by default, and
/// the leak's allocations of every later pass are all recorded (8 steps,
/// one 64 KiB buffer each).
#[test]
fn training_passes_cut_the_epochs_with_forked_workers() {
    let (run, report) = training_job_cut_by_its_passes(&["--workers", &WORKERS.to_string()], &[]);
    // Each pass of both loaders forks its workers.
    assert_workers(&run, 2 * WORKERS * EPOCHS, WORKER_SAMPLED_FOR_LIFE, WorkerEpochs::OnePass);
    assert_code_records_only_for_named_code(&run);

    let notes = report["notes"].as_array().expect("notes");
    assert_eq!(notes.len(), 1, "{notes:?}");
    let epochs = report["epochs"].as_array().unwrap();
    let index = |epoch: &Value| epoch["index"].as_u64().unwrap();
    // The first epoch closed ends the warm-up: the first pass's, or a time
    // slice's on a machine slow enough to spend a slice starting up.
    let warm_up_end = index(&epochs[0]);
    let note = notes[0]["text"].as_str().unwrap();
    assert!(note.starts_with(&format!("the warm-up ended with epoch {warm_up_end}:")), "{note}");
    let first_auto = index(epochs.iter().find(|e| e["cause"] == "auto").unwrap());
    let survivors = report["suspects"][0]["survivors"].as_array().unwrap();
    let exact: Vec<&Value> = survivors.iter().filter(|s| s["birth_epoch"].as_u64().unwrap() > first_auto).collect();
    assert!(exact.len() >= 3, "{survivors:?}");
    assert!(exact.iter().all(|s| s["count"] == 8), "every buffer of a pass after the warm-up: {survivors:?}");
}

/// Past TRACER_WORKER_TRACES, forked workers run untraced: the parent's
/// trace says so once, and its own analysis is unchanged.
#[test]
fn workers_past_the_limit_write_no_trace() {
    let run = torch_job(&["--workers", &WORKERS.to_string()], &[("TRACER_WORKER_TRACES", "3")]);
    assert_eq!(worker_traces(&run).len(), 3, "{:?}", run.trace_files());
    assert_workers(&run, 3, WORKER_SAMPLED_FOR_LIFE, WorkerEpochs::OnePass);
    let report = report_json(&run.trace);
    assert_cut_by_training_passes(&report, Some("train"));
    assert_top_suspect_is_planted(&report, "loader_epochs.py");
    let notes = note_texts(&report);
    let untraced = notes
        .iter()
        .filter(|n| {
            n.starts_with(
                "workers (DataLoader workers and the children Python's multiprocessing forks) after the first 3 ",
            )
        })
        .count();
    assert_eq!(untraced, 1, "{notes:?}");
}

/// Each file holds the code objects its stacks name, each before the first
/// stack node naming it, and no others: a worker forked from a process
/// that imported torch holds a few of its parent's thousands.
fn assert_code_records_only_for_named_code(run: &TracedRun) {
    let (mut main_codes, mut worker_codes) = (0, Vec::new());
    for file in run.trace_files().into_iter().filter(|t| t.extension().is_none_or(|e| e != "svg")) {
        let (records, _) = read_trace(&file);
        let mut recorded = std::collections::HashSet::new();
        let mut named = std::collections::HashSet::new();
        for record in &records {
            match record {
                trace_format::Record::PyCode(code) => {
                    assert!(recorded.insert(code.id), "{}: code {} twice", file.display(), code.id)
                }
                trace_format::Record::StackNodes(nodes) => {
                    for node in &nodes.nodes {
                        if let trace_format::Frame::Python(frame) = node.frame {
                            assert!(
                                recorded.contains(&frame.code),
                                "{}: node {} before code {}",
                                file.display(),
                                node.id,
                                frame.code
                            );
                            named.insert(frame.code);
                        }
                    }
                }
                _ => {}
            }
        }
        assert_eq!(recorded, named, "{}: code records no stack names", file.display());
        if file == run.trace {
            main_codes = recorded.len();
        } else {
            worker_codes.push(recorded.len());
        }
    }
    assert!(worker_codes.iter().all(|&n| n * 4 < main_codes), "workers {worker_codes:?}, main {main_codes}");
}

#[test]
fn training_passes_cut_the_epochs_when_sampling() {
    let run = torch_job(&["--workers", &WORKERS.to_string()], &[SAMPLING]);
    assert_cut_by_training_passes(&report_json(&run.trace), Some("train"));
    assert_workers(&run, 2 * WORKERS * EPOCHS, WHOLE_RUN_SAMPLED, WorkerEpochs::OnePass);
    let run = torch_job(&["--workers", "0"], &[SAMPLING]);
    assert_cut_by_training_passes(&report_json(&run.trace), Some("train"));
}

/// Persistent workers: each pass after the first resets the loader's iterator
/// in `__iter__`, which allocates less than making one. Forked in the
/// parent's warm-up, they go on sampling after it.
#[test]
fn training_passes_cut_the_epochs_with_persistent_workers() {
    let (run, _) = training_job_cut_by_its_passes(&["--workers", &WORKERS.to_string(), "--persistent"], &[]);
    // Two loaders, each with workers of its own for the whole run.
    assert_workers(&run, 2 * WORKERS, WORKER_SAMPLED_FOR_LIFE, WorkerEpochs::Parents);
    let epochs = report_json(&worker_traces(&run)[0])["process"]["settings"]["epochs"].as_str().unwrap().to_string();
    assert!(epochs.starts_with("its parent's epochs"), "{epochs}");
}

/// A loader with persistent workers and no shuffling makes no allocation
/// that reaches malloc as a later pass starts, only Python objects: with
/// them traced (TRACER_PYTHON_OBJECTS=1), their allocations see the pass.
#[test]
fn persistent_passes_without_shuffling_are_seen_through_python_objects() {
    let args = ["--workers", &WORKERS.to_string(), "--persistent", "--no-shuffle"];
    let (_, report) = training_job_cut_by_its_passes(&args, &[("TRACER_PYTHON_OBJECTS", "1")]);
    let allocator = report["process"]["settings"]["python_allocator"].as_str().unwrap();
    assert!(allocator.starts_with("pymalloc, its objects traced"), "{allocator}");
    assert!(unrepeated_passes_notes(&report).is_empty(), "{:#}", report["notes"]);
}

/// Without the objects traced, that loader's later passes go unseen; the
/// trace says that passes never repeated, and what would let them be seen.
#[test]
fn persistent_passes_without_shuffling_unseen_are_told() {
    let args = ["--workers", &WORKERS.to_string(), "--persistent", "--no-shuffle"];
    let report = report_json(&torch_job(&args, &[]).trace);
    assert!(!causes(&report).contains(&"auto".to_string()), "{:?}", causes(&report));
    let notes = unrepeated_passes_notes(&report);
    assert_eq!(notes.len(), 1, "{:#}", report["notes"]);
    assert!(
        notes[0].contains("persistent_workers=True") && notes[0].contains("TRACER_PYTHON_OBJECTS=1"),
        "{}",
        notes[0]
    );
    // Too short for time slices to make up: the verdict says it too.
    assert_eq!(report["verdict"]["kind"], "too_few_epochs", "{:#}", report["verdict"]);
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(
        message.contains("none repeated from one place") && message.contains("TRACER_PYTHON_OBJECTS=1"),
        "{message}"
    );
}

/// The notes saying that DataLoader passes were seen but never repeated.
fn unrepeated_passes_notes(report: &Value) -> Vec<String> {
    let notes = report["notes"].as_array().cloned().unwrap_or_default();
    let texts = notes.iter().filter_map(|n| n["text"].as_str());
    texts.filter(|t| t.contains("never two from the same place")).map(str::to_string).collect()
}

/// A leak in the Dataset of a loader with persistent workers grows in the
/// workers, which follow their parent's epochs: each training worker's own
/// report ranks the leaking line first, and the parent's does not have it.
#[test]
fn a_leak_in_persistent_workers_is_ranked_in_their_own_traces() {
    let args = ["--workers", &WORKERS.to_string(), "--persistent", "--worker-leak", "--steps", "16"];
    let run = torch_job(&args, &[]);
    let report = report_json(&run.trace);
    assert_top_suspect_is_planted(&report, "loader_epochs.py");
    let lines = report["lines"].as_array().expect("lines");
    assert!(lines.iter().all(|l| l["frame"]["function"] != "keep_sample_buffer"), "{lines:#?}");
    assert_eq!(descendant_findings(&report), vec!["heap_leak"; WORKERS], "the parent's report points at them");
    let named = descendant_finding_lines(&report);
    assert_eq!(named.len(), WORKERS, "each finding names its line: {named:?}");
    assert!(named.iter().all(|line| line.starts_with("keep_sample_buffer (loader_epochs.py:")), "{named:?}");
    assert_workers(&run, 2 * WORKERS, WORKER_SAMPLED_FOR_LIFE, WorkerEpochs::Parents);
    let leaking: Vec<PathBuf> = worker_traces(&run)
        .into_iter()
        .filter(|worker| top_line_function(&report_json(worker)).as_deref() == Some("keep_sample_buffer"))
        .collect();
    // The training loader's workers; the evaluation loader's Dataset keeps nothing.
    assert_eq!(leaking.len(), WORKERS, "{leaking:?}");
    for worker in &leaking {
        let report = report_json(worker);
        assert_eq!(report["verdict"]["kind"], "heap_leak", "{}", worker.display());
        let line = &report["lines"][0]["frame"];
        assert!(line["file"].as_str().unwrap_or_default().ends_with("loader_epochs.py"), "{line}");
        assert_eq!(line["line"], line_of("python/loader_epochs.py", "SAMPLES_KEPT.append("), "{line}");
        let text = report_text(worker);
        assert!(text.contains("(cut by the parent's epochs "), "{text}");
        assert!(text.contains("parent's epoch 2  parent"), "{text}");
    }
}

/// Persistent workers of a job whose evaluation every 4 training steps
/// closed the first epochs (its persistent workers' passes seen through
/// Python's objects) follow those epochs from inside the first training
/// pass: each worker's trace names the first of its own epochs to begin at
/// its parent's first whole one, and its analysis starts there, so that
/// the Dataset leak grows by a training pass's 64 samples of 16 KiB a
/// worker and epoch, not by the part of it that the evaluation-cut epochs
/// held. Sampled every KiB on average: each 16 KiB buffer is sampled.
/// Workers forked by the job (`start_method` "fork"), spawned (which read
/// their parent's page through /proc, and whose first epoch holds their own
/// start-up), or forked by a forkserver (which reads the job's page through
/// /proc for them).
fn persistent_workers_analysed_from_their_parents_first_whole_epoch(start_method: &str) {
    let args = ["--workers", "2", "--persistent", "--worker-leak", "--steps", "16", "--eval-every", "4"];
    let args = [&args[..], &["--start-method", start_method]].concat();
    // No time slices: a spawned worker's start-up (an interpreter and
    // torch imported) can outlast the default 10 s on a loaded machine, and
    // would then close an epoch of its own before it follows its parent's.
    // Turned off, they are not asked for: the workers follow all the same.
    let env = [("TRACER_PYTHON_OBJECTS", "1"), ("TRACER_SAMPLE_BYTES", "1024"), ("TRACER_EPOCH_SECONDS", "0")];
    let run = torch_job(&args, &env);
    let outer_loop = "the passes of an outer DataLoader loop close the epochs, whole from epoch ";
    assert_noted(&note_texts(&report_json(&run.trace)), outer_loop);
    let leaking: Vec<(PathBuf, Value)> = worker_traces(&run)
        .into_iter()
        .map(|worker| (report_json(&worker), worker))
        .filter(|(report, _)| top_line_function(report).as_deref() == Some("keep_sample_buffer"))
        .map(|(report, worker)| (worker, report))
        .collect();
    assert_eq!(leaking.len(), WORKERS, "the training loader's workers");
    for (worker, report) in &leaking {
        let notes = note_texts(report);
        let from: u64 = notes
            .iter()
            .find_map(|n| n.strip_prefix(outer_loop)?.split(':').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no note of the parent's outer loop in {}: {notes:?}", worker.display()));
        assert_eq!(report["analysis"]["first_analysed_epoch"], from - 1, "{:#}", report["analysis"]);
        let growth = report["lines"][0]["growth_bytes_per_epoch"].as_u64().unwrap_or_default();
        assert!((64 * 16384..64 * (16384 + 128)).contains(&growth), "{:#}", report["lines"][0]);
        let text = report_text(worker);
        assert!(text.contains("  (inside the first pass of the outer DataLoader loop)"), "{text}");
        let start_up = text.contains("  (its start-up, inside the first pass of the outer DataLoader loop)");
        assert_eq!(start_up, start_method == "spawn", "{text}");
    }
}

#[test]
fn persistent_workers_are_analysed_from_their_parents_first_whole_epoch() {
    persistent_workers_analysed_from_their_parents_first_whole_epoch("fork");
}

#[test]
fn spawned_persistent_workers_are_analysed_from_their_parents_first_whole_epoch() {
    persistent_workers_analysed_from_their_parents_first_whole_epoch("spawn");
}

#[test]
fn forkserver_persistent_workers_are_analysed_from_their_parents_first_whole_epoch() {
    persistent_workers_analysed_from_their_parents_first_whole_epoch("forkserver");
}

/// Persistent workers of a job that trains, then fine-tunes on another
/// loader, follow its two phases: the training loader's workers, whose
/// Dataset leaks, are idle through the fine-tuning, which they follow in
/// one epoch. Each worker's report shows the phase with its finding (the
/// training, at a pass's 32 samples of 16 KiB a worker), or with epochs
/// enough to tell (the healthy evaluation workers' no_growth); the
/// parent's report names the leaking workers' findings.
#[test]
fn persistent_workers_through_a_fine_tuning_phase_report_their_training_phase() {
    let args = ["--workers", &WORKERS.to_string(), "--persistent", "--worker-leak", "--fine-tune", "16"];
    let run = torch_job(&args, &[("TRACER_PYTHON_OBJECTS", "1"), ("TRACER_SAMPLE_BYTES", "1024")]);
    let report = report_json(&run.trace);
    assert_noted(&note_texts(&report), "another DataLoader loop's passes close the epochs, whole from epoch ");
    assert_eq!(descendant_findings(&report), vec!["heap_leak"; WORKERS], "{:#}", report["descendant_traces"]);
    let workers: Vec<Value> = worker_traces(&run).iter().map(|worker| report_json(worker)).collect();
    let (leaking, healthy): (Vec<&Value>, Vec<&Value>) =
        workers.iter().partition(|worker| top_line_function(worker).as_deref() == Some("keep_sample_buffer"));
    assert_eq!((leaking.len(), healthy.len()), (WORKERS, WORKERS), "training and evaluation workers");
    for worker in leaking {
        assert_eq!(worker["verdict"]["kind"], "heap_leak");
        let growth = worker["lines"][0]["growth_bytes_per_epoch"].as_u64().unwrap_or_default();
        assert!((32 * 16384..32 * (16384 + 128)).contains(&growth), "{:#}", worker["lines"][0]);
        let phases = &worker["analysis"]["phases"];
        assert_eq!(phases[0]["from_epoch"], worker["epochs"][0]["index"], "a worker's first epoch: {phases:#}");
        assert_eq!(phases[0]["analysed"], true, "{phases:#}");
    }
    for worker in healthy {
        assert_eq!(worker["verdict"]["kind"], "no_growth", "{:#}", worker["verdict"]);
    }
}

/// A training job whose outer loop took the epochs over after its
/// evaluations closed the first ones, and that ran too few training passes
/// for an analysis, is the program all the same: its verdict is its own,
/// with its advice, not that of one of its workers (which follow its
/// epochs, and would send the reader back to it).
#[test]
fn a_job_left_with_too_few_whole_epochs_is_no_wrapper_of_its_workers() {
    let script = python_script("loader_epochs.py");
    let args = [script.to_str().unwrap(), "--workers", "2", "--persistent", "--eval-every", "4", "--epochs", "3"];
    let run = run_traced_with(&venv_python(), &args, &[("TRACER_PYTHON_OBJECTS", "1")]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let report = report_json(&run.trace);
    assert_noted(&note_texts(&report), "the passes of an outer DataLoader loop close the epochs, whole from epoch ");
    let message = too_few_epochs_message(&report);
    assert!(message.contains("the epochs were cut where DataLoader passes began"), "{message}");
    assert!(!message.contains("is a wrapper"), "{message}");
    let text = report_text(&run.trace);
    assert!(!text.contains("if the program ran under a wrapper"), "{text}");
}

/// Persistent workers that read Python objects made before the fork copy
/// their parent's pages: their RSS stays flat, their private memory grows
/// by about 8 MiB an epoch, and their reports say so, with no suspect.
#[test]
fn persistent_workers_copying_their_parents_objects_are_told() {
    let run = torch_job(&["--workers", &WORKERS.to_string(), "--persistent", "--read-parent-objects"], &[]);
    let report = report_json(&run.trace);
    assert_eq!(report["epochs"][0]["private_dirty_bytes"], 0, "measured in forked processes only");
    assert_eq!(descendant_findings(&report), vec!["copy_on_write"; WORKERS], "the parent's report points at them");
    let workers = worker_traces(&run);
    let copying: Vec<(&PathBuf, Value)> = workers
        .iter()
        .map(|worker| (worker, report_json(worker)))
        .filter(|(_, report)| report["verdict"]["kind"] == "copy_on_write")
        .collect();
    // The training loader's workers; the evaluation loader's read nothing of the kind.
    assert_eq!(copying.len(), WORKERS, "{workers:?}");
    // The rows of the text report's epoch table, its header first.
    let epoch_table = |trace: &PathBuf| -> Vec<String> {
        let text = report_text(trace);
        text.lines().skip_while(|l| *l != "Epochs").skip(1).take_while(|l| !l.is_empty()).map(str::to_string).collect()
    };
    let table = epoch_table(copying[0].0);
    let exit_row = table.iter().find(|row| row.split_whitespace().nth(2) == Some("exit")).unwrap();
    // epoch, label, cause, elapsed (2 words), RSS (2 words), file pages (2 words), private
    assert_eq!(exit_row.split_whitespace().nth(9), Some("-"), "not measured at exit: {table:#?}");
    assert!(table[0].contains("RSS  file pages     private   live heap"), "{}", table[0]);
    let parents_header = &epoch_table(&run.trace)[0];
    assert!(!parents_header.contains("private"), "{parents_header}");
    for (_, report) in &copying {
        // Read at every closed epoch, not at exit, which the analysis never compares.
        let epochs = report["epochs"].as_array().unwrap();
        let (exit, closed) = epochs.split_last().unwrap();
        assert_eq!(exit["cause"], "exit", "{exit:#}");
        assert_eq!(exit["private_dirty_bytes"], 0, "{exit:#}");
        assert!(closed.iter().all(|e| e["private_dirty_bytes"].as_u64().unwrap() > 0), "{closed:#?}");
        assert!(report["suspects"].as_array().unwrap().is_empty(), "{:#}", report["suspects"]);
        let growth = report["verdict"]["private_growth_bytes"].as_i64().unwrap();
        let epochs = report["verdict"]["epochs"].as_i64().unwrap();
        assert!((6 << 20..10 << 20).contains(&(growth / epochs)), "{growth} over {epochs} epochs");
        assert!(report["verdict"]["rss_growth_bytes"].as_i64().unwrap() < growth / 4, "{:#}", report["verdict"]);
        let message = report["verdict"]["message"].as_str().unwrap();
        assert!(message.contains("copying the pages it shares with its parent"), "{message}");
    }
}

/// Batches made by workers reach the main process in shared memory it
/// maps; a loop that keeps them keeps the mappings (8 batches of 512 KiB
/// an epoch), ranked first as shared memory at the loop's line.
///
/// The kept batches' small Python objects fill pymalloc arenas too: in some
/// runs a new arena (1 MiB) is mapped while a batch is received in the
/// analysed epochs, and ranked at the same line as mapped memory; and the
/// kept tensors' own objects (their `TensorImpl`s, on the heap, below the
/// floor) pile up with them, the rest of the line's leak. The line then
/// holds several kinds, and says so.
#[test]
fn kept_worker_batches_are_ranked_as_shared_memory_at_the_loop() {
    let run = torch_job(&["--workers", &WORKERS.to_string(), "--keep-batches"], &[]);
    let report = report_json(&run.trace);
    let top = &report["suspects"][0];
    assert_eq!((&top["memory"], &top["growth_bytes_per_epoch"]), (&"shared".into(), &(4 << 20).into()), "{top:#}");
    assert!(top["explanation"].as_str().is_some_and(|e| e.starts_with("batches from DataLoader workers")), "{top:#}");
    let line = &report["lines"][0];
    let the_loop = line_of("python/loader_epochs.py", "for batch in passes(loader):");
    assert_eq!((&line["frame"]["function"], &line["frame"]["line"]), (&"train".into(), &the_loop.into()), "{line:#}");
    let message = report["verdict"]["message"].as_str().unwrap();
    let others: Vec<&Value> = line["suspect_ranks"].as_array().unwrap().iter().filter(|&rank| rank != 1).collect();
    if others.is_empty() {
        assert_eq!(
            (&line["memory"], &line["growth_bytes_per_epoch"]),
            (&"shared".into(), &(4 << 20).into()),
            "{line:#}"
        );
        let expected = format!("train (loader_epochs.py:{the_loop}) keeps about 4.00 MiB/epoch of shared memory alive");
        assert!(message.starts_with(&expected), "{message}");
    } else {
        for rank in others {
            let suspect = &report["suspects"][rank.as_u64().unwrap() as usize - 1];
            let arena = suspect["memory"] == "mapped";
            let tensor_objects = suspect["memory"] == "heap" && suspect["below_noise_floor"] == true;
            assert!(arena || tensor_objects, "a pymalloc arena or the tensors' objects join the batches: {suspect:#}");
        }
        assert_eq!(line["memory"], "mixed", "{line:#}");
        assert!(message.starts_with(&format!("train (loader_epochs.py:{the_loop}) keeps about")), "{message}");
        assert!(message.contains("of several kinds of memory alive"), "{message}");
    }
}

/// Full capture records the workers' every allocation too.
#[test]
fn full_capture_records_the_workers_in_full() {
    let (run, _) = training_job_cut_by_its_passes(&["--workers", &WORKERS.to_string()], &[FULL_CAPTURE]);
    assert_workers(&run, 2 * WORKERS * EPOCHS, "every allocation recorded", WorkerEpochs::OnePass);
}

/// The parent cuts time slices until its training loader repeats: the
/// workers of its first training pass, which wait half a second longer
/// than a slice (10 s by default) before their first sample, see one end
/// and follow it, as workers of one pass follow no other epoch of their
/// parent's.
#[test]
fn workers_of_one_pass_follow_a_start_up_time_slice_ending_in_it() {
    let run = torch_job(&["--workers", &WORKERS.to_string(), "--first-pass-wait", "10.5"], &[]);
    assert_cut_by_training_passes(&report_json(&run.trace), Some("train"));
    let workers = assert_workers(&run, 2 * WORKERS * EPOCHS, WORKER_SAMPLED_FOR_LIFE, WorkerEpochs::OnePass);
    let followed_a_slice = workers.iter().filter(|worker| causes(worker).contains(&"parent".to_string())).count();
    assert!(followed_a_slice >= WORKERS, "{followed_a_slice} workers followed a slice");
}

#[test]
fn auto_epochs_off_leaves_time_slices() {
    let run = torch_job(&["--workers", "0"], &[SAMPLING, ("TRACER_AUTO_EPOCHS", "0"), ("TRACER_EPOCH_SECONDS", "0.5")]);
    let report = report_json(&run.trace);
    let causes = causes(&report);
    assert!(causes.iter().filter(|c| *c == "timer").count() >= 2, "{causes:?}");
    assert!(causes.iter().all(|c| c == "timer" || c == "exit"), "{causes:?}");
    let epochs = report["process"]["settings"]["epochs"].as_str().unwrap_or_default();
    assert!(epochs.contains("DataLoader passes off (TRACER_AUTO_EPOCHS=0)"), "{epochs}");
}

/// Its DataLoader workers are still known for what they are, and sampled.
#[test]
fn a_program_that_marks_gets_its_marks_only() {
    let run = torch_job(&["--workers", &WORKERS.to_string(), "--mark"], &[]);
    assert_workers(&run, 2 * WORKERS * EPOCHS, WORKER_SAMPLED_FOR_LIFE, WorkerEpochs::OnePass);
    let report = report_json(&run.trace);
    assert_top_suspect_is_planted(&report, "loader_epochs.py");
    let causes = causes(&report);
    let slices = causes.iter().take_while(|c| *c == "timer").count();
    let mut expected = vec!["timer".to_string(); slices];
    expected.extend(std::iter::repeat_n("mark".to_string(), EPOCHS));
    expected.push("exit".into());
    assert_eq!(causes, expected);
    let marks: Vec<String> = (1..=EPOCHS).map(|n| format!("epoch {n}")).collect();
    assert_eq!(labels(&report, "mark"), marks);
}

/// The walk recognises the loader on every supported interpreter, fully
/// traced and sampled (where the method is found through its module's constants).
fn stand_in_passes_cut_the_epochs(version: &str) {
    let python = python_interpreter(version);
    let epochs = EPOCHS.to_string();
    // Loops over a generator wrapping the loader (as over tqdm(loader)),
    // which 3.12 and later enter anew until they specialize the loop, then
    // run inline: the first pass is one place with the later ones.
    for (env, wrap) in [(&[][..], false), (&[SAMPLING][..], false), (&[][..], true)] {
        let args = if wrap { vec![epochs.as_str(), "--wrap"] } else { vec![epochs.as_str()] };
        let run = run_job(&python, "stand_in_epochs.py", &args, env);
        let report = report_json(&run.trace);
        // Both loops run in `main`: no name tells them apart.
        assert_cut_by_training_passes(&report, None);
        if env.is_empty() {
            assert_top_suspect_is_planted(&report, "stand_in_epochs.py");
        }
    }
}

#[test]
fn stand_in_passes_cut_the_epochs_on_3_11() {
    stand_in_passes_cut_the_epochs("3.11");
}

#[test]
fn stand_in_passes_cut_the_epochs_on_3_12() {
    stand_in_passes_cut_the_epochs("3.12");
}

#[test]
fn stand_in_passes_cut_the_epochs_on_3_13() {
    stand_in_passes_cut_the_epochs("3.13");
}

/// The traces of `run`'s multiprocessing children (`kind`, as their
/// settings say it) followed `marks` epochs of their parent's but the first
/// two or fewer, sampled for life, and each report ranks its leak at
/// `leak` (function, file name, line) first, which the parent's report
/// points at.
fn assert_workers_found_their_leak(
    run: &TracedRun,
    workers: &[PathBuf],
    kind: &str,
    marks: usize,
    leak: (&str, &str, u64),
) {
    for worker in workers {
        assert_worker_found_its_leak(worker, kind, marks, leak);
    }
    let (function, file, line) = leak;
    let expected = format!("{function} ({file}:{line})");
    assert_eq!(
        descendant_finding_lines(&report_json(&run.trace)),
        vec![expected; workers.len()],
        "the parent's report points at the workers' line"
    );
}

/// One of [`assert_workers_found_their_leak`]'s workers.
fn assert_worker_found_its_leak(worker: &std::path::Path, kind: &str, marks: usize, leak: (&str, &str, u64)) {
    let report = report_json(worker);
    assert_eq!(report["trace_end"], "complete", "{}", worker.display());
    let epochs = report["process"]["settings"]["epochs"].as_str().unwrap_or_default();
    assert!(epochs.starts_with(&format!("its parent's epochs: this {kind}")), "{epochs}");
    let causes = causes(&report);
    let (exit, followed) = causes.split_last().expect("at least the exit snapshot");
    assert_eq!(exit, "exit", "{}", worker.display());
    assert!(followed.len() >= marks - 2, "{}: {causes:?}", worker.display());
    assert!(followed.iter().all(|c| c == "parent"), "{}: {causes:?}", worker.display());
    let sampling = report["process"]["settings"]["sampling"].as_str().unwrap_or_default();
    assert!(sampling.contains(&format!("for the whole life of this {kind}")), "{sampling}");
    assert_eq!(report["verdict"]["kind"], "heap_leak", "{}: {:#}", worker.display(), report["verdict"]);
    let line = &report["lines"][0]["frame"];
    let (function, file, number) = leak;
    assert_eq!(line["function"], function, "{line}");
    assert!(line["file"].as_str().unwrap_or_default().ends_with(file), "{line}");
    assert_eq!(line["line"], number, "{line}");
}

/// A loader whose persistent workers Python's multiprocessing spawns
/// (`multiprocessing_context="spawn"`), fresh interpreters that share no
/// memory with the job: each follows the job's marked epochs all the same,
/// and its own report ranks the leak in its Dataset first, which the job's
/// report points at.
#[test]
fn spawned_persistent_workers_follow_their_parents_epochs() {
    const MARKS: usize = 8;
    let name = "spawn_loader_epochs.py";
    let run = run_job(&venv_python(), name, &[], &[]);
    let leak_line = line_of(&format!("python/{name}"), "self.kept.append(bytearray(64 * 1024))");
    let spawned: Vec<PathBuf> = worker_traces(&run)
        .into_iter()
        .filter(|trace| {
            let cmdline = report_json(trace)["process"]["cmdline"].clone();
            cmdline.as_array().is_some_and(|args| args.iter().any(|a| a == "--multiprocessing-fork"))
        })
        .collect();
    assert_eq!(spawned.len(), WORKERS, "{:?}", run.trace_files());
    assert_workers_found_their_leak(
        &run,
        &spawned,
        "spawned multiprocessing child",
        MARKS,
        ("Leaky.__getitem__", name, leak_line),
    );
}

/// A loader whose persistent workers a forkserver forks
/// (`multiprocessing_context="forkserver"`): the server, started by the
/// job, hands the job's page to its forks, which follow the job's marked
/// epochs as spawned workers do; their reports rank the Dataset's leak
/// first, the job's points at them, and the server's own report speaks of
/// itself alone (no wrapper of the job's workers).
#[test]
fn forkserver_persistent_workers_follow_their_parents_epochs() {
    const MARKS: usize = 8;
    let name = "spawn_loader_epochs.py";
    let run = run_job(&venv_python(), name, &["forkserver"], &[]);
    let leak_line = line_of(&format!("python/{name}"), "self.kept.append(bytearray(64 * 1024))");
    let from_server = |trace: &PathBuf| {
        let process = report_json(trace)["process"].clone();
        let cmdline = process["cmdline"].as_array().cloned().unwrap_or_default();
        let server = cmdline.iter().any(|a| a.as_str().is_some_and(|a| a.contains("multiprocessing.forkserver")));
        (server, process["forked_from"].is_u64())
    };
    let (forked, servers): (Vec<PathBuf>, Vec<PathBuf>) =
        worker_traces(&run).into_iter().filter(|trace| from_server(trace).0).partition(|trace| from_server(trace).1);
    assert_eq!(forked.len(), WORKERS, "{:?}", run.trace_files());
    assert_workers_found_their_leak(
        &run,
        &forked,
        "multiprocessing child of a forkserver",
        MARKS,
        ("Leaky.__getitem__", name, leak_line),
    );
    let [server] = &servers[..] else { panic!("one forkserver: {servers:?}") };
    let report = report_json(server);
    assert_eq!(report["verdict"]["kind"], "too_few_epochs", "{:#}", report["verdict"]);
    let message = report["verdict"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("this is of this process alone"), "{message}");
}

/// A spawned child whose parent closes no epoch (a launcher waiting for
/// its rank, as torch.multiprocessing.spawn's is) keeps the epochs it cuts
/// itself, here at its DataLoader passes, and its report ranks its leak.
#[test]
fn a_spawned_rank_whose_launcher_closes_no_epoch_cuts_its_own() {
    let name = "spawned_rank.py";
    let script = python_script(name);
    let run = run_traced_with(&venv_python(), &[script.to_str().expect("UTF-8 path")], &[]).succeeded();
    assert_eq!(run.stdout(), "rank: 336 buffers kept\nlauncher: rank exited with 0\n");
    assert!(!run.stderr().contains("tracer:"), "the tracer complained: {}", run.stderr());
    let rank = run
        .trace_files()
        .into_iter()
        .find(|trace| {
            let cmdline = report_json(trace)["process"]["cmdline"].clone();
            cmdline.as_array().is_some_and(|args| args.iter().any(|a| a == "--multiprocessing-fork"))
                && report_json(trace)["verdict"]["kind"] == "heap_leak"
        })
        .unwrap_or_else(|| panic!("no spawned rank's trace with a leak: {:?}", run.trace_files()));
    let report = report_json(&rank);
    let causes = causes(&report);
    assert!(causes.iter().filter(|c| *c == "auto").count() >= 5, "its own DataLoader passes: {causes:?}");
    assert!(!causes.iter().any(|c| c == "parent"), "{causes:?}");
    let leak_line = line_of(&format!("python/{name}"), "the rank's leak");
    let line = &report["lines"][0]["frame"];
    assert_eq!((&line["function"], &line["line"]), (&"keep_step_buffers".into(), &leak_line.into()), "{line}");
}

/// The workers of a pool that Python's multiprocessing forks (not
/// DataLoader workers) follow the epochs their parent marks from the
/// first it closes after their fork, and their own reports rank the leak
/// in their task first, which the job's report points at.
#[test]
fn forked_pool_workers_follow_their_parents_epochs() {
    const MARKS: usize = 8;
    let name = "forked_pool.py";
    let run = run_job(&venv_python(), name, &[], &[]);
    let leak_line = line_of(&format!("python/{name}"), "the workers' leak");
    let workers = worker_traces(&run);
    assert_eq!(workers.len(), WORKERS, "{:?}", run.trace_files());
    assert_workers_found_their_leak(
        &run,
        &workers,
        "forked multiprocessing child",
        MARKS,
        ("keep_task_buffers", name, leak_line),
    );
}

/// A pool forking a worker for every task forks a worker trace each:
/// past TRACER_WORKER_TRACES they run untraced, as DataLoader workers do,
/// and the job's trace says so once.
#[test]
fn forked_pool_workers_past_the_limit_write_no_trace() {
    let run = run_job(&venv_python(), "forked_pool.py", &["--one-task-per-worker"], &[("TRACER_WORKER_TRACES", "3")]);
    assert_eq!(worker_traces(&run).len(), 3, "{:?}", run.trace_files());
    let report = report_json(&run.trace);
    let notes = note_texts(&report);
    let untraced = notes.iter().filter(|n| n.contains("multiprocessing forks) after the first 3 ")).count();
    assert_eq!(untraced, 1, "{notes:?}");
}

/// Training streams from one endless pass while every 64 steps an
/// evaluation goes round four validation loaders from one line
/// (tests/python/eval_rounds.py): one epoch a round of evaluation, not one a
/// loader, and the analysis starts with the first whole round, so the
/// planted line leaks its 64 buffers of 16 KiB (and their headers) an epoch.
/// Evaluation rounds over 4 loaders, every 64 steps of a training that
/// streams from one endless pass, with a leak in the training steps or in
/// the evaluation's batches: either grows by its whole round's worth an
/// epoch from the first whole round on.
fn evaluation_rounds_job(evaluation_leaks: bool) {
    const ROUNDS: usize = 8;
    let mut args = vec![python_script("eval_rounds.py").to_str().expect("UTF-8 path").to_string()];
    if evaluation_leaks {
        args.push("--evaluation-leaks".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run_traced_with(&venv_python(), &args, &[]);
    assert!(run.output.status.success(), "eval_rounds.py failed:\n{}\n{}", run.stdout(), run.stderr());
    assert!(run.stdout().contains(&format!("round {ROUNDS}:")), "{}", run.stdout());
    let report = report_json(&run.trace);
    // The first round's second to fourth loaders cut an epoch each, the
    // last of them held by the epoch the first loader's next pass closes;
    // every round after, one, numbered by the round it held.
    let mut expected: Vec<String> = (1..=3).map(|n| format!("DataLoader pass {n} in evaluate")).collect();
    expected.extend((1..ROUNDS).map(|n| format!("DataLoader round {n} (4 loaders) in evaluate")));
    assert_eq!(labels(&report, "auto"), expected);
    assert_eq!(report["analysis"]["first_analysed_epoch"], 3, "{:#}", report["analysis"]);
    let notes = note_texts(&report);
    assert_noted(&notes, "the DataLoader passes go round several loaders, one epoch a round, from epoch 4:");

    let (function, line) = if evaluation_leaks {
        ("keep_evaluation_buffer", "KEPT.append(bytearray(16384))")
    } else {
        ("keep_step_buffer", "KEPT.append(bytearray(16 * 1024))")
    };
    let top = report["suspects"].get(0).unwrap_or_else(|| panic!("no suspects: {:#}", report["verdict"]));
    let own = top["frames"].as_array().expect("frames").iter().find(|f| f["own_code"] == true).expect("own-code frame");
    assert!(own["file"].as_str().unwrap_or_default().ends_with("eval_rounds.py"), "{own}");
    assert_eq!(
        (&own["function"], &own["line"]),
        (&function.into(), &line_of("python/eval_rounds.py", line).into()),
        "{own}"
    );
    // 64 training steps a round, or 4 loaders of 4 batches.
    let buffers = if evaluation_leaks { 16 } else { 64 };
    let growth = top["growth_bytes_per_epoch"].as_u64().unwrap_or_default();
    assert!((buffers * 16384..buffers * (16384 + 128)).contains(&growth), "{top:#}");
    assert_eq!(report["verdict"]["kind"], "heap_leak");
}

#[test]
fn evaluation_rounds_over_several_loaders_cut_one_epoch_each() {
    evaluation_rounds_job(false);
}

#[test]
fn a_leak_of_the_evaluation_rounds_grows_by_a_whole_round_an_epoch() {
    evaluation_rounds_job(true);
}

/// An evaluation every two steps from inside the training loop (as
/// trainers with an evaluation interval run it) repeats first, inside the
/// first training pass, and closes epochs there; the training loop's second
/// pass takes the epochs over, one per training pass from then on, where
/// the analysis starts: the leak grows by a training epoch's 8 buffers an
/// epoch, not by the 2 of an evaluation interval.
#[test]
fn an_evaluation_inside_the_training_loop_leaves_it_the_epochs() {
    let run = torch_job(&["--workers", "0", "--eval-every", "2"], &[]);
    let report = report_json(&run.trace);
    // Evaluations 2, 3 and 4 of the first training pass close the epochs
    // that held evaluations 1 to 3, then training passes 2 to 6 those of
    // passes 1 to 5 (the first, from the fourth evaluation on).
    // Each loop is named by the function it runs in.
    let mut expected: Vec<String> = (1..=3).map(|n| format!("DataLoader pass {n} in evaluate")).collect();
    expected.extend((1..EPOCHS).map(|n| format!("DataLoader pass {n} in train")));
    assert_eq!(labels(&report, "auto"), expected);
    let notes = note_texts(&report);
    assert_noted(&notes, "the passes of an outer DataLoader loop close the epochs, whole from epoch 4:");
    // The analysis starts at the end of the first training pass.
    assert_eq!(report["analysis"]["first_analysed_epoch"], 3, "{:#}", report["analysis"]);
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(!message.contains("since epoch"), "the leak began with the training: {message}");
    assert_top_suspect_is_planted(&report, "loader_epochs.py");
    let growth = report["suspects"][0]["growth_bytes_per_epoch"].as_u64().unwrap_or_default();
    assert!((8 * 65536..8 * (65536 + 128)).contains(&growth), "{:#}", report["suspects"][0]);
    let text = report_text(&run.trace);
    assert!(text.contains("(inside the first pass of the outer DataLoader loop)"), "{text}");
    assert!(text.contains("(start-up, and the outer DataLoader loop's first pass begun)"), "{text}");
}

/// Training, then fine-tuning on another loader from another function:
/// once the training loop has made no pass for three times the longest time
/// between two of its passes (5 s at least), the fine-tuning loop, repeating
/// meanwhile, closes the epochs, with no time slice cut between (its passes
/// are seen). The two phases are analysed apart: a leak of the fine-tuning
/// alone is found at its rate, over the fine-tuning's epochs; one of the
/// training alone, over the training's, though nothing grows after.
fn fine_tuning_job(tuning_leaks: bool) -> Value {
    let mut args = vec!["--workers", "0", "--fine-tune", "16", "--tune-step-wait", "0.08"];
    if tuning_leaks {
        args.push("--tuning-leaks");
    }
    let run = torch_job(&args, &[]);
    assert!(run.stdout().contains("fine-tuning 16:"), "{}", run.stdout());
    let report = report_json(&run.trace);
    let notes = note_texts(&report);
    let prefix = "another DataLoader loop's passes close the epochs, whole from epoch ";
    let from: usize = notes
        .iter()
        .find_map(|n| n.strip_prefix(prefix)?.split(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no note of the fine-tuning loop taking the epochs over: {notes:?}"));
    assert!(from >= EPOCHS, "the training's {} epochs come first: {notes:?}", EPOCHS - 1);
    let causes = causes(&report);
    assert!(causes.iter().all(|c| c == "auto" || c == "exit"), "no time slice: {causes:?}");
    assert!(causes.len() - from >= 5, "the fine-tuning's later passes close an epoch each: {causes:?}");
    // Training's epochs 0 to 4 (epoch 5 held the end of its last pass and
    // the start of the fine-tuning), then the fine-tuning's.
    let phases = &report["analysis"]["phases"];
    let (training, tuning) = (&phases[0], &phases[1]);
    assert_eq!((&training["from_epoch"], &training["to_epoch"]), (&0.into(), &(from - 2).into()), "{phases:#}");
    assert_eq!((&tuning["from_epoch"], &tuning["to_epoch"]), (&from.into(), &Value::Null), "{phases:#}");
    let (leaking, healthy) = if tuning_leaks { (tuning, training) } else { (training, tuning) };
    assert_eq!((&leaking["verdict"], &leaking["analysed"]), (&"heap_leak".into(), &true.into()), "{phases:#}");
    assert_eq!((&healthy["verdict"], &healthy["analysed"]), (&"no_growth".into(), &false.into()), "{phases:#}");
    let growth = leaking["growth_bytes_per_epoch"].as_u64().unwrap_or_default();
    assert!((8 * 65536..8 * (65536 + 128)).contains(&growth), "{phases:#}");
    assert_eq!(report["verdict"]["kind"], "heap_leak");
    report
}

#[test]
fn a_fine_tuning_loop_after_training_is_analysed_apart() {
    let report = fine_tuning_job(true);
    let top = report["suspects"].get(0).unwrap_or_else(|| panic!("no suspects: {:#}", report["verdict"]));
    let own = top["frames"].as_array().expect("frames").iter().find(|f| f["own_code"] == true).expect("own-code frame");
    assert_eq!(own["line"], line_of("python/loader_epochs.py", "KEPT.append(bytearray(65536))"), "{own}");
    // A pass's 8 buffers an epoch: the epoch that held the end of the
    // training and the start of the fine-tuning counts for neither.
    let growth = top["growth_bytes_per_epoch"].as_u64().unwrap_or_default();
    assert!((8 * 65536..8 * (65536 + 128)).contains(&growth), "{top:#}");
    // From the end of the epoch that held both.
    let from = report["analysis"]["phases"][1]["from_epoch"].as_u64().unwrap();
    assert_eq!(report["analysis"]["first_analysed_epoch"], from - 1, "{:#}", report["analysis"]);
}

/// A fine-tuning (or testing) phase that takes the epochs over with its
/// last passes leaves itself too few epochs to analyse: the verdict says
/// so, with what the training's epochs found, rather than that the job
/// is clean (its leak is the fine-tuning's).
#[test]
fn a_short_last_phase_reads_too_few_epochs() {
    let args = ["--workers", "0", "--fine-tune", "8", "--tune-step-wait", "0.1", "--tuning-leaks"];
    let run = torch_job(&args, &[]);
    let report = report_json(&run.trace);
    assert_noted(&note_texts(&report), "another DataLoader loop's passes close the epochs, whole from epoch ");
    let message = too_few_epochs_message(&report);
    assert!(message.contains("2 DataLoader loops cut the job's epochs in turn"), "{message}");
    assert!(message.contains(", no leak"), "the training's finding: {message}");
}

/// A leak of the training alone, then a long fine-tuning (or testing)
/// phase that keeps nothing: the training's epochs find it.
#[test]
fn a_training_leak_is_found_over_the_training_before_a_fine_tuning_loop() {
    let report = fine_tuning_job(false);
    assert_top_suspect_is_planted(&report, "loader_epochs.py");
    let growth = report["suspects"][0]["growth_bytes_per_epoch"].as_u64().unwrap_or_default();
    assert!((8 * 65536..8 * (65536 + 128)).contains(&growth), "{:#}", report["suspects"][0]);
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(message.contains("; these are epochs 0 to "), "{message}");
    assert!(message.contains("2 DataLoader loops cut the job's epochs in turn"), "{message}");
}

/// Passes seen at first, then not, each later one starting with small
/// objects alone (as persistent workers over an unshuffled dataset start
/// theirs): time slices come back after three times the longest time
/// between the passes seen (5 s at least), so the run is cut into epochs
/// all the same, the leak is found, and the verdict says why the epochs
/// are of two kinds.
#[test]
fn passes_that_go_unseen_are_cut_by_time_slices() {
    let python = python_interpreter("3.11");
    let script = python_script("unseen_passes.py");
    let run = run_traced_with(&python, &[script.to_str().unwrap(), "22"], &[]).succeeded();
    let report = report_json(&run.trace);
    let causes = causes(&report);
    let after_passes: Vec<&str> =
        causes.iter().skip_while(|c| *c != "auto").skip_while(|c| *c == "auto").map(String::as_str).collect();
    assert_eq!(causes.iter().filter(|c| *c == "auto").count(), 2, "passes 2 and 3 seen: {causes:?}");
    assert!(after_passes.len() >= 4, "{causes:?}");
    assert!(after_passes[..after_passes.len() - 1].iter().all(|c| *c == "timer"), "{causes:?}");
    assert!(labels(&report, "timer").last().is_some_and(|l| l.ends_with("(no pass seen)")), "{causes:?}");
    assert_top_suspect_is_planted(&report, "unseen_passes.py");
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(message.contains("by DataLoader passes and, while no pass was seen, by time slices"), "{message}");
}
