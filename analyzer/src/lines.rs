//! Suspects summed by the line of the program's own code they come from.
//!
//! One leaking line often leaves several suspects: a call that allocates
//! along several native paths (a tensor's storage, the autograd graph that
//! keeps its inputs alive), or a loop the compiler copied, each copy
//! returning to an address of its own. Suspects are stacks; a person fixes
//! lines, so the report also sums the suspects whose first own-code frame is
//! the same line, and ranks those sums.

use std::collections::HashMap;

use crate::analysis::{GrowthSpan, LineMemory, Suspect};
use crate::merge::base_name;
use crate::symbolize::Frame;
use crate::trace::Memory;

/// A line of the program's own code and the suspects that lead to it.
#[derive(Debug, Clone, PartialEq)]
pub struct LeakLine {
    /// The first own-code frame its suspects share; `None` for a suspect
    /// without one, which is a line of its own.
    pub frame: Option<Frame>,
    pub growth_bytes_per_epoch: u64,
    /// The longest span of its suspects that keep a [`SHARE_OF_A_LINE`] of
    /// its bytes at least: its growth is their bytes over it (the sum of
    /// their growths when their spans are the same).
    pub growth_span: GrowthSpan,
    pub live_bytes: u64,
    pub live_count: u64,
    /// What its suspects' memory is.
    pub memory: LineMemory,
    /// Its suspects' ranks, best first.
    pub ranks: Vec<usize>,
}

impl LeakLine {
    fn new(frame: Option<&Frame>) -> LeakLine {
        LeakLine {
            frame: frame.cloned(),
            growth_bytes_per_epoch: 0,
            growth_span: GrowthSpan::default(),
            live_bytes: 0,
            live_count: 0,
            memory: LineMemory::Only(Memory::Heap),
            ranks: Vec::new(),
        }
    }

    fn add(&mut self, rank: usize, suspect: &Suspect) {
        self.live_bytes += suspect.live_bytes;
        self.live_count += suspect.live_count;
        let kind = LineMemory::Only(suspect.memory);
        self.memory = if self.ranks.is_empty() || self.memory == kind { kind } else { LineMemory::Mixed };
        self.ranks.push(rank);
    }

    /// Its growth from its suspects' bytes and spans: a leak that began
    /// late on one path, early on another, grows at their bytes over the
    /// epochs since the earlier began; a few bytes the first call made when
    /// it began (a parser's cache) do not stretch it back.
    fn settle_growth(&mut self, kept: &[(u64, GrowthSpan)]) {
        let bytes: u64 = kept.iter().map(|&(bytes, _)| bytes).sum();
        self.growth_span = kept
            .iter()
            .filter(|&&(part, _)| part * SHARE_OF_A_LINE >= bytes)
            .map(|&(_, span)| span)
            .max_by_key(|span| span.epochs)
            .unwrap_or_default();
        self.growth_bytes_per_epoch = bytes / self.growth_span.epochs.max(1);
    }
}

/// The epochs over which `suspect` kept what it holds: its growth's, and
/// for one that piles up only with its line, from its oldest survivor's
/// birth on when that is later (a pymalloc arena opened at epoch 247 of a
/// leak since 150 does not stretch the line's span back to epoch 1). A
/// block grown in place keeps its newest copy alone: its growth is over
/// its span.
fn kept_since(suspect: &Suspect) -> GrowthSpan {
    let span = suspect.growth_span;
    match suspect.survivors.first() {
        Some(oldest) if suspect.piles_up_only_with_line && oldest.birth_epoch > span.since => GrowthSpan {
            epochs: span.epochs.saturating_sub(u64::from(oldest.birth_epoch - span.since)).max(1),
            since: oldest.birth_epoch,
        },
        _ => span,
    }
}

/// A part of a line (a stack, below the floor or not) keeps at least 1/N
/// of what the line keeps to count: a few bytes an epoch beside its MiB do
/// not make its leak.
pub const SHARE_OF_A_LINE: u64 = 100;

/// What tells two lines apart. A frame without line information (native
/// code built without debug information) stands for its whole function;
/// the parts a compiler splits a function into (`.cold`) are one function.
type LineKey<'a> = (&'a str, Option<&'a str>, Option<u32>, Option<&'a str>, bool);

fn key(frame: &Frame) -> LineKey<'_> {
    (base_name(&frame.function), frame.file.as_deref(), frame.line, frame.module.as_deref(), frame.python)
}

/// Sums `suspects` (rank, suspect, first own-code frame; in rank order) by
/// line, ranked by growth, then live bytes, then their best suspect.
pub fn group<'a>(suspects: impl IntoIterator<Item = (usize, &'a Suspect, Option<&'a Frame>)>) -> Vec<LeakLine> {
    // Each line with its suspects' settled bytes and spans.
    let mut lines: Vec<(LeakLine, Vec<(u64, GrowthSpan)>)> = Vec::new();
    let mut by_key: HashMap<LineKey<'a>, usize> = HashMap::new();
    for (rank, suspect, own) in suspects {
        let at = match own {
            Some(frame) => *by_key.entry(key(frame)).or_insert_with(|| {
                lines.push((LeakLine::new(Some(frame)), Vec::new()));
                lines.len() - 1
            }),
            None => {
                lines.push((LeakLine::new(None), Vec::new()));
                lines.len() - 1
            }
        };
        let (line, kept) = &mut lines[at];
        line.add(rank, suspect);
        kept.push((suspect.growth_bytes_per_epoch * suspect.growth_span.epochs, kept_since(suspect)));
    }
    let mut lines: Vec<LeakLine> = lines
        .into_iter()
        .map(|(mut line, kept)| {
            line.settle_growth(&kept);
            line
        })
        .collect();
    lines.sort_by(|a, b| {
        b.growth_bytes_per_epoch
            .cmp(&a.growth_bytes_per_epoch)
            .then(b.live_bytes.cmp(&a.live_bytes))
            .then(a.ranks[0].cmp(&b.ranks[0]))
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Survivor;

    fn suspect(stack: u32, growth: u64, memory: Memory) -> Suspect {
        Suspect {
            stack,
            other_stacks: Vec::new(),
            growth_bytes_per_epoch: growth,
            growth_span: GrowthSpan { epochs: 5, since: 1 },
            live_bytes: growth * 10,
            live_count: 10,
            settled_with_survivors: 5,
            survivors: Vec::new(),
            memory,
            below_floor: false,
            grown_in_place: false,
            piles_up_only_with_line: false,
        }
    }

    /// A leak that began at epoch 6 on one stack, with a few bytes its
    /// first call made on another, one of all the settled epochs: the
    /// line grows at the leak's rate since it began.
    #[test]
    fn a_few_bytes_of_a_line_do_not_stretch_its_growth_back() {
        let frame = line_of("keep", Some("train.py"), Some(15), 0x10);
        let leak = Suspect { growth_span: GrowthSpan { epochs: 6, since: 6 }, ..suspect(1, 1 << 20, Memory::Heap) };
        let first_call = Suspect { growth_span: GrowthSpan { epochs: 11, since: 1 }, ..suspect(2, 64, Memory::Heap) };
        let lines = group([(1, &leak, Some(&frame)), (2, &first_call, Some(&frame))]);
        assert_eq!(lines[0].growth_span, GrowthSpan { epochs: 6, since: 6 });
        assert_eq!(lines[0].growth_bytes_per_epoch, (6 * (1 << 20) + 11 * 64) / 6);
        // Two paths of one leak, one since epoch 1, the other since 6.
        let early = Suspect { growth_span: GrowthSpan { epochs: 11, since: 1 }, ..suspect(2, 1 << 20, Memory::Heap) };
        let lines = group([(1, &leak, Some(&frame)), (2, &early, Some(&frame))]);
        assert_eq!(lines[0].growth_span.since, 1);
        assert_eq!(lines[0].growth_bytes_per_epoch, (6 * (1 << 20) + 11 * (1 << 20)) / 11);
    }

    /// A block that piles up only with its line, kept at epoch 10 of a leak
    /// since 6 (its growth spread over all the settled epochs): the line
    /// grows over the leak's span, with the block's bytes.
    #[test]
    fn a_part_kept_late_does_not_stretch_its_line_back() {
        let frame = line_of("keep", Some("train.py"), Some(15), 0x10);
        let leak = Suspect { growth_span: GrowthSpan { epochs: 6, since: 6 }, ..suspect(1, 1 << 20, Memory::Heap) };
        let arena = Suspect {
            growth_span: GrowthSpan { epochs: 11, since: 1 },
            survivors: vec![Survivor { birth_epoch: 10, count: 1, bytes: 11 << 20 }],
            piles_up_only_with_line: true,
            ..suspect(2, 1 << 20, Memory::Mapped)
        };
        let lines = group([(1, &leak, Some(&frame)), (2, &arena, Some(&frame))]);
        assert_eq!(lines[0].growth_span, GrowthSpan { epochs: 6, since: 6 });
        assert_eq!(lines[0].growth_bytes_per_epoch, (6 * (1 << 20) + 11 * (1 << 20)) / 6);
    }

    fn line_of(function: &str, file: Option<&str>, line: Option<u32>, address: u64) -> Frame {
        Frame { file: file.map(Into::into), line, own_code: true, ..Frame::named(address, function.into()) }
    }

    #[test]
    fn suspects_at_one_line_are_summed_and_ranked_by_their_sum() {
        let keep = line_of("keep_history", Some("train.rs"), Some(260), 0x10);
        // The same line reached from another return address (an unrolled loop).
        let keep_again = line_of("keep_history", Some("train.rs"), Some(260), 0x24);
        let augment = line_of("augment", Some("train.rs"), Some(234), 0x40);
        let suspects = [
            suspect(1, 300, Memory::Shared),
            suspect(2, 250, Memory::Heap),
            suspect(3, 200, Memory::Mapped),
            suspect(4, 100, Memory::Heap),
        ];
        let own = [Some(&augment), Some(&keep), Some(&keep_again), None];
        let lines = group(suspects.iter().zip(own).enumerate().map(|(i, (s, f))| (i + 1, s, f)));

        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].frame.as_ref().map(|f| f.function.as_str()), Some("keep_history"));
        assert_eq!(lines[0].ranks, [2, 3]);
        assert_eq!((lines[0].growth_bytes_per_epoch, lines[0].live_bytes, lines[0].live_count), (450, 4500, 20));
        assert_eq!(lines[0].memory, LineMemory::Mixed, "heap and mapped memory");
        assert_eq!(lines[0].memory.name(), "mixed");
        assert_eq!(lines[1].ranks, [1]);
        assert_eq!(lines[1].memory, LineMemory::Only(Memory::Shared), "all of its suspects are shared memory");
        assert_eq!(lines[2].memory, LineMemory::Only(Memory::Heap));
        assert_eq!(lines[2].ranks, [4]);
        assert_eq!(lines[2].frame, None, "a suspect without own code is a line of its own");
    }

    #[test]
    fn lines_differ_by_line_file_or_language_and_without_lines_by_function() {
        let at = |function, file, line| line_of(function, file, line, 0x10);
        let python = Frame { python: true, ..at("step", Some("train.py"), Some(7)) };
        let cold = at("step.cold", None, None);
        let frames = [
            at("step", Some("train.py"), Some(7)),
            at("step", Some("train.py"), Some(8)),
            python,
            at("step", None, None),
            cold,
        ];
        let suspects: Vec<Suspect> =
            (0..frames.len() as u32).map(|i| suspect(i, 100 - u64::from(i), Memory::Heap)).collect();
        let lines = group(suspects.iter().zip(&frames).enumerate().map(|(i, (s, f))| (i + 1, s, Some(f))));
        let ranks: Vec<&[usize]> = lines.iter().map(|l| l.ranks.as_slice()).collect();
        assert_eq!(ranks, [&[4, 5][..], &[1], &[2], &[3]], "the two parts of one function sum up first");
    }
}
