//! Worker tests: the block store and the data plane on tempdir tiers, and registration /
//! heartbeats against a fake master. Helpers here speak the data-plane protocol.

mod background;
mod data_plane;
mod heartbeat;
mod perf;
mod store;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use curvine_common::checksum::{chunk_crcs, verify_chunks};
use curvine_common::frame::{check_error, header, read_frame, write_frame};
use curvine_common::proto::{DataHeader, DataOp, StorageTier};
use curvine_common::tasks::{Task, Tasks};
use curvine_common::{ClusterConf, FsError, FsResult};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::block_store::BlockStore;
use super::data_server::{serve, DataCtx};

pub const CS: usize = 4096;

/// A configuration with the given tier specs (`"MEM:64KB"`) under `root`.
pub fn conf_with(root: &Path, tiers: &[&str]) -> ClusterConf {
    let mut conf = ClusterConf::default();
    conf.worker.data_dir = tiers
        .iter()
        .enumerate()
        .map(|(i, t)| format!("[{t}]{}/t{i}", root.display()))
        .collect();
    conf.worker.chunk_size = curvine_common::conf::ByteSize(CS as u64);
    conf.master.block_size = curvine_common::conf::ByteSize(64 << 10);
    conf
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub store: Arc<BlockStore>,
    tasks: Tasks,
    /// The accept loop's task (its state shows the connection limit).
    pub task: Task,
}

impl TestServer {
    pub async fn start(conf: &ClusterConf) -> TestServer {
        Self::start_with_chunk(conf, CS as u32).await
    }

    pub async fn start_with_chunk(conf: &ClusterConf, chunk: u32) -> TestServer {
        let store = super::open_store(conf, "test-worker".into()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ctx = Arc::new(DataCtx {
            store: store.clone(),
            auth_token: conf.cluster.auth_token.clone(),
            max_frame: conf.worker.max_frame_size.as_usize(),
            chunk_size: chunk,
            worker: "test-worker".into(),
            ufs: Arc::new(crate::worker::ufs_fetch::UfsCtx::new(
                String::new(),
                String::new(),
                std::time::Duration::from_secs(1),
                Default::default(),
            )),
        });
        let tasks = Tasks::new(&Default::default());
        let max = conf.worker.max_connections;
        let task = tasks.spawn("data_server", move |t| serve(ctx, listener, t, max));
        TestServer {
            addr,
            store,
            tasks,
            task,
        }
    }

    pub async fn stop(self) {
        assert!(self.tasks.shutdown(Duration::from_secs(10)).await);
    }

    pub fn used(&self, tier: usize) -> u64 {
        self.store.lock().tiers[tier].used()
    }
}

pub async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

pub async fn recv(s: &mut TcpStream) -> FsResult<DataHeader> {
    let mut buf = BytesMut::new();
    recv_into(s, &mut buf).await
}

pub async fn recv_into(s: &mut TcpStream, buf: &mut BytesMut) -> FsResult<DataHeader> {
    match read_frame(s, buf, 8 << 20).await? {
        Some(h) => check_error(h),
        None => Err(FsError::io("connection closed")),
    }
}

pub fn open_hdr(op: DataOp, id: u64) -> DataHeader {
    let mut h = header(op);
    h.block_id = id;
    h
}

/// Remote write of `data` in frames of `frame` bytes; returns the tier of the OK reply.
pub async fn write_on(
    s: &mut TcpStream,
    id: u64,
    data: &[u8],
    frame: usize,
    reserve: u64,
    token: &str,
) -> FsResult<StorageTier> {
    let mut open = open_hdr(DataOp::WriteOpen, id);
    open.reserve = reserve;
    open.token = token.into();
    write_frame(s, &open, &[]).await?;
    let ok = recv(s).await?;
    assert_eq!(ok.op, DataOp::Ok as i32);
    assert_eq!(ok.chunk_size as usize, CS);
    let tier = StorageTier::try_from(ok.tier).unwrap();
    for (i, piece) in data.chunks(frame).enumerate() {
        let mut h = open_hdr(DataOp::WriteData, id);
        h.offset = (i * frame) as u64;
        h.crcs = chunk_crcs(piece, CS);
        write_frame(s, &h, piece).await?;
    }
    let mut c = open_hdr(DataOp::WriteCommit, id);
    c.len = data.len() as u64;
    write_frame(s, &c, &[]).await?;
    let ok = recv(s).await?;
    assert_eq!(ok.len, data.len() as u64);
    Ok(tier)
}

pub async fn write_block(
    addr: SocketAddr,
    id: u64,
    data: &[u8],
    reserve: u64,
) -> FsResult<StorageTier> {
    let mut s = connect(addr).await;
    write_on(&mut s, id, data, 4 * CS, reserve, "").await
}

/// Remote read of `[off, off+len)`; checks every frame's CRCs; returns (start, bytes).
pub async fn read_on(s: &mut TcpStream, id: u64, off: u64, len: u64) -> FsResult<(u64, Vec<u8>)> {
    let mut open = open_hdr(DataOp::ReadOpen, id);
    open.offset = off;
    open.len = len;
    write_frame(s, &open, &[]).await?;
    let ok = recv(s).await?;
    assert_eq!(ok.op, DataOp::Ok as i32);
    let mut out = Vec::new();
    let mut start = None;
    let mut buf = BytesMut::new();
    loop {
        let h = recv_into(s, &mut buf).await?;
        if h.op == DataOp::ReadEnd as i32 {
            break;
        }
        assert_eq!(h.op, DataOp::ReadData as i32);
        assert!(buf.len() <= 1 << 20);
        assert!(
            verify_chunks(&buf, CS, &h.crcs).is_ok(),
            "bad crc at {}",
            h.offset
        );
        let st = *start.get_or_insert(h.offset);
        assert_eq!(h.offset, st + out.len() as u64);
        out.extend_from_slice(&buf);
    }
    Ok((start.unwrap_or(off), out))
}

pub async fn read_block(addr: SocketAddr, id: u64) -> FsResult<Vec<u8>> {
    let mut s = connect(addr).await;
    Ok(read_on(&mut s, id, 0, 0).await?.1)
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Poll `cond` until it holds or `secs` pass.
pub async fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

pub fn staging_empty(root: &Path) -> bool {
    std::fs::read_dir(root).unwrap().flatten().all(|t| {
        std::fs::read_dir(t.path().join("staging")).map_or(true, |mut d| d.next().is_none())
    })
}
