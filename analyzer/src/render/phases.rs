//! A job whose epochs DataLoader loops cut in turn: training, then
//! fine-tuning or testing on another loader, whose passes close the epochs
//! once the loop before stopped (see [`Trace::phase_starts`]). Each phase
//! is analysed apart, the last as the job's epochs are, each earlier one
//! from its own prefix of the trace: a leak of the training alone would
//! otherwise read as a pile that stopped once testing began, and the epoch
//! that held the end of one loop and the start of the next would count as
//! one of either.

use std::path::Path;

use super::ByLine;
use crate::analysis::{Analysis, EpochSource, NoiseFloor, VerdictKind, STACKS_BY_LINE};
use crate::format::bytes;
use crate::symbolize::Symbolizer;
use crate::trace::{load, LoadOptions, Trace};

/// Phases a report looks at, the last ones: a job makes a handful.
const PHASES: usize = 8;

/// One phase of a job of several, as the report tells of it.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Its first whole epoch (the trace's first for the first phase).
    pub from: u32,
    /// Its last epoch; `None` for the last phase, which runs to the end.
    pub to: Option<u32>,
    pub verdict: VerdictKind,
    /// Its leak's line and growth per epoch, when it found one.
    pub leak: Option<(String, u64)>,
    /// The report shows this phase's analysis.
    pub shown: bool,
}

/// The analysis a report of `trace` (read from `path`) shows, and the
/// job's phases when it had several (none otherwise): the last phase's
/// analysis, unless it found no leak and an earlier one did (the latest),
/// or, in a worker following its parent's epochs, it had too few epochs to
/// tell and an earlier one had enough.
pub fn analyze(
    path: &Path,
    trace: &Trace,
    floor: NoiseFloor,
    symbolizer: &mut Symbolizer<'_>,
) -> (Analysis, Vec<Phase>) {
    let last = super::analyze_by_line(trace, floor, symbolizer);
    let starts = trace.phase_starts();
    if starts.is_empty() {
        return (last, Vec::new());
    }
    // Latest first: (first whole epoch, last epoch, analysis).
    let mut analyses = vec![(*starts.last().unwrap_or(&0), None, last)];
    // A forked worker's first epoch is its parent's at its fork.
    let first_epoch = trace.snapshots.first().map_or(0, |s| s.epoch);
    for (k, &next) in starts.iter().enumerate().rev().take(PHASES - 1) {
        let from = if k == 0 { first_epoch } else { starts[k - 1] };
        // Up to the epoch before the one that held the end of its loop.
        let Some(to) = next.checked_sub(2).filter(|&to| to >= from) else { continue };
        let Some(until) = trace.snapshot_of(to) else { continue };
        let Ok(prefix) = load(path, &LoadOptions { until: Some(until), ..LoadOptions::default() }) else { continue };
        analyses.push((from, Some(to), super::analyze_by_line(&prefix, floor, symbolizer)));
    }
    let leaks = |a: &Analysis| a.verdict.kind == VerdictKind::HeapLeak;
    // The latest phase with a leak; else, in a worker following its
    // parent's epochs, the latest with epochs enough to tell: a persistent
    // worker of the training loader idles through the fine-tuning, which
    // it follows in one epoch. A process's own phase of too few epochs (a
    // short test at the end) is what its verdict says, not another's.
    let told = |a: &Analysis| a.verdict.kind != VerdictKind::TooFewEpochs;
    let follows_parent = matches!(analyses[0].2.epochs_from, EpochSource::ParentsEpochs { .. });
    let shown = analyses
        .iter()
        .position(|(_, _, a)| leaks(a))
        .or_else(|| analyses.iter().position(|(_, _, a)| follows_parent && told(a)))
        .unwrap_or(0);
    let mut phases: Vec<Phase> = analyses
        .iter()
        .enumerate()
        .map(|(i, (from, to, a))| Phase {
            from: *from,
            to: *to,
            verdict: a.verdict.kind,
            leak: leaks(a).then(|| leak_of(trace, a, symbolizer)).flatten(),
            shown: i == shown,
        })
        .collect();
    phases.reverse();
    (analyses.swap_remove(shown).2, phases)
}

/// The line a leak's verdict names, and its growth per epoch.
fn leak_of(trace: &Trace, analysis: &Analysis, symbolizer: &mut Symbolizer<'_>) -> Option<(String, u64)> {
    let ranked = ByLine::rank(trace, analysis, symbolizer, STACKS_BY_LINE);
    let culprit = ranked.culprit(trace)?;
    Some((culprit.named().into_owned(), culprit.growth_bytes_per_epoch))
}

/// What the verdict adds of the other phases of a job of several.
pub fn words(phases: &[Phase]) -> String {
    let span = |phase: &Phase| match phase.to {
        Some(to) => format!("epochs {} to {to}", phase.from),
        None => format!("the epochs from {}", phase.from),
    };
    let Some(shown) = phases.iter().find(|phase| phase.shown) else { return String::new() };
    let others: Vec<String> = phases
        .iter()
        .filter(|phase| !phase.shown)
        .map(|phase| {
            let found = match (&phase.leak, phase.verdict) {
                (Some((line, growth)), _) => format!("{line} keeps about {}/epoch alive", bytes(*growth)),
                (None, VerdictKind::TooFewEpochs) => "too few epochs to tell".to_string(),
                (None, VerdictKind::NoGrowth) => "no leak".to_string(),
                (None, kind) => format!("the verdict {}", kind.name()),
            };
            format!("over {}, {found}", span(phase))
        })
        .collect();
    format!(
        "; these are {}: {} DataLoader loops cut the job's epochs in turn (training, then fine-tuning or testing on another loader), each analysed apart, and the epoch between two held the end of one and the start of the next; {}",
        span(shown),
        phases.len(),
        others.join("; ")
    )
}

/// The note of `epoch` in the epoch table of a job of several phases: the
/// epoch between two, or one of a phase not shown (but the exit's).
pub fn table_note(phases: &[Phase], epoch: u32, ends_the_process: bool) -> Option<&'static str> {
    let shown = phases.iter().find(|phase| phase.shown)?;
    if phases.iter().skip(1).any(|phase| epoch + 1 == phase.from) {
        return Some("  (the end of one DataLoader loop, the start of the next)");
    }
    let in_shown = epoch >= shown.from && shown.to.is_none_or(|to| epoch <= to);
    (!in_shown && !ends_the_process).then_some("  (another DataLoader loop's, analysed apart)")
}
