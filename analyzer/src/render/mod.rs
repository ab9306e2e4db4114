//! Everything the user sees: the text report, the JSON and the flamegraphs.
//!
//! [`Report`] gathers the analysis with the symbolized stacks of what is
//! shown; [`text`] and [`json`] only format it.

pub mod flame;
pub mod json;
pub mod text;

use std::path::PathBuf;

use crate::analysis::{Analysis, Suspect};
use crate::symbolize::{Frame, Symbolizer};
use crate::trace::Trace;

/// A suspect with its stack symbolized (trimmed, innermost first).
#[derive(Debug, Clone)]
pub struct ShownSuspect {
    pub rank: usize,
    pub suspect: Suspect,
    pub frames: Vec<Frame>,
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
    /// False when there was nothing to draw (a placeholder frame was drawn).
    pub drawn: bool,
}

/// The complete result of `analyzer report`.
#[derive(Debug)]
pub struct Report<'t> {
    pub trace: &'t Trace,
    pub analysis: &'t Analysis,
    /// The suspects shown (the top N), in rank order.
    pub shown: Vec<ShownSuspect>,
    pub verdict_message: String,
    pub flamegraph: Option<FlamegraphInfo>,
    /// Problems met along the way (one line each).
    pub warnings: Vec<String>,
    /// Traces of the process's descendants found beside its trace.
    pub descendants: Vec<crate::trace::Descendant>,
}

/// The frames of a stack id, or one placeholder frame when the trace lacks it.
pub fn stack_frames(trace: &Trace, symbolizer: &mut Symbolizer<'_>, stack: u32) -> Vec<Frame> {
    let Some(s) = trace.stacks.get(stack) else {
        return vec![placeholder(format!("(unknown stack {stack})"))];
    };
    let mut frames = if s.native.is_empty() && s.python.is_empty() { Vec::new() } else { symbolizer.stack(&s) };
    if let Some(node) = s.broken_at {
        frames.push(placeholder(format!("(stack cut: node {node} is missing from the trace)")));
    }
    if frames.is_empty() {
        frames.push(placeholder(format!("(empty stack {stack})")));
    }
    frames
}

fn placeholder(function: String) -> Frame {
    Frame::named(0, function)
}

/// The note for a Python process whose small objects came from pymalloc.
pub fn pymalloc_note(trace: &Trace) -> Option<&'static str> {
    let allocator = trace.process.settings.iter().find(|(name, _)| name == "python_allocator")?;
    allocator.1.starts_with("pymalloc").then_some(
        "Python's pymalloc was in force: Python objects of 512 bytes or less are not traced individually (only the arenas that hold them); run with PYTHONMALLOC=malloc for exact attribution",
    )
}

/// Warnings about the trace itself (beyond how it ended).
pub fn trace_warnings(trace: &Trace) -> Vec<String> {
    trace.stacks.conflict_warning().into_iter().collect()
}

impl<'t> Report<'t> {
    /// Symbolizes the top `top` suspects and words the verdict.
    pub fn build(trace: &'t Trace, analysis: &'t Analysis, symbolizer: &mut Symbolizer<'_>, top: usize) -> Report<'t> {
        let shown: Vec<ShownSuspect> = analysis
            .suspects
            .iter()
            .take(top)
            .enumerate()
            .map(|(i, s)| ShownSuspect {
                rank: i + 1,
                suspect: s.clone(),
                frames: stack_frames(trace, symbolizer, s.stack),
            })
            .collect();
        let top_function = shown.first().map(|s| {
            let frame = s.own_frame().or(s.frames.first());
            frame.map(|f| f.function.clone()).unwrap_or_else(|| format!("stack {}", s.suspect.stack))
        });
        let verdict_message = analysis.verdict_message(top_function.as_deref());
        let descendants = crate::trace::descendant_traces(&trace.path);
        Report { trace, analysis, shown, verdict_message, flamegraph: None, warnings: Vec::new(), descendants }
    }
}

/// The warning for a trace that did not end cleanly, if any.
pub fn end_warning(trace: &Trace) -> Option<String> {
    use crate::trace::EndKind;
    let last = trace.snapshots.len().saturating_sub(1);
    let epochs = if last == 0 { "epoch 0".to_string() } else { format!("epochs 0..{last}") };
    match &trace.end {
        EndKind::Complete if trace.saw_end_record => None,
        EndKind::Complete => Some(format!(
            "the trace has no end record (the process was probably killed, or is still running); reporting {epochs}"
        )),
        EndKind::Truncated { offset } => Some(format!(
            "the trace was cut at byte {offset} (the process was probably killed); reporting the complete {epochs}"
        )),
        EndKind::Damaged { offset, reason } => {
            Some(format!("the trace is damaged at byte {offset} ({reason}); reporting the complete {epochs} before it"))
        }
    }
}
