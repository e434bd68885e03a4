//! Changes under a mount that the under-store must follow: read-only mounts refuse
//! every write (`ReadOnly`, EROFS); under `through` and `async` mounts a rename or a
//! delete of something the store holds applies to the store too.
//!
//! - Delete: Curvine first, then the store (the object, or every object under a
//!   directory's prefix). A store that fails leaves the object there (the next listing
//!   shows it again), never an entry whose data is gone.
//! - Rename of a persisted file: copy in the store, rename in Curvine, delete the old
//!   object, record the new key. A rename that Curvine refuses removes the copy again.
//! - Rename of a directory the store has objects under is refused, naming the store
//!   and the key: S3 has no atomic rename of a prefix, and copying each object would
//!   leave a half-renamed tree after a failure. A directory only in Curvine renames.
//! - A rename across a mount boundary is refused as a cross-device link (EXDEV), which
//!   `mv` answers by copying.

use std::sync::Arc;

use curvine_common::proto::{CallerInfo, MountMode};
use curvine_common::{FsError, FsResult};
use tracing::{info, warn};

use super::mounts::Mount;
use super::namespace::{is_dir, is_file, Namespace, Reader as _};
use super::records::InodeRec;
use crate::ufs;

fn norm(path: &str) -> FsResult<String> {
    curvine_common::path::normalize(path)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> FsResult<T> + Send + 'static,
) -> FsResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FsError::internal(format!("under-store write: {e}")))?
}

/// A mount whose store follows renames and deletes.
fn follows(m: &Mount) -> bool {
    m.info.mode != MountMode::Cache as i32
}

impl Namespace {
    /// Refuse a write of `path` under a read-only mount.
    pub fn check_writable(&self, path: &str) -> FsResult<()> {
        if self.mounts.is_empty() {
            return Ok(());
        }
        let Ok(p) = norm(path) else {
            return Ok(()); // the call itself refuses a bad path
        };
        match self.mounts.resolve(&p) {
            Some((m, _)) if m.info.read_only => Err(FsError::ReadOnly { path: p }),
            _ => Ok(()),
        }
    }

    fn lookup(self: &Arc<Self>, path: &str, c: &CallerInfo) -> FsResult<Option<InodeRec>> {
        match self.walk(&*self.store, path, c, false) {
            Ok(w) => Ok(w.inode),
            Err(FsError::NotFound { .. }) | Err(FsError::NotADirectory { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What a delete of `path` must remove from the store afterwards: (mount, key,
    /// whole prefix). `None` when the store is not involved.
    pub(super) async fn ufs_delete_target(
        self: &Arc<Self>,
        path: &str,
        c: &CallerInfo,
    ) -> FsResult<Option<(Arc<Mount>, String, bool)>> {
        if self.mounts.is_empty() {
            return Ok(None);
        }
        let p = norm(path)?;
        let Some((m, key)) = self.mounts.resolve(&p) else {
            return Ok(None);
        };
        if key.is_empty() || !follows(&m) {
            return Ok(None);
        }
        let ns = self.clone();
        let cc = c.clone();
        let pp = p.clone();
        let ino = blocking(move || ns.lookup(&pp, &cc)).await?;
        Ok(match ino {
            // not persisted yet: an older version may be in the store all the same
            Some(i) if is_file(&i) && i.ufs.is_some() => Some((m, key, false)),
            Some(i) if is_dir(&i) => Some((m, key, true)),
            _ => None,
        })
    }

    /// After Curvine deleted it: remove `key` (a directory: every object under it)
    /// from the store.
    pub(super) async fn ufs_delete(&self, m: &Mount, key: &str, dir: bool) -> FsResult<()> {
        let op = m.op()?;
        let r = if dir {
            op.delete_with(&format!("{key}/")).recursive(true).await
        } else {
            op.delete(key).await
        };
        match r {
            Ok(()) => {
                info!(ufs = %m.uri(), key, "deleted in the under-store");
                Ok(())
            }
            Err(e) if ufs::is_not_found(&e) => Ok(()),
            Err(e) => Err(ufs::store_err(m.uri(), key, &e)),
        }
    }

    /// Before a rename: check what the store allows and copy a persisted file to its
    /// new key. Returns what `ufs_rename_done` or `ufs_rename_undo` needs.
    pub(super) async fn ufs_rename_prepare(
        self: &Arc<Self>,
        src: &str,
        dst: &str,
        c: &CallerInfo,
    ) -> FsResult<Option<RenameCopy>> {
        if self.mounts.is_empty() {
            return Ok(None);
        }
        let (s, d) = (norm(src)?, norm(dst)?);
        let sm = self.mounts.resolve(&s);
        let dm = self.mounts.resolve(&d);
        let (sm, skey, dkey) = match (sm, dm) {
            (None, None) => return Ok(None),
            (Some((a, sk)), Some((b, dk))) if a.id() == b.id() => (a, sk, dk),
            _ => return Err(FsError::CrossDevice { path: d }),
        };
        if !follows(&sm) || skey.is_empty() || dkey.is_empty() {
            return Ok(None);
        }
        let ns = self.clone();
        let (cc, ss) = (c.clone(), s.clone());
        let Some(ino) = blocking(move || ns.lookup(&ss, &cc)).await? else {
            return Ok(None); // the rename itself says not found
        };
        let op = sm.op()?;
        if is_dir(&ino) {
            let stored = ino.ufs.as_ref().is_some_and(|u| u.persisted)
                || ufs::probe(sm.uri(), op, &skey).await?.is_some();
            if stored {
                return Err(FsError::UnderStore {
                    store: sm.uri().to_string(),
                    key: skey,
                    message: "cannot rename a directory the store holds objects under: the \
                              store has no atomic rename of a prefix (nothing was changed)"
                        .into(),
                });
            }
            return Ok(None);
        }
        if !is_file(&ino) || !ino.ufs.as_ref().is_some_and(|u| u.persisted) {
            return Ok(None); // not in the store yet: its upload takes the new name
        }
        op.copy(&skey, &dkey)
            .await
            .map_err(|e| ufs::store_err(sm.uri(), &skey, &e))?;
        Ok(Some(RenameCopy {
            mount: sm,
            id: ino.id,
            from: skey,
            to: dkey,
        }))
    }

    /// The rename in Curvine failed: remove the copy.
    pub(super) async fn ufs_rename_undo(&self, r: &RenameCopy) {
        if let Ok(op) = r.mount.op() {
            if let Err(e) = op.delete(&r.to).await {
                warn!(ufs = %r.mount.uri(), key = %r.to, error = %e,
                    "cannot remove the copy of a refused rename");
            }
        }
    }

    /// The rename in Curvine succeeded: delete the old object and record the new key.
    pub(super) async fn ufs_rename_done(self: &Arc<Self>, r: RenameCopy) -> FsResult<()> {
        let op = r.mount.op()?;
        let meta = op
            .stat(&r.to)
            .await
            .map_err(|e| ufs::store_err(r.mount.uri(), &r.to, &e))?;
        let obj = ufs::Object::from_meta(&r.to, &meta);
        let ns = self.clone();
        let (id, to) = (r.id, r.to.clone());
        let seq = blocking(move || {
            ns.mutate(0, |txn| {
                let Some(mut ino) = txn.inode(id)? else {
                    return Ok(());
                };
                if let Some(u) = ino.ufs.as_mut() {
                    u.key = to;
                    u.etag = obj.etag;
                    u.mtime_ms = obj.mtime_ms;
                    u.loaded_ms = txn.now;
                }
                txn.put_inode(ino);
                Ok(())
            })
        })
        .await?
        .1;
        self.syncer.wait(seq).await?;
        match op.delete(&r.from).await {
            Ok(()) => Ok(()),
            Err(e) if ufs::is_not_found(&e) => Ok(()),
            Err(e) => Err(ufs::store_err(r.mount.uri(), &r.from, &e)),
        }
    }
}

/// A persisted file copied to its new key before the rename in Curvine.
pub struct RenameCopy {
    mount: Arc<Mount>,
    id: u64,
    from: String,
    to: String,
}
