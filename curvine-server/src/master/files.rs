//! File lifecycle: create, append, add_block, complete, abandon, lease expiry, open and
//! truncate.

use curvine_common::proto::{
    AddBlockRequest, AppendRequest, BlockLocation, CallerInfo, CommittedBlock, CompleteRequest,
    CreateRequest, FileStatus, FileType, LocatedBlock, StorageTier, SyncRequest,
};
use curvine_common::{BlockId, FsError, FsResult, InodeId, WorkerId};
use tracing::{debug, info};

use super::namespace::{
    check, check_sticky, is_dir, is_file, mode_after_write, status, Namespace, Reader, Txn,
};
use super::records::{BlockRec, InodeRec, Loc};
use super::store;

impl Namespace {
    /// Create a file open for writing by the caller; with `first_block`, also its first
    /// block (None when no worker can take it now: the writer's add_block waits).
    pub fn create(
        &self,
        req: &CreateRequest,
    ) -> FsResult<((FileStatus, Option<LocatedBlock>), u64)> {
        let c = req.caller.clone().unwrap_or_default();
        let tier = match StorageTier::try_from(req.storage_tier).unwrap_or(StorageTier::Unspecified)
        {
            StorageTier::Unspecified => self.conf.storage_tier.0,
            t => t,
        };
        let tier = if tier == StorageTier::Unspecified {
            StorageTier::Mem
        } else {
            tier
        };
        let replicas = if req.replicas == 0 {
            self.conf.replicas
        } else {
            req.replicas
        };
        let block_size = if req.block_size == 0 {
            self.conf.block_size.0
        } else {
            req.block_size
        };
        if replicas > 16 {
            return Err(FsError::invalid(format!(
                "replicas {replicas} is out of range (1..=16)"
            )));
        }
        self.mutate_call(&c, |txn| {
            let parent = if req.create_parents {
                self.mkdirs_for(txn, &req.path, &c)?
            } else {
                None
            };
            let w = self.walk(&*txn, &req.path, &c, false)?;
            let dir = match parent {
                Some(p) => txn.must_inode(p)?,
                None => w
                    .dir()
                    .map_err(|_| FsError::IsADirectory {
                        path: w.path.clone(),
                    })?
                    .clone(),
            };
            if let Some(old) = &w.inode {
                if is_dir(old) {
                    return Err(FsError::IsADirectory {
                        path: w.path.clone(),
                    });
                }
                if req.exclusive || !req.overwrite {
                    return Err(FsError::exists(&w.path));
                }
                check(&c, &dir, 3, || w.parent_path())?;
                check_sticky(&c, &dir, old, &w.path)?;
                // overwriting writes the file: HDFS asks write permission on it, as
                // open(O_TRUNC) does
                check(&c, old, 2, || w.path.clone())?;
                txn.unlink_entry(dir.id, &w.name)?;
                txn.release_inode(old.clone())?;
            } else {
                check(&c, &dir, 3, || w.parent_path())?;
            }
            let mode = if req.mode == 0 { 0o644 } else { req.mode };
            let mut ino = Self::new_inode(txn, FileType::File, mode, &c, &dir, &w.name);
            ino.block_size = block_size;
            ino.replicas = replicas;
            ino.storage_tier = tier as i32;
            ino.complete = false;
            txn.counters.files += 1;
            txn.link_entry(dir.id, &w.name, ino.id)?;
            self.open_for_write(txn, &ino, c.client_id);
            let first = if req.first_block {
                // Saves the writer an add_block call. A placement that fails now (no
                // worker registered yet, no space) is left to that call, which waits
                // and names the error if it lasts.
                self.allocate_block(txn, &mut ino, &w.path, &c, &[], 0)
                    .inspect_err(|e| debug!(path = %w.path, error = %e, "create: no first block"))
                    .ok()
            } else {
                None
            };
            txn.put_inode(ino.clone());
            debug!(path = %w.path, id = ino.id, "create");
            Ok((status(&ino, w.path.clone(), w.name.clone()), first))
        })
    }

    fn open_for_write(&self, txn: &mut Txn<'_>, ino: &InodeRec, client_id: u64) {
        txn.put_meta(store::open_key(ino.id), client_id.to_be_bytes().to_vec());
        txn.grant_lease(ino.id, client_id);
    }

    /// Create the missing parents of `path` (for create_parents); returns the parent id
    /// when something had to be created.
    pub(super) fn mkdirs_for(
        &self,
        txn: &mut Txn<'_>,
        path: &str,
        c: &CallerInfo,
    ) -> FsResult<Option<u64>> {
        let comps = self.components(path)?;
        if comps.len() < 2 {
            return Ok(None);
        }
        let parent = curvine_common::path::join(&comps[..comps.len() - 1]);
        match self.walk(&*txn, &parent, c, true) {
            Ok(w) if w.inode.is_some() => Ok(None),
            Ok(_) | Err(FsError::NotFound { .. }) => {
                Ok(Some(self.mkdir_in(txn, &parent, true, 0o755, c)?.id))
            }
            Err(e) => Err(e),
        }
    }

    pub fn append(
        &self,
        req: &AppendRequest,
    ) -> FsResult<((FileStatus, Option<LocatedBlock>), u64)> {
        let c = req.caller.clone().unwrap_or_default();
        let (st, seq) = self.mutate_call(&c, |txn| {
            let w = self.walk(&*txn, &req.path, &c, true)?;
            let mut ino = w.existing()?.clone();
            if is_dir(&ino) {
                return Err(FsError::IsADirectory {
                    path: w.path.clone(),
                });
            }
            if !is_file(&ino) {
                return Err(FsError::invalid(format!("{}: not a regular file", w.path)));
            }
            check(&c, &ino, 2, || w.path.clone())?;
            if !ino.complete {
                return Err(FsError::Busy {
                    message: format!("{} is being written by another client", w.path),
                });
            }
            ino.complete = false;
            ino.appending = true;
            ino.mode = mode_after_write(&c, &ino);
            ino.ctime_ms = txn.now;
            self.open_for_write(txn, &ino, c.client_id);
            txn.put_inode(ino.clone());
            Ok(status(&ino, w.path.clone(), w.name.clone()))
        })?;
        let last = self.located_blocks(st.id)?.pop();
        Ok(((st, last), seq))
    }

    /// The open-for-write inode `id`, after checking `client`'s lease on it.
    fn writing(&self, txn: &Txn<'_>, id: u64, path: &str, client: u64) -> FsResult<InodeRec> {
        let ino = txn
            .inode(id)?
            .filter(is_file)
            .ok_or_else(|| FsError::not_found(path))?;
        if ino.complete {
            return Err(FsError::invalid(format!("{path} is not open for writing")));
        }
        match self.leases.touch(id, client) {
            Some(holder) if holder != client => Err(FsError::Busy {
                message: format!("{path} is being written by another client"),
            }),
            _ => Ok(ino),
        }
    }

    /// Record committed blocks and drop allocated blocks that were not committed.
    /// Returns the file's committed length.
    fn commit_blocks(
        &self,
        txn: &mut Txn<'_>,
        ino: &mut InodeRec,
        committed: &[CommittedBlock],
    ) -> FsResult<u64> {
        for cb in committed {
            if BlockId(cb.block_id).inode().0 != ino.id {
                return Err(FsError::invalid(format!(
                    "block {} does not belong to file {}",
                    cb.block_id, ino.id
                )));
            }
            let mut rec = txn.block(cb.block_id)?.unwrap_or_else(|| BlockRec {
                id: cb.block_id,
                inode: ino.id,
                ..Default::default()
            });
            if !ino.blocks.contains(&cb.block_id) {
                ino.blocks.push(cb.block_id);
                txn.counters.blocks += 1;
            }
            let mut ids: Vec<u32> = cb.worker_ids.clone();
            ids.sort_unstable();
            ids.dedup();
            // Never a file that claims N replicas with fewer: every block must be
            // committed on `replicas` distinct workers.
            let want = ino.replicas.max(1) as usize;
            if ids.len() < want {
                return Err(FsError::Unavailable {
                    message: format!(
                        "block {} was committed on {} of {want} replicas; write it again",
                        cb.block_id,
                        ids.len()
                    ),
                });
            }
            rec.len = cb.len;
            rec.committed = true;
            // Allocated targets that did not commit hold nothing (their staging was
            // aborted): the committed workers are the block's locations.
            for l in rec.locs.iter().filter(|l| !ids.contains(&l.worker_id)) {
                txn.del_worker_block(l.worker_id, rec.id);
            }
            rec.locs.retain(|l| ids.contains(&l.worker_id));
            for wid in &ids {
                txn.replica_committed(*wid, rec.id, cb.len);
                if !rec.locs.iter().any(|l| l.worker_id == *wid) {
                    rec.locs.push(Loc {
                        worker_id: *wid,
                        tier: ino.storage_tier,
                    });
                    txn.put_worker_block(*wid, rec.id);
                }
            }
            txn.put_block(rec);
        }
        let recs = txn.blocks(&ino.blocks)?;
        let mut keep = Vec::with_capacity(ino.blocks.len());
        let mut len = 0;
        for (id, rec) in ino.blocks.clone().into_iter().zip(recs) {
            if let Some(cb) = committed.iter().rev().find(|c| c.block_id == id) {
                len += cb.len;
                keep.push(id);
                continue;
            }
            match rec {
                Some(r) if !r.committed => txn.drop_block(&r),
                Some(r) => {
                    len += r.len;
                    keep.push(id);
                }
                None => {}
            }
        }
        ino.blocks = keep;
        Ok(len)
    }

    pub fn add_block(&self, req: &AddBlockRequest) -> FsResult<(LocatedBlock, u64)> {
        let c = req.caller.clone().unwrap_or_default();
        self.mutate_call(&c, |txn| {
            let mut ino = self.writing(txn, req.file_id, &req.path, c.client_id)?;
            let offset = self.commit_blocks(txn, &mut ino, &req.previous)?;
            let excluded: Vec<WorkerId> =
                req.excluded_workers.iter().map(|&w| WorkerId(w)).collect();
            let block = self.allocate_block(txn, &mut ino, &req.path, &c, &excluded, offset)?;
            txn.put_inode(ino);
            Ok(block)
        })
    }

    /// Allocate the next block of `ino` (open for writing), at file offset `offset`, on
    /// workers placed for `c` outside `excluded`. The caller puts the inode.
    fn allocate_block(
        &self,
        txn: &mut Txn<'_>,
        ino: &mut InodeRec,
        path: &str,
        c: &CallerInfo,
        excluded: &[WorkerId],
        offset: u64,
    ) -> FsResult<LocatedBlock> {
        let index = ino.next_block_index;
        if index >= 1 << curvine_common::types::BLOCK_INDEX_BITS {
            return Err(FsError::invalid(format!("{path}: too many blocks")));
        }
        let tier = StorageTier::try_from(ino.storage_tier).unwrap_or(StorageTier::Mem);
        let targets = self.workers.place(
            tier,
            ino.replicas.max(1),
            ino.block_size,
            &c.client_host,
            excluded,
        )?;
        let id = BlockId::new(InodeId(ino.id), index).0;
        ino.next_block_index += 1;
        ino.blocks.push(id);
        txn.counters.blocks += 1;
        let rec = BlockRec {
            id,
            inode: ino.id,
            len: 0,
            locs: targets
                .iter()
                .map(|t| Loc {
                    worker_id: t.worker_id.0,
                    tier: t.tier as i32,
                })
                .collect(),
            committed: false,
            ufs: false,
        };
        for t in &targets {
            txn.put_worker_block(t.worker_id.0, id);
            self.workers
                .track_reservation(t.worker_id, BlockId(id), t.tier, ino.block_size);
        }
        txn.put_block(rec);
        Ok(LocatedBlock {
            block_id: id,
            offset,
            len: 0,
            locations: targets
                .into_iter()
                .map(|t| BlockLocation {
                    worker_id: t.worker_id.0,
                    address: Some(t.address),
                    tier: t.tier as i32,
                })
                .collect(),
            ufs: None,
        })
    }

    pub fn complete(&self, req: &CompleteRequest) -> FsResult<(FileStatus, u64)> {
        let c = req.caller.clone().unwrap_or_default();
        self.mutate_call(&c, |txn| {
            if let Some(ino) = txn.inode(req.file_id)? {
                if is_file(&ino) && ino.complete && self.leases.touch(ino.id, c.client_id).is_none() {
                    // A retried complete whose reply was lost.
                    return Ok(status(&ino, req.path.clone(), ino.name.clone()));
                }
            }
            let mut ino = self.writing(txn, req.file_id, &req.path, c.client_id)?;
            let len = self.commit_blocks(txn, &mut ino, &req.blocks)?;
            if len != req.len {
                debug!(path = %req.path, blocks = len, reported = req.len, "complete: length differs from blocks");
            }
            set_data_len(&mut ino, len, req.min_len);
            ino.complete = true;
            ino.appending = false;
            ino.mtime_ms = if req.mtime_ms > 0 {
                req.mtime_ms.min(txn.now)
            } else {
                txn.now
            };
            // ctime is the last change: the writer's last write (its mtime) or a later
            // change of attributes; a writer that wrote nothing leaves it as it was
            ino.ctime_ms = if req.mtime_ms > 0 {
                ino.ctime_ms.max(ino.mtime_ms)
            } else {
                txn.now
            };
            txn.del_meta(store::open_key(ino.id));
            txn.release_lease(ino.id);
            self.mark_written(txn, &mut ino, &req.path);
            txn.put_inode(ino.clone());
            Ok(status(&ino, req.path.clone(), ino.name.clone()))
        })
    }

    /// Publish what a writer has committed so far (hflush/hsync): the file stays open
    /// for writing, but its length and blocks are visible to new readers, and they
    /// survive the writer (abandon and lease expiry keep the committed blocks).
    pub fn sync(&self, req: &SyncRequest) -> FsResult<(FileStatus, u64)> {
        let c = req.caller.clone().unwrap_or_default();
        self.mutate_call(&c, |txn| {
            let mut ino = self.writing(txn, req.file_id, &req.path, c.client_id)?;
            let len = self.commit_blocks(txn, &mut ino, &req.blocks)?;
            if len != req.len {
                return Err(FsError::invalid(format!(
                    "{}: sync of {} bytes but the committed blocks hold {len}",
                    req.path, req.len
                )));
            }
            set_data_len(&mut ino, len, 0);
            ino.appending = true;
            ino.mtime_ms = txn.now;
            txn.put_inode(ino.clone());
            Ok(status(&ino, req.path.clone(), ino.name.clone()))
        })
    }

    /// Give up a file being written: a new file is removed, an append (or a file that
    /// was synced) is rolled back to its committed blocks and completed. `client` None = lease expiry.
    pub fn abandon(&self, file_id: u64, path: &str, client: Option<u64>) -> FsResult<((), u64)> {
        self.mutate(client.unwrap_or(0), |txn| {
            let mut ino = match client {
                Some(cl) => self.writing(txn, file_id, path, cl)?,
                None => match txn.inode(file_id)? {
                    Some(i) if is_file(&i) && !i.complete => i,
                    _ => {
                        txn.release_lease(file_id);
                        return Ok(());
                    }
                },
            };
            if ino.appending {
                let len = self.commit_blocks(txn, &mut ino, &[])?;
                set_data_len(&mut ino, len, 0);
                ino.complete = true;
                ino.appending = false;
                txn.del_meta(store::open_key(ino.id));
                txn.release_lease(ino.id);
                txn.put_inode(ino);
                return Ok(());
            }
            // A file under construction has exactly one name: its primary one.
            if txn.child(ino.parent, &ino.name)? == Some(ino.id) {
                txn.unlink_entry(ino.parent, &ino.name)?;
            }
            ino.nlink = 1;
            txn.release_inode(ino)?;
            Ok(())
        })
    }

    /// Remove files whose writer stopped renewing its lease.
    pub fn expire_leases(&self) -> FsResult<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        if !self.leads() {
            // a follower's leases are the leader's as of the last entry; it acts on none
            return Ok(out);
        }
        for id in self.leases.expired(self.conf.lease_timeout.0) {
            info!(inode = id, "lease expired; removing the partial file");
            let ((), seq) = self.abandon(id, "", None)?;
            out.push((id, seq));
        }
        Ok(out)
    }

    pub fn renew_lease(&self, client_id: u64, file_ids: &[u64]) {
        self.leases.renew(client_id, file_ids);
    }

    /// Committed blocks of `id` with their offsets and live locations.
    pub(super) fn located_blocks(&self, id: u64) -> FsResult<Vec<LocatedBlock>> {
        let Some(ino) = self.store.inode(id)? else {
            return Ok(Vec::new());
        };
        let live = self.workers.live_addresses();
        let mut out = Vec::with_capacity(ino.blocks.len());
        let mut offset = 0;
        for rec in self.store.blocks(&ino.blocks)?.into_iter().flatten() {
            if !rec.committed {
                continue;
            }
            let locations = rec
                .locs
                .iter()
                .filter_map(|l| {
                    live.get(&WorkerId(l.worker_id)).map(|a| BlockLocation {
                        worker_id: l.worker_id,
                        address: Some(a.clone()),
                        tier: l.tier,
                    })
                })
                .collect();
            out.push(LocatedBlock {
                block_id: rec.id,
                offset,
                len: rec.len,
                locations,
                ufs: None,
            });
            offset += rec.len;
        }
        Ok(out)
    }

    /// A file's status and committed blocks with their live locations. The service
    /// then checks that a block without one is not merely unreported yet
    /// (`check_locations_known`); the console shows what is known.
    pub fn open(&self, path: &str, c: &CallerInfo) -> FsResult<(FileStatus, Vec<LocatedBlock>)> {
        let w = self.walk(&*self.store, path, c, true)?;
        let ino = w.existing()?;
        if is_dir(ino) {
            return Err(FsError::IsADirectory {
                path: w.path.clone(),
            });
        }
        if !is_file(ino) {
            return Err(FsError::invalid(format!(
                "{}: not a regular file; its data is not in Curvine",
                w.path
            )));
        }
        check(c, ino, 4, || w.path.clone())?;
        self.note_open(ino);
        let mut blocks = self.located_blocks(ino.id)?;
        self.assign_fetchers(ino, &mut blocks, &c.client_host);
        Ok((status(ino, w.path.clone(), w.name.clone()), blocks))
    }

    pub fn truncate(&self, path: &str, len: u64, c: &CallerInfo) -> FsResult<(FileStatus, u64)> {
        self.mutate_call(c, |txn| {
            let w = self.walk(&*txn, path, c, true)?;
            let mut ino = w.existing()?.clone();
            if is_dir(&ino) {
                return Err(FsError::IsADirectory {
                    path: w.path.clone(),
                });
            }
            if !is_file(&ino) {
                return Err(FsError::invalid(format!("{}: not a regular file", w.path)));
            }
            if !ino.complete {
                return Err(FsError::FileIncomplete {
                    path: w.path.clone(),
                });
            }
            check(c, &ino, 2, || w.path.clone())?;
            if len > MAX_FILE_LEN {
                return Err(FsError::invalid(format!(
                    "{}: length {len} is past the largest file ({MAX_FILE_LEN})",
                    w.path
                )));
            }
            let data_len = ino.len - ino.tail_zeros.min(ino.len);
            if len >= data_len {
                // Only the hole past the blocks changes: extending writes no zeros.
                ino.tail_zeros = len - data_len;
            } else {
                trim_blocks(txn, &mut ino, len)?;
                ino.tail_zeros = 0;
            }
            ino.len = len;
            ino.mode = mode_after_write(c, &ino);
            ino.mtime_ms = txn.now;
            ino.ctime_ms = txn.now;
            self.mark_written(txn, &mut ino, &w.path);
            txn.put_inode(ino.clone());
            Ok(status(&ino, w.path.clone(), w.name.clone()))
        })
    }
}

/// Longest file: offsets must fit a signed 64-bit `off_t`.
pub(super) const MAX_FILE_LEN: u64 = i64::MAX as u64;

/// A writer's blocks now hold `data` bytes. The file keeps the length it had (the rest
/// is the hole a truncate or fallocate left past the blocks), grows to the data, or to
/// `min_len` when the writer extended it.
fn set_data_len(ino: &mut InodeRec, data: u64, min_len: u64) {
    let len = data.max(ino.len).max(min_len.min(MAX_FILE_LEN));
    ino.tail_zeros = len - data;
    ino.len = len;
}

/// Keep the first `len` bytes of `ino`'s blocks (the last one shortened); the
/// blocks past them are dropped.
fn trim_blocks(txn: &mut Txn<'_>, ino: &mut InodeRec, len: u64) -> FsResult<()> {
    let recs = txn.blocks(&ino.blocks)?;
    let mut keep = Vec::new();
    let mut offset = 0u64;
    for rec in recs.into_iter().flatten() {
        if offset >= len {
            txn.drop_block(&rec);
            continue;
        }
        if offset + rec.len > len {
            let mut r = rec.clone();
            r.len = len - offset;
            offset += r.len;
            keep.push(r.id);
            txn.put_block(r);
            continue;
        }
        offset += rec.len;
        keep.push(rec.id);
    }
    ino.blocks = keep;
    Ok(())
}
