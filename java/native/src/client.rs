//! One `CurvineFs` and one tokio runtime per cluster (per distinct configuration) per
//! JVM, shared by every `FileSystem` instance and thread. `FileSystem` instances hold
//! handles to it; the client itself stays for the life of the JVM.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, Once};
use std::time::Duration;

use curvine_client::proto::master_service_client::MasterServiceClient;
use curvine_client::proto::{LocatedBlock, OpenRequest};
use curvine_client::{CurvineFs, AUTH_METADATA_KEY};
use curvine_common::path::normalize;
use curvine_common::{ClusterConf, FsError, FsResult};
use tokio::runtime::Runtime;
use tonic::transport::{Channel, Endpoint};
use tracing::info;

use crate::handles::Table;

pub struct Client {
    rt: Runtime,
    fs: CurvineFs,
    /// A second channel for the one call `CurvineFs` does not expose (block locations).
    locator: tokio::sync::Mutex<Option<MasterServiceClient<Channel>>>,
}

/// Clients by the canonical text of their configuration.
static CLIENTS: LazyLock<Mutex<HashMap<String, Arc<Client>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
/// One handle per Java `FileSystem` instance.
pub static FS_HANDLES: LazyLock<Table<Arc<Client>>> = LazyLock::new(Table::new);

static LOG_INIT: Once = Once::new();

/// Log to standard error at `warn` unless `CURVINE_LOG` (a tracing filter) says otherwise.
fn init_logging() {
    LOG_INIT.call_once(|| {
        let filter = std::env::var("CURVINE_LOG").unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    });
}

impl Client {
    /// The shared client for `conf` (identified by `key`), connecting on first use. A
    /// master that cannot be reached fails within `client.connect_timeout` per address.
    pub fn get_or_connect(conf: ClusterConf, key: &str) -> FsResult<Arc<Client>> {
        init_logging();
        let mut clients = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(key) {
            return Ok(c.clone());
        }
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("curvine-jni")
            .enable_all()
            .build()
            .map_err(|e| FsError::io(format!("start the client runtime: {e}")))?;
        let addrs = conf.client.master_addrs.join(",");
        match rt.block_on(CurvineFs::connect(conf)) {
            Ok(fs) => {
                info!(masters = %addrs, "curvine client connected");
                let c = Arc::new(Client {
                    rt,
                    fs,
                    locator: tokio::sync::Mutex::new(None),
                });
                clients.insert(key.to_string(), c.clone());
                Ok(c)
            }
            Err(e) => {
                rt.shutdown_background();
                Err(e)
            }
        }
    }

    /// Number of distinct cluster clients in this JVM.
    pub fn count() -> usize {
        CLIENTS.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn fs(&self) -> &CurvineFs {
        &self.fs
    }

    /// Run `f` to completion on the calling (Java) thread; the runtime's threads drive I/O.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    async fn locator(&self) -> FsResult<MasterServiceClient<Channel>> {
        let mut guard = self.locator.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let conf = &self.fs.conf().client;
        let mut last = FsError::config("client.master_addrs is empty");
        for addr in &conf.master_addrs {
            let ep = Endpoint::from_shared(format!("http://{addr}"))
                .map_err(|e| FsError::config(format!("bad master address {addr:?}: {e}")))?
                .connect_timeout(conf.connect_timeout.get())
                .timeout(conf.rpc_timeout.get())
                .tcp_nodelay(true);
            match tokio::time::timeout(conf.connect_timeout.get(), ep.connect()).await {
                Ok(Ok(ch)) => {
                    let c = MasterServiceClient::new(ch);
                    *guard = Some(c.clone());
                    return Ok(c);
                }
                Ok(Err(e)) => last = FsError::from(e),
                Err(_) => {
                    last = FsError::Timeout {
                        message: format!("connect to master {addr}"),
                    }
                }
            }
        }
        Err(last)
    }

    /// Block locations of a file (the master's `open` reply), for data locality.
    pub async fn block_locations(&self, path: &str) -> FsResult<Vec<LocatedBlock>> {
        let path = normalize(path)?;
        let mut c = self.locator().await?;
        let mut req = tonic::Request::new(OpenRequest {
            path,
            caller: Some(self.fs.caller_info()),
        });
        let token = &self.fs.conf().cluster.auth_token;
        if !token.is_empty() {
            let v = token
                .parse()
                .map_err(|_| FsError::config("cluster.auth_token must be printable ASCII"))?;
            req.metadata_mut().insert(AUTH_METADATA_KEY, v);
            let bearer = format!("Bearer {token}")
                .parse()
                .map_err(|_| FsError::config("cluster.auth_token must be printable ASCII"))?;
            req.metadata_mut().insert("authorization", bearer);
        }
        req.set_timeout(self.fs.conf().client.rpc_timeout.get() + Duration::from_millis(0));
        let r = c.open(req).await.map_err(FsError::from)?;
        Ok(r.into_inner().blocks)
    }
}
