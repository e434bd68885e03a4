//! Upgrades of a namespace written by an older master, run once when the master opens
//! it, before any call is served. The `meta` key `format_version` names the format.
//!
//! - `1` -> `2`: a directory's nlink became 2 plus its subdirectories (it was 1, and
//!   mkdir, rmdir and rename only adjust it by one since), so each directory's count is
//!   computed from the inodes once.
//!
//! `format` writes the first state of an empty store.

use std::collections::HashMap;

use curvine_common::proto::FileType;
use curvine_common::types::now_ms;
use curvine_common::{FsError, FsResult, InodeId};
use prost::Message;
use tracing::info;

use super::records::{op::Kind, Counters, InodeRec, JournalEntry, MetaRec};
use super::store::{self, Store};

/// Inodes rewritten per journal entry (one RocksDB write batch).
const BATCH: usize = 1024;

/// Bring the formatted namespace in `store` to `Store::format_version()`.
pub(super) fn upgrade(store: &Store) -> FsResult<()> {
    let version = store.meta(store::META_FORMAT)?.unwrap_or_default();
    if version == Store::format_version() {
        return Ok(());
    }
    if version != b"1" {
        return Err(FsError::internal(format!(
            "metadata store: format {:?} is not one this master knows",
            String::from_utf8_lossy(&version)
        )));
    }
    let fixed = count_directory_links(store)?;
    info!(directories = fixed, "namespace upgraded to format 2");
    Ok(())
}

/// Set every directory's nlink to 2 plus its subdirectories, then record format 2 in
/// the last write. Returns how many directories changed.
fn count_directory_links(store: &Store) -> FsResult<usize> {
    let dir = FileType::Dir as i32;
    // directory id -> its nlink now; parent id -> subdirectories
    let mut dirs: HashMap<u64, u32> = HashMap::new();
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    store.for_each_inode(|i| {
        if i.file_type == dir {
            dirs.insert(i.id, i.nlink);
            // a directory has one name: `parent` is its only parent
            if i.parent != 0 {
                *subdirs.entry(i.parent).or_default() += 1;
            }
        }
        Ok(())
    })?;
    let mut entry = JournalEntry::default();
    let mut fixed = 0;
    for (id, nlink) in dirs {
        let want = 2 + subdirs.get(&id).copied().unwrap_or(0);
        if nlink == want {
            continue;
        }
        let Some(mut ino) = store.inode_for_scan(id)? else {
            continue;
        };
        ino.nlink = want;
        entry.push(Kind::PutInode(ino));
        fixed += 1;
        if entry.ops.len() == BATCH {
            store.apply(&std::mem::take(&mut entry))?;
        }
    }
    entry.push(Kind::PutMeta(MetaRec {
        key: store::META_FORMAT.to_vec(),
        value: Store::format_version().to_vec(),
    }));
    store.apply(&entry)?;
    store.sync_wal()?;
    Ok(fixed)
}

/// Format an empty store: the root, the counters, the cluster id (`cluster`, or a new
/// one) and the format version.
pub(super) fn format(store: &Store, cluster: Option<String>) -> FsResult<()> {
    // replicated masters format alike, so the root's times cannot be each one's clock
    let now = if cluster.is_some() { 0 } else { now_ms() };
    let root = InodeRec {
        id: InodeId::ROOT.0,
        file_type: FileType::Dir as i32,
        mode: 0o777,
        mtime_ms: now,
        atime_ms: now,
        ctime_ms: now,
        nlink: 2,
        ..Default::default()
    };
    let counters = Counters {
        next_inode: InodeId::ROOT.0 + 1,
        next_worker: 1,
        files: 0,
        dirs: 1,
        blocks: 0,
        next_mount: 1,
        retry_entries: 0,
        next_job: 1,
    };
    let pid = std::process::id();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let cluster_id = cluster.unwrap_or_else(|| format!("cv-{:x}-{:x}", nanos, pid));
    let mut e = JournalEntry::default();
    e.push(Kind::PutInode(root));
    e.push(Kind::PutMeta(MetaRec {
        key: store::META_COUNTERS.to_vec(),
        value: counters.encode_to_vec(),
    }));
    e.push(Kind::PutMeta(MetaRec {
        key: store::META_CLUSTER_ID.to_vec(),
        value: cluster_id.clone().into_bytes(),
    }));
    e.push(Kind::PutMeta(MetaRec {
        key: store::META_FORMAT.to_vec(),
        value: Store::format_version().to_vec(),
    }));
    store.apply(&e)?;
    store.sync_wal()?;
    info!(%cluster_id, "formatted a new namespace");
    Ok(())
}
