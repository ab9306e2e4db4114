//! The report for a person.

use std::fmt::Write;

use super::phases::{self, Phase};
use super::{descendant_named, names, rank_words, Drawn, Report, ShownSuspect};
use crate::analysis::{LineMemory, Survivor, Suspect, VerdictKind};
use crate::findings::{by_growth, program_trace, DescendantReport, LOOKED_AT};
use crate::format::{bytes, count, duration_ns};
use crate::lines::LeakLine;
use crate::symbolize::Frame;
use crate::trace::{Memory, Trace};

/// Epoch tables longer than this show their head and tail only.
const EPOCH_ROWS: usize = 40;
/// Survivor lists longer than this show their head and tail only.
const SURVIVOR_ITEMS: usize = 12;
/// Frames shown per suspect.
const FRAMES_SHOWN: usize = 40;
/// Leaking lines shown.
const LINES_SHOWN: usize = 10;
/// Lines of the stacks below the noise floor shown.
const BELOW_FLOOR_LINES_SHOWN: usize = 3;

fn how_epochs_were_cut(trace: &Trace) -> String {
    let mut causes: Vec<(&str, usize)> = Vec::new();
    for s in &trace.snapshots {
        let name = match s.cause {
            trace_format::EpochCause::Mark => "tracer_mark",
            trace_format::EpochCause::Timer => "timer",
            trace_format::EpochCause::Exit => "exit",
            trace_format::EpochCause::Auto => "auto-detected",
            trace_format::EpochCause::Parent => "the parent's epochs",
            trace_format::EpochCause::Exec => "exec",
        };
        match causes.iter_mut().find(|c| c.0 == name) {
            Some(c) => c.1 += 1,
            None => causes.push((name, 1)),
        }
    }
    causes.iter().map(|(n, c)| format!("{n} {c}")).collect::<Vec<_>>().join(", ")
}

fn run_section(out: &mut String, trace: &Trace) {
    let p = &trace.process;
    let _ = writeln!(out, "Run");
    let cmd = if p.cmdline.is_empty() { p.exe.clone() } else { p.cmdline.join(" ") };
    let _ = writeln!(out, "  command    {cmd}");
    let _ = writeln!(out, "  executable {}", p.exe);
    let forked = p.forked_from.is_some();
    let rank = p.rank().map(|rank| match rank.local_rank {
        Some(local) => format!("{}, local rank {local}", rank_words(&rank, forked)),
        None => rank_words(&rank, forked),
    });
    let about: Vec<String> =
        p.forked_from.map(|parent| format!("forked from {parent}")).into_iter().chain(rank).collect();
    let _ = writeln!(out, "  pid        {}{}", p.pid, parenthesized(&about));
    let elapsed = trace.snapshots.last().map_or(0, |s| s.elapsed_ns);
    // A forked child's times count from its parent's start.
    let late = p.started_late_ns().min(elapsed);
    let forked_late = if late > 0 {
        format!(" (forked {} into its parent's run, which its times count from)", duration_ns(late))
    } else {
        String::new()
    };
    let _ = writeln!(out, "  duration   {}{forked_late}", duration_ns(elapsed - late));
    let _ = writeln!(out, "  epochs     {} (cut by {})", trace.snapshots.len(), how_epochs_were_cut(trace));
    // Where the process sits in its run is the descendants' listing's, its
    // rank the pid's.
    let placement = |name: &str| {
        trace_format::LINEAGE_SETTINGS.contains(&name)
            || trace_format::RANK_SETTINGS.iter().any(|(rank, _)| *rank == name)
    };
    let settings: Vec<_> = p.settings.iter().filter(|(name, _)| !placement(name)).collect();
    if settings.is_empty() {
        let _ = writeln!(out, "  settings   (defaults)");
    }
    for (i, (name, value)) in settings.into_iter().enumerate() {
        let _ = writeln!(out, "  {:<10} {name} = {value}", if i == 0 { "settings" } else { "" });
    }
    let _ = writeln!(out, "  trace      {} ({})", trace.path.display(), trace.end_name());
    for notice in &trace.notices {
        let _ = writeln!(out, "  note       at {}: {}", duration_ns(notice.elapsed_ns), notice.text);
    }
}

/// The note on descendants that ran for much of this process's `run_ns`
/// but were cut into too few epochs to be analysed, naming them.
fn unanalysed_descendants_note(descendants: &[DescendantReport], run_ns: u64) -> Option<String> {
    let unanalysed: Vec<&DescendantReport> = descendants.iter().filter(|d| d.unanalysed_long_life(run_ns)).collect();
    if unanalysed.is_empty() {
        return None;
    }
    let (count, verb) =
        if unanalysed.len() == 1 { ("one".to_string(), "was") } else { (unanalysed.len().to_string(), "were") };
    let mut named: Vec<String> = unanalysed.iter().take(NAMED_IN_A_NOTE).map(|d| descendant_named(&d.trace)).collect();
    if unanalysed.len() > NAMED_IN_A_NOTE {
        named.push(format!("and {} more", unanalysed.len() - NAMED_IN_A_NOTE));
    }
    Some(format!(
        "{count} of this process's descendants ({}) ran for much of its run but {verb} cut into too few epochs of their own to be analysed (DataLoader workers and the children Python's multiprocessing starts follow this process's epochs; other children, and one that could not reach them, cut their own): a leak in them shows in no report; call tracer_mark in them, or set TRACER_EPOCH_SECONDS shorter than their lives",
        named.join(", ")
    ))
}

/// How many traces a note names before it counts the rest.
const NAMED_IN_A_NOTE: usize = 3;

/// `parts` in parentheses after a space, ` (forked from 7, rank 1 of 2)`;
/// nothing when there are none.
fn parenthesized(parts: &[String]) -> String {
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// How many of the traces beside this one found more: its descendants'
/// (naming the finding that grows fastest: a leak in a persistent
/// DataLoader worker shows only there) and those of processes started
/// beside it (the other end of a pipeline), which are no descendants, told
/// apart.
fn findings_note(traces: &[DescendantReport]) -> Option<String> {
    let found = |beside: bool| traces.iter().filter(|d| d.found_something(beside)).count();
    let largest = by_growth(traces)
        .into_iter()
        .find(|d| !d.trace.started_beside)
        .and_then(|d| Some((descendant_named(&d.trace), d.finding.as_ref()?.words())));
    let descendants = match (found(false), largest) {
        (1, Some((path, words))) => {
            Some(format!("one of this process's descendants found more in its own trace, {path}: {words}"))
        }
        (n, Some((path, words))) => Some(format!(
            "{n} of this process's descendants found more in their own traces, the largest {path}: {words}"
        )),
        _ => None,
    };
    let beside = match found(true) {
        0 => None,
        1 => Some("a process started beside this one found more in its own trace".to_string()),
        n => Some(format!("{n} processes started beside this one found more in their own traces")),
    };
    match (descendants, beside) {
        (Some(d), Some(b)) => Some(format!("{d}; {b}")),
        (d, b) => d.or(b),
    }
}

/// The traces beside this one whose own verdict was sampled too sparsely to
/// tell its growth from chance, which `--fail-on too_few_samples` counts.
fn too_few_samples_note(traces: &[DescendantReport]) -> Option<String> {
    let sparse: Vec<&DescendantReport> = traces.iter().filter(|d| d.too_few_samples).collect();
    let first = sparse.first()?;
    let named = descendant_named(&first.trace);
    Some(match sparse.len() {
        1 => {
            let whose =
                if first.trace.started_beside { "a process started beside this one" } else { "a descendant of this process" };
            format!(
                "the trace of {whose}, {named}, was sampled too sparsely to tell its growth from chance (too_few_samples); its report, analyzer report {}, says what to run",
                first.trace.path.display()
            )
        }
        n => format!(
            "{n} other traces of this run, the first {named}, were sampled too sparsely to tell their growth from chance (too_few_samples); each one's report says what to run"
        ),
    })
}

/// Descendants' traces (and their findings) shown before the rest are summarized.
const DESCENDANTS_SHOWN: usize = 6;

/// `exec_limit`: how many traces the run's exec'd programs could write
/// (see [`trace_format::EXEC_TRACE_LIMIT_SETTING`]), in a run's first trace.
fn descendants_section(
    out: &mut String,
    descendants: &[DescendantReport],
    other_runs: usize,
    exec_limit: Option<usize>,
) {
    let children = descendants.iter().map(|d| {
        let how = match (d.trace.forked_from, d.trace.started_beside) {
            (_, true) => "started beside it",
            (Some(_), false) => "forked",
            (None, false) => "exec'd",
        };
        let forked = d.trace.forked_from.is_some();
        let rank = d.trace.rank.map(|rank| format!(", {}", rank_words(&rank, forked))).unwrap_or_default();
        let unfinished = if d.unfinished { "; unfinished: killed, or running still" } else { "" };
        format!(
            "{} (pid {}{rank}, {how}: {}{unfinished})",
            d.trace.path.display(),
            d.trace.pid,
            d.trace.cmdline.join(" ")
        )
    });
    capped_rows(out, "children", children.collect(), "traces of descendants");
    if let Some(limit) = exec_limit.filter(|&limit| descendants.len() >= limit) {
        let _ = writeln!(out, "  {:<10} ({}; TRACER_EXEC_TRACES=all lifts it)", "", exec_limit_words(limit));
    }
    if other_runs > 0 {
        let _ = writeln!(
            out,
            "  {:<10} ({other_runs} trace{} named like its descendants' left out: other runs with the same output path wrote them)",
            if descendants.is_empty() { "children" } else { "" },
            if other_runs == 1 { "" } else { "s" }
        );
    }
    let found: Vec<String> = by_growth(descendants)
        .into_iter()
        .filter_map(|d| Some(format!("{}: {}", descendant_named(&d.trace), d.finding.as_ref()?.words())))
        .collect();
    let any_found = !found.is_empty();
    capped_rows(out, "findings", found, "descendants with findings");
    if any_found {
        let _ = writeln!(out, "  {:<10} (each has a report of its own: analyzer report <trace>)", "");
    }
    if descendants.len() > LOOKED_AT {
        let _ = writeln!(
            out,
            "  {:<10} (findings looked for in the first {LOOKED_AT} of {} descendants' traces)",
            "",
            descendants.len()
        );
    }
}

/// What the run's limit on traces did to the programs it exec'd, at
/// `limit` traces.
fn exec_limit_words(limit: usize) -> String {
    match limit {
        0 => "TRACER_EXEC_TRACES=0: the programs the run exec'd wrote no trace".to_string(),
        1 => "the run's 1 trace is its limit: programs it exec'd after that wrote none".to_string(),
        n => format!("the run's {n} traces are its limit: programs it exec'd after that wrote none"),
    }
}

/// Run-section rows under `heading` (on the first), at most
/// [`DESCENDANTS_SHOWN`], then how many more `what` there are.
fn capped_rows(out: &mut String, heading: &str, rows: Vec<String>, what: &str) {
    for (i, row) in rows.iter().take(DESCENDANTS_SHOWN).enumerate() {
        let _ = writeln!(out, "  {:<10} {row}", if i == 0 { heading } else { "" });
    }
    if rows.len() > DESCENDANTS_SHOWN {
        let _ = writeln!(out, "  {:<10} ... and {} more {what}", "", rows.len() - DESCENDANTS_SHOWN);
    }
}

/// The epoch table; `phases`, those of a job whose epochs several
/// DataLoader loops cut in turn (see [`super::phases`]).
fn epoch_table(out: &mut String, trace: &Trace, analysed: std::ops::Range<usize>, phases: &[Phase]) {
    let _ = writeln!(out, "\nEpochs");
    let label_width = trace.snapshots.iter().map(|s| shown_label(&s.label).count()).max().unwrap_or(0).clamp(5, 32);
    // Each column is as wide as its header, its widest cell, or the width
    // it has when its figures are of an ordinary size (so that tables of
    // short and long runs line up alike), whichever is widest.
    let mut columns = vec![
        Column::right("epoch", 5),
        Column::left("label", label_width),
        Column::left("cause", 6),
        Column::right("elapsed", 9),
        Column::right("RSS", 10),
    ];
    // The part of the RSS that is pages of mapped files (traces of format 5 on).
    let files = shown(trace, |s| s.rss_file_bytes);
    if files {
        columns.push(Column::right("file pages", 10));
    }
    // A forked process's private memory: what it copied of its parent's
    // shows there, not in its RSS.
    let private = shown(trace, |s| s.private_dirty_bytes);
    if private {
        columns.push(Column::right("private", 10));
    }
    columns.extend([Column::right("live heap", 10), Column::right("live allocs", 12), Column::right("mapped", 10)]);
    // Freed memory malloc kept (traces of format 4 on).
    let kept = shown(trace, |s| s.allocator_free_bytes);
    if kept {
        columns.push(Column::right("malloc free", 11));
    }
    columns.push(Column::right("tracer", 10));

    let n = trace.snapshots.len();
    // A row is hidden only with another: its line would take the room of one.
    let hides = n > EPOCH_ROWS + 1;
    let hidden = |i: usize| hides && i >= EPOCH_ROWS / 2 && i < n - EPOCH_ROWS / 2;
    let mut rows: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, s) in trace.snapshots.iter().enumerate().filter(|(i, _)| !hidden(*i)) {
        let exit = s.cause.ends_the_process();
        let mut cells = vec![
            s.epoch.to_string(),
            shown_label(&s.label).take(label_width).collect(),
            s.cause.name().to_string(),
            duration_ns(s.elapsed_ns),
            bytes(s.rss_bytes),
        ];
        if files {
            cells.push(bytes(s.rss_file_bytes));
        }
        if private {
            // Not measured at exit.
            cells.push(measured_bytes(s.private_dirty_bytes, !exit));
        }
        cells.extend([bytes(s.heap_live_bytes), count(s.heap_live_count), bytes(s.mapped_live_bytes)]);
        if kept {
            // Not measured at an exit by `_exit`, which must leave malloc alone.
            cells.push(measured_bytes(s.allocator_free_bytes, !exit || s.allocator_free_bytes > 0));
        }
        cells.push(bytes(s.tracer_bytes));
        rows.push((i, cells));
    }
    for (i, column) in columns.iter_mut().enumerate() {
        let widest = rows.iter().map(|(_, cells)| cells[i].chars().count()).max().unwrap_or(0);
        column.width = column.width.max(column.header.chars().count()).max(widest);
    }
    let epoch_width = columns[0].width;
    let headers: Vec<&str> = columns.iter().map(|c| c.header).collect();
    let _ = writeln!(out, "{}", table_row(&columns, &headers));
    let outer_loop_found = trace.outer_loop_found();
    // The program marks its epochs from the analysis's first on: what was
    // cut before it, passes included, is start-up.
    let marks_from_start =
        trace.snapshots.get(analysed.start).is_some_and(|s| s.cause == trace_format::EpochCause::Mark);
    for (i, cells) in rows {
        if hides && i == n - EPOCH_ROWS / 2 {
            let _ = writeln!(
                out,
                "  {:>epoch_width$}  ({} epochs not shown; --json lists them all)",
                "...",
                n - EPOCH_ROWS
            );
        }
        let epoch = trace.snapshots[i].epoch;
        let cause = trace.snapshots[i].cause;
        // A worker's epochs, its parent's, all began after its fork, inside a pass.
        let inside_a_pass =
            (i > 0 && cause == trace_format::EpochCause::Auto) || cause == trace_format::EpochCause::Parent;
        // A spawned worker's first epoch holds its interpreter's start-up.
        let spawned_start = i == 0 && cause == trace_format::EpochCause::Parent && trace.process.forked_from.is_none();
        let note = if let Some(note) = phases::table_note(phases, epoch, cause.ends_the_process()) {
            note
        } else if i < analysed.start && marks_from_start {
            "  (start-up before the first mark)"
        } else if i < analysed.start && inside_a_pass {
            // Only the epochs cut inside a first round of passes over several
            // loaders, or inside the first pass of an outer loop.
            match (outer_loop_found, spawned_start) {
                (true, false) => "  (inside the first pass of the outer DataLoader loop)",
                (true, true) => "  (its start-up, inside the first pass of the outer DataLoader loop)",
                (false, false) => "  (before the first whole round of DataLoader passes)",
                (false, true) => "  (its start-up, before the first whole round of DataLoader passes)",
            }
        } else if i < analysed.start && outer_loop_found {
            "  (start-up, and the outer DataLoader loop's first pass begun)"
        } else if i < analysed.start {
            match trace.snapshots[analysed.start].cause {
                trace_format::EpochCause::Auto => "  (start-up before the first auto-detected epoch)",
                _ => "  (start-up before the first mark)",
            }
        } else if i >= analysed.end {
            if cause == trace_format::EpochCause::Exec {
                "  (not analysed: exec)"
            } else {
                "  (not analysed: exit)"
            }
        } else {
            ""
        };
        let _ = writeln!(out, "{}{note}", table_row(&columns, &cells));
    }
}

/// A label as the epoch table shows it, one column a character: without
/// control characters (a newline would break the row), and with `?` for
/// each byte the tracer could not read as UTF-8 (which it wrote as U+FFFD,
/// drawn two columns wide by many terminals).
fn shown_label(label: &str) -> impl Iterator<Item = char> + '_ {
    label.chars().filter(|c| !c.is_control()).map(|c| if c == char::REPLACEMENT_CHARACTER { '?' } else { c })
}

/// A column of the epoch table.
struct Column {
    header: &'static str,
    width: usize,
    right: bool,
}

impl Column {
    fn right(header: &'static str, width: usize) -> Column {
        Column { header, width, right: true }
    }

    fn left(header: &'static str, width: usize) -> Column {
        Column { header, width, right: false }
    }
}

/// One row of the epoch table: its cells, each in its column.
fn table_row(columns: &[Column], cells: &[impl AsRef<str>]) -> String {
    let mut row = String::new();
    for (column, cell) in columns.iter().zip(cells) {
        let (cell, width) = (cell.as_ref(), column.width);
        let _ = if column.right { write!(row, "  {cell:>width$}") } else { write!(row, "  {cell:<width$}") };
    }
    row
}

/// Whether an optional column of the epoch table is shown: some snapshot
/// measured it.
fn shown(trace: &Trace, value: impl Fn(&trace_format::Snapshot) -> u64) -> bool {
    trace.snapshots.iter().any(|s| value(s) > 0)
}

/// `-` for a figure the snapshot did not measure.
fn measured_bytes(value: u64, measured: bool) -> String {
    if measured {
        bytes(value)
    } else {
        "-".into()
    }
}

fn survivors_line(survivors: &[Survivor]) -> String {
    let item = |s: &Survivor| format!("{}: {} ({})", s.birth_epoch, count(s.count), bytes(s.bytes));
    if survivors.len() <= SURVIVOR_ITEMS {
        survivors.iter().map(item).collect::<Vec<_>>().join(", ")
    } else {
        let head: Vec<String> = survivors[..SURVIVOR_ITEMS / 2].iter().map(item).collect();
        let tail: Vec<String> = survivors[survivors.len() - SURVIVOR_ITEMS / 2..].iter().map(item).collect();
        format!("{}, ... {} more epochs ..., {}", head.join(", "), survivors.len() - SURVIVOR_ITEMS, tail.join(", "))
    }
}

/// [`frame_line`] for a suspect's stack, where each frame is one return
/// address: a frame of the program's own code without line information
/// adds where it lies in its module (`fill  (prog+0x1189)`, for `addr2line
/// -e prog 0x1189`), which tells its calls apart.
fn stack_frame_line(frame: &Frame, marked: bool) -> String {
    let at_call = frame.own_code && frame.line.is_none() && !frame.python;
    frame_text(frame, marked, frame.module_offset.filter(|_| at_call))
}

pub fn frame_line(frame: &Frame, marked: bool) -> String {
    frame_text(frame, marked, None)
}

/// A frame's line, its module followed by `offset` in it where given.
fn frame_text(frame: &Frame, marked: bool, offset: Option<u64>) -> String {
    let mut line = format!("{} {}", if marked { ">" } else { " " }, names::shortened(&frame.function));
    if let Some(file) = &frame.file {
        let _ = write!(line, "  {file}");
        if let Some(l) = frame.line {
            let _ = write!(line, ":{l}");
        }
    }
    if frame.inlined {
        line.push_str("  [inlined]");
    }
    if let Some(module) = &frame.module {
        let name = module.rsplit('/').next().unwrap_or(module);
        // A frame named `module+0x1a2b` says its module already.
        if !name.is_empty() && !frame.named_by_offset() {
            match offset {
                Some(offset) => _ = write!(line, "  ({name}+0x{offset:x})"),
                None => _ = write!(line, "  ({name})"),
            }
        }
    }
    line
}

/// The ranks of a line's suspects, runs of consecutive ranks as `#3-#10`.
fn ranks_text(ranks: &[usize]) -> String {
    const RUNS_SHOWN: usize = 8;
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for rank in sorted {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == rank => *last = rank,
            _ => runs.push((rank, rank)),
        }
    }
    let run = |&(first, last): &(usize, usize)| {
        if first == last {
            format!("#{first}")
        } else {
            format!("#{first}-#{last}")
        }
    };
    let mut text = runs.iter().take(RUNS_SHOWN).map(run).collect::<Vec<_>>().join(", ");
    if runs.len() > RUNS_SHOWN {
        let rest: usize = runs[RUNS_SHOWN..].iter().map(|(first, last)| last - first + 1).sum();
        let _ = write!(text, " and {rest} more");
    }
    let noun = if ranks.len() == 1 { "suspect" } else { "suspects" };
    format!("{} {noun}: {text}", ranks.len())
}

/// "live now X", saying how much of it was born in the sampled warm-up,
/// whose bytes are estimates (those after it are exact), or, for suspects
/// keeping allocations from the first epoch after it on, that the warm-up's
/// sampling drew none of theirs: what they kept then is not counted.
fn live_now<'a>(live_bytes: u64, suspects: impl Iterator<Item = &'a Suspect>, trace: &Trace) -> String {
    let Some(end) = trace.sampled_warm_up_end() else { return format!("live now {}", bytes(live_bytes)) };
    let survivors: Vec<_> = suspects.flat_map(|s| &s.survivors).collect();
    let estimated: u64 = survivors.iter().filter(|v| v.birth_epoch <= end).map(|v| v.bytes).sum();
    if estimated > 0 {
        format!("live now {} ({} of it estimated from the warm-up's samples)", bytes(live_bytes), bytes(estimated))
    } else if survivors.iter().any(|v| v.birth_epoch == end + 1) {
        format!(
            "live now {} (from epoch {} on: what the warm-up kept here, if anything, went undrawn by its sampling)",
            bytes(live_bytes),
            end + 1
        )
    } else {
        format!("live now {}", bytes(live_bytes))
    }
}

/// The suspects of `line`, whose ranks are places in `suspects`.
fn suspects_of<'a>(line: &'a LeakLine, suspects: &'a [ShownSuspect]) -> impl Iterator<Item = &'a Suspect> {
    line.ranks.iter().map(|&rank| &suspects[rank - 1].suspect)
}

fn lines_section(out: &mut String, report: &Report<'_>) {
    let lines = &report.lines;
    let of = if report.symbolized.len() < report.analysis.suspects.len() {
        format!("the top {} suspects", count(report.symbolized.len() as u64))
    } else {
        "the suspects".to_string()
    };
    let _ =
        writeln!(out, "\nLeaking lines: {} ({of} summed by their first frame in the program's own code)", lines.len());
    for line in lines.iter().take(LINES_SHOWN) {
        let memory = memory_label(line.memory);
        let since = report.analysis.late_start(line.growth_span.since).map(|epoch| format!(" since epoch {epoch}"));
        let since = since.unwrap_or_default();
        let _ = writeln!(
            out,
            "  +{}/epoch{since}{memory}   {}   {}",
            bytes(line.growth_bytes_per_epoch),
            live_now(line.live_bytes, suspects_of(line, &report.symbolized), report.trace),
            ranks_text(&line.ranks)
        );
        match &line.frame {
            Some(frame) => {
                let _ = writeln!(out, "    {}", frame_line(frame, true));
            }
            None => {
                let _ = writeln!(out, "    (no frame in the program's own code: see suspect #{})", line.ranks[0]);
            }
        }
    }
    if lines.len() > LINES_SHOWN {
        let _ = writeln!(out, "  ... {} more lines (--json lists them all)", lines.len() - LINES_SHOWN);
    }
}

/// The lines the largest stacks below the noise floor come through.
fn below_floor_lines(out: &mut String, report: &Report<'_>) {
    let lines = &report.below_floor_lines;
    if lines.is_empty() {
        return;
    }
    let largest = report.analysis.below_floor.largest.len();
    let of = if largest < report.analysis.below_floor.stacks {
        format!("the {largest} that keep the most")
    } else {
        "all of them".to_string()
    };
    let _ = writeln!(out, "  below it, {of} summed by their first frame in the program's own code:");
    for line in lines.iter().take(BELOW_FLOOR_LINES_SHOWN) {
        let stacks = line.ranks.len();
        let _ = writeln!(
            out,
            "    +{}/epoch{}   {}   {stacks} stack{}",
            bytes(line.growth_bytes_per_epoch),
            memory_label(line.memory),
            live_now(line.live_bytes, suspects_of(line, &report.below_floor), report.trace),
            if stacks == 1 { "" } else { "s" }
        );
        let innermost = report.below_floor[line.ranks[0] - 1].frames.first();
        let _ = match (&line.frame, innermost) {
            (Some(frame), _) => writeln!(out, "      {}", frame_line(frame, true)),
            (None, Some(frame)) => {
                writeln!(out, "      {}   (no frame in the program's own code)", frame_line(frame, false))
            }
            (None, None) => writeln!(out, "      (no frame in the program's own code)"),
        };
    }
    if lines.len() > BELOW_FLOOR_LINES_SHOWN {
        let _ = writeln!(out, "    ... {} more lines (--json lists them all)", lines.len() - BELOW_FLOOR_LINES_SHOWN);
    }
}

/// "   mapped memory", "   shared memory" or "   mixed memory" after a
/// growth; nothing for the heap.
fn memory_label(memory: LineMemory) -> String {
    match memory {
        LineMemory::Only(Memory::Heap) => String::new(),
        kind => format!("   {} memory", kind.name()),
    }
}

/// "stack 4", or for a site of several stacks "stacks 4, 9".
fn stack_ids(suspect: &Suspect) -> String {
    if suspect.other_stacks.is_empty() {
        return format!("stack {}", suspect.stack);
    }
    let ids: Vec<String> = std::iter::once(&suspect.stack).chain(&suspect.other_stacks).map(u32::to_string).collect();
    format!("stacks {}", ids.join(", "))
}

fn suspect_block(out: &mut String, s: &ShownSuspect, trace: &Trace) {
    let v = &s.suspect;
    let objects = match (v.memory == Memory::Heap, v.live_count == 1) {
        (true, true) => "allocation",
        (true, false) => "allocations",
        (false, true) => "mapping",
        (false, false) => "mappings",
    };
    let memory = memory_label(LineMemory::Only(v.memory));
    let _ = writeln!(
        out,
        "\n#{}  +{}/epoch{memory}   {} in {} {objects}   {}",
        s.rank,
        bytes(v.growth_bytes_per_epoch),
        live_now(v.live_bytes, std::iter::once(v), trace),
        count(v.live_count),
        stack_ids(v)
    );
    let _ = writeln!(out, "    still alive by birth epoch: {}", survivors_line(&v.survivors));
    if v.grown_in_place {
        let _ = writeln!(out, "    grown in place: made larger epoch after epoch (realloc, a growing vector, string or list), its newest copy alive");
    }
    if v.piles_up_only_with_line {
        let _ = writeln!(
            out,
            "    piles up with its line: alone, survivors of {} settled epoch{}, too few; with the line's other stacks, of enough",
            v.settled_with_survivors,
            if v.settled_with_survivors == 1 { "" } else { "s" }
        );
    }
    let own = s.frames.iter().position(|f| f.own_code);
    for (i, frame) in s.frames.iter().enumerate().take(FRAMES_SHOWN) {
        let _ = writeln!(out, "    {}", stack_frame_line(frame, Some(i) == own));
    }
    let cut = s.cut_at_frame_limit.map(|limit| {
        format!(
            "the stack ends there: the tracer cut it at its limit of {limit} native frames, so its outer \
             frames, main or the thread's start among them, were never recorded (the limit is MAX_FRAMES \
             in tracer/src/unwind.rs, set when the tracer is built)"
        )
    });
    match (s.frames.len().saturating_sub(FRAMES_SHOWN), cut) {
        (0, None) => {}
        (0, Some(cut)) => {
            let _ = writeln!(out, "      ... {cut}");
        }
        (hidden, None) => {
            let _ = writeln!(out, "      ... {hidden} outer frames not shown");
        }
        (hidden, Some(cut)) => {
            let _ = writeln!(out, "      ... {hidden} more frames not shown, and {cut}");
        }
    }
    if let Some(explanation) = s.explanation {
        let _ = writeln!(out, "    {explanation}");
    }
}

/// The whole text report.
pub fn render(report: &Report<'_>) -> String {
    let trace = report.trace;
    let a = report.analysis;
    let mut out = String::new();
    run_section(&mut out, trace);
    let exec_limit = trace.process.setting(trace_format::EXEC_TRACE_LIMIT_SETTING).and_then(|n| n.parse().ok());
    descendants_section(&mut out, &report.descendants, report.other_runs, exec_limit);
    for w in &report.warnings {
        let _ = writeln!(out, "  warning    {w}");
    }
    epoch_table(&mut out, trace, a.analysed_snapshots(), &report.phases);

    if a.verdict.kind != VerdictKind::TooFewEpochs {
        let settled = match a.settled {
            Some((lo, hi)) if lo == hi => format!("birth epoch {lo}"),
            Some((lo, hi)) => format!("birth epochs {lo}..{hi}"),
            None => "no birth epochs".into(),
        };
        if !a.suspects.is_empty() {
            lines_section(&mut out, report);
        }
        let below = a.suspects.iter().filter(|s| s.below_floor).count();
        let why = if a.steady_growth_promoted {
            "suspects as the heap rose steadily (see the verdict)"
        } else {
            "suspects with their line, which keeps more"
        };
        let by_line = match below {
            0 => String::new(),
            n if n == a.suspects.len() => format!(", all below it, {why}"),
            n => format!(", {n} below it, {why}"),
        };
        let _ = writeln!(
            out,
            "\nLeak suspects: {} (ranked by growth; survivors at epoch {} from {settled}; noise floor {}/epoch{by_line})",
            a.suspects.len(),
            trace.snapshots[a.reference].epoch,
            bytes(a.noise_floor)
        );
        if a.suspects.is_empty() && a.below_floor.stacks == 0 {
            let _ = writeln!(out, "  none: no stack keeps allocations alive epoch after epoch");
        } else if a.suspects.is_empty() {
            let below = &a.below_floor;
            let _ = writeln!(
                out,
                "  none above the noise floor; {} below it, the largest {}/epoch (--noise-floor BYTES ranks them)",
                below.keep_words(),
                bytes(below.largest_bytes_per_epoch)
            );
            below_floor_lines(&mut out, report);
        }
        for s in report.shown() {
            suspect_block(&mut out, s, trace);
        }
        if a.suspects.len() > report.shown().len() {
            let _ = writeln!(
                out,
                "\n  ... {} more suspects not shown (--top N shows more)",
                a.suspects.len() - report.shown().len()
            );
        }
    }

    let _ = writeln!(out, "\nVerdict ({}): {}", report.verdict_kind().name(), report.verdict_message);
    if a.verdict.kind == VerdictKind::TooFewEpochs && report.program.is_none() {
        let beside = report.descendants.iter().find(|d| d.trace.started_beside);
        let wrapped = || super::may_be_a_wrapper(report.trace, a).then(|| program_trace(&report.descendants)).flatten();
        if let Some(other) = beside.or_else(wrapped) {
            let why = if other.trace.started_beside {
                "another traced process started beside this one (the other end of a pipeline?) wrote its own trace"
            } else {
                "if the program ran under a wrapper (a shell script, timeout, env) or did its work in processes it started (multiprocessing, torch.multiprocessing.spawn), its trace is a descendant's"
            };
            let found = other.finding.as_ref().map(|f| format!("; it found {}: {}", f.kind.name(), f.details()));
            let epochs = match (other.snapshots, found.unwrap_or_default()) {
                (0, _) => None,
                (1, found) => Some(format!("1 epoch{found}")),
                (n, found) => Some(format!("{n} epochs{found}")),
            };
            let forked = other.trace.forked_from.is_some();
            let rank = other.trace.rank.map(|rank| rank_words(&rank, forked));
            let about: Vec<String> = rank.into_iter().chain(epochs).collect();
            let _ =
                writeln!(out, "Note: {why}: analyzer report {}{}", other.trace.path.display(), parenthesized(&about));
        }
    }
    if let Some(note) = findings_note(&report.descendants) {
        let _ = writeln!(out, "Note: {note} (findings, under Run)");
    }
    if let Some(note) = too_few_samples_note(&report.descendants) {
        let _ = writeln!(out, "Note: {note}");
    }
    let run_ns = trace.snapshots.last().map_or(0, |s| s.elapsed_ns);
    if let Some(note) =
        unanalysed_descendants_note(&report.descendants, run_ns).filter(|_| a.verdict.kind != VerdictKind::TooFewEpochs)
    {
        let _ = writeln!(out, "Note: {note}");
    }
    // Only where growth on the heap was found: the small objects of a leak
    // may be missing from its count, which the note says how to add.
    let heap_growth = a.verdict.kind == VerdictKind::HeapLeak || a.growth_below_floor();
    let notes = [super::explain::python_frames_note(trace), super::explain::pymalloc_note(trace)];
    for note in notes.into_iter().flatten().filter(|_| heap_growth) {
        let _ = writeln!(out, "Note: {note}");
    }
    if let Some(fg) = &report.flamegraph {
        let path = fg.path.display();
        let _ = match &fg.drawn {
            Drawn::Suspects => writeln!(out, "Flamegraph of leaked bytes: {path}"),
            Drawn::BelowFloor => writeln!(out, "Flamegraph of the growth below the noise floor: {path}"),
            Drawn::Nothing => writeln!(out, "Flamegraph: {path} (no leak suspects, nothing to draw)"),
            Drawn::NotWritten(why) => writeln!(out, "Flamegraph: not written: {why}"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{write_temp, Sim};
    use crate::trace::{load, Descendant, LoadOptions};

    /// A forked child's times count from its parent's start: its duration
    /// is its own, and says when it was forked.
    #[test]
    fn a_forked_childs_duration_is_its_own() {
        let mut sim = Sim::new("/usr/bin/python3");
        sim.process_mut().forked_from = Some(4242);
        let start = sim.process_mut().start_unix_ns;
        sim.process_mut()
            .settings
            .push((trace_format::IMAGE_SETTING.into(), format!("4243.{}", start + 6_000_000_000)));
        sim.epoch_ns = 6_500_000_000;
        sim.exit();
        let path = write_temp("trace.bin", &sim.bytes());
        let trace = load(&path, &LoadOptions::default()).expect("synthetic trace loads");
        let mut out = String::new();
        run_section(&mut out, &trace);
        assert!(
            out.contains("  duration   500 ms (forked 6.0 s into its parent's run, which its times count from)\n"),
            "{out}"
        );
    }

    /// A job of three phases, from epochs 0, 6 and 9: epochs 5 and 8 held
    /// the end of one loop and the start of the next; the phases not shown
    /// are analysed apart, the exit is the exit.
    #[test]
    fn the_phases_not_shown_are_marked_analysed_apart() {
        let phase = |from, to, shown| Phase { from, to, verdict: VerdictKind::NoGrowth, leak: None, shown };
        let notes = |shown: usize| -> Vec<Option<&str>> {
            let phases = [phase(0, Some(4), shown == 0), phase(6, Some(7), shown == 1), phase(9, None, shown == 2)];
            (0..12).map(|epoch| phases::table_note(&phases, epoch, epoch == 11)).collect()
        };
        let apart = Some("  (another DataLoader loop's, analysed apart)");
        let both = Some("  (the end of one DataLoader loop, the start of the next)");
        assert_eq!(notes(2), [apart, apart, apart, apart, apart, both, apart, apart, both, None, None, None]);
        assert_eq!(notes(0), [None, None, None, None, None, both, apart, apart, both, apart, apart, None]);
        assert_eq!(notes(1), [apart, apart, apart, apart, apart, both, None, None, both, apart, apart, None]);
    }

    /// One row more than the table shows is shown: a line saying it is not
    /// would take its room.
    #[test]
    fn one_epoch_past_the_table_is_shown_not_hidden() {
        let mut sim = Sim::new("/opt/app/many");
        for e in 0..EPOCH_ROWS {
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        let path = write_temp("trace.bin", &sim.bytes());
        let trace = load(&path, &LoadOptions::default()).expect("synthetic trace loads");
        let n = trace.snapshots.len();
        assert_eq!(n, EPOCH_ROWS + 1);
        let mut out = String::new();
        epoch_table(&mut out, &trace, 1..n - 1, &[]);
        assert!(!out.contains("not shown"), "{out}");
        assert_eq!(out.lines().skip(3).count(), n, "{out}");
    }

    #[test]
    fn epoch_table_columns_line_up_at_six_digit_epochs() {
        let mut sim = Sim::new("/opt/app/many");
        for e in 0..EPOCH_ROWS + 5 {
            sim.alloc(7, 64);
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        let path = write_temp("trace.bin", &sim.bytes());
        let mut trace = load(&path, &LoadOptions::default()).expect("synthetic trace loads");
        // The table's tail as a run of 100,000 marks shows it.
        let n = trace.snapshots.len();
        for (i, s) in trace.snapshots.iter_mut().enumerate().skip(n - EPOCH_ROWS / 2) {
            s.epoch = (100_000 + i + 1 - n) as u32;
        }
        let mut out = String::new();
        epoch_table(&mut out, &trace, 1..n - 1, &[]);
        let lines: Vec<&str> = out.lines().skip(2).collect();
        assert_eq!(lines.len(), EPOCH_ROWS + 2, "{out}");
        assert!(lines[EPOCH_ROWS + 1].starts_with("  100000  exit "), "{out}");
        assert!(lines[1].starts_with("       0  epoch 0 "), "{out}");
        assert!(lines[EPOCH_ROWS / 2 + 1].starts_with("     ...  ("), "{out}");
        // Every column's cells end where its header ends (right-aligned)
        // or start where it starts (the label and the cause, left-aligned).
        let header = lines[0];
        let headers = ["epoch", "label", "cause", "elapsed", "RSS", "live heap", "live allocs", "mapped", "tracer"];
        for line in lines.iter().skip(1).filter(|l| !l.contains("epochs not shown")) {
            for name in headers {
                let at = header.find(name).unwrap();
                let (start, end) = (at, at + name.len());
                let left = name == "label" || name == "cause";
                let edge = if left { start } else { end - 1 };
                assert_ne!(line.as_bytes()[edge], b' ', "{name}: {line}\n{header}");
                let outside = if left { start - 1 } else { end };
                assert_eq!(line.as_bytes().get(outside).unwrap_or(&b' '), &b' ', "{name}: {line}\n{header}");
            }
        }
    }

    /// A limit of 0 traces is no number of traces the run reached.
    #[test]
    fn the_exec_trace_limit_of_none_is_worded_as_none() {
        let rows = |limit: usize, descendants: usize| {
            let descendants: Vec<DescendantReport> =
                (0..descendants).map(|i| descendant(100 + i as u32, None, None)).collect();
            let mut out = String::new();
            descendants_section(&mut out, &descendants, 0, Some(limit));
            out
        };
        let none = rows(0, 0);
        assert_eq!(none, format!("  {:<10} (TRACER_EXEC_TRACES=0: the programs the run exec'd wrote no trace; TRACER_EXEC_TRACES=all lifts it)\n", ""));
        assert!(
            rows(2, 2).contains("(the run's 2 traces are its limit: programs it exec'd after that wrote none; "),
            "{}",
            rows(2, 2)
        );
        assert!(!rows(3, 2).contains("limit"), "{}", rows(3, 2));
    }

    /// Labels a C program passed as it had them: bytes not UTF-8, a newline,
    /// a tab. Every row keeps its columns where the header has them.
    #[test]
    fn labels_of_any_bytes_keep_the_epoch_table_aligned() {
        let mut sim = Sim::new("/opt/app/labels");
        for label in ["epoch 0", &String::from_utf8_lossy(b"\xff\xfe bad utf8"), "two\nlines", "tab\there"] {
            sim.alloc(7, 64);
            sim.mark(label);
        }
        sim.exit();
        let path = write_temp("trace.bin", &sim.bytes());
        let trace = load(&path, &LoadOptions::default()).expect("synthetic trace loads");
        let mut out = String::new();
        epoch_table(&mut out, &trace, 0..4, &[]);
        let lines: Vec<&str> = out.lines().skip(2).collect();
        assert!(lines[2].starts_with("      1  ?? bad utf8  mark "), "{out}");
        assert!(lines.iter().all(|l| l.is_ascii()), "one column a character: {out}");
        let cause_at = lines[0].find("cause").unwrap();
        for line in &lines[1..] {
            assert_eq!(line.chars().nth(cause_at - 1), Some(' '), "{out}");
            assert_ne!(line.chars().nth(cause_at), Some(' '), "{out}");
        }
    }

    #[test]
    fn a_frame_says_its_module_unless_its_name_does() {
        let frame = |function: &str, module: &str| Frame {
            file: Some("first.c".into()),
            line: Some(8),
            module: Some(module.into()),
            ..Frame::named(0x1234, function.into())
        };
        assert_eq!(frame_line(&frame("first_leak", "/opt/app/first"), true), "> first_leak  first.c:8  (first)");
        assert_eq!(frame_line(&frame("leak", "/opt/app/first"), false), "  leak  first.c:8  (first)");
        let unresolved = Frame { module: Some("/opt/app/first".into()), ..Frame::named(0x1234, "first+0x1234".into()) };
        assert_eq!(frame_line(&unresolved, false), "  first+0x1234");
        // In a stack, an own-code frame without a line says where it lies.
        let without_line = Frame { module_offset: Some(0x11a3), ..frame("fill", "/opt/app/first") };
        let without_line = Frame { file: None, line: None, own_code: true, ..without_line };
        assert_eq!(stack_frame_line(&without_line, true), "> fill  (first+0x11a3)");
        assert_eq!(frame_line(&without_line, true), "> fill  (first)", "a line's frame stands for its function");
        let library = Frame { own_code: false, ..without_line.clone() };
        assert_eq!(stack_frame_line(&library, false), "  fill  (first)");
        let with_line = Frame { module_offset: Some(0x11a3), own_code: true, ..frame("fill", "/opt/app/first") };
        assert_eq!(stack_frame_line(&with_line, true), "> fill  first.c:8  (first)");
    }

    #[test]
    fn ranks_read_as_runs() {
        assert_eq!(ranks_text(&[1]), "1 suspect: #1");
        assert_eq!(ranks_text(&[4, 1, 2, 3, 7, 9, 10]), "7 suspects: #1-#4, #7, #9-#10");
        let scattered: Vec<usize> = (1..=20).map(|i| i * 2).collect();
        assert_eq!(ranks_text(&scattered), "20 suspects: #2, #4, #6, #8, #10, #12, #14, #16 and 12 more");
    }

    /// A descendant's trace of 9 snapshots, exec'd, that found a leak of
    /// `leaking` bytes an epoch.
    fn descendant(pid: u32, rank: Option<trace_format::Rank>, leaking: Option<u64>) -> DescendantReport {
        DescendantReport {
            trace: Descendant {
                path: format!("./trace.bin.{pid}").into(),
                pid,
                forked_from: None,
                started_beside: false,
                cmdline: vec!["python".into(), "-u".into(), "train.py".into()],
                rank,
            },
            finding: leaking.map(|bytes_per_epoch| crate::findings::Finding {
                kind: VerdictKind::HeapLeak,
                summary: format!("1 suspect, +{}/epoch", bytes(bytes_per_epoch)),
                line: None,
                bytes_per_epoch,
            }),
            verdict: Some(if leaking.is_some() { VerdictKind::HeapLeak } else { VerdictKind::NoGrowth }),
            too_few_samples: false,
            snapshots: 9,
            lifetime_ns: 0,
            follows_parent: false,
            unfinished: false,
        }
    }

    /// Descendants that lived through the run in too few epochs are
    /// named, the first few of them.
    #[test]
    fn descendants_cut_into_too_few_epochs_are_named() {
        let short_lived = |pid: u32, lifetime_ns: u64| DescendantReport {
            snapshots: 2,
            lifetime_ns,
            verdict: None,
            ..descendant(pid, None, None)
        };
        let run_ns = 10_000_000_000;
        assert_eq!(unanalysed_descendants_note(&[short_lived(7001, 1_000_000)], run_ns), None, "over at once");
        let note = unanalysed_descendants_note(&[short_lived(7001, run_ns), short_lived(7002, 1_000_000)], run_ns);
        assert!(
            note.as_deref().unwrap_or_default().starts_with(
                "one of this process's descendants (./trace.bin.7001) ran for much of its run but was cut"
            ),
            "{note:?}"
        );
        let many: Vec<DescendantReport> = (7001..7006).map(|pid| short_lived(pid, run_ns)).collect();
        let note = unanalysed_descendants_note(&many, run_ns).unwrap();
        assert!(note.starts_with("5 of this process's descendants (./trace.bin.7001, ./trace.bin.7002, ./trace.bin.7003, and 2 more) ran"), "{note}");
    }

    /// A leaking rank comes before its healthy sibling's caches, though
    /// its pid is the higher.
    #[test]
    fn findings_are_ranked_by_growth_largest_first() {
        let descendants = [descendant(9500, None, Some(59 << 10)), descendant(9501, None, Some(2 << 20))];
        let mut out = String::new();
        descendants_section(&mut out, &descendants, 0, None);
        let findings: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("  findings")).take(2).collect();
        assert_eq!(
            findings,
            [
                "  findings   ./trace.bin.9501: heap_leak, 1 suspect, +2.00 MiB/epoch",
                "             ./trace.bin.9500: heap_leak, 1 suspect, +59.0 KiB/epoch",
            ]
        );
        let note = findings_note(&descendants).unwrap_or_default();
        assert!(note.contains("the largest ./trace.bin.9501: "), "{note}");
        let program = program_trace(&descendants).map(|d| d.trace.pid);
        assert_eq!(program, Some(9501), "the program a wrapper ran is the one that leaks most");
    }

    #[test]
    fn a_ranks_process_is_named_by_its_rank_beside_its_pid() {
        let mut sim = Sim::new("/venv/bin/python");
        sim.process_mut().settings = [("rank", "1"), ("local_rank", "1"), ("world_size", "2"), ("max_frames", "128")]
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .to_vec();
        sim.exit();
        let path = write_temp("trace.bin", &sim.bytes());
        let trace = load(&path, &LoadOptions::default()).expect("synthetic trace loads");
        let mut out = String::new();
        run_section(&mut out, &trace);
        assert!(out.contains(&format!("\n  pid        {} (rank 1 of 2, local rank 1)\n", trace.process.pid)), "{out}");
        assert!(!out.contains("rank = ") && out.contains("  settings   max_frames = 128\n"), "the pid says it: {out}");

        let descendant = |pid, rank, found: bool| descendant(pid, rank, found.then_some(1 << 20));
        let rank = |rank| Some(trace_format::Rank { rank, local_rank: Some(rank), world_size: Some(2) });
        let descendants =
            [descendant(6183, rank(0), false), descendant(6184, rank(1), true), descendant(6190, None, false)];
        let mut out = String::new();
        descendants_section(&mut out, &descendants, 0, None);
        let rows: Vec<&str> = out.lines().collect();
        assert_eq!(
            rows,
            [
                "  children   ./trace.bin.6183 (pid 6183, rank 0 of 2, exec'd: python -u train.py)",
                "             ./trace.bin.6184 (pid 6184, rank 1 of 2, exec'd: python -u train.py)",
                "             ./trace.bin.6190 (pid 6190, exec'd: python -u train.py)",
                "  findings   ./trace.bin.6184 (rank 1 of 2): heap_leak, 1 suspect, +1.00 MiB/epoch",
                "             (each has a report of its own: analyzer report <trace>)",
            ]
        );
        let note = findings_note(&descendants).unwrap_or_default();
        assert!(note.ends_with(", ./trace.bin.6184 (rank 1 of 2): heap_leak, 1 suspect, +1.00 MiB/epoch"), "{note}");

        // A DataLoader worker of rank 1 has its rank's variables: it is no rank.
        let mut worker = descendant(6201, rank(1), true);
        worker.trace.forked_from = Some(6184);
        let mut out = String::new();
        descendants_section(&mut out, &[worker], 0, None);
        assert!(out.starts_with("  children   ./trace.bin.6201 (pid 6201, a child of rank 1 of 2, forked: "), "{out}");
        assert!(out.contains("  findings   ./trace.bin.6201 (a child of rank 1 of 2): heap_leak"), "{out}");

        // One killed (the out-of-memory killer's choice) says so.
        let mut killed = descendant(6202, None, false);
        killed.unfinished = true;
        let mut out = String::new();
        descendants_section(&mut out, &[killed], 0, None);
        assert!(out.starts_with("  children   ./trace.bin.6202 (pid 6202, exec'd: python -u train.py; unfinished: killed, or running still)\n"), "{out}");
    }
}
