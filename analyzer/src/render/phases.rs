//! A job whose epochs two DataLoader loops cut in turn: training, then
//! fine-tuning or testing on another loader, whose passes close the epochs
//! once the training loop stopped (see [`Trace::phase_change`]). The last
//! phase is analysed as the job's epochs are; the one before, from its own
//! prefix of the trace, apart: a leak of the training alone would
//! otherwise read as a pile that stopped once testing began, and the epoch
//! that held the end of one loop and the start of the other would count
//! as one of either.

use std::path::Path;

use super::ByLine;
use crate::analysis::{Analysis, NoiseFloor, VerdictKind, STACKS_BY_LINE};
use crate::format::bytes;
use crate::symbolize::Symbolizer;
use crate::trace::{load, LoadOptions, Trace};

/// The phase of the job that a report does not show.
#[derive(Debug)]
pub struct OtherPhase {
    /// The first epoch the last phase's loop holds whole.
    pub last_phase_from: u32,
    /// The report shows the earlier phase (the last found no leak where it did).
    pub shown_is_earlier: bool,
    pub analysis: Analysis,
}

/// The analysis a report of `trace` (read from `path`) shows, and the
/// other phase's when the job had two: the last phase's, unless it found
/// no leak and the earlier one did.
pub fn analyze(
    path: &Path,
    trace: &Trace,
    floor: NoiseFloor,
    symbolizer: &mut Symbolizer<'_>,
) -> (Analysis, Option<OtherPhase>) {
    let last = super::analyze_by_line(trace, floor, symbolizer);
    let Some((last_phase_from, earlier)) = earlier_phase(path, trace, floor, symbolizer) else {
        return (last, None);
    };
    let shown_is_earlier = last.verdict.kind != VerdictKind::HeapLeak && earlier.verdict.kind == VerdictKind::HeapLeak;
    let (shown, other) = if shown_is_earlier { (earlier, last) } else { (last, earlier) };
    (shown, Some(OtherPhase { last_phase_from, shown_is_earlier, analysis: other }))
}

/// The earlier phase's analysis, over its epochs up to the one before the
/// epoch that held the end of its loop and the start of the next.
fn earlier_phase(
    path: &Path,
    trace: &Trace,
    floor: NoiseFloor,
    symbolizer: &mut Symbolizer<'_>,
) -> Option<(u32, Analysis)> {
    let from = trace.phase_change()?;
    let until = trace.snapshot_of(from.checked_sub(2)?)?;
    let prefix = load(path, &LoadOptions { until: Some(until), ..LoadOptions::default() }).ok()?;
    Some((from, super::analyze_by_line(&prefix, floor, symbolizer)))
}

/// What the verdict adds of the other phase.
pub fn words(trace: &Trace, other: &OtherPhase, symbolizer: &mut Symbolizer<'_>) -> String {
    let a = &other.analysis;
    let found = match a.verdict.kind {
        VerdictKind::HeapLeak => ByLine::rank(trace, a, symbolizer, STACKS_BY_LINE)
            .culprit(trace)
            .map(|culprit| {
                format!("{} keeps about {}/epoch alive", culprit.named(), bytes(culprit.growth_bytes_per_epoch))
            })
            .unwrap_or_else(|| "a leak".to_string()),
        VerdictKind::TooFewEpochs => "too few epochs to tell".to_string(),
        VerdictKind::NoGrowth => "no leak".to_string(),
        kind => format!("the verdict {}", kind.name()),
    };
    let mixed = other.last_phase_from.saturating_sub(1);
    if other.shown_is_earlier {
        format!(
            "; these are the epochs before epoch {mixed}, cut by the DataLoader loop that stopped then: from epoch {mixed} another loop's passes close the epochs (fine-tuning or testing on another loader), and over those from epoch {}, analysed apart: {found}",
            other.last_phase_from
        )
    } else {
        format!(
            "; these are the epochs from epoch {}, cut by the DataLoader loop that took them over at epoch {mixed} (fine-tuning or testing on another loader); over the epochs before, cut by the loop that stopped then and analysed apart: {found}",
            other.last_phase_from
        )
    }
}
