//! Read-through: a READ_OPEN naming an under-store range for a block this worker does
//! not hold fetches the range (one ranged GET), streams it to the reader frame by frame
//! as it arrives, writes it with its CRC32C into a staging file, and commits it as a
//! normal block, which the next heartbeat reports to the master.
//!
//! Readers of a block being fetched join that fetch: they read what has arrived from
//! the staging file. A fetch that fails (the store errs, or the object is not the
//! length the master recorded) leaves nothing behind: the staging file goes with it.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use curvine_common::checksum::chunk_crcs;
use curvine_common::frame::header;
use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::proto::{DataHeader, DataOp, GetMountRequest, StorageTier, UfsRange};
use curvine_common::{BlockId, FsError, FsResult};
use futures_util::TryStreamExt;
use opendal::Operator;
use tokio::sync::watch;
use tonic::transport::Endpoint;
use tracing::{debug, info, warn};

use super::data_server::{join_err, Conn, DataCtx};
use super::heartbeat::{Registration, AUTH_METADATA_KEY};
use super::read_path::{widen, MAX_READ_FRAME};
use crate::ufs;

/// A fetch that gets no bytes from the store for this long fails.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a fetch has written so far, for the readers that joined it.
#[derive(Clone, Default)]
struct Progress {
    file: Option<Arc<File>>,
    fetched: u64,
    crcs: Vec<u32>,
    /// Set once: the block is committed, or the fetch failed.
    end: Option<Result<(), FsError>>,
}

struct Fetch {
    progress: watch::Sender<Progress>,
}

/// Under-store operators (built from the master's mount records) and fetches in
/// progress.
pub struct UfsCtx {
    master_addr: String,
    auth_token: String,
    timeout: Duration,
    /// Shown to the master to get a mount's secrets.
    registration: Arc<Registration>,
    ops: Mutex<HashMap<u64, (String, Operator)>>,
    fetches: Mutex<HashMap<u64, Arc<Fetch>>>,
}

impl UfsCtx {
    pub fn new(
        master_addr: String,
        auth_token: String,
        timeout: Duration,
        registration: Arc<Registration>,
    ) -> UfsCtx {
        UfsCtx {
            master_addr,
            auth_token,
            timeout,
            registration,
            ops: Mutex::new(HashMap::new()),
            fetches: Mutex::new(HashMap::new()),
        }
    }

    /// The store URI and operator of mount `id`, asking the master the first time.
    async fn operator(&self, id: u64) -> FsResult<(String, Operator)> {
        if let Some(v) = self.ops.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            return Ok(v.clone());
        }
        // the master the worker registered with: the only one that knows its session
        let master = match self.registration.master() {
            m if m.is_empty() => self.master_addr.clone(),
            m => m,
        };
        let ep = Endpoint::from_shared(format!("http://{master}"))
            .map_err(|e| FsError::config(format!("master address {master}: {e}")))?
            .connect_timeout(self.timeout)
            .timeout(self.timeout);
        let (worker_id, session) = self
            .registration
            .get()
            .ok_or_else(|| FsError::Unavailable {
                message: format!(
                    "mount {id}: this worker is not registered with the master, which gives a \
                 mount's credentials only to registered workers"
                ),
            })?;
        let mut client = MasterServiceClient::new(ep.connect().await?);
        let mut req = tonic::Request::new(GetMountRequest {
            mount_id: id,
            worker_id,
            session,
        });
        if !self.auth_token.is_empty() {
            let v = self
                .auth_token
                .parse()
                .map_err(|_| FsError::config("cluster.auth_token is not valid ASCII metadata"))?;
            req.metadata_mut().insert(AUTH_METADATA_KEY, v);
        }
        let reply = client
            .get_mount(req)
            .await
            .map_err(FsError::from)?
            .into_inner();
        if reply.redacted {
            // not cached: the next fetch asks again (after a re-registration)
            return Err(FsError::Unavailable {
                message: format!(
                    "mount {id}: the master withheld its credentials (it does not know this \
                     worker's registration, or the worker calls from another host than it \
                     registered)"
                ),
            });
        }
        let info = reply
            .mount
            .ok_or_else(|| FsError::protocol("get_mount: no mount in the reply"))?;
        let op = ufs::build(&info.ufs_uri, &info.options)?;
        let v = (info.ufs_uri, op);
        self.ops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, v.clone());
        Ok(v)
    }

    fn fetches(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Fetch>>> {
        self.fetches.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Ends a fetch however its task ends: the block leaves the table of fetches, and
/// joined readers learn of a failure.
struct Leading<'a> {
    ctx: &'a UfsCtx,
    id: u64,
    fetch: Arc<Fetch>,
}

impl Leading<'_> {
    fn end(&self, r: Result<(), FsError>) {
        self.fetch.progress.send_modify(|p| {
            if p.end.is_none() {
                p.end = Some(r);
            }
        });
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.end(Err(FsError::internal("the fetch was cancelled")));
        self.ctx.fetches().remove(&self.id);
    }
}

/// Serve READ_OPEN `open` of a block this worker did not hold when it arrived.
pub(super) async fn handle(
    ctx: &DataCtx,
    conn: &mut Conn,
    open: DataHeader,
    u: UfsRange,
) -> FsResult<()> {
    let id = open.block_id;
    let (joined, lead) = {
        let mut m = ctx.ufs.fetches();
        match m.get(&id) {
            Some(f) => (Some(f.clone()), None),
            None => {
                let (tx, _) = watch::channel(Progress::default());
                let f = Arc::new(Fetch { progress: tx });
                m.insert(id, f.clone());
                (None, Some(f))
            }
        }
    };
    if let Some(f) = joined {
        return join(ctx, conn, open, &u, f).await;
    }
    let Some(fetch) = lead else {
        return Err(FsError::internal("no fetch to lead"));
    };
    let leading = Leading {
        ctx: &ctx.ufs,
        id,
        fetch,
    };
    lead_fetch(ctx, Some(conn), open, u, &leading).await
}

/// Fetch block `id` (range `u`) into this worker with no reader (a load job's task).
/// Ok when the block is held, fetched now, or fetched by a read in progress that this
/// load joins.
pub(super) async fn load(ctx: &DataCtx, id: u64, u: UfsRange) -> FsResult<()> {
    if ctx.store.block_info(BlockId(id))?.is_some() {
        return Ok(());
    }
    let (joined, lead) = {
        let mut m = ctx.ufs.fetches();
        match m.get(&id) {
            Some(f) => (Some(f.clone()), None),
            None => {
                let (tx, _) = watch::channel(Progress::default());
                let f = Arc::new(Fetch { progress: tx });
                m.insert(id, f.clone());
                (None, Some(f))
            }
        }
    };
    if let Some(f) = joined {
        let mut rx = f.progress.subscribe();
        drop(f);
        loop {
            if let Some(r) = rx.borrow_and_update().end.clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                return Err(FsError::internal(format!(
                    "the fetch of block {id} ended early"
                )));
            }
        }
    }
    let Some(fetch) = lead else {
        return Err(FsError::internal("no fetch to lead"));
    };
    let leading = Leading {
        ctx: &ctx.ufs,
        id,
        fetch,
    };
    let mut open = header(DataOp::ReadOpen);
    open.block_id = id;
    lead_fetch(ctx, None, open, u, &leading).await
}

/// Lead the fetch of a block, streaming it to `conn` when a reader asked for it.
async fn lead_fetch(
    ctx: &DataCtx,
    mut conn: Option<&mut Conn>,
    open: DataHeader,
    u: UfsRange,
    leading: &Leading<'_>,
) -> FsResult<()> {
    let id = open.block_id;
    // a delay here stands for a slow store; an error for one that fails at once
    let _ = fault_data!("worker.ufs_fetch", &ctx.worker);
    let (uri, op) = match ctx.ufs.operator(u.mount_id).await {
        Ok(v) => v,
        Err(e) => {
            leading.end(Err(e.clone()));
            return Err(e);
        }
    };
    let store = ctx.store.clone();
    let (len, tier) = (
        u.len,
        StorageTier::try_from(u.tier).unwrap_or(StorageTier::Unspecified),
    );
    let handle =
        match tokio::task::spawn_blocking(move || store.begin_write(BlockId(id), tier, len))
            .await
            .map_err(join_err)?
        {
            Ok(h) => h,
            Err(FsError::AlreadyExists { .. }) => {
                // committed since the check: serve it as any block
                leading.end(Ok(()));
                return match conn {
                    Some(conn) => super::read_path::handle_read(ctx, conn, open).await,
                    None => Ok(()),
                };
            }
            Err(e) => {
                leading.end(Err(e.clone()));
                return Err(e);
            }
        };
    let file = Arc::new(handle.clone_file()?);
    leading
        .fetch
        .progress
        .send_modify(|p| p.file = Some(file.clone()));
    let cs = u64::from(ctx.chunk_size);
    let mut ok = header(DataOp::Ok);
    ok.block_id = id;
    ok.block_len = len;
    ok.chunk_size = ctx.chunk_size;
    ok.tier = handle.tier() as i32;
    let mut client_ok = match conn.as_deref_mut() {
        Some(c) => c.send(&ok, &[]).await.is_ok(),
        None => false,
    };
    let (start, end) = widen(open.offset, open.len, len, cs);
    debug!(block = id, key = %u.key, offset = u.offset, len, "fetching from the under-store");
    let store_err = |e: opendal::Error| ufs::store_err(&uri, &u.key, &e);
    let fetched = async {
        let mut r = op.reader_with(&u.key);
        if !u.etag.is_empty() && op.info().capability().read_with_if_match {
            r = r.if_match(&u.etag);
        }
        let r = r.await.map_err(store_err)?;
        let mut stream = r
            .into_bytes_stream(u.offset..u.offset + len)
            .await
            .map_err(store_err)?;
        let frame = (MAX_READ_FRAME / cs).max(1) * cs;
        let mut buf = BytesMut::with_capacity(frame as usize);
        let mut pos = 0u64;
        let mut crcs: Vec<u32> = Vec::new();
        let mut done = false;
        while !done {
            match tokio::time::timeout(STALL_TIMEOUT, stream.try_next()).await {
                Err(_) => {
                    return Err(FsError::UnderStore {
                        store: uri.clone(),
                        key: u.key.clone(),
                        message: format!("no data for {STALL_TIMEOUT:?}"),
                    })
                }
                Ok(Err(e)) => return Err(FsError::UnderStore {
                    store: uri.clone(),
                    key: u.key.clone(),
                    message: format!("read failed after {pos} bytes of the block: {e}"),
                }),
                Ok(Ok(None)) => done = true,
                Ok(Ok(Some(b))) => buf.extend_from_slice(&b),
            }
            while buf.len() as u64 >= frame || (done && !buf.is_empty()) {
                let n = (buf.len() as u64).min(frame);
                if pos + n > len {
                    return Err(FsError::UnderStore {
                        store: uri.clone(),
                        key: u.key.clone(),
                        message: format!(
                            "longer than the {len} bytes recorded: the object changed; run `cv mount resync`"
                        ),
                    });
                }
                let data: Bytes = buf.split_to(n as usize).freeze();
                let c = chunk_crcs(&data, cs as usize);
                let (f, d, at) = (file.clone(), data.clone(), pos);
                tokio::task::spawn_blocking(move || f.write_all_at(&d, at))
                    .await
                    .map_err(join_err)?
                    .map_err(|e| FsError::io_ctx(format!("write block {id}"), e))?;
                crcs.extend_from_slice(&c);
                leading.fetch.progress.send_modify(|p| {
                    p.fetched = at + n;
                    p.crcs.extend_from_slice(&c);
                });
                // the part of this frame the reader asked for (both chunk aligned)
                let (lo, hi) = (pos.max(start), (pos + n).min(end));
                if client_ok && lo < hi {
                    let mut h = header(DataOp::ReadData);
                    h.block_id = id;
                    h.offset = lo;
                    h.crcs = crcs[(lo / cs) as usize..hi.div_ceil(cs) as usize].to_vec();
                    let part = &data[(lo - pos) as usize..(hi - pos) as usize];
                    let sent = match conn.as_deref_mut() {
                        Some(c) => c.send(&h, part).await.is_ok(),
                        None => false,
                    };
                    if !sent {
                        // the reader left: finish the block for the cache anyway
                        client_ok = false;
                    }
                }
                pos += n;
            }
        }
        if pos != len {
            return Err(FsError::UnderStore {
                store: uri.clone(),
                key: u.key.clone(),
                message: format!(
                    "{pos} bytes where {len} were recorded: the object changed; run `cv mount resync`"
                ),
            });
        }
        Ok(crcs)
    }
    .await;
    let crcs = match fetched {
        Ok(c) => c,
        Err(e) => {
            warn!(block = id, error = %e, "under-store fetch failed; nothing kept");
            leading.end(Err(e.clone()));
            drop(handle);
            return Err(e);
        }
    };
    let committed = tokio::task::spawn_blocking(move || handle.commit(len, crcs))
        .await
        .map_err(join_err)?;
    if let Err(e) = committed {
        leading.end(Err(e.clone()));
        return Err(e);
    }
    leading.end(Ok(()));
    // the master learns of the replica now, so the next open reads it as a cached
    // block (short-circuit on this host) instead of asking this worker to fetch it
    ctx.store.early_heartbeat.request();
    info!(block = id, key = %u.key, len, "block fetched from the under-store");
    if let (true, Some(c)) = (client_ok, conn) {
        let mut h = header(DataOp::ReadEnd);
        h.block_id = id;
        c.send(&h, &[]).await?;
    }
    Ok(())
}

/// Serve a reader from a fetch another reader started.
async fn join(
    ctx: &DataCtx,
    conn: &mut Conn,
    open: DataHeader,
    u: &UfsRange,
    f: Arc<Fetch>,
) -> FsResult<()> {
    let id = open.block_id;
    let mut rx = f.progress.subscribe();
    drop(f);
    let file = loop {
        let p = rx.borrow_and_update().clone();
        if let Some(file) = p.file {
            break file;
        }
        if let Some(r) = p.end {
            return match r {
                // committed (or found committed) before it got a file: read it
                Ok(()) => super::read_path::handle_read(ctx, conn, open).await,
                Err(e) => Err(e),
            };
        }
        if rx.changed().await.is_err() {
            return Err(FsError::internal(format!(
                "the fetch of block {id} ended early"
            )));
        }
    };
    debug!(block = id, "joined a fetch in progress");
    let len = u.len;
    let cs = u64::from(ctx.chunk_size);
    let mut ok = header(DataOp::Ok);
    ok.block_id = id;
    ok.block_len = len;
    ok.chunk_size = ctx.chunk_size;
    conn.send(&ok, &[]).await?;
    let (start, end) = widen(open.offset, open.len, len, cs);
    let frame = (MAX_READ_FRAME / cs).max(1) * cs;
    let mut sent = start;
    while sent < end {
        let p = rx.borrow_and_update().clone();
        let avail = p.fetched.min(end);
        while sent < avail {
            let n = frame.min(avail - sent);
            let (fl, at) = (file.clone(), sent);
            let data = tokio::task::spawn_blocking(move || {
                let mut b = vec![0u8; n as usize];
                fl.read_exact_at(&mut b, at).map(|()| b)
            })
            .await
            .map_err(join_err)?
            .map_err(|e| FsError::io_ctx(format!("read block {id} being fetched"), e))?;
            let Some(c) = p
                .crcs
                .get((sent / cs) as usize..(sent + n).div_ceil(cs) as usize)
            else {
                return Err(FsError::internal("fetch progress without its checksums"));
            };
            let mut h = header(DataOp::ReadData);
            h.block_id = id;
            h.offset = sent;
            h.crcs = c.to_vec();
            conn.send(&h, &data).await?;
            sent += n;
        }
        if sent >= end {
            break;
        }
        if let Some(Err(e)) = p.end {
            return Err(e);
        }
        if rx.changed().await.is_err() {
            return Err(FsError::internal(format!(
                "the fetch of block {id} ended early"
            )));
        }
    }
    let mut h = header(DataOp::ReadEnd);
    h.block_id = id;
    conn.send(&h, &[]).await
}
