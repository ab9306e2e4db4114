//! What the traces of a process's descendants found. A leak in a
//! persistent DataLoader worker, or its copying of its parent's pages,
//! shows in the worker's own trace, not in its parent's: the parent's
//! report points at it.

use std::path::Path;

use trace_format::{Record, RecordReader};

use crate::analysis::{NoiseFloor, VerdictKind, MIN_EPOCHS};
use crate::format::bytes;
use crate::render::{phases, top_line};
use crate::symbolize::Symbolizer;
use crate::trace::{load, Descendant, LoadOptions};

/// Descendants' traces looked at, at most: the tracer's default number of
/// DataLoader worker traces per process. A long job that forks its workers
/// for every pass, traced with `TRACER_WORKER_TRACES=all`, leaves
/// thousands, of one snapshot each.
pub const LOOKED_AT: usize = 256;

/// A descendant's verdict, when it found something.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub kind: VerdictKind,
    /// The finding in a few words: "2 suspects, +640 KiB/epoch in all, the
    /// top +512 KiB/epoch".
    pub summary: String,
    /// The line a leak's verdict names: "fill (worker.py:12)".
    pub line: Option<String>,
    /// How fast it grows: a leak's suspects together, or the growth the
    /// summary names, per epoch. Findings are ranked by it.
    pub bytes_per_epoch: u64,
}

impl Finding {
    /// The summary, with the line it names.
    pub fn details(&self) -> String {
        match &self.line {
            Some(line) => format!("{}, at {line}", self.summary),
            None => self.summary.clone(),
        }
    }

    /// The finding in words: its kind and [`Finding::details`].
    pub fn words(&self) -> String {
        format!("{}, {}", self.kind.name(), self.details())
    }
}

/// A descendant's trace, with what its analysis found.
#[derive(Debug, Clone)]
pub struct DescendantReport {
    pub trace: Descendant,
    /// `None` when it found nothing, was not looked at (past
    /// [`LOOKED_AT`]), or could not be read.
    pub finding: Option<Finding>,
    /// The kind of its own verdict; `None` when it was not analysed (too
    /// few snapshots, not looked at, or could not be read).
    pub verdict: Option<VerdictKind>,
    /// Its own verdict says it was sampled too sparsely to tell its growth
    /// from chance.
    pub too_few_samples: bool,
    /// Its snapshots; 0 when it was not looked at or could not be read.
    pub snapshots: usize,
    /// How long it ran, from its start (a forked child's from its fork) to
    /// its last snapshot; 0 when not looked at.
    pub lifetime_ns: u64,
    /// A forked DataLoader worker, closing an epoch each time its parent
    /// does (see [`trace_format::FOLLOWS_PARENTS_EPOCHS`]).
    pub follows_parent: bool,
    /// Looked at, it has no end record: it was killed (a worker the
    /// out-of-memory killer chose), or runs still.
    pub unfinished: bool,
}

impl DescendantReport {
    /// Its own report found something, and it was started beside the
    /// traced process (`beside`) or is one of its descendants.
    pub fn found_something(&self, beside: bool) -> bool {
        self.finding.is_some() && self.trace.started_beside == beside
    }

    /// It ran for at least a quarter of `parent_ns` in too few epochs of its
    /// own to be analysed, not following its parent's (a child forked or run
    /// by other means than Python's multiprocessing), whose leak shows nowhere.
    pub fn unanalysed_long_life(&self, parent_ns: u64) -> bool {
        !self.trace.started_beside
            && !self.follows_parent
            && !self.is_multiprocessing_helper()
            && (1..MIN_EPOCHS).contains(&self.snapshots)
            && self.lifetime_ns >= parent_ns / 4
    }
}

impl DescendantReport {
    fn is_multiprocessing_helper(&self) -> bool {
        is_multiprocessing_helper(&self.trace.cmdline, self.trace.forked_from)
    }
}

/// Whether a process, by its command line and the process it was forked
/// from, is one multiprocessing starts for itself beside the workers (its
/// resource tracker, a forkserver): it runs the whole job, and holds none
/// of the program's memory. The children a forkserver forks share its
/// command line, but are the program's workers.
pub fn is_multiprocessing_helper(cmdline: &[String], forked_from: Option<u32>) -> bool {
    const HELPERS: [&str; 2] = ["multiprocessing.resource_tracker", "multiprocessing.forkserver"];
    forked_from.is_none() && cmdline.iter().any(|argument| HELPERS.iter().any(|helper| argument.contains(helper)))
}

/// The descendants' traces, the first [`LOOKED_AT`] analysed.
pub fn look_at(descendants: Vec<Descendant>, floor: NoiseFloor) -> Vec<DescendantReport> {
    descendants
        .into_iter()
        .enumerate()
        .map(|(i, trace)| {
            // Counting first: most descendants' traces are too short to
            // analyse (a worker forked for one pass has its exit snapshot
            // only), and counting reads less than loading.
            let glance = if i < LOOKED_AT { glance(&trace.path) } else { Glance::default() };
            let verdict = if glance.snapshots >= MIN_EPOCHS { own_verdict(&trace.path, floor) } else { None };
            let (finding, too_few_samples) =
                verdict.as_ref().map_or((None, false), |v| (v.finding.clone(), v.too_few_samples));
            DescendantReport {
                trace,
                finding,
                verdict: verdict.map(|v| v.kind),
                too_few_samples,
                snapshots: glance.snapshots,
                lifetime_ns: glance.lifetime_ns,
                follows_parent: glance.follows_parent,
                unfinished: i < LOOKED_AT && !glance.ended,
            }
        })
        .collect()
}

/// The traces of `descendants` that found something, the fastest growth
/// first (in pid order among equals): a rank that leaks MiB an epoch
/// before its healthy sibling's few KiB of caches.
pub fn by_growth(descendants: &[DescendantReport]) -> Vec<&DescendantReport> {
    let mut found: Vec<&DescendantReport> = descendants.iter().filter(|d| d.finding.is_some()).collect();
    found.sort_by_key(|d| std::cmp::Reverse(d.finding.as_ref().map_or(0, |f| f.bytes_per_epoch)));
    found
}

/// The descendant most likely to be the program a wrapper ran, for a
/// trace too short to analyse: under `env`, `timeout` or a launcher script
/// (a pyenv shim runs a dozen helper commands before it execs Python), the
/// first descendant is seldom the program. The one whose finding grows
/// fastest, else the one with the most snapshots (the first of those) if it
/// ran an epoch before its exit, else none; a process forked by another
/// descendant (a rank's DataLoader worker) stands for it through the
/// process that forked it, whose report covers it.
pub fn program_trace(descendants: &[DescendantReport]) -> Option<&DescendantReport> {
    let own = || descendants.iter().filter(|d| !d.trace.started_beside);
    by_growth(descendants)
        .into_iter()
        .find(|d| !d.trace.started_beside)
        .map(|d| forked_by_none_of(d, descendants))
        .or_else(|| own().filter(|d| d.snapshots > 1).rev().max_by_key(|d| d.snapshots))
}

/// The trace holding what a wrapper's `program` found: its own where it
/// found something, else that of the process it forked (or one of those
/// forked) that found the most, as a rank's DataLoader worker may.
pub fn program_finding<'a>(
    program: &'a DescendantReport,
    descendants: &'a [DescendantReport],
) -> Option<&'a DescendantReport> {
    if program.finding.is_some() {
        return Some(program);
    }
    by_growth(descendants).into_iter().find(|d| std::ptr::eq(forked_by_none_of(d, descendants), program))
}

/// `descendant`, or the process among `descendants` it was forked from,
/// and so on up: the first not forked by one of them.
fn forked_by_none_of<'a>(
    descendant: &'a DescendantReport,
    descendants: &'a [DescendantReport],
) -> &'a DescendantReport {
    let parent_of = |child: &DescendantReport| {
        let pid = child.trace.forked_from?;
        descendants.iter().find(|d| d.trace.pid == pid && !std::ptr::eq(*d, child))
    };
    // A pid used again cannot make the walk go round for ever.
    let mut current = descendant;
    for _ in 0..descendants.len() {
        match parent_of(current) {
            Some(parent) => current = parent,
            None => break,
        }
    }
    current
}

/// What counting a trace's records tells, without loading it.
#[derive(Default)]
struct Glance {
    snapshots: usize,
    lifetime_ns: u64,
    follows_parent: bool,
    /// It holds the end record of a process that ended normally.
    ended: bool,
}

/// A look at the trace at `path`: its snapshots (a worker forked for one
/// pass has its exit snapshot only, and counting reads less than loading),
/// how long it ran and whether it follows its parent's epochs; nothing
/// when it cannot be read.
fn glance(path: &Path) -> Glance {
    let Ok(records) = RecordReader::open(path) else { return Glance::default() };
    let mut glance = Glance::default();
    let mut started_late_ns = 0;
    for record in records {
        match record {
            Record::Process(process) => {
                // A forked child's times count from its parent's start.
                started_late_ns = process.started_late_ns();
                // A spawned child follows them only once its parent closed one.
                glance.follows_parent = process
                    .setting(trace_format::EPOCHS_SETTING)
                    .is_some_and(|how| how.starts_with(trace_format::FOLLOWS_PARENTS_EPOCHS))
                    && process.forked_from.is_some();
            }
            Record::End(_) => glance.ended = true,
            Record::Snapshot(snapshot) => {
                glance.snapshots += 1;
                glance.lifetime_ns = snapshot.elapsed_ns.saturating_sub(started_late_ns);
                glance.follows_parent |= snapshot.cause == trace_format::EpochCause::Parent;
            }
            _ => {}
        }
    }
    glance
}

/// What a descendant's own verdict says.
struct OwnVerdict {
    kind: VerdictKind,
    too_few_samples: bool,
    /// `None` when it shows no growth (its own report says why).
    finding: Option<Finding>,
}

/// The verdict on the trace at `path`, which has the snapshots an
/// analysis needs; `None` when it cannot be read.
fn own_verdict(path: &Path, floor: NoiseFloor) -> Option<OwnVerdict> {
    let trace = load(path, &LoadOptions::default()).ok()?;
    let mut symbolizer = Symbolizer::new(&trace.process, &trace.modules, &trace.pycode);
    // Its own report's analysis: a worker following a parent whose epochs
    // several loops cut in turn shows the phase its leak grew in.
    let (analysis, _) = phases::analyze(path, &trace, floor, &mut symbolizer);
    let top = top_line(&trace, &analysis, &mut symbolizer);
    let v = &analysis.verdict;
    let found = |kind: VerdictKind| -> Option<(String, u64)> {
        if kind == VerdictKind::HeapLeak {
            // The line the verdict names, which a faster cache beside it may outgrow.
            let line_growth = top.as_ref().map_or(analysis.suspects[0].growth_bytes_per_epoch, |&(_, growth)| growth);
            let top = bytes(line_growth);
            let all = analysis.suspects_growth();
            let summary = match analysis.suspects.len() {
                1 => format!("1 suspect, +{top}/epoch"),
                n => format!("{n} suspects, +{}/epoch in all, the leaking line +{top}/epoch", bytes(all)),
            };
            return Some((summary, all));
        }
        let (what, after, growth) = match kind {
            VerdictKind::CopiedFromParent => ("private memory", "", v.private_growth()),
            VerdictKind::AllocatorRetention => ("malloc kept", " of freed memory", v.allocator_free_growth()),
            VerdictKind::FilePages => ("pages of mapped files", "", v.file_growth()),
            VerdictKind::GrowthOutsideHeap => ("RSS", " outside the heap", v.program_rss_growth()),
            _ => return None,
        };
        let per_epoch = v.per_epoch(growth);
        Some((format!("{what} +{}/epoch{after}", bytes(per_epoch)), per_epoch))
    };
    Some(OwnVerdict {
        kind: v.kind,
        too_few_samples: analysis.too_few_samples(),
        finding: found(v.kind).map(|(summary, bytes_per_epoch)| Finding {
            kind: v.kind,
            summary,
            line: top.as_ref().map(|(line, _)| line.clone()),
            bytes_per_epoch,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{write_temp, Sim};
    use crate::trace::descendant_traces;

    /// A worker's trace: `leaking` keeps 64 KiB alive per epoch.
    /// A process `exe` that the parent of these tests (pid 4242) forked.
    fn forked_child(exe: &str, pid: u32) -> Sim {
        let mut sim = Sim::new(exe);
        sim.process_mut().pid = pid;
        sim.process_mut().forked_from = Some(4242);
        sim
    }

    fn worker(pid: u32, epochs: u32, leaking: bool) -> Vec<u8> {
        let mut sim = forked_child("/opt/app/worker", pid);
        for e in 0..epochs {
            if leaking {
                sim.alloc_many(7, 1, 64 << 10);
            }
            sim.mark(&format!("parent's epoch {e}"));
        }
        sim.exit();
        sim.bytes()
    }

    /// Writes each trace as `<trace>.<suffix>` beside `trace`.
    fn write_beside(trace: &Path, traces: &[(&str, Vec<u8>)]) {
        let name = trace.file_name().unwrap().to_string_lossy();
        for (suffix, bytes) in traces {
            std::fs::write(trace.with_file_name(format!("{name}.{suffix}")), bytes).unwrap();
        }
    }

    #[test]
    fn a_leaking_descendant_is_found_and_short_ones_are_not_analysed() {
        let parent = write_temp("trace.bin", &Sim::new("/opt/app/train").bytes());
        write_beside(
            &parent,
            &[("4300", worker(4300, 8, true)), ("4301", worker(4301, 1, true)), ("4302", worker(4302, 8, false))],
        );
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        let findings: Vec<Option<Finding>> = found.into_iter().map(|d| d.finding).collect();
        let leak = Finding {
            kind: VerdictKind::HeapLeak,
            summary: "1 suspect, +64.0 KiB/epoch".into(),
            line: Some("0x400700".into()),
            bytes_per_epoch: 64 << 10,
        };
        assert_eq!(findings, [Some(leak), None, None]);
    }

    /// A worker's trace whose leak is twenty stacks of 1 KiB an epoch, each
    /// below the noise floor (4 KiB), under one line of its own code.
    fn worker_leaking_through_small_stacks(pid: u32) -> Vec<u8> {
        use trace_format::{Frame, PyCode, PyFrame};
        let mut sim = forked_child("/usr/bin/python3.11", pid);
        sim.py_code(PyCode {
            id: 0x7f00_1000,
            filename: "/job/dataset.py".into(),
            qualname: "Samples.__getitem__".into(),
            first_line: 10,
            linetable: Vec::new(),
        });
        let python = Frame::Python(PyFrame { code: 0x7f00_1000, instruction: 0, entry: true });
        for stack in 1..=20 {
            sim.stack_frames(stack, vec![Frame::Native(0x40_0000 + u64::from(stack) * 0x100), python]);
        }
        for e in 0..8 {
            for stack in 1..=20 {
                sim.alloc_many(stack, 1, 1024);
            }
            sim.mark(&format!("parent's epoch {e}"));
        }
        sim.exit();
        sim.bytes()
    }

    #[test]
    fn a_descendant_leaking_through_small_stacks_under_one_line_is_found() {
        let parent = write_temp("trace.bin", &Sim::new("/opt/app/train").bytes());
        write_beside(&parent, &[("4400", worker_leaking_through_small_stacks(4400))]);
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        let leak = Finding {
            kind: VerdictKind::HeapLeak,
            summary: "20 suspects, +20.0 KiB/epoch in all, the leaking line +20.0 KiB/epoch".into(),
            line: Some("Samples.__getitem__ (dataset.py)".into()),
            bytes_per_epoch: 20 << 10,
        };
        assert_eq!(found[0].finding, Some(leak));
    }

    /// A worker of the job's own lives through the run with its exit snapshot only;
    /// a DataLoader worker of one pass follows its parent's epochs, and a
    /// command the job ran was over at once: only the first is told.
    #[test]
    fn a_long_lived_descendant_too_short_to_analyse_is_told_apart() {
        let parent = write_temp("trace.bin", &Sim::new("/opt/app/train").bytes());
        let mut loader_worker = forked_child("/opt/app/train", 4501);
        let follows = format!(
            "{}: this forked DataLoader worker closes one each time its parent does",
            trace_format::FOLLOWS_PARENTS_EPOCHS
        );
        loader_worker.process_mut().settings.push((trace_format::EPOCHS_SETTING.into(), follows));
        loader_worker.exit();
        write_beside(&parent, &[("4500", worker(4500, 1, true)), ("4501", loader_worker.bytes())]);
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        let (own_worker, loader_worker) = (&found[0], &found[1]);
        assert!(own_worker.lifetime_ns > 0 && !own_worker.follows_parent && loader_worker.follows_parent);
        let run_ns = own_worker.lifetime_ns;
        assert!(own_worker.unanalysed_long_life(run_ns));
        assert!(!own_worker.unanalysed_long_life(5 * run_ns), "over within a fifth of the run");
        assert!(!loader_worker.unanalysed_long_life(loader_worker.lifetime_ns), "a worker of one pass");
        let mut tracker = own_worker.clone();
        tracker.trace.cmdline = ["python", "-B", "-c", "from multiprocessing.resource_tracker import main;main(8)"]
            .map(String::from)
            .to_vec();
        tracker.trace.forked_from = None;
        assert!(!tracker.unanalysed_long_life(run_ns), "multiprocessing's own helper");
        let mut forkserver_worker = tracker.clone();
        forkserver_worker.trace.forked_from = Some(4600);
        assert!(forkserver_worker.unanalysed_long_life(run_ns), "a worker its forkserver forked");
    }

    /// A forked child's times count from its parent's start: one forked
    /// late and over at once did not run through the job.
    #[test]
    fn a_child_forked_late_lived_from_its_fork() {
        let parent = write_temp("trace.bin", &Sim::new("/opt/app/train").bytes());
        let mut late = forked_child("/opt/app/train", 4700);
        let forked_at = late.process_mut().start_unix_ns + 9_000_000_000;
        late.process_mut().settings.push((trace_format::IMAGE_SETTING.into(), format!("4700.{forked_at}")));
        late.epoch_ns = 5_000_000_000;
        late.mark("epoch 0");
        late.exit();
        write_beside(&parent, &[("4700", late.bytes())]);
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        assert_eq!(found[0].lifetime_ns, 1_000_000_000, "from its fork at 9 s to its exit at 10 s");
        assert!(!found[0].unanalysed_long_life(10_000_000_000));
    }

    #[test]
    fn the_program_a_wrapper_ran_is_the_descendant_that_found_something_or_ran_longest() {
        let parent = write_temp("trace.bin", &Sim::new("/usr/bin/env").bytes());
        // A launcher's helper commands, the program (exec'd by the same
        // process, so `.1`), and a helper after it.
        write_beside(
            &parent,
            &[
                ("300", worker(300, 1, false)),
                ("301", worker(301, 2, false)),
                ("301.1", worker(301, 8, false)),
                ("302", worker(302, 8, false)),
            ],
        );
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        let name = |d: Option<&DescendantReport>| d.unwrap().trace.path.file_name().unwrap().to_owned();
        assert_eq!(name(program_trace(&found)), "trace.bin.301.1", "the first with the most snapshots");

        write_beside(&parent, &[("303", worker(303, 6, true))]);
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        assert_eq!(name(program_trace(&found)), "trace.bin.303", "the one that found a leak");

        let mut beside = found.clone();
        beside.iter_mut().for_each(|d| d.trace.started_beside = true);
        assert!(program_trace(&beside).is_none(), "processes started beside are no wrapper's program");
    }

    /// Under a launcher that starts ranks, the leak found in a rank's
    /// DataLoader worker names the rank as the program, not its worker;
    /// helpers that only ran to their exit are no program.
    #[test]
    fn the_program_a_wrapper_ran_is_the_process_that_forked_the_one_that_found_something() {
        let parent = write_temp("trace.bin", &Sim::new("/usr/bin/env").bytes());
        write_beside(&parent, &[("400", worker(400, 0, false)), ("401", worker(401, 0, false))]);
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        assert!(program_trace(&found).is_none(), "no descendant ran an epoch before its exit");

        write_beside(&parent, &[("410", worker(410, 8, false)), ("411", worker(411, 8, false))]);
        let mut leaking_worker = forked_child("/opt/app/train", 412);
        leaking_worker.process_mut().forked_from = Some(411);
        for e in 0..6 {
            leaking_worker.alloc_many(7, 1, 64 << 10);
            leaking_worker.mark(&format!("epoch {e}"));
        }
        leaking_worker.exit();
        write_beside(&parent, &[("412", leaking_worker.bytes())]);
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        assert!(found.iter().any(|d| d.trace.pid == 412 && d.finding.is_some()), "{found:?}");
        assert_eq!(program_trace(&found).map(|d| d.trace.pid), Some(411), "the rank that forked the worker");
    }

    /// A process's trace, of `run`, started `after_ns` after the root.
    fn process_trace(pid: u32, run: &str, after_ns: i64, beside: bool) -> Vec<u8> {
        image_trace(pid, run, after_ns, beside, None)
    }

    /// [`process_trace`] naming its image (`<pid>.<after_ns>`) and its parent's.
    fn image_trace(pid: u32, run: &str, after_ns: i64, beside: bool, parent: Option<&str>) -> Vec<u8> {
        let mut sim = Sim::new("/opt/app/step");
        let process = sim.process_mut();
        process.pid = pid;
        process.start_unix_ns = process.start_unix_ns.saturating_add_signed(after_ns);
        process.settings.push((trace_format::RUN_SETTING.into(), run.into()));
        if beside {
            process.settings.push((trace_format::NAMED_OUTPUT_IN_USE_SETTING.into(), "trace.bin".into()));
        }
        if let Some(parent) = parent {
            process.settings.push((trace_format::IMAGE_SETTING.into(), format!("{pid}.{after_ns}")));
            process.settings.push((trace_format::PARENT_IMAGE_SETTING.into(), parent.into()));
        }
        sim.exit();
        sim.bytes()
    }

    /// Under a launcher, the program's trace is a descendant's (`.1`: the
    /// second image of the launcher's process); its report lists what it
    /// forked and what those exec'd, not the launcher's helpers.
    #[test]
    fn a_descendants_own_descendants_are_those_its_image_leads_to() {
        let dir = write_temp("trace.bin", &process_trace(1, "1.0", 0, false));
        let program = dir.with_file_name("trace.bin.1.1");
        write_beside(
            &dir,
            &[
                // The launcher's shell, exec'd, and a helper it ran.
                ("1", image_trace(1, "1.0", 1, false, Some("1.0"))),
                ("2", image_trace(2, "1.0", 2, false, Some("1.1"))),
                // The program the shell exec'd, its forked worker, and what that exec'd.
                ("1.1", image_trace(1, "1.0", 3, false, Some("1.1"))),
                ("7", image_trace(7, "1.0", 4, false, Some("1.3"))),
                ("7.1", image_trace(7, "1.0", 5, false, Some("7.4"))),
                // Another run's.
                ("3", image_trace(3, "0.0", 6, false, Some("1.3"))),
            ],
        );
        let beside = descendant_traces(&program);
        let names: Vec<String> =
            beside.traces.iter().map(|d| d.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["trace.bin.7", "trace.bin.7.1"]);
        assert_eq!(beside.other_runs, 1);
        assert_eq!(descendant_traces(&dir).traces.len(), 5, "the first process's are its whole run");
    }

    #[test]
    fn traces_another_run_left_are_left_out() {
        const SECOND: i64 = 1_000_000_000;
        let root = write_temp("trace.bin", &process_trace(100, "100.5", 0, false));
        let traces = [
            // An earlier run: its first process (exec'd), a descendant, one started beside it.
            ("90", process_trace(90, "90.1", -60 * SECOND, false)),
            ("91", process_trace(91, "90.1", -59 * SECOND, false)),
            ("95", process_trace(95, "95.3", -30 * SECOND, true)),
            // This run: a descendant, the program exec'd, one started beside it and its descendant.
            ("101", process_trace(101, "100.5", SECOND, false)),
            ("100.1", process_trace(100, "100.5", SECOND, false)),
            ("102", process_trace(102, "102.7", 2 * SECOND, true)),
            ("103", process_trace(103, "102.7", 3 * SECOND, false)),
        ];
        write_beside(&root, &traces);
        let beside = descendant_traces(&root);
        let names: Vec<String> =
            beside.traces.iter().map(|d| d.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["trace.bin.100.1", "trace.bin.101", "trace.bin.102", "trace.bin.103"]);
        assert_eq!(beside.other_runs, 3);
        let started_beside: Vec<bool> = beside.traces.iter().map(|d| d.started_beside).collect();
        assert_eq!(
            started_beside,
            [false, false, true, true],
            "the descendant of the one started beside is none of this run's"
        );

        // A root from a tracer that wrote no run takes them all.
        std::fs::write(&*root, Sim::new("/opt/app/train").bytes()).unwrap();
        let beside = descendant_traces(&root);
        assert_eq!((beside.traces.len(), beside.other_runs), (traces.len(), 0));
    }

    #[test]
    fn descendants_are_in_pid_order_not_name_order() {
        let parent = write_temp("trace.bin", &Sim::new("/opt/app/train").bytes());
        for name in ["100", "99", "1000.2", "1000"] {
            let pid = name.split('.').next().unwrap().parse().unwrap();
            std::fs::write(parent.with_file_name(format!("trace.bin.{name}")), worker(pid, 1, false)).unwrap();
        }
        let names: Vec<String> = descendant_traces(&parent)
            .traces
            .iter()
            .map(|d| d.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["trace.bin.99", "trace.bin.100", "trace.bin.1000", "trace.bin.1000.2"]);
    }

    #[test]
    fn descendants_past_the_bound_are_listed_but_not_looked_at() {
        let parent = write_temp("trace.bin", &Sim::new("/opt/app/train").bytes());
        for i in 0..=LOOKED_AT as u32 {
            // Only the last, past the bound, has something to find.
            let pid = 10_000 + i;
            let bytes = worker(pid, if i == LOOKED_AT as u32 { 8 } else { 1 }, true);
            std::fs::write(parent.with_file_name(format!("trace.bin.{pid}")), bytes).unwrap();
        }
        let found = look_at(descendant_traces(&parent).traces, NoiseFloor::Scaled);
        assert_eq!(found.len(), LOOKED_AT + 1);
        assert!(found.iter().all(|d| d.finding.is_none()));
        let looked_at = own_verdict(&found[LOOKED_AT].trace.path, NoiseFloor::Scaled);
        assert!(looked_at.is_some_and(|v| v.finding.is_some()), "found when looked at");
    }
}
