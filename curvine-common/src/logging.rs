//! The log set-up of the server processes (master, worker, FUSE daemon): `log.level`
//! as a `tracing` filter, lines as text or JSON (`log.format`), to standard error or to
//! `ROLE.log` in `log.dir`.

use std::path::PathBuf;

use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

use crate::conf::{LogConf, LogFormat};
use crate::error::{FsError, FsResult};

/// Where log lines of `role` go under `conf`, and whether they may carry colours.
fn writer(conf: &LogConf, role: &str) -> FsResult<(BoxMakeWriter, bool)> {
    if conf.dir.is_empty() {
        // colours only on a terminal: bin/curvine-*.sh send stderr to the role's log file
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        return Ok((BoxMakeWriter::new(std::io::stderr), ansi));
    }
    std::fs::create_dir_all(&conf.dir)
        .map_err(|e| FsError::io_ctx(format!("create log.dir {}", conf.dir), e))?;
    let path = PathBuf::from(&conf.dir).join(format!("{role}.log"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| FsError::io_ctx(format!("open log file {}", path.display()), e))?;
    Ok((BoxMakeWriter::new(std::sync::Mutex::new(file)), false))
}

/// Install the process's log subscriber: `filter` (built by the caller from
/// `conf.level`, with what it holds back), lines as `conf.format` says.
pub fn init(conf: &LogConf, filter: EnvFilter, role: &str) -> FsResult<()> {
    let (w, ansi) = writer(conf, role)?;
    let layer = match conf.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(w)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(w)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .try_init()
        .map_err(|e| FsError::config(format!("log set-up: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_format_parses_and_refuses_others() {
        let c: LogConf = toml::from_str("format = \"json\"").unwrap();
        assert_eq!(c.format, LogFormat::Json);
        assert_eq!(LogConf::default().format, LogFormat::Text);
        let e = toml::from_str::<LogConf>("format = \"xml\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("xml") && e.contains("json"), "{e}");
    }
}
