//! Files unlinked or renamed over while open in this mount: POSIX keeps such a file
//! alive until its last close, so the mount moves it under a hidden directory at its
//! root instead of deleting it, and deletes it at the last release.

use curvine_client::{CurvineFs, FsError, SetAttr as CvSetAttr};
use fuse3::Result;
use std::sync::atomic::Ordering;
use tracing::{debug, warn};

use super::{lock, CurvineFuse};
use crate::attr::errno;

/// Where unlinked-but-open files wait for their last close, under the mount's root;
/// readdir leaves it out.
pub(crate) const HIDDEN_DIR: &str = ".curvine-hidden-files";

impl CurvineFuse {
    /// Whether the file at `path` is open in this mount.
    pub(crate) fn open_here(&self, path: &str) -> bool {
        self.inodes.ino_at(path).is_some_and(|ino| self.in_use(ino))
    }

    /// POSIX keeps an unlinked file alive while it is open. Before `path` is unlinked
    /// or renamed over, a file open in this mount is moved under a hidden directory at
    /// the mount's root instead (so its old directory can still be removed); its handles
    /// keep working and the last release deletes it. Returns the inode and hidden name
    /// when it did (then `path` is gone).
    pub(crate) async fn hide_if_open(
        &self,
        fs: &CurvineFs,
        path: &str,
    ) -> Result<Option<(u64, String)>> {
        let Some(ino) = self.inodes.ino_at(path) else {
            return Ok(None);
        };
        if !self.in_use(ino) {
            return Ok(None);
        }
        let dir = self.hidden_dir().await?;
        let n = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let hidden =
            curvine_common::path::child(&dir, &format!("{ino:x}-{n}-{}", std::process::id()));
        // no-replace: never clobber anything that happens to have the name
        fs.rename_with_flags(path, &hidden, 1)
            .await
            .map_err(|e| errno(&e))?;
        self.inodes.renamed(path, &hidden, false);
        debug!(path, hidden, "open file unlinked: kept under a hidden name");
        let old = lock(&self.hidden).insert(ino, hidden.clone());
        if let Some(old) = old {
            // the same open file unlinked again under another name it had
            self.delete_hidden(&old).await;
        }
        Ok(Some((ino, hidden)))
    }

    /// `<mount root>/.curvine-hidden-files`, made on first use: sticky and writable by
    /// all (like /tmp), since files are moved there as the user who unlinks them.
    async fn hidden_dir(&self) -> Result<String> {
        let dir = curvine_common::path::child(&self.opts.fs_path, HIDDEN_DIR);
        match self.fs.mkdir(&dir, false).await {
            Ok(_) => {
                let mode = CvSetAttr {
                    mode: Some(0o1777),
                    ..Default::default()
                };
                self.fs.set_attr(&dir, mode).await.map_err(|e| errno(&e))?;
            }
            Err(FsError::AlreadyExists { .. }) => {}
            Err(e) => return Err(errno(&e)),
        }
        Ok(dir)
    }

    /// Undo `hide_if_open` (the rename that needed it failed).
    pub(crate) async fn unhide(&self, fs: &CurvineFs, ino: u64, hidden: &str, path: &str) {
        match fs.rename_with_flags(hidden, path, 1).await {
            Ok(()) => {
                self.inodes.renamed(hidden, path, false);
                lock(&self.hidden).remove(&ino);
            }
            Err(e) => warn!(path, hidden, error = %e, "could not restore an open file's name"),
        }
    }

    pub(super) async fn remove_hidden(&self, ino: u64) {
        if self.in_use(ino) {
            return;
        }
        let Some(path) = lock(&self.hidden).remove(&ino) else {
            return;
        };
        self.delete_hidden(&path).await;
    }

    async fn delete_hidden(&self, path: &str) {
        match self.fs.delete(path, false).await {
            Ok(_) | Err(FsError::NotFound { .. }) => self.inodes.unlinked(path),
            Err(e) => warn!(path, error = %e, "could not delete an unlinked file's hidden name"),
        }
    }
}
