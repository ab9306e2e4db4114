//! The tracer inside awkward processes: forks from threads, children that
//! `_exit` or `exec`, SIGKILL, an unwritable output path, the ranks of a
//! distributed job.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use integration_tests::*;
use trace_format::{EndReason, EpochCause, Record, TraceEnd};

#[test]
fn forking_multithreaded_program_finishes_and_every_process_leaves_a_readable_trace() {
    let program = compile("forking.c");
    let run = run_traced(&program, &[]).succeeded();
    assert_eq!(run.stdout(), "forking: 0 failures\n");

    let files = run.trace_files();
    let mut children = 0;
    let mut ends = Vec::new();
    for file in &files {
        let (records, end) = read_trace(file);
        assert_eq!(end, TraceEnd::EndOfFile, "{} ends badly", file.display());
        let Some(Record::Process(process)) = records.first() else {
            panic!("{} has no process record", file.display())
        };
        if file != &run.trace {
            assert!(file.to_string_lossy().contains(&format!("trace.bin.{}", process.pid)), "{}", file.display());
        }
        if process.forked_from.is_some() {
            children += 1;
            assert!(snapshot_count(&records) >= 1, "{} has no snapshot", file.display());
        }
        if let Some(Record::End(end)) = records.iter().rev().find(|r| matches!(r, Record::End(_))) {
            ends.push(end.reason);
        }
    }
    // Six children: exit, _exit, exec of /bin/true (its image traces itself),
    // failed exec then _exit, exit, _exit.
    assert_eq!(children, 6, "{files:?}");
    assert!(ends.contains(&EndReason::ImmediateExit));
    assert!(ends.contains(&EndReason::Exec), "the child that exec'd /bin/true with execl: {ends:?}");
    assert!(ends.iter().filter(|&&r| r == EndReason::Exit).count() >= 3);
    let parent = report_json(&run.trace);
    assert!(mentions(&suspects(&parent)[0], "parent_leak"), "{parent:#}");
}

/// glibc's list forms of exec call execve inside glibc, past the hook on
/// execve: each is interposed too. The image replaced leaves a complete
/// trace (its last snapshot and an exec end), and the new image gets the
/// arguments and environment it was given.
#[test]
fn exec_through_a_list_form_completes_the_trace_and_passes_everything_on() {
    let program = compile("exec_list.c");
    for (form, printed) in [
        ("l", "new image: a b c d e f g EXTRA=-\n"),
        ("lp", "new image: p EXTRA=-\n"),
        ("le", "new image: 1 2 3 4 5 6 EXTRA=yes\n"),
    ] {
        let run = run_traced_with(&program, &[form], &[FULL_CAPTURE]).succeeded();
        assert_eq!(run.stdout(), printed, "{form}");
        let (records, end) = read_trace(&run.trace);
        assert_eq!(end, TraceEnd::EndOfFile, "{form}");
        assert!(matches!(records.last(), Some(Record::End(e)) if e.reason == EndReason::Exec), "{form}: {records:?}");
        let report = report_json(&run.trace);
        let kept = report["epochs"][0]["live_bytes"].as_u64().unwrap();
        assert!(kept >= 100 * 5000, "{form}: what the image kept until exec: {report:#}");
    }
}

/// An exec that fails (the program is missing) leaves the snapshot the
/// tracer wrote before it in the trace, marked as an exec's, and the
/// process goes on in the same epoch: the report has the epochs the
/// program marked, and the exit's, no more.
#[test]
fn a_failed_exec_costs_no_epoch() {
    let program = compile("failed_exec.c");
    let run = run_traced(&program, &[]).succeeded();
    assert_eq!(run.stdout(), "exec failed, going on\n");
    let (records, end) = read_trace(&run.trace);
    assert_eq!(end, TraceEnd::EndOfFile);
    let epochs: Vec<(u32, EpochCause)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Snapshot(s) => Some((s.epoch, s.cause)),
            _ => None,
        })
        .collect();
    let exec_at = epochs.iter().position(|&(_, cause)| cause == EpochCause::Exec).expect("the exec's snapshot");
    assert_eq!(epochs[exec_at + 1], (epochs[exec_at].0, EpochCause::Mark), "the epoch went on: {epochs:?}");
    let report = report_json(&run.trace);
    let causes: Vec<&str> = report["epochs"].as_array().unwrap().iter().map(|e| e["cause"].as_str().unwrap()).collect();
    assert_eq!(causes, ["mark", "mark", "mark", "mark", "mark", "mark", "exit"], "{report:#}");
    let notes = report["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n["text"] == "exec failed; the process went on"), "{notes:?}");
    assert_eq!(report["trace_end"], "complete", "{report:#}");
    assert!(mentions(&suspects(&report)[0], "keep_blocks"), "{report:#}");
}

/// Runs `command` (see [`traced_command`]) for a minute at most; its
/// output once it exited successfully, with its stdout and stderr.
fn succeeding_within_a_minute(command: Command, dir: &Path) -> (String, String) {
    let output = output_within(command, dir, std::time::Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    (String::from_utf8_lossy(&output.stdout).into_owned(), stderr)
}

/// `fork` from a signal handler, wherever it interrupts the thread: in
/// malloc (a single-threaded heap half updated, no lock held) or in the
/// tracer's own work (its gate waiting for the thread that forks). The
/// program ends, and every child exits as it would untraced.
#[test]
fn fork_from_a_signal_handler_never_hangs_nor_breaks_the_child() {
    let program = compile("forks_in_handler.c");
    for capture in ["0", "64k"] {
        let (mut command, dir) = traced_command(&program);
        command.env("TRACER_WARMUP_SAMPLE_BYTES", capture);
        let (stdout, stderr) = succeeding_within_a_minute(command, dir.path());
        assert_eq!(stdout, "forks_in_handler: 0 children failed\n", "{capture}");
        assert!(stderr.is_empty(), "{capture}: {stderr}");
    }
}

/// A child forked while another thread loads or unloads a library, or
/// walks the loaded objects, may inherit the loader's lock on its list of
/// objects, held for ever (glibc does not reset it): such a child lists
/// its objects from its mappings instead, exits as it would untraced, and
/// its allocations are named.
#[test]
fn children_forked_while_a_library_loads_never_hang_and_name_their_code() {
    check_children_forked_beside(&[]);
}

#[test]
fn children_forked_while_the_objects_are_walked_never_hang_and_name_their_code() {
    check_children_forked_beside(&["iterate"]);
}

fn check_children_forked_beside(mode: &[&str]) {
    let program = compile("forks_while_loading.c");
    let library = compile_library("first_plugin.c");
    let (mut command, dir) = traced_command(&program);
    command.arg(&library).args(mode).env(FULL_CAPTURE.0, FULL_CAPTURE.1);
    let (stdout, stderr) = succeeding_within_a_minute(command, dir.path());
    assert_eq!(stdout, "forks_while_loading: 0 hung\n", "{stderr}");
    let children: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|pid| pid.to_string_lossy().parse::<u32>().is_ok()))
        .collect();
    assert_eq!(children.len(), 60, "{children:?}");
    for trace in children {
        let svg = std::path::PathBuf::from(format!("{}.live.svg", trace.display()));
        let output = Command::new(analyzer())
            .args(["flamegraph", "--weigh", "live"])
            .arg(&trace)
            .arg("-o")
            .arg(&svg)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}: {}", trace.display(), String::from_utf8_lossy(&output.stderr));
        let drawing = std::fs::read_to_string(&svg).unwrap();
        assert!(drawing.contains("child_keeps"), "{}: the child's allocations are not named", trace.display());
    }
}

/// `mmap` and `munmap` are async-signal-safe: a signal handler that maps
/// memory while its thread is inside malloc (its heap half updated, or its
/// arena's lock held) runs as it would untraced, the tracer recording
/// nothing there, with one thread or several, recorded or sampled, with
/// time slices due at any moment.
#[test]
fn a_signal_handler_mapping_memory_inside_malloc_runs_as_untraced() {
    let program = compile("maps_in_handler.c");
    for (args, env) in [
        (&[][..], &[][..]),
        (&["threads"][..], &[FULL_CAPTURE, ("TRACER_EPOCH_SECONDS", "0.01")][..]),
        (&["threads"][..], &[("TRACER_SAMPLE_BYTES", "512k")][..]),
    ] {
        let (mut command, dir) = traced_command(&program);
        command.args(args).envs(env.iter().copied());
        let (stdout, stderr) = succeeding_within_a_minute(command, dir.path());
        assert_eq!(stdout, "maps_in_handler: mapped in the handler\n", "{args:?} {env:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?} {env:?}: {stderr}");
    }
}

/// A thread whose cancellation is pending allocates and marks epochs: the
/// tracer's writes are no cancellation points, so the thread is cancelled
/// at its own, as it is untraced (a cancellation acted on inside the
/// tracer unwound through its frames, and glibc aborted the process).
#[test]
fn a_cancelled_thread_is_cancelled_at_its_own_cancellation_point() {
    let program = compile("cancelled_thread.c");
    let (command, dir) = traced_command(&program);
    let (stdout, _) = succeeding_within_a_minute(command, dir.path());
    assert_eq!(stdout, "cancelled_thread: 1000 steps, cancelled\n");
    let (records, end) = read_trace(&dir.path().join("trace.bin"));
    assert_eq!(end, TraceEnd::EndOfFile);
    assert_eq!(records.iter().filter(|r| matches!(r, Record::Snapshot(_))).count(), 11, "10 marks and the exit");
}

/// A trace that would pass the process's file-size limit stops where it
/// is, with one line on stderr; the kernel would have ended the program
/// with SIGXFSZ. The trace up to there is read.
#[test]
fn a_file_size_limit_stops_the_trace_not_the_program() {
    let program = compile("file_size_limit.c");
    let (command, dir) = traced_command(&program);
    let (stdout, stderr) = succeeding_within_a_minute(command, dir.path());
    assert_eq!(stdout, "file_size_limit: done\n");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("file-size limit of 8192 bytes (ulimit -f); recording stopped"), "{stderr}");
    let trace = dir.path().join("trace.bin");
    assert!(std::fs::metadata(&trace).unwrap().len() <= 8 << 10);
    let (records, _) = read_trace(&trace);
    assert!(records.iter().any(|r| matches!(r, Record::Snapshot(_))), "the snapshots before the limit are there");
}

/// A program started under a file-size limit of 0 cannot have its trace
/// begun: it runs untraced, the tracer says so once, and no empty file is
/// left for the analyzer to take for a process that died at start-up.
#[test]
fn a_trace_that_cannot_be_begun_leaves_no_empty_file() {
    let program = compile("file_size_limit.c");
    let (mut command, dir) = traced_command(&program);
    let output = command.arg("/bin/echo").arg("echoed").output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "echoed\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("file-size limit of 0 bytes (ulimit -f); not tracing (lift the file-size limit)"),
        "{stderr}"
    );
    let empty: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| std::fs::metadata(path).is_ok_and(|m| m.len() == 0))
        .collect();
    assert!(empty.is_empty(), "{empty:?}; {stderr}");
}

/// malloc, realloc and free on a coroutine's 8 KiB stack and in a signal
/// handler on an 8 KiB alternate stack, epochs marked from the coroutine:
/// the hooks' work fits beside the program's (and the kernel's signal
/// frame), so the program runs as it does untraced, every time, and each
/// mark closes its epoch.
#[test]
fn allocating_on_small_stacks_runs_as_untraced() {
    let program = compile("small_stacks.c");
    for mode in ["coroutine", "altstack"] {
        let untraced = std::process::Command::new(&program).arg(mode).output().unwrap();
        assert!(untraced.status.success(), "{mode} untraced: {untraced:?}");
        for settings in [&[][..], &[FULL_CAPTURE][..]] {
            for _ in 0..5 {
                let run = run_traced_with(&program, &[mode], settings);
                assert_eq!(
                    (run.output.status.code(), run.stdout()),
                    (untraced.status.code(), String::from_utf8_lossy(&untraced.stdout).into_owned()),
                    "{mode} {settings:?}: {}",
                    run.stderr()
                );
                let (records, _) = read_trace(&run.trace);
                let marks = records
                    .iter()
                    .filter(|record| matches!(record, Record::Snapshot(s) if s.cause == EpochCause::Mark))
                    .count();
                assert_eq!(marks, 4, "{mode} {settings:?}");
            }
        }
    }
}

/// With every descriptor taken, the tracer's reads of /proc fail at each
/// snapshot (and for the kind of a mapping it did not record, and a new
/// thread's stack): the program's successful calls still leave errno as
/// they found it, and the trace says once that it could not read the RSS.
#[test]
fn the_tracers_failed_system_calls_leave_the_programs_errno() {
    let program = compile("errno_kept.c");
    let untraced = std::process::Command::new(&program).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&untraced.stdout), "errno kept\n", "{untraced:?}");
    for settings in [&[][..], &[FULL_CAPTURE][..]] {
        let run = run_traced_with(&program, &[], settings);
        assert_eq!(
            (run.output.status.code(), run.stdout()),
            (Some(0), "errno kept\n".to_string()),
            "{settings:?}: {}",
            run.stderr()
        );
        // The RSS it could not read is said once, not left as a fall to 0.
        let (records, _) = read_trace(&run.trace);
        let unread =
            |record: &&Record| matches!(record, Record::Notice(n) if n.text.starts_with("the RSS could not be read"));
        assert_eq!(records.iter().filter(unread).count(), 1, "{settings:?}");
    }
}

/// `_exit` from a signal handler that interrupted malloc on the same thread
/// (an arena's lock held): the exit snapshot takes nothing from malloc, so
/// the program exits as it would untraced, and its trace is complete
/// unless the signal landed inside the tracer itself (then the trace ends
/// at its last snapshot, as a killed process's does).
#[test]
fn exit_from_a_signal_handler_that_interrupted_malloc_never_hangs() {
    let program = compile("signal_exit.c");
    let mut complete = 0;
    for _ in 0..20 {
        let (mut command, dir) = traced_command(&program);
        // Nothing sampled: the signal lands in malloc or free (the case
        // tested), seldom in the tracer, whose own work it would interrupt
        // (the trace then ends at its last snapshot, by design).
        command.env("TRACER_SAMPLE_BYTES", "1024g");
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("the traced program hung in its exit");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(7));
        let (records, _) = read_trace(&dir.path().join("trace.bin"));
        let end = records.iter().rev().find_map(|r| match r {
            Record::End(end) => Some(end.reason),
            _ => None,
        });
        if end == Some(EndReason::ImmediateExit) {
            assert!(snapshot_count(&records) >= 1);
            complete += 1;
        }
    }
    assert!(complete >= 10, "only {complete} of 20 traces complete");
}

#[test]
fn sigkilled_run_still_reports_up_to_its_last_snapshot() {
    let program = compile("killed.c");
    let (mut command, dir) = traced_command(&program);
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..8 {
        lines.next().unwrap().unwrap();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let trace = dir.path().join("trace.bin");
    let (records, _) = read_trace(&trace);
    assert!(snapshot_count(&records) >= 8);
    assert!(!records.iter().any(|r| matches!(r, Record::End(_))), "a killed process cannot have ended its trace");
    let report = report_json(&trace);
    assert!(mentions(&suspects(&report)[0], "leak_until_killed"), "{report:#}");
    assert_ne!(report["trace_end"], "complete");
}

/// A process that ends by sending itself a fatal signal (CPython does so
/// after an unhandled KeyboardInterrupt) completes its trace first.
#[test]
fn a_process_that_signals_itself_to_death_completes_its_trace() {
    use std::os::unix::process::ExitStatusExt;
    let program = compile("kills_itself.c");
    for how in ["kill", "raise"] {
        let run = run_traced(&program, &[how]);
        assert_eq!(run.output.status.signal(), Some(15), "{how}, SIGTERM: {:?}", run.output.status);
        assert_eq!(run.stdout(), "kills_itself: 300 blocks kept\n");
        let (records, end) = read_trace(&run.trace);
        assert_eq!(end, TraceEnd::EndOfFile);
        assert!(matches!(records.last(), Some(Record::End(_))), "{how}: the trace has its end record");
        let report = report_json(&run.trace);
        assert_eq!(report["trace_end"], "complete", "{how}");
        assert!(mentions(&suspects(&report)[0], "leak_before_the_signal"), "{report:#}");
    }

    let python = python_interpreter("3.12");
    let script = python_script("interrupted.py");
    let run = run_traced(&python, &[script.to_str().unwrap()]);
    assert_eq!(run.output.status.signal(), Some(2), "Python dies of SIGINT: {:?}", run.output.status);
    assert_eq!(run.stdout(), "interrupted: 384 blocks kept\n");
    let report = report_json(&run.trace);
    assert_eq!(report["trace_end"], "complete", "{:#}", report["warnings"]);
    let line = &report["lines"][0];
    let leak_line = line_of("python/interrupted.py", "the leaking line");
    assert_eq!((&line["frame"]["function"], &line["frame"]["line"]), (&"keep_blocks".into(), &leak_line.into()));
}

#[test]
fn a_program_started_beside_a_traced_one_writes_a_trace_of_its_own() {
    let (mut holder_command, dir) = traced_command(&compile("killed.c"));
    let mut holder = holder_command.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    for _ in 0..30 {
        lines.next().unwrap().unwrap();
    }
    // The same settings, as a shell that exported them gives each program of a pipeline.
    let trace = dir.path().join("trace.bin");
    let beside_run = |program: &std::path::Path| {
        let (mut command, _elsewhere) = traced_command(program);
        command.current_dir(dir.path()).env("TRACER_OUTPUT", &trace);
        let child = command.arg("6").stderr(Stdio::piped()).spawn().unwrap();
        (child.id(), child.wait_with_output().unwrap())
    };
    let leaky = compile("leaky.c");
    let (pid, beside) = beside_run(&leaky);
    assert!(beside.status.success());
    let own = dir.path().join(format!("trace.bin.{pid}"));
    assert_eq!(
        String::from_utf8_lossy(&beside.stderr),
        format!(
            "tracer: {} is the trace of another traced process started beside this one; this one (pid {pid}) writes {}\n",
            trace.display(),
            own.display()
        )
    );
    let report = report_json(&own);
    assert_eq!(report["trace_end"], "complete", "{report:#}");
    assert!(mentions(&suspects(&report)[0], "leak_per_epoch"), "{report:#}");

    holder.kill().unwrap();
    holder.wait().unwrap();
    let (_, end) = read_trace(&trace);
    assert!(matches!(end, TraceEnd::EndOfFile | TraceEnd::Truncated { .. }), "the holder's trace is intact: {end:?}");
    let report = report_json(&trace);
    assert!(mentions(&suspects(&report)[0], "leak_until_killed"), "{report:#}");
    let listed = &report["descendant_traces"][0];
    assert_eq!((listed["pid"].as_u64(), listed["started_beside"].as_bool()), (Some(u64::from(pid)), Some(true)));
    assert!(report_text(&trace).contains(&format!("(pid {pid}, started beside it: ")));

    // Nobody holds the named file any longer: the next run empties it and writes it.
    let (_, rerun) = beside_run(&leaky);
    assert!(rerun.status.success() && rerun.stderr.is_empty(), "{}", String::from_utf8_lossy(&rerun.stderr));
    let report = report_json(&trace);
    assert_eq!(report["trace_end"], "complete", "{report:#}");
    assert!(mentions(&suspects(&report)[0], "leak_per_epoch"), "{report:#}");
}

/// `first | second` where `first` ends before `second`'s tracer starts:
/// `second` started first, so the trace it finds was written beside it,
/// not by an earlier run, and it writes its own beside that one.
#[test]
fn a_program_started_first_keeps_the_trace_of_one_started_beside_it_that_ended_first() {
    let leaky = compile("leaky.c");
    // Started now, traced from its exec a second on, reading `first`'s output.
    let (mut later, dir) = traced_command(Path::new("sh"));
    let mut late = later
        .env_remove("LD_PRELOAD")
        .env("PRELOAD_LATER", tracer_lib())
        .args(["-c", "sleep 1; LD_PRELOAD=$PRELOAD_LATER exec \"$0\" 6"])
        .arg(&leaky)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let trace = dir.path().join("trace.bin");
    let (mut first, _elsewhere) = traced_command(&leaky);
    let into_late = Stdio::from(late.stdin.take().unwrap());
    let first = first.env("TRACER_OUTPUT", &trace).arg("6").stdout(into_late).spawn().unwrap();
    let first_pid = first.id();
    assert!(first.wait_with_output().unwrap().status.success());
    let late_pid = late.id();
    let late = late.wait_with_output().unwrap();
    assert!(late.status.success(), "{}", String::from_utf8_lossy(&late.stderr));
    assert_eq!(process_record(&trace).pid, first_pid, "the trace of the program that ended first is kept");
    let own = dir.path().join(format!("trace.bin.{late_pid}"));
    assert_eq!(
        String::from_utf8_lossy(&late.stderr),
        format!(
            "tracer: {} is the trace of another traced process started beside this one; this one (pid {late_pid}) writes {}\n",
            trace.display(),
            own.display()
        )
    );
    let report = report_json(&own);
    assert_eq!(report["trace_end"], "complete", "{report:#}");
    assert!(mentions(&suspects(&report)[0], "leak_per_epoch"), "{report:#}");
    let listed = &report_json(&trace)["descendant_traces"][0];
    assert_eq!((listed["pid"].as_u64(), listed["started_beside"].as_bool()), (Some(u64::from(late_pid)), Some(true)));
}

/// `export LD_PRELOAD=...; mkdir -p out; exec python train.py` in a shell:
/// the command run just before the program began its trace after the
/// program's process started (the shell that execs the program), but they
/// were never side by side in a pipe: the program writes the named trace,
/// as every later run does, without a word on stderr.
#[test]
fn a_command_run_just_before_the_program_leaves_it_the_named_trace() {
    let leaky = compile("leaky.c");
    let (mut shell, dir) = traced_command(Path::new("sh"));
    let output = shell
        .env_remove("LD_PRELOAD")
        .env("PRELOAD_LATER", tracer_lib())
        .args(["-c", "export LD_PRELOAD=$PRELOAD_LATER; \"$0\" 0 >/dev/null; exec \"$0\" 6"])
        .arg(&leaky)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "", "no trace written beside another");
    let trace = dir.path().join("trace.bin");
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files, ["trace.bin"], "the command's trace was an earlier run's");
    let report = report_json(&trace);
    assert!(mentions(&suspects(&report)[0], "leak_per_epoch"), "{report:#}");
}

#[test]
fn the_report_of_a_pipelines_other_end_points_at_the_programs_trace() {
    // `leaky | cat` from a shell that exported the settings: cat holds trace.bin.
    let (mut cat_command, dir) = traced_command(std::path::Path::new("cat"));
    let mut cat = cat_command.stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    let trace = dir.path().join("trace.bin");
    while std::fs::metadata(&trace).map_or(true, |m| m.len() == 0) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (mut command, _elsewhere) = traced_command(&compile("leaky.c"));
    let program = command.env("TRACER_OUTPUT", &trace).arg("6").stderr(Stdio::null()).spawn().unwrap();
    let own = dir.path().join(format!("trace.bin.{}", program.id()));
    assert!(program.wait_with_output().unwrap().status.success());
    drop(cat.stdin.take());
    assert!(cat.wait().unwrap().success());
    let text = report_text(&trace);
    assert!(text.contains("Verdict (too_few_epochs)"), "{text}");
    let note = format!(
        "Note: another traced process started beside this one (the other end of a pipeline?) wrote its own trace: analyzer report {}",
        own.display()
    );
    assert!(text.contains(&note), "{text}");
}

#[test]
fn an_allocator_preloaded_after_the_tracer_keeps_every_block_and_is_traced() {
    let program = compile("other_allocator.c");
    for (allocator, name) in [(jemalloc(), "jemalloc"), (tcmalloc(), "tcmalloc")] {
        let preload = preload_after_tracer(Some(&allocator));
        let run = run_traced_with(&program, &["8"], &[("LD_PRELOAD", &preload)]).succeeded();
        assert_eq!(run.stderr(), "", "{name}: a known allocator, no warning");
        let report = report_json(&run.trace);
        assert!(mentions(&suspects(&report)[0], "leak_through_every_entry"), "{report:#}");
        let settings = &report["process"]["settings"];
        assert_eq!(settings["allocator"], format!("{name} ({})", allocator.display()), "{settings:#}");
        assert!(settings["warnings"].is_null(), "{settings:#}");
    }
}

/// An allocator whose statistics the tracer cannot read: its blocks are
/// recorded, and the freed memory it keeps is not told apart.
#[test]
fn an_unknown_allocator_after_the_tracer_is_traced_with_a_warning() {
    let program = compile("other_allocator.c");
    let allocator = compile_library("plain_allocator.c");
    let preload = preload_after_tracer(Some(&allocator));
    let run = run_traced_with(&program, &["8"], &[("LD_PRELOAD", &preload)]).succeeded();
    let expected = format!(
        "tracer: the program's allocator is {}'s, preloaded after libtracer.so: its blocks are recorded \
         (C++ new and delete too), but `malloc free` counts glibc's arenas only (what it keeps shows as \
         growth outside the heap)\n",
        allocator.display()
    );
    assert_eq!(run.stderr(), expected);
    let report = report_json(&run.trace);
    assert!(mentions(&suspects(&report)[0], "leak_through_every_entry"), "{report:#}");
    assert_eq!(report["process"]["settings"]["allocator"], allocator.display().to_string(), "{report:#}");
}

/// Under glibc this program's growth is glibc's retention; jemalloc and
/// tcmalloc keep it in memory of their own, which the mapping hooks must
/// not take for the program's mappings, and which their own statistics
/// count.
#[test]
fn memory_another_allocator_keeps_is_that_allocators_retention() {
    let program = compile("fragmented.c");
    for (allocator, name) in [(jemalloc(), "jemalloc"), (tcmalloc(), "tcmalloc")] {
        let preload = preload_after_tracer(Some(&allocator));
        let run = run_traced_with(&program, &[], &[("LD_PRELOAD", &preload)]).succeeded();
        let report = report_json(&run.trace);
        assert!(suspects(&report).is_empty(), "{name}: a heap or mapping site was blamed: {report:#}");
        assert_eq!(report["verdict"]["kind"], "allocator_retention", "{name}: {report:#}");
        let message = report["verdict"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("and {name} held")), "{message}");
        let epochs = report["epochs"].as_array().unwrap();
        assert!(epochs.iter().all(|e| e["mapped_bytes"].as_u64() == Some(0)), "{name}: {epochs:#?}");
    }
}

#[test]
fn an_allocator_loaded_before_the_tracer_is_named_with_what_to_do() {
    let program = compile("other_allocator.c");
    let preload = format!("{} {}", jemalloc().display(), tracer_lib().display());
    let run = run_traced_with(&program, &["8"], &[("LD_PRELOAD", &preload)]).succeeded();
    let expected = format!(
        "tracer: malloc is {}'s, loaded before libtracer.so: the program's heap does not reach the tracer \
         (its mappings do); list libtracer.so first in LD_PRELOAD\n",
        jemalloc().display()
    );
    assert_eq!(run.stderr(), expected);
    // The report does not take a heap it never saw for one that does not grow.
    let report = report_json(&run.trace);
    assert_eq!(report["verdict"]["kind"], "heap_not_traced", "{:#}", report["verdict"]);
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(message.contains("list libtracer.so first in LD_PRELOAD"), "{message}");
}

#[test]
fn a_program_closing_every_descriptor_keeps_its_files_and_its_trace() {
    let program = compile("closes_descriptors.c");
    let (mut command, dir) = traced_command(&program);
    let output = command.arg(dir.path().join("own.txt")).output().unwrap();
    // Its own file holds exactly what it wrote (the program checks), though
    // it was handed the descriptor number the tracer had.
    assert!(output.status.success(), "{output:?}");
    assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
    let report = report_json(&dir.path().join("trace.bin"));
    assert_eq!(report["trace_end"], "complete", "{report:#}");
    assert_eq!(report["epochs"].as_array().unwrap().len(), 9, "eight marks and the exit: {report:#}");
    assert!(mentions(&suspects(&report)[0], "leak_per_epoch"), "{report:#}");
}

/// The same program deleting the trace file before it closes every
/// descriptor: its own file, which the file system may give the deleted
/// trace's inode, holds exactly what it wrote, and the tracer says once
/// that it stopped.
#[test]
fn a_program_deleting_its_trace_and_closing_every_descriptor_keeps_its_files() {
    let program = compile("closes_descriptors.c");
    let (mut command, dir) = traced_command(&program);
    let trace = dir.path().join("trace.bin");
    let output = command.arg(dir.path().join("own.txt")).arg(&trace).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    // Whether the file system gave the program's file the trace's inode
    // says which of two reasons the line gives.
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = stderr
        .strip_prefix(&format!("tracer: cannot write the trace file {}: ", trace.display()))
        .and_then(|rest| rest.strip_suffix("; recording stopped, the program continues\n"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let reasons = [
        "the program closed its descriptor (3) and the file is gone (No such file or directory (os error 2))",
        "it no longer holds what the tracer wrote (another writer wrote into it, or the program deleted it and a file of its own took its place)",
    ];
    assert!(reasons.contains(&said), "{stderr}");
    assert!(!trace.exists());
}

/// A daemon that closes its standard streams and opens data files at
/// descriptors 0 to 2: the line the tracer has to say when it stops (the
/// program deleted its trace) does not go into the file at descriptor 2.
#[test]
fn the_tracers_word_stays_out_of_a_data_file_at_descriptor_2() {
    let program = compile("reopens_standard_streams.c");
    let (mut command, dir) = traced_command(&program);
    let data = tempfile::tempdir().unwrap();
    let output = command.arg(dir.path().join("trace.bin")).arg(data.path()).output().unwrap();
    assert!(output.status.success(), "{output:?}");
}

/// A trace file deleted while the program runs is lost: the tracer stops
/// recording at its next write and says why, and the program goes on.
#[test]
fn a_deleted_trace_stops_the_recording_with_a_word_why() {
    let program = compile("deletes_its_trace.c");
    let (mut command, dir) = traced_command(&program);
    let trace = dir.path().join("trace.bin");
    let output = command.arg(&trace).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let epochs: String = (0..8).map(|e| format!("epoch {e}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&output.stdout), epochs);
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        format!(
            "tracer: cannot write the trace file {}: it was deleted while the program ran; \
             recording stopped, the program continues\n",
            trace.display()
        )
    );
}

/// Seccomp's strict mode leaves a thread no system call but read, write
/// and exit, and no clock: the tracer stops before the program enters it,
/// says so once, and the program runs on as it does untraced; the trace
/// holds its epochs until then, and says where it stops. (Time slices kept
/// after the marks have the tracer read the clock.)
#[test]
fn a_program_entering_strict_mode_runs_on_untraced() {
    let program = compile("strict_mode.c");
    let (mut command, dir) = traced_command(&program);
    let output = command.env("TRACER_EPOCH_SECONDS", "60").output().unwrap();
    assert_eq!(output.status.code(), Some(7), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "in strict mode\n");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "tracer: the program enters seccomp's strict mode, in which the tracer cannot run; \
         recording stopped, the program continues\n"
    );
    let report = report_json(&dir.path().join("trace.bin"));
    let causes: Vec<&str> = report["epochs"].as_array().unwrap().iter().filter_map(|e| e["cause"].as_str()).collect();
    assert_eq!(causes, ["mark", "mark"], "{report:#}");
    let notes = report["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n["text"]
            .as_str()
            .is_some_and(|t| t.ends_with("strict mode, in which the tracer cannot run: recording stopped here"))),
        "{notes:?}"
    );
}

#[test]
fn a_program_with_a_malloc_of_its_own_runs_unchanged_and_is_told_so() {
    let run = run_traced(&compile("own_malloc.c"), &[]).succeeded();
    assert_eq!(run.stdout(), "its own heap\n");
    let expected = "tracer: the program defines malloc itself: its heap does not reach the tracer (its mappings do)\n";
    assert_eq!(run.stderr(), expected);
}

/// The library works only preloaded (its per-thread state is in the static
/// TLS block set up at start): a program that loads it with dlopen is
/// refused it, with the loader's word why, and goes on untraced.
#[test]
fn a_program_that_dlopens_the_library_is_refused_it_and_goes_on() {
    let program = compile("dlopens_tracer.c");
    let (mut command, dir) = traced_command(&program);
    let output = command.env_remove("LD_PRELOAD").arg(tracer_lib()).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("refused: "), "{stdout}");
    assert!(stdout.contains("static TLS block"), "{stdout}");
    assert!(stdout.ends_with("went on\n"), "{stdout}");
    assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(!dir.path().join("trace.bin").exists());
}

/// A program that only takes malloc's address is not one that defines it:
/// its heap reaches the tracer, and nothing is said; with an allocator
/// preloaded before the tracer, that allocator is named.
#[test]
fn a_program_taking_mallocs_address_is_traced_and_its_allocator_found() {
    let program = compile_without_pie("malloc_address.c");
    let run = run_traced(&program, &[]).succeeded();
    assert_eq!(run.stdout(), "malloc_address: 512 blocks kept\n");
    assert_eq!(run.stderr(), "", "a false warning");
    let report = report_json(&run.trace);
    assert_eq!(report["verdict"]["kind"], "heap_leak", "{report:#}");
    assert!(mentions(&suspects(&report)[0], "keep_blocks"), "{report:#}");

    let preload = format!("{} {}", jemalloc().display(), tracer_lib().display());
    let run = run_traced_with(&program, &[], &[("LD_PRELOAD", &preload)]).succeeded();
    let expected = format!("tracer: malloc is {}'s, loaded before libtracer.so", jemalloc().display());
    assert!(run.stderr().starts_with(&expected), "{}", run.stderr());
}

/// A relative LD_PRELOAD (`LD_PRELOAD=target/release/libtracer.so`) still
/// reaches a descendant that runs in another directory: the tracer makes
/// its entry absolute, so the loader neither complains nor skips it.
#[test]
fn a_relative_preload_reaches_descendants_run_in_another_directory() {
    let library = tracer_lib();
    let target = library.parent().and_then(Path::parent).expect("target/release/libtracer.so");
    let relative = library.strip_prefix(target).unwrap();
    let (mut command, dir) = traced_command(Path::new("/bin/sh"));
    command.current_dir(target).env("LD_PRELOAD", relative).args(["-c", "cd / && exec /bin/sh -c 'echo $LD_PRELOAD'"]);
    let output = command.output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "", "the loader could not preload the tracer");
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("{}\n", target.join(relative).display()));
    let traces = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(traces, 2, "the shell's trace and the one its exec'd image wrote");
}

/// Past TRACER_EXEC_TRACES traces in the run, exec'd programs run untraced,
/// and the report on the run's first trace says the limit was reached.
#[test]
fn programs_a_run_execs_past_its_limit_write_no_trace() {
    let script = "for i in 1 2 3 4 5 6 7 8; do /bin/true; done";
    let run = run_traced_with(Path::new("/bin/sh"), &["-c", script], &[("TRACER_EXEC_TRACES", "3")]).succeeded();
    assert_eq!(run.trace_files().len(), 4, "the shell's and three of its programs': {:?}", run.trace_files());
    let text = report_text(&run.trace);
    assert!(text.contains("exec_trace_limit = 3"), "{text}");
    assert!(text.contains("(the run's 3 traces are its limit: programs it exec'd after that wrote none;"), "{text}");

    let run = run_traced_with(Path::new("/bin/sh"), &["-c", script], &[]).succeeded();
    assert_eq!(run.trace_files().len(), 9, "by default every one: {:?}", run.trace_files());
    assert!(!report_text(&run.trace).contains("are its limit"));
}

/// `TRACER_OUTPUT` naming a directory puts `trace.bin` in it.
#[test]
fn an_output_directory_gets_trace_bin_in_it() {
    let (mut command, dir) = traced_command(&compile("leaky.c"));
    let output = command.env("TRACER_OUTPUT", dir.path()).arg("4").output().unwrap();
    assert!(output.status.success() && output.stderr.is_empty(), "{output:?}");
    let report = report_json(&dir.path().join("trace.bin"));
    assert_eq!(report["trace_end"], "complete", "{report:#}");
}

#[test]
fn unwritable_output_leaves_the_program_unchanged_and_says_why_once() {
    let program = compile("leaky.c");
    let untraced = std::process::Command::new(&program).arg("4").output().unwrap();
    let (mut command, _dir) = traced_command(&program);
    let output = command.env("TRACER_OUTPUT", "/nonexistent/dir/trace.bin").arg("4").output().unwrap();
    assert_eq!(output.status.code(), untraced.status.code());
    assert_eq!(output.stdout, untraced.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("tracer: cannot create the trace file /nonexistent/dir/trace.bin"), "{stderr}");
}

/// An output named by mistake after a file that is not a trace (the
/// script itself) is left as it is: the trace goes to `<name>.<pid>`, the
/// program runs as it would untraced, and stderr says where, once. An
/// earlier run's trace, even a torn one, is still written over.
#[test]
fn an_output_naming_a_file_that_is_no_trace_leaves_it_as_it_is() {
    let program = compile("leaky.c");
    let untraced = std::process::Command::new(&program).arg("4").output().unwrap();
    let (mut command, dir) = traced_command(&program);
    let script = dir.path().join("train.py");
    std::fs::write(&script, "print('training')\n").unwrap();
    let output = command.env("TRACER_OUTPUT", &script).arg("4").output().unwrap();
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "print('training')\n");
    assert_eq!((output.status.code(), &output.stdout), (untraced.status.code(), &untraced.stdout));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let written = dir.path().join(format!("train.py.{}", process_record_pid(dir.path(), "train.py.")));
    assert!(
        stderr.starts_with(&format!(
            "tracer: {} is not a trace file and is left as it is; the trace is written to {}",
            script.display(),
            written.display()
        )),
        "{stderr}"
    );
    assert!(mentions(&suspects(&report_json(&written))[0], "leak_per_epoch"));
    // Given the script, the analyzer says where such a trace goes.
    let refused = Command::new(analyzer()).arg("report").arg(&script).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("it wrote <that name>.<pid> and said so on stderr"), "{said}");

    let torn = dir.path().join("torn.bin");
    std::fs::write(&torn, &trace_format::MAGIC[..5]).unwrap();
    let (mut command, _run_dir) = traced_command(&program);
    let output = command.env("TRACER_OUTPUT", &torn).arg("4").output().unwrap();
    assert!(output.status.success() && output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(mentions(&suspects(&report_json(&torn))[0], "leak_per_epoch"));
}

/// The pid of the one trace in `dir` whose name starts with `prefix`.
fn process_record_pid(dir: &Path, prefix: &str) -> u32 {
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(prefix))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    process_record(&dir.join(&names[0])).pid
}

/// An output naming this process's standard output (`/dev/stdout`, with
/// stdout sent to a file) would mix the trace into the program's output:
/// it is refused, said once for the process tree, and the output is the
/// program's alone. A FIFO would block the program before its main until a
/// reader came: it is passed over for `<name>.<pid>`, which the analyzer
/// is pointed at when given the FIFO.
#[test]
fn an_output_naming_the_standard_output_or_a_fifo_leaves_the_program_alone() {
    let program = compile("forking.c");
    let untraced = std::process::Command::new(&program).output().unwrap();
    let (mut command, dir) = traced_command(&program);
    let out = std::fs::File::create(dir.path().join("out.txt")).unwrap();
    let output = command.env("TRACER_OUTPUT", "/dev/stdout").stdout(out).output().unwrap();
    assert_eq!(std::fs::read(dir.path().join("out.txt")).unwrap(), untraced.stdout);
    assert_eq!(output.status.code(), untraced.status.code());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("tracer: cannot create the trace file /dev/stdout: it is this process's standard output or error; not tracing"), "{stderr}");

    let (mut command, dir) = traced_command(&program);
    let fifo = dir.path().join("trace.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    command.env("TRACER_OUTPUT", &fifo);
    let (stdout, stderr) = succeeding_within_a_minute(command, dir.path());
    assert_eq!(stdout.as_bytes(), untraced.stdout);
    assert!(
        stderr.starts_with(&format!("tracer: {} is not a trace file and is left as it is", fifo.display())),
        "{stderr}"
    );
    let report = std::process::Command::new(analyzer()).arg("report").arg(&fifo).output().unwrap();
    let said = String::from_utf8_lossy(&report.stderr);
    assert_eq!((report.status.code(), said.lines().count()), (Some(1), 1), "{said}");
    assert!(said.contains("is a FIFO or a socket, not a trace file"), "{said}");
}

/// A warning about the settings is said once for the process tree, and one
/// that only a descendant's settings give (a launcher setting a variable
/// for the command it runs) is said too, once for that descendant and its
/// own.
#[test]
fn each_warning_about_the_settings_is_said_once_for_the_tree() {
    let program = compile("leaky.c");
    let (mut command, _dir) = traced_command(Path::new("/bin/sh"));
    let program = program.display();
    let script = format!("{program} 4; TRACER_SAMPEL_BYTES=1k {program} 4; {program} 4");
    let output = command.env("TRACER_EPOCH_SECONDS", "soon").args(["-c", &script]).output().unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].starts_with("tracer: TRACER_EPOCH_SECONDS=\"soon\""), "{stderr}");
    assert!(lines[1].starts_with("tracer: TRACER_SAMPEL_BYTES is not a setting of the tracer"), "{stderr}");
}

/// Switches with values other than 0 and 1 are each told on one line and
/// keep their default; a directory named with a slash is made.
#[test]
fn unreadable_switches_are_told_and_an_output_directory_is_made() {
    let program = compile("leaky.c");
    let (mut command, dir) = traced_command(&program);
    let output_dir = dir.path().join("runs/today");
    let output = command
        .env("TRACER_OUTPUT", format!("{}/", output_dir.display()))
        .env("TRACER_PYTHON_FRAMES", "maybe")
        .env("TRACER_UNWIND_CHECK", "2")
        .arg("8")
        .output()
        .unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = "tracer: TRACER_PYTHON_FRAMES=\"maybe\" is neither 0 nor 1 (0 leaves Python frames out); it stays on\n\
                    tracer: TRACER_UNWIND_CHECK=\"2\" is neither 0 nor 1 (1 compares each capture with libgcc's); it stays off\n";
    assert_eq!(stderr, expected);
    let report = report_json(&output_dir.join("trace.bin"));
    assert_eq!(report["verdict"]["kind"], "heap_leak", "traced all the same");
}

#[test]
fn output_to_a_device_is_written_as_it_is() {
    // Not a file of records to empty or guard: two programs may both write /dev/null.
    let (mut first, _dir) = traced_command(&compile("killed.c"));
    let mut first = first.env("TRACER_OUTPUT", "/dev/null").stdout(Stdio::piped()).spawn().unwrap();
    BufReader::new(first.stdout.take().unwrap()).lines().next().unwrap().unwrap();
    let run = run_traced_with(&compile("leaky.c"), &["4"], &[("TRACER_OUTPUT", "/dev/null")]).succeeded();
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(run.stderr(), "");
    // Nor do descendants add files beside it.
    let beside_null = || -> Vec<std::path::PathBuf> {
        let entries = std::fs::read_dir("/dev").unwrap().map(|entry| entry.unwrap().path());
        entries.filter(|path| path.to_string_lossy().starts_with("/dev/null.")).collect()
    };
    let before = beside_null();
    let (mut command, _dir) = traced_command(std::path::Path::new("sh"));
    let output = command.args(["-c", "ls / | cat"]).env("TRACER_OUTPUT", "/dev/null").output().unwrap();
    assert!(output.status.success() && output.stderr.is_empty(), "{output:?}");
    assert_eq!(beside_null(), before);
}

#[test]
fn a_process_tree_with_unwritable_output_says_why_once() {
    let (mut command, _dir) = traced_command(std::path::Path::new("sh"));
    let output = command
        .args(["-c", "sh -c 'sh -c \"echo innermost\"'; echo outer"])
        .env("TRACER_OUTPUT", "/nonexistent/dir/trace.bin")
        .env("TRACER_EPOCH_SECONDS", "soon")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), "innermost\nouter\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one warning and one failure for three processes:\n{stderr}");
    assert!(lines[0].starts_with("tracer: TRACER_EPOCH_SECONDS=\"soon\""), "{stderr}");
    assert!(lines[1].starts_with("tracer: cannot create the trace file /nonexistent/dir/trace.bin"), "{stderr}");
}

#[test]
fn torn_trace_tail_is_detected_not_misread() {
    let program = compile("leaky.c");
    let run = run_traced(&program, &["8"]);
    let bytes = std::fs::read(&run.trace).unwrap();
    let torn = run.dir.path().join("torn.bin");
    std::fs::write(&torn, &bytes[..bytes.len() - 7]).unwrap();
    let (records, end) = read_trace(&torn);
    assert!(matches!(end, TraceEnd::Truncated { .. }), "{end:?}");
    assert!(snapshot_count(&records) >= 8);
    let report = report_json(&torn);
    assert_eq!(report["trace_end"], "truncated");
    assert!(mentions(&suspects(&report)[0], "leak_per_epoch"));
}

#[test]
fn time_slices_cut_epochs_in_a_program_that_never_marks_however_it_is_sampled() {
    let program = compile("unmarked.c");
    for env in [&[FULL_CAPTURE][..], &[("TRACER_SAMPLE_BYTES", "64m")], &[]] {
        let run = run_traced_with(&program, &[], &[&[("TRACER_EPOCH_SECONDS", "0.1")], env].concat()).succeeded();
        let (records, _) = read_trace(&run.trace);
        let slices = records
            .iter()
            .filter(|r| matches!(r, Record::Snapshot(s) if s.cause == trace_format::EpochCause::Timer))
            .count();
        assert!(slices >= 3, "{slices} time slices in 0.6 s of 0.1 s slices ({env:?})");
        let notices: Vec<&str> = records
            .iter()
            .filter_map(|r| match r {
                Record::Notice(notice) => Some(notice.text.as_str()),
                _ => None,
            })
            .collect();
        // By default the first slice is the warm-up, sampled.
        let warm_up_sampled = env.is_empty();
        assert_eq!(notices.len(), usize::from(warm_up_sampled), "{notices:?}");
        if warm_up_sampled {
            assert!(notices[0].starts_with("the warm-up ended with epoch 0:"), "{notices:?}");
        }
    }
}

/// A run that never closes an epoch is sampled to its end by default: its
/// report says that its figures are estimates, which a run recording
/// every allocation, or sampled as its settings say, is not told.
#[test]
fn a_run_that_closes_no_epoch_is_told_its_figures_are_estimates() {
    let program = compile("unmarked.c");
    let estimates = "no epoch closed before the exit, so the warm-up's sampling lasted until then: every count and byte of this trace up to here is an estimate";
    for (env, told) in [(&[][..], true), (&[FULL_CAPTURE][..], false), (&[("TRACER_SAMPLE_BYTES", "64k")][..], false)] {
        let run = run_traced_with(&program, &[], &[&[("TRACER_EPOCH_SECONDS", "0")], env].concat()).succeeded();
        let report = report_json(&run.trace);
        assert_eq!(report["epochs"].as_array().unwrap().len(), 1, "{env:?}: {report:#}");
        let notes = report["notes"].as_array().unwrap();
        assert_eq!(
            notes.iter().any(|n| n["text"].as_str().unwrap().starts_with(estimates)),
            told,
            "{env:?}: {notes:?}"
        );
        assert_eq!(report_text(&run.trace).contains(estimates), told, "{env:?}");
    }
}

/// A slice is cut at the program's next allocation after its time, even
/// where the program allocates twenty times a second, and after a burst
/// of a million allocations (which spaces the looks at the clock out:
/// a recorded block of a page or more looks then); its label tells slices
/// of a fraction of a second apart.
#[test]
fn time_slices_cut_a_program_that_allocates_rarely() {
    let program = compile("allocates_rarely.c");
    for (args, env, least) in [
        (&[][..], &[][..], 7),
        // (Sampled, as the warm-up is by default, only the blocks sampled
        // look: one in seven here.)
        (&["burst"][..], &[FULL_CAPTURE][..], 7),
    ] {
        let env = [&[("TRACER_EPOCH_SECONDS", "0.1")], env].concat();
        let run = run_traced_with(&program, args, &env).succeeded();
        let (records, _) = read_trace(&run.trace);
        let labels: Vec<&str> = records
            .iter()
            .filter_map(|r| match r {
                Record::Snapshot(s) if s.cause == trace_format::EpochCause::Timer => Some(s.label.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            labels.len() >= least,
            "{args:?} {env:?}: slices of 0.1 s in 1 s of allocations 50 ms apart: {labels:?}"
        );
        let tenths: Vec<f64> = labels.iter().map(|label| label.strip_suffix('s').unwrap().parse().unwrap()).collect();
        assert!(
            labels.iter().all(|label| label.len() == "0.1s".len()) && tenths.windows(2).all(|w| w[0] < w[1]),
            "labelled in tenths of a second: {labels:?}"
        );
    }
}

/// A Python job that allocates rarely once started is cut into slices, and
/// none is cut while the interpreter shuts down (freeing what the job
/// kept): the leak is found at its line, at its rate per slice.
#[test]
fn python_time_slices_come_while_it_allocates_rarely_and_not_as_it_shuts_down() {
    let script = python_script("slow_slices.py");
    let line = line_of("python/slow_slices.py", "# kept for good");
    for version in ["3.11", "3.13"] {
        let python = python_interpreter(version);
        let run =
            run_traced_with(&python, &[script.to_str().unwrap(), "3"], &[("TRACER_EPOCH_SECONDS", "0.5")]).succeeded();
        let report = report_json(&run.trace);
        let epochs = report["epochs"].as_array().unwrap();
        let slices: Vec<&serde_json::Value> = epochs.iter().filter(|e| e["cause"] == "timer").collect();
        assert!(slices.len() >= 5, "{version}: slices of 0.5 s in 3 s: {epochs:#?}");
        let heap: Vec<u64> = slices.iter().map(|e| e["live_bytes"].as_u64().unwrap()).collect();
        assert!(heap.windows(2).all(|w| w[0] < w[1]), "{version}: the kept memory grows at every slice: {heap:?}");
        assert_eq!(report["verdict"]["kind"], "heap_leak", "{version}: {report:#}");
        let top = &report["suspects"][0];
        let planted = top["frames"].as_array().unwrap().iter().any(|frame| {
            frame["file"].as_str().is_some_and(|file| file.ends_with("slow_slices.py")) && frame["line"] == line
        });
        assert!(planted, "{version}: {top:#}");
        // About ten blocks of 200 KB a slice.
        let rate = top["growth_bytes_per_epoch"].as_f64().unwrap();
        assert!((1.4e6..2.6e6).contains(&rate), "{version}: {rate} bytes a slice");
    }
}

#[test]
fn a_snapshot_naming_many_new_stack_nodes_writes_them_in_several_records() {
    let program = compile("many_stacks.c");
    // One epoch, the warm-up, recorded in full: every stack in it.
    let run = run_traced_with(&program, &[], &[FULL_CAPTURE]).succeeded();
    let (records, end) = read_trace(&run.trace);
    assert_eq!(end, TraceEnd::EndOfFile);
    let mut tree = StackTree::default();
    let mut records_before_first_snapshot = 0;
    let mut leaves = std::collections::HashSet::new();
    for record in &records {
        match record {
            Record::StackNodes(nodes) => {
                // 2^16 nodes and the rest of the stack that reached them.
                assert!(nodes.nodes.len() < (1 << 16) + 256, "a record of {} nodes", nodes.nodes.len());
                records_before_first_snapshot += usize::from(leaves.is_empty());
                tree.add(nodes);
            }
            Record::Snapshot(snapshot) if snapshot.epoch == 0 => {
                for counter in snapshot.counters.iter().filter(|c| c.live_count > 0) {
                    assert!(tree.contains(counter.stack), "stack {} before its nodes", counter.stack);
                    leaves.insert(tree.stack(counter.stack).native);
                }
            }
            _ => {}
        }
    }
    assert!(leaves.len() >= 1 << 17, "{} distinct live stacks", leaves.len());
    assert!(records_before_first_snapshot >= 4, "{records_before_first_snapshot} records for 2^18 nodes");
}

#[test]
fn forked_children_count_what_they_inherited_and_freed_in_their_heap_totals() {
    let program = compile("fork_inherited.c");
    let run = run_traced(&program, &[]).succeeded();
    // Each process's snapshots by label, and the process it was forked from.
    let mut processes = Vec::new();
    for file in run.trace_files() {
        let (records, _) = read_trace(&file);
        let Some(Record::Process(process)) = records.first() else {
            panic!("{} has no process record", file.display())
        };
        let snapshots: Vec<(String, u64, u64)> = records
            .iter()
            .filter_map(|r| match r {
                Record::Snapshot(s) => {
                    let counted = s.counters.iter().filter(|c| c.birth_epoch >= 1).map(|c| c.live_bytes).sum();
                    Some((s.label.clone(), s.heap_live_bytes, counted))
                }
                _ => None,
            })
            .collect();
        processes.push((process.pid, process.forked_from, snapshots));
    }
    let live_at = |pid: u32, label: &str| {
        let (_, _, snapshots) = processes.iter().find(|p| p.0 == pid).unwrap();
        snapshots.iter().find(|s| s.0 == label).unwrap_or_else(|| panic!("{pid} has no {label}: {snapshots:?}")).clone()
    };
    let parent = processes.iter().find(|p| p.1.is_none()).unwrap().0;
    let child = processes.iter().find(|p| p.1 == Some(parent)).unwrap().0;
    let grandchild = processes.iter().find(|p| p.1 == Some(child)).unwrap().0;

    let (_, at_fork, _) = live_at(parent, "epoch 1");
    let (_, child_live, child_counted) = live_at(child, "epoch 2");
    assert_eq!(child_live, at_fork - 150 * 10_000 + 30 * 3_000, "{processes:?}");
    assert_eq!(child_counted, 30 * 3_000, "the child's own sites only: {processes:?}");
    let (_, grandchild_live, grandchild_counted) = live_at(grandchild, "epoch 3");
    assert_eq!(grandchild_live, child_live - 50 * 10_000 - 10 * 3_000 + 5 * 1_000, "{processes:?}");
    assert_eq!(grandchild_counted, 5 * 1_000, "{processes:?}");
    let (_, parent_after, _) = live_at(parent, "epoch 2");
    assert_eq!(parent_after, at_fork, "the children's frees are not the parent's: {processes:?}");
}

/// A child forked during its parent's warm-up has a warm-up of its own:
/// each process's first epoch ends its own (each trace notes it), and the
/// child then records every allocation (100 blocks of 7777 bytes, counted
/// exactly: sampled at 64 KiB they would be an estimate).
#[test]
fn a_child_forked_in_the_warm_up_has_a_warm_up_of_its_own() {
    let program = compile("fork_in_warm_up.c");
    let run = run_traced(&program, &[]).succeeded();
    assert_eq!(run.stdout(), "fork_in_warm_up: done\n");
    let warm_up_ends = |records: &[Record]| {
        records.iter().filter(|r| matches!(r, Record::Notice(n) if n.text.starts_with("the warm-up ended"))).count()
    };
    let (parent, _) = read_trace(&run.trace);
    assert_eq!(warm_up_ends(&parent), 1, "the parent's own mark ended its warm-up, not the child's");
    let files = run.trace_files();
    let child = files.iter().find(|file| **file != run.trace).expect("the child's trace");
    let (records, end) = read_trace(child);
    assert_eq!(end, TraceEnd::EndOfFile);
    assert_eq!(warm_up_ends(&records), 1, "the child's mark ended its own warm-up");
    let kept: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|record| match record {
            Record::Snapshot(snapshot) => Some(&snapshot.counters),
            _ => None,
        })
        .flatten()
        .filter(|c| c.live_count > 0 && c.live_bytes % 7777 == 0)
        .map(|c| (c.live_count, c.live_bytes))
        .collect();
    assert!(kept.contains(&(100, 777_700)), "the child's 100 blocks, counted exactly: {kept:?}");
}

/// A launcher as a pyenv shim is: `env` runs the shell, which runs helper
/// commands and then `exec`s the program given as its argument.
fn launcher(dir: &Path) -> std::path::PathBuf {
    let launcher = dir.join("launcher.sh");
    std::fs::write(&launcher, "#!/usr/bin/env sh\nversion=$(/bin/cat /dev/null)\n/bin/true\nexec \"$@\"\n").unwrap();
    std::fs::set_permissions(&launcher, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    launcher
}

/// A program started through a launcher leaves `env`'s trace at the named
/// path; the report on it gives the verdict of the program's trace, not of
/// the shell's (the first descendant).
#[test]
fn the_report_on_a_launchers_trace_points_at_the_program_it_ran() {
    let program = compile("leaky.c");
    let scratch = tempfile::tempdir().unwrap();
    let run = run_traced(&launcher(scratch.path()), &[program.to_str().unwrap()]).succeeded();
    assert_eq!(run.stdout(), "leaky: 8 epochs, 1600 blocks leaked\n");
    let text = report_text(&run.trace);
    assert!(!text.contains("image = "), "where the process sits in its run is for tools: {text}");
    // The verdict is the program's, the launcher said to be a wrapper.
    let note = text.lines().find(|line| line.starts_with("Verdict (")).unwrap_or_else(|| panic!("{text}"));
    assert!(note.starts_with("Verdict (heap_leak): this process (") && note.contains(") is a wrapper: "), "{note}");
    let wrote = note.split_once("of the processes it started, ").unwrap_or_else(|| panic!("{note}")).1;
    let (named, epochs) = wrote.split_once(" (").unwrap();
    let (epochs, found) =
        epochs.split_once(") stands for it, whose own verdict is ").unwrap_or_else(|| panic!("{note}"));
    assert_eq!(epochs, "9 epochs", "leaky's 8 marks and its exit: {note}");
    assert!(found.starts_with("heap_leak, 1 suspect, +"), "{note}");
    assert!(found.contains(", at leak_per_epoch (leaky.c:"), "the line it names: {note}");
    let named = Path::new(named);
    let process = process_record(named);
    assert!(process.exe.ends_with("leaky"), "{note}: {}", process.exe);
    assert!(run.trace_files().len() >= 4, "the launcher, its two helpers and the program: {:?}", run.trace_files());
}

/// A second run with the same output path reuses `trace.bin`, but its
/// descendants write files of their own pids beside those the first run's
/// left: the report lists only its own run's.
#[test]
fn a_second_run_with_the_same_output_reports_only_its_own_descendants() {
    let program = compile("leaky.c");
    let scratch = tempfile::tempdir().unwrap();
    let launcher = launcher(scratch.path());
    let (mut first, dir) = traced_command(&launcher);
    assert!(first.arg(&program).output().unwrap().status.success());
    let first_files = std::fs::read_dir(dir.path()).unwrap().count();
    let (mut second, _unused) = traced_command(&launcher);
    let output = second
        .arg(&program)
        .current_dir(dir.path())
        .env("TRACER_OUTPUT", dir.path().join("trace.bin"))
        .output()
        .unwrap();
    assert!(output.status.success());
    let report = report_json(&dir.path().join("trace.bin"));
    let root = process_record(&dir.path().join("trace.bin"));
    let listed = report["descendant_traces"].as_array().unwrap();
    assert!(listed.len() >= 3, "{report:#}");
    for descendant in listed {
        let process = process_record(Path::new(descendant["path"].as_str().unwrap()));
        assert_eq!(process.run(), root.run(), "{descendant}");
    }
    assert_eq!(report["other_runs_traces"], (first_files - 1) as u64, "{report:#}");
    let text = report_text(&dir.path().join("trace.bin"));
    let left_out = format!("({} traces named like its descendants' left out", first_files - 1);
    assert!(text.contains(&left_out), "{text}");
}

/// The program a launcher ran has a report of its own, whose descendants
/// are the processes the program forked and what they exec'd, not the
/// launcher's helper commands (which are the launcher's).
#[test]
fn a_launched_programs_descendants_are_its_own_children() {
    let program = compile("forking.c");
    let scratch = tempfile::tempdir().unwrap();
    let run = run_traced(&launcher(scratch.path()), &[program.to_str().unwrap()]).succeeded();
    let files = run.trace_files();
    let program_trace = files
        .iter()
        .find(|file| {
            let process = process_record(file);
            process.exe.ends_with("forking") && process.forked_from.is_none()
        })
        .expect("the program's trace");
    let pid = process_record(program_trace).pid;
    let report = report_json(program_trace);
    let listed: Vec<(u64, Option<u64>, String)> = report["descendant_traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["pid"].as_u64().unwrap(), d["forked_from"].as_u64(), d["cmdline"][0].as_str().unwrap().to_string()))
        .collect();
    let forked = listed.iter().filter(|(_, from, _)| *from == Some(u64::from(pid))).count();
    assert_eq!(forked, 6, "the program's six children: {listed:?}");
    assert!(
        listed.iter().any(|(_, from, argv0)| from.is_none() && argv0 == "true"),
        "the exec'd /bin/true: {listed:?}"
    );
    assert!(!listed.iter().any(|(_, _, argv0)| argv0.ends_with("cat")), "the launcher's helper: {listed:?}");
    assert_eq!(report["other_runs_traces"], 0);
    let root = report_json(&run.trace);
    assert_eq!(
        root["descendant_traces"].as_array().unwrap().len(),
        files.len() - 1,
        "the launcher's are the whole run"
    );
}

/// Children forked from one state (a loader's workers) each draw samples of
/// their own: the sampling generator and gap start over in a forked child.
/// Had they inherited them, the two children keeping the same blocks would
/// have sampled the same ones and estimated the same live bytes.
#[test]
fn forked_siblings_draw_samples_of_their_own() {
    let program = compile("sibling_samples.c");
    let run = run_traced_with(&program, &[], &[("TRACER_SAMPLE_BYTES", "16k")]).succeeded();
    let estimates: Vec<u64> = run
        .trace_files()
        .iter()
        .filter(|file| **file != run.trace)
        .map(|file| {
            let (records, _) = read_trace(file);
            records
                .iter()
                .find_map(|record| match record {
                    Record::Snapshot(snapshot) if snapshot.label == "epoch 0" => Some(snapshot.heap_live_bytes),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{} has no epoch 0", file.display()))
        })
        .collect();
    assert_eq!(estimates.len(), 2, "one trace per child: {estimates:?}");
    // Each holds about 8 MB, its parent's blocks and its own: about 480
    // samples at 16 KiB.
    for estimate in &estimates {
        assert!((6_000_000..10_000_000).contains(estimate), "an estimate of about 8 MB: {estimates:?}");
    }
    assert_ne!(estimates[0], estimates[1], "the siblings drew the same samples");
}

/// The ranks torchrun starts share their command line: each trace records
/// the rank torchrun gave it, and the reports name each rank's process by
/// it, in the launcher's children and findings and in the rank's own run.
#[test]
fn the_ranks_torchrun_starts_are_named_by_their_ranks() {
    let script = python_script("ddp_ranks.py");
    let args = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script.to_str().unwrap()];
    let run = run_traced(&venv_python(), &args).succeeded();
    assert!(run.stdout().contains("rank 1: 64 kept") && run.stdout().contains("rank 0: 0 kept"), "{}", run.stdout());
    let report = report_json(&run.trace);
    assert_eq!(report["process"]["rank"], serde_json::Value::Null, "the launcher is no rank");
    let descendants = report["descendant_traces"].as_array().unwrap();
    let ranks: Vec<&serde_json::Value> = descendants.iter().filter(|d| !d["rank"].is_null()).collect();
    let mut numbers: Vec<u64> = ranks.iter().map(|d| d["rank"]["rank"].as_u64().unwrap()).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [0, 1], "{descendants:#?}");
    for rank in &ranks {
        assert_eq!((&rank["rank"]["world_size"], &rank["rank"]["local_rank"]), (&2.into(), &rank["rank"]["rank"]));
    }
    let leaking = ranks.iter().find(|d| !d["finding"].is_null()).unwrap_or_else(|| panic!("{descendants:#?}"));
    assert_eq!(leaking["rank"]["rank"], 1, "rank 1 keeps its tensors: {descendants:#?}");
    // Rank 0 keeps nothing but DistributedDataParallel's record of each
    // all-reduce, a ring buffer filling up to its bound: no leak.
    let healthy = ranks.iter().find(|d| d["rank"]["rank"] == 0).unwrap();
    assert!(healthy["finding"].is_null(), "{healthy:#}");
    let own = report_json(&run.dir.path().join(healthy["path"].as_str().unwrap()));
    let kind = own["verdict"]["kind"].as_str().unwrap();
    assert!(kind == "bounded_cache" || kind == "no_growth", "{:#}", own["verdict"]);
    let (path, pid) = (leaking["path"].as_str().unwrap(), leaking["pid"].as_u64().unwrap());
    let text = report_text(&run.trace);
    assert!(text.contains(&format!("{path} (pid {pid}, rank 1 of 2, exec'd: ")), "{text}");
    assert!(text.contains(&format!("  findings   {path} (rank 1 of 2): heap_leak, ")), "{text}");
    let own = report_text(&run.dir.path().join(path));
    assert!(own.contains(&format!("\n  pid        {pid} (rank 1 of 2, local rank 1)\n")), "{own}");
    assert!(!own.contains("rank = "), "the pid line says it: {own}");
}

/// A program that fills its address space until malloc returns NULL, and
/// handles it, runs to its end under the tracer: where the tracer's own
/// memory runs out first, it stops recording with one line on stderr, and
/// the trace it wrote up to then is read as one that ended early. How the
/// limit falls between the program's blocks and the tracer's tables
/// depends on the machine, so the limit is set at a few distances above
/// what the process maps as it starts.
#[test]
fn a_program_that_fills_its_address_space_runs_to_its_end_and_the_tracer_stops_recording() {
    let program = compile("fills_memory.c");
    let mut stopped = 0;
    for headroom_mib in ["16", "32", "64", "96"] {
        let run = run_traced(&program, &[headroom_mib]);
        let context = format!("{headroom_mib} MiB: {}:\n{}{}", run.output.status, run.stdout(), run.stderr());
        assert!(run.output.status.success(), "{context}");
        assert_eq!(run.stdout(), "recovered\n", "{context}");
        let stderr = run.stderr();
        if !stderr.is_empty() {
            let line = "tracer: out of memory for the tracer's own tables and buffers; recording stopped, the program continues\n";
            assert_eq!(stderr, line, "{context}");
            stopped += 1;
        }
        let report = report_json(&run.trace);
        let expected_end = if stderr.is_empty() { "complete" } else { "unfinished" };
        assert_eq!(report["trace_end"], expected_end, "{context}");
        assert!(!report["epochs"].as_array().unwrap().is_empty(), "{context}: {report:#}");
        let stopped_note = "out of memory for the tracer's own tables and buffers: recording stopped here";
        let notes = report["notes"].as_array().unwrap();
        assert_eq!(notes.iter().any(|n| n["text"] == stopped_note), !stderr.is_empty(), "{context}: {notes:?}");
    }
    assert!(stopped > 0, "the tracer's memory never ran out: the test proves nothing");
}

/// A program that keeps small blocks until malloc returns NULL, each one
/// recorded (no warm-up sampling), with no epoch marked: the tracer's table
/// of them must double as they come, and at most limits it finds no room
/// before the exit, with no epoch closed. The trace says why it stops, and
/// the analyzer, which has no epoch to report, says that the memory ran
/// out and what to do, not that the process may have been killed. Where
/// the doublings fall against the limit depends on the machine: eight
/// limits, most of which stop it early.
#[test]
fn a_tracer_out_of_memory_before_the_first_epoch_says_why_in_the_analyzers_error() {
    let program = compile("fills_memory.c");
    let mut stopped_early = 0;
    for headroom_mib in ["12", "16", "20", "24", "28", "32", "40", "48"] {
        let run = run_traced_with(&program, &[headroom_mib, "small"], &[("TRACER_WARMUP_SAMPLE_BYTES", "0")]);
        let context = format!("{headroom_mib} MiB: {}:\n{}{}", run.output.status, run.stdout(), run.stderr());
        assert_eq!((run.output.status.code(), run.stdout().as_str()), (Some(0), "kept\n"), "{context}");
        let line =
            "tracer: out of memory for the tracer's own tables and buffers; recording stopped, the program continues\n";
        assert!(run.stderr().is_empty() || run.stderr() == line, "{context}");
        let analyzed = Command::new(analyzer()).arg("report").arg(&run.trace).output().unwrap();
        if analyzed.status.success() {
            continue; // the memory ran out at the exit's snapshot, or not at all
        }
        assert_eq!(analyzed.status.code(), Some(1), "{context}: {analyzed:?}");
        assert_eq!(run.stderr(), line, "{context}");
        let error = String::from_utf8_lossy(&analyzed.stderr);
        let expected = format!(
            "analyzer: error: {} has no complete snapshot (the tracer stopped recording before the first epoch closed: \
             out of memory for the tracer's own tables and buffers); the program had used the memory it may have by then \
             (an address-space limit such as ulimit -v, or all the machine would give): raise the limit to leave the \
             tracer room for its tables, or call tracer_mark(label) earlier, so that an epoch closes before the memory \
             runs out\n",
            run.trace.display()
        );
        assert_eq!(error, expected, "{context}");
        stopped_early += 1;
    }
    assert!(stopped_early > 0, "the tracer's memory never ran out before the exit: the test proves nothing");
}

/// A program that keeps what it allocated until the memory it may have is
/// full, then exits: the tracer meets the limit at the exit's snapshot, and
/// the trace, complete, says in a note that the snapshot may be short.
/// Whether the snapshot finds room left depends on where the last blocks
/// fell (each of these limits met it in about two runs of three): nine
/// limits, so that some run meets it. Now and then the tracer's tables find
/// no room before the exit instead, with no epoch closed yet: the analyzer
/// then says that the tracer's memory ran out, and what to do.
#[test]
fn a_tracer_out_of_memory_at_the_exit_says_so_in_the_trace() {
    let program = compile("fills_memory.c");
    let mut noted = 0;
    for headroom_mib in ["16", "24", "32", "40", "48", "64", "80", "96", "128"] {
        let run = run_traced(&program, &[headroom_mib, "large"]);
        let context = format!("{headroom_mib} MiB: {}:\n{}{}", run.output.status, run.stdout(), run.stderr());
        assert_eq!((run.output.status.code(), run.stdout().as_str()), (Some(0), "kept\n"), "{context}");
        let analyzed = Command::new(analyzer()).arg("report").arg(&run.trace).arg("--json").output().unwrap();
        if !analyzed.status.success() {
            let error = String::from_utf8_lossy(&analyzed.stderr);
            let why = "has no complete snapshot (the tracer stopped recording before the first epoch closed: \
                       out of memory for the tracer's own tables and buffers); the program had used the memory";
            assert!(error.contains(why) && !run.stderr().is_empty(), "{context}: {error}");
            continue;
        }
        let report: serde_json::Value = serde_json::from_slice(&analyzed.stdout).unwrap();
        assert_eq!(report["trace_end"], "complete", "{context}");
        let notes: Vec<&str> =
            report["notes"].as_array().unwrap().iter().map(|n| n["text"].as_str().unwrap()).collect();
        let told =
            notes.iter().any(|n| n.starts_with("out of memory for the tracer's own tables and buffers at the exit"));
        assert_eq!(told, !run.stderr().is_empty(), "{context}: {notes:?}");
        noted += usize::from(told);
    }
    assert!(noted > 0, "the tracer's memory never ran out: the test proves nothing");
}
