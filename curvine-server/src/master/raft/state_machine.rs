//! The state machine: each committed entry's journal entry run through `apply::step`,
//! its batch written together with the applied log id, then its effects applied to the
//! master's memory, on every replica alike (`Namespace::apply_committed`). Snapshots
//! are not built yet: the log is kept whole (`SnapshotPolicy::Never`).

use std::io::Cursor;
use std::sync::{Arc, Weak};

use curvine_common::FsError;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use prost::Message;

use super::super::namespace::Namespace;
use super::super::store::{Store, CF_RAFT_META};
use super::{wire, Cfg};

/// `raft_meta` key of the last applied log id and membership (`wire::WApplied`).
pub const APPLIED: &[u8] = b"applied";

pub struct StateMachine {
    store: Arc<Store>,
    /// The namespace whose memory the effects go to.
    ns: Weak<Namespace>,
    last: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
}

fn sm_err(verb: ErrorVerb, e: FsError) -> StorageError<u64> {
    StorageIOError::new(ErrorSubject::StateMachine, verb, AnyError::new(&e)).into()
}

impl StateMachine {
    pub fn open(store: Arc<Store>, ns: Weak<Namespace>) -> Result<StateMachine, FsError> {
        let (last, membership) = match store.raft_meta(APPLIED)? {
            Some(v) => wire::from_applied(&wire::decode("applied state", &v)?)?,
            None => (None, StoredMembership::default()),
        };
        Ok(StateMachine {
            store,
            ns,
            last,
            membership,
        })
    }

    fn apply_one(&mut self, e: &Entry<Cfg>) -> Result<(), FsError> {
        self.last = Some(e.log_id);
        if let EntryPayload::Membership(m) = &e.payload {
            self.membership = StoredMembership::new(Some(e.log_id), m.clone());
        }
        let applied = wire::applied(&self.last, &self.membership).encode_to_vec();
        match &e.payload {
            EntryPayload::Normal(p) => {
                let ns = self.ns.upgrade().ok_or_else(|| FsError::Unavailable {
                    message: "the namespace is closed".into(),
                })?;
                let entry = p.entry.clone().unwrap_or_default();
                ns.apply_committed(p.origin, &entry, APPLIED, &applied)
            }
            _ => {
                let mut b = rocksdb::WriteBatch::default();
                b.put_cf(self.store.cf(CF_RAFT_META)?, APPLIED, applied);
                self.store.write_raw(b, false)
            }
        }
    }
}

impl RaftStateMachine<Cfg> for StateMachine {
    type SnapshotBuilder = NoSnapshots;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        Ok((self.last, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<Cfg>> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        for e in entries {
            self.apply_one(&e)
                .map_err(|e| sm_err(ErrorVerb::Write, e))?;
            out.push(());
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        NoSnapshots
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Err(sm_err(ErrorVerb::Write, no_snapshots()))
    }

    async fn install_snapshot(
        &mut self,
        _meta: &SnapshotMeta<u64, BasicNode>,
        _snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        Err(sm_err(ErrorVerb::Write, no_snapshots()))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<Cfg>>, StorageError<u64>> {
        Ok(None)
    }
}

fn no_snapshots() -> FsError {
    FsError::Unavailable {
        message: "master snapshots are not implemented yet".into(),
    }
}

/// Snapshots come later (RocksDB checkpoints, docs/ha.md); the policy never asks.
pub struct NoSnapshots;

impl RaftSnapshotBuilder<Cfg> for NoSnapshots {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Cfg>, StorageError<u64>> {
        Err(sm_err(ErrorVerb::Read, no_snapshots()))
    }
}
