//! Hadoop configuration -> `ClusterConf`: every `[client]` key can be given as
//! `fs.cv.<key>` (Java strips the prefix), plus `auth_token` (`[cluster]`) and
//! `local_socket` (`[master]`: the base path of the Unix sockets of masters on this host).
//! `master_addrs` is comma-separated. Values are checked by `ClusterConf` itself, so
//! the TOML rules (sizes, durations, tiers) apply unchanged.

use curvine_common::conf::keys;
use curvine_common::{ClusterConf, FsError, FsResult};

/// Keys that belong to `[cluster]` or `[master]` instead of `[client]`.
const CLUSTER_KEYS: &[&str] = &["auth_token"];
const MASTER_KEYS: &[&str] = &["local_socket"];

/// What `check_key` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyCheck {
    Ok,
    /// Not a configuration key (the caller warns, naming it).
    Unknown,
    /// A known key with a value the configuration rejects.
    Bad(String),
}

fn section(key: &str) -> &'static str {
    if CLUSTER_KEYS.contains(&key) {
        "cluster"
    } else if MASTER_KEYS.contains(&key) {
        "master"
    } else {
        "client"
    }
}

fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The TOML form of one Hadoop value for `key`.
fn toml_value(key: &str, value: &str) -> String {
    let v = value.trim();
    if key == "master_addrs" {
        let items: Vec<String> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(toml_string)
            .collect();
        return format!("[{}]", items.join(", "));
    }
    if v == "true" || v == "false" {
        return v.to_string();
    }
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.to_string();
    }
    toml_string(v)
}

fn valid_key_name(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Check one `fs.cv.<key>` setting (key without the prefix).
pub fn check_key(key: &str, value: &str) -> KeyCheck {
    if !valid_key_name(key) {
        return KeyCheck::Unknown;
    }
    if !keys::is_key(section(key), key) {
        return KeyCheck::Unknown;
    }
    let text = format!("[{}]\n{key} = {}\n", section(key), toml_value(key, value));
    match ClusterConf::parse(&text) {
        Ok(_) => KeyCheck::Ok,
        Err(e) => KeyCheck::Bad(format!("fs.cv.{key} = {value:?}: {e}")),
    }
}

/// The configuration for `pairs` (known keys only; check them with `check_key` first),
/// and its canonical TOML text, which identifies the cluster client to share.
pub fn build_conf(pairs: &[(String, String)]) -> FsResult<(ClusterConf, String)> {
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort();
    sorted.dedup_by(|a, b| a.0 == b.0);
    let mut text = String::new();
    for sec in ["cluster", "master", "client"] {
        text.push_str(&format!("[{sec}]\n"));
        for (k, v) in sorted.iter().map(|p| (&p.0, &p.1)) {
            if section(k) != sec {
                continue;
            }
            if !valid_key_name(k) {
                return Err(FsError::config(format!("bad configuration key fs.cv.{k}")));
            }
            text.push_str(&format!("{k} = {}\n", toml_value(k, v)));
        }
    }
    let conf = ClusterConf::parse(&text)?;
    Ok((conf, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_client_key_is_settable() {
        let kv = [
            ("master_addrs", "10.0.0.1:8995, 10.0.0.2:8995"),
            ("block_size", "64MB"),
            ("replicas", "2"),
            ("storage_tier", "ssd"),
            ("short_circuit", "false"),
            ("verify_checksum", "false"),
            ("frame_size", "512KB"),
            ("read_ahead", "8MB"),
            ("connect_timeout", "2s"),
            ("rpc_timeout", "10s"),
            ("rpc_retries", "3"),
            ("retry_backoff", "50ms"),
            ("hostname", "node1"),
            ("auth_token", "secret"),
            ("local_socket", "/run/curvine/master.sock"),
        ];
        for (k, v) in kv {
            assert_eq!(check_key(k, v), KeyCheck::Ok, "{k}");
        }
        let (conf, _) = build_conf(&pairs(&kv)).unwrap();
        let c = &conf.client;
        assert_eq!(c.master_addrs, vec!["10.0.0.1:8995", "10.0.0.2:8995"]);
        assert_eq!(c.block_size.0, 64 << 20);
        assert_eq!(c.replicas, 2);
        assert!(!c.short_circuit && !c.verify_checksum);
        assert_eq!(c.frame_size.0, 512 << 10);
        assert_eq!(c.rpc_retries, 3);
        assert_eq!(c.retry_backoff.get().as_millis(), 50);
        assert_eq!(c.hostname, "node1");
        assert_eq!(conf.cluster.auth_token, "secret");
        assert_eq!(
            conf.master.local_socket,
            std::path::Path::new("/run/curvine/master.sock")
        );
    }

    #[test]
    fn unknown_and_bad_keys_are_told_apart() {
        assert_eq!(check_key("no_such_key", "1"), KeyCheck::Unknown);
        assert_eq!(check_key("Bad-Name", "1"), KeyCheck::Unknown);
        match check_key("block_size", "12 parsecs") {
            KeyCheck::Bad(m) => assert!(m.contains("fs.cv.block_size"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(check_key("replicas", "many"), KeyCheck::Bad(_)));
    }

    #[test]
    fn same_settings_give_the_same_canonical_text() {
        let (_, a) = build_conf(&pairs(&[("replicas", "1"), ("master_addrs", "h:1")])).unwrap();
        let (_, b) = build_conf(&pairs(&[("master_addrs", "h:1"), ("replicas", "1")])).unwrap();
        let (_, c) = build_conf(&pairs(&[("master_addrs", "h:2")])).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn quotes_in_values_cannot_inject_keys() {
        let (conf, _) = build_conf(&pairs(&[("hostname", "x\"\nreplicas = 9\n\"")])).unwrap();
        assert_eq!(conf.client.replicas, 0);
        assert!(conf.client.hostname.contains("replicas"));
    }
}
