//! Settings read from the environment once, when the tracer starts.

use std::env;
use std::path::{Path, PathBuf};

use crate::sys::{self, Claim};

/// Where a process writes its trace when `TRACER_OUTPUT` is not set.
pub const DEFAULT_OUTPUT: &str = trace_format::DEFAULT_TRACE_FILE;
/// Length of a time-slice epoch when `TRACER_EPOCH_SECONDS` is not set.
pub const DEFAULT_EPOCH_SECONDS: f64 = 10.0;
/// Set by the first traced process for its descendants (forked or exec'd):
/// the absolute path of its trace, which they suffix with their pid.
pub const INHERITED_OUTPUT_VAR: &str = "TRACER_INHERITED_OUTPUT";
/// Set by the first traced process for its descendants: the run they all
/// belong to (see [`trace_format::RUN_SETTING`]).
pub const RUN_VAR: &str = "TRACER_RUN";
/// Set by each traced program as it starts, for the programs it execs or
/// spawns: its image (see [`trace_format::IMAGE_SETTING`]).
pub const PARENT_IMAGE_VAR: &str = "TRACER_PARENT_IMAGE";
/// Set by each traced Python process as it starts, for the children it
/// spawns (Python's multiprocessing `spawn` start method): where the page
/// of its shared counters is (see [`crate::sys::SharedCountersAddress`]);
/// removed by a traced process that has no such page.
pub const PARENT_COUNTERS_VAR: &str = "TRACER_PARENT_COUNTERS";
/// Set by a traced process once it has printed what it had to say at start:
/// `ok`, or `failed` when it could not create its trace. Its descendants
/// read the same settings (the shells of a wrapper script such as a pyenv
/// shim, exec'd or forked workers) and would print the same lines again.
pub const REPORTED_VAR: &str = "TRACER_REPORTED";
/// [`REPORTED_VAR`]'s values.
pub const REPORTED_OK: &str = "ok";
pub const REPORTED_FAILURE: &str = "failed";
/// The warnings about the settings already printed in the process tree,
/// by their hashes (see [`Config::warnings_unsaid`]).
pub const WARNINGS_SAID_VAR: &str = "TRACER_WARNINGS_SAID";
/// At most this many are kept: a tree with more says some twice.
const MOST_WARNINGS_SAID: usize = 64;
/// `0` keeps passes over a PyTorch DataLoader from closing epochs.
pub const AUTO_EPOCHS_VAR: &str = "TRACER_AUTO_EPOCHS";
/// `1` traces the objects of CPython's own allocator (pymalloc), which
/// serves objects of 512 bytes or less from arenas it maps itself: each is
/// sampled by bytes, for the whole run, at the rate of
/// [`SAMPLE_VAR`] or the warm-up's (objects come by the million an epoch,
/// too many to record each one), and the arenas are no longer recorded.
pub const PYTHON_OBJECTS_VAR: &str = "TRACER_PYTHON_OBJECTS";
/// `0` leaves Python frames out of the stacks.
pub const PYTHON_FRAMES_VAR: &str = "TRACER_PYTHON_FRAMES";
/// `1` compares each fast capture with libgcc's (read where the check runs).
pub const UNWIND_CHECK_VAR: &str = "TRACER_UNWIND_CHECK";
/// Samples allocations by bytes for the whole run.
pub const SAMPLE_VAR: &str = "TRACER_SAMPLE_BYTES";
/// Samples the warm-up (the first epoch) and records every allocation
/// after it; `0` records every allocation from the start.
pub const WARM_UP_SAMPLE_VAR: &str = "TRACER_WARMUP_SAMPLE_BYTES";
/// The warm-up's sampling rate when [`WARM_UP_SAMPLE_VAR`] is not set. The
/// warm-up of a PyTorch job is its imports: a million allocations, nearly
/// each at a stack of its own, whose tables recorded in full cost more time
/// and memory than the rest of a short run, while the leak analysis never
/// ranks what the first epoch allocated. At this rate an allocation of n
/// bytes is kept with a chance of about n in 65,536: the first epoch's
/// large allocations (weights, buffers) all are, and the kept small ones
/// stand for the others.
pub const DEFAULT_WARM_UP_SAMPLE_BYTES: u64 = 64 << 10;
/// How many of a process's forked DataLoader workers write traces;
/// `all` for every one.
pub const WORKER_TRACES_VAR: &str = "TRACER_WORKER_TRACES";
/// [`WORKER_TRACES_VAR`] when not set. A loader without persistent workers
/// forks new ones for every pass: a job of thousands of short epochs would
/// leave a trace per worker and pass, each telling what the first ones
/// told (a worker of one pass starts from its parent's memory as it is
/// then, which the parent's own trace follows). The analyzer looks at as
/// many descendants' traces.
pub const DEFAULT_WORKER_TRACES: u32 = 256;
/// How many traces the programs a run execs may write; `all` for no limit.
pub const EXEC_TRACES_VAR: &str = "TRACER_EXEC_TRACES";
/// [`EXEC_TRACES_VAR`] when not set. A job that runs a command every step
/// (`subprocess.run(["nvidia-smi", ...])`), or whose DataLoader spawns
/// fresh interpreters for every pass (`multiprocessing_context="spawn"`,
/// each one's trace about 2 MB with torch imported), would otherwise fill
/// the disk it checkpoints to. A pyenv shim execs a dozen programs, a
/// `torch.compile` run about fifty.
pub const DEFAULT_EXEC_TRACES: u32 = 1024;

pub struct Config {
    /// The path named by the user (absolute), which descendants suffix.
    pub base_output: PathBuf,
    /// This process descends from a traced process and must not write `base_output`.
    pub is_descendant: bool,
    /// The run this process belongs to: its first traced ancestor's (empty
    /// when that ancestor named none), or for the first, its own (see
    /// [`Config::start_run`]).
    pub run: String,
    /// The image that exec'd or spawned this program (empty in the first
    /// traced process, or when the ancestor named none).
    pub parent_image: String,
    /// Length of a time slice; `None` when time slices are off.
    pub epoch_seconds: Option<f64>,
    /// Time slices were asked for explicitly, so they go on after the
    /// program's first `tracer_mark` (by default marks replace them).
    pub epoch_seconds_explicit: bool,
    /// Mean bytes between samples (`TRACER_SAMPLE_BYTES`, or the warm-up's:
    /// `TRACER_WARMUP_SAMPLE_BYTES` or its default); `None` records every
    /// allocation.
    pub sample_bytes: Option<u64>,
    /// Sampling ends with the warm-up: every allocation is recorded from
    /// then on.
    pub sample_warm_up_only: bool,
    /// Passes over a PyTorch DataLoader close epochs (`TRACER_AUTO_EPOCHS`, on unless `0`).
    pub auto_epochs: bool,
    /// Python frames are read into the stacks (`TRACER_PYTHON_FRAMES`, on unless `0`).
    pub python_frames: bool,
    /// Python's small objects are traced through its object allocator's
    /// hooks, sampled (`TRACER_PYTHON_OBJECTS`, off unless `1`).
    pub python_objects: bool,
    /// How many forked DataLoader workers write traces (`None`: every one).
    pub worker_traces: Option<u32>,
    /// How many traces the run's exec'd programs write (`None`: every one).
    pub exec_traces: Option<u32>,
    /// Problems with the settings, to be reported once.
    pub warnings: Vec<String>,
    /// What an ancestor already printed at its start (see [`REPORTED_VAR`]).
    pub ancestor_reported: Option<String>,
    /// The process's place in a distributed job, as settings (see
    /// [`trace_format::RANK_SETTINGS`]): those of the launcher's variables
    /// set to a number.
    pub rank: Vec<(String, String)>,
}

impl Config {
    /// Time slices of a length of their own were asked for: a worker then
    /// cuts its own instead of following its parent's epochs.
    /// `TRACER_EPOCH_SECONDS=0`, which turns slices off, asks for none.
    pub fn asks_for_time_slices(&self) -> bool {
        self.epoch_seconds_explicit && self.epoch_seconds.is_some()
    }

    pub fn from_env() -> Config {
        let mut warnings = Vec::new();
        let inherited = env::var_os(INHERITED_OUTPUT_VAR).filter(|v| !v.is_empty());
        let is_descendant = inherited.is_some();
        let base_output = match inherited {
            Some(path) => PathBuf::from(path),
            None => output_path(
                env::var_os("TRACER_OUTPUT").filter(|v| !v.is_empty()).unwrap_or_else(|| DEFAULT_OUTPUT.into()),
            ),
        };
        let (epoch_seconds, epoch_seconds_explicit) = match env::var("TRACER_EPOCH_SECONDS") {
            Err(_) => (Some(DEFAULT_EPOCH_SECONDS), false),
            Ok(text) => match text.trim().parse::<f64>() {
                Ok(0.0) => (None, true),
                Ok(seconds) if seconds.is_finite() && seconds > 0.0 => (Some(seconds), true),
                _ => {
                    warnings.push(format!(
                        "TRACER_EPOCH_SECONDS={text:?} is not a number of seconds (use e.g. 30, or 0 to turn time slices off); using {DEFAULT_EPOCH_SECONDS}"
                    ));
                    (Some(DEFAULT_EPOCH_SECONDS), false)
                }
            },
        };
        let sample_bytes = sample_bytes_var(SAMPLE_VAR, None, &mut warnings);
        let warm_up_sample_bytes = match env::var_os(WARM_UP_SAMPLE_VAR) {
            None => Some(DEFAULT_WARM_UP_SAMPLE_BYTES),
            Some(_) => {
                let asked = sample_bytes_var(WARM_UP_SAMPLE_VAR, Some(DEFAULT_WARM_UP_SAMPLE_BYTES), &mut warnings);
                if sample_bytes.is_some() && asked.is_some() {
                    warnings.push(format!(
                        "both {SAMPLE_VAR} and {WARM_UP_SAMPLE_VAR} are set; sampling the whole run (unset one of them)"
                    ));
                }
                asked
            }
        };
        let sample_warm_up_only = sample_bytes.is_none() && warm_up_sample_bytes.is_some();
        let sample_bytes = sample_bytes.or(warm_up_sample_bytes);
        let auto_epochs = switch_var(AUTO_EPOCHS_VAR, true, "0 turns DataLoader epochs off", &mut warnings);
        let python_frames = switch_var(PYTHON_FRAMES_VAR, true, "0 leaves Python frames out", &mut warnings);
        let python_objects =
            switch_var(PYTHON_OBJECTS_VAR, false, "1 traces Python's small objects, sampled", &mut warnings);
        // Only told here when unreadable: the unwinder reads it itself, as
        // it may capture before the session has its settings.
        switch_var(UNWIND_CHECK_VAR, false, "1 compares each capture with libgcc's", &mut warnings);
        let worker_traces = count_var(WORKER_TRACES_VAR, DEFAULT_WORKER_TRACES, "workers", &mut warnings);
        let exec_traces = count_var(EXEC_TRACES_VAR, DEFAULT_EXEC_TRACES, "traces", &mut warnings);
        let names = env::vars_os().filter_map(|(name, _)| name.into_string().ok());
        warnings.extend(misspelt_settings(names));
        Config {
            base_output,
            is_descendant,
            run: if is_descendant { env::var(RUN_VAR).unwrap_or_default() } else { String::new() },
            parent_image: if is_descendant { env::var(PARENT_IMAGE_VAR).unwrap_or_default() } else { String::new() },
            epoch_seconds,
            epoch_seconds_explicit,
            sample_bytes,
            sample_warm_up_only,
            auto_epochs,
            python_frames,
            python_objects,
            worker_traces,
            exec_traces,
            warnings,
            ancestor_reported: env::var(REPORTED_VAR).ok(),
            rank: rank_settings(|var| env::var(var).ok()),
        }
    }

    /// The warnings about the settings that no ancestor printed (a launcher
    /// may set a variable for the command it runs alone), and the value of
    /// [`WARNINGS_SAID_VAR`] to hand down once they are printed.
    pub fn warnings_unsaid(&self) -> (Vec<&str>, String) {
        use std::hash::{Hash, Hasher};
        let inherited = env::var(WARNINGS_SAID_VAR).unwrap_or_default();
        let mut said: Vec<String> = inherited.split(',').filter(|key| !key.is_empty()).map(String::from).collect();
        let mut unsaid = Vec::new();
        for warning in &self.warnings {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            warning.hash(&mut hasher);
            let key = format!("{:x}", hasher.finish());
            if !said.contains(&key) {
                unsaid.push(warning.as_str());
                said.push(key);
            }
        }
        let kept = said.len().saturating_sub(MOST_WARNINGS_SAID);
        (unsaid, said[kept..].join(","))
    }

    /// Makes this first traced process, of image `image`, the start of a
    /// run named after it, and hands the run and the trace's path on to its
    /// descendants through the environment.
    pub fn start_run(&mut self, image: &str) {
        self.run = image.to_string();
        env::set_var(INHERITED_OUTPUT_VAR, &self.base_output);
        env::set_var(RUN_VAR, &self.run);
    }

    /// Whether this program, exec'd in a run, finds the run's programs'
    /// traces at [`Config::exec_traces`] already: the traces beside the
    /// run's own named like a descendant's (`<output>.<pid>`, ...) and
    /// written since the run started. Counted at each exec'd program's
    /// start, which reads the directory (a millisecond for a thousand
    /// files); forked DataLoader workers, which have a limit of their own,
    /// count too.
    pub fn run_traces_at_limit(&self) -> bool {
        let Some(limit) = self.exec_traces else { return false };
        let Some(started) = run_started(&self.run) else { return false };
        traces_since(&self.base_output, started, limit) >= limit
    }

    /// The candidate paths for this process's trace, in order of preference:
    /// the named path for the first traced process, unless another process
    /// holds it; then `<path>.<pid>` (then `<path>.<pid>.1`, ...), which
    /// descendants create exclusively so that no two processes ever write
    /// one file. A device (`/dev/null`) is every process's output.
    pub fn output_candidates(&self, descendant: bool, pid: u32) -> impl Iterator<Item = (PathBuf, Claim)> + '_ {
        let shared = std::fs::metadata(&self.base_output).is_ok_and(|m| !m.is_file() && !m.is_dir());
        let first = (!descendant || shared).then(|| (self.base_output.clone(), Claim::Locked));
        let suffixed = (0..16u32).map(move |n| {
            let mut name = self.base_output.clone().into_os_string();
            name.push(format!(".{pid}"));
            if n > 0 {
                name.push(format!(".{n}"));
            }
            (PathBuf::from(name), Claim::Exclusive)
        });
        first.into_iter().chain(suffixed)
    }
}

/// Makes this library's `LD_PRELOAD` entry absolute when it was given as a
/// relative path (`LD_PRELOAD=target/release/libtracer.so`): a descendant
/// that runs in another directory (a launcher's `cd`, a `subprocess` with
/// `cwd=`) would have the loader print an error for it and run untraced.
/// Called once at start, before the program runs.
pub fn make_own_preload_absolute() {
    let (Some(preload), Some(own), Ok(cwd)) = (env::var_os("LD_PRELOAD"), sys::own_library_name(), env::current_dir())
    else {
        return;
    };
    let (Some(preload), Some(own)) = (preload.to_str(), own.to_str()) else { return };
    if let Some(absolute) = preload_with_own_entry_absolute(preload, own, &cwd) {
        env::set_var("LD_PRELOAD", absolute);
    }
}

/// `preload` with each entry equal to `own` (the name the loader loaded
/// this library by) made absolute from `cwd`, when `own` is a relative
/// path; `None` when nothing changes. Entries are separated by spaces or
/// colons, which are kept; a bare file name, searched in the library
/// path, is left as it is.
fn preload_with_own_entry_absolute(preload: &str, own: &str, cwd: &Path) -> Option<String> {
    if !own.contains('/') || own.starts_with('/') {
        return None;
    }
    let absolute = cwd.join(own);
    let absolute = absolute.to_str()?;
    let mut rewritten = String::with_capacity(preload.len() + absolute.len());
    let mut changed = false;
    for piece in preload.split_inclusive([' ', ':']) {
        let entry = piece.strip_suffix([' ', ':']).unwrap_or(piece);
        let separator = &piece[entry.len()..];
        if entry == own {
            rewritten.push_str(absolute);
            changed = true;
        } else {
            rewritten.push_str(entry);
        }
        rewritten.push_str(separator);
    }
    changed.then_some(rewritten)
}

/// The settings a user sets.
const SETTINGS: [&str; 10] = [
    "TRACER_OUTPUT",
    "TRACER_EPOCH_SECONDS",
    AUTO_EPOCHS_VAR,
    SAMPLE_VAR,
    WARM_UP_SAMPLE_VAR,
    EXEC_TRACES_VAR,
    WORKER_TRACES_VAR,
    PYTHON_FRAMES_VAR,
    PYTHON_OBJECTS_VAR,
    UNWIND_CHECK_VAR,
];

/// A warning for each of `names` (the environment's) that is a setting
/// misspelt (`TRACER_SAMPEL_BYTES`, `TRACER_EPOCH_SECOND`): otherwise it
/// would be ignored without a word. Names further from every setting are
/// another program's, or the tracer's own hand-downs, and are left alone.
fn misspelt_settings(names: impl Iterator<Item = String>) -> Vec<String> {
    names
        .filter(|name| name.starts_with("TRACER_") && !SETTINGS.contains(&name.as_str()))
        .filter_map(|name| {
            let meant = SETTINGS.iter().find(|setting| edit_distance(&name, setting) <= 2)?;
            Some(format!("{name} is not a setting of the tracer and is ignored; did you mean {meant}?"))
        })
        .collect()
}

/// The Levenshtein distance between two ASCII names.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, &y) in b.iter().enumerate() {
            current.push((previous[j] + usize::from(x != y)).min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// A sampling rate from `var`: `None` when unset or `0` (no sampling); when
/// unreadable, `fallback`, with a warning.
fn sample_bytes_var(var: &str, fallback: Option<u64>, warnings: &mut Vec<String>) -> Option<u64> {
    let text = env::var(var).ok()?;
    let Some(bytes) = trace_format::parse_byte_count(&text) else {
        let instead = match fallback {
            Some(bytes) => format!("using the default, {bytes}"),
            None => "ignoring it".to_string(),
        };
        warnings.push(format!(
            "{var}={text:?} is not a number of bytes (use e.g. 524288, 512k or 1m, or 0 for no sampling); {instead}"
        ));
        return fallback;
    };
    (bytes > 0).then_some(bytes)
}

/// A setting that is on (`1`) or off (`0`); `default` when not set, and
/// with a warning saying what `effect` is when set to anything else.
fn switch_var(name: &str, default: bool, effect: &str, warnings: &mut Vec<String>) -> bool {
    let Ok(text) = env::var(name) else { return default };
    parse_switch(&text).unwrap_or_else(|| {
        let kept = if default { "on" } else { "off" };
        warnings.push(format!("{name}={text:?} is neither 0 nor 1 ({effect}); it stays {kept}"));
        default
    })
}

fn parse_switch(text: &str) -> Option<bool> {
    match text.trim() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

/// A limit from `var`: a count of `what`, or `all` (`None`); when unset,
/// `default`, and when unreadable too, with a warning.
fn count_var(var: &str, default: u32, what: &str, warnings: &mut Vec<String>) -> Option<u32> {
    let Ok(text) = env::var(var) else { return Some(default) };
    parse_count(&text).unwrap_or_else(|| {
        warnings.push(format!(
            "{var}={text:?} is neither a number of {what} nor `all` (use e.g. 16, 0 for none, or all); using {default}"
        ));
        Some(default)
    })
}

fn parse_count(text: &str) -> Option<Option<u32>> {
    match text.trim() {
        "all" => Some(None),
        count => count.parse().ok().map(Some),
    }
}

/// The rank settings of the variables `var` gives a number for: set by a
/// distributed launcher such as torchrun for each rank it starts
/// (torch.multiprocessing.spawn hands its ranks theirs as an argument, and
/// sets none).
fn rank_settings(var: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    trace_format::RANK_SETTINGS
        .iter()
        .filter_map(|&(setting, name)| {
            let number: u32 = var(name)?.trim().parse().ok()?;
            Some((setting.to_string(), number.to_string()))
        })
        .collect()
}

/// When the run named `run` (its first process's image, `<pid>.<unix ns>`)
/// started.
fn run_started(run: &str) -> Option<std::time::SystemTime> {
    let ns: u64 = run.split_once('.')?.1.parse().ok()?;
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_nanos(ns))
}

/// How many files beside `base` are named like its descendants' traces
/// (`<base>.<pid>`, `<base>.<pid>.<n>`) and were written since `since`;
/// counting stops at `enough`.
fn traces_since(base: &Path, since: std::time::SystemTime, enough: u32) -> u32 {
    let (Some(dir), Some(output)) = (base.parent(), base.file_name().and_then(|name| name.to_str())) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut count = 0;
    for entry in entries.flatten() {
        let numbered = entry
            .file_name()
            .to_str()
            .is_some_and(|name| trace_format::descendant_trace_numbers(name, output).is_some());
        if numbered && entry.metadata().and_then(|m| m.modified()).is_ok_and(|modified| modified >= since) {
            count += 1;
            if count >= enough {
                break;
            }
        }
    }
    count
}

/// The trace's path from `TRACER_OUTPUT`, made absolute: a directory (one
/// that exists, or a name ending with `/`) gets [`DEFAULT_OUTPUT`] in it.
fn output_path(named: std::ffi::OsString) -> PathBuf {
    let ends_with_slash = named.as_encoded_bytes().ends_with(b"/");
    let names_directory = ends_with_slash || Path::new(&named).is_dir();
    let path = PathBuf::from(named);
    if ends_with_slash {
        // Made when missing, as `mkdir -p` would; where it cannot be, opening
        // the trace in it says why.
        let _ = std::fs::create_dir_all(&path);
    }
    absolute(&if names_directory { path.join(DEFAULT_OUTPUT) } else { path })
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    env::current_dir().map(|dir| dir.join(path)).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_setting_is_told_with_the_one_meant() {
        let names = ["TRACER_SAMPEL_BYTES", "TRACER_EPOCH_SECOND", "TRACER_OUTPUT", "TRACER_RUN", "TRACER_LIB", "PATH"];
        let warnings = misspelt_settings(names.iter().map(|name| name.to_string()));
        assert_eq!(
            warnings,
            [
                "TRACER_SAMPEL_BYTES is not a setting of the tracer and is ignored; did you mean TRACER_SAMPLE_BYTES?",
                "TRACER_EPOCH_SECOND is not a setting of the tracer and is ignored; did you mean TRACER_EPOCH_SECONDS?",
            ]
        );
        // The tracer's hand-downs to descendants are far from every setting.
        for hand_down in
            [INHERITED_OUTPUT_VAR, RUN_VAR, PARENT_IMAGE_VAR, PARENT_COUNTERS_VAR, REPORTED_VAR, WARNINGS_SAID_VAR]
        {
            assert!(misspelt_settings([hand_down.to_string()].into_iter()).is_empty(), "{hand_down}");
        }
    }

    fn config(base: &str) -> Config {
        Config {
            base_output: base.into(),
            is_descendant: false,
            run: String::new(),
            parent_image: String::new(),
            epoch_seconds: None,
            epoch_seconds_explicit: false,
            sample_bytes: None,
            sample_warm_up_only: false,
            auto_epochs: true,
            python_frames: true,
            python_objects: false,
            worker_traces: Some(DEFAULT_WORKER_TRACES),
            exec_traces: Some(DEFAULT_EXEC_TRACES),
            warnings: vec![],
            ancestor_reported: None,
            rank: vec![],
        }
    }

    #[test]
    fn descendants_never_write_the_named_file() {
        let c = config("/tmp/t.bin");
        let first: Vec<_> = c.output_candidates(false, 9).take(2).collect();
        assert_eq!(first, [("/tmp/t.bin".into(), Claim::Locked), ("/tmp/t.bin.9".into(), Claim::Exclusive)]);
        let names: Vec<_> = c.output_candidates(true, 9).take(3).collect();
        assert_eq!(
            names,
            [
                ("/tmp/t.bin.9".into(), Claim::Exclusive),
                ("/tmp/t.bin.9.1".into(), Claim::Exclusive),
                ("/tmp/t.bin.9.2".into(), Claim::Exclusive)
            ]
        );
    }

    #[test]
    fn switches_are_0_or_1() {
        assert_eq!(parse_switch("1"), Some(true));
        assert_eq!(parse_switch(" 0\n"), Some(false));
        assert_eq!(parse_switch("yes"), None);
        assert_eq!(parse_switch(""), None);
    }

    #[test]
    fn a_rank_is_read_from_the_launchers_numbers() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(var, _)| *var == name).map(|(_, value)| value.to_string())
        };
        let settings = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect()
        };
        let torchrun = env(&[("RANK", "1"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", " 2\n"), ("MASTER_PORT", "29500")]);
        assert_eq!(rank_settings(torchrun), settings(&[("rank", "1"), ("local_rank", "1"), ("world_size", "2")]));
        assert_eq!(rank_settings(env(&[("RANK", "x"), ("WORLD_SIZE", "4")])), settings(&[("world_size", "4")]));
        assert_eq!(rank_settings(env(&[])), settings(&[]));
    }

    #[test]
    fn trace_limits_are_a_count_or_all() {
        assert_eq!(parse_count("16"), Some(Some(16)));
        assert_eq!(parse_count(" 0 "), Some(Some(0)));
        assert_eq!(parse_count("all"), Some(None));
        assert_eq!(parse_count("-1"), None);
        assert_eq!(parse_count("many"), None);
    }

    #[test]
    fn a_relative_preload_of_this_library_is_made_absolute_and_the_rest_kept() {
        let cwd = Path::new("/work/job");
        let own = "target/release/libtracer.so";
        let rewritten = |preload| preload_with_own_entry_absolute(preload, own, cwd);
        assert_eq!(rewritten(own).as_deref(), Some("/work/job/target/release/libtracer.so"));
        assert_eq!(
            rewritten("target/release/libtracer.so /usr/lib/libjemalloc.so:./lib/other.so").as_deref(),
            Some("/work/job/target/release/libtracer.so /usr/lib/libjemalloc.so:./lib/other.so")
        );
        assert_eq!(
            rewritten("libfirst.so:target/release/libtracer.so").as_deref(),
            Some("libfirst.so:/work/job/target/release/libtracer.so")
        );
        assert_eq!(rewritten("./target/release/libtracer.so"), None, "another spelling is not the loaded name");
        // Absolute, or a bare name the loader searches for: left alone.
        assert_eq!(preload_with_own_entry_absolute("/opt/libtracer.so", "/opt/libtracer.so", cwd), None);
        assert_eq!(preload_with_own_entry_absolute("libtracer.so", "libtracer.so", cwd), None);
    }

    #[test]
    fn an_output_naming_a_directory_gets_the_default_name_in_it() {
        let dir = std::env::temp_dir();
        assert_eq!(output_path(dir.clone().into_os_string()), dir.join(DEFAULT_OUTPUT));
        // A missing directory named with its slash is made, as mkdir -p would.
        let scratch = tempfile_dir("directory");
        let missing = scratch.join("runs/today");
        let mut named = missing.clone().into_os_string();
        named.push("/");
        assert_eq!(output_path(named), missing.join(DEFAULT_OUTPUT));
        assert!(missing.is_dir());
        assert_eq!(output_path("/nonexistent/run.bin".into()), Path::new("/nonexistent/run.bin"));
        assert!(!Path::new("/nonexistent").exists(), "a file's directory is not made");
        assert!(output_path("run.bin".into()).is_absolute());
        std::fs::remove_dir_all(&scratch).unwrap();
    }

    #[test]
    fn a_runs_traces_are_counted_by_name_and_time() {
        let dir = tempfile_dir("counted");
        let base = dir.join("trace.bin");
        for name in ["trace.bin", "trace.bin.41", "trace.bin.42.1", "trace.bin.leaks.svg", "trace.bin.43.x", "other.43"]
        {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let before = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        assert_eq!(traces_since(&base, before, 100), 2, "trace.bin.41 and trace.bin.42.1");
        assert_eq!(traces_since(&base, before, 1), 1, "counting stops at enough");
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        assert_eq!(traces_since(&base, later, 100), 0, "an earlier run's");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            run_started("4242.1000000000"),
            std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(1))
        );
        assert_eq!(run_started(""), None);
    }

    /// A directory of `test`'s own: tests run at once, and one removing its
    /// directory must not take another's files with it.
    fn tempfile_dir(test: &str) -> PathBuf {
        let dir = env::temp_dir().join(format!("tracer-config-test-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
