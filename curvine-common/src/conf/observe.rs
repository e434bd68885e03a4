//! The `[log]` and `[web]` sections: how a process logs and what its web port
//! records and guards.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConf {
    /// tracing filter, e.g. `info` or `curvine_server=debug,info`.
    pub level: String,
    /// Directory for log files; empty = standard error.
    pub dir: String,
    /// `text` (one readable line per event) or `json` (one JSON object per line).
    pub format: LogFormat,
}

/// How log lines are written (`log.format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for LogConf {
    fn default() -> Self {
        LogConf {
            level: "info".into(),
            dir: String::new(),
            format: LogFormat::Text,
        }
    }
}

/// The web ports of every process (`master.web_port`, `worker.web_port`, `fuse.web_port`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConf {
    /// With `cluster.auth_token` set, also require it on `/metrics`, `/healthz` and
    /// `/readyz` (the console and `/api` always require it then).
    pub metrics_auth: bool,
    /// Record metrics on the request paths; false skips every update (the counters stay
    /// at 0), to measure what recording costs. Read when a process starts.
    pub metrics: bool,
}

impl Default for WebConf {
    fn default() -> Self {
        WebConf {
            metrics_auth: false,
            metrics: true,
        }
    }
}
