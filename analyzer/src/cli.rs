//! The command line: `analyzer report` and `analyzer flamegraph`.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use crate::analysis::{NoiseFloor, VerdictKind};
use crate::error::Failure;
use crate::format::bytes;
use crate::progress::{Progress, When};
use crate::render::{self, flame, Drawn, FlamegraphInfo, Report};
use crate::symbolize::Symbolizer;
use crate::trace::{load_showing, IntMap, LoadOptions, Trace};

#[derive(Parser, Debug)]
#[command(name = "analyzer", version, about = "Finds what leaks in a trace written by libtracer.so.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// When to show progress on stderr: auto shows it on a terminal once
    /// the work has taken a second.
    #[arg(long, value_enum, global = true, default_value = "auto", value_name = "WHEN")]
    progress: When,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The run, its epochs, the leak suspects and the verdict; also draws the
    /// flamegraph of leaked bytes.
    Report {
        /// The trace file, or a directory holding trace.bin (the tracer's
        /// default name).
        #[arg(default_value = trace_format::DEFAULT_TRACE_FILE)]
        trace: PathBuf,
        /// Print the result as one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Where to write the flamegraph of leaked bytes [default: TRACE.leaks.svg].
        #[arg(short = 'o', long = "output", value_name = "SVG")]
        output: Option<PathBuf>,
        /// How many suspects to show.
        #[arg(long, value_name = "N", default_value_t = 10, allow_negative_numbers = true, value_parser = parse_count)]
        top: usize,
        /// Growth per epoch a stack must exceed to be a suspect, as 4096,
        /// 64k or 2m [default: 4k, or 0.1% of the memory traced at analysis
        /// epoch 1 if more]. A stack below it is still a suspect when its
        /// line keeps more, or when the heap rises at every epoch.
        #[arg(long, value_name = "BYTES", allow_negative_numbers = true, value_parser = parse_bytes)]
        noise_floor: Option<u64>,
        /// Exit with status 3, after printing the report, when the verdict
        /// is one of these kinds (comma-separated, as the JSON names them:
        /// heap_leak, bounded_cache, copy_on_write, allocator_retention, file_pages,
        /// growth_outside_heap, heap_not_traced, no_growth, too_few_epochs;
        /// a wrapper's verdict is the program's it ran), or when a trace
        /// listed under findings (a descendant's, or a process's started
        /// beside it) found one of them; also too_few_samples: a sampled
        /// run, or a trace beside it, too sparse to tell its growth from
        /// chance (the JSON's verdict.too_few_samples).
        #[arg(long, value_name = "KINDS", value_delimiter = ',', value_parser = parse_fail_on)]
        fail_on: Vec<FailOn>,
    },
    /// Draws a flamegraph of leaked, live or allocated bytes, or of the
    /// change in live bytes between two epochs.
    Flamegraph {
        /// The trace file, or a directory holding trace.bin.
        #[arg(default_value = trace_format::DEFAULT_TRACE_FILE)]
        trace: PathBuf,
        /// What the width of a frame shows [default: leaked].
        #[arg(long, value_enum)]
        weigh: Option<Weigh>,
        /// The epoch for --weigh live or allocated [default: the last].
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = parse_epoch)]
        epoch: Option<usize>,
        /// Differential flamegraph of live bytes at epoch A versus epoch B.
        #[arg(long, num_args = 2, value_names = ["A", "B"], allow_negative_numbers = true, value_parser = parse_epoch)]
        diff: Option<Vec<usize>>,
        /// Where to write the SVG [default: TRACE.<what>.svg].
        #[arg(short = 'o', long = "output", value_name = "SVG")]
        output: Option<PathBuf>,
        /// For --weigh leaked: the noise floor, as `report --noise-floor`.
        #[arg(long, value_name = "BYTES", allow_negative_numbers = true, value_parser = parse_bytes)]
        noise_floor: Option<u64>,
    },
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    trace_format::parse_byte_count(text).ok_or_else(|| {
        let trimmed = text.trim();
        let digits = trimmed.strip_suffix(['k', 'm', 'g', 'K', 'M', 'G']).unwrap_or(trimmed);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            format!("'{text}' is more bytes than a 64-bit count holds: give one such as 4096, 64k or 2m")
        } else {
            format!("'{text}' is not a byte count: give one such as 4096, 64k or 2m")
        }
    })
}

/// What `report --fail-on` fails on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FailOn {
    Kind(VerdictKind),
    /// The run was sampled too sparsely to tell its growth from chance.
    TooFewSamples,
}

const TOO_FEW_SAMPLES: &str = "too_few_samples";

fn parse_fail_on(text: &str) -> Result<FailOn, String> {
    let name = text.trim();
    if name == TOO_FEW_SAMPLES {
        return Ok(FailOn::TooFewSamples);
    }
    VerdictKind::ALL.into_iter().find(|kind| kind.name() == name).map(FailOn::Kind).ok_or_else(|| {
        let names: Vec<&str> = VerdictKind::ALL.iter().map(|kind| kind.name()).chain([TOO_FEW_SAMPLES]).collect();
        format!("'{text}' is not a verdict kind: give one or more of {}, separated by commas", names.join(", "))
    })
}

fn parse_count(text: &str) -> Result<usize, String> {
    text.trim().parse().map_err(|_| format!("'{text}' is not a count: give a whole number, 0 or more"))
}

fn parse_epoch(text: &str) -> Result<usize, String> {
    text.trim().parse().map_err(|_| format!("'{text}' is not an epoch: give its number, as in --epoch 3 or --diff 2 5"))
}

fn noise_floor(bytes: Option<u64>) -> NoiseFloor {
    bytes.map_or(NoiseFloor::Scaled, NoiseFloor::Bytes)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Weigh {
    /// Bytes leaked per epoch by the leak suspects (as in the report).
    Leaked,
    /// Bytes alive at the end of the epoch.
    Live,
    /// Bytes allocated during the epoch.
    Allocated,
}

/// Runs the command line; returns the exit status.
pub fn main() -> i32 {
    install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(err),
    };
    let mut progress = Progress::new(cli.progress);
    let result = match cli.command {
        Command::Report { trace, json, output, top, noise_floor: floor, fail_on } => {
            report(&trace_file(trace), json, output, top, noise_floor(floor), &fail_on, &mut progress)
        }
        Command::Flamegraph { trace, weigh, epoch, diff, output, noise_floor: floor } => {
            flamegraph(&trace_file(trace), weigh, epoch, diff, output, floor, &mut progress).map(|text| (text, 0))
        }
    };
    progress.finish();
    match result {
        Ok((text, status)) => {
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
                Ok(()) => status,
                Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => status,
                Err(err) => {
                    eprintln!("analyzer: error: cannot write the output: {err}; check where stdout goes");
                    1
                }
            }
        }
        Err(failure) => {
            eprintln!("analyzer: error: {failure}");
            1
        }
    }
}

/// The trace a command reads: `given`, or trace.bin in it when it is a
/// directory (where `TRACER_OUTPUT` named a directory, the tracer wrote it).
fn trace_file(given: PathBuf) -> PathBuf {
    if given.is_dir() {
        given.join(trace_format::DEFAULT_TRACE_FILE)
    } else {
        given
    }
}

fn usage_error(err: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                2
            } else {
                0
            }
        }
        // Only report takes --json; clap's tip, to pass it as a value
        // after `--`, would not help.
        ErrorKind::UnknownArgument if unknown_argument(&err) == Some("--json") => {
            eprintln!(
                "analyzer: error: flamegraph draws an SVG and prints no JSON; the JSON is the report's: analyzer report --json TRACE"
            );
            2
        }
        _ => {
            let text = err.to_string();
            let parts: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty() && !l.starts_with("tip: to pass"))
                .collect();
            let joined = parts.join(" ").trim_start_matches("error:").trim().to_string();
            let first = if joined.is_empty() { "invalid arguments".to_string() } else { joined };
            eprintln!("analyzer: error: {first}; run 'analyzer --help' for usage");
            2
        }
    }
}

/// The argument clap did not know, as given.
fn unknown_argument(err: &clap::Error) -> Option<&str> {
    match err.get(clap::error::ContextKind::InvalidArg)? {
        clap::error::ContextValue::String(argument) => Some(argument),
        _ => None,
    }
}

fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let what = if let Some(s) = info.payload().downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "unexpected failure".to_string()
        };
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        let what = crate::error::one_line(what);
        eprintln!("analyzer: error: internal error ({what}{at}); please report it with the trace file");
        std::process::exit(101);
    }));
}

fn default_svg(trace: &Path, what: &str) -> PathBuf {
    let mut name = trace.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "trace".into());
    name.push(format!(".{what}.svg"));
    trace.with_file_name(name)
}

fn base_options() -> LoadOptions {
    LoadOptions { capture: BTreeSet::new(), until: None }
}

fn warn(line: &str) {
    eprintln!("analyzer: warning: {line}");
}

fn report(
    path: &Path,
    json: bool,
    output: Option<PathBuf>,
    top: usize,
    floor: NoiseFloor,
    fail_on: &[FailOn],
    progress: &mut Progress,
) -> Result<(String, i32), Failure> {
    let trace = load_showing(path, &base_options(), progress)?;
    progress.phase("analyzing", 0);
    let mut symbolizer = Symbolizer::new(&trace.process, &trace.modules, &trace.pycode);
    let (analysis, phases) = render::phases::analyze(path, &trace, floor, &mut symbolizer);
    progress.phase("symbolizing and drawing", 0);
    let mut report = Report::build(&trace, &analysis, &mut symbolizer, top, floor);
    report.verdict_message.push_str(&render::phases::words(&phases));
    report.phases = phases;

    // The flamegraph of leaked bytes: every suspect, weighed by its growth;
    // without suspects, the growth below the noise floor the report sums.
    let asked_for_svg = output.is_some();
    let svg = output.unwrap_or_else(|| default_svg(path, "leaks"));
    let drawn = (|| -> Result<Drawn, Failure> {
        Ok(if report.below_floor.is_empty() {
            let mut stacks = Vec::with_capacity(analysis.suspects.len());
            for (i, s) in analysis.suspects.iter().enumerate() {
                let frames = match report.symbolized.get(i) {
                    Some(symbolized) => flame::fold(&symbolized.frames),
                    None => flame::fold(&render::stack_frames(&trace, &mut symbolizer, s.stack)),
                };
                stacks.push((frames, s.growth_bytes_per_epoch));
            }
            let subtitle = Some(format!("{} leak suspects, bytes leaked per epoch", analysis.suspects.len()));
            let drawn = flame::write(&svg, "Leaked bytes per epoch", subtitle, &stacks, "no leak suspects")?;
            if drawn {
                Drawn::Suspects
            } else {
                Drawn::Nothing
            }
        } else {
            let stacks: Vec<flame::Folded> =
                report.below_floor.iter().map(|s| (flame::fold(&s.frames), s.suspect.growth_bytes_per_epoch)).collect();
            let subtitle = Some(format!(
                "no suspect; the {} stacks below the noise floor ({}/epoch) that grow the most, bytes kept per epoch",
                stacks.len(),
                bytes(analysis.noise_floor)
            ));
            flame::write(&svg, "Growth below the noise floor, bytes per epoch", subtitle, &stacks, "no growth")?;
            Drawn::BelowFloor
        })
    })();
    // The report is read where the trace is; a flamegraph beside a trace in
    // a directory this user cannot write is no reason to withhold it.
    let drawn = match drawn {
        Ok(drawn) => drawn,
        Err(failure) if !asked_for_svg => {
            warn(&failure.to_string());
            Drawn::NotWritten(failure.to_string())
        }
        Err(failure) => return Err(failure),
    };
    report.flamegraph = Some(FlamegraphInfo { path: svg, drawn });

    progress.finish();
    for w in render::end_warning(&trace).into_iter().chain(render::trace_warnings(&trace)) {
        warn(&w);
        report.warnings.push(w);
    }
    for w in symbolizer.warnings() {
        warn(w);
        report.warnings.push(w.clone());
    }
    let found = fail_on.iter().any(|fail_on| match *fail_on {
        FailOn::Kind(kind) => report.found(kind),
        FailOn::TooFewSamples => report.too_few_samples(),
    });
    let text = if json { render::json::render(&report) } else { render::text::render(&report) };
    Ok((text, if found { FAILED_ON_VERDICT } else { 0 }))
}

/// The exit status of a report whose verdict is one `--fail-on` names:
/// apart from a failure's 1 and a usage error's 2.
const FAILED_ON_VERDICT: i32 = 3;

fn check_epoch(trace: &Trace, epoch: usize, what: &str) -> Result<(), Failure> {
    let n = trace.snapshots.len();
    if epoch < n {
        Ok(())
    } else {
        Err(Failure::new(
            format!("{what} {epoch} is not in the trace"),
            if n == 1 { "the only valid epoch is 0".to_string() } else { format!("valid epochs are 0 to {}", n - 1) },
        ))
    }
}

fn weigh_stacks(trace: &Trace, symbolizer: &mut Symbolizer<'_>, weights: IntMap<u32, u64>) -> Vec<flame::Folded> {
    let mut ids: Vec<(u32, u64)> = weights.into_iter().filter(|(_, w)| *w > 0).collect();
    ids.sort_unstable();
    ids.into_iter().map(|(id, w)| (flame::fold(&render::stack_frames(trace, symbolizer, id)), w)).collect()
}

fn flamegraph(
    path: &Path,
    weigh: Option<Weigh>,
    epoch: Option<usize>,
    diff: Option<Vec<usize>>,
    output: Option<PathBuf>,
    floor: Option<u64>,
    progress: &mut Progress,
) -> Result<String, Failure> {
    if diff.is_some() && (weigh.is_some() || epoch.is_some() || floor.is_some()) {
        return Err(Failure::new(
            "--diff cannot be combined with --weigh, --epoch or --noise-floor",
            "--diff A B always compares live bytes; drop the other option",
        ));
    }
    let weigh = weigh.unwrap_or(Weigh::Leaked);
    if weigh == Weigh::Leaked && epoch.is_some() {
        return Err(Failure::new(
            "--epoch does not apply to --weigh leaked",
            "use --weigh live or --weigh allocated with --epoch",
        ));
    }
    if weigh != Weigh::Leaked && floor.is_some() {
        return Err(Failure::new(
            "--noise-floor applies to --weigh leaked only",
            "drop --noise-floor, or draw the leaked bytes",
        ));
    }
    let mut options = base_options();
    options.capture.extend(epoch);
    options.capture.extend(diff.iter().flatten().copied());
    let trace = load_showing(path, &options, progress)?;
    progress.phase("symbolizing and drawing", 0);
    let last = trace.snapshots.len() - 1;
    let mut symbolizer = Symbolizer::new(&trace.process, &trace.modules, &trace.pycode);

    // Printed once the progress line is cleared.
    let mut late_warnings = Vec::new();
    let (svg, drawn, what) = if let Some(pair) = diff {
        let (a, b) = (pair[0], pair[1]);
        check_epoch(&trace, a, "epoch")?;
        check_epoch(&trace, b, "epoch")?;
        let live = |i: usize| trace.state(i).map(|s| s.live_bytes_by_stack()).unwrap_or_default();
        let before = weigh_stacks(&trace, &mut symbolizer, live(a));
        let after = weigh_stacks(&trace, &mut symbolizer, live(b));
        let svg = output.unwrap_or_else(|| default_svg(path, &format!("diff-{a}-{b}")));
        let title = format!("Live bytes at epoch {b} compared with epoch {a}");
        let subtitle = Some("width: live bytes at the later epoch; red grew, blue shrank".to_string());
        let drawn = flame::write_diff(&svg, &title, subtitle, &before, &after, "no live allocations")?;
        (svg, drawn, format!("live bytes, epoch {a} versus {b}"))
    } else {
        match weigh {
            Weigh::Leaked => {
                let (analysis, _) = render::phases::analyze(path, &trace, noise_floor(floor), &mut symbolizer);
                let weights: IntMap<u32, u64> =
                    analysis.suspects.iter().map(|s| (s.stack, s.growth_bytes_per_epoch)).collect();
                let stacks = weigh_stacks(&trace, &mut symbolizer, weights);
                let svg = output.unwrap_or_else(|| default_svg(path, "leaks"));
                let subtitle = Some(format!("{} leak suspects, bytes leaked per epoch", analysis.suspects.len()));
                let drawn = flame::write(&svg, "Leaked bytes per epoch", subtitle, &stacks, "no leak suspects")?;
                if analysis.verdict.kind == crate::analysis::VerdictKind::TooFewEpochs {
                    late_warnings.push(analysis.verdict_message(None));
                }
                (svg, drawn, "leaked bytes per epoch".to_string())
            }
            Weigh::Live | Weigh::Allocated => {
                let n = epoch.unwrap_or(last);
                check_epoch(&trace, n, "epoch")?;
                let state = trace.state(n).cloned().unwrap_or_default();
                let number = trace.snapshots[n].epoch;
                let (weights, kind, title) = if weigh == Weigh::Live {
                    (state.live_bytes_by_stack(), "live", format!("Live bytes at the end of epoch {n}"))
                } else {
                    (state.allocated_bytes_by_stack(number), "allocated", format!("Bytes allocated during epoch {n}"))
                };
                let stacks = weigh_stacks(&trace, &mut symbolizer, weights);
                let svg = output.unwrap_or_else(|| default_svg(path, &format!("{kind}-{n}")));
                let label = if weigh == Weigh::Live { "no live allocations" } else { "no allocations" };
                let drawn = flame::write(&svg, &title, Some(trace.snapshots[n].label.clone()), &stacks, label)?;
                (svg, drawn, format!("{kind} bytes, epoch {n}"))
            }
        }
    };
    progress.finish();
    for w in render::end_warning(&trace).into_iter().chain(render::trace_warnings(&trace)) {
        warn(&w);
    }
    for w in symbolizer.warnings().iter().chain(&late_warnings) {
        warn(w);
    }
    Ok(if drawn {
        format!("Flamegraph of {what}: {}\n", svg.display())
    } else {
        format!("Flamegraph of {what}: {} (nothing to draw)\n", svg.display())
    })
}
