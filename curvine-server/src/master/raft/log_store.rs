//! The Raft log and vote in the master's RocksDB (column families `raft_log` and
//! `raft_meta`), beside the namespace: one WAL, so an append or a vote is durable once
//! that WAL is synced.
//!
//! An append is written unsynced and readable at once; the master's WAL sync thread
//! (`Syncer`) makes it durable, and openraft is told so, in log order, by one flusher
//! task. Raft's core goes on meanwhile (a leader sends the entries to its followers
//! while its own sync runs), and appends that come during a sync share the next one.
//!
//! The newest entries are also kept decoded in memory (`Recent`): the reads that
//! follow an append (replication to each follower, the state machine's apply) are
//! served from there instead of a RocksDB scan and a decode each.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

use curvine_common::FsError;
use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, StorageError, StorageIOError, Vote};
use prost::Message;
use rocksdb::WriteBatch;
use tokio::sync::mpsc;

use super::super::store::{Store, CF_RAFT_LOG, CF_RAFT_META};
use super::super::syncer::Syncer;
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
    /// Where appends wait for the WAL sync past their write; `None`: an append is
    /// synced as it is written.
    flusher: Option<Flusher>,
    /// The newest entries of the log, shared by the clones.
    recent: Arc<Mutex<Recent>>,
}

/// At most this many of the newest entries, and about this many bytes of them
/// encoded, are kept in memory.
const RECENT_ENTRIES: usize = 1024;
const RECENT_BYTES: usize = 32 << 20;

/// The newest entries of the log, in index order with no gap, ending at the log's last
/// entry (empty when unknown, as after a start).
#[derive(Default)]
struct Recent {
    entries: VecDeque<(Entry<Cfg>, usize)>,
    bytes: usize,
}

impl Recent {
    fn first(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    /// Entries `from..to` when they are all here (`to` past the last: up to the last).
    fn get(&self, from: u64, to: u64) -> Option<Vec<Entry<Cfg>>> {
        let first = self.first()?;
        if from < first {
            return None;
        }
        let skip = usize::try_from(from - first).ok()?;
        Some(
            self.entries
                .iter()
                .skip(skip)
                .take_while(|(e, _)| e.log_id.index < to)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }

    fn push(&mut self, e: Entry<Cfg>, size: usize) {
        let follows = match self.entries.back() {
            Some((last, _)) => last.log_id.index + 1 == e.log_id.index,
            None => true,
        };
        if !follows {
            self.clear();
        }
        self.bytes += size;
        self.entries.push_back((e, size));
        while self.entries.len() > RECENT_ENTRIES || self.bytes > RECENT_BYTES {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes -= size;
        }
    }

    /// Drop the entries from index `from` on.
    fn truncate(&mut self, from: u64) {
        while self
            .entries
            .back()
            .is_some_and(|(e, _)| e.log_id.index >= from)
        {
            if let Some((_, size)) = self.entries.pop_back() {
                self.bytes -= size;
            }
        }
    }

    /// Drop the entries up to index `upto`.
    fn purge(&mut self, upto: u64) {
        while self.first().is_some_and(|i| i <= upto) {
            self.pop_front();
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

/// The master's WAL sync thread and the task that reports appends it made durable.
#[derive(Clone)]
struct Flusher {
    syncer: Arc<Syncer>,
    /// Appends by their write's sequence (`Syncer::wrote`), in log order.
    tx: mpsc::UnboundedSender<(u64, LogFlushed<Cfg>)>,
}

type StResult<T> = Result<T, StorageError<u64>>;

fn read_err(e: FsError) -> StorageError<u64> {
    StorageIOError::read_logs(AnyError::new(&e)).into()
}

fn write_err(e: FsError) -> StorageError<u64> {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

impl LogStore {
    /// A log store whose appends are synced as they are written.
    pub fn new(store: Arc<Store>, sync: bool) -> LogStore {
        LogStore {
            store,
            sync,
            flusher: None,
            recent: Default::default(),
        }
    }

    /// A log store whose appends `syncer` makes durable, reported by a task on `rt`.
    pub fn with_syncer(
        store: Arc<Store>,
        syncer: Arc<Syncer>,
        rt: &tokio::runtime::Handle,
    ) -> LogStore {
        if !syncer.enabled() {
            return LogStore::new(store, false);
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<(u64, LogFlushed<Cfg>)>();
        let waits = syncer.clone();
        rt.spawn(async move {
            // one at a time, so openraft hears of flushed entries in log order
            while let Some((seq, done)) = rx.recv().await {
                let res = waits.wait(seq).await;
                done.log_io_completed(res.map_err(|e| std::io::Error::other(e.to_string())));
            }
        });
        LogStore {
            store,
            sync: true,
            flusher: Some(Flusher { syncer, tx }),
            recent: Default::default(),
        }
    }

    fn meta_log_id(&self, key: &[u8]) -> Result<Option<LogId<u64>>, FsError> {
        match self.store.raft_meta(key)? {
            Some(v) => Ok(Some(wire::from_log_id(&wire::decode::<wire::WLogId>(
                "log id", &v,
            )?))),
            None => Ok(None),
        }
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entries(&self, from: u64, to: u64) -> Result<Vec<Entry<Cfg>>, FsError> {
        if let Some(v) = self.recent().get(from, to) {
            return Ok(v);
        }
        self.store
            .raft_log(from, to)?
            .iter()
            .map(|v| wire::from_entry(wire::decode("log entry", v)?))
            .collect()
    }

    fn write(&self, b: WriteBatch) -> Result<(), FsError> {
        self.store.write_raw(b, self.sync)
    }

    /// Write `entries`, synced with `sync`.
    fn append_now(
        &self,
        entries: impl IntoIterator<Item = Entry<Cfg>>,
        sync: bool,
    ) -> Result<(), FsError> {
        let mut b = WriteBatch::default();
        let cf = self.cf(CF_RAFT_LOG)?;
        let mut written = Vec::new();
        for e in entries {
            let v = wire::entry(&e).encode_to_vec();
            b.put_cf(cf, e.log_id.index.to_be_bytes(), &v);
            written.push((e, v.len()));
        }
        self.store.write_raw(b, sync)?;
        let mut recent = self.recent();
        for (e, size) in written {
            recent.push(e, size);
        }
        Ok(())
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
        let Some(f) = &self.flusher else {
            let res = self.append_now(entries, self.sync);
            let io = res
                .as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string()));
            callback.log_io_completed(io);
            return res.map_err(write_err);
        };
        self.append_now(entries, false).map_err(write_err)?;
        let seq = f.syncer.wrote();
        f.tx.send((seq, callback)).map_err(|_| {
            write_err(FsError::Unavailable {
                message: "the log's flusher stopped".into(),
            })
        })
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> StResult<()> {
        let mut b = WriteBatch::default();
        let cf = self.cf(CF_RAFT_LOG).map_err(write_err)?;
        b.delete_range_cf(cf, log_id.index.to_be_bytes(), u64::MAX.to_be_bytes());
        b.delete_cf(cf, u64::MAX.to_be_bytes());
        let res = self.write(b);
        match res {
            Ok(()) => self.recent().truncate(log_id.index),
            // the log may be as it was: read from RocksDB until the next append
            Err(_) => self.recent().clear(),
        }
        res.map_err(write_err)
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
        self.recent().purge(log_id.index);
        self.write(b).map_err(write_err)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::master::raft::Proposal;
    use crate::master::records::{op::Kind, JournalEntry};

    fn open(dir: &std::path::Path) -> LogStore {
        let s = Store::open(dir, 1 << 20, 1 << 20, 16, 64 << 10).unwrap();
        LogStore::new(Arc::new(s), true)
    }

    fn entry(term: u64, index: u64) -> Entry<Cfg> {
        proposal_entry(0, term, index)
    }

    /// An entry at `index` logged in term `logged_in` whose proposal was built in term
    /// `built_in` (0: any).
    pub(in crate::master::raft) fn proposal_entry(
        built_in: u64,
        logged_in: u64,
        index: u64,
    ) -> Entry<Cfg> {
        let mut je = JournalEntry::default();
        je.push(Kind::DelInode(index));
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(logged_in, 1), index),
            payload: EntryPayload::Normal(Proposal {
                origin: 7,
                entry: Some(je),
                parts: Vec::new(),
                term: built_in,
            }),
        }
    }

    async fn append(s: &mut LogStore, es: Vec<Entry<Cfg>>) {
        // what `RaftLogStorage::append` writes before it calls back
        s.append_now(es, true).unwrap();
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

    /// The entries kept in memory are the log's newest, with no gap: reads they cover
    /// come from them, others from RocksDB, and truncation and purging apply to both.
    #[tokio::test]
    async fn recent_entries_follow_the_log() {
        let d = tempfile::tempdir().unwrap();
        let mut s = open(d.path());
        append(&mut s, (1..=5).map(|i| entry(1, i)).collect()).await;
        assert_eq!(s.recent().first(), Some(1));
        let got = s.try_get_log_entries(2..4).await.unwrap();
        assert_eq!(indexes(&got), vec![2, 3]);
        assert_eq!(
            indexes(&s.try_get_log_entries(4..).await.unwrap()),
            vec![4, 5]
        );
        s.truncate(LogId::new(CommittedLeaderId::new(1, 1), 4))
            .await
            .unwrap();
        assert_eq!(
            indexes(&s.try_get_log_entries(1..).await.unwrap()),
            vec![1, 2, 3]
        );
        append(&mut s, vec![entry(2, 4)]).await;
        let got = s.try_get_log_entries(3..).await.unwrap();
        assert_eq!(
            got.iter()
                .map(|e| e.log_id.leader_id.term)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        s.purge(LogId::new(CommittedLeaderId::new(1, 1), 2))
            .await
            .unwrap();
        assert_eq!(s.recent().first(), Some(3));
        // an append that does not follow the last entry starts the memory afresh
        s.recent().push(entry(2, 9), 1);
        assert_eq!(s.recent().first(), Some(9));
        // a fresh store (as after a restart) reads RocksDB
        drop(s);
        let mut s = open(d.path());
        assert_eq!(s.recent().first(), None);
        assert_eq!(
            indexes(&s.try_get_log_entries(3..).await.unwrap()),
            vec![3, 4]
        );
    }
}
