//! The report as one JSON object (its schema is in the README, "JSON").

use serde::Serialize;

use super::Report;
use crate::lines::LeakLine;
use crate::symbolize::Frame;

#[derive(Serialize)]
struct JsonReport<'a> {
    schema_version: u32,
    trace: String,
    trace_end: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_end_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_end_reason: Option<&'a str>,
    warnings: &'a [String],
    notes: Vec<JsonNote<'a>>,
    process: JsonProcess<'a>,
    epochs: Vec<JsonEpoch<'a>>,
    analysis: JsonAnalysis<'a>,
    suspect_count: usize,
    lines: Vec<JsonLine<'a>>,
    suspects_in_lines: usize,
    suspects: Vec<JsonSuspect<'a>>,
    verdict: JsonVerdict<'a>,
    flamegraph: Option<String>,
    descendant_traces: Vec<JsonDescendant<'a>>,
    /// The paths of those of `descendant_traces` with a finding, the
    /// fastest growth first.
    findings: Vec<String>,
    other_runs_traces: usize,
}

/// A notice the tracer wrote into the trace while it ran.
#[derive(Serialize)]
struct JsonNote<'a> {
    elapsed_ns: u64,
    text: &'a str,
}

#[derive(Serialize)]
struct JsonDescendant<'a> {
    path: String,
    pid: u32,
    forked_from: Option<u32>,
    /// Not a descendant: a traced process started beside this one.
    started_beside: bool,
    cmdline: &'a [String],
    /// Its place in a distributed job; null when a launcher gave it no rank.
    rank: Option<JsonRank>,
    /// What the descendant's own report finds; null when nothing.
    finding: Option<JsonFinding<'a>>,
    /// Its own verdict was sampled too sparsely to tell its growth from chance.
    too_few_samples: bool,
    /// Its trace has no end record: it was killed, or runs still.
    unfinished: bool,
}

#[derive(Serialize)]
struct JsonFinding<'a> {
    kind: &'static str,
    summary: &'a str,
    /// The line a leak's verdict names; null for other findings.
    line: Option<&'a str>,
    /// Its growth, by which findings are ranked.
    growth_bytes_per_epoch: u64,
}

/// A process's place in a distributed job (see [`trace_format::Rank`]).
#[derive(Serialize)]
struct JsonRank {
    rank: u32,
    local_rank: Option<u32>,
    world_size: Option<u32>,
}

impl From<trace_format::Rank> for JsonRank {
    fn from(rank: trace_format::Rank) -> JsonRank {
        JsonRank { rank: rank.rank, local_rank: rank.local_rank, world_size: rank.world_size }
    }
}

#[derive(Serialize)]
struct JsonProcess<'a> {
    pid: u32,
    forked_from: Option<u32>,
    /// Its place in a distributed job; null when a launcher gave it no rank.
    rank: Option<JsonRank>,
    exe: &'a str,
    cmdline: &'a [String],
    settings: serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize)]
struct JsonEpoch<'a> {
    index: u32,
    label: &'a str,
    cause: &'static str,
    elapsed_ns: u64,
    rss_bytes: u64,
    live_bytes: u64,
    live_count: u64,
    mapped_bytes: u64,
    mapped_count: u64,
    /// Forked processes only, not at exit; 0 elsewhere.
    private_dirty_bytes: u64,
    /// Freed memory malloc kept; 0 before format 4 and at an exit by `_exit`.
    allocator_free_bytes: u64,
    /// Resident pages of mapped files, part of the RSS; 0 before format 5.
    rss_file_bytes: u64,
    tracer_bytes: u64,
    analysed: bool,
}

#[derive(Serialize)]
struct JsonAnalysis<'a> {
    first_analysed_epoch: u32,
    analysed_epochs: usize,
    exit_epoch_dropped: bool,
    reference_epoch: Option<u32>,
    settled_birth_epochs: Option<[u32; 2]>,
    noise_floor_bytes_per_epoch: u64,
    /// The mean bytes between samples, when the analysed epochs were sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    sample_mean_bytes: Option<u64>,
    /// A job whose epochs several DataLoader loops cut in turn (see
    /// [`super::phases`]): its phases, each analysed apart.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    phases: Vec<JsonPhase>,
    below_noise_floor: JsonBelowFloor<'a>,
}

#[derive(Serialize)]
struct JsonPhase {
    from_epoch: u32,
    /// Null for the last phase.
    to_epoch: Option<u32>,
    verdict: &'static str,
    /// The line its leak's verdict names, and the line's growth; null when none.
    line: Option<String>,
    growth_bytes_per_epoch: Option<u64>,
    /// The report's analysis is this phase's.
    analysed: bool,
}

#[derive(Serialize)]
struct JsonBelowFloor<'a> {
    stacks: usize,
    growth_bytes_per_epoch: u64,
    largest_bytes_per_epoch: u64,
    /// When they make the verdict's point: the largest of them summed by line.
    lines: Vec<JsonBelowFloorLine<'a>>,
}

#[derive(Serialize)]
struct JsonBelowFloorLine<'a> {
    #[serde(flatten)]
    sum: JsonLineSum<'a>,
    stacks: usize,
}

#[derive(Serialize)]
struct JsonSurvivor {
    birth_epoch: u32,
    count: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct JsonSuspect<'a> {
    rank: usize,
    stack_id: u32,
    other_stack_ids: &'a [u32],
    memory: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    explanation: Option<String>,
    growth_bytes_per_epoch: u64,
    /// The first settled epoch the growth is over.
    growth_since_epoch: u32,
    live_bytes: u64,
    live_count: u64,
    settled_epochs_with_survivors: usize,
    /// A suspect with its line, below the noise floor by itself.
    below_noise_floor: bool,
    /// A block made larger again and again, its newest copy alive.
    grown_in_place: bool,
    /// A suspect with its line, with survivors of too few settled epochs by itself.
    piles_up_only_with_line: bool,
    /// The stack holds as many native frames as the tracer keeps: its
    /// outer frames were never recorded.
    cut_at_frame_limit: bool,
    survivors: Vec<JsonSurvivor>,
    frames: Vec<JsonFrame<'a>>,
}

/// Suspects summed by their first frame in the program's own code.
#[derive(Serialize)]
struct JsonLine<'a> {
    #[serde(flatten)]
    sum: JsonLineSum<'a>,
    /// The line that called `frame`, when every stack of the line came from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    caller: Option<JsonFrame<'a>>,
    suspect_ranks: &'a [usize],
}

/// What a line sums.
#[derive(Serialize)]
struct JsonLineSum<'a> {
    frame: Option<JsonFrame<'a>>,
    memory: &'static str,
    growth_bytes_per_epoch: u64,
    growth_since_epoch: u32,
    live_bytes: u64,
    live_count: u64,
}

fn line_sum(line: &LeakLine) -> JsonLineSum<'_> {
    JsonLineSum {
        frame: line.frame.as_ref().map(frame),
        memory: line.memory.name(),
        growth_bytes_per_epoch: line.growth_bytes_per_epoch,
        growth_since_epoch: line.growth_span.since,
        live_bytes: line.live_bytes,
        live_count: line.live_count,
    }
}

#[derive(Serialize)]
struct JsonFrame<'a> {
    function: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    module: Option<&'a str>,
    address: String,
    /// Where the address lies in `module`'s file, as addr2line takes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    module_offset: Option<String>,
    inlined: bool,
    own_code: bool,
    python: bool,
}

#[derive(Serialize)]
struct JsonVerdict<'a> {
    kind: &'static str,
    message: &'a str,
    /// A wrapper's: the trace of the program it ran, whose verdict's kind
    /// `kind` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    program_trace: Option<String>,
    rss_growth_bytes: i64,
    tracer_growth_bytes: i64,
    heap_growth_bytes: i64,
    mapped_growth_bytes: i64,
    private_growth_bytes: i64,
    allocator_free_growth_bytes: i64,
    file_growth_bytes: i64,
    epochs: usize,
    too_few_samples: bool,
}

fn frame(f: &Frame) -> JsonFrame<'_> {
    JsonFrame {
        function: &f.function,
        file: f.file.as_deref(),
        line: f.line,
        module: f.module.as_deref(),
        address: format!("0x{:x}", f.address),
        module_offset: f.module_offset.map(|offset| format!("0x{offset:x}")),
        inlined: f.inlined,
        own_code: f.own_code,
        python: f.python,
    }
}

fn clamp(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The tracer's settings by name, each a string but its warnings, which
/// are many settings of one name: one list, `warnings`, in their order.
fn settings_json(settings: &[(String, String)]) -> serde_json::Map<String, serde_json::Value> {
    let (warnings, others): (Vec<_>, Vec<_>) =
        settings.iter().partition(|(name, _)| name == trace_format::WARNING_SETTING);
    let mut map: serde_json::Map<String, serde_json::Value> =
        others.into_iter().map(|(name, value)| (name.clone(), value.clone().into())).collect();
    if !warnings.is_empty() {
        let warnings = warnings.into_iter().map(|(_, warning)| warning.clone().into()).collect();
        map.insert(WARNINGS_SETTING.into(), serde_json::Value::Array(warnings));
    }
    map
}

/// The key of the list of the tracer's warnings in `process.settings`.
const WARNINGS_SETTING: &str = "warnings";

/// The report as a JSON value.
pub fn value(report: &Report<'_>) -> serde_json::Value {
    let trace = report.trace;
    let a = report.analysis;
    let (offset, reason) = match &trace.end {
        crate::trace::EndKind::Complete => (None, None),
        crate::trace::EndKind::Truncated { offset } => (Some(*offset), None),
        crate::trace::EndKind::Damaged { offset, reason } => (Some(*offset), Some(reason.as_str())),
    };
    let analysed = a.verdict.kind != crate::analysis::VerdictKind::TooFewEpochs;
    let json = JsonReport {
        schema_version: 1,
        trace: trace.path.display().to_string(),
        trace_end: trace.end_name(),
        trace_end_offset: offset,
        trace_end_reason: reason,
        warnings: &report.warnings,
        notes: trace.notices.iter().map(|n| JsonNote { elapsed_ns: n.elapsed_ns, text: &n.text }).collect(),
        process: JsonProcess {
            pid: trace.process.pid,
            forked_from: trace.process.forked_from,
            rank: trace.process.rank().map(JsonRank::from),
            exe: &trace.process.exe,
            cmdline: &trace.process.cmdline,
            settings: settings_json(&trace.process.settings),
        },
        epochs: trace
            .snapshots
            .iter()
            .enumerate()
            .map(|(i, s)| JsonEpoch {
                index: s.epoch,
                label: &s.label,
                cause: s.cause.name(),
                elapsed_ns: s.elapsed_ns,
                rss_bytes: s.rss_bytes,
                live_bytes: s.heap_live_bytes,
                live_count: s.heap_live_count,
                mapped_bytes: s.mapped_live_bytes,
                mapped_count: s.mapped_live_count,
                private_dirty_bytes: s.private_dirty_bytes,
                allocator_free_bytes: s.allocator_free_bytes,
                rss_file_bytes: s.rss_file_bytes,
                tracer_bytes: s.tracer_bytes,
                analysed: a.analysed_snapshots().contains(&i),
            })
            .collect(),
        analysis: JsonAnalysis {
            first_analysed_epoch: trace.snapshots[a.first].epoch,
            analysed_epochs: a.analysed_snapshots().len(),
            exit_epoch_dropped: a.exit_recorded,
            reference_epoch: analysed.then(|| trace.snapshots[a.reference].epoch),
            settled_birth_epochs: a.settled.map(|(lo, hi)| [lo, hi]),
            noise_floor_bytes_per_epoch: a.noise_floor,
            sample_mean_bytes: a.sampling.map(|s| s.mean_bytes),
            phases: report
                .phases
                .iter()
                .map(|phase| JsonPhase {
                    from_epoch: phase.from,
                    to_epoch: phase.to,
                    verdict: phase.verdict.name(),
                    line: phase.leak.as_ref().map(|(line, _)| line.clone()),
                    growth_bytes_per_epoch: phase.leak.as_ref().map(|&(_, growth)| growth),
                    analysed: phase.shown,
                })
                .collect(),
            below_noise_floor: JsonBelowFloor {
                stacks: a.below_floor.stacks,
                growth_bytes_per_epoch: a.below_floor.growth_bytes_per_epoch,
                largest_bytes_per_epoch: a.below_floor.largest_bytes_per_epoch,
                lines: report
                    .below_floor_lines
                    .iter()
                    .map(|l| JsonBelowFloorLine { sum: line_sum(l), stacks: l.ranks.len() })
                    .collect(),
            },
        },
        suspect_count: a.suspects.len(),
        lines: report
            .lines
            .iter()
            .map(|l| JsonLine {
                sum: line_sum(l),
                caller: super::line_caller(l, &report.symbolized, trace).map(frame),
                suspect_ranks: &l.ranks,
            })
            .collect(),
        suspects_in_lines: report.symbolized.len(),
        suspects: report
            .shown()
            .iter()
            .map(|s| JsonSuspect {
                rank: s.rank,
                stack_id: s.suspect.stack,
                other_stack_ids: &s.suspect.other_stacks,
                memory: s.suspect.memory.name(),
                explanation: s.explanation.map(ToString::to_string),
                growth_bytes_per_epoch: s.suspect.growth_bytes_per_epoch,
                growth_since_epoch: s.suspect.growth_span.since,
                live_bytes: s.suspect.live_bytes,
                live_count: s.suspect.live_count,
                settled_epochs_with_survivors: s.suspect.settled_with_survivors,
                below_noise_floor: s.suspect.below_floor,
                grown_in_place: s.suspect.grown_in_place,
                piles_up_only_with_line: s.suspect.piles_up_only_with_line,
                cut_at_frame_limit: s.cut_at_frame_limit.is_some(),
                survivors: s
                    .suspect
                    .survivors
                    .iter()
                    .map(|v| JsonSurvivor { birth_epoch: v.birth_epoch, count: v.count, bytes: v.bytes })
                    .collect(),
                frames: s.frames.iter().map(frame).collect(),
            })
            .collect(),
        verdict: JsonVerdict {
            kind: report.verdict_kind().name(),
            message: &report.verdict_message,
            program_trace: report.program.map(|i| report.descendants[i].trace.path.display().to_string()),
            rss_growth_bytes: clamp(a.verdict.rss_growth()),
            tracer_growth_bytes: clamp(a.verdict.tracer_growth()),
            heap_growth_bytes: clamp(a.verdict.heap_growth()),
            mapped_growth_bytes: clamp(a.verdict.mapped_growth()),
            private_growth_bytes: clamp(a.verdict.private_growth()),
            allocator_free_growth_bytes: clamp(a.verdict.allocator_free_growth()),
            file_growth_bytes: clamp(a.verdict.file_growth()),
            epochs: a.verdict.epochs,
            too_few_samples: a.too_few_samples(),
        },
        flamegraph: report
            .flamegraph
            .as_ref()
            .filter(|f| !matches!(f.drawn, super::Drawn::NotWritten(_)))
            .map(|f| f.path.display().to_string()),
        descendant_traces: report
            .descendants
            .iter()
            .map(|d| JsonDescendant {
                path: d.trace.path.display().to_string(),
                pid: d.trace.pid,
                forked_from: d.trace.forked_from,
                started_beside: d.trace.started_beside,
                cmdline: &d.trace.cmdline,
                rank: d.trace.rank.map(JsonRank::from),
                finding: d.finding.as_ref().map(|f| JsonFinding {
                    kind: f.kind.name(),
                    summary: &f.summary,
                    line: f.line.as_deref(),
                    growth_bytes_per_epoch: f.bytes_per_epoch,
                }),
                too_few_samples: d.too_few_samples,
                unfinished: d.unfinished,
            })
            .collect(),
        findings: crate::findings::by_growth(&report.descendants)
            .into_iter()
            .map(|d| d.trace.path.display().to_string())
            .collect(),
        other_runs_traces: report.other_runs,
    };
    serde_json::to_value(json).unwrap_or(serde_json::Value::Null)
}

/// The report as one line of JSON.
pub fn render(report: &Report<'_>) -> String {
    let mut text = value(report).to_string();
    text.push('\n');
    text
}
