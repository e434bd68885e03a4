//! Under-stores: a mount's URI and options turned into an OpenDAL operator, the check
//! made when mounting, what a lookup learns from the store, and its errors as
//! `FsError::UnderStore`. Only the master and workers build operators; clients never
//! talk to an under-store.

use std::collections::{BTreeSet, HashMap};
use std::sync::Once;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub mod credentials;

use curvine_common::mount::is_secret_option;
use curvine_common::{FsError, FsResult};
use futures_util::{StreamExt, TryStreamExt};
use opendal::{ErrorKind, Metadata, Operator};
use tracing::warn;

/// How long the mount-time check (listing the root) may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(15);

/// Which OpenDAL service a URI names, and where in it the mount's root is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `s3://bucket/prefix`
    S3 { bucket: String, root: String },
    /// `file:///dir`
    Fs { dir: String },
}

pub fn parse_uri(uri: &str) -> FsResult<Location> {
    let bad = |why: &str| FsError::invalid(format!("under-store URI {uri:?}: {why}"));
    if let Some(rest) = uri.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket (expected s3://bucket/prefix)"));
        }
        let prefix = prefix.trim_matches('/');
        return Ok(Location::S3 {
            bucket: bucket.to_string(),
            root: format!("/{prefix}"),
        });
    }
    if let Some(rest) = uri.strip_prefix("file://") {
        if !rest.starts_with('/') {
            return Err(bad("expected an absolute path: file:///dir"));
        }
        let dir = rest.trim_end_matches('/');
        return Ok(Location::Fs {
            dir: if dir.is_empty() {
                "/".into()
            } else {
                dir.into()
            },
        });
    }
    Err(bad(
        "unsupported scheme (supported: s3://bucket/prefix, file:///dir)",
    ))
}

/// The config keys OpenDAL's service accepts (the fields of its config struct).
fn known_keys<C: serde::Serialize + Default>() -> BTreeSet<String> {
    match serde_json::to_value(C::default()) {
        Ok(serde_json::Value::Object(m)) => m.into_iter().map(|(k, _)| k).collect(),
        _ => BTreeSet::new(),
    }
}

fn install_transport() {
    static ONCE: Once = Once::new();
    ONCE.call_once(opendal_http_transport_reqwest::install_default);
}

/// The options the operator of `uri` is built from (master only): `options` with the
/// values of its credentials file merged in (see `credentials`), the file's keys
/// checked as options are.
pub fn resolve(uri: &str, options: &HashMap<String, String>) -> FsResult<HashMap<String, String>> {
    let (known, fixed) = option_keys(&parse_uri(uri)?);
    credentials::resolve(uri, options, |k| known.contains(k) && !fixed.contains(&k))
}

/// The config keys of the service `loc` names, and those of them the URI sets.
fn option_keys(loc: &Location) -> (BTreeSet<String>, &'static [&'static str]) {
    match loc {
        Location::S3 { .. } => (
            known_keys::<opendal_service_s3::S3Config>(),
            &["bucket", "root"],
        ),
        Location::Fs { .. } => (known_keys::<opendal_service_fs::FsConfig>(), &["root"]),
    }
}

/// An operator for `uri` with `options` (OpenDAL's own config keys for the service).
/// No network I/O: see `check` for that. Unknown keys, and keys the URI sets, are
/// refused naming the key.
pub fn build(uri: &str, options: &HashMap<String, String>) -> FsResult<Operator> {
    let loc = parse_uri(uri)?;
    let (known, fixed) = option_keys(&loc);
    for k in options.keys() {
        if fixed.contains(&k.as_str()) {
            return Err(FsError::invalid(format!(
                "option {k:?}: set by the URI {uri:?}, not as an option"
            )));
        }
        if !known.contains(k) {
            let list: Vec<&str> = known
                .iter()
                .map(String::as_str)
                .filter(|k| !fixed.contains(k))
                .collect();
            return Err(FsError::invalid(format!(
                "unknown option {k:?} for {uri:?} (known: {})",
                list.join(", ")
            )));
        }
    }
    let mut map: Vec<(String, String)> = options
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    install_transport();
    let built = match &loc {
        Location::S3 { bucket, root } => {
            map.push(("bucket".into(), bucket.clone()));
            map.push(("root".into(), root.clone()));
            Operator::from_iter::<opendal_service_s3::S3>(map)
        }
        Location::Fs { dir } => {
            // OpenDAL would create a missing root: a mistyped path must fail instead
            if !std::path::Path::new(dir).is_dir() {
                return Err(FsError::UnderStore {
                    store: uri.to_string(),
                    key: String::new(),
                    message: format!("{dir} is not a directory"),
                });
            }
            map.push(("root".into(), dir.clone()));
            Operator::from_iter::<opendal_service_fs::Fs>(map)
        }
    };
    built.map_err(|e| store_err(uri, "", &e))
}

/// Check that the store answers and lets us in: list (the first entry of) its root.
pub async fn check(uri: &str, op: &Operator) -> FsResult<()> {
    let list = async {
        let mut l = op.lister_with("/").limit(1).await?;
        l.try_next().await
    };
    match tokio::time::timeout(CHECK_TIMEOUT, list).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(store_err(uri, "", &e)),
        Err(_) => Err(FsError::UnderStore {
            store: uri.to_string(),
            key: String::new(),
            message: format!("no answer to a listing within {CHECK_TIMEOUT:?}"),
        }),
    }
}

/// `e` as an `UnderStore` error naming the store and key. OpenDAL's messages carry the
/// service's context (never the credentials: its configs print secrets redacted).
pub fn store_err(uri: &str, key: &str, e: &opendal::Error) -> FsError {
    let message = match e.kind() {
        ErrorKind::NotFound => "not found".to_string(),
        ErrorKind::PermissionDenied => format!("permission denied (check the credentials): {e}"),
        _ => e.to_string(),
    };
    FsError::UnderStore {
        store: uri.to_string(),
        key: key.to_string(),
        message,
    }
}

pub fn is_not_found(e: &opendal::Error) -> bool {
    e.kind() == ErrorKind::NotFound
}

/// What the store says about one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The last path component (no trailing slash).
    pub name: String,
    pub dir: bool,
    pub len: u64,
    pub etag: String,
    pub mtime_ms: i64,
}

impl Object {
    pub fn from_meta(name: &str, m: &Metadata) -> Object {
        Object {
            name: name.trim_end_matches('/').to_string(),
            dir: m.is_dir(),
            len: if m.is_dir() { 0 } else { m.content_length() },
            etag: m.etag().unwrap_or_default().to_string(),
            mtime_ms: m.last_modified().map_or(0, |t| {
                SystemTime::from(t)
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64)
            }),
        }
    }
}

/// Whether `key` (relative to the root, no leading slash) is an object or a prefix
/// with entries under it; `None` when neither.
pub async fn probe(uri: &str, op: &Operator, key: &str) -> FsResult<Option<Object>> {
    let name = key.rsplit('/').next().unwrap_or(key);
    // Some S3 servers fail a HEAD of a prefix instead of answering 404: the listing
    // below decides, and the stat's error stands only when it finds nothing either.
    let stat_err = match op.stat(key).await {
        Ok(m) if m.is_file() || m.is_dir() => return Ok(Some(Object::from_meta(name, &m))),
        Ok(_) => None,
        Err(e) if is_not_found(&e) => None,
        Err(e) => Some(store_err(uri, key, &e)),
    };
    let prefix = format!("{key}/");
    let first = async {
        let mut l = op.lister_with(&prefix).limit(2).await?;
        l.try_next().await
    };
    match (first.await, stat_err) {
        (Ok(Some(_)), _) => Ok(Some(Object {
            name: name.to_string(),
            dir: true,
            len: 0,
            etag: String::new(),
            mtime_ms: 0,
        })),
        (_, Some(e)) => Err(e),
        (Ok(None), None) => Ok(None),
        (Err(e), None) if is_not_found(&e) => Ok(None),
        (Err(e), None) => Err(store_err(uri, key, &e)),
    }
}

/// Every entry directly under directory `key` ("" for the root), through the store's
/// paginated listing. Files whose listing lacks an ETag or mtime are stat'ed, so that a
/// file's identity always comes from the same kind of answer (some S3 servers list no
/// ETags; a HEAD gives the mtime to the second, a listing to the millisecond).
pub async fn list_dir(uri: &str, op: &Operator, key: &str) -> FsResult<Vec<Object>> {
    let dir = if key.is_empty() {
        "/".to_string()
    } else {
        format!("{key}/")
    };
    let err = |e: opendal::Error| store_err(uri, key, &e);
    let mut l = match op.lister(&dir).await {
        Ok(l) => l,
        Err(e) if is_not_found(&e) => return Ok(Vec::new()),
        Err(e) => return Err(err(e)),
    };
    let mut out = Vec::new();
    // entries whose listing lacks an ETag or mtime (s3s-fs lists no ETags): stat them
    let mut incomplete = Vec::new();
    while let Some(entry) = l.try_next().await.map_err(err)? {
        let path = entry.path();
        if path == dir || path.trim_start_matches('/') == dir.trim_start_matches('/') {
            continue; // the directory itself
        }
        let name = entry.name().trim_end_matches('/');
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            continue;
        }
        let m = entry.metadata();
        let o = Object::from_meta(name, m);
        if !o.dir && (m.last_modified().is_none() || m.etag().is_none()) {
            incomplete.push((out.len(), path.to_string()));
        }
        out.push(o);
    }
    // concurrently: one at a time, a listing waits a round trip per object
    let mut stats =
        futures_util::stream::iter(incomplete.into_iter().map(|(i, path)| async move {
            let m = op
                .stat(&path)
                .await
                .map_err(|e| store_err(uri, &path, &e))?;
            Ok::<_, FsError>((i, m))
        }))
        .buffer_unordered(STATS_IN_FLIGHT);
    while let Some((i, m)) = stats.try_next().await? {
        let name = std::mem::take(&mut out[i].name);
        out[i] = Object::from_meta(&name, &m);
    }
    Ok(out)
}

/// Stats in flight while a listing fills in what the store's listing left out.
const STATS_IN_FLIGHT: usize = 16;

/// Log targets that print credentials below INFO: reqsign's credential providers show
/// static keys in their `Debug` output, and its signer the signed headers (a session
/// token among them).
const SECRET_LOG_TARGETS: &[&str] = &[
    "reqsign",
    "reqsign_core",
    "reqsign_aws_core",
    "reqsign_aws_v4",
];

/// `filter` with the targets that would log credentials held at INFO, whatever it says.
pub fn without_secret_logs(
    mut filter: tracing_subscriber::EnvFilter,
) -> tracing_subscriber::EnvFilter {
    for t in SECRET_LOG_TARGETS {
        match format!("{t}=info").parse() {
            Ok(d) => filter = filter.add_directive(d),
            Err(e) => warn!(target = t, error = %e, "bad log directive"),
        }
    }
    filter
}

/// `options` as they may be logged: secrets out.
pub fn loggable(options: &HashMap<String, String>) -> String {
    let mut keys: Vec<String> = options
        .iter()
        .map(|(k, v)| {
            if is_secret_option(k) {
                format!("{k}=***")
            } else {
                format!("{k}={v}")
            }
        })
        .collect();
    keys.sort();
    keys.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse() {
        assert_eq!(
            parse_uri("s3://b/x/y/").unwrap(),
            Location::S3 {
                bucket: "b".into(),
                root: "/x/y".into()
            }
        );
        assert_eq!(
            parse_uri("s3://b").unwrap(),
            Location::S3 {
                bucket: "b".into(),
                root: "/".into()
            }
        );
        assert_eq!(
            parse_uri("file:///data/").unwrap(),
            Location::Fs {
                dir: "/data".into()
            }
        );
        assert!(parse_uri("s3:///x").is_err());
        assert!(parse_uri("file://rel").is_err());
        assert!(parse_uri("hdfs://nn/x").is_err());
    }

    #[test]
    fn unknown_and_fixed_options_are_refused() {
        let mut o = HashMap::new();
        o.insert("regoin".to_string(), "x".to_string());
        let e = build("s3://b/p", &o).unwrap_err().to_string();
        assert!(e.contains("unknown option \"regoin\""), "{e}");
        assert!(e.contains("region"), "{e}");
        let mut o = HashMap::new();
        o.insert("bucket".to_string(), "x".to_string());
        assert!(build("s3://b/p", &o).is_err());
        let mut o = HashMap::new();
        o.insert("region".to_string(), "us-east-1".to_string());
        o.insert("endpoint".to_string(), "http://127.0.0.1:1".to_string());
        assert!(build("s3://b/p", &o).is_ok());
        assert!(build("file:///tmp", &HashMap::new()).is_ok());
    }
}
