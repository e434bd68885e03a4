//! The Raft log and vote in the master's RocksDB (column families `raft_log` and
//! `raft_meta`), beside the namespace: one WAL, so an append or a vote is durable once
//! that WAL is synced.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use curvine_common::FsError;
use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, StorageError, StorageIOError, Vote};
use prost::Message;
use rocksdb::WriteBatch;

use super::super::store::{Store, CF_RAFT_LOG, CF_RAFT_META};
use super::{wire, Cfg};

const VOTE: &[u8] = b"vote";
pub const PURGED: &[u8] = b"purged";
const COMMITTED: &[u8] = b"committed";

/// The log store; its clones read the same log (openraft's replication streams).
#[derive(Clone)]
pub struct LogStore {
    store: Arc<Store>,
    /// Sync the WAL before an append or a vote counts as done (`journal.sync`).
    sync: bool,
}

type StResult<T> = Result<T, StorageError<u64>>;

fn read_err(e: FsError) -> StorageError<u64> {
    StorageIOError::read_logs(AnyError::new(&e)).into()
}

fn write_err(e: FsError) -> StorageError<u64> {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

impl LogStore {
    pub fn new(store: Arc<Store>, sync: bool) -> LogStore {
        LogStore { store, sync }
    }

    fn meta_log_id(&self, key: &[u8]) -> Result<Option<LogId<u64>>, FsError> {
        match self.store.raft_meta(key)? {
            Some(v) => Ok(Some(wire::from_log_id(&wire::decode::<wire::WLogId>(
                "log id", &v,
            )?))),
            None => Ok(None),
        }
    }

    fn entries(&self, from: u64, to: u64) -> Result<Vec<Entry<Cfg>>, FsError> {
        self.store
            .raft_log(from, to)?
            .iter()
            .map(|v| wire::from_entry(wire::decode("log entry", v)?))
            .collect()
    }

    fn write(&self, b: WriteBatch) -> Result<(), FsError> {
        self.store.write_raw(b, self.sync)
    }

    /// Write `entries` (durably with `sync`).
    fn append_now(&self, entries: impl IntoIterator<Item = Entry<Cfg>>) -> Result<(), FsError> {
        let mut b = WriteBatch::default();
        let cf = self.cf(CF_RAFT_LOG)?;
        for e in entries {
            b.put_cf(
                cf,
                e.log_id.index.to_be_bytes(),
                wire::entry(&e).encode_to_vec(),
            );
        }
        self.write(b)
    }

    fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily, FsError> {
        self.store.cf(name)
    }
}

impl RaftLogReader<Cfg> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> StResult<Vec<Entry<Cfg>>> {
        let from = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => u64::MAX,
        };
        self.entries(from, to).map_err(read_err)
    }
}

impl RaftLogStorage<Cfg> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StResult<LogState<Cfg>> {
        let purged = self.meta_log_id(PURGED).map_err(read_err)?;
        let last = match self.store.raft_log_last().map_err(read_err)? {
            Some(v) => {
                let e: wire::WEntry = wire::decode("log entry", &v).map_err(read_err)?;
                wire::from_opt_log_id(&e.log_id)
            }
            None => purged,
        };
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> StResult<()> {
        let mut b = WriteBatch::default();
        let cf = self.cf(CF_RAFT_META).map_err(write_err)?;
        b.put_cf(cf, VOTE, wire::vote(vote).encode_to_vec());
        self.write(b)
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)).into())
    }

    async fn read_vote(&mut self) -> StResult<Option<Vote<u64>>> {
        let read = || -> Result<Option<Vote<u64>>, FsError> {
            match self.store.raft_meta(VOTE)? {
                Some(v) => Ok(Some(wire::from_vote(Some(&wire::decode("vote", &v)?))?)),
                None => Ok(None),
            }
        };
        read().map_err(|e| StorageIOError::read_vote(AnyError::new(&e)).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> StResult<()> {
        // not synced: after a crash the committed index is learned again from the leader
        let mut b = WriteBatch::default();
        let cf = self.cf(CF_RAFT_META).map_err(write_err)?;
        match committed {
            Some(c) => b.put_cf(cf, COMMITTED, wire::log_id(&c).encode_to_vec()),
            None => b.delete_cf(cf, COMMITTED),
        }
        self.store.write_raw(b, false).map_err(write_err)
    }

    async fn read_committed(&mut self) -> StResult<Option<LogId<u64>>> {
        self.meta_log_id(COMMITTED).map_err(read_err)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<Cfg>) -> StResult<()>
    where
        I: IntoIterator<Item = Entry<Cfg>> + Send,
        I::IntoIter: Send,
    {
        let res = self.append_now(entries);
        let io = res
            .as_ref()
            .map(|_| ())
            .map_err(|e| std::io::Error::other(e.to_string()));
        callback.log_io_completed(io);
        res.map_err(write_err)
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> StResult<()> {
        let mut b = WriteBatch::default();
        let cf = self.cf(CF_RAFT_LOG).map_err(write_err)?;
        b.delete_range_cf(cf, log_id.index.to_be_bytes(), u64::MAX.to_be_bytes());
        b.delete_cf(cf, u64::MAX.to_be_bytes());
        self.write(b).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> StResult<()> {
        let mut b = WriteBatch::default();
        let (log, meta) = (
            self.cf(CF_RAFT_LOG).map_err(write_err)?,
            self.cf(CF_RAFT_META).map_err(write_err)?,
        );
        b.put_cf(meta, PURGED, wire::log_id(&log_id).encode_to_vec());
        b.delete_range_cf(
            log,
            0u64.to_be_bytes(),
            log_id.index.saturating_add(1).to_be_bytes(),
        );
        self.write(b).map_err(write_err)
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::master::raft::Proposal;
    use crate::master::records::{op::Kind, JournalEntry};

    fn open(dir: &std::path::Path) -> LogStore {
        let s = Store::open(dir, 1 << 20, 1 << 20, 16, 64 << 10).unwrap();
        LogStore::new(Arc::new(s), true)
    }

    fn entry(term: u64, index: u64) -> Entry<Cfg> {
        let mut je = JournalEntry::default();
        je.push(Kind::DelInode(index));
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Proposal {
                origin: 7,
                entry: Some(je),
                parts: Vec::new(),
            }),
        }
    }

    async fn append(s: &mut LogStore, es: Vec<Entry<Cfg>>) {
        // what `RaftLogStorage::append` writes before it calls back
        s.append_now(es).unwrap();
    }

    fn indexes(es: &[Entry<Cfg>]) -> Vec<u64> {
        es.iter().map(|e| e.log_id.index).collect()
    }

    /// Appends, a truncation, a purge and the vote are all there after a reopen.
    #[tokio::test]
    async fn the_log_and_vote_survive_reopen() {
        let d = tempfile::tempdir().unwrap();
        {
            let mut s = open(d.path());
            let st = s.get_log_state().await.unwrap();
            assert_eq!((st.last_log_id, st.last_purged_log_id), (None, None));
            assert_eq!(s.read_vote().await.unwrap(), None);
            append(&mut s, (1..=10).map(|i| entry(1, i)).collect()).await;
            // a new leader's entries replace the tail from 8
            s.truncate(LogId::new(CommittedLeaderId::new(1, 1), 8))
                .await
                .unwrap();
            append(&mut s, vec![entry(2, 8), entry(2, 9)]).await;
            s.purge(LogId::new(CommittedLeaderId::new(1, 1), 3))
                .await
                .unwrap();
            s.save_vote(&Vote::new_committed(2, 3)).await.unwrap();
        }
        let mut s = open(d.path());
        let st = s.get_log_state().await.unwrap();
        assert_eq!(
            st.last_log_id.map(|l| (l.leader_id.term, l.index)),
            Some((2, 9))
        );
        assert_eq!(st.last_purged_log_id.map(|l| l.index), Some(3));
        let all = s.try_get_log_entries(0..).await.unwrap();
        assert_eq!(indexes(&all), [4, 5, 6, 7, 8, 9]);
        assert_eq!(
            all[4].log_id.leader_id.term, 2,
            "the truncated tail is gone"
        );
        assert_eq!(all[0], entry(1, 4), "entries come back as they went in");
        assert_eq!(
            indexes(&s.try_get_log_entries(5..=6).await.unwrap()),
            [5, 6]
        );
        assert_eq!(
            s.read_vote().await.unwrap(),
            Some(Vote::new_committed(2, 3))
        );
        // purging everything leaves the purged id as the last one
        s.purge(LogId::new(CommittedLeaderId::new(2, 1), 9))
            .await
            .unwrap();
        let st = s.get_log_state().await.unwrap();
        assert_eq!(st.last_log_id.map(|l| l.index), Some(9));
        assert!(s.try_get_log_entries(0..).await.unwrap().is_empty());
    }
}
