//! Under-store mounts as users write them: `[[mount]]` entries of the cluster
//! configuration and the arguments of `cv mount`, turned into a `proto::MountInfo`.
//! Building and checking the store itself is the master's (`curvine_server::ufs`).

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use crate::conf::{parse_duration, ParseError};
use crate::error::{FsError, FsResult};
use crate::proto::{MountInfo, MountMode, TtlAction};

/// How long a loaded listing or status is trusted when a mount does not say.
pub const DEFAULT_SYNC_INTERVAL_MS: i64 = 60_000;

/// One `[[mount]]` entry, applied when the master starts (skipped when the same mount
/// already exists; refused, naming the entry, when it conflicts with another).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MountConf {
    /// `s3://bucket/prefix` or `file:///dir`.
    pub ufs: String,
    /// The Curvine directory.
    pub path: String,
    /// OpenDAL's config keys for the service (`endpoint`, `region`, ...), and
    /// `credentials_file` / `credentials_profile`.
    pub options: BTreeMap<String, String>,
    /// `through` (default), `async` or `cache`.
    pub mode: String,
    /// e.g. `"7d"`; empty: no TTL.
    pub ttl: String,
    /// `free` (default with a TTL) or `delete`.
    pub ttl_action: String,
    /// A duration, `never` or `always`; empty: 60s.
    pub sync_interval: String,
    pub read_only: bool,
}

impl MountConf {
    pub fn to_info(&self) -> FsResult<MountInfo> {
        let what = || format!("[[mount]] {}", self.path);
        let bad = |e: ParseError| FsError::config(format!("{}: {e}", what()));
        Ok(MountInfo {
            path: self.path.clone(),
            ufs_uri: self.ufs.clone(),
            options: self.options.clone().into_iter().collect(),
            mode: parse_mode(&self.mode).map_err(bad)? as i32,
            ttl_ms: parse_ttl(&self.ttl).map_err(bad)?,
            ttl_action: parse_ttl_action(&self.ttl_action, &self.ttl).map_err(bad)? as i32,
            sync_interval_ms: parse_sync_interval(&self.sync_interval).map_err(bad)?,
            read_only: self.read_only,
            ..Default::default()
        })
    }
}

pub fn parse_mode(s: &str) -> Result<MountMode, ParseError> {
    match s {
        "" | "through" => Ok(MountMode::Through),
        "async" => Ok(MountMode::Async),
        "cache" => Ok(MountMode::Cache),
        o => Err(ParseError::new(
            "mode",
            o,
            "expected through, async or cache",
        )),
    }
}

pub fn mode_name(m: i32) -> &'static str {
    match MountMode::try_from(m).unwrap_or(MountMode::Unspecified) {
        MountMode::Async => "async",
        MountMode::Cache => "cache",
        _ => "through",
    }
}

pub fn parse_ttl(s: &str) -> Result<u64, ParseError> {
    if s.is_empty() {
        return Ok(0);
    }
    Ok(parse_long_duration(s)?.as_millis() as u64)
}

pub fn parse_ttl_action(s: &str, ttl: &str) -> Result<TtlAction, ParseError> {
    match s {
        "" if ttl.is_empty() => Ok(TtlAction::Unspecified),
        "" | "free" => Ok(TtlAction::Free),
        "delete" => Ok(TtlAction::Delete),
        o => Err(ParseError::new("ttl action", o, "expected free or delete")),
    }
}

pub fn ttl_action_name(a: i32) -> &'static str {
    match TtlAction::try_from(a).unwrap_or(TtlAction::Unspecified) {
        TtlAction::Free => "free",
        TtlAction::Delete => "delete",
        TtlAction::Unspecified => "none",
    }
}

/// `never` -> -1, `always` -> 0, a duration -> its milliseconds (at least 1), empty ->
/// the default.
pub fn parse_sync_interval(s: &str) -> Result<i64, ParseError> {
    match s {
        "" => Ok(DEFAULT_SYNC_INTERVAL_MS),
        "never" => Ok(-1),
        "always" => Ok(0),
        d => Ok((parse_long_duration(d)?.as_millis() as i64).max(1)),
    }
}

pub fn sync_interval_name(ms: i64) -> String {
    match ms {
        i64::MIN..=-1 => "never".into(),
        0 => "always".into(),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// `parse_duration` plus days (`7d`).
fn parse_long_duration(s: &str) -> Result<std::time::Duration, ParseError> {
    match s.trim().strip_suffix('d') {
        Some(days) => {
            let bad = |problem: &str| ParseError::new("duration", s, problem);
            let d: f64 = days
                .trim()
                .parse()
                .map_err(|_| bad("expected e.g. 30s, 5m, 7d"))?;
            if !d.is_finite() || d < 0.0 {
                return Err(bad("out of range"));
            }
            Ok(std::time::Duration::from_secs_f64(d * 86_400.0))
        }
        None => parse_duration(s),
    }
}

/// Whether an option's value is a secret: never printed, never logged.
pub fn is_secret_option(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    // names of a file and of a section in it, not the credentials
    if k == "credentials_file" || k == "credentials_profile" {
        return false;
    }
    k.contains("secret")
        || k.contains("password")
        // WebHDFS's delegation token
        || k.contains("delegation")
        || k.contains("token")
        || k.contains("credential")
        || k.ends_with("_key")
}

/// `options` with every secret value replaced by `***`.
pub fn redacted(options: &HashMap<String, String>) -> HashMap<String, String> {
    options
        .iter()
        .map(|(k, v)| {
            let v = if is_secret_option(k) {
                "***".to_string()
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_intervals_and_ttls_parse() {
        assert_eq!(parse_sync_interval("never"), Ok(-1));
        assert_eq!(parse_sync_interval("always"), Ok(0));
        assert_eq!(parse_sync_interval("2m"), Ok(120_000));
        assert_eq!(parse_sync_interval(""), Ok(DEFAULT_SYNC_INTERVAL_MS));
        assert!(parse_sync_interval("soon").is_err());
        assert_eq!(parse_ttl("2d"), Ok(172_800_000));
        assert_eq!(sync_interval_name(120_000), "120s");
        assert_eq!(sync_interval_name(-1), "never");
    }

    #[test]
    fn secrets_are_redacted() {
        let mut o = HashMap::new();
        o.insert("secret_access_key".to_string(), "s3cr3t".to_string());
        o.insert("access_key_id".to_string(), "AKIA".to_string());
        o.insert("session_token".to_string(), "t".to_string());
        o.insert(
            "server_side_encryption_customer_key".to_string(),
            "k".to_string(),
        );
        o.insert("region".to_string(), "us-east-1".to_string());
        o.insert("credentials_file".to_string(), "/etc/c".to_string());
        let r = redacted(&o);
        assert_eq!(r["credentials_file"], "/etc/c");
        assert_eq!(r["secret_access_key"], "***");
        assert_eq!(r["session_token"], "***");
        assert_eq!(r["server_side_encryption_customer_key"], "***");
        assert_eq!(r["access_key_id"], "AKIA");
        assert_eq!(r["region"], "us-east-1");
    }
}
