//! A real S3 server for tests: `s3s-fs` (installed by `bin/setup.sh`) on a free
//! 127.0.0.1 port over a temp dir, and a TCP proxy in front of it that counts the
//! bytes the store sends and can cut its connections (a store dying mid-transfer).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use curvine_common::{FsError, FsResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub const ACCESS_KEY: &str = "curvine-test-key";
pub const SECRET_KEY: &str = "curvine-test-secret";

/// OpenDAL's S3 options for the test server at `endpoint` (its keys, a fixed region).
pub fn options(endpoint: &str) -> std::collections::HashMap<String, String> {
    [
        ("endpoint", endpoint),
        ("region", "us-east-1"),
        ("access_key_id", ACCESS_KEY),
        ("secret_access_key", SECRET_KEY),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// `len` deterministic bytes for object `seed`, different for every seed.
pub fn object_data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The `s3s-fs` binary: `$S3S_FS`, else on the PATH, else in `~/.cargo/bin`.
pub fn s3s_fs_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("S3S_FS") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin"));
    std::env::split_paths(&path)
        .chain(home)
        .map(|d| d.join("s3s-fs"))
        .find(|p| p.is_file())
}

/// One s3s-fs process, under a shell that kills it once its standard input closes:
/// when this is dropped or killed, and when the test process ends without dropping it
/// (a server kept in a static), since the kernel closes the pipe then.
pub struct S3Server {
    child: Option<(Child, ChildStdin)>,
    pub addr: SocketAddr,
    root: tempfile::TempDir,
}

/// A port of 127.0.0.1 that nothing listens on now.
pub async fn free_port() -> FsResult<u16> {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| FsError::io_ctx("bind a free port", e))?;
    Ok(l.local_addr()
        .map_err(|e| FsError::io_ctx("port", e))?
        .port())
}

/// Wait until something accepts connections on `addr`.
pub async fn wait_listening(addr: SocketAddr, timeout: Duration) -> FsResult<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(FsError::Timeout {
                message: format!("nothing listening on {addr} within {timeout:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl S3Server {
    /// Start s3s-fs with buckets `buckets` on a free port; ready when this returns.
    pub async fn start(buckets: &[&str]) -> FsResult<S3Server> {
        let root = tempfile::Builder::new()
            .prefix("curvine-s3-")
            .tempdir()
            .map_err(|e| FsError::io_ctx("s3 root dir", e))?;
        for b in buckets {
            std::fs::create_dir_all(root.path().join(b))
                .map_err(|e| FsError::io_ctx("create bucket dir", e))?;
        }
        let port = free_port().await?;
        let mut s = S3Server {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            root,
        };
        s.restart().await?;
        Ok(s)
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Kill the server (its data stays in the root dir).
    pub fn kill(&mut self) {
        if let Some((mut c, stdin)) = self.child.take() {
            drop(stdin); // the shell kills s3s-fs with SIGKILL and waits for it
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and root.
    pub async fn restart(&mut self) -> FsResult<()> {
        self.kill();
        let bin = s3s_fs_binary().ok_or_else(|| {
            FsError::config("s3s-fs not found: run bin/setup.sh (cargo install s3s-fs)")
        })?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#""$0" "$@" </dev/null & s3=$!; read -r _ || true; kill -9 "$s3"; wait "$s3""#)
            .arg(bin)
            .arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.addr.port().to_string())
            .arg("--access-key")
            .arg(ACCESS_KEY)
            .arg("--secret-key")
            .arg(SECRET_KEY)
            .arg(self.root.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| FsError::io_ctx("start s3s-fs", e))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| FsError::internal("s3s-fs shell without a stdin pipe"))?;
        self.child = Some((child, stdin));
        wait_listening(self.addr, Duration::from_secs(20)).await
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP proxy that counts the bytes coming back from its target, and cuts every
/// connection once they pass `limit` (set it to fail transfers midway).
pub struct Proxy {
    pub addr: SocketAddr,
    stats: Arc<ProxyStats>,
    cancel: CancellationToken,
}

#[derive(Default)]
struct ProxyStats {
    /// Bytes sent back by the target.
    received: AtomicU64,
    /// Cut connections once `received` passes this.
    limit: AtomicU64,
    cut: AtomicBool,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> FsResult<Proxy> {
        let l = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| FsError::io_ctx("bind proxy", e))?;
        let addr = l
            .local_addr()
            .map_err(|e| FsError::io_ctx("proxy addr", e))?;
        let stats = Arc::new(ProxyStats {
            limit: AtomicU64::new(u64::MAX),
            ..Default::default()
        });
        let cancel = CancellationToken::new();
        let (st, c) = (stats.clone(), cancel.clone());
        tokio::spawn(async move {
            loop {
                let (down, _) = tokio::select! {
                    _ = c.cancelled() => return,
                    r = l.accept() => match r { Ok(v) => v, Err(_) => continue },
                };
                let (st, c) = (st.clone(), c.clone());
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = c.cancelled() => {}
                        _ = pipe(down, up, st) => {}
                    }
                });
            }
        });
        Ok(Proxy {
            addr,
            stats,
            cancel,
        })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Bytes the target has sent back so far.
    pub fn received(&self) -> u64 {
        self.stats.received.load(Ordering::SeqCst)
    }

    /// Cut every connection once `more` further bytes came back (`None`: never).
    pub fn cut_after(&self, more: Option<u64>) {
        let limit = more.map_or(u64::MAX, |m| self.received().saturating_add(m));
        self.stats.cut.store(false, Ordering::SeqCst);
        self.stats.limit.store(limit, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn pipe(down: TcpStream, up: TcpStream, st: Arc<ProxyStats>) {
    let (mut dr, mut dw) = down.into_split();
    let (mut ur, mut uw) = up.into_split();
    let to_up = async {
        let mut b = vec![0u8; 64 << 10];
        loop {
            match dr.read(&mut b).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if uw.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = uw.shutdown().await;
    };
    let to_down = async {
        let mut b = vec![0u8; 64 << 10];
        loop {
            let n = match ur.read(&mut b).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let before = st.received.fetch_add(n as u64, Ordering::SeqCst);
            let limit = st.limit.load(Ordering::SeqCst);
            if before.saturating_add(n as u64) > limit || st.cut.load(Ordering::SeqCst) {
                st.cut.store(true, Ordering::SeqCst);
                let keep = limit.saturating_sub(before).min(n as u64) as usize;
                let _ = dw.write_all(&b[..keep]).await;
                break;
            }
            if dw.write_all(&b[..n]).await.is_err() {
                break;
            }
        }
        let _ = dw.shutdown().await;
    };
    // the connection ends with the target's side (its end, or a cut)
    let requests = async {
        to_up.await;
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = requests => {}
        _ = to_down => {}
    }
}
