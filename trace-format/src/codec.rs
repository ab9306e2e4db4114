//! Payload encoding: LEB128 varints for integers, length-prefixed byte strings.

use std::fmt;

/// Appends payload fields to a byte buffer.
pub struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Encoder<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Encoder { out }
    }

    pub fn u64(&mut self, mut value: u64) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                self.out.push(byte);
                return;
            }
            self.out.push(byte | 0x80);
        }
    }

    pub fn u32(&mut self, value: u32) {
        self.u64(value.into())
    }

    pub fn bool(&mut self, value: bool) {
        self.out.push(value as u8)
    }

    pub fn byte(&mut self, value: u8) {
        self.out.push(value)
    }

    pub fn bytes(&mut self, value: &[u8]) {
        self.u64(value.len() as u64);
        self.out.extend_from_slice(value);
    }

    pub fn str(&mut self, value: &str) {
        self.bytes(value.as_bytes())
    }
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The payload ended in the middle of a field.
    UnexpectedEnd,
    /// A varint was longer than 64 bits or a value did not fit its field.
    Overflow,
    /// A string was not UTF-8.
    BadUtf8,
    /// A field held a value no writer produces.
    BadValue(&'static str),
    /// The payload had bytes left after its last field.
    TrailingBytes,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::UnexpectedEnd => f.write_str("a field runs past the end of its record"),
            DecodeError::Overflow => f.write_str("a number does not fit its field"),
            DecodeError::BadUtf8 => f.write_str("a text field is not UTF-8"),
            DecodeError::BadValue(what) => write!(f, "invalid {what}"),
            DecodeError::TrailingBytes => f.write_str("a record has bytes after its last field"),
        }
    }
}

/// Reads payload fields from a byte slice, never past its end.
pub struct Decoder<'a> {
    input: &'a [u8],
}

impl<'a> Decoder<'a> {
    pub fn new(input: &'a [u8]) -> Self {
        Decoder { input }
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.input.split_first().ok_or(DecodeError::UnexpectedEnd)?;
            self.input = rest;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(DecodeError::Overflow);
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Overflow)
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        u32::try_from(self.u64()?).map_err(|_| DecodeError::Overflow)
    }

    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::BadValue("boolean")),
        }
    }

    pub fn byte(&mut self) -> Result<u8, DecodeError> {
        let (&byte, rest) = self.input.split_first().ok_or(DecodeError::UnexpectedEnd)?;
        self.input = rest;
        Ok(byte)
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = usize::try_from(self.u64()?).map_err(|_| DecodeError::Overflow)?;
        if len > self.input.len() {
            return Err(DecodeError::UnexpectedEnd);
        }
        let (value, rest) = self.input.split_at(len);
        self.input = rest;
        Ok(value)
    }

    pub fn string(&mut self) -> Result<String, DecodeError> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::BadUtf8)
    }

    /// A count of items that follow, each at least `min_item_len` bytes long;
    /// rejecting impossible counts keeps damaged input from reserving memory.
    pub fn count(&mut self, min_item_len: usize) -> Result<usize, DecodeError> {
        let count = usize::try_from(self.u64()?).map_err(|_| DecodeError::Overflow)?;
        if count.saturating_mul(min_item_len.max(1)) > self.input.len() {
            return Err(DecodeError::UnexpectedEnd);
        }
        Ok(count)
    }

    pub fn finish(self) -> Result<(), DecodeError> {
        if self.input.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }
}
