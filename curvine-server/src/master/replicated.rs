//! Mutations of replicated masters (`master.peers`): the leader builds a mutation's
//! journal entry as a single master does, proposes it, and answers once the entry is
//! committed and applied; every master applies committed entries alike.

use curvine_common::proto::CallerInfo;
use curvine_common::FsResult;

use super::apply::{self, Applied};
use super::namespace::{Namespace, Txn};
use super::raft::{Proposal, Replica};
use super::records::JournalEntry;
use super::store::{self, CF_RAFT_META};

impl Namespace {
    /// Whether this master acts on the namespace on its own (expires leases, purges
    /// detached subtrees): a single master, or the leader of a replicated group.
    pub(super) fn leads(&self) -> bool {
        self.replica.get().is_none_or(|r| r.is_leader())
    }

    /// `Ok` on a single master or the leader; else `NotLeader` naming the leader (calls
    /// only the leader answers: workers' registrations and heartbeats).
    pub(super) fn check_leads(&self) -> FsResult<()> {
        self.replica.get().map_or(Ok(()), |r| r.check_leader())
    }

    /// Before a read: on a replicated master, unless the caller accepts a follower's
    /// applied state (`CallerInfo.read_from_followers`), `NotLeader` on a follower and,
    /// on the leader, a read index (`Replica::read_index`), so the read sees every
    /// mutation acknowledged before it came.
    pub(super) async fn linearize(&self, c: &Option<CallerInfo>) -> FsResult<()> {
        match self.replica.get() {
            Some(rep) if !c.as_ref().is_some_and(|c| c.read_from_followers) => {
                rep.read_index().await
            }
            _ => Ok(()),
        }
    }

    /// `mutate` on a replicated master. A follower refuses with `NotLeader` before it
    /// builds anything. The leader builds the mutation into the open batch of
    /// mutations (`batch`), after every earlier batch is applied, and answers once the
    /// batch is committed and applied. Returns sequence 0: the entry is durable on a
    /// majority of the masters once committed.
    pub(super) fn mutate_replicated<R>(
        &self,
        rep: &Replica,
        origin: u64,
        f: impl FnOnce(&mut Txn<'_>) -> FsResult<R>,
    ) -> FsResult<(R, u64)> {
        rep.check_leader()?;
        rep.blocking(|| {
            // a new leader first applies what earlier leaders committed
            rep.ready_to_mutate(self.conf.election_timeout.get())?;
            Ok((self.mutate_batched(rep, origin, f)?, 0))
        })
    }

    /// Rebuild what the master keeps in memory from its records, after a snapshot
    /// replaced them: the inode cache (emptied by the install), writers' leases, the
    /// workers and drains recorded, the mounts; change-log followers reset; the
    /// background scans look again. Counters are read from the store on a replicated
    /// master. Replicas queued for deletion by entries the snapshot covers are not
    /// known here: their workers' block reports find them orphaned.
    pub(super) fn reload_after_snapshot(&self) -> FsResult<()> {
        self.store.forget_cached();
        let mut open = Vec::new();
        for (k, v) in self.store.meta_scan(store::META_OPEN_PREFIX)? {
            if let (Ok(k), Ok(v)) = (<[u8; 8]>::try_from(&k[..]), <[u8; 8]>::try_from(&v[..])) {
                open.push((u64::from_be_bytes(k), u64::from_be_bytes(v)));
            }
        }
        self.leases.reset(open);
        self.workers.reload(&self.store)?;
        self.mounts.reload(&self.store)?;
        self.changes.forget();
        self.repl.wake();
        self.purge.wake();
        Ok(())
    }

    /// Apply a committed entry (the state machine, on every master, in log order): its
    /// batch and `applied` under `applied_key` in `raft_meta` in one write, then the
    /// change log and the effects on memory.
    pub(super) fn apply_committed(
        &self,
        p: &Proposal,
        entry: &JournalEntry,
        applied_key: &[u8],
        applied: &[u8],
    ) -> FsResult<()> {
        let Applied { mut batch, effects } = apply::step(&self.store, entry)?;
        let records = !batch.is_empty();
        batch.put_cf(self.store.cf(CF_RAFT_META)?, applied_key, applied);
        self.store.write(batch, entry)?;
        if records {
            // a batch's entry: each client's run of ops as its own change
            let mut from = 0;
            for part in &p.parts {
                let end = usize::try_from(part.end).unwrap_or(usize::MAX);
                let end = end.clamp(from, entry.ops.len());
                self.changes.record(part.origin, &entry.ops[from..end]);
                from = end;
            }
            if from < entry.ops.len() {
                self.changes.record(p.origin, &entry.ops[from..]);
            }
        }
        self.apply_effects(&effects);
        if effects.blocks_dropped {
            self.repl.block_dropped();
        }
        Ok(())
    }
}
