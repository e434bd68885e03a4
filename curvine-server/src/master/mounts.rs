//! The mount table: Curvine directories that mirror an under-store. Records live in
//! the `meta` column family (`mnt/` ‖ mount id) and change by journal entries like every
//! other mutation; the operators built from them are kept here, in memory.
//!
//! Mounting checks the store (a listing of its root) before anything changes, outside
//! the namespace lock; mounts and unmounts run one at a time.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use curvine_common::mount::redacted;
use curvine_common::proto::{CallerInfo, MountInfo, MountMode};
use curvine_common::types::now_ms;
use curvine_common::{FsError, FsResult};
use opendal::Operator;
use prost::Message;
use tracing::{info, warn};

use super::apply::MountChange;
use super::namespace::{is_dir, Namespace};
use super::records::UfsRec;
use super::store::Store;
use crate::ufs;

/// `mnt/` ‖ mount id (BE u64) -> encoded `proto::MountInfo`.
pub const META_MOUNT_PREFIX: &[u8] = b"mnt/";

pub fn mount_key(id: u64) -> Vec<u8> {
    let mut k = META_MOUNT_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The mount id of a `meta` key of the mount table (the inverse of `mount_key`).
pub fn mount_id(key: &[u8]) -> Option<u64> {
    let id = key.strip_prefix(META_MOUNT_PREFIX)?;
    Some(u64::from_be_bytes(id.try_into().ok()?))
}

/// One mount and its operator.
pub struct Mount {
    /// As stored and listed: a credentials file is named, its values are not here.
    pub info: MountInfo,
    /// Made when the mount was loaded: the options the operator is built from (with the
    /// credentials file's values), and the operator. An error (a stored mount whose
    /// options this build no longer accepts, a credentials file gone) fails every call
    /// on it, naming the cause.
    built: Result<(HashMap<String, String>, Operator), FsError>,
}

impl Mount {
    /// Build the mount's operator (its credentials file read); a store that cannot be
    /// built is logged, and the mount kept.
    fn new(info: MountInfo) -> Arc<Mount> {
        let built = ufs::resolve(&info.ufs_uri, &info.options)
            .and_then(|o| Ok((ufs::build(&info.ufs_uri, &o)?, o)))
            .map(|(op, o)| (o, op));
        if let Err(e) = &built {
            warn!(path = %info.path, ufs = %info.ufs_uri, error = %e, "cannot build a mount's under-store");
        }
        Arc::new(Mount { info, built })
    }

    pub fn op(&self) -> FsResult<&Operator> {
        self.built.as_ref().map(|(_, op)| op).map_err(Clone::clone)
    }
    pub fn uri(&self) -> &str {
        &self.info.ufs_uri
    }
    pub fn id(&self) -> u64 {
        self.info.mount_id
    }
    /// Listed for people: secrets out.
    pub fn public_info(&self) -> MountInfo {
        public(self.info.clone())
    }
}

/// A mount as callers see it: option values that are secrets redacted.
fn public(mut info: MountInfo) -> MountInfo {
    info.options = redacted(&info.options);
    info
}

#[derive(Default)]
pub struct Mounts {
    table: RwLock<Vec<Arc<Mount>>>,
    /// Mount and unmount one at a time (each checks the table, then changes it).
    pub(super) change: tokio::sync::Mutex<()>,
}

/// Whether `a` is `b` or lies under it.
fn within(a: &str, b: &str) -> bool {
    b == "/" || a == b || (a.starts_with(b) && a.as_bytes().get(b.len()) == Some(&b'/'))
}

impl Mounts {
    pub fn load(store: &Store) -> FsResult<Mounts> {
        let mut table = Vec::new();
        for (_, v) in store.meta_scan(META_MOUNT_PREFIX)? {
            let info = MountInfo::decode(&*v)
                .map_err(|e| FsError::internal(format!("metadata store: corrupt mount: {e}")))?;
            table.push(Mount::new(info));
        }
        Ok(Mounts {
            table: RwLock::new(table),
            change: Default::default(),
        })
    }

    /// Take the mounts `store` records (a snapshot replaced the namespace).
    pub fn reload(&self, store: &Store) -> FsResult<()> {
        let fresh = Mounts::load(store)?;
        let table = fresh.table.into_inner().unwrap_or_else(|p| p.into_inner());
        *self.write() = table;
        Ok(())
    }

    /// Apply a committed change of the table (on every master, in log order). A mount's
    /// operator is built here, its credentials file read: a mount whose store cannot be
    /// built stays in the table and fails each call on it, naming the cause.
    pub(super) fn apply(&self, change: &MountChange) {
        match change {
            MountChange::Put(info) => {
                let m = Mount::new(info.clone());
                let mut t = self.write();
                t.retain(|x| x.id() != m.id());
                t.push(m);
            }
            MountChange::Del(id) => self.write().retain(|x| x.id() != *id),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Mount>>> {
        self.table.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<Mount>>> {
        self.table.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    pub fn list(&self) -> Vec<Arc<Mount>> {
        let mut v = self.read().clone();
        v.sort_by(|a, b| a.info.path.cmp(&b.info.path));
        v
    }

    pub fn by_id(&self, id: u64) -> Option<Arc<Mount>> {
        self.read().iter().find(|m| m.id() == id).cloned()
    }

    pub fn by_path(&self, path: &str) -> Option<Arc<Mount>> {
        self.read().iter().find(|m| m.info.path == path).cloned()
    }

    /// The mount `path` (normalized) lies in, and the key of `path` relative to the
    /// mount's root ("" for the mount point itself).
    pub fn resolve(&self, path: &str) -> Option<(Arc<Mount>, String)> {
        let t = self.read();
        let m = t.iter().find(|m| within(path, &m.info.path))?;
        let rel = path[m.info.path.len()..]
            .trim_start_matches('/')
            .to_string();
        Some((m.clone(), rel))
    }

    /// The mount `path` conflicts with: one at, inside or above it.
    fn conflict(&self, path: &str) -> Option<Arc<Mount>> {
        self.read()
            .iter()
            .find(|m| within(path, &m.info.path) || within(&m.info.path, path))
            .cloned()
    }
}

fn root_caller() -> CallerInfo {
    CallerInfo::default()
}

impl Namespace {
    /// Mount `req.ufs_uri` at `req.path`: refused with nothing changed when the options
    /// are unknown, the store cannot be listed, the mount point exists and is not an
    /// empty directory, or another mount is at, inside or above it.
    pub async fn mount(self: &Arc<Self>, req: MountInfo, c: &CallerInfo) -> FsResult<MountInfo> {
        let path = curvine_common::path::normalize(&req.path)?;
        if path == "/" {
            return Err(FsError::invalid("cannot mount on /"));
        }
        // the credentials file is read now, and again at each start
        let (uri, o) = (req.ufs_uri.clone(), req.options.clone());
        let resolved = tokio::task::spawn_blocking(move || ufs::resolve(&uri, &o))
            .await
            .map_err(|e| FsError::internal(format!("mount: {e}")))??;
        let op = ufs::build(&req.ufs_uri, &resolved)?;
        let _one = self.mounts.change.lock().await;
        if let Some(m) = self.mounts.conflict(&path) {
            return Err(FsError::invalid(format!(
                "{path}: overlaps mount {} of {} (mounts cannot be nested)",
                m.info.path, m.info.ufs_uri
            )));
        }
        // the mount point, before asking the store: a cheap refusal first
        let ns = self.clone();
        let (p, cc) = (path.clone(), c.clone());
        tokio::task::spawn_blocking(move || ns.check_mount_point(&p, &cc))
            .await
            .map_err(|e| FsError::internal(format!("mount: {e}")))??;
        ufs::check(&req.ufs_uri, &op).await?;
        let ns = self.clone();
        let (p, cc) = (path.clone(), c.clone());
        let mut info = req;
        info.path = path.clone();
        info.created_ms = now_ms();
        if info.mode == MountMode::Unspecified as i32 {
            info.mode = MountMode::Through as i32;
        }
        let (info, seq) = tokio::task::spawn_blocking(move || ns.record_mount(info, &p, &cc))
            .await
            .map_err(|e| FsError::internal(format!("mount: {e}")))??;
        self.syncer.wait(seq).await?;
        // the table took the mount when its entry was applied (`Mounts::apply`)
        info!(path = %info.path, ufs = %info.ufs_uri, id = info.mount_id,
            options = %ufs::loggable(&info.options), "mounted");
        Ok(public(info))
    }

    fn check_mount_point(&self, path: &str, c: &CallerInfo) -> FsResult<()> {
        match self.walk(&*self.store, path, c, false) {
            Ok(w) => match &w.inode {
                Some(i) if !is_dir(i) => Err(FsError::NotADirectory { path: w.path }),
                Some(i) if i.children > 0 => Err(FsError::DirectoryNotEmpty { path: w.path }),
                _ => Ok(()),
            },
            // missing parents are made
            Err(FsError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn record_mount(
        &self,
        mut info: MountInfo,
        path: &str,
        c: &CallerInfo,
    ) -> FsResult<(MountInfo, u64)> {
        self.mutate(c.client_id, |txn| {
            let existing = match self.walk(&*txn, path, c, false) {
                Ok(w) => w.inode,
                Err(FsError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            let mut dir = match existing {
                Some(i) if !is_dir(&i) => return Err(FsError::NotADirectory { path: path.into() }),
                Some(i) if i.children > 0 => {
                    return Err(FsError::DirectoryNotEmpty { path: path.into() })
                }
                Some(i) => i,
                None => self.mkdir_in(txn, path, true, 0o755, c)?,
            };
            let id = txn.counters.next_mount.max(1);
            txn.counters.next_mount = id + 1;
            info.mount_id = id;
            dir.mount_id = id;
            dir.ufs = Some(Box::new(UfsRec {
                mount_id: id,
                persisted: true,
                ..Default::default()
            }));
            txn.put_inode(dir);
            txn.put_meta(mount_key(id), info.encode_to_vec());
            Ok(info)
        })
    }

    /// Remove the mount at `path`: what Curvine holds of it (entries, cached blocks)
    /// goes; the mount point stays as an empty directory; the under-store is untouched.
    /// A mount of `master.delete_batch` entries or more is removed in the background
    /// (`purge`), its mount point replaced by a new empty directory in this entry.
    pub async fn umount(self: &Arc<Self>, path: &str, c: &CallerInfo) -> FsResult<()> {
        let path = curvine_common::path::normalize(path)?;
        let _one = self.mounts.change.lock().await;
        let Some(m) = self.mounts.by_path(&path) else {
            return Err(FsError::invalid(format!("{path}: not a mount point")));
        };
        let ns = self.clone();
        let (p, cc, id) = (path.clone(), c.clone(), m.id());
        let (detached, seq) = tokio::task::spawn_blocking(move || {
            ns.mutate(cc.client_id, |txn| {
                let w = ns.walk(&*txn, &p, &cc, false)?;
                let mut dir = w.existing()?.clone();
                if let Some(parent) = &w.parent {
                    super::namespace::check(&cc, parent, 3, || w.parent_path())?;
                }
                txn.del_meta(mount_key(id));
                let limit = u64::from(ns.conf.delete_batch.max(1));
                if let Some(parent) = w.parent.as_ref().filter(|_| dir.children > 0) {
                    if Namespace::count_below(txn, &dir, limit)? >= limit {
                        // too much for one entry: the mount point's directory, with
                        // everything below it, goes to the purge task, and a new empty
                        // one (same name, owner, mode and times) takes its place
                        let mut fresh = dir.clone();
                        fresh.id = txn.alloc_inode();
                        fresh.children = 0;
                        fresh.nlink = 2;
                        fresh.mount_id = 0;
                        fresh.ufs = None;
                        fresh.ctime_ms = txn.now;
                        ns.detach(txn, parent.id, &w.name, dir.id)?;
                        txn.link_entry_as(parent.id, &w.name, fresh.id, true)?;
                        txn.put_inode(fresh);
                        txn.counters.dirs += 1;
                        return Ok(true);
                    }
                }
                if dir.children > 0 {
                    ns.delete_contents(txn, &dir, &p, &root_caller())?;
                    dir = txn.must_inode(dir.id)?;
                    dir.children = 0;
                }
                dir.mount_id = 0;
                dir.ufs = None;
                txn.put_inode(dir);
                Ok(false)
            })
        })
        .await
        .map_err(|e| FsError::internal(format!("umount: {e}")))??;
        self.syncer.wait(seq).await?;
        if detached {
            self.purge.wake();
        }
        info!(path = %path, ufs = %m.info.ufs_uri, "unmounted");
        Ok(())
    }

    /// Apply the `[[mount]]` entries of the configuration: a mount already there with
    /// the same store is kept; a conflicting one is refused, naming the entry.
    pub async fn apply_conf_mounts(
        self: &Arc<Self>,
        mounts: &[curvine_common::mount::MountConf],
    ) -> FsResult<()> {
        for m in mounts {
            let info = m.to_info()?;
            let path = curvine_common::path::normalize(&info.path)?;
            if let Some(have) = self.mounts.by_path(&path) {
                if have.info.ufs_uri == info.ufs_uri {
                    continue;
                }
            }
            self.mount(info, &root_caller())
                .await
                .map_err(|e| FsError::config(format!("[[mount]] {} at {}: {e}", m.ufs, m.path)))?;
        }
        Ok(())
    }

    pub fn list_mounts(&self) -> Vec<MountInfo> {
        self.mounts.list().iter().map(|m| m.public_info()).collect()
    }

    /// Mount `id` for a worker building its operator: when `secrets` (the caller is a
    /// registered worker) with the options its operator was built from (the
    /// credentials file's values in, the file's name out), else as people see it.
    pub fn get_mount(&self, id: u64, secrets: bool) -> FsResult<MountInfo> {
        let m = self
            .mounts
            .by_id(id)
            .ok_or_else(|| FsError::invalid(format!("no mount with id {id}")))?;
        if !secrets {
            return Ok(m.public_info());
        }
        let (options, _) = m.built.as_ref().map_err(Clone::clone)?;
        let mut info = m.info.clone();
        info.options = options.clone();
        Ok(info)
    }
}
