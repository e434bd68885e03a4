//! The state machine: each committed entry's journal entry run through `apply::step`,
//! its batch written together with the applied log id, then its effects applied to the
//! master's memory, on every replica alike (`Namespace::apply_committed`). Snapshots
//! (`snapshot`) are built every `master.snapshot_entries` applied entries, sent to a
//! follower the leader's log no longer serves, and installed there in place of its
//! namespace.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use curvine_common::FsError;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use prost::Message;
use tracing::info;

use super::super::namespace::Namespace;
use super::super::store::{Store, CF_RAFT_META};
use super::snapshot::{self, Meta};
use super::{wire, Cfg};

/// `raft_meta` key of the last applied log id and membership (`wire::WApplied`).
pub const APPLIED: &[u8] = b"applied";

/// This master's snapshot files, shared by the state machine and its builders.
pub struct Snaps {
    pub dir: PathBuf,
    node: u64,
    /// The meta of `current.snap`; held while it is replaced.
    current: Mutex<Option<Meta>>,
    /// Names the files of builds under way.
    seq: AtomicU64,
}

impl Snaps {
    fn lock(&self) -> MutexGuard<'_, Option<Meta>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current snapshot, opened for reading.
    fn open_current(&self) -> Result<Option<Snapshot<Cfg>>, FsError> {
        let cur = self.lock();
        let Some(meta) = cur.clone() else {
            return Ok(None);
        };
        let path = self.dir.join(snapshot::CURRENT);
        let f = std::fs::File::open(&path)
            .map_err(|e| FsError::io_ctx(format!("open {}", path.display()), e))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(f)),
        }))
    }

    /// Build a snapshot of `store` as of now and make it current (unless one as new is).
    fn build(&self, store: &Store) -> Result<Snapshot<Cfg>, FsError> {
        let tmp = format!("build-{}.tmp", self.seq.fetch_add(1, Ordering::Relaxed));
        let meta = snapshot::build(store, &self.dir, &tmp, self.node)?;
        {
            let mut cur = self.lock();
            if snapshot::publish(&self.dir, &self.dir.join(&tmp), &meta, &cur)? {
                info!(snapshot = %meta.snapshot_id, "built a namespace snapshot");
                *cur = Some(meta);
            }
        }
        self.open_current()?
            .ok_or_else(|| FsError::internal("a snapshot built vanished"))
    }
}

pub struct StateMachine {
    store: Arc<Store>,
    /// The namespace whose memory the effects go to.
    ns: Weak<Namespace>,
    last: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    snaps: Arc<Snaps>,
}

fn sm_err(verb: ErrorVerb, e: FsError) -> StorageError<u64> {
    StorageIOError::new(ErrorSubject::StateMachine, verb, AnyError::new(&e)).into()
}

fn snap_err(verb: ErrorVerb, e: FsError) -> StorageError<u64> {
    StorageIOError::new(ErrorSubject::Snapshot(None), verb, AnyError::new(&e)).into()
}

/// Run blocking file and RocksDB work off the raft runtime's two threads.
async fn blocking<T: Send + 'static>(
    verb: ErrorVerb,
    f: impl FnOnce() -> Result<T, FsError> + Send + 'static,
) -> Result<T, StorageError<u64>> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| snap_err(verb, FsError::internal(format!("snapshot task: {e}"))))?
        .map_err(|e| snap_err(verb, e))
}

impl StateMachine {
    pub fn open(
        store: Arc<Store>,
        ns: Weak<Namespace>,
        dir: PathBuf,
        node: u64,
    ) -> Result<StateMachine, FsError> {
        let (last, membership) = match store.raft_meta(APPLIED)? {
            Some(v) => wire::from_applied(&wire::decode("applied state", &v)?)?,
            None => (None, StoredMembership::default()),
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| FsError::io_ctx(format!("create {}", dir.display()), e))?;
        let current_path = dir.join(snapshot::CURRENT);
        let current = if current_path.exists() {
            Some(snapshot::read_meta(&current_path)?)
        } else {
            None
        };
        Ok(StateMachine {
            store,
            ns,
            last,
            membership,
            snaps: Arc::new(Snaps {
                dir,
                node,
                current: Mutex::new(current),
                seq: AtomicU64::new(0),
            }),
        })
    }

    /// Apply `e`; `false`: a proposal logged in another term than it was built in
    /// (`Proposal::term`), applied as nothing.
    fn apply_one(&mut self, e: &Entry<Cfg>) -> Result<bool, FsError> {
        self.last = Some(e.log_id);
        if let EntryPayload::Membership(m) = &e.payload {
            self.membership = StoredMembership::new(Some(e.log_id), m.clone());
        }
        let applied = wire::applied(&self.last, &self.membership).encode_to_vec();
        match &e.payload {
            EntryPayload::Normal(p) if p.term == 0 || p.term == e.log_id.leader_id.term => {
                let ns = self.namespace()?;
                let entry = p.entry.clone().unwrap_or_default();
                ns.apply_committed(p, &entry, APPLIED, &applied)?;
                Ok(true)
            }
            _ => {
                let mut b = rocksdb::WriteBatch::default();
                b.put_cf(self.store.cf(CF_RAFT_META)?, APPLIED, applied);
                self.store.write_raw(b, false)?;
                Ok(!matches!(e.payload, EntryPayload::Normal(_)))
            }
        }
    }

    fn namespace(&self) -> Result<Arc<Namespace>, FsError> {
        self.ns.upgrade().ok_or_else(|| FsError::Unavailable {
            message: "the namespace is closed".into(),
        })
    }
}

impl RaftStateMachine<Cfg> for StateMachine {
    type SnapshotBuilder = Builder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        Ok((self.last, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<bool>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<Cfg>> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        for e in entries {
            let applied = self
                .apply_one(&e)
                .map_err(|e| sm_err(ErrorVerb::Write, e))?;
            out.push(applied);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        Builder {
            store: self.store.clone(),
            snaps: self.snaps.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<tokio::fs::File>, StorageError<u64>> {
        // snapshots arrive through `RaftService` (`network::RaftSvc::snapshot_chunk`),
        // which checks them whole before they are installed
        Err(snap_err(
            ErrorVerb::Write,
            FsError::internal("master snapshots are received by the raft service"),
        ))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError<u64>> {
        drop(snapshot);
        let (store, snaps) = (self.store.clone(), self.snaps.clone());
        let ns = self.namespace().map_err(|e| sm_err(ErrorVerb::Write, e))?;
        let id = meta.snapshot_id.clone();
        let m = blocking(ErrorVerb::Write, move || {
            let from = snapshot::received(&snaps.dir, &id);
            let mut cur = snaps.lock();
            let m = snapshot::install(&store, &snaps.dir, &from)?;
            *cur = Some(m.clone());
            drop(cur);
            ns.reload_after_snapshot()?;
            Ok(m)
        })
        .await?;
        info!(snapshot = %m.snapshot_id, last = ?m.last_log_id, "installed a namespace snapshot from the leader");
        self.last = m.last_log_id;
        self.membership = m.last_membership;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<Cfg>>, StorageError<u64>> {
        let snaps = self.snaps.clone();
        blocking(ErrorVerb::Read, move || snaps.open_current()).await
    }
}

/// Builds a snapshot in a blocking thread, while entries go on being applied: it reads
/// through a RocksDB snapshot, so it is the state as of the entry applied last when it
/// began (`snapshot::build`).
pub struct Builder {
    store: Arc<Store>,
    snaps: Arc<Snaps>,
}

impl RaftSnapshotBuilder<Cfg> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Cfg>, StorageError<u64>> {
        let (store, snaps) = (self.store.clone(), self.snaps.clone());
        blocking(ErrorVerb::Read, move || snaps.build(&store)).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::log_store::tests::proposal_entry as entry;
    use super::*;

    /// A proposal logged in another term than it was built in is applied as nothing
    /// (its log id still counts as applied); one logged in its term is applied.
    #[test]
    fn a_proposal_counts_only_in_its_term() {
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(d.path(), 1 << 20, 1 << 20, 16, 64 << 10).unwrap());
        let mut sm = StateMachine::open(store, Weak::new(), d.path().join("snap"), 1).unwrap();
        assert!(!sm.apply_one(&entry(3, 4, 1)).unwrap());
        assert_eq!(sm.last.map(|l| l.index), Some(1));
        // in its term it goes on to the namespace (closed here, so it fails)
        assert!(sm.apply_one(&entry(4, 4, 2)).is_err());
        assert!(sm.apply_one(&entry(0, 4, 3)).is_err());
    }
}
