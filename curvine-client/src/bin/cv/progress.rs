//! Progress of long `cv` work on standard error: a bar on a terminal (bytes, rate, ETA),
//! a plain line every few seconds when standard error is a file or a pipe, and nothing
//! with `--quiet`.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::format::human;

/// How often a plain progress line is printed.
pub const LINE_EVERY: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A bar redrawn in place (standard error is a terminal).
    Bar,
    /// A line every `LINE_EVERY` and one at the end.
    Lines,
    /// Nothing.
    Quiet,
}

impl Mode {
    pub fn detect(quiet: bool) -> Mode {
        if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Lines
        }
    }
}

/// A bar over `total` bytes (`None`: unknown, a spinner with the bytes so far) on
/// standard error. The message names the work; it is cut to what the terminal's width
/// leaves, so the bar and the figures always show.
pub fn byte_bar(total: Option<u64>) -> anyhow::Result<ProgressBar> {
    let (bar, template) = match total {
        Some(n) => (
            ProgressBar::new(n),
            "{spinner} {wide_msg} [{bar:25}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
        ),
        None => (
            ProgressBar::new_spinner(),
            "{spinner} {wide_msg} {bytes} {binary_bytes_per_sec} [{elapsed_precise}]",
        ),
    };
    bar.set_style(ProgressStyle::with_template(template)?.progress_chars("=> "));
    bar.enable_steady_tick(Duration::from_millis(200));
    Ok(bar)
}

/// What a transfer has done, shared with the task printing plain lines.
struct Counts {
    what: String,
    total_bytes: Option<u64>,
    total_files: u64,
    bytes: AtomicU64,
    files: AtomicU64,
    started: Instant,
}

impl Counts {
    fn rate(&self, bytes: u64) -> f64 {
        bytes as f64 / self.started.elapsed().as_secs_f64().max(1e-3)
    }

    fn files_part(&self) -> String {
        if self.total_files > 1 {
            format!(
                ", files {}/{}",
                self.files.load(Ordering::Relaxed),
                self.total_files
            )
        } else {
            String::new()
        }
    }

    /// `WHAT: 12.0 MiB/100.0 MiB (12%), 6.0 MiB/s, ETA 15s, files 2/5`.
    fn line(&self) -> String {
        let done = self.bytes.load(Ordering::Relaxed);
        let rate = self.rate(done);
        let amount = match self.total_bytes {
            Some(total) => {
                let pct = done.saturating_mul(100).checked_div(total).unwrap_or(100);
                let eta = if rate > 0.0 {
                    format!("{:.0}s", total.saturating_sub(done) as f64 / rate)
                } else {
                    "-".into()
                };
                format!(
                    "{}/{} ({pct}%), {}/s, ETA {eta}",
                    human(done),
                    human(total),
                    human(rate as u64)
                )
            }
            None => format!("{}, {}/s", human(done), human(rate as u64)),
        };
        format!("{}: {amount}{}", self.what, self.files_part())
    }

    /// `WHAT: 100.0 MiB in 3.2s (31.2 MiB/s), 5 files`.
    fn summary(&self) -> String {
        let done = self.bytes.load(Ordering::Relaxed);
        let files = if self.total_files > 1 {
            format!(", {} files", self.files.load(Ordering::Relaxed))
        } else {
            String::new()
        };
        format!(
            "{}: {} in {:.1}s ({}/s){files}",
            self.what,
            human(done),
            self.started.elapsed().as_secs_f64(),
            human(self.rate(done) as u64)
        )
    }
}

/// The progress of copying bytes, possibly of several files, shown as `Mode` says.
pub struct Transfer {
    mode: Mode,
    counts: Arc<Counts>,
    bar: ProgressBar,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Transfer {
    /// Start showing `what` (e.g. `put a -> /b`): `total_bytes` if known beforehand, over
    /// `total_files` files. Must be called inside the runtime.
    pub fn start(
        mode: Mode,
        what: String,
        total_bytes: Option<u64>,
        total_files: u64,
    ) -> anyhow::Result<Transfer> {
        let counts = Arc::new(Counts {
            what,
            total_bytes,
            total_files,
            bytes: AtomicU64::new(0),
            files: AtomicU64::new(0),
            started: Instant::now(),
        });
        let mut ticker = None;
        let bar = match mode {
            Mode::Bar => byte_bar(total_bytes)?,
            Mode::Lines => {
                let c = counts.clone();
                ticker = Some(tokio::spawn(async move {
                    let mut every = tokio::time::interval(LINE_EVERY);
                    every.tick().await; // the first tick is now
                    loop {
                        every.tick().await;
                        // standard error gone: there is no one to tell, stop telling
                        if writeln!(std::io::stderr(), "{}", c.line()).is_err() {
                            break;
                        }
                    }
                }));
                ProgressBar::hidden()
            }
            Mode::Quiet => ProgressBar::hidden(),
        };
        let t = Transfer {
            mode,
            counts,
            bar,
            ticker,
        };
        t.show_files();
        Ok(t)
    }

    /// `n` more bytes copied.
    pub fn add(&self, n: u64) {
        self.counts.bytes.fetch_add(n, Ordering::Relaxed);
        self.bar.inc(n);
    }

    /// One more file copied.
    pub fn file_done(&self) {
        self.counts.files.fetch_add(1, Ordering::Relaxed);
        self.show_files();
    }

    fn show_files(&self) {
        let c = &self.counts;
        if c.total_files > 1 {
            self.bar.set_message(format!(
                "{}, files {}/{}",
                c.what,
                c.files.load(Ordering::Relaxed),
                c.total_files
            ));
        } else {
            self.bar.set_message(c.what.clone());
        }
    }

    /// The work is done: leave the full bar on the terminal, or print a summary line.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.stop_ticker();
        match self.mode {
            Mode::Bar => self.bar.finish(),
            Mode::Lines => writeln!(std::io::stderr(), "{}", self.counts.summary())?,
            Mode::Quiet => {}
        }
        Ok(())
    }

    fn stop_ticker(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
    }
}

impl Drop for Transfer {
    /// A transfer that failed: the bar stays where it stopped, above the error line.
    fn drop(&mut self) {
        self.stop_ticker();
        if !self.bar.is_finished() {
            self.bar.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(total: Option<u64>, files: u64) -> Counts {
        Counts {
            what: "put a -> /b".into(),
            total_bytes: total,
            total_files: files,
            bytes: AtomicU64::new(3 << 20),
            files: AtomicU64::new(1),
            started: Instant::now(),
        }
    }

    #[test]
    fn plain_lines_say_how_far_and_how_fast() {
        let l = counts(Some(12 << 20), 4).line();
        assert!(
            l.starts_with("put a -> /b: 3.0 MiB/12.0 MiB (25%), ")
                && l.contains("/s, ETA ")
                && l.ends_with(", files 1/4"),
            "{l}"
        );
        let l = counts(None, 1).line();
        assert!(
            l.starts_with("put a -> /b: 3.0 MiB, ") && l.ends_with("/s"),
            "{l}"
        );
        let s = counts(Some(3 << 20), 1).summary();
        assert!(s.starts_with("put a -> /b: 3.0 MiB in "), "{s}");
        assert!(counts(Some(0), 1).line().contains("(100%)"));
    }
}
