//! User-facing failures: one line, saying what is wrong and what to do.

use std::fmt;

/// A failure the user can act on, printed as
/// `analyzer: error: <what is wrong>; <what to do>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub what: String,
    pub fix: String,
}

impl Failure {
    pub fn new(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Failure { what: one_line(what.into()), fix: one_line(fix.into()) }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.what, self.fix)
    }
}

impl std::error::Error for Failure {}

/// Collapses line breaks so a message always stays on one line.
pub fn one_line(text: String) -> String {
    if text.contains(['\n', '\r']) {
        text.split(['\n', '\r']).map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ")
    } else {
        text
    }
}
