//! Writes under a mount reaching the under-store.
//!
//! A file closed under a `through` or `async` mount is marked not persisted and gets a
//! pending record (`pst/` ‖ inode id -> due time, length) in the same mutation as its
//! `complete`, so a crash never forgets an upload. `through`: the `Complete` call
//! uploads at once and fails, naming the store and the key, when the upload fails (the
//! pending record stays, and the persist loop retries). `async`: the persist loop
//! uploads the file once its due time (`master.persist_delay` after close) has come;
//! `cv persist` uploads now.
//!
//! The master streams the file's blocks from the workers holding them (READ_OPEN over
//! their data plane, each chunk verified against its CRC32C) into one OpenDAL writer,
//! which makes a multipart upload of a large file. When the store has the object, one
//! mutation marks the inode persisted with the store's ETag and mtime, marks its blocks
//! as under-store blocks (so `free`, TTL and eviction may drop them) and removes the
//! pending record; a file changed meanwhile (an append) stays pending.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use curvine_common::block_read::BlockReadStream;
use curvine_common::proto::MountMode;
use curvine_common::tasks::Task;
use curvine_common::{BlockId, FsError, FsResult, WorkerId};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore};
use tracing::{debug, info, warn};

use super::namespace::{is_file, Namespace, Reader, Txn};
use super::records::{InodeRec, UfsRec};
use crate::ufs;

/// `pst/` ‖ inode id (BE u64) -> due time (ms, BE i64) ‖ length (BE u64).
pub const META_PERSIST_PREFIX: &[u8] = b"pst/";

pub fn pending_key(id: u64) -> Vec<u8> {
    let mut k = META_PERSIST_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn pending_value(due_ms: i64, len: u64) -> Vec<u8> {
    let mut v = due_ms.to_be_bytes().to_vec();
    v.extend_from_slice(&len.to_be_bytes());
    v
}

fn parse_pending(k: &[u8], v: &[u8]) -> Option<(u64, i64, u64)> {
    let id = u64::from_be_bytes(k.try_into().ok()?);
    let due = i64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    let len = u64::from_be_bytes(v.get(8..16)?.try_into().ok()?);
    Some((id, due, len))
}

/// How long a block read from a worker may take before the upload fails.
const BLOCK_READ_TIMEOUT: Duration = Duration::from_secs(120);
/// Size of the parts of a multipart upload.
const UPLOAD_CHUNK: usize = 8 << 20;

/// Upload state kept in memory (what must survive a restart is in `pst/` records).
pub struct Persister {
    /// The cluster's data-plane token and the largest frame a worker sends.
    data: OnceLock<(String, usize)>,
    /// Inodes being uploaded now; `done` wakes those waiting for one of them.
    running: Mutex<HashSet<u64>>,
    done: Notify,
    permits: OnceLock<Arc<Semaphore>>,
    /// Uploads that failed since start.
    pub failed: AtomicU64,
    /// Wakes the persist loop (a new pending file).
    wake: Notify,
}

impl Default for Persister {
    fn default() -> Self {
        Persister {
            data: OnceLock::new(),
            running: Mutex::default(),
            done: Notify::new(),
            permits: OnceLock::new(),
            failed: AtomicU64::new(0),
            wake: Notify::new(),
        }
    }
}

impl Persister {
    /// Set once when the master starts serving.
    pub fn configure(&self, token: &str, max_frame: usize, concurrency: u32) {
        let _ = self.data.set((token.to_string(), max_frame.max(2 << 20)));
        let _ = self
            .permits
            .set(Arc::new(Semaphore::new(concurrency.max(1) as usize)));
    }

    fn data(&self) -> (String, usize) {
        self.data
            .get()
            .cloned()
            .unwrap_or_else(|| (String::new(), 8 << 20))
    }

    fn permits(&self) -> Arc<Semaphore> {
        self.permits
            .get_or_init(|| Arc::new(Semaphore::new(4)))
            .clone()
    }
}

/// Frees the `running` slot of an upload however it ends.
struct Running<'a>(&'a Persister, u64);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
        self.0.done.notify_waiters();
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> FsResult<T> + Send + 'static,
) -> FsResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FsError::internal(format!("persist: {e}")))?
}

impl Namespace {
    /// In `complete`: a file under a `through` or `async` mount becomes not persisted
    /// and pending (due now for `through`, whose close uploads it, after the persist
    /// delay for `async`). Files under `cache` mounts and outside mounts are left alone.
    pub(super) fn mark_written(&self, txn: &mut Txn<'_>, ino: &mut InodeRec, path: &str) {
        if self.mounts.is_empty() {
            return;
        }
        let Ok(path) = curvine_common::path::normalize(path) else {
            return;
        };
        let Some((m, key)) = self.mounts.resolve(&path) else {
            return;
        };
        if key.is_empty() || m.info.mode == MountMode::Cache as i32 {
            return;
        }
        let u = ino.ufs.get_or_insert_with(|| {
            Box::new(UfsRec {
                mount_id: m.id(),
                ..Default::default()
            })
        });
        // the etag stays: it names the object the unchanged blocks can still be read
        // from (an append or a truncate leaves the blocks before it as they were)
        u.mount_id = m.id();
        u.key = key;
        u.persisted = false;
        let delay = self.conf.persist_delay.0.as_millis() as i64;
        txn.put_meta(
            pending_key(ino.id),
            pending_value(txn.now.saturating_add(delay), ino.len),
        );
        self.persister.wake.notify_one();
    }

    /// After a `complete` was made durable: for a file under a `through` mount, upload
    /// it now; whether it was uploaded. Errors name the store and the key; the file
    /// stays pending.
    pub async fn persist_on_close(self: &Arc<Self>, id: u64) -> FsResult<bool> {
        if self.mounts.is_empty() {
            return Ok(false);
        }
        let ns = self.clone();
        let ino = blocking(move || ns.store.inode(id)).await?;
        let Some(ino) = ino else {
            return Ok(false);
        };
        let Some(u) = ino.ufs.as_ref().filter(|u| !u.persisted) else {
            return Ok(false);
        };
        match self.mounts.by_id(u.mount_id) {
            Some(m) if m.info.mode == MountMode::Through as i32 => {}
            _ => return Ok(false),
        }
        self.persist_file(id).await.map(|_| true)
    }

    /// Upload file `id` unless the store already has it; waits for an upload of it that
    /// is in progress. Returns the bytes uploaded.
    pub async fn persist_file(self: &Arc<Self>, id: u64) -> FsResult<u64> {
        let p = &self.persister;
        loop {
            let wait = p.done.notified();
            {
                let mut r = p.running.lock().unwrap_or_else(|e| e.into_inner());
                if r.insert(id) {
                    break;
                }
            }
            wait.await;
        }
        let _running = Running(p, id);
        let _permit = p
            .permits()
            .acquire_owned()
            .await
            .map_err(|_| FsError::internal("persist semaphore closed"))?;
        let r = self.upload(id).await;
        if r.is_err() {
            p.failed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    async fn upload(self: &Arc<Self>, id: u64) -> FsResult<u64> {
        let ns = self.clone();
        let ino = blocking(move || ns.store.inode(id)).await?;
        let Some(ino) = ino.filter(|i| is_file(i) && i.complete) else {
            // gone, or open again for writing (its next complete marks it again)
            let ns = self.clone();
            blocking(move || ns.drop_pending_if_gone(id)).await?;
            return Ok(0);
        };
        let Some(u) = ino.ufs.clone() else {
            return Ok(0);
        };
        if u.persisted {
            return Ok(0);
        }
        let Some(m) = self.mounts.by_id(u.mount_id) else {
            return Err(FsError::invalid(format!(
                "inode {id}: its mount {} is gone",
                u.mount_id
            )));
        };
        let op = m.op()?;
        let blocks = self.located_blocks(id)?;
        let in_store = ufs::parse_uri(m.uri()).is_ok_and(|l| l.keeps_old_object_while_writing());
        let (token, max_frame) = self.persister.data();
        let mut w = op
            .writer_with(&u.key)
            .chunk(UPLOAD_CHUNK)
            .await
            .map_err(|e| ufs::store_err(m.uri(), &u.key, &e))?;
        let mut sent = 0u64;
        let streamed = async {
            for b in &blocks {
                // the first worker that opens the block streams it; a worker that has
                // dropped it since its last report (eviction) fails the open, before
                // any byte reached the upload, and the next source is tried
                let mut opened = None;
                let mut open_err = None;
                for a in b.locations.iter().filter_map(|l| l.address.as_ref()) {
                    let addr = format!("{}:{}", a.host, a.data_port);
                    let open = BlockReadStream::connect(
                        &addr,
                        &token,
                        BlockId(b.block_id),
                        b.len,
                        max_frame,
                    );
                    match tokio::time::timeout(BLOCK_READ_TIMEOUT, open).await {
                        Ok(Ok(s)) => {
                            opened = Some(s);
                            break;
                        }
                        Ok(Err(e)) => {
                            debug!(block = b.block_id, %addr, error = %e, "block source refused; trying the next");
                            open_err = Some(e);
                        }
                        Err(_) => {
                            open_err = Some(FsError::Timeout {
                                message: format!("open of block {} at {addr}", b.block_id),
                            })
                        }
                    }
                }
                if let Some(s) = opened {
                    let addr = s.addr().to_string();
                    match tokio::time::timeout(BLOCK_READ_TIMEOUT, copy_block_to(s, &mut w)).await {
                        Ok(r) => r?,
                        Err(_) => {
                            return Err(FsError::Timeout {
                                message: format!("read of block {} from {addr}", b.block_id),
                            })
                        }
                    }
                    sent += b.len;
                    continue;
                }
                // no worker has it (dropped from the cache): the object it came from
                // still holds it (an object store shows the new object only when its
                // upload completes)
                let old = in_store
                    .then_some(u.etag.as_str())
                    .filter(|e| !e.is_empty());
                let Some(etag) = old else {
                    return Err(open_err.unwrap_or(FsError::BlockNotFound {
                        block_id: b.block_id,
                        worker: "any live worker".into(),
                    }));
                };
                let range = b.offset..b.offset + b.len;
                let bytes = op
                    .read_with(&u.key)
                    .range(range)
                    .if_match(etag)
                    .await
                    .map_err(|e| ufs::store_err(m.uri(), &u.key, &e))?;
                if bytes.len() as u64 != b.len {
                    return Err(FsError::UnderStore {
                        store: m.uri().to_string(),
                        key: u.key.clone(),
                        message: format!(
                            "{} bytes where block {} has {}",
                            bytes.len(),
                            b.block_id,
                            b.len
                        ),
                    });
                }
                w.write(bytes)
                    .await
                    .map_err(|e| ufs::store_err(m.uri(), &u.key, &e))?;
                sent += b.len;
            }
            // a hole at the end (truncate or fallocate past the data) reads as zeros
            let mut zeros = ino.len.saturating_sub(sent);
            while zeros > 0 {
                let n = zeros.min(1 << 20) as usize;
                w.write(vec![0u8; n])
                    .await
                    .map_err(|e| ufs::store_err(m.uri(), &u.key, &e))?;
                zeros -= n as u64;
                sent += n as u64;
            }
            w.close()
                .await
                .map_err(|e| ufs::store_err(m.uri(), &u.key, &e))
        };
        if let Err(e) = streamed.await {
            if let Err(ae) = w.abort().await {
                debug!(key = %u.key, error = %ae, "abort of a failed upload");
            }
            warn!(ufs = %m.uri(), key = %u.key, error = %e, "upload failed");
            return Err(e);
        }
        // the identity the metadata load compares against comes from a stat, like its own
        let meta = op
            .stat(&u.key)
            .await
            .map_err(|e| ufs::store_err(m.uri(), &u.key, &e))?;
        let obj = ufs::Object::from_meta(&u.key, &meta);
        if obj.len != ino.len {
            return Err(FsError::UnderStore {
                store: m.uri().to_string(),
                key: u.key.clone(),
                message: format!(
                    "the store holds {} bytes after an upload of {}",
                    obj.len, ino.len
                ),
            });
        }
        let ns = self.clone();
        let blocks_then = ino.blocks.clone();
        let seq = blocking(move || ns.record_persisted(id, &blocks_then, ino.len, obj)).await?;
        self.syncer.wait(seq).await?;
        info!(ufs = %m.uri(), key = %u.key, bytes = sent, "persisted");
        Ok(sent)
    }

    fn drop_pending_if_gone(&self, id: u64) -> FsResult<()> {
        self.mutate(0, |txn| {
            match txn.inode(id)? {
                Some(i) if is_file(&i) && !i.complete => {} // its complete marks it again
                Some(i) if i.ufs.as_ref().is_some_and(|u| !u.persisted) => return Ok(()),
                _ => {}
            }
            txn.del_meta(pending_key(id));
            Ok(())
        })
        .map(|_| ())
    }

    /// Mark `id` persisted, unless it changed since the upload read it.
    fn record_persisted(
        &self,
        id: u64,
        blocks: &[u64],
        len: u64,
        obj: ufs::Object,
    ) -> FsResult<u64> {
        let (droppable, seq) = self.mutate(0, |txn| {
            let mut droppable: Vec<(u32, u64)> = Vec::new();
            let Some(mut ino) = txn.inode(id)? else {
                txn.del_meta(pending_key(id));
                return Ok(droppable);
            };
            if !ino.complete || ino.blocks != blocks || ino.len != len {
                return Ok(droppable); // written again meanwhile: stays pending
            }
            let Some(u) = ino.ufs.as_mut() else {
                return Ok(droppable);
            };
            u.persisted = true;
            u.etag = obj.etag.clone();
            u.mtime_ms = obj.mtime_ms;
            u.len = obj.len;
            u.loaded_ms = txn.now;
            for mut b in txn.blocks(&ino.blocks)?.into_iter().flatten() {
                droppable.extend(b.locs.iter().map(|l| (l.worker_id, b.id)));
                if !b.ufs {
                    b.ufs = true;
                    txn.put_block(b);
                }
            }
            txn.put_inode(ino);
            txn.del_meta(pending_key(id));
            Ok(droppable)
        })?;
        for (w, b) in droppable {
            self.workers.queue_droppable(WorkerId(w), BlockId(b));
        }
        Ok(seq)
    }

    /// Of the replicas a worker reports added, those of blocks the under-store holds.
    pub(super) fn droppable_of(
        &self,
        added: &[curvine_common::proto::BlockReplica],
    ) -> FsResult<Vec<u64>> {
        if added.is_empty() || self.mounts.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<u64> = added.iter().map(|r| r.block_id).collect();
        let mut out = Vec::new();
        for b in self.store.blocks(&ids)?.into_iter().flatten() {
            if !b.ufs {
                continue;
            }
            let persisted = self
                .store
                .inode(b.inode)?
                .is_some_and(|i| i.ufs.as_ref().is_some_and(|u| u.persisted));
            if persisted {
                out.push(b.id);
            }
        }
        Ok(out)
    }

    /// Pending uploads: (inode, due time, length), in inode order.
    pub fn pending_uploads(&self) -> FsResult<Vec<(u64, i64, u64)>> {
        Ok(self
            .store
            .meta_scan(META_PERSIST_PREFIX)?
            .into_iter()
            .filter_map(|(k, v)| parse_pending(&k, &v))
            .collect())
    }

    /// Files pending upload and their bytes (`cv report`).
    pub fn persist_backlog(&self) -> (u64, u64) {
        match self.pending_uploads() {
            Ok(p) => (p.len() as u64, p.iter().map(|x| x.2).sum()),
            Err(e) => {
                warn!(error = %e, "cannot read the persist backlog");
                (0, 0)
            }
        }
    }

    /// `cv persist PATH`: upload every pending file at or under `path` now. Returns
    /// (files, bytes); the first failure is returned after the others were tried.
    pub async fn persist_path(
        self: &Arc<Self>,
        path: &str,
        c: &curvine_common::proto::CallerInfo,
    ) -> FsResult<(u64, u64)> {
        let path = curvine_common::path::normalize(path)?;
        if self.mounts.resolve(&path).is_none() {
            return Err(FsError::invalid(format!("{path}: not under a mount")));
        }
        let ns = self.clone();
        let (p, cc) = (path.clone(), c.clone());
        let root =
            blocking(move || ns.walk(&*ns.store, &p, &cc, true)?.existing().cloned()).await?;
        let mut ids = Vec::new();
        for (id, _, _) in self.pending_uploads()? {
            let ns = self.clone();
            let under = root.id;
            if blocking(move || ns.is_within(id, under)).await? {
                ids.push(id);
            }
        }
        let (mut files, mut bytes, mut first_err) = (0, 0, None);
        for id in ids {
            match self.persist_file(id).await {
                Ok(n) => {
                    files += 1;
                    bytes += n;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok((files, bytes)),
        }
    }

    /// Whether inode `id` is `dir` or lies under it (by its primary name).
    fn is_within(&self, id: u64, dir: u64) -> FsResult<bool> {
        let mut cur = id;
        for _ in 0..4096 {
            if cur == dir {
                return Ok(true);
            }
            match self.store.inode(cur)? {
                Some(i) if i.parent != 0 && i.parent != cur => cur = i.parent,
                _ => return Ok(false),
            }
        }
        Ok(false)
    }
}

/// Write the bytes of `block` to `w`, each chunk checked against its CRC32C.
async fn copy_block_to(
    mut block: BlockReadStream<BufReader<TcpStream>>,
    w: &mut opendal::Writer,
) -> FsResult<()> {
    let mut buf = BytesMut::new();
    while block.next(&mut buf).await?.is_some() {
        if !buf.is_empty() {
            w.write(buf.split().freeze())
                .await
                .map_err(|e| FsError::io(format!("upload of block {}: {e}", block.block())))?;
        }
    }
    Ok(())
}

/// Upload pending files whose due time has come, `master.persist_concurrency` at once;
/// a failed one is due again after the persist delay. `task` shows the uploads running.
pub async fn persist_loop(ns: Arc<Namespace>, task: Task) {
    let cancel = task.token();
    let delay = ns.conf.persist_delay.0.max(Duration::from_millis(10));
    let tick = (delay / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut every = tokio::time::interval(tick);
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = every.tick() => {}
            _ = ns.persister.wake.notified() => {}
        }
        if !ns.leads() {
            // the leader uploads; a new leader finds the pending uploads in its state
            continue;
        }
        if ns.waiting_for_workers().is_some() {
            // an upload reads the file's blocks from the workers that report them
            continue;
        }
        let pending = match ns.pending_uploads() {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "cannot read the pending uploads");
                task.failed(&e);
                continue;
            }
        };
        let now = curvine_common::types::now_ms();
        for (id, due, _) in pending {
            if due > now {
                continue;
            }
            let busy = ns
                .persister
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&id);
            if busy || ns.persister.permits().available_permits() == 0 {
                continue;
            }
            let ns = ns.clone();
            let cancel = cancel.clone();
            tasks.spawn(async move {
                let r = tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = ns.persist_file(id) => r,
                };
                if let Err(e) = r {
                    // logged by upload; due again after the delay
                    let ns2 = ns.clone();
                    let again = blocking(move || ns2.postpone(id)).await;
                    if let Err(pe) = again {
                        warn!(inode = id, error = %pe, cause = %e, "cannot postpone a failed upload");
                    }
                }
            });
        }
        match tasks.len() {
            0 => task.idle(),
            n => task.busy(format!("{n} uploads running")),
        }
    }
    tasks.close();
    tasks.wait().await;
}

impl Namespace {
    fn postpone(&self, id: u64) -> FsResult<()> {
        let delay = self.conf.persist_delay.0.as_millis() as i64;
        self.mutate(0, |txn| {
            let Some(v) = txn.meta(&pending_key(id))? else {
                return Ok(());
            };
            let len = v
                .get(8..16)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_be_bytes);
            txn.put_meta(
                pending_key(id),
                pending_value(txn.now.saturating_add(delay.max(1)), len),
            );
            Ok(())
        })
        .map(|_| ())
    }
}
