//! A real Azure Blob server for tests: Azurite's blob service (npm; `bin/setup.sh`
//! installs it into `curvine-server/tests/azurite/`) on a free 127.0.0.1 port over a
//! temp dir, with its well-known development account. Telemetry off: it sends nothing
//! anywhere.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use curvine_common::{FsError, FsResult};

use super::http;
use super::s3::{free_port, wait_listening};

/// Azurite's development account and its key (public, documented by Azure).
pub const ACCOUNT: &str = "devstoreaccount1";
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// OpenDAL's azblob options for the server at `endpoint` (`Azurite::endpoint`).
pub fn options(endpoint: &str) -> std::collections::HashMap<String, String> {
    [
        ("endpoint", endpoint),
        ("account_name", ACCOUNT),
        ("account_key", ACCOUNT_KEY),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The `azurite-blob` script: `$AZURITE_BLOB`, else the one `bin/setup.sh` installs
/// beside these tests, else on the PATH.
pub fn azurite_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AZURITE_BLOB") {
        return Some(PathBuf::from(p));
    }
    let beside = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/azurite/node_modules/.bin/azurite-blob");
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::iter::once(beside)
        .chain(std::env::split_paths(&path).map(|d| d.join("azurite-blob")))
        .find(|p| p.is_file())
}

/// One Azurite blob process, under a shell that kills it once its standard input
/// closes (when this is dropped, or the test process ends).
pub struct Azurite {
    child: Option<(Child, ChildStdin)>,
    pub addr: SocketAddr,
    _root: tempfile::TempDir,
}

impl Azurite {
    /// Start Azurite with containers `containers`; ready when this returns.
    pub async fn start(containers: &[&str]) -> FsResult<Azurite> {
        let bin = azurite_binary().ok_or_else(|| {
            FsError::config(
                "azurite-blob not found: run SETUP_TEST_TOOLS=1 bin/setup.sh (npm ci in \
                 curvine-server/tests/azurite)",
            )
        })?;
        let root = tempfile::Builder::new()
            .prefix("curvine-azurite-")
            .tempdir()
            .map_err(|e| FsError::io_ctx("azurite dir", e))?;
        let port = free_port().await?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#""$0" "$@" </dev/null & p=$!; read -r _ || true; kill -9 "$p"; wait "$p""#)
            .arg(bin)
            .args(["--blobHost", "127.0.0.1", "--blobPort"])
            .arg(port.to_string())
            .arg("--location")
            .arg(root.path())
            .args(["--silent", "--disableTelemetry", "--skipApiVersionCheck"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| FsError::io_ctx("start azurite", e))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| FsError::internal("azurite shell without a stdin pipe"))?;
        let a = Azurite {
            child: Some((child, stdin)),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            _root: root,
        };
        wait_listening(a.addr, Duration::from_secs(60)).await?;
        for c in containers {
            a.create_container(c).await?;
        }
        Ok(a)
    }

    /// The account's endpoint, path style: `http://127.0.0.1:PORT/devstoreaccount1`.
    pub fn endpoint(&self) -> String {
        format!("http://{}/{ACCOUNT}", self.addr)
    }

    /// Create container `name` (OpenDAL has no call for it): one request signed with
    /// the account's shared key.
    pub async fn create_container(&self, name: &str) -> FsResult<()> {
        let date = reqsign_core::time::Timestamp::now().format_http_date();
        let version = "2021-08-06";
        let path = format!("/{ACCOUNT}/{name}");
        // verb, 11 standard headers (all empty here), canonical x-ms- headers, resource
        let to_sign = format!(
            "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{ACCOUNT}{path}\nrestype:container"
        );
        let key = reqsign_core::hash::base64_decode(ACCOUNT_KEY)
            .map_err(|e| FsError::internal(format!("azurite key: {e}")))?;
        let sig = reqsign_core::hash::base64_hmac_sha256(&key, to_sign.as_bytes());
        let headers = [
            format!("x-ms-date: {date}"),
            format!("x-ms-version: {version}"),
            format!("Authorization: SharedKey {ACCOUNT}:{sig}"),
            "Content-Length: 0".to_string(),
        ];
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let r = http::request(
            self.addr,
            "PUT",
            &format!("{path}?restype=container"),
            &headers,
            b"",
        )
        .await?;
        if r.status != 201 {
            return Err(FsError::internal(format!(
                "create container {name}: HTTP {}: {}",
                r.status, r.body
            )));
        }
        Ok(())
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        if let Some((mut c, stdin)) = self.child.take() {
            drop(stdin);
            let _ = c.wait();
        }
    }
}
