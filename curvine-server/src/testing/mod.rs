//! MiniCluster: a master and N workers in this process, on ephemeral 127.0.0.1 ports and
//! temp dirs, for integration tests. `start()` returns once every worker is registered;
//! nodes can be stopped and restarted (same ports, same dirs) for fault tests.
//! `ha::HaCluster`: replicated masters.

#[cfg(feature = "ufs-azblob")]
pub mod azurite;
pub mod ha;
pub mod http;
pub mod s3;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::proto::{ReportRequest, ReportResponse};
use curvine_common::{ClusterConf, FsError, FsResult};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Poll `cond` until it returns true or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, mut cond: F) -> FsResult<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(FsError::Timeout {
                message: format!("condition not met within {timeout:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One tier of every worker: tier name as in `data_dir` (`MEM`, `SSD`, `HDD`) and capacity.
#[derive(Clone, Debug)]
pub struct TierSpec {
    pub tier: &'static str,
    pub capacity: u64,
    /// Put the tier on tmpfs (/dev/shm) when available.
    pub tmpfs: bool,
}

type ConfHook = Box<dyn Fn(&mut ClusterConf) + Send + Sync>;

pub struct MiniClusterBuilder {
    workers: usize,
    tiers: Vec<TierSpec>,
    hook: Option<ConfHook>,
}

impl MiniClusterBuilder {
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Replace the default tiers (MEM 512MB on tmpfs, SSD 1GB on disk).
    pub fn tiers(mut self, tiers: Vec<TierSpec>) -> Self {
        self.tiers = tiers;
        self
    }

    /// Adjust the configuration every node and client of this cluster uses.
    pub fn conf(mut self, f: impl Fn(&mut ClusterConf) + Send + Sync + 'static) -> Self {
        self.hook = Some(Box::new(f));
        self
    }

    pub async fn start(self) -> FsResult<MiniCluster> {
        // A cluster shared through a static is never dropped, so its dirs outlive the
        // test process; each name carries the pid, and dirs of dead processes go here.
        let prefix = format!("curvine-mini-{}-", std::process::id());
        let shm = PathBuf::from("/dev/shm");
        sweep_dead_dirs(&std::env::temp_dir());
        let base = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir()
            .map_err(|e| FsError::io_ctx("create MiniCluster dir", e))?;
        let shm_base = if shm.is_dir() {
            sweep_dead_dirs(&shm);
            Some(
                tempfile::Builder::new()
                    .prefix(&prefix)
                    .tempdir_in(&shm)
                    .map_err(|e| FsError::io_ctx("create MiniCluster tmpfs dir", e))?,
            )
        } else {
            None
        };
        let mut conf = ClusterConf::default();
        conf.master.hostname = "127.0.0.1".into();
        conf.master.meta_dir = base.path().join("meta");
        conf.master.block_size = curvine_common::conf::ByteSize(8 << 20);
        conf.master.worker_lost_timeout = curvine_common::conf::Dur(Duration::from_secs(3));
        conf.master.lease_timeout = curvine_common::conf::Dur(Duration::from_secs(5));
        conf.worker.hostname = "127.0.0.1".into();
        conf.worker.heartbeat_interval = curvine_common::conf::Dur(Duration::from_millis(200));
        conf.client.hostname = "127.0.0.1".into();
        conf.client.rpc_timeout = curvine_common::conf::Dur(Duration::from_secs(10));
        conf.client.connect_timeout = curvine_common::conf::Dur(Duration::from_secs(2));
        conf.log.level = "warn".into();
        // as the shipped conf does: clients here reach the master over its Unix socket
        conf.master.local_socket = base.path().join("master.sock");
        if let Some(h) = &self.hook {
            h(&mut conf);
        }
        let master_listener = bind("127.0.0.1:0").await?;
        let master_addr = local_addr(&master_listener)?;
        conf.master.rpc_port = master_addr.port();
        let master_web_listener = bind("127.0.0.1:0").await?;
        let master_web = local_addr(&master_web_listener)?;
        conf.master.web_port = master_web.port();
        conf.client.master_addrs = vec![master_addr.to_string()];

        let mut cluster = MiniCluster {
            conf,
            tiers: self.tiers,
            master: None,
            master_addr,
            master_web,
            workers: Vec::new(),
            _shm_base: shm_base,
            _base: base,
        };
        cluster.spawn_master(master_listener, master_web_listener);
        for i in 0..self.workers {
            let listener = bind("127.0.0.1:0").await?;
            let addr = local_addr(&listener)?;
            let web_listener = bind("127.0.0.1:0").await?;
            let web = local_addr(&web_listener)?;
            cluster.workers.push(WorkerSlot {
                addr,
                web,
                node: None,
                dirs: cluster.worker_tier_dirs(i)?,
            });
            cluster.spawn_worker(i, listener, web_listener)?;
        }
        cluster.wait_workers_live(self.workers).await?;
        Ok(cluster)
    }
}

struct Node {
    cancel: CancellationToken,
    task: JoinHandle<FsResult<()>>,
}

impl Node {
    async fn stop(self) -> FsResult<()> {
        self.cancel.cancel();
        match tokio::time::timeout(Duration::from_secs(30), self.task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(FsError::internal(format!("node task failed: {e}"))),
            Err(_) => Err(FsError::Timeout {
                message: "node did not stop within 30s".into(),
            }),
        }
    }
}

struct WorkerSlot {
    addr: SocketAddr,
    /// `/metrics` and the probes.
    web: SocketAddr,
    node: Option<Node>,
    dirs: Vec<(String, PathBuf)>,
}

pub struct MiniCluster {
    conf: ClusterConf,
    tiers: Vec<TierSpec>,
    master: Option<Node>,
    master_addr: SocketAddr,
    /// The console, `/api`, `/metrics` and the probes.
    master_web: SocketAddr,
    workers: Vec<WorkerSlot>,
    // Dropped last: removes every node's files.
    _shm_base: Option<tempfile::TempDir>,
    _base: tempfile::TempDir,
}

impl MiniCluster {
    pub fn builder() -> MiniClusterBuilder {
        MiniClusterBuilder {
            workers: 1,
            tiers: vec![
                TierSpec {
                    tier: "MEM",
                    capacity: 512 << 20,
                    tmpfs: true,
                },
                TierSpec {
                    tier: "SSD",
                    capacity: 1 << 30,
                    tmpfs: false,
                },
            ],
            hook: None,
        }
    }

    /// Configuration for clients of this cluster (also what the nodes run with).
    pub fn client_conf(&self) -> ClusterConf {
        self.conf.clone()
    }

    pub fn master_addr(&self) -> SocketAddr {
        self.master_addr
    }

    pub fn worker_addr(&self, i: usize) -> SocketAddr {
        self.workers[i].addr
    }

    /// The master's web port (console, `/api`, `/metrics`, `/healthz`, `/readyz`).
    pub fn master_web_addr(&self) -> SocketAddr {
        self.master_web
    }

    /// Worker `i`'s web port (`/metrics`, `/healthz`, `/readyz`).
    pub fn worker_web_addr(&self, i: usize) -> SocketAddr {
        self.workers[i].web
    }

    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// The tier directories of worker `i` as `(data_dir entry, path)`.
    pub fn worker_dirs(&self, i: usize) -> Vec<PathBuf> {
        self.workers[i]
            .dirs
            .iter()
            .map(|(_, p)| p.clone())
            .collect()
    }

    fn worker_tier_dirs(&self, i: usize) -> FsResult<Vec<(String, PathBuf)>> {
        let mut out = Vec::new();
        for t in &self.tiers {
            let root = match (&self._shm_base, t.tmpfs) {
                (Some(shm), true) => shm.path().to_path_buf(),
                _ => self._base.path().to_path_buf(),
            };
            let path = root.join(format!("worker{i}-{}", t.tier.to_ascii_lowercase()));
            std::fs::create_dir_all(&path).map_err(|e| FsError::io_ctx(path.display(), e))?;
            let entry = format!("[{}:{}]{}", t.tier, t.capacity, path.display());
            out.push((entry, path));
        }
        Ok(out)
    }

    fn spawn_master(&mut self, listener: TcpListener, web: TcpListener) {
        let cancel = CancellationToken::new();
        let conf = self.conf.clone();
        let task = tokio::spawn(crate::master::run_with_web(
            conf,
            listener,
            Some(web),
            cancel.clone(),
        ));
        self.master = Some(Node { cancel, task });
    }

    fn spawn_worker(&mut self, i: usize, listener: TcpListener, web: TcpListener) -> FsResult<()> {
        let mut conf = self.conf.clone();
        conf.worker.data_dir = self.workers[i]
            .dirs
            .iter()
            .map(|(e, _)| e.clone())
            .collect();
        conf.worker.data_port = self.workers[i].addr.port();
        conf.worker.web_port = self.workers[i].web.port();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(crate::worker::run_with_web(
            conf,
            listener,
            Some(web),
            cancel.clone(),
        ));
        self.workers[i].node = Some(Node { cancel, task });
        Ok(())
    }

    /// Stop the master (graceful: in-flight calls end, RocksDB is closed).
    pub async fn stop_master(&mut self) -> FsResult<()> {
        match self.master.take() {
            Some(n) => n.stop().await,
            None => Ok(()),
        }
    }

    /// Start the master again on the same port and metadata directory.
    pub async fn start_master(&mut self) -> FsResult<()> {
        if self.master.is_some() {
            return Ok(());
        }
        let listener = bind(&self.master_addr.to_string()).await?;
        let web = bind(&self.master_web.to_string()).await?;
        self.spawn_master(listener, web);
        Ok(())
    }

    pub async fn restart_master(&mut self) -> FsResult<()> {
        self.stop_master().await?;
        self.start_master().await?;
        let n = self.workers.iter().filter(|w| w.node.is_some()).count();
        self.wait_workers_live(n).await
    }

    pub async fn stop_worker(&mut self, i: usize) -> FsResult<()> {
        match self.workers[i].node.take() {
            Some(n) => n.stop().await,
            None => Ok(()),
        }
    }

    /// Start worker `i` again on the same port and directories.
    pub async fn start_worker(&mut self, i: usize) -> FsResult<()> {
        if self.workers[i].node.is_some() {
            return Ok(());
        }
        let listener = bind(&self.workers[i].addr.to_string()).await?;
        let web = bind(&self.workers[i].web.to_string()).await?;
        self.spawn_worker(i, listener, web)
    }

    pub async fn restart_worker(&mut self, i: usize) -> FsResult<()> {
        self.stop_worker(i).await?;
        self.start_worker(i).await?;
        let n = self.workers.iter().filter(|w| w.node.is_some()).count();
        self.wait_workers_live(n).await
    }

    /// The master's report (capacity, workers and their tiers).
    pub async fn report(&self) -> FsResult<ReportResponse> {
        let mut client = MasterServiceClient::connect(format!("http://{}", self.master_addr))
            .await
            .map_err(FsError::from)?;
        let mut req = tonic::Request::new(ReportRequest {});
        let token = &self.conf.cluster.auth_token;
        if !token.is_empty() {
            let v = token
                .parse()
                .map_err(|_| FsError::config("cluster.auth_token is not ASCII"))?;
            req.metadata_mut()
                .insert(crate::master::auth::AUTH_METADATA_KEY, v);
        }
        Ok(client.report(req).await?.into_inner())
    }

    pub async fn live_workers(&self) -> usize {
        match self.report().await {
            Ok(r) => r.workers.iter().filter(|w| w.alive).count(),
            Err(_) => 0,
        }
    }

    /// Wait until `n` workers are registered and alive.
    pub async fn wait_workers_live(&self, n: usize) -> FsResult<()> {
        wait_until(Duration::from_secs(30), || async move {
            self.live_workers().await >= n
        })
        .await
    }

    /// Stop every node and remove the cluster's files.
    pub async fn shutdown(mut self) -> FsResult<()> {
        let mut first_err = None;
        for i in 0..self.workers.len() {
            if let Err(e) = self.stop_worker(i).await {
                first_err.get_or_insert(e);
            }
        }
        if let Err(e) = self.stop_master().await {
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for MiniCluster {
    fn drop(&mut self) {
        if let Some(m) = &self.master {
            m.cancel.cancel();
        }
        for w in &self.workers {
            if let Some(n) = &w.node {
                n.cancel.cancel();
            }
        }
    }
}

async fn bind(addr: &str) -> FsResult<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| FsError::io_ctx(format!("bind {addr}"), e))
}

fn local_addr(l: &TcpListener) -> FsResult<SocketAddr> {
    l.local_addr().map_err(|e| FsError::io_ctx("local_addr", e))
}

/// Remove `curvine-mini-<pid>-*` dirs under `dir` whose process is gone.
fn sweep_dead_dirs(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("curvine-mini-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            if let Err(err) = std::fs::remove_dir_all(e.path()) {
                tracing::debug!(path = %e.path().display(), error = %err, "stale MiniCluster dir");
            }
        }
    }
}
