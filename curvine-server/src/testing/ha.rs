//! A group of replicated masters (`master.peers`) in this process, on ephemeral
//! 127.0.0.1 ports and temp dirs: for tests of replication and failover. Masters can
//! be stopped and started again with their data, or with an empty data directory in
//! place of theirs; a master can be started that joins the group (`add_master`), and
//! workers that report to the leader (`start_workers`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use curvine_common::conf::Dur;
use curvine_common::{ClusterConf, FsError, FsResult};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{bind, local_addr, Node};

pub struct HaCluster {
    confs: Vec<ClusterConf>,
    masters: Vec<Option<Node>>,
    addrs: Vec<SocketAddr>,
    workers: Vec<Option<Node>>,
    worker_addrs: Vec<SocketAddr>,
    _base: tempfile::TempDir,
}

impl HaCluster {
    /// Start `n` masters with ids 1..=n and return once they are serving (a leader may
    /// not be elected yet).
    pub async fn start(n: usize) -> FsResult<HaCluster> {
        Self::start_with(n, |_| {}).await
    }

    /// [`start`](Self::start), with `tune` applied to every master's configuration
    /// (and the clients').
    pub async fn start_with(n: usize, tune: impl Fn(&mut ClusterConf)) -> FsResult<HaCluster> {
        let base = tempfile::Builder::new()
            .prefix(&format!("curvine-mini-{}-", std::process::id()))
            .tempdir()
            .map_err(|e| FsError::io_ctx("create HaCluster dir", e))?;
        let mut listeners = Vec::new();
        for _ in 0..n {
            listeners.push(bind("127.0.0.1:0").await?);
        }
        let addrs = listeners
            .iter()
            .map(local_addr)
            .collect::<FsResult<Vec<_>>>()?;
        let peers: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect();
        let mut confs = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let mut c = ClusterConf::default();
            c.master.hostname = "127.0.0.1".into();
            c.master.rpc_port = a.port();
            c.master.web_port = 0;
            c.master.meta_dir = base.path().join(format!("meta{}", i + 1));
            c.master.node_id = i as u64 + 1;
            c.master.peers = peers.clone();
            c.master.election_timeout = Dur(Duration::from_millis(500));
            c.master.heartbeat_interval = Dur(Duration::from_millis(100));
            c.master.block_size = curvine_common::conf::ByteSize(8 << 20);
            c.client.hostname = "127.0.0.1".into();
            c.client.master_addrs = addrs.iter().map(|a| a.to_string()).collect();
            c.client.rpc_timeout = Dur(Duration::from_secs(10));
            c.client.connect_timeout = Dur(Duration::from_secs(1));
            c.log.level = "warn".into();
            // the group's cluster id is made of its name: one per HaCluster, so masters
            // of two clusters in one test process never take each other's calls
            c.cluster.name = base
                .path()
                .file_name()
                .map_or("ha".into(), |n| n.to_string_lossy().into_owned());
            tune(&mut c);
            confs.push(c);
        }
        let mut cluster = HaCluster {
            confs,
            masters: (0..n).map(|_| None).collect(),
            addrs,
            workers: Vec::new(),
            worker_addrs: Vec::new(),
            _base: base,
        };
        for (i, l) in listeners.into_iter().enumerate() {
            cluster.spawn(i, l);
        }
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize, listener: TcpListener) {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(crate::master::run(
            self.confs[i].clone(),
            listener,
            cancel.clone(),
        ));
        self.masters[i] = Some(Node { cancel, task });
    }

    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        self.addrs[i]
    }

    /// Client configuration naming every master.
    pub fn client_conf(&self) -> ClusterConf {
        self.confs[0].clone()
    }

    /// Client configuration naming master `i` alone, with one attempt per call: to
    /// read what that master has applied (`client.read_from_followers`), or to see it
    /// refuse a mutation.
    pub fn conf_of(&self, i: usize) -> ClusterConf {
        let mut c = self.confs[i].clone();
        c.client.master_addrs = vec![self.addrs[i].to_string()];
        c.client.rpc_retries = 1;
        c.client.read_from_followers = true;
        c
    }

    /// Stop master `i` (its calls end, RocksDB is closed; its data stays).
    pub async fn stop(&mut self, i: usize) -> FsResult<()> {
        match self.masters[i].take() {
            Some(n) => n.stop().await,
            None => Ok(()),
        }
    }

    /// Start master `i` again on its port with its data.
    pub async fn start_again(&mut self, i: usize) -> FsResult<()> {
        if self.masters[i].is_none() {
            let l = bind(&self.addrs[i].to_string()).await?;
            self.spawn(i, l);
        }
        Ok(())
    }

    /// Master `i`'s data directory.
    pub fn meta_dir(&self, i: usize) -> PathBuf {
        self.confs[i].master.meta_dir.clone()
    }

    /// Replace stopped master `i`'s data directory with an empty one: started again,
    /// it is a new master of the group.
    pub fn wipe(&mut self, i: usize) -> FsResult<()> {
        if self.running(i) {
            return Err(FsError::invalid("stop the master before wiping its data"));
        }
        let dir = self.meta_dir(i);
        std::fs::remove_dir_all(&dir)
            .map_err(|e| FsError::io_ctx(format!("remove {}", dir.display()), e))?;
        std::fs::create_dir_all(&dir)
            .map_err(|e| FsError::io_ctx(format!("create {}", dir.display()), e))
    }

    /// What stopped master `i`'s data directory holds of the replication.
    pub fn stored_raft(&self, i: usize) -> FsResult<crate::master::StoredRaft> {
        if self.running(i) {
            return Err(FsError::invalid("stop the master before reading its data"));
        }
        crate::master::stored_raft(&self.meta_dir(i))
    }

    pub fn running(&self, i: usize) -> bool {
        self.masters[i].is_some()
    }

    /// Start a master with the next id that is not among the group's `peers`: it joins
    /// the group once added (`add_master` of the client). Returns its index.
    pub async fn add_master(&mut self) -> FsResult<usize> {
        let l = bind("127.0.0.1:0").await?;
        let a = local_addr(&l)?;
        let i = self.addrs.len();
        let mut c = self.confs[0].clone();
        c.master.rpc_port = a.port();
        c.master.meta_dir = self._base.path().join(format!("meta{}", i + 1));
        c.master.node_id = i as u64 + 1;
        self.confs.push(c);
        self.addrs.push(a);
        self.masters.push(None);
        self.spawn(i, l);
        Ok(i)
    }

    /// Start `n` workers (one MEM tier each) that report to the leader among the
    /// group's masters.
    pub async fn start_workers(&mut self, n: usize) -> FsResult<()> {
        self.start_workers_with(n, |_| {}).await
    }

    /// [`start_workers`](Self::start_workers), with `tune` applied to each worker's
    /// configuration.
    pub async fn start_workers_with(
        &mut self,
        n: usize,
        tune: impl Fn(&mut ClusterConf),
    ) -> FsResult<()> {
        for _ in 0..n {
            let i = self.workers.len();
            let dir = self._base.path().join(format!("worker{i}"));
            std::fs::create_dir_all(&dir).map_err(|e| FsError::io_ctx(dir.display(), e))?;
            let l = bind("127.0.0.1:0").await?;
            let a = local_addr(&l)?;
            let mut c = self.confs[0].clone();
            c.worker.hostname = "127.0.0.1".into();
            c.worker.data_port = a.port();
            c.worker.web_port = 0;
            c.worker.data_dir = vec![format!("[MEM:256MB]{}", dir.display())];
            c.worker.heartbeat_interval = Dur(Duration::from_millis(200));
            tune(&mut c);
            let cancel = CancellationToken::new();
            let task = tokio::spawn(crate::worker::run_with_web(c, l, None, cancel.clone()));
            self.workers.push(Some(Node { cancel, task }));
            self.worker_addrs.push(a);
        }
        Ok(())
    }

    /// Worker `i`'s data address (the scope of its fault points).
    pub fn worker_addr(&self, i: usize) -> SocketAddr {
        self.worker_addrs[i]
    }

    /// Stop every master and worker.
    pub async fn shutdown(mut self) -> FsResult<()> {
        let mut first = None;
        for w in self.workers.iter_mut() {
            if let Some(n) = w.take() {
                if let Err(e) = n.stop().await {
                    first.get_or_insert(e);
                }
            }
        }
        for i in 0..self.masters.len() {
            if let Err(e) = self.stop(i).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        for n in self.masters.iter().chain(&self.workers).flatten() {
            n.cancel.cancel();
        }
    }
}
