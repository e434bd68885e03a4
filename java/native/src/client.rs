//! One `CurvineFs` and one tokio runtime per cluster (per distinct configuration) per
//! JVM, shared by every `FileSystem` instance and thread. `FileSystem` instances hold
//! handles to it; the client itself stays for the life of the JVM.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, Once};

use curvine_client::proto::LocatedBlock;
use curvine_client::CurvineFs;
use curvine_common::{ClusterConf, FsError, FsResult};
use tokio::runtime::Runtime;
use tracing::info;

use crate::handles::Table;

pub struct Client {
    rt: Arc<Runtime>,
    fs: CurvineFs,
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
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
                    rt: Arc::new(rt),
                    fs,
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

    /// The same client (connection and runtime) acting as `uid`/`gid` with
    /// supplementary `groups`: a `FileSystem` of another Hadoop user.
    pub fn acting_as(&self, uid: u32, gid: u32, groups: &[u32]) -> Arc<Client> {
        Arc::new(Client {
            rt: self.rt.clone(),
            fs: self.fs.with_groups(uid, gid, groups),
        })
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

    /// Block locations of a file (the master's `open` reply), for data locality.
    pub async fn block_locations(&self, path: &str) -> FsResult<Vec<LocatedBlock>> {
        self.fs.block_locations(path).await
    }
}
