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

/// Which OpenDAL service a URI names, and where in it the mount's root is. Every
/// scheme parses in every build; a service whose cargo feature is not built is refused
/// when the operator is built (see `Location::feature`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `s3://bucket/prefix`
    S3 { bucket: String, root: String },
    /// `file:///dir`
    Fs { dir: String },
    /// `webhdfs://host:port/dir` (HTTP) or `swebhdfs://host:port/dir` (HTTPS), Hadoop's
    /// names: `endpoint` is `http[s]://host:port`, `root` the HDFS directory.
    Webhdfs { endpoint: String, root: String },
    /// `gs://bucket/prefix` (or `gcs://`, OpenDAL's name): Google Cloud Storage.
    Gcs { bucket: String, root: String },
    /// `azblob://container/prefix`: Azure Blob Storage; the account comes from the
    /// `endpoint` (and `account_name`) options.
    Azblob { container: String, root: String },
}

/// The schemes `parse_uri` knows, as its errors list them.
const SCHEMES: &str = "s3://bucket/prefix, file:///dir, webhdfs://host:port/dir, \
                       swebhdfs://host:port/dir, gs://bucket/prefix, azblob://container/prefix";

impl Location {
    /// Whether a write of an object leaves the old one whole and readable until the new
    /// one is complete (object stores: S3's uploads, GCS's, Azure's block lists), so a
    /// block dropped from the cache can still be read from the old object, by ETag,
    /// while the file is uploaded over it. A directory or HDFS file is written in place.
    pub fn keeps_old_object_while_writing(&self) -> bool {
        matches!(
            self,
            Location::S3 { .. } | Location::Gcs { .. } | Location::Azblob { .. }
        )
    }

    /// The cargo feature of curvine-server that builds this service in, and whether
    /// this build has it (S3 and local directories are always in).
    pub fn feature(&self) -> Option<(&'static str, bool)> {
        match self {
            Location::S3 { .. } | Location::Fs { .. } => None,
            Location::Webhdfs { .. } => Some(("ufs-webhdfs", cfg!(feature = "ufs-webhdfs"))),
            Location::Gcs { .. } => Some(("ufs-gcs", cfg!(feature = "ufs-gcs"))),
            Location::Azblob { .. } => Some(("ufs-azblob", cfg!(feature = "ufs-azblob"))),
        }
    }

    /// OpenDAL's name of the service.
    pub fn service(&self) -> &'static str {
        match self {
            Location::S3 { .. } => "s3",
            Location::Fs { .. } => "fs",
            Location::Webhdfs { .. } => "webhdfs",
            Location::Gcs { .. } => "gcs",
            Location::Azblob { .. } => "azblob",
        }
    }
}

pub fn parse_uri(uri: &str) -> FsResult<Location> {
    let bad = |why: &str| FsError::invalid(format!("under-store URI {uri:?}: {why}"));
    // `scheme://name/prefix`: the name (bucket, container) and the root below it
    let named = |rest: &str, what: &str, example: &str| {
        let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if name.is_empty() {
            return Err(bad(&format!("no {what} (expected {example})")));
        }
        let prefix = prefix.trim_matches('/');
        Ok((name.to_string(), format!("/{prefix}")))
    };
    if let Some(rest) = uri.strip_prefix("s3://") {
        let (bucket, root) = named(rest, "bucket", "s3://bucket/prefix")?;
        return Ok(Location::S3 { bucket, root });
    }
    for scheme in ["gs://", "gcs://"] {
        if let Some(rest) = uri.strip_prefix(scheme) {
            let (bucket, root) = named(rest, "bucket", "gs://bucket/prefix")?;
            return Ok(Location::Gcs { bucket, root });
        }
    }
    if let Some(rest) = uri.strip_prefix("azblob://") {
        let (container, root) = named(rest, "container", "azblob://container/prefix")?;
        return Ok(Location::Azblob { container, root });
    }
    for (scheme, http) in [("webhdfs://", "http"), ("swebhdfs://", "https")] {
        if let Some(rest) = uri.strip_prefix(scheme) {
            let (authority, dir) = rest.split_once('/').unwrap_or((rest, ""));
            if authority.is_empty() || authority.contains(['@', '?', '#']) {
                return Err(bad(&format!(
                    "expected {scheme}host:port/dir (the NameNode's HTTP address)"
                )));
            }
            let dir = dir.trim_matches('/');
            return Ok(Location::Webhdfs {
                endpoint: format!("{http}://{authority}"),
                root: format!("/{dir}"),
            });
        }
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
    Err(bad(&format!("unsupported scheme (supported: {SCHEMES})")))
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
    let (known, fixed) = option_keys(uri, &parse_uri(uri)?)?;
    credentials::resolve(uri, options, |k| known.contains(k) && !fixed.contains(&k))
}

/// The config keys of the service `loc` names, and those of them the URI sets. A
/// service this build lacks is refused naming the cargo feature that builds it in.
fn option_keys(uri: &str, loc: &Location) -> FsResult<(BTreeSet<String>, &'static [&'static str])> {
    if let Some((feature, false)) = loc.feature() {
        return Err(FsError::invalid(format!(
            "under-store URI {uri:?}: this build has no {} service: build curvine-server \
             with the `{feature}` feature (cargo build --release --features \
             curvine-server/{feature})",
            loc.service()
        )));
    }
    Ok(match loc {
        Location::S3 { .. } => (
            known_keys::<opendal_service_s3::S3Config>(),
            &["bucket", "root"],
        ),
        Location::Fs { .. } => (known_keys::<opendal_service_fs::FsConfig>(), &["root"]),
        #[cfg(feature = "ufs-webhdfs")]
        Location::Webhdfs { .. } => (
            known_keys::<opendal_service_webhdfs::WebhdfsConfig>(),
            &["endpoint", "root"],
        ),
        #[cfg(feature = "ufs-gcs")]
        Location::Gcs { .. } => (
            known_keys::<opendal_service_gcs::GcsConfig>(),
            &["bucket", "root"],
        ),
        #[cfg(feature = "ufs-azblob")]
        Location::Azblob { .. } => (
            known_keys::<opendal_service_azblob::AzblobConfig>(),
            &["container", "root"],
        ),
        #[allow(unreachable_patterns)]
        _ => unreachable!("a service without its feature is refused above"),
    })
}

/// An operator for `uri` with `options` (OpenDAL's own config keys for the service).
/// No network I/O: see `check` for that. Unknown keys, and keys the URI sets, are
/// refused naming the key.
pub fn build(uri: &str, options: &HashMap<String, String>) -> FsResult<Operator> {
    let loc = parse_uri(uri)?;
    let (known, fixed) = option_keys(uri, &loc)?;
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
        #[cfg(feature = "ufs-webhdfs")]
        Location::Webhdfs { endpoint, root } => {
            map.push(("endpoint".into(), endpoint.clone()));
            map.push(("root".into(), root.clone()));
            Operator::from_iter::<opendal_service_webhdfs::Webhdfs>(map)
        }
        #[cfg(feature = "ufs-gcs")]
        Location::Gcs { bucket, root } => {
            map.push(("bucket".into(), bucket.clone()));
            map.push(("root".into(), root.clone()));
            Operator::from_iter::<opendal_service_gcs::Gcs>(map)
        }
        #[cfg(feature = "ufs-azblob")]
        Location::Azblob { container, root } => {
            map.push(("container".into(), container.clone()));
            map.push(("root".into(), root.clone()));
            Operator::from_iter::<opendal_service_azblob::Azblob>(map)
        }
        #[allow(unreachable_patterns)]
        _ => unreachable!("a service without its feature is refused by option_keys"),
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
        message: without_url_secrets(&message),
    }
}

/// `text` with the values of secret query parameters of the URLs in it replaced by
/// `***`. OpenDAL's HTTP errors name the request's URL, and some services carry
/// credentials there: WebHDFS's `delegation` token, an Azure SAS token (its `sig`).
pub fn without_url_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['?', '&']) {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '%')))
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(name_len);
        let Some(value) = after.strip_prefix('=') else {
            continue;
        };
        let value_len = value
            .find(|c: char| c == '&' || c == '#' || c.is_whitespace() || "\",;)}]>'".contains(c))
            .unwrap_or(value.len());
        if name.is_empty() || !is_secret_query(name) {
            continue;
        }
        out.push_str(name);
        out.push_str("=***");
        rest = &value[value_len..];
    }
    out.push_str(rest);
    out
}

/// Query parameters that carry credentials: any secret option's name, and the
/// signature of an Azure SAS token.
fn is_secret_query(name: &str) -> bool {
    is_secret_option(name) || name.eq_ignore_ascii_case("sig")
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
/// static keys in their `Debug` output, and its signers the signed headers or the string
/// they sign (a session token among them).
const SECRET_LOG_TARGETS: &[&str] = &[
    "reqsign",
    "reqsign_core",
    "reqsign_aws_core",
    "reqsign_aws_v4",
    "reqsign_google",
    "reqsign_azure_storage",
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
        let e = parse_uri("hdfs://nn/x").unwrap_err().to_string();
        assert!(
            e.contains("unsupported scheme") && e.contains("gs://"),
            "{e}"
        );
    }

    #[test]
    fn other_services_uris_parse() {
        assert_eq!(
            parse_uri("webhdfs://nn:9870/user/a/").unwrap(),
            Location::Webhdfs {
                endpoint: "http://nn:9870".into(),
                root: "/user/a".into()
            }
        );
        assert_eq!(
            parse_uri("swebhdfs://nn.example:9871").unwrap(),
            Location::Webhdfs {
                endpoint: "https://nn.example:9871".into(),
                root: "/".into()
            }
        );
        let gcs = Location::Gcs {
            bucket: "b".into(),
            root: "/p/q".into(),
        };
        assert_eq!(parse_uri("gs://b/p/q/").unwrap(), gcs);
        assert_eq!(parse_uri("gcs://b/p/q").unwrap(), gcs);
        assert_eq!(
            parse_uri("azblob://c").unwrap(),
            Location::Azblob {
                container: "c".into(),
                root: "/".into()
            }
        );
        for bad in ["webhdfs:///x", "webhdfs://u@nn:1/x", "gs:///x", "azblob://"] {
            assert!(parse_uri(bad).is_err(), "{bad}");
        }
        let e = parse_uri("gs://").unwrap_err().to_string();
        assert!(e.contains("no bucket"), "{e}");
        let e = parse_uri("azblob:///p").unwrap_err().to_string();
        assert!(e.contains("no container"), "{e}");
    }

    fn opts(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A URI of each optional service with options that build (no network I/O: the
    /// endpoints are loopback, the credentials static).
    fn optional_services() -> Vec<(&'static str, HashMap<String, String>)> {
        vec![
            ("webhdfs://127.0.0.1:1/pre", opts(&[("user_name", "u")])),
            (
                "gs://bkt/pre",
                opts(&[
                    ("endpoint", "http://127.0.0.1:1"),
                    ("token", "t0ken"),
                    ("disable_vm_metadata", "true"),
                    ("disable_config_load", "true"),
                ]),
            ),
            (
                "azblob://cnt/pre",
                opts(&[
                    ("endpoint", "http://127.0.0.1:1/acct"),
                    ("account_name", "acct"),
                    ("account_key", "c2VjcmV0"),
                ]),
            ),
        ]
    }

    #[test]
    fn a_service_not_built_in_is_refused_naming_its_feature() {
        for (uri, o) in optional_services() {
            let (feature, built) = parse_uri(uri).unwrap().feature().unwrap();
            match build(uri, &o) {
                Ok(_) => assert!(built, "{uri} built without {feature}"),
                Err(e) => {
                    let e = e.to_string();
                    assert!(!built, "{uri}: {e}");
                    assert!(e.contains(&format!("`{feature}` feature")), "{e}");
                    let r = resolve(uri, &o).unwrap_err().to_string();
                    assert!(r.contains(feature), "{r}");
                }
            }
        }
    }

    /// The operator of each optional service has the URI's name and root, and refuses
    /// the keys the URI sets.
    #[test]
    fn optional_services_map_the_uri() {
        for (uri, o) in optional_services() {
            let loc = parse_uri(uri).unwrap();
            if !loc.feature().unwrap().1 {
                continue;
            }
            let op = build(uri, &o).unwrap_or_else(|e| panic!("{uri}: {e}"));
            let info = op.info();
            assert_eq!(info.scheme(), loc.service(), "{uri}");
            assert_eq!(info.root(), "/pre/");
            match &loc {
                Location::Gcs { bucket: n, .. } | Location::Azblob { container: n, .. } => {
                    assert_eq!(&info.name(), n, "{uri}")
                }
                _ => {}
            }
            let (_, fixed) = option_keys(uri, &loc).unwrap();
            for k in fixed {
                let mut o = o.clone();
                o.insert(k.to_string(), "x".into());
                let e = build(uri, &o).unwrap_err().to_string();
                assert!(e.contains("set by the URI"), "{uri} {k}: {e}");
            }
            let mut o = o.clone();
            o.insert("regoin".into(), "x".into());
            let e = build(uri, &o).unwrap_err().to_string();
            assert!(e.contains("unknown option \"regoin\""), "{e}");
        }
    }

    /// The options of every service that `is_secret_option` masks, exactly: a key that a
    /// new OpenDAL adds fails this until it is classified here.
    #[test]
    fn every_secret_option_of_each_service_is_masked() {
        let check = |service: &str, keys: BTreeSet<String>, secret: &[&str]| {
            let masked: Vec<&str> = keys
                .iter()
                .map(String::as_str)
                .filter(|k| is_secret_option(k))
                .collect();
            assert_eq!(masked, secret, "{service}: the options masked");
            let all: HashMap<String, String> = keys
                .iter()
                .map(|k| (k.clone(), "v4lue".to_string()))
                .collect();
            let logged = loggable(&all);
            for k in secret {
                assert!(logged.contains(&format!("{k}=***")), "{service}: {logged}");
            }
            let shown = curvine_common::mount::redacted(&all);
            for (k, v) in &shown {
                assert_eq!(v == "***", secret.contains(&k.as_str()), "{service} {k}");
            }
        };
        check(
            "s3",
            known_keys::<opendal_service_s3::S3Config>(),
            &[
                "secret_access_key",
                "server_side_encryption_customer_key",
                "session_token",
            ],
        );
        check("fs", known_keys::<opendal_service_fs::FsConfig>(), &[]);
        #[cfg(feature = "ufs-webhdfs")]
        check(
            "webhdfs",
            known_keys::<opendal_service_webhdfs::WebhdfsConfig>(),
            &["delegation"],
        );
        #[cfg(feature = "ufs-gcs")]
        check(
            "gcs",
            known_keys::<opendal_service_gcs::GcsConfig>(),
            // credential_path names a file, but a key file's path is masked too
            &["credential", "credential_path", "token"],
        );
        #[cfg(feature = "ufs-azblob")]
        check(
            "azblob",
            known_keys::<opendal_service_azblob::AzblobConfig>(),
            &["account_key", "encryption_key", "sas_token"],
        );
    }

    #[test]
    fn url_secrets_are_cut_from_messages() {
        let m = "Unexpected at stat, context: { url: http://nn:9870/webhdfs/v1/a?op=GETFILESTATUS&delegation=D3leg&user.name=u, service: webhdfs }";
        let c = without_url_secrets(m);
        assert!(!c.contains("D3leg"), "{c}");
        assert!(
            c.contains("?op=GETFILESTATUS&delegation=***&user.name=u, service"),
            "{c}"
        );
        let m = "url: https://a.blob.core.windows.net/c/k?sv=2021&sp=r&sig=Abc%2F%3D&se=x)";
        let c = without_url_secrets(m);
        assert_eq!(
            c,
            "url: https://a.blob.core.windows.net/c/k?sv=2021&sp=r&sig=***&se=x)"
        );
        assert_eq!(without_url_secrets("a & b ? c=d"), "a & b ? c=d");
        assert_eq!(without_url_secrets("x?token="), "x?token=***");
    }

    /// A failed request's error names its URL: the credentials that some services put
    /// there never reach the message.
    #[tokio::test]
    async fn store_errors_never_carry_url_credentials() {
        let mut cases: Vec<(&str, HashMap<String, String>, &str)> = Vec::new();
        if cfg!(feature = "ufs-webhdfs") {
            cases.push((
                "webhdfs://127.0.0.1:1/d",
                opts(&[("delegation", "D3legTok")]),
                "D3legTok",
            ));
        }
        if cfg!(feature = "ufs-azblob") {
            cases.push((
                "azblob://cnt/p",
                opts(&[
                    ("endpoint", "http://127.0.0.1:1/acct"),
                    ("sas_token", "sv=2021-08-06&sp=rl&sig=S1gnatur3"),
                ]),
                "S1gnatur3",
            ));
        }
        for (uri, o, secret) in cases {
            let op = build(uri, &o).unwrap();
            let e = op.stat("k").await.unwrap_err();
            let raw = e.to_string();
            let ours = store_err(uri, "k", &e).to_string();
            assert!(!ours.contains(secret), "{uri}: {ours}");
            assert!(ours.contains("127.0.0.1:1"), "{uri}: {ours}");
            // the test means something only if OpenDAL's own message has the URL
            assert!(raw.contains(secret), "{uri}: {raw}");
        }
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
