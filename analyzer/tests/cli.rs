//! The analyzer binary on good and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use analyzer::synth::{all_behaviours, write_temp, Sim, TempFile};
use trace_format::{file_header, frame_record, Frame, Notice, PyCode, PyFrame, Record, FORMAT_VERSION};

fn analyzer(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_analyzer")).args(args).output().expect("run the analyzer")
}

fn report(path: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["report".as_ref(), path.as_os_str()];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    analyzer(&args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A failure: non-zero exit and exactly one line on stderr, in the usual form.
fn assert_one_line_error(out: &Output, mentions: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "expected a failure, got success: {err}");
    assert_eq!(err.lines().count(), 1, "stderr is not one line: {err:?}");
    assert!(err.starts_with("analyzer: error: "), "{err}");
    assert!(err.contains("; "), "the error does not say what to do: {err}");
    assert!(err.contains(mentions), "the error does not mention {mentions:?}: {err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

fn svg_beside(trace: &Path) -> PathBuf {
    trace.with_file_name(format!("{}.leaks.svg", trace.file_name().unwrap().to_string_lossy()))
}

#[test]
fn random_bytes_are_not_a_trace() {
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let path = write_temp("random.bin", &bytes);
    assert_one_line_error(&report(&path, &[]), "not a trace");
}

#[test]
fn an_elf_file_is_not_a_trace() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_analyzer"));
    assert_one_line_error(&report(&exe, &[]), "not a trace");
}

#[test]
fn an_empty_file_is_not_a_trace() {
    let path = write_temp("empty.bin", &[]);
    assert_one_line_error(&report(&path, &[]), "empty");
}

#[test]
fn a_newer_format_version_is_refused() {
    let mut bytes = file_header().to_vec();
    bytes[8..10].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let path = write_temp("newer.bin", &bytes);
    assert_one_line_error(&report(&path, &[]), "newer");
}

#[test]
fn a_missing_file() {
    assert_one_line_error(&report(Path::new("/nonexistent/trace.bin"), &[]), "no such file");
}

#[test]
fn a_directory_without_a_trace() {
    let file = write_temp("x", b"");
    assert_one_line_error(&report(file.parent().unwrap(), &[]), "trace.bin: no such file");
}

/// A directory stands for the trace.bin in it, and no argument for the
/// trace.bin in the current directory: where the tracer writes by default.
#[test]
fn a_directory_or_no_argument_reads_its_trace_bin() {
    let trace = write_temp("trace.bin", &all_behaviours(6, true).bytes());
    let dir = trace.parent().unwrap();
    let out = report(dir, &["--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["trace"], dir.join("trace.bin").to_str().unwrap());
    assert!(dir.join("trace.bin.leaks.svg").exists(), "the flamegraph beside the trace");
    let out =
        Command::new(env!("CARGO_BIN_EXE_analyzer")).args(["report", "--json"]).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["trace"], "trace.bin");
}

#[test]
fn a_trace_cut_before_its_first_snapshot() {
    let sim = all_behaviours(6, false);
    let bytes = sim.bytes();
    let first_snapshot = sim.record_offsets()[3]; // process + 2 stacks, then the first snapshot
    for cut in [first_snapshot - 3, first_snapshot + 7] {
        let path = write_temp("cut.bin", &bytes[..cut]);
        let out = report(&path, &[]);
        assert_one_line_error(&out, "no complete snapshot");
        // The run may well have closed epochs: the file is what is short.
        assert!(stderr(&out).contains("the file is incomplete") && !stderr(&out).contains("tracer_mark"), "{out:?}");
    }
    let path = write_temp("cut.bin", &bytes[..trace_format::FILE_HEADER_LEN + 3]);
    assert_one_line_error(&report(&path, &[]), "before its first record");
}

/// A whole trace of a run that ended before closing an epoch: the run is
/// what to change.
#[test]
fn a_complete_trace_without_a_snapshot() {
    let mut sim = Sim::new("/opt/app/train");
    sim.alloc_many(1, 10, 1024);
    sim.push(trace_format::Record::End(trace_format::End { reason: trace_format::EndReason::Exit, elapsed_ns: 1 }));
    let path = write_temp("no_snapshot.bin", &sim.bytes());
    let out = report(&path, &[]);
    assert_one_line_error(&out, "the process ended before the first epoch closed");
    assert!(stderr(&out).contains("call tracer_mark(label)"), "{out:?}");
}

/// A trace that stops before its first snapshot without its end: the
/// process was killed inside its first time slice, or the tracer stopped
/// writing (past a file-size limit) though the program marked. The error
/// names both, and the slice, tells the program to mark no more than it
/// may have, and claims no exit.
#[test]
fn a_trace_stopped_before_its_first_snapshot() {
    let mut sim = Sim::new("/opt/app/train");
    let epochs = "marks; time slices of 30 s until the first mark".to_string();
    sim.process_mut().settings.push((trace_format::EPOCHS_SETTING.into(), epochs));
    sim.alloc_many(1, 10, 1024);
    let path = write_temp("killed.bin", &sim.bytes());
    let out = report(&path, &[]);
    assert_one_line_error(&out, "the process was killed or is still running, or the tracer stopped writing the trace");
    let err = stderr(&out);
    assert!(err.contains("a file-size limit, ulimit -f") && err.contains("a time slice of 30 s"), "{err}");
    assert!(!err.contains("call tracer_mark") && !err.contains("process ended"), "{err}");
}

#[test]
fn a_damaged_checksum_before_the_first_snapshot() {
    let sim = all_behaviours(6, false);
    let mut bytes = sim.bytes();
    let second = sim.record_offsets()[1];
    bytes[second + 6] ^= 0x40;
    let path = write_temp("damaged.bin", &bytes);
    let out = report(&path, &[]);
    assert_one_line_error(&out, "no complete snapshot");
    assert!(stderr(&out).contains("damaged after the tracer wrote it") && !stderr(&out).contains("tracer_mark"));
}

fn snapshot_offsets(sim: &Sim) -> Vec<usize> {
    // The records of `all_behaviours`: stacks appear before the first snapshot using them.
    let bytes = sim.bytes();
    let reader = trace_format::RecordReader::new(&bytes[..]).unwrap();
    let offsets = sim.record_offsets();
    reader.zip(offsets).filter(|(record, _)| matches!(record, Record::Snapshot(_))).map(|(_, at)| at).collect()
}

#[test]
fn a_truncated_trace_is_reported_up_to_its_last_snapshot() {
    let sim = all_behaviours(10, false);
    let bytes = sim.bytes();
    let snaps = snapshot_offsets(&sim);
    // Cut inside the 9th snapshot record: 8 complete snapshots remain.
    let cut = snaps[8] + 10;
    let path = write_temp("killed.bin", &bytes[..cut]);
    let out = report(&path, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one warning line: {err}");
    assert!(err.starts_with("analyzer: warning: "), "{err}");
    assert!(err.contains(&format!("cut at byte {}", snaps[8])) && err.contains("epochs 0..7"), "{err}");
    let text = stdout(&out);
    assert!(text.contains("Leak suspects: 1"), "{text}");

    let v = json(&report(&path, &["--json"]));
    assert_eq!(v["trace_end"], "truncated");
    assert_eq!(v["epochs"].as_array().unwrap().len(), 8);
    assert_eq!(v["suspects"].as_array().unwrap().len(), 1);
}

#[test]
fn a_damaged_checksum_mid_file_is_reported_up_to_the_damage() {
    let sim = all_behaviours(10, false);
    let mut bytes = sim.bytes();
    let snaps = snapshot_offsets(&sim);
    bytes[snaps[6] + 8] ^= 0x01;
    let path = write_temp("damaged.bin", &bytes);
    let out = report(&path, &["--json"]);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("damaged at byte") && err.contains("checksum"), "{err}");
    let v = json(&out);
    assert_eq!(v["trace_end"], "damaged");
    assert_eq!(v["epochs"].as_array().unwrap().len(), 6);
}

#[test]
fn descendants_traces_beside_the_trace_are_listed() {
    let path = write_temp("trace.bin", &all_behaviours(8, true).bytes());
    let mut child = Sim::new("/opt/app/worker");
    child.process_mut().pid = 4243;
    child.process_mut().forked_from = Some(4242);
    child.mark("epoch 0");
    std::fs::write(path.with_file_name("trace.bin.4243"), child.bytes()).unwrap();
    std::fs::write(path.with_file_name("trace.bin.notes"), b"not a descendant").unwrap();
    // A persistent worker copying its parent's pages, 16 MiB an epoch.
    let mut copying = Sim::new("/opt/app/worker");
    copying.process_mut().pid = 4244;
    copying.process_mut().forked_from = Some(4242);
    for e in 0..8 {
        copying.copied_from_parent = Some(e * (16 << 20));
        copying.mark(&format!("parent's epoch {e}"));
    }
    copying.exit();
    std::fs::write(path.with_file_name("trace.bin.4244"), copying.bytes()).unwrap();
    let out = report(&path, &["--json"]);
    let listed = json(&out)["descendant_traces"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["pid"], 4243);
    assert_eq!(listed[0]["forked_from"], 4242);
    assert!(listed[0]["finding"].is_null(), "one epoch: nothing to find");
    assert_eq!(listed[1]["finding"]["kind"], "copy_on_write");
    assert_eq!(listed[1]["finding"]["summary"], "private memory +16.0 MiB/epoch");
    let text = stdout(&report(&path, &[]));
    assert!(text.contains("children") && text.contains("trace.bin.4243 (pid 4243, forked"), "{text}");
    assert!(text.contains("trace.bin.4244: copy_on_write, private memory +16.0 MiB/epoch"), "{text}");
    assert!(listed[1]["finding"]["line"].is_null(), "a finding that is no leak names no line");
    let note = "Note: one of this process's descendants found more in its own trace, ";
    assert!(text.contains(note), "{text}");
    assert!(
        text.contains("trace.bin.4244: copy_on_write, private memory +16.0 MiB/epoch (findings, under Run)"),
        "{text}"
    );
}

/// A parent that keeps nothing, whose worker leaks: its "no leak found"
/// says that it speaks of the parent alone.
#[test]
fn a_verdict_of_no_leak_beside_a_leaking_descendant_says_it_is_of_this_process() {
    let marked = |pid: u32, leak: bool| {
        let mut sim = marked_process("/opt/app/train", pid, leak);
        if pid != 4242 {
            sim.process_mut().forked_from = Some(4242);
        }
        sim
    };
    let path = write_temp("trace.bin", &marked(4242, false).bytes());
    std::fs::write(path.with_file_name("trace.bin.4243"), marked(4243, true).bytes()).unwrap();
    let v = json(&report(&path, &["--json"]));
    assert_eq!(v["verdict"]["kind"], "no_growth");
    let message = v["verdict"]["message"].as_str().unwrap();
    assert!(
        message.ends_with(
            "; this is of this process alone: one of its descendants found more in its own trace (see the note below)"
        ),
        "{message}"
    );
    // A build gated on leaks fails on the descendant's, with the report printed.
    let gated = report(&path, &["--fail-on", "heap_leak,copy_on_write"]);
    assert_eq!(gated.status.code(), Some(3), "{}", stderr(&gated));
    assert!(stdout(&gated).contains("Verdict (no_growth)") && stderr(&gated).is_empty(), "{gated:?}");
    std::fs::remove_file(path.with_file_name("trace.bin.4243")).unwrap();
    let message = json(&report(&path, &["--json"]))["verdict"]["message"].as_str().unwrap().to_string();
    assert!(!message.contains("descendants"), "{message}");
    assert_eq!(report(&path, &["--fail-on", "heap_leak"]).status.code(), Some(0));
    assert_eq!(report(&path, &["--json", "--fail-on", "no_growth"]).status.code(), Some(3));
    // Not sampled: never too few samples.
    assert_eq!(report(&path, &["--fail-on", "too_few_samples"]).status.code(), Some(0));
}

/// A sampled run in which no sample fell in its leak, the RSS up by a
/// quarter of a sample an epoch: a build gated on leaks can fail on it.
#[test]
fn a_build_can_fail_on_too_few_samples() {
    let mut sim = Sim::new("/opt/app/train");
    let rate = format!(
        "{}524288 bytes on average (TRACER_SAMPLE_BYTES); counts and bytes are estimates",
        trace_format::SAMPLED_BY_BYTES
    );
    sim.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), rate));
    for e in 0..10 {
        sim.rss_extra += 128 << 10;
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let path = write_temp("sparse.bin", &sim.bytes());
    let v = json(&report(&path, &["--json"]));
    assert_eq!((&v["verdict"]["kind"], &v["verdict"]["too_few_samples"]), (&"no_growth".into(), &true.into()));
    assert_eq!(report(&path, &["--fail-on", "heap_leak"]).status.code(), Some(0));
    assert_eq!(report(&path, &["--fail-on", "heap_leak,too_few_samples"]).status.code(), Some(3));
}

/// A process's trace of 8 marked epochs, leaking 100 KiB an epoch or not.
fn marked_process(exe: &str, pid: u32, leak: bool) -> Sim {
    let mut sim = Sim::new(exe);
    sim.process_mut().pid = pid;
    for e in 0..8 {
        if leak {
            sim.alloc_many(1, 100, 1024);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    sim
}

/// A trace of its exit snapshot only: a wrapper's, or the short end of a pipeline's.
fn exit_only(exe: &str) -> Sim {
    let mut sim = Sim::new(exe);
    sim.exit();
    sim
}

/// A forked worker sampled too sparsely to tell its growth from chance: the
/// gate on its parent counts it, as it counts a descendant's findings.
#[test]
fn a_descendants_too_few_samples_fails_its_parents_gate() {
    let path = write_temp("trace.bin", &marked_process("/opt/app/train", 4242, false).bytes());
    let mut sparse = Sim::new("/opt/app/train");
    sparse.process_mut().pid = 4243;
    sparse.process_mut().forked_from = Some(4242);
    let rate = format!("{}524288 bytes on average (TRACER_SAMPLE_BYTES)", trace_format::SAMPLED_BY_BYTES);
    sparse.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), rate));
    for e in 0..10 {
        sparse.rss_extra += 128 << 10;
        sparse.mark(&format!("epoch {e}"));
    }
    sparse.exit();
    std::fs::write(path.with_file_name("trace.bin.4243"), sparse.bytes()).unwrap();
    let gated = report(&path, &["--fail-on", "too_few_samples"]);
    assert_eq!(gated.status.code(), Some(3), "{}", stderr(&gated));
    let text = stdout(&gated);
    assert!(text.contains("Verdict (no_growth)"), "{text}");
    assert!(
        text.contains("the trace of a descendant of this process, ")
            && text.contains("trace.bin.4243, was sampled too sparsely to tell its growth from chance"),
        "{text}"
    );
    let v = json(&report(&path, &["--json"]));
    assert_eq!(
        (&v["verdict"]["too_few_samples"], &v["descendant_traces"][0]["too_few_samples"]),
        (&false.into(), &true.into())
    );
    assert_eq!(report(&path, &["--fail-on", "no_growth"]).status.code(), Some(3), "its own verdict");
    assert_eq!(report(&path, &["--fail-on", "heap_leak"]).status.code(), Some(0));
}

/// `python train.py | tee log`, both traced: `tee` writes trace.bin and
/// Python, started beside it, trace.bin.<pid>. The gate on trace.bin counts
/// the leak its report points at.
#[test]
fn a_finding_of_a_process_started_beside_fails_the_gate() {
    let path = write_temp("trace.bin", &exit_only("/usr/bin/tee").bytes());
    let mut python = marked_process("/usr/bin/python3", 4300, true);
    let named = path.display().to_string();
    python.process_mut().settings.push((trace_format::NAMED_OUTPUT_IN_USE_SETTING.into(), named));
    std::fs::write(path.with_file_name("trace.bin.4300"), python.bytes()).unwrap();
    let gated = report(&path, &["--fail-on", "heap_leak"]);
    assert_eq!(gated.status.code(), Some(3), "{}", stderr(&gated));
    let text = stdout(&gated);
    assert!(text.contains("Verdict (too_few_epochs)"), "no wrapper: {text}");
    assert!(text.contains("a process started beside this one found more in its own trace"), "{text}");
    assert_eq!(report(&path, &["--fail-on", "copy_on_write"]).status.code(), Some(0));
}

/// `timeout 300 python train.py`: the wrapper's trace has its exit only, the
/// program's its epochs. The verdict, and the gate, are the program's.
#[test]
fn a_wrappers_verdict_is_the_program_it_ran() {
    let path = write_temp("trace.bin", &exit_only("/usr/bin/timeout").bytes());
    let program = path.with_file_name("trace.bin.4243");
    std::fs::write(&program, marked_process("/usr/bin/python3", 4243, true).bytes()).unwrap();
    let out = report(&path, &["--json", "--fail-on", "too_few_epochs"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"]["kind"], "heap_leak");
    assert_eq!(v["verdict"]["program_trace"], program.display().to_string());
    let message = v["verdict"]["message"].as_str().unwrap();
    assert!(message.starts_with("this process (timeout) is a wrapper: it ran 1 epoch of its own"), "{message}");
    assert!(!message.contains("tracer_mark"), "the program marks: {message}");
    assert_eq!(report(&path, &["--fail-on", "heap_leak"]).status.code(), Some(3));
    let text = stdout(&report(&path, &[]));
    assert!(text.contains("\nVerdict (heap_leak): this process (timeout) is a wrapper"), "{text}");

    std::fs::write(&program, marked_process("/usr/bin/python3", 4243, false).bytes()).unwrap();
    let v = json(&report(&path, &["--json"]));
    assert_eq!(v["verdict"]["kind"], "no_growth");
    assert_eq!(report(&path, &["--fail-on", "too_few_epochs"]).status.code(), Some(0));
    assert_eq!(report(&path, &["--fail-on", "no_growth"]).status.code(), Some(3));

    // A program of too few epochs too: the wrapper's verdict is its own.
    std::fs::write(&program, exit_only("/usr/bin/python3").bytes()).unwrap();
    let v = json(&report(&path, &["--json"]));
    assert_eq!(v["verdict"]["kind"], "too_few_epochs");
    assert!(v["verdict"].get("program_trace").is_none(), "{v}");
}

/// A process started beside the traced one (the other end of a pipeline)
/// wrote its own trace: its findings are not a descendant's.
#[test]
fn findings_of_a_process_started_beside_are_not_counted_as_a_descendants() {
    let path = write_temp("trace.bin", &all_behaviours(8, true).bytes());
    let copying = |pid: u32, forked_from: Option<u32>| {
        let mut sim = Sim::new("/opt/app/worker");
        sim.process_mut().pid = pid;
        sim.process_mut().forked_from = forked_from;
        if forked_from.is_none() {
            let named = path.display().to_string();
            sim.process_mut().settings.push((trace_format::NAMED_OUTPUT_IN_USE_SETTING.into(), named));
        }
        for e in 0..8 {
            sim.copied_from_parent = Some(e * (16 << 20));
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        std::fs::write(path.with_file_name(format!("trace.bin.{pid}")), sim.bytes()).unwrap();
    };
    copying(4300, None);
    let text = stdout(&report(&path, &[]));
    assert!(text.contains("trace.bin.4300 (pid 4300, started beside it"), "{text}");
    assert!(
        text.contains("Note: a process started beside this one found more in its own trace (findings, under Run)"),
        "{text}"
    );
    assert!(!text.contains("descendants found more"), "{text}");
    copying(4301, Some(4242));
    let text = stdout(&report(&path, &[]));
    let both = "trace.bin.4301: copy_on_write, private memory +16.0 MiB/epoch; \
                a process started beside this one found more in its own trace (findings, under Run)";
    assert!(text.contains("Note: one of this process's descendants found more in its own trace, "), "{text}");
    assert!(text.contains(both), "{text}");
}

/// What a process started beside the traced one forked (the other end of a
/// pipeline's worker) is no descendant of the traced one either.
#[test]
fn findings_of_a_child_of_a_process_started_beside_are_not_a_descendants() {
    let mut root = all_behaviours(8, true);
    root.process_mut().settings.push((trace_format::RUN_SETTING.into(), "4242.1".into()));
    let path = write_temp("trace.bin", &root.bytes());
    let write = |pid: u32, forked_from: Option<u32>, copying: bool| {
        let mut sim = Sim::new("/opt/app/other");
        sim.process_mut().pid = pid;
        sim.process_mut().forked_from = forked_from;
        sim.process_mut().settings.push((trace_format::RUN_SETTING.into(), "4300.2".into()));
        if forked_from.is_none() {
            let named = path.display().to_string();
            sim.process_mut().settings.push((trace_format::NAMED_OUTPUT_IN_USE_SETTING.into(), named));
        }
        for e in 0..8 {
            sim.copied_from_parent = copying.then_some(e * (16 << 20));
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        std::fs::write(path.with_file_name(format!("trace.bin.{pid}")), sim.bytes()).unwrap();
    };
    write(4300, None, false);
    write(4301, Some(4300), true);
    let text = stdout(&report(&path, &[]));
    assert!(text.contains("trace.bin.4301 (pid 4301, started beside it"), "{text}");
    assert!(text.contains("trace.bin.4301: copy_on_write"), "{text}");
    assert!(
        text.contains("Note: a process started beside this one found more in its own trace (findings, under Run)"),
        "{text}"
    );
    assert!(!text.contains("descendants found more"), "{text}");
    let listed = json(&report(&path, &["--json"]))["descendant_traces"].as_array().unwrap().clone();
    assert!(listed.iter().all(|d| d["started_beside"] == true), "{listed:?}");
}

/// A persistent worker's trace beside `path`, forked from pid 4242, copying
/// its parent's pages at `per_epoch` bytes an epoch.
fn copying_worker(path: &Path, pid: u32, per_epoch: u64) {
    let mut worker = Sim::new("/opt/app/worker");
    worker.process_mut().pid = pid;
    worker.process_mut().forked_from = Some(4242);
    for e in 0..8 {
        worker.copied_from_parent = Some(e * per_epoch);
        worker.mark(&format!("parent's epoch {e}"));
    }
    worker.exit();
    std::fs::write(path.with_file_name(format!("trace.bin.{pid}")), worker.bytes()).unwrap();
}

#[test]
fn descendants_findings_are_listed_fastest_growth_first() {
    let path = write_temp("trace.bin", &all_behaviours(8, true).bytes());
    copying_worker(&path, 4244, 1 << 20);
    copying_worker(&path, 4245, 16 << 20);
    let v = json(&report(&path, &["--json"]));
    let name = |p: &serde_json::Value| p.as_str().unwrap().rsplit('/').next().unwrap().to_string();
    let findings: Vec<String> = v["findings"].as_array().unwrap().iter().map(name).collect();
    assert_eq!(findings, ["trace.bin.4245", "trace.bin.4244"]);
    assert_eq!(v["descendant_traces"][1]["finding"]["growth_bytes_per_epoch"], 16 << 20);
}

#[test]
fn a_trace_without_its_end_record_is_reported_unfinished() {
    let sim = all_behaviours(8, false);
    // The last record is the End record: cut the file exactly before it.
    let end_record_at = *sim.record_offsets().last().unwrap();
    let path = write_temp("trace.bin", &sim.bytes()[..end_record_at]);
    let out = report(&path, &["--json"]);
    assert!(stderr(&out).contains("no end record"), "{}", stderr(&out));
    assert_eq!(json(&out)["trace_end"], "unfinished");
}

#[test]
fn the_json_has_the_documented_shape() {
    let sim = all_behaviours(12, true);
    let path = write_temp("trace.bin", &sim.bytes());
    let out = report(&path, &["--json"]);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.trim_end().lines().count(), 1, "one JSON object on one line");
    let v = json(&out);
    assert_eq!(v["trace_end"], "complete");
    assert_eq!(v["process"]["pid"], 4242);
    assert_eq!(v["process"]["exe"], "/opt/app/train");
    assert!(v["process"]["cmdline"].is_array());
    let epochs = v["epochs"].as_array().unwrap();
    assert_eq!(epochs.len(), 13);
    for (i, e) in epochs.iter().enumerate() {
        assert_eq!(e["index"], i as u64);
        for key in ["label", "cause", "elapsed_ns", "rss_bytes", "live_bytes", "live_count"] {
            assert!(!e[key].is_null(), "epoch {i} lacks {key}");
        }
    }
    assert_eq!(epochs[12]["cause"], "exit");
    assert_eq!(epochs[0]["cause"], "mark");
    let suspects = v["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 1);
    let s = &suspects[0];
    assert_eq!(s["growth_bytes_per_epoch"], 100 * 1024);
    assert_eq!(s["live_count"], 1200);
    assert_eq!(s["live_bytes"], 1200 * 1024);
    let survivors = s["survivors"].as_array().unwrap();
    assert_eq!(survivors.len(), 12);
    assert_eq!(survivors[3], serde_json::json!({"birth_epoch": 3, "count": 100, "bytes": 102400}));
    let frames = s["frames"].as_array().unwrap();
    assert!(!frames.is_empty());
    for f in frames {
        assert!(f["function"].is_string() && f["inlined"].is_boolean() && f["own_code"].is_boolean(), "{f}");
    }
    let lines = v["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["growth_bytes_per_epoch"], 100 * 1024);
    assert_eq!(lines[0]["memory"], "heap");
    assert_eq!(lines[0]["suspect_ranks"], serde_json::json!([1]));
    assert_eq!(v["suspects_in_lines"], 1);
    assert_eq!(v["verdict"]["kind"], "heap_leak");
    assert!(v["verdict"]["message"].as_str().unwrap().contains("100 KiB/epoch"));
    let svg = PathBuf::from(v["flamegraph"].as_str().unwrap());
    assert_eq!(svg, svg_beside(&path));
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(drawing.starts_with("<?xml") && drawing.contains("</svg>"));
}

/// Each warning the tracer gave (two settings it could not read) is in the
/// JSON, in order, as in the text.
#[test]
fn every_warning_of_the_tracer_is_in_the_json() {
    let mut sim = Sim::new("/opt/app/train");
    let warnings = [
        "TRACER_SAMPLE_BYTES=\"64KB\" is not a number of bytes; ignoring it",
        "TRACER_EPOCH_SECONDS=\"1s\" is not a number of seconds; ignoring it",
    ];
    for warning in warnings {
        sim.process_mut().settings.push((trace_format::WARNING_SETTING.into(), warning.into()));
    }
    sim.process_mut().settings.push((trace_format::MAX_FRAMES_SETTING.into(), "128".into()));
    sim.exit();
    let path = write_temp("trace.bin", &sim.bytes());
    let settings = json(&report(&path, &["--json"]))["process"]["settings"].clone();
    assert_eq!(settings["warnings"], serde_json::json!(warnings), "{settings}");
    assert_eq!(settings["max_frames"], "128");
    assert!(settings.get("warning").is_none(), "{settings}");
    let text = stdout(&report(&path, &[]));
    assert_eq!(text.matches("warning = ").count(), 2, "{text}");
}

#[test]
fn verdict_kinds_in_json() {
    let mut few = Sim::new("/opt/app/train");
    few.alloc_many(1, 10, 100);
    few.mark("one");
    few.exit();
    let v = json(&report(&write_temp("few.bin", &few.bytes()), &["--json"]));
    assert_eq!(v["verdict"]["kind"], "too_few_epochs");
    assert_eq!(v["suspects"].as_array().unwrap().len(), 0);

    let mut flat = Sim::new("/opt/app/train");
    let mut outside = Sim::new("/opt/app/train");
    for e in 0..8 {
        let t = flat.alloc_many(4, 10, 4096);
        flat.free_all(t);
        flat.mark(&format!("{e}"));
        outside.rss_extra += 32 << 20;
        outside.mark(&format!("{e}"));
    }
    flat.exit();
    outside.exit();
    let v = json(&report(&write_temp("flat.bin", &flat.bytes()), &["--json"]));
    assert_eq!(v["verdict"]["kind"], "no_growth");
    let v = json(&report(&write_temp("outside.bin", &outside.bytes()), &["--json"]));
    assert_eq!(v["verdict"]["kind"], "growth_outside_heap");
    assert!(v["verdict"]["message"].as_str().unwrap().contains("outside what the tracer sees"));
}

#[test]
fn no_suspects_still_writes_a_valid_svg() {
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..6 {
        sim.mark(&format!("{e}"));
    }
    let path = write_temp("quiet.bin", &sim.bytes());
    let svg = path.with_file_name("chosen.svg");
    let out = report(&path, &["-o", svg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&svg.display().to_string()) && text.contains("no leak suspects"), "{text}");
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(drawing.contains("<svg") && drawing.contains("no leak suspects"));
}

#[test]
fn the_text_report_shows_the_run_epochs_suspects_and_verdict() {
    let sim = all_behaviours(12, true);
    let path = write_temp("trace.bin", &sim.bytes());
    let out = report(&path, &["--top", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "/opt/app/train --steps 10",
        "4242",
        "epochs     13",
        "TRACER_OUTPUT = trace.bin",
        "epoch 11",
        "mapped      tracer",
        "Leaking lines: 1 (the suspects summed by their first frame in the program's own code)",
        "1 suspect: #1",
        "Leak suspects: 1",
        "+100 KiB/epoch",
        "Verdict (heap_leak)",
        "Flamegraph of leaked bytes:",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let epoch_11 = text.lines().find(|l| l.trim_start().starts_with("11 ")).unwrap_or_default();
    assert!(epoch_11.ends_with("1.00 MiB"), "the tracer's own memory ends the epoch's row: {epoch_11:?}");
}

/// The leak's survivors born in the sampled warm-up are estimates, and
/// "live now" counts them: the text report says how much of it they are.
#[test]
fn live_now_says_what_of_it_the_sampled_warm_up_estimated() {
    let mut sim = all_behaviours(12, true);
    let plain = stdout(&report(&write_temp("trace.bin", &sim.bytes()), &[]));
    assert!(plain.contains("live now ") && !plain.contains("estimated"), "nothing sampled:\n{plain}");
    let text = format!("{}0: every allocation is recorded from epoch 1 on", trace_format::WARM_UP_ENDED_NOTICE);
    sim.push(Record::Notice(Notice { elapsed_ns: 1, text: text.clone() }));
    let sampled = stdout(&report(&write_temp("trace.bin", &sim.bytes()), &[]));
    // The leak keeps 100 KiB from each epoch, the warm-up's included.
    let estimated = "live now 1.17 MiB (100 KiB of it estimated from the warm-up's samples)";
    assert!(sampled.contains(&format!("+100 KiB/epoch   {estimated}   1 suspect: #1")), "the line:\n{sampled}");
    assert!(sampled.contains(&format!("+100 KiB/epoch   {estimated} in 1,200 allocations")), "the suspect:\n{sampled}");

    // A leak whose warm-up allocations the sampling drew none of: its
    // count starts with epoch 1, which the report says.
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..12 {
        if e > 0 {
            sim.alloc_many(1, 100, 1024);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    sim.push(Record::Notice(Notice { elapsed_ns: 1, text }));
    let undrawn = stdout(&report(&write_temp("trace.bin", &sim.bytes()), &[]));
    let from_1 =
        "live now 1.07 MiB (from epoch 1 on: what the warm-up kept here, if anything, went undrawn by its sampling)";
    assert!(undrawn.contains(from_1), "{undrawn}");
}

#[test]
fn flamegraph_modes() {
    let sim = all_behaviours(8, true);
    let path = write_temp("trace.bin", &sim.bytes());
    let dir = path.parent().unwrap();
    let run = |args: &[&str]| {
        let mut all: Vec<&std::ffi::OsStr> = vec!["flamegraph".as_ref(), path.as_os_str()];
        all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
        analyzer(&all)
    };
    for (args, name) in [
        (vec![], "leaked.svg"),
        (vec!["--weigh", "live"], "live.svg"),
        (vec!["--weigh", "live", "--epoch", "0"], "live0.svg"),
        (vec!["--weigh", "allocated", "--epoch", "3"], "alloc3.svg"),
        (vec!["--diff", "1", "6"], "diff.svg"),
    ] {
        let svg = dir.join(name);
        let mut args = args.clone();
        let svg_arg = svg.to_str().unwrap().to_string();
        args.extend(["-o", svg_arg.as_str()]);
        let out = run(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).contains(&svg_arg), "{}", stdout(&out));
        let drawing = std::fs::read_to_string(&svg).unwrap();
        assert!(drawing.contains("<svg") && drawing.contains("</svg>"), "{name}");
    }
    let out = run(&["--weigh", "live", "--epoch", "9"]);
    assert_one_line_error(&out, "valid epochs are 0 to 8");
    let out = run(&["--diff", "0", "42"]);
    assert_one_line_error(&out, "valid epochs are 0 to 8");
    let out = run(&["--weigh", "bogus"]);
    assert_one_line_error(&out, "bogus");
    let out = run(&["--epoch", "2"]);
    assert_one_line_error(&out, "--epoch");
    let out = run(&["--weigh", "live", "--noise-floor", "4k"]);
    assert_one_line_error(&out, "--noise-floor");
    let out = run(&["--diff", "1", "6", "--noise-floor", "4k"]);
    assert_one_line_error(&out, "--noise-floor");
}

/// A 100 MiB heap made at the start, then one stack keeping 50 KiB an
/// epoch alive: below the scaled noise floor (about 100 KiB an epoch).
/// With `dip`, a buffer held over one epoch only makes the heap fall once,
/// so that it does not rise at every epoch.
fn small_leak_in_a_large_heap(dip: bool) -> TempFile {
    let mut sim = Sim::new("/opt/app/train");
    let mut held = None;
    for e in 0..10 {
        if e == 0 {
            sim.alloc_many(5, 100, 1 << 20);
        }
        sim.alloc_many(1, 1, 50 * 1024);
        if let Some(buffer) = held.take() {
            sim.free(buffer);
        }
        if dip && e == 4 {
            held = Some(sim.alloc(6, 200 * 1024));
        }
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    write_temp(&format!("small_leak_{dip}.bin"), &sim.bytes())
}

/// The same small leak while the heap rises at every epoch: no noise,
/// however far below the floor; the stack is ranked, and the verdict says
/// why.
#[test]
fn growth_below_the_noise_floor_at_every_epoch_is_a_leak() {
    let path = small_leak_in_a_large_heap(false);
    let v = json(&report(&path, &["--json"]));
    assert_eq!(v["verdict"]["kind"], "heap_leak");
    let suspects = v["suspects"].as_array().unwrap();
    assert_eq!((suspects.len(), &suspects[0]["growth_bytes_per_epoch"]), (1, &51200.into()));
    assert_eq!(suspects[0]["below_noise_floor"], true);
    let message = v["verdict"]["message"].as_str().unwrap();
    assert!(message.contains("are ranked because the heap and traced mappings rose at every epoch"), "{message}");
    assert!(!message.contains("by more than it"), "{message}");
    let text = stdout(&report(&path, &[]));
    assert!(text.contains("all below it, suspects as the heap rose steadily (see the verdict))"), "{text}");
}

#[test]
fn growth_below_the_noise_floor_is_said_and_a_lower_floor_ranks_it() {
    let path = small_leak_in_a_large_heap(true);
    let out = report(&path, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("none above the noise floor; 1 stack keeps 50.0 KiB/epoch alive below it"), "{text}");
    assert!(text.contains("Verdict (no_growth): no stack keeps more than the noise floor"), "{text}");
    assert!(text.contains("--noise-floor 25k"), "{text}");
    let v = json(&report(&path, &["--json"]));
    assert_eq!(v["suspects"].as_array().unwrap().len(), 0);
    assert_eq!(
        v["analysis"]["below_noise_floor"],
        serde_json::json!({
            "stacks": 1,
            "growth_bytes_per_epoch": 51200,
            "largest_bytes_per_epoch": 51200,
            "lines": [{"frame": null, "memory": "heap", "growth_bytes_per_epoch": 51200, "growth_since_epoch": 1, "live_bytes": 512000, "live_count": 10, "stacks": 1}]
        })
    );
    for floor in ["25k", "25600", "25K"] {
        let v = json(&report(&path, &["--json", "--noise-floor", floor]));
        assert_eq!(v["analysis"]["noise_floor_bytes_per_epoch"], 25600, "{floor}");
        assert_eq!(v["suspects"].as_array().unwrap().len(), 1, "{floor}");
        assert_eq!(v["suspects"][0]["growth_bytes_per_epoch"], 51200);
        assert_eq!(v["verdict"]["kind"], "heap_leak");
        assert_eq!(v["analysis"]["below_noise_floor"]["stacks"], 0);
    }
    let flamegraph = |floor: &str| {
        let svg = path.with_extension(format!("{floor}.svg"));
        let args = [
            "flamegraph".as_ref(),
            path.as_os_str(),
            "--noise-floor".as_ref(),
            floor.as_ref(),
            "-o".as_ref(),
            svg.as_os_str(),
        ];
        let out = analyzer(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        std::fs::read_to_string(&svg).unwrap()
    };
    assert!(flamegraph("25k").contains("1 leak suspects"));
    assert!(flamegraph("64k").contains("0 leak suspects"));
    for bad in ["lots", "12q", "-4k", "", "99999999999g"] {
        assert_one_line_error(&report(&path, &[&format!("--noise-floor={bad}")]), "--noise-floor");
    }
}

#[test]
fn usage_errors_are_one_line() {
    assert_one_line_error(&analyzer(&["frobnicate".as_ref()]), "frobnicate");
    assert_one_line_error(&analyzer(&["report".as_ref(), "--top".as_ref(), "many".as_ref()]), "many");
    let top = analyzer(&["report".as_ref(), "--top".as_ref(), "-1".as_ref()]);
    assert_one_line_error(&top, "'-1' is not a count");
    assert!(!stderr(&top).contains("tip"), "clap's tip to write `-- -1` does not work here: {}", stderr(&top));
    let floor = analyzer(&["report".as_ref(), "--noise-floor".as_ref(), "99999999999g".as_ref()]);
    assert_one_line_error(&floor, "more bytes than a 64-bit count holds");
    let negative = analyzer(&["report".as_ref(), "--noise-floor".as_ref(), "-5".as_ref()]);
    assert_one_line_error(&negative, "'-5' is not a byte count");
    assert!(!stderr(&negative).contains("tip"), "{}", stderr(&negative));
    // --diff takes two epochs: a trace given after one is named as what it is not.
    let diff = analyzer(&["flamegraph".as_ref(), "--diff".as_ref(), "3".as_ref(), "trace.bin".as_ref()]);
    assert_one_line_error(&diff, "'trace.bin' is not an epoch");
    assert_one_line_error(
        &analyzer(&["flamegraph".as_ref(), "--epoch".as_ref(), "-2".as_ref()]),
        "'-2' is not an epoch",
    );
    assert_one_line_error(
        &analyzer(&["report".as_ref(), "--fail-on".as_ref(), "heap_leak,leaks".as_ref()]),
        "'leaks' is not a verdict kind",
    );
    // The JSON is report's: the flamegraph's error says so, with no tip to
    // pass --json as a value.
    for args in [["flamegraph", "--json", "trace.bin"], ["flamegraph", "trace.bin", "--json"]] {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        let json = analyzer(&args);
        assert_one_line_error(&json, "analyzer report --json TRACE");
        assert!(!stderr(&json).contains("tip") && json.status.code() == Some(2), "{}", stderr(&json));
    }
    let unknown = analyzer(&["report".as_ref(), "--frobnicate".as_ref()]);
    assert_one_line_error(&unknown, "--frobnicate");
    assert!(!stderr(&unknown).contains("tip: to pass"), "{}", stderr(&unknown));
    let out = analyzer(&["--help".as_ref()]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("report") && stdout(&out).contains("flamegraph"));
}

/// `report --help` names every kind `--fail-on` takes.
#[test]
fn the_fail_on_help_names_every_kind() {
    let out = analyzer(&["report".as_ref(), "--help".as_ref()]);
    let help = stdout(&out).split_whitespace().collect::<Vec<_>>().join(" ");
    for kind in analyzer::analysis::VerdictKind::ALL {
        assert!(
            help.contains(&format!(" {},", kind.name())) || help.contains(&format!(" {};", kind.name())),
            "{}: {help}",
            kind.name()
        );
    }
    assert!(help.contains("too_few_samples"), "{help}");
}

#[test]
fn an_unwritable_flamegraph_path_is_one_line() {
    let sim = all_behaviours(6, true);
    let path = write_temp("trace.bin", &sim.bytes());
    let out = report(&path, &["-o", "/nonexistent/dir/x.svg"]);
    assert_one_line_error(&out, "flamegraph");
}

/// Beside a trace where the flamegraph cannot go (a directory this user
/// cannot write, here a directory in its place), the report is still
/// given, saying so, with one warning line.
#[test]
fn a_flamegraph_that_cannot_go_beside_the_trace_does_not_withhold_the_report() {
    let sim = all_behaviours(6, true);
    let path = write_temp("trace.bin", &sim.bytes());
    std::fs::create_dir(svg_beside(&path)).unwrap();
    let out = report(&path, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Verdict (heap_leak)"), "{text}");
    let line = text.lines().find(|l| l.starts_with("Flamegraph")).unwrap();
    assert!(line.starts_with("Flamegraph: not written: cannot write the flamegraph") && line.contains("-o"), "{line}");
    let warning = stderr(&out);
    assert_eq!(warning.lines().count(), 1, "{warning}");
    assert!(warning.starts_with("analyzer: warning: cannot write the flamegraph"), "{warning}");
    let v = json(&report(&path, &["--json"]));
    assert!(v["flamegraph"].is_null(), "{}", v["flamegraph"]);
}

#[test]
fn a_stack_the_trace_lacks_does_not_break_the_report() {
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..6 {
        sim.alloc_many(1, 100, 1024);
        sim.mark(&format!("{e}"));
    }
    let mut bytes = file_header().to_vec();
    // Keep every record but the StackNodes ones.
    let all = sim.bytes();
    let reader = trace_format::RecordReader::new(&all[..]).unwrap();
    for record in reader {
        if !matches!(record, Record::StackNodes(_)) {
            frame_record(&record, &mut bytes);
        }
    }
    let path = write_temp("nostacks.bin", &bytes);
    let v = json(&report(&path, &["--json"]));
    assert_eq!(v["suspects"][0]["frames"][0]["function"], "(unknown stack 1)");
    assert!(v["lines"][0]["frame"].is_null(), "no own code, a line of its own: {}", v["lines"]);
    let text = stdout(&report(&path, &[]));
    assert!(text.contains("(no frame in the program's own code: see suspect #1)"), "{text}");
}

/// A location table: instructions 0–1 on the first line, 2–5 two lines further.
const TRAIN_STEP_LINES: [u8; 5] = [0x80 | 1, 0x05, 0x80 | (12 << 3) | 3, 0x00, 0x04];

/// A leak made by Python code: Module._call_impl (torch, installed) called
/// by train_step (/job/train.py:42) called by the script's top level.
fn python_trace(allocator: &str) -> TempFile {
    let mut sim = python_sim(allocator);
    sim.stack_frames(
        1,
        vec![
            Frame::Native(0x40_1000),
            Frame::Native(0x40_2000),
            py(0x7f00_3000, 5, false),
            py(0x7f00_1000, 3, false),
            py(0x7f00_2000, 0, true),
        ],
    );
    for e in 0..8 {
        sim.alloc_many(1, 100, 1024);
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    write_temp("python.bin", &sim.bytes())
}

fn py(code: u64, instruction: u32, entry: bool) -> Frame {
    Frame::Python(PyFrame { code, instruction, entry })
}

/// A run of `/job/train.py` with its code objects: `train_step` (line 42
/// at instruction 3), `<module>` (line 70 at instruction 0) and an
/// installed package's `Module._call_impl` (line 1506 at instruction 5).
fn python_sim(allocator: &str) -> Sim {
    let mut sim = Sim::new("/usr/bin/python3.11");
    let process = sim.process_mut();
    process.cmdline = vec!["python3.11".into(), "/job/train.py".into()];
    process.settings = vec![("python".into(), "3.11.7 frames".into()), ("python_allocator".into(), allocator.into())];
    sim.py_code(PyCode {
        id: 0x7f00_1000,
        filename: "/job/train.py".into(),
        qualname: "train_step".into(),
        first_line: 40,
        linetable: TRAIN_STEP_LINES.to_vec(),
    });
    sim.py_code(PyCode {
        id: 0x7f00_2000,
        filename: "/job/train.py".into(),
        qualname: "<module>".into(),
        first_line: 1,
        // Long form, +69 lines: signed varint 138 in 6-bit groups (0x4a 0x02),
        // then end line +0, column 0 + 1, end column 4 + 1.
        linetable: vec![0x80 | (14 << 3), 0x4a, 0x02, 0x00, 0x01, 0x05],
    });
    sim.py_code(PyCode {
        id: 0x7f00_3000,
        filename: "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py".into(),
        qualname: "Module._call_impl".into(),
        first_line: 1500,
        linetable: vec![0x80 | (13 << 3) | 7, 0x0c],
    });
    sim
}

/// `stacks` stacks through `train_step` line 42 keep 2 KiB an epoch alive
/// each, one through `<module>` line 70 keeps 8 KiB, in a 100 MiB heap (a
/// noise floor of about 100 KiB an epoch): each stack is below the floor.
/// A buffer held over one epoch makes the heap fall once: it does not rise
/// at every epoch.
fn small_stacks_under_one_line(stacks: u32) -> TempFile {
    let mut sim = python_sim("malloc (every Python object reaches malloc, traced one by one)");
    for stack in 1..=stacks {
        let native = Frame::Native(0x40_0000 + u64::from(stack) * 0x100);
        sim.stack_frames(stack, vec![native, py(0x7f00_1000, 3, false), py(0x7f00_2000, 0, true)]);
    }
    let (module_line, heap, buffer) = (stacks + 1, stacks + 2, stacks + 3);
    sim.stack_frames(module_line, vec![Frame::Native(0x40_9000), py(0x7f00_2000, 0, true)]);
    sim.stack(heap, vec![0x40_a000]);
    sim.stack(buffer, vec![0x40_b000]);
    let mut held = None;
    for e in 0..10 {
        if e == 0 {
            sim.alloc_many(heap, 100, 1 << 20);
        }
        if let Some(held) = held.take() {
            sim.free(held);
        }
        if e == 4 {
            held = Some(sim.alloc(buffer, 200 * 1024));
        }
        for stack in 1..=stacks {
            sim.alloc_many(stack, 1, 2048);
        }
        sim.alloc_many(module_line, 1, 8192);
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    write_temp(&format!("small_stacks_{stacks}.bin"), &sim.bytes())
}

/// Forty stacks at 2 KiB: line 42 keeps 80 KiB an epoch, below the floor too.
#[test]
fn stacks_below_the_noise_floor_are_summed_by_line() {
    let path = small_stacks_under_one_line(40);

    let text = stdout(&report(&path, &[]));
    let expected = [
        "none above the noise floor; 41 stacks keep 88.0 KiB/epoch alive below it",
        "  below it, all of them summed by their first frame in the program's own code:",
        "    +80.0 KiB/epoch   live now 800 KiB   40 stacks",
        "      > train_step  /job/train.py:42",
        "    +8.00 KiB/epoch   live now 80.0 KiB   1 stack",
        "      > <module>  /job/train.py:70",
        ", 80.0 KiB/epoch of it through train_step (train.py:42) in 40 stacks; run the report with --noise-floor",
        "Flamegraph of the growth below the noise floor: ",
    ];
    for needle in expected {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    let drawing = std::fs::read_to_string(path.with_extension("bin.leaks.svg")).unwrap();
    for needle in ["Growth below the noise floor", "train_step (train.py:42) (81,920 bytes, 90.91%)"] {
        assert!(drawing.contains(needle), "{needle:?} in the flamegraph");
    }
    let v = json(&report(&path, &["--json"]));
    assert_eq!(v["verdict"]["kind"], "no_growth");
    let lines = v["analysis"]["below_noise_floor"]["lines"].as_array().unwrap();
    let summed: Vec<_> =
        lines.iter().map(|l| (&l["frame"]["line"], &l["stacks"], &l["growth_bytes_per_epoch"])).collect();
    assert_eq!(summed, [(&42.into(), &40.into(), &(40 * 2048).into()), (&70.into(), &1.into(), &8192.into())]);

    // A floor of 4 KiB: the 8 KiB stack is a suspect by itself, line 42's
    // stacks with their line (80 KiB an epoch), and none is left below.
    let v = json(&report(&path, &["--json", "--noise-floor", "4k", "--top", "50"]));
    let suspects = v["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 41);
    assert_eq!(suspects.iter().filter(|s| s["below_noise_floor"] == true).count(), 40);
    assert_eq!(v["lines"][0]["frame"]["line"], 42);
    assert_eq!(v["analysis"]["below_noise_floor"]["stacks"], 0);
    assert_eq!(v["analysis"]["below_noise_floor"]["lines"], serde_json::json!([]));
    let text = stdout(&report(&path, &["--noise-floor", "4k"]));
    assert!(text.contains("Flamegraph of leaked bytes: "), "{text}");
}

/// Sixty stacks at 2 KiB: line 42 keeps 120 KiB an epoch, above the floor,
/// and its stacks are suspects; line 70's one stack stays below it.
#[test]
fn a_line_above_the_noise_floor_makes_suspects_of_its_small_stacks() {
    let path = small_stacks_under_one_line(60);
    let v = json(&report(&path, &["--json", "--top", "100"]));
    assert_eq!(v["verdict"]["kind"], "heap_leak");
    let floor = v["analysis"]["noise_floor_bytes_per_epoch"].as_u64().unwrap();
    assert!((80 * 1024..120 * 1024).contains(&floor), "floor {floor}");
    let suspects = v["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 60);
    assert!(suspects.iter().all(|s| s["below_noise_floor"] == true && s["growth_bytes_per_epoch"] == 2048));
    let line = &v["lines"][0];
    assert_eq!((&line["frame"]["line"], &line["growth_bytes_per_epoch"]), (&42.into(), &(60 * 2048).into()));
    assert_eq!(v["lines"].as_array().unwrap().len(), 1);
    let message = v["verdict"]["message"].as_str().unwrap();
    assert!(message.starts_with("train_step (train.py:42) keeps about 120 KiB/epoch alive"), "{message}");
    assert!(message.contains(" through 60 stacks; "), "{message}");
    let below = &v["analysis"]["below_noise_floor"];
    assert_eq!((&below["stacks"], &below["growth_bytes_per_epoch"]), (&1.into(), &8192.into()), "{below}");

    let text = stdout(&report(&path, &[]));
    assert!(text.contains("/epoch, all below it, suspects with their line, which keeps more)"), "{text}");
    // The flamegraph of leaked bytes draws the same suspects.
    let svg = path.with_extension("flame.svg");
    let out = analyzer(&["flamegraph".as_ref(), path.as_os_str(), "-o".as_ref(), svg.as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(drawing.contains("train_step (train.py:42) (122,880 bytes, 100.00%)"), "the line's stacks are drawn");
}

#[test]
fn python_frames_have_file_line_and_own_code_in_json() {
    let path = python_trace("pymalloc (objects ≤512 B not traced one by one)");
    let out = report(&path, &["--json"]);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["process"]["settings"]["python"], "3.11.7 frames");
    let frames = v["suspects"][0]["frames"].as_array().unwrap();
    let names: Vec<&str> = frames.iter().map(|f| f["function"].as_str().unwrap()).collect();
    // The addresses resolve to nothing: native frames kept, Python ones outermost.
    assert_eq!(names, ["0x401000", "0x402000", "Module._call_impl", "train_step", "<module>"]);
    for f in &frames[..2] {
        assert_eq!(f["python"], false, "{f}");
    }
    let call = &frames[2];
    assert_eq!(call["python"], true);
    assert_eq!(call["line"], 1506);
    assert_eq!(call["own_code"], false, "installed packages are not own code");
    let step = &frames[3];
    assert_eq!(
        (&step["python"], &step["file"], &step["line"], &step["own_code"]),
        (
            &serde_json::json!(true),
            &serde_json::json!("/job/train.py"),
            &serde_json::json!(42),
            &serde_json::json!(true)
        ),
        "{step}"
    );
    assert!(step.get("module").is_none(), "{step}");
    assert_eq!(frames[4]["line"], 70);
    assert_eq!(frames.iter().find(|f| f["own_code"] == true).unwrap()["function"], "train_step");
    assert!(
        v["verdict"]["message"].as_str().unwrap().starts_with("train_step (train.py:42) keeps"),
        "{}",
        v["verdict"]
    );
    let drawing = std::fs::read_to_string(v["flamegraph"].as_str().unwrap()).unwrap();
    assert!(drawing.contains("train_step (train.py:42)"), "the flamegraph labels Python frames with file and line");

    let text = stdout(&report(&path, &[]));
    for needle in [
        "python = 3.11.7 frames",
        "python_allocator = pymalloc",
        "> train_step  /job/train.py:42",
        "  Module._call_impl  /venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1506",
        "Note: Python's pymalloc was in force: Python objects of 512 bytes or less are not traced one by one",
        "TRACER_PYTHON_OBJECTS=1",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

/// The note repeats what the tracer said of tracing the objects: how, or
/// what that needs where it could not (and an older trace's advice).
#[test]
fn the_pymalloc_note_says_what_tracing_the_objects_needs() {
    for (setting, advice) in [
        (
            "pymalloc (objects ≤512 B not traced one by one; run with TRACER_PYTHON_OBJECTS=1 to trace them)",
            "charged to whichever line needed a new one; run with TRACER_PYTHON_OBJECTS=1 to trace them\n",
        ),
        (
            "pymalloc (objects ≤512 B not traced one by one; tracing them (TRACER_PYTHON_OBJECTS=1) needs the frames of Python 3.11 to 3.13 read)",
            "; tracing them (TRACER_PYTHON_OBJECTS=1) needs the frames of Python 3.11 to 3.13 read\n",
        ),
        (
            "pymalloc (objects ≤512 B not traced one by one; run with PYTHONMALLOC=malloc to trace them)",
            "; run with PYTHONMALLOC=malloc to trace them\n",
        ),
    ] {
        let text = stdout(&report(&python_trace(setting), &[]));
        let note = text.lines().find(|l| l.starts_with("Note: Python's pymalloc")).unwrap_or_default();
        assert!(format!("{note}\n").ends_with(advice), "{setting}: {note}");
    }
}

/// A Python 3.11 process run with TRACER_PYTHON_FRAMES=0: its stacks are
/// native only, by the setting, and the notes say so and what to do.
#[test]
fn a_python_process_whose_frames_were_turned_off_is_told_why_its_stacks_are_native() {
    let mut sim = python_sim(
        "pymalloc (objects ≤512 B not traced one by one; tracing them (TRACER_PYTHON_OBJECTS=1) needs the frames of Python 3.11 to 3.13 read)",
    );
    sim.process_mut().settings[0].1 = format!("3.11.7{}(TRACER_PYTHON_FRAMES=0)", trace_format::PYTHON_FRAMES_OFF);
    sim.stack(1, vec![0x40_1000, 0x40_2000]);
    for e in 0..8 {
        sim.alloc_many(1, 100, 1024);
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let text = stdout(&report(&write_temp("python.bin", &sim.bytes()), &[]));
    let notes: Vec<&str> = text.lines().filter(|l| l.starts_with("Note: ")).collect();
    assert_eq!(
        notes,
        [
            "Note: Python 3.11.7's frames were turned off (TRACER_PYTHON_FRAMES=0): the stacks are native only, and a line named in the interpreter (obmalloc.c, ceval.c) stands for Python code they do not show; run the job again without TRACER_PYTHON_FRAMES=0 to see its Python lines",
            "Note: Python's pymalloc was in force: Python objects of 512 bytes or less are not traced one by one, only the arenas that hold them (as mapped memory), charged to whichever line needed a new one; tracing them (TRACER_PYTHON_OBJECTS=1) needs the frames read, which TRACER_PYTHON_FRAMES=0 turned off",
        ],
        "{text}"
    );
}

#[test]
fn no_pymalloc_note_when_python_used_malloc() {
    let path = python_trace("malloc (every Python object reaches malloc, traced one by one)");
    let text = stdout(&report(&path, &[]));
    assert!(text.contains("python_allocator = malloc"), "{text}");
    assert!(!text.contains("Note: Python's pymalloc"), "{text}");
    let traced = format!("{} (TRACER_PYTHON_OBJECTS=1)", trace_format::PYMALLOC_OBJECTS_TRACED);
    let text = stdout(&report(&python_trace(&traced), &[]));
    assert!(text.contains("python_allocator = pymalloc, its objects traced"), "{text}");
    assert!(!text.contains("Note: Python's pymalloc"), "objects traced: {text}");
    let text = stdout(&report(&write_temp("t.bin", &all_behaviours(6, true).bytes()), &[]));
    assert!(!text.contains("pymalloc"), "{text}");
    // Under pymalloc, but nothing grew on the heap: nothing to add to.
    let mut sim =
        python_sim("pymalloc (objects ≤512 B not traced one by one; run with TRACER_PYTHON_OBJECTS=1 to trace them)");
    for e in 0..8 {
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let text = stdout(&report(&write_temp("quiet.bin", &sim.bytes()), &[]));
    assert!(text.contains("Verdict (no_growth)") && !text.contains("Note: Python's pymalloc"), "{text}");
}

#[test]
fn an_older_format_version_is_refused() {
    let mut bytes = file_header().to_vec();
    bytes[8..10].copy_from_slice(&(trace_format::OLDEST_READABLE_VERSION - 1).to_le_bytes());
    let path = write_temp("older.bin", &bytes);
    assert_one_line_error(&report(&path, &[]), "older");
}

#[test]
fn conflicting_stack_nodes_are_one_warning() {
    use trace_format::{Frame, StackNode, StackNodes};
    let mut sim = Sim::new("/opt/app/train");
    sim.stack(1, vec![0x40_1000, 0x40_2000]);
    // A second file's node 1 with other contents.
    sim.push(Record::StackNodes(StackNodes { nodes: vec![StackNode { id: 1, parent: 0, frame: Frame::Native(0x9) }] }));
    for e in 0..6 {
        sim.alloc_many(1, 100, 1024);
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    let out = report(&write_temp("conflict.bin", &sim.bytes()), &["--json"]);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("analyzer: warning: ") && err.contains("conflicting"), "{err}");
    let v = json(&out);
    assert_eq!(v["warnings"].as_array().unwrap().len(), 1);
    assert_eq!(v["suspects"][0]["frames"][0]["function"], "0x401000", "the first contents are kept");
}

/// A stack that holds as many native frames as the tracer keeps
/// (`max_frames`) was cut when it was recorded: the report says its outer
/// frames were never recorded, where its frames shown end and in the JSON,
/// whether all of them are shown or not; a stack one frame shorter is whole.
#[test]
fn a_stack_cut_at_the_frame_limit_is_said_to_be_cut() {
    let frames = |count: u64| (0..count).map(|i| 0x40_1000 + 0x10 * i).collect::<Vec<u64>>();
    for (limit, all_shown) in [(128, false), (16, true)] {
        let mut sim = Sim::new("/opt/app/train");
        sim.process_mut().settings.push(("max_frames".into(), limit.to_string()));
        let (cut, whole) = (1, 2);
        sim.stack(cut, frames(limit));
        sim.stack(whole, frames(limit - 1).into_iter().map(|ip| ip + 8).collect());
        for e in 0..6 {
            sim.alloc_many(cut, 100, 1024);
            sim.alloc_many(whole, 100, 2048);
            sim.mark(&format!("{e}"));
        }
        sim.exit();
        let path = write_temp("deep.bin", &sim.bytes());
        let v = json(&report(&path, &["--json"]));
        let flags: Vec<(u64, bool)> = v["suspects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["stack_id"].as_u64().unwrap(), s["cut_at_frame_limit"].as_bool().unwrap()))
            .collect();
        assert_eq!(flags, [(u64::from(whole), false), (u64::from(cut), true)], "limit {limit}");
        let text = stdout(&report(&path, &[]));
        let said = format!("the tracer cut it at its limit of {limit} native frames");
        let cut_lines: Vec<&str> = text.lines().filter(|l| l.contains(&said)).collect();
        assert_eq!(cut_lines.len(), 1, "limit {limit}: {text}");
        assert_eq!(cut_lines[0].contains("more frames not shown"), !all_shown, "{}", cut_lines[0]);
        let whole_block = text.split("\n#1 ").nth(1).unwrap().split("\n#2 ").next().unwrap();
        assert_eq!(whole_block.contains("outer frames not shown"), !all_shown, "{whole_block}");
    }
}

#[test]
fn progress_shows_when_asked_and_changes_nothing_else() {
    let sim = all_behaviours(12, true);
    let path = write_temp("trace.bin", &sim.bytes());
    let quiet = report(&path, &["--json"]);
    assert!(stderr(&quiet).is_empty(), "auto shows nothing when stderr is not a terminal: {}", stderr(&quiet));
    let shown = report(&path, &["--json", "--progress", "always"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let lines = stderr(&shown);
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.first().copied(), Some(format!("analyzer: reading {}", path.display()).as_str()), "{lines:?}");
    assert!(lines.iter().any(|l| l.ends_with(" 100%")), "{lines:?}");
    assert!(lines.last().unwrap().starts_with("analyzer: done in "), "{lines:?}");
    assert_eq!(json(&shown), json(&quiet), "the report is the same");
    let never = analyzer(&["--progress".as_ref(), "never".as_ref(), "report".as_ref(), path.as_os_str()]);
    assert!(stderr(&never).is_empty(), "{}", stderr(&never));
}

/// A cache filled over the first epochs and flat since: the verdict names
/// the site that stopped, with what it holds; a leak that began in the
/// last epochs is named too.
#[test]
fn the_verdict_names_a_site_that_stopped_and_one_that_began_late() {
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..14 {
        if (1..=4).contains(&e) {
            sim.alloc_many(2, 4, 64 << 10);
        }
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    let path = write_temp("stopped_cache.bin", &sim.bytes());
    let v = json(&report(&path, &["--json"]));
    let message = v["verdict"]["message"].as_str().unwrap();
    assert_eq!(v["verdict"]["kind"], "no_growth", "{message}");
    assert!(message.contains("1 site piled up allocations in the earlier epochs"), "{message}");
    assert!(message.ends_with("; it is 0x400200 (1.00 MiB now, born in epochs 1 to 4)"), "{message}");
    // Cut by time slices, the site is named beside its words, before the
    // slices' note.
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..14 {
        if (1..=4).contains(&e) {
            sim.alloc_many(2, 4, 64 << 10);
        }
        sim.snapshot(trace_format::EpochCause::Timer, &format!("{e}s"));
    }
    sim.exit();
    let path = write_temp("stopped_cache_sliced.bin", &sim.bytes());
    let message = json(&report(&path, &["--json"]))["verdict"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("; it is 0x400200 (1.00 MiB now, born in epochs 1 to 4); an epoch here is a time slice"),
        "{message}"
    );

    let mut sim = Sim::new("/opt/app/train");
    for e in 0..12 {
        if e >= 9 {
            sim.alloc_many(3, 100, 1024);
        }
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    let path = write_temp("began_late.bin", &sim.bytes());
    let message = json(&report(&path, &["--json"]))["verdict"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("; 0x400300 began keeping memory at epoch 9"), "{message}");
}

/// A header whose format version is the next one is a newer tracer's; one
/// far past it (a damaged byte) is said to be damaged, not newer.
#[test]
fn a_far_newer_format_version_is_a_damaged_header() {
    for (version, expected) in [
        (FORMAT_VERSION + 1, format!("has trace format version {}, newer than the version", FORMAT_VERSION + 1)),
        (
            25350,
            format!(
                "has a damaged file header (its format version reads 25350, where this analyzer's is {FORMAT_VERSION})"
            ),
        ),
    ] {
        let path = write_temp("trace.bin", &trace_format::file_header_of_version(version));
        let out = report(&path, &[]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let message = stderr(&out);
        assert!(message.contains(&expected) && message.lines().count() == 1, "{message}");
    }
}
