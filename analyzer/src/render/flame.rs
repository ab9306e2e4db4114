//! Flamegraph SVGs drawn with `inferno`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use inferno::flamegraph::color::{BasicPalette, Palette};
use inferno::flamegraph::{self, Options};

use crate::error::Failure;
use crate::symbolize::Frame;

/// One weighted stack, frames outermost first.
pub type Folded = (Vec<String>, u64);

/// The folded-stack form of symbolized frames (given innermost first):
/// root = outermost frame; `;` and line breaks cannot appear in a name.
/// Python frames are labelled with their file and line.
pub fn fold(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .rev()
        .map(|f| {
            let name: String = f.label().chars().map(|c| if c == ';' || c.is_control() { ':' } else { c }).collect();
            if name.trim().is_empty() {
                "?".to_string()
            } else {
                name
            }
        })
        .collect()
}

fn folded_lines(stacks: &[Folded]) -> Vec<String> {
    let mut lines: Vec<String> =
        stacks.iter().filter(|(_, w)| *w > 0).map(|(frames, w)| format!("{} {w}", frames.join(";"))).collect();
    lines.sort();
    lines
}

fn options(title: &str, subtitle: Option<String>) -> Options<'static> {
    let mut opt = Options::default();
    opt.title = title.to_string();
    opt.subtitle = subtitle;
    opt.count_name = "bytes".to_string();
    opt.colors = Palette::Basic(BasicPalette::Mem);
    opt.hash = true;
    opt.deterministic = true;
    opt
}

fn create(path: &Path) -> Result<BufWriter<File>, Failure> {
    File::create(path).map(BufWriter::new).map_err(|err| {
        Failure::new(format!("cannot write the flamegraph {}: {err}", path.display()), "choose another path with -o")
    })
}

fn draw(path: &Path, mut opt: Options<'_>, lines: &[String], empty_label: &str) -> Result<(), Failure> {
    let placeholder = [format!("{} 1", empty_label.replace(';', ":"))];
    let lines: &[String] = if lines.is_empty() { &placeholder } else { lines };
    let mut out = create(path)?;
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut out).and_then(|()| out.flush()).map_err(
        |err| {
            Failure::new(format!("cannot draw the flamegraph {}: {err}", path.display()), "choose another path with -o")
        },
    )
}

/// Writes a flamegraph of `stacks`; with no weight at all it draws a single
/// frame named `empty_label`. Returns whether anything real was drawn.
pub fn write(
    path: &Path,
    title: &str,
    subtitle: Option<String>,
    stacks: &[Folded],
    empty_label: &str,
) -> Result<bool, Failure> {
    let lines = folded_lines(stacks);
    draw(path, options(title, subtitle), &lines, empty_label)?;
    Ok(!lines.is_empty())
}

/// Writes a differential flamegraph: the shape of `after`, coloured by the
/// change from `before` (red grew, blue shrank).
pub fn write_diff(
    path: &Path,
    title: &str,
    subtitle: Option<String>,
    before: &[Folded],
    after: &[Folded],
    empty_label: &str,
) -> Result<bool, Failure> {
    let before = folded_lines(before).join("\n");
    let after = folded_lines(after).join("\n");
    let mut diff = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        before.as_bytes(),
        after.as_bytes(),
        &mut diff,
    )
    .map_err(|err| Failure::new(format!("cannot compare the epochs: {err}"), "report this with the trace file"))?;
    let text = String::from_utf8_lossy(&diff);
    let lines: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect();
    // Stacks present only before have zero width in the "after" shape; a
    // graph where everything is zero after would be empty.
    let any_after = lines.iter().any(|l| l.rsplit(' ').next().is_some_and(|n| n != "0"));
    let lines = if any_after { lines } else { Vec::new() };
    draw(path, options(title, subtitle), &lines, empty_label)?;
    Ok(!lines.is_empty())
}
