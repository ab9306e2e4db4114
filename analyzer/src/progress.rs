//! A progress line on stderr for a report that takes more than a moment: a
//! long run's trace is hundreds of MB to read.
//!
//! By default (`--progress auto`) it shows only on a terminal, and only once
//! the work has taken a second: a quick report prints nothing more than
//! before, and a pipe or a log file never gets a redrawn line. `always`
//! shows it from the start, on a terminal as one redrawn line, elsewhere as
//! a line per phase and per tenth of the trace read; `never` hides it.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// When the progress line is shown (`--progress`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum When {
    /// On a terminal, once the work has taken a second.
    Auto,
    /// From the start, wherever stderr goes.
    Always,
    /// Never.
    Never,
}

/// How long the work runs before `auto` shows anything.
const AUTO_DELAY: Duration = Duration::from_secs(1);
/// A terminal's line is redrawn at most this often.
const REDRAW: Duration = Duration::from_millis(100);

pub struct Progress {
    /// Where the progress goes; `None` when it is never shown.
    out: Option<Box<dyn Write>>,
    /// Redraw one line in place rather than print a line per step.
    terminal: bool,
    started: Instant,
    delay: Duration,
    phase: String,
    /// Units of the phase's work (bytes of the trace); 0 when unknown.
    total: u64,
    last_draw: Option<Instant>,
    /// Tenths of the phase done, as last printed (lines mode).
    tenths: u64,
    /// The phase's name was printed (lines mode).
    announced: bool,
    /// A line is on the terminal, to be cleared at the end.
    drawn: bool,
}

impl Progress {
    pub fn new(when: When) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let out: Option<Box<dyn Write>> = match when {
            When::Never => None,
            When::Auto if !terminal => None,
            _ => Some(Box::new(std::io::stderr())),
        };
        let delay = if when == When::Always { Duration::ZERO } else { AUTO_DELAY };
        Progress::to(out, terminal, delay)
    }

    /// Progress that is never shown.
    pub fn hidden() -> Progress {
        Progress::to(None, false, Duration::ZERO)
    }

    fn to(out: Option<Box<dyn Write>>, terminal: bool, delay: Duration) -> Progress {
        Progress {
            out,
            terminal,
            started: Instant::now(),
            delay,
            phase: String::new(),
            total: 0,
            last_draw: None,
            tenths: 0,
            announced: false,
            drawn: false,
        }
    }

    /// Starts a phase of `total` units of work (0: unknown).
    pub fn phase(&mut self, name: &str, total: u64) {
        (self.phase, self.total, self.tenths, self.announced, self.last_draw) = (name.into(), total, 0, false, None);
        self.advance(0);
    }

    /// `done` units of the phase's work are done.
    pub fn advance(&mut self, done: u64) {
        if self.out.is_none() {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.started) < self.delay {
            return;
        }
        let percent = (done.min(self.total) * 100).checked_div(self.total);
        if self.terminal {
            if self.last_draw.is_some_and(|last| now.duration_since(last) < REDRAW) {
                return;
            }
            self.last_draw = Some(now);
            let line = match percent {
                Some(percent) => format!("\r\x1b[Kanalyzer: {} {percent}%", self.phase),
                None => format!("\r\x1b[Kanalyzer: {}", self.phase),
            };
            self.drawn = true;
            self.write(&line);
        } else {
            if !self.announced {
                self.announced = true;
                self.write(&format!("analyzer: {}\n", self.phase));
            }
            let tenths = percent.unwrap_or(0) / 10;
            if tenths > self.tenths {
                self.tenths = tenths;
                self.write(&format!("analyzer: {} {}%\n", self.phase, tenths * 10));
            }
        }
    }

    /// The work is done: a terminal's line is cleared; lines end with the time taken.
    pub fn finish(&mut self) {
        if self.terminal && self.drawn {
            self.drawn = false;
            self.write("\r\x1b[K");
        } else if !self.terminal && self.announced {
            self.announced = false;
            let line = format!("analyzer: done in {:.1} s\n", self.started.elapsed().as_secs_f64());
            self.write(&line);
        }
    }

    /// Progress is a courtesy: a stderr that cannot be written is no reason to stop.
    fn write(&mut self, text: &str) {
        if let Some(out) = self.out.as_mut() {
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn progress(terminal: bool, delay: Duration) -> (Progress, Shared) {
        let shared = Shared::default();
        (Progress::to(Some(Box::new(shared.clone())), terminal, delay), shared)
    }

    fn text(shared: &Shared) -> String {
        String::from_utf8(shared.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn lines_mode_prints_each_phase_and_each_tenth_once() {
        let (mut p, out) = progress(false, Duration::ZERO);
        p.phase("reading t.bin", 1000);
        for done in (0..=1000).step_by(50) {
            p.advance(done);
        }
        p.phase("drawing", 0);
        p.finish();
        p.finish();
        let text = text(&out);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "analyzer: reading t.bin");
        assert_eq!(lines[1], "analyzer: reading t.bin 10%");
        assert_eq!(lines[10], "analyzer: reading t.bin 100%");
        assert_eq!(lines[11], "analyzer: drawing");
        assert!(lines[12].starts_with("analyzer: done in "), "{text}");
        assert_eq!(lines.len(), 13, "{text}");
    }

    #[test]
    fn a_terminal_gets_one_line_redrawn_and_cleared_at_the_end() {
        let (mut p, out) = progress(true, Duration::ZERO);
        p.phase("reading t.bin", 200);
        p.advance(100); // within the redraw interval: not drawn
        p.finish();
        assert_eq!(text(&out), "\r\x1b[Kanalyzer: reading t.bin 0%\r\x1b[K");
    }

    #[test]
    fn nothing_shows_before_the_delay_or_when_hidden() {
        let (mut p, out) = progress(true, Duration::from_secs(3600));
        p.phase("reading t.bin", 200);
        p.advance(200);
        p.finish();
        assert_eq!(text(&out), "");
        let mut hidden = Progress::hidden();
        hidden.phase("reading", 10);
        hidden.finish();
    }
}
