//! Standard output for the command-line tools (`cv`, `curvine-bench`).
//!
//! Rust ignores SIGPIPE, so a write to a pipe whose reader has gone (`cv fs cat F | head`)
//! returns `BrokenPipe` instead of ending the process. A tool should then stop quietly,
//! as `cat` does, while a broken pipe from a socket to a server is still a failure to
//! report. `Stdout` marks its own broken pipes so that `main` can tell them apart.

use std::error::Error;
use std::fmt;
use std::io::{self, Write};

/// Exit status for output cut short by its reader: what a shell shows for a program
/// ended by SIGPIPE (128 + 13).
pub const CLOSED_EXIT: u8 = 141;

/// Standard output, locked, whose `BrokenPipe` errors carry a `StdoutClosed` marker.
pub struct Stdout(io::StdoutLock<'static>);

/// The source of a `BrokenPipe` error that came from standard output.
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output closed")
    }
}

impl Error for StdoutClosed {}

impl Stdout {
    pub fn lock() -> Stdout {
        Stdout(io::stdout().lock())
    }
}

/// Mark a broken pipe as `StdoutClosed`, and name standard output in other errors (of
/// the same kind, so `write_all` still retries an interrupted write).
fn mark(e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::BrokenPipe => io::Error::new(io::ErrorKind::BrokenPipe, StdoutClosed),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => e,
        kind => io::Error::new(kind, format!("standard output: {e}")),
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(mark)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(mark)
    }
}

/// Whether an error (or anything in its chain of sources) is standard output closed by
/// its reader.
pub fn is_closed(e: &(dyn Error + 'static)) -> bool {
    let mut cur = Some(e);
    // the marker sits inside an `io::Error`, whose `source()` skips it: look there
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if io.get_ref().is_some_and(|inner| inner.is::<StdoutClosed>()) {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_marked_broken_pipe_counts_as_closed_stdout() {
        let marked = mark(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(is_closed(&marked));
        // a socket's broken pipe is not standard output's
        assert!(!is_closed(&io::Error::from(io::ErrorKind::BrokenPipe)));
        // other errors keep their kind and name standard output
        let full = mark(io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(!is_closed(&full));
        assert_eq!(full.kind(), io::ErrorKind::StorageFull);
        assert!(
            full.to_string()
                .starts_with("standard output: No space left"),
            "{full}"
        );
        let again = mark(io::Error::from(io::ErrorKind::Interrupted));
        assert_eq!(again.kind(), io::ErrorKind::Interrupted);
        // found under context added on the way up
        let wrapped =
            anyhow::Error::new(mark(io::Error::from(io::ErrorKind::BrokenPipe))).context("cat /a");
        assert!(is_closed(wrapped.as_ref()));
    }
}
