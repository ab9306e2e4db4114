//! Line numbers of Python frames from a CPython 3.11+ location table
//! (`co_linetable`), the format described in CPython's `Objects/locations.md`.
//!
//! The table is a sequence of entries, each covering 1–8 code units (2-byte
//! instructions). An entry starts with a byte with bit 7 set: bits 3–6 are
//! the entry's code, bits 0–2 its length in code units minus one.
//!
//! | code  | form            | what follows                                             |
//! |-------|-----------------|----------------------------------------------------------|
//! | 0–9   | short           | one byte of columns; the line does not change            |
//! | 10–12 | one line        | line delta = code − 10, then start and end column bytes  |
//! | 13    | no columns      | signed varint line delta                                 |
//! | 14    | long            | signed varint line delta, varint end-line delta, varint  |
//! |       |                 | column + 1, varint end column + 1                        |
//! | 15    | no location     | nothing; these instructions have no line                 |
//!
//! Varints are little-endian groups of 6 bits, bit 6 set when another group
//! follows; a signed varint holds the magnitude shifted left by one and the
//! sign in bit 0. Lines start at the code object's `co_firstlineno`, and each
//! entry's delta is applied to the running line even when it has no columns.

/// One entry: the code units `[start, end)` and their line (`None` for "no location").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    pub start: u32,
    pub end: u32,
    pub line: Option<i64>,
}

struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn next(&mut self) -> Option<u8> {
        let byte = *self.data.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut byte = self.next()?;
        let mut value = u64::from(byte & 63);
        let mut shift = 0;
        while byte & 64 != 0 {
            byte = self.next()?;
            shift += 6;
            if shift >= 64 {
                return None;
            }
            value |= u64::from(byte & 63) << shift;
        }
        Some(value)
    }

    fn signed_varint(&mut self) -> Option<i64> {
        let raw = self.varint()?;
        let magnitude = (raw >> 1) as i64;
        Some(if raw & 1 != 0 { -magnitude } else { magnitude })
    }
}

/// Every entry of a location table, in order. A table cut short ends the
/// list at the last complete entry.
pub fn ranges(linetable: &[u8], first_line: u32) -> Vec<LineRange> {
    let mut bytes = Bytes { data: linetable, at: 0 };
    let mut line = i64::from(first_line);
    let mut address = 0u32;
    let mut out = Vec::new();
    while let Some(first) = bytes.next() {
        if first & 0x80 == 0 {
            break; // not the start of an entry: the table is malformed
        }
        let code = (first >> 3) & 15;
        let length = u32::from(first & 7) + 1;
        let entry_line = match code {
            15 => None,
            14 => {
                let Some(delta) = bytes.signed_varint() else { break };
                line += delta;
                // End line, column and end column: not needed for the line.
                if bytes.varint().and(bytes.varint()).and(bytes.varint()).is_none() {
                    break;
                }
                Some(line)
            }
            13 => {
                let Some(delta) = bytes.signed_varint() else { break };
                line += delta;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code - 10);
                if bytes.next().and(bytes.next()).is_none() {
                    break;
                }
                Some(line)
            }
            _ => {
                if bytes.next().is_none() {
                    break;
                }
                Some(line)
            }
        };
        out.push(LineRange { start: address, end: address + length, line: entry_line });
        address += length;
    }
    out
}

/// The line of the instruction at `instruction` (in code units), as
/// `PyCode_Addr2Line` gives it; `None` when the instruction has no location
/// or lies past the table.
pub fn line_of(linetable: &[u8], first_line: u32, instruction: u32) -> Option<i64> {
    line_in(&ranges(linetable, first_line), instruction)
}

/// [`line_of`] from the table's `ranges`, decoded once for all the
/// instructions of a code object.
pub fn line_in(ranges: &[LineRange], instruction: u32) -> Option<i64> {
    let at = ranges.partition_point(|r| r.end <= instruction);
    ranges.get(at).filter(|r| r.start <= instruction).and_then(|r| r.line)
}

/// [`line_in`] as a line number to show: `None` also for lines below 1
/// (a damaged table).
pub fn shown_line(ranges: &[LineRange], instruction: u32) -> Option<u32> {
    line_in(ranges, instruction).and_then(|l| u32::try_from(l).ok()).filter(|&l| l > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::identity_op)]
    fn decodes_each_form() {
        // Short form (code 0, 2 units), one-line form +1 (code 11, 1 unit),
        // no-columns −1 (code 13, 3 units), long form +5 (code 14, 1 unit),
        // no location (code 15, 2 units).
        let table = [
            0x80 | (0 << 3) | 1,
            0x05,
            0x80 | (11 << 3),
            0x02,
            0x06,
            0x80 | (13 << 3) | 2,
            0x03,
            0x80 | (14 << 3),
            0x0a,
            0x00,
            0x01,
            0x05,
            0x80 | (15 << 3) | 1,
        ];
        let got = ranges(&table, 10);
        assert_eq!(
            got,
            vec![
                LineRange { start: 0, end: 2, line: Some(10) },
                LineRange { start: 2, end: 3, line: Some(11) },
                LineRange { start: 3, end: 6, line: Some(10) },
                LineRange { start: 6, end: 7, line: Some(15) },
                LineRange { start: 7, end: 9, line: None },
            ]
        );
        assert_eq!(line_of(&table, 10, 4), Some(10));
        assert_eq!(line_of(&table, 10, 8), None);
        assert_eq!(line_of(&table, 10, 9), None);
    }

    #[test]
    fn tables_cut_short_or_malformed_stop_at_the_last_whole_entry() {
        // A one-line entry missing its end column, after a whole short entry.
        let table = [0x80 | 1, 0x05, 0x80 | (11 << 3), 0x02];
        assert_eq!(ranges(&table, 3), vec![LineRange { start: 0, end: 2, line: Some(3) }]);
        // A byte without bit 7 where an entry should start.
        let table = [0x80, 0x05, 0x12, 0x80];
        assert_eq!(ranges(&table, 3).len(), 1);
        assert_eq!(line_of(&[], 3, 0), None);
        // A varint longer than 64 bits.
        let mut table = vec![0x80 | (13 << 3)];
        table.extend([0x7f; 12]);
        assert_eq!(line_of(&table, 3, 0), None);
    }

    #[test]
    fn shown_lines_are_positive() {
        // −20 from line 10.
        let table = [0x80 | (13 << 3), 0x29];
        assert_eq!(line_of(&table, 10, 0), Some(-10));
        assert_eq!(shown_line(&ranges(&table, 10), 0), None);
        let table = [0x80 | (12 << 3) | 3, 0x00, 0x04];
        assert_eq!(shown_line(&ranges(&table, 41), 3), Some(43));
        assert_eq!(shown_line(&ranges(&table, 41), 4), None);
    }

    #[test]
    fn varints_continue_in_six_bit_groups() {
        // 0x41 0x01: 1 | (1 << 6) = 65, a signed delta of −32.
        let table = [0x80 | (13 << 3), 0x41, 0x01];
        assert_eq!(line_of(&table, 100, 0), Some(68));
    }
}
