//! Everything the user sees: the text report, the JSON and the flamegraphs.
//!
//! [`Report`] gathers the analysis with the symbolized stacks of what is
//! shown; [`text`] and [`json`] only format it.

mod explain;
pub mod flame;
pub mod json;
mod names;
pub mod phases;
pub mod text;

use std::borrow::Cow;
use std::path::PathBuf;

use crate::analysis::{
    analyze, births_that_count, with_caller, Analysis, Culprit, EpochSource, KnownAs, NoiseFloor, Pile, Survivor,
    Suspect, VerdictKind, STACKS_BY_LINE,
};
use crate::lines::{self, LeakLine, SHARE_OF_A_LINE};
use crate::sites::SiteKeys;
use crate::symbolize::{Frame, Symbolizer};
use crate::trace::{Callee, Descendant, Memory, Trace};

/// A suspect with its stack symbolized (trimmed, innermost first).
#[derive(Debug, Clone)]
pub struct ShownSuspect {
    pub rank: usize,
    pub suspect: Suspect,
    pub frames: Vec<Frame>,
    /// Why the suspect's memory is what it is, when the report knows better
    /// than its stack (see [`explain`]).
    pub explanation: Option<&'static explain::Explanation>,
    /// The tracer's frame limit, when the stack was cut at it (see
    /// [`frame_limit_reached`]).
    pub cut_at_frame_limit: Option<usize>,
}

impl ShownSuspect {
    /// The first frame in the program's own code.
    pub fn own_frame(&self) -> Option<&Frame> {
        self.frames.iter().find(|f| f.own_code)
    }
}

/// The flamegraph written along with the report.
#[derive(Debug, Clone)]
pub struct FlamegraphInfo {
    pub path: PathBuf,
    pub drawn: Drawn,
}

/// What the report's flamegraph shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drawn {
    /// The suspects, each by its growth.
    Suspects,
    /// No suspect: the stacks below the noise floor that grow the most.
    BelowFloor,
    /// Nothing to draw: a placeholder frame.
    Nothing,
    /// The default path could not be written: why, and what to do.
    NotWritten(String),
}

/// The complete result of `analyzer report`.
#[derive(Debug)]
pub struct Report<'t> {
    pub trace: &'t Trace,
    pub analysis: &'t Analysis,
    /// The best suspects symbolized, in rank order: those shown (the top
    /// N) and the others the lines sum.
    pub symbolized: Vec<ShownSuspect>,
    /// How many of them are shown.
    top: usize,
    /// The symbolized suspects summed by their line of own code, ranked.
    pub lines: Vec<LeakLine>,
    /// When there is no suspect but growth below the noise floor, the
    /// stacks below it that grow the most, symbolized.
    pub below_floor: Vec<ShownSuspect>,
    /// Those stacks summed by their line of own code, ranked; the ranks
    /// are places in `below_floor`.
    pub below_floor_lines: Vec<LeakLine>,
    pub verdict_message: String,
    pub flamegraph: Option<FlamegraphInfo>,
    /// Problems met along the way (one line each).
    pub warnings: Vec<String>,
    /// Traces of the process's descendants found beside its trace, with
    /// what they found.
    pub descendants: Vec<crate::findings::DescendantReport>,
    /// Traces beside it named like descendants' that other runs left.
    pub other_runs: usize,
    /// When this process is a wrapper (see [`wrapped_program`]): the place
    /// in `descendants` of the program it ran.
    pub program: Option<usize>,
    /// The phases of a job whose epochs several DataLoader loops cut in
    /// turn, each analysed apart (none for one loop).
    pub phases: Vec<phases::Phase>,
}

/// The innermost frame shown for a stack that made an anonymous mapping.
pub const MAPPING_FRAME: &str = "[anonymous mmap]";
/// The first frame shown of a shared-memory mapping's stack.
pub const SHARED_MAPPING_FRAME: &str = "[shared memory mmap]";

/// The frames of a stack id, or one placeholder frame when the trace lacks
/// it; a mapping stack starts with [`MAPPING_FRAME`].
pub fn stack_frames(trace: &Trace, symbolizer: &mut Symbolizer<'_>, stack: u32) -> Vec<Frame> {
    let Some(s) = trace.stacks.get(stack) else {
        return vec![placeholder(format!("(unknown stack {stack})"))];
    };
    let mut frames = if s.native.is_empty() && s.python.is_empty() { Vec::new() } else { symbolizer.stack(&s) };
    match s.memory {
        Memory::Heap => {}
        Memory::Mapped => frames.insert(0, placeholder(MAPPING_FRAME.to_string())),
        Memory::Shared => frames.insert(0, placeholder(SHARED_MAPPING_FRAME.to_string())),
    }
    if let Some(node) = s.broken_at {
        frames.push(placeholder(format!("(stack cut: node {node} is missing from the trace)")));
    }
    if frames.is_empty() {
        frames.push(placeholder(format!("(empty stack {stack})")));
    }
    frames
}

/// The tracer's frame limit (its `max_frames` setting) when stack `stack`
/// holds that many native frames and does not end where a process or
/// thread starts (`frames`, symbolized, outermost last): the tracer cut it
/// there, and its outer frames were never recorded. A stack of exactly
/// that many frames may be whole.
fn frame_limit_reached(trace: &Trace, stack: u32, frames: &[Frame]) -> Option<usize> {
    const STARTS: &[&str] = &["_start", "start_thread", "clone", "clone3", "__clone", "__clone3"];
    let limit: usize = trace.process.setting(trace_format::MAX_FRAMES_SETTING)?.parse().ok()?;
    let whole = frames.last().is_some_and(|outermost| STARTS.contains(&outermost.function.as_str()));
    (trace.stacks.get(stack)?.native.len() >= limit && !whole).then_some(limit)
}

fn placeholder(function: String) -> Frame {
    Frame::named(0, function)
}

/// Warnings about the trace itself (beyond how it ended).
pub fn trace_warnings(trace: &Trace) -> Vec<String> {
    trace.stacks.conflict_warning().into_iter().collect()
}

impl<'t> Report<'t> {
    /// Symbolizes the suspects, sums them by line, keeps the top `top` to
    /// show and words the verdict.
    /// Descendants' traces are analysed with the same `floor`.
    pub fn build(
        trace: &'t Trace,
        analysis: &'t Analysis,
        symbolizer: &mut Symbolizer<'_>,
        top: usize,
        floor: NoiseFloor,
    ) -> Report<'t> {
        let ranked = ByLine::rank(trace, analysis, symbolizer, top.max(STACKS_BY_LINE));
        let beside = crate::trace::descendant_traces(&trace.path);
        let descendants = crate::findings::look_at(beside.traces, floor);
        let program = wrapped_program(trace, analysis, &descendants);
        let verdict_message = match program {
            Some(program) => wrapper_verdict(trace, analysis, &descendants[program], &descendants),
            None => analysis.verdict_message(ranked.culprit(trace)) + &descendants_found(analysis, &descendants),
        };
        let ByLine { symbolized, lines, below_floor, below_floor_lines } = ranked;
        Report {
            trace,
            analysis,
            symbolized,
            top,
            lines,
            below_floor,
            below_floor_lines,
            verdict_message,
            flamegraph: None,
            warnings: Vec::new(),
            descendants,
            other_runs: beside.other_runs,
            program,
            phases: Vec::new(),
        }
    }

    /// The verdict's kind: this process's own, or, for a wrapper, that of
    /// the program it ran.
    pub fn verdict_kind(&self) -> VerdictKind {
        match self.program {
            Some(program) => {
                let program = &self.descendants[program];
                crate::findings::program_finding(program, &self.descendants)
                    .and_then(|found| found.finding.as_ref().map(|f| f.kind))
                    .or(program.verdict)
                    .unwrap_or(self.analysis.verdict.kind)
            }
            None => self.analysis.verdict.kind,
        }
    }

    /// Whether `kind` is among the kinds found in the process tree the
    /// report cites: its verdict's (see [`Report::verdict_kind`]) and the
    /// findings of the traces beside it, its descendants' and those of
    /// processes started beside it.
    pub fn found(&self, kind: VerdictKind) -> bool {
        self.verdict_kind() == kind
            || self.descendants.iter().any(|d| d.finding.as_ref().is_some_and(|f| f.kind == kind))
    }

    /// Whether this process, or a trace beside it, was sampled too sparsely
    /// to tell its growth from chance.
    pub fn too_few_samples(&self) -> bool {
        self.analysis.too_few_samples() || self.descendants.iter().any(|d| d.too_few_samples)
    }
}

/// The program a wrapper ran: a process with too few epochs of its own,
/// cut by time alone (`timeout`, `/usr/bin/time`, a launcher script, a
/// launcher that does its work in processes it starts) whose descendant, the one
/// [`program_trace`](crate::findings::program_trace) picks, has the epochs
/// an analysis needs. Its place in `descendants`.
fn wrapped_program(
    trace: &Trace,
    analysis: &Analysis,
    descendants: &[crate::findings::DescendantReport],
) -> Option<usize> {
    if !may_be_a_wrapper(trace, analysis) {
        return None;
    }
    let program = crate::findings::program_trace(descendants).filter(|d| d.verdict.is_some())?;
    descendants.iter().position(|d| std::ptr::eq(d, program))
}

/// Whether the process of `trace` may be a wrapper: it ran too few
/// epochs, all time slices. A process that cut epochs by its own marks or
/// DataLoader passes is the program, however few of them it ran (or the
/// analysis could use), and so is one that made DataLoader passes that
/// never repeated; a forkserver only forks the program's workers.
pub fn may_be_a_wrapper(trace: &Trace, analysis: &Analysis) -> bool {
    analysis.verdict.kind == VerdictKind::TooFewEpochs
        && analysis.epochs_from == EpochSource::Program
        && !analysis.passes_unrepeated
        && !crate::findings::is_multiprocessing_helper(&trace.process.cmdline, trace.process.forked_from)
}

/// The verdict on a wrapper: that it is one, and the verdict of the
/// program it ran, whose trace has its own report; where the program found
/// nothing in its own process and a process it forked did (a rank's
/// DataLoader worker), that process's finding too.
fn wrapper_verdict(
    trace: &Trace,
    analysis: &Analysis,
    program: &crate::findings::DescendantReport,
    descendants: &[crate::findings::DescendantReport],
) -> String {
    let name = std::path::Path::new(&trace.process.exe)
        .file_name()
        .map_or_else(|| trace.process.exe.clone(), |name| name.to_string_lossy().into_owned());
    let own = analysis.snapshots;
    let path = program.trace.path.display();
    let rank = program.trace.rank.map(|rank| format!("{}, ", rank_words(&rank, program.trace.forked_from.is_some())));
    let found = program.finding.as_ref().map_or_else(
        || program.verdict.unwrap_or(VerdictKind::TooFewEpochs).name().to_string(),
        crate::findings::Finding::words,
    );
    let stands_for = format!(
        "this process ({name}) is a wrapper: it ran {own} epoch{} of its own, too few to analyse, and of the processes it started, {path} ({}{} epochs) stands for it, whose own verdict is {found}",
        if own == 1 { "" } else { "s" },
        rank.unwrap_or_default(),
        program.snapshots,
    );
    let found_in = crate::findings::program_finding(program, descendants);
    match found_in.filter(|d| !std::ptr::eq(*d, program)).and_then(|d| Some((d, d.finding.as_ref()?))) {
        Some((forked, finding)) => format!(
            "{stands_for}, while a process it forked, {}, found {}; analyzer report {} gives that process's report",
            descendant_named(&forked.trace),
            finding.words(),
            forked.trace.path.display()
        ),
        None => format!("{stands_for}; analyzer report {path} gives that process's report"),
    }
}

/// A process's rank in words: `rank 1 of 2`, or `rank 1` when the
/// launcher did not say how many there are. A forked process (a DataLoader
/// or Pool worker) has its parent's rank in its environment: it is `a
/// child of rank 1 of 2`, not the rank.
pub fn rank_words(rank: &trace_format::Rank, forked: bool) -> String {
    let child = if forked { "a child of " } else { "" };
    match rank.world_size {
        Some(size) => format!("{child}rank {} of {size}", rank.rank),
        None => format!("{child}rank {}", rank.rank),
    }
}

/// A descendant's trace by its path, with its rank when it has one:
/// `./trace.bin.6184 (rank 1 of 2)`.
pub fn descendant_named(descendant: &Descendant) -> String {
    match &descendant.rank {
        Some(rank) => {
            format!("{} ({})", descendant.path.display(), rank_words(rank, descendant.forked_from.is_some()))
        }
        None => descendant.path.display().to_string(),
    }
}

/// What a verdict that found nothing in this process adds when its
/// descendants found something in theirs: "no leak found" is of this
/// process alone (a Pool's or DataLoader's workers that leak).
fn descendants_found(analysis: &Analysis, descendants: &[crate::findings::DescendantReport]) -> String {
    if !matches!(analysis.verdict.kind, VerdictKind::NoGrowth | VerdictKind::TooFewEpochs) {
        return String::new();
    }
    match descendants.iter().filter(|d| d.found_something(false)).count() {
        0 => String::new(),
        1 => "; this is of this process alone: one of its descendants found more in its own trace (see the note below)"
            .to_string(),
        n => format!(
            "; this is of this process alone: {n} of its descendants found more in their own traces (see the note below)"
        ),
    }
}

/// The leak analysis of `trace`, where a line of the program's own code
/// makes suspects of the stacks that pile up with it (see
/// [`piling_up_with_their_line`]).
pub fn analyze_by_line(trace: &Trace, floor: NoiseFloor, symbolizer: &mut Symbolizer<'_>) -> Analysis {
    let mut keys = SiteKeys::new(trace, symbolizer);
    let mut analysis = analyze(trace, floor, |stack| keys.key(stack));
    let with_their_line = piling_up_with_their_line(trace, &analysis, symbolizer);
    analysis.promote(&with_their_line);
    analysis.promote_steady_growth();
    if analysis.verdict.kind == VerdictKind::HeapLeak && every_suspect_levels_off(trace, &analysis, symbolizer) {
        analysis.verdict.kind = VerdictKind::BoundedCache;
    }
    // The sites a verdict without suspects speaks of beside its culprit.
    let spoken_of = analysis
        .stopped
        .map(|stopped| stopped.largest.0)
        .into_iter()
        .chain(analysis.recent_start().map(|s| s.stack))
        .chain(analysis.now_and_then().map(|s| s.stack));
    let spoken_of = spoken_of.filter(|_| analysis.verdict.kind == VerdictKind::NoGrowth);
    let filled = analysis
        .largest_live
        .map(|(stack, _)| stack)
        .filter(|_| analysis.verdict.kind == VerdictKind::GrowthOutsideHeap);
    let spoken_of: Vec<u32> = spoken_of.chain(filled).collect();
    for site in spoken_of {
        analysis.site_names.insert(site, site_named(trace, symbolizer, site));
    }
    analysis
}

/// Whether every suspect's memory is a cache or buffer a library keeps up
/// to a bound (see [`explain::Explanation::levels_off`]): a healthy job's
/// DistributedDataParallel records each all-reduce until the ring buffer
/// is full, one fed new shapes compiles kernels until the cache is.
/// Symbolized in rank order, up to the first that is not.
fn every_suspect_levels_off(trace: &Trace, analysis: &Analysis, symbolizer: &mut Symbolizer<'_>) -> bool {
    analysis.suspects.iter().all(|suspect| {
        let frames = stack_frames(trace, symbolizer, suspect.stack);
        explain::explanation(trace, suspect, &frames).is_some_and(|explanation| explanation.levels_off)
    })
}

/// The settled birth epochs (as `settled` tells them) of `survivors` that
/// count to a pile (see [`births_that_count`]), in order.
fn settled_births_that_count<'a>(
    survivors: impl Iterator<Item = &'a Survivor>,
    settled: impl Fn(u32) -> bool,
) -> Vec<u32> {
    births_that_count(survivors.filter(|s| settled(s.birth_epoch)).map(|s| (s.birth_epoch, s.bytes)))
}

/// The stacks kept below the noise floor, or with survivors of too few
/// settled epochs, that pile up with their line of own code:
/// * those below the floor of a line whose stacks below it keep more than
///   the floor together: a leak of many small objects made along many
///   native paths under one line (a graph kept with its autograd nodes,
///   `total_loss += loss`) has each stack below the floor of a large
///   process;
/// * those of a line that, with its suspects and its other stacks, keeps
///   more than the floor and leaves survivors of enough settled epochs
///   (see [`Analysis::pile`]), with the line's stacks
///   below the floor: a helper called from one caller in some epochs and
///   from another in the others leaves a stack for each caller, each with
///   survivors of some of the epochs;
/// * those below the floor of a line with suspects;
///
/// each keeping a [`SHARE_OF_A_LINE`] of what the line keeps at least but
/// for the first kind.
fn piling_up_with_their_line(trace: &Trace, analysis: &Analysis, symbolizer: &mut Symbolizer<'_>) -> Vec<u32> {
    let below = &analysis.below_floor.largest;
    let few = &analysis.few_settled_epochs;
    // Suspects matter only to the lines of stacks below the floor or with
    // too few epochs alone.
    let suspects = if few.is_empty() && below.is_empty() {
        &[][..]
    } else {
        &analysis.suspects[..analysis.suspects.len().min(STACKS_BY_LINE)]
    };
    let kept = symbolize(trace, symbolizer, suspects.iter().chain(below).chain(few));
    let (below_from, few_from) = (suspects.len(), suspects.len() + below.len());
    let settled = |birth: u32| analysis.settled.is_some_and(|(lo, hi)| (lo..=hi).contains(&birth));
    let mut piling_up = Vec::new();
    for line in by_line(&kept) {
        let indices = line.ranks.iter().map(|rank| rank - 1);
        let below_stacks = indices.clone().filter(|&i| (below_from..few_from).contains(&i));
        let few_stacks = indices.clone().filter(|&i| i >= few_from);
        let below_growth: u64 = below_stacks.clone().map(|i| kept[i].suspect.growth_bytes_per_epoch).sum();
        let survivors = || indices.clone().flat_map(|i| &kept[i].suspect.survivors);
        let births = settled_births_that_count(survivors(), settled);
        let newest = survivors().map(|s| s.birth_epoch).max();
        let piles_up_together = few_stacks.clone().next().is_some()
            && line.growth_bytes_per_epoch > analysis.noise_floor
            && births.first().zip(births.last()).zip(newest).is_some_and(|((&first, &last), newest)| {
                analysis.pile(births.len(), first, last, newest) == Pile::Growing
            });
        // A few bytes an epoch beside the line's MiB are no part of its
        // leak (a parser's cache its first call made), unless the line's
        // leak is many such stacks.
        let part_of_its_leak =
            |&i: &usize| kept[i].suspect.growth_bytes_per_epoch * SHARE_OF_A_LINE >= line.growth_bytes_per_epoch;
        let leaking = line.ranks.iter().any(|&rank| rank <= below_from);
        if below_growth > analysis.noise_floor {
            piling_up.extend(below_stacks.map(|i| kept[i].suspect.stack));
        } else if piles_up_together || leaking {
            // The rest of its leak: a tensor's bookkeeping beside its data.
            piling_up.extend(below_stacks.filter(part_of_its_leak).map(|i| kept[i].suspect.stack));
        }
        // A stack whose pile stopped is part of the leak only where the
        // line's other stacks began after it (the helper's first caller
        // for the first epochs, another since): beside a stack that piles
        // up from the first epoch, it is a part that stopped.
        let stopped = |&i: &usize| analysis.stopped_with_line.contains(&kept[i].suspect.stack);
        let first_birth = |i: usize| kept[i].suspect.survivors.iter().map(|s| s.birth_epoch).find(|&b| settled(b));
        let others_first = indices.clone().filter(|i| !stopped(i)).filter_map(first_birth).min();
        let began_before_the_others =
            |i: &usize| !stopped(i) || first_birth(*i).zip(others_first).is_none_or(|(own, others)| own < others);
        if piles_up_together {
            piling_up.extend(
                few_stacks.filter(part_of_its_leak).filter(began_before_the_others).map(|i| kept[i].suspect.stack),
            );
        }
    }
    piling_up
}

/// `suspects` with their stacks symbolized, ranked from 1 in their order.
fn symbolize<'a>(
    trace: &Trace,
    symbolizer: &mut Symbolizer<'_>,
    suspects: impl Iterator<Item = &'a Suspect>,
) -> Vec<ShownSuspect> {
    suspects
        .enumerate()
        .map(|(i, s)| {
            let frames = stack_frames(trace, symbolizer, s.stack);
            let explanation = explain::explanation(trace, s, &frames);
            let cut_at_frame_limit = frame_limit_reached(trace, s.stack, &frames);
            ShownSuspect { rank: i + 1, suspect: s.clone(), frames, explanation, cut_at_frame_limit }
        })
        .collect()
}

/// The line a verdict on `analysis` names, by its function and where it
/// is, with its growth per epoch; `None` when there are no suspects nor
/// growth below the floor.
pub fn top_line(trace: &Trace, analysis: &Analysis, symbolizer: &mut Symbolizer<'_>) -> Option<(String, u64)> {
    let ranked = ByLine::rank(trace, analysis, symbolizer, STACKS_BY_LINE);
    ranked.culprit(trace).map(|culprit| (culprit.named().into_owned(), culprit.growth_bytes_per_epoch))
}

/// The suspects symbolized and summed by their line of own code, and the
/// stacks below the noise floor when the heap grew only below it.
struct ByLine {
    symbolized: Vec<ShownSuspect>,
    lines: Vec<LeakLine>,
    below_floor: Vec<ShownSuspect>,
    below_floor_lines: Vec<LeakLine>,
}

impl ByLine {
    /// The best `suspects` of `analysis`.
    fn rank(trace: &Trace, analysis: &Analysis, symbolizer: &mut Symbolizer<'_>, suspects: usize) -> ByLine {
        let symbolized = symbolize(trace, symbolizer, analysis.suspects.iter().take(suspects));
        let lines = by_line(&symbolized);
        let below_floor = if analysis.growth_below_floor() {
            symbolize(trace, symbolizer, analysis.below_floor.largest.iter())
        } else {
            Vec::new()
        };
        let below_floor_lines = by_line(&below_floor);
        ByLine { symbolized, lines, below_floor, below_floor_lines }
    }

    /// The line the verdict names: the top line of the suspects, or of the
    /// stacks below the floor when there are none. A line whose suspects
    /// are all a library's cache that stops at its bound (see
    /// [`explain::Explanation::levels_off`]) gives way to the first that
    /// is not: a leak growing slower than the caches beside it is the leak.
    fn culprit<'a>(&'a self, trace: &Trace) -> Option<Culprit<'a>> {
        let levels_off = |line: &&LeakLine| {
            line.ranks.iter().all(|&rank| self.symbolized[rank - 1].explanation.is_some_and(|e| e.levels_off))
        };
        let leak = self.lines.iter().find(|line| !levels_off(line));
        match (leak.or(self.lines.first()), self.below_floor_lines.first()) {
            (Some(line), _) => Some(culprit(line, &self.symbolized, trace)),
            (None, Some(line)) => Some(culprit(line, &self.below_floor, trace)),
            (None, None) => None,
        }
    }
}

fn by_line(suspects: &[ShownSuspect]) -> Vec<LeakLine> {
    lines::group(suspects.iter().map(|s| (s.rank, &s.suspect, s.own_frame())))
}

impl Report<'_> {
    /// The suspects shown (the top N), in rank order.
    pub fn shown(&self) -> &[ShownSuspect] {
        &self.symbolized[..self.top.min(self.symbolized.len())]
    }
}

/// The top line as the verdict names it: by its function, long C++ names
/// shortened as the text report's frames are (see [`names::shortened`]),
/// and where it is, or for a suspect without own code by its innermost
/// frame; native code Python called with the Python line that called it,
/// and a native helper of the program's own with its caller, when every
/// stack of the line came from that one.
fn culprit<'a>(line: &'a LeakLine, suspects: &'a [ShownSuspect], trace: &Trace) -> Culprit<'a> {
    let best = &suspects[line.ranks[0] - 1];
    let frame = line.frame.as_ref().or(best.frames.first());
    let shown = |f: &Frame| Cow::Owned(shown(f));
    let caller = line_caller(line, suspects, trace);
    Culprit {
        name: frame.map_or(Cow::Borrowed("the top suspect"), shown),
        called_from: caller.map(shown),
        growth_bytes_per_epoch: line.growth_bytes_per_epoch,
        live_bytes: line.live_bytes,
        suspects: line.ranks.len(),
        memory: line.memory,
        known_as: line_known_as(line, suspects).map(|e| KnownAs {
            what: e.what,
            rank: best.rank,
            incidental: e.incidental_site,
        }),
        born: line
            .ranks
            .iter()
            .flat_map(|rank| &suspects[rank - 1].suspect.survivors)
            .map(|s| (s.birth_epoch, s.bytes))
            .collect(),
        growth_since: line.growth_span.since,
    }
}

/// What `line`'s memory is, as its best suspect's explanation says, when
/// the suspects it explains keep half of the line's growth at least: a
/// pymalloc arena that a line leaking tensors happened to open is not what
/// that line keeps.
fn line_known_as(line: &LeakLine, suspects: &[ShownSuspect]) -> Option<&'static explain::Explanation> {
    let explanation = suspects[line.ranks[0] - 1].explanation?;
    let explained: u64 = line
        .ranks
        .iter()
        .map(|&rank| &suspects[rank - 1])
        .filter(|s| s.explanation.is_some_and(|e| e.what == explanation.what))
        .map(|s| s.suspect.growth_bytes_per_epoch)
        .sum();
    (2 * explained >= line.growth_bytes_per_epoch).then_some(explanation)
}

/// The line that called `line`'s frame, when every stack of the line came
/// from it: the Python line that called native code, or the caller of a
/// native helper of the program's own reached from several callers.
pub fn line_caller<'a>(line: &'a LeakLine, suspects: &'a [ShownSuspect], trace: &Trace) -> Option<&'a Frame> {
    let frame = line.frame.as_ref().or(suspects[line.ranks[0] - 1].frames.first());
    let line_stacks = || line.ranks.iter().map(|&rank| suspects[rank - 1].frames.as_slice());
    // A helper of a C library called from three Python lines that all keep
    // what they get is the leak itself: no one line is named.
    common_caller(line_stacks(), python_caller, |caller| (caller.file.clone(), caller.line))
        .or_else(|| helper_caller(frame?, line_stacks(), trace))
}

/// A frame as the verdict names it: its function, long C++ names shortened
/// (see [`names::shortened`]), and where it is.
fn shown(frame: &Frame) -> String {
    frame.located_as(&names::shortened(&frame.function))
}

/// A site as the verdict names it: by its first own-code frame, or its
/// innermost, with the Python line that called it (see [`culprit`]).
fn site_named(trace: &Trace, symbolizer: &mut Symbolizer<'_>, stack: u32) -> String {
    let frames = stack_frames(trace, symbolizer, stack);
    let name = frames.iter().find(|f| f.own_code).or(frames.first()).map_or("a site".to_string(), shown);
    with_caller(&name, python_caller(&frames).map(shown).as_deref()).into_owned()
}

/// The own Python frame that called the first own-code frame of `frames`
/// (innermost first), when that one is native (the Python line that called
/// the user's C code) or Python of another file than the caller's (a
/// model's `forward` in a module of its own, run by the loop that keeps
/// what it makes).
fn python_caller(frames: &[Frame]) -> Option<&Frame> {
    let mut own = frames.iter().filter(|f| f.own_code);
    let first = own.next()?;
    own.find(|f| f.python && (!first.python || f.file != first.file))
}

/// The caller of `own`, a function of the program's own that the trace
/// reaches from several callers (a helper allocating for three functions,
/// one of which keeps what it gets), when every stack of the line
/// (`stacks`) came through that one: the line the leak came through, which
/// holds it as much as the helper does. A helper leaking through each of
/// its callers is the leak itself. A native helper's caller is the native
/// frame outside it, a Python helper's the Python frame outside it (a
/// Python helper of another file's caller is [`python_caller`]).
fn helper_caller<'a>(own: &Frame, stacks: impl Iterator<Item = &'a [Frame]>, trace: &Trace) -> Option<&'a Frame> {
    if own.inlined {
        return None;
    }
    let callee = if own.python { Callee::Python(own.address) } else { Callee::Native(own.address) };
    let caller_in = |frames: &'a [Frame]| {
        let is_own = |f: &Frame| f.address == own.address && f.function == own.function && f.python == own.python;
        let at = frames.iter().position(|f| is_own(f) && !f.inlined)?;
        let caller = if own.python { frames[at + 1..].iter().find(|f| f.python)? } else { frames.get(at + 1)? };
        (caller.own_code && caller.python == own.python).then_some(caller)
    };
    common_caller(stacks, caller_in, |caller| (caller.address, caller.line))
        .filter(|_| trace.stacks.has_several_callers(callee))
}

/// The caller `caller_in` finds in the first of `stacks`, when it finds
/// one that `key` tells to be the same in every other.
fn common_caller<'a, K: PartialEq>(
    mut stacks: impl Iterator<Item = &'a [Frame]>,
    caller_in: impl Fn(&'a [Frame]) -> Option<&'a Frame>,
    key: impl Fn(&Frame) -> K,
) -> Option<&'a Frame> {
    let caller = caller_in(stacks.next()?)?;
    stacks.all(|frames| caller_in(frames).is_some_and(|other| key(other) == key(caller))).then_some(caller)
}

/// The warning for a trace that did not end cleanly, if any.
pub fn end_warning(trace: &Trace) -> Option<String> {
    use crate::trace::EndKind;
    let last = trace.snapshots.len().saturating_sub(1);
    let epochs = if last == 0 { "epoch 0".to_string() } else { format!("epochs 0..{last}") };
    match &trace.end {
        EndKind::Complete if trace.saw_end_record => None,
        EndKind::Complete => Some(match trace.recording_stopped() {
            Some(why) => {
                format!("the tracer stopped recording before the process ended ({why}); reporting {epochs}, written before")
            }
            None => format!(
                "the trace has no end record (the process was probably killed, or is still running, or the tracer stopped writing it, which it said on stderr); reporting {epochs}"
            ),
        }),
        EndKind::Truncated { offset } => Some(format!(
            "the trace was cut at byte {offset} (the process was probably killed, or the disk filled); reporting the complete {epochs}"
        )),
        EndKind::Damaged { offset, reason } => {
            Some(format!("the trace is damaged at byte {offset} ({reason}); reporting the complete {epochs} before it"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{GrowthSpan, LineMemory};

    /// A launcher whose program (a rank) found nothing in its own process
    /// while a worker it forked leaks: the wrapper's verdict is the
    /// worker's finding, told as the program's fork's, with the program
    /// standing for the launcher.
    #[test]
    fn a_wrappers_verdict_tells_what_a_process_its_program_forked_found() {
        let mut launcher = crate::synth::Sim::new("/usr/bin/env");
        launcher.exit();
        let root = crate::synth::write_temp("trace.bin", &launcher.bytes());
        let mut program = crate::synth::Sim::new("/opt/app/train");
        program.process_mut().pid = 411;
        program.process_mut().forked_from = None;
        (0..8).for_each(|e| program.mark(&format!("epoch {e}")));
        program.exit();
        let mut worker = crate::synth::Sim::new("/opt/app/train");
        worker.process_mut().pid = 412;
        worker.process_mut().forked_from = Some(411);
        for e in 0..8 {
            worker.alloc_many(7, 1, 64 << 10);
            worker.mark(&format!("parent's epoch {e}"));
        }
        worker.exit();
        for (pid, sim) in [(411, program), (412, worker)] {
            std::fs::write(root.with_file_name(format!("trace.bin.{pid}")), sim.bytes()).unwrap();
        }
        let trace = crate::trace::load(&root, &crate::trace::LoadOptions::default()).unwrap();
        let analysis = crate::analysis::analyze(&trace, NoiseFloor::Scaled, |stack| stack);
        let mut symbolizer = Symbolizer::new(&trace.process, &trace.modules, &trace.pycode);
        let report = Report::build(&trace, &analysis, &mut symbolizer, 10, NoiseFloor::Scaled);
        assert_eq!(report.program.map(|i| report.descendants[i].trace.pid), Some(411), "{}", report.verdict_message);
        assert_eq!(report.verdict_kind(), VerdictKind::HeapLeak, "{}", report.verdict_message);
        let told = "(9 epochs) stands for it, whose own verdict is no_growth, while a process it forked, ";
        assert!(report.verdict_message.contains(told), "{}", report.verdict_message);
        assert!(report.verdict_message.contains("trace.bin.412, found heap_leak"), "{}", report.verdict_message);
    }

    /// A trace of a few epochs with no allocation, whose stacks reach no
    /// helper from several callers.
    fn trace_without_stacks() -> Trace {
        let mut sim = crate::synth::Sim::new("/opt/app/train");
        (0..4).for_each(|e| sim.mark(&format!("epoch {e}")));
        sim.exit();
        let path = crate::synth::write_temp("trace.bin", &sim.bytes());
        crate::trace::load(&path, &crate::trace::LoadOptions::default()).expect("synthetic trace loads")
    }

    fn suspect_at(frame: Frame) -> ShownSuspect {
        let suspect = Suspect {
            stack: 7,
            other_stacks: Vec::new(),
            growth_bytes_per_epoch: 4096,
            growth_span: GrowthSpan { epochs: 5, since: 1 },
            live_bytes: 40960,
            live_count: 10,
            settled_with_survivors: 5,
            survivors: Vec::new(),
            memory: Memory::Heap,
            below_floor: false,
            grown_in_place: false,
            piles_up_only_with_line: false,
        };
        ShownSuspect { rank: 1, suspect, frames: vec![frame], explanation: None, cut_at_frame_limit: None }
    }

    /// A C function of the user's library, called from Python, is named
    /// with the Python line that called it when every stack of its line
    /// came from that line; called from two Python lines that both keep
    /// what it makes, it is the leak itself, named alone.
    #[test]
    fn a_native_line_is_named_with_its_python_caller_only_when_every_stack_came_from_it() {
        let frame = |function: &str, file: &str, line: u32, python: bool| Frame {
            file: Some(file.into()),
            line: Some(line),
            own_code: true,
            python,
            ..Frame::named(0x10, function.into())
        };
        let make = frame("make_record", "/job/libhelp.c", 6, false);
        let stack = |caller: u32, rank: usize| ShownSuspect {
            rank,
            frames: vec![make.clone(), frame("ingest", "/job/job.py", caller, true)],
            ..suspect_at(make.clone())
        };
        let trace = trace_without_stacks();
        let line = LeakLine {
            frame: Some(make.clone()),
            growth_bytes_per_epoch: 8192,
            growth_span: GrowthSpan { epochs: 5, since: 1 },
            live_bytes: 81920,
            live_count: 20,
            memory: LineMemory::Only(Memory::Heap),
            ranks: vec![1, 2],
        };
        let same = [stack(11, 1), stack(11, 2)];
        assert_eq!(culprit(&line, &same, &trace).named(), "make_record (libhelp.c:6), called from ingest (job.py:11)");
        let two = [stack(11, 1), stack(12, 2)];
        assert_eq!(culprit(&line, &two, &trace).named(), "make_record (libhelp.c:6)");
    }

    /// A leak's line is named with the Python line that called it when it
    /// is native, or Python of another file: a model's forward in its own
    /// module, run by the loop that keeps its graph.
    #[test]
    fn a_line_of_another_file_than_its_callers_is_named_with_its_caller() {
        let frame = |function: &str, file: &str, own_code: bool, python: bool| Frame {
            file: Some(file.into()),
            own_code,
            python,
            ..Frame::named(0x10, function.into())
        };
        let forward = frame("Net.forward", "/job/model.py", true, true);
        let torch = frame("Module._call_impl", "/venv/site-packages/torch/nn/modules/module.py", false, true);
        let helper = frame("Net.block", "/job/model.py", true, true);
        let evaluate = frame("evaluate", "/job/train.py", true, true);
        let native = frame("compute", "/job/feat.c", true, false);
        let caller = |frames: &[Frame]| python_caller(frames).map(|f| f.function.clone());
        assert_eq!(caller(&[forward.clone(), torch, helper.clone(), evaluate.clone()]).as_deref(), Some("evaluate"));
        assert_eq!(caller(&[forward.clone(), helper]), None, "one file");
        assert_eq!(caller(&[native, forward]).as_deref(), Some("Net.forward"));
        assert_eq!(caller(&[evaluate]), None);
    }

    /// A stack of as many frames as the tracer keeps is cut unless it
    /// ends where the process or a thread starts: then it may be whole.
    #[test]
    fn a_stack_at_the_frame_limit_ending_at_a_start_is_whole() {
        let mut sim = crate::synth::Sim::new("/opt/app/train");
        sim.process_mut().settings.push((trace_format::MAX_FRAMES_SETTING.into(), "4".into()));
        sim.stack(1, vec![0x40_1000, 0x40_1010, 0x40_1020, 0x40_1030]);
        sim.mark("0");
        let path = crate::synth::write_temp("limit.bin", &sim.bytes());
        let trace = crate::trace::load(&path, &crate::trace::LoadOptions::default()).unwrap();
        let ending =
            |outermost: &str| vec![Frame::named(0x40_1000, "leaf".into()), Frame::named(0x40_1030, outermost.into())];
        assert_eq!(frame_limit_reached(&trace, 1, &ending("recurse")), Some(4));
        for start in ["_start", "start_thread", "clone3"] {
            assert_eq!(frame_limit_reached(&trace, 1, &ending(start)), None, "{start}");
        }
    }

    /// A bounded FIFO's own blocks, made at a few earlier epochs, count
    /// to no pile beside the entries of the last epochs it keeps.
    #[test]
    fn epochs_of_a_few_bytes_beside_a_lines_bulk_do_not_count_to_its_pile() {
        let survivors: Vec<Survivor> = [
            (0, 9999),
            (4, 528),
            (6, 528),
            (8, 528),
            (9, 160 << 10),
            (10, 160 << 10),
            (11, 150 << 10),
            (12, 160 << 10),
        ]
        .into_iter()
        .map(|(birth_epoch, bytes)| Survivor { birth_epoch, count: 1, bytes })
        .collect();
        let settled = |birth: u32| (1..=11).contains(&birth);
        assert_eq!(settled_births_that_count(survivors.iter(), settled), [9, 10, 11]);
        let even: Vec<Survivor> = (1..=11).map(|birth_epoch| Survivor { birth_epoch, count: 1, bytes: 4096 }).collect();
        assert_eq!(settled_births_that_count(even.iter(), settled), (1..=11).collect::<Vec<_>>());
    }

    /// A line's memory is what its best suspect is known as only where
    /// such suspects keep half of its growth: a pymalloc arena opened by
    /// a line that keeps tensors is the line's least part.
    #[test]
    fn a_line_is_known_as_its_best_suspects_memory_only_where_that_is_most_of_it() {
        let frame = Frame { own_code: true, python: true, ..Frame::named(0, "compute_loss".into()) };
        let shown = |rank: usize, growth: u64, explanation| {
            let mut shown = suspect_at(frame.clone());
            (shown.rank, shown.suspect.growth_bytes_per_epoch, shown.explanation) = (rank, growth, explanation);
            shown
        };
        let arenas = Some(&explain::PYMALLOC_ARENAS);
        let line_of = |suspects: &[ShownSuspect]| LeakLine {
            frame: Some(frame.clone()),
            growth_bytes_per_epoch: suspects.iter().map(|s| s.suspect.growth_bytes_per_epoch).sum(),
            growth_span: GrowthSpan { epochs: 5, since: 1 },
            live_bytes: 0,
            live_count: 0,
            memory: LineMemory::Mixed,
            ranks: (1..=suspects.len()).collect(),
        };
        let mostly_tensors = [shown(1, 256 << 10, arenas), shown(2, 200 << 10, None), shown(3, 200 << 10, None)];
        assert!(line_known_as(&line_of(&mostly_tensors), &mostly_tensors).is_none());
        let mostly_arenas = [shown(1, 256 << 10, arenas), shown(2, 200 << 10, None), shown(3, 100 << 10, arenas)];
        assert_eq!(line_known_as(&line_of(&mostly_arenas), &mostly_arenas).map(|e| e.what), Some("pymalloc arenas"));
    }

    #[test]
    fn the_verdict_names_a_long_cxx_function_shortened() {
        let function = "std::_Rb_tree_iterator<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > > std::_Rb_tree<int, std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::_Select1st<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > >, std::less<int>, std::allocator<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > > >::_M_emplace_hint_unique<std::piecewise_construct_t const&, std::tuple<int&&>, std::tuple<> >(std::_Rb_tree_const_iterator<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > >, std::piecewise_construct_t const&, std::tuple<int&&>&&, std::tuple<>&&) [clone .isra.0]";
        let frame = Frame {
            file: Some("/opt/app/registry.cpp".into()),
            line: Some(13),
            own_code: true,
            ..Frame::named(0x1000, function.into())
        };
        let suspects = [suspect_at(frame.clone())];
        let trace = trace_without_stacks();
        let line = LeakLine {
            frame: Some(frame),
            growth_bytes_per_epoch: 4096,
            growth_span: GrowthSpan { epochs: 5, since: 1 },
            live_bytes: 40960,
            live_count: 10,
            memory: LineMemory::Only(Memory::Heap),
            ranks: vec![1],
        };
        assert_eq!(
            culprit(&line, &suspects, &trace).name,
            "std::_Rb_tree_iterator<…> std::_Rb_tree<…>::_M_emplace_hint_unique<…>(…) [clone .isra.0] (registry.cpp:13)"
        );
        // A suspect without own code is named by its innermost frame, shortened too.
        let line = LeakLine { frame: None, ..line };
        assert_eq!(
            culprit(&line, &suspects, &trace).name,
            "std::_Rb_tree_iterator<…> std::_Rb_tree<…>::_M_emplace_hint_unique<…>(…) [clone .isra.0] (registry.cpp:13)"
        );
    }

    #[test]
    fn the_python_caller_is_that_of_the_first_own_frame_when_it_is_native() {
        let native = |function: &str, own_code| Frame { own_code, ..Frame::named(0x1000, function.into()) };
        let python = |function: &str| Frame { own_code: true, python: true, ..Frame::named(0, function.into()) };
        let called = [native("compute_features", true), native("ffi_call", false), python("featurize"), python("main")];
        assert_eq!(python_caller(&called).map(|f| f.function.as_str()), Some("featurize"));
        let python_first = [native("PyList_New", false), python("featurize"), native("helper", true)];
        assert_eq!(python_caller(&python_first), None);
        assert_eq!(python_caller(&[native("leak", true), native("main", true)]), None, "no Python");
    }
}
