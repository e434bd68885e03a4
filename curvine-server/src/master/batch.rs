//! Group commit on a replicated master: the mutations that come while an entry is
//! being committed are built together, one after the other on one `Txn`, and proposed
//! as one log entry when the last of them is built. A mutation waits for one commit
//! round, not for a round per mutation queued before it.
//!
//! Members are built under the batch lock, each on the overlay of the ones before it;
//! one that fails leaves no trace (`Txn::rollback_member`). A member's answer waits for
//! its batch's commit, even when it wrote nothing itself but the batch did (it may have
//! read what earlier members wrote). When the commit fails, every member of the batch
//! gets the error.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard};

use curvine_common::types::now_ms;
use curvine_common::{FsError, FsResult};
use prost::Message;

use super::namespace::Namespace;
use super::raft::{Proposal, ProposalPart, Replica};
use super::records::Counters;
use super::store;
use super::txn::{Parts, Txn};

/// At most this many members share an entry (the rest wait for the next one).
const MAX_MEMBERS: usize = 256;
/// A batch is closed once its entry holds this many ops.
const MAX_OPS: usize = 8192;

/// The batch being built and the outcomes of the ones proposed.
#[derive(Default)]
pub(super) struct Batcher {
    st: Mutex<State>,
    cv: Condvar,
}

#[derive(Default)]
struct State {
    /// A batch is being proposed: mutations that come now wait for its outcome.
    in_flight: bool,
    /// Mutations woken (or waking) to join the open batch that have not joined yet;
    /// the last member built seals the batch.
    waiting: usize,
    open: Option<Open>,
    next_id: u64,
    /// Outcomes of proposed batches, with how many members have yet to read them.
    done: HashMap<u64, (FsResult<()>, usize)>,
}

struct Open {
    id: u64,
    /// The counters when the batch began: written once at the end if they moved.
    start: Counters,
    parts: Parts,
    /// Members that wait for this batch's outcome.
    members: usize,
    /// Whose each run of ops is.
    origins: Vec<ProposalPart>,
}

impl Batcher {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait(g).unwrap_or_else(|p| p.into_inner())
    }
}

impl Namespace {
    /// `mutate` on the leader of a replicated group (the caller checked it leads and
    /// has applied the earlier terms): build `f` into the open batch and answer once
    /// the batch is committed and applied.
    pub(super) fn mutate_batched<R>(
        &self,
        rep: &Replica,
        origin: u64,
        f: impl FnOnce(&mut Txn<'_>) -> FsResult<R>,
    ) -> FsResult<R> {
        let b = &self.batch;
        let mut st = b.lock();
        st.waiting += 1;
        while st.in_flight {
            st = b.wait(st);
        }
        st.waiting -= 1;
        if st.open.is_none() {
            // a batch is only begun with the state every earlier batch left applied
            let counters = self.store.counters()?;
            let id = st.next_id;
            st.next_id += 1;
            st.open = Some(Open {
                id,
                start: counters,
                parts: Txn::new(&self.store, counters, 0).into_parts(),
                members: 0,
                origins: Vec::new(),
            });
        }
        let Some(open) = st.open.as_mut() else {
            return Err(FsError::internal("no open batch"));
        };
        let mut txn = Txn::resume(&self.store, std::mem::take(&mut open.parts), now_ms());
        let before = txn.entry.ops.len();
        let mark = txn.begin_member();
        let out = catch_unwind(AssertUnwindSafe(|| f(&mut txn)))
            .unwrap_or_else(|_| Err(FsError::internal("a mutation failed unexpectedly")));
        match out {
            Ok(_) => txn.end_member(),
            Err(_) => txn.rollback_member(mark),
        }
        let after = txn.entry.ops.len();
        open.parts = txn.into_parts();
        if after > before {
            match open.origins.last_mut() {
                Some(p) if p.origin == origin => p.end = after as u64,
                _ => open.origins.push(ProposalPart {
                    origin,
                    end: after as u64,
                }),
            }
        }
        // a member answers after the commit when the batch wrote anything by then: its
        // answer, a failure too, may rest on what earlier members wrote, which counts
        // only once committed (else the member gets the commit's error)
        let stake = after > 0;
        if stake {
            open.members += 1;
        }
        let id = open.id;
        let full = open.members >= MAX_MEMBERS || after >= MAX_OPS;
        if st.waiting == 0 || full {
            st = self.seal(st, rep);
        }
        if !stake {
            return out;
        }
        loop {
            if let Some((res, left)) = st.done.get_mut(&id) {
                let res = res.clone();
                *left -= 1;
                if *left == 0 {
                    st.done.remove(&id);
                }
                return res.and(out);
            }
            st = b.wait(st);
        }
    }

    /// Propose the open batch (the lock is let go meanwhile) and record its outcome.
    fn seal<'a>(&'a self, mut st: MutexGuard<'a, State>, rep: &Replica) -> MutexGuard<'a, State> {
        let b = &self.batch;
        let Some(open) = st.open.take() else {
            return st;
        };
        let mut txn = Txn::resume(&self.store, open.parts, 0);
        if txn.entry.ops.is_empty() {
            return st;
        }
        if txn.counters != open.start {
            let c = txn.counters.encode_to_vec();
            txn.put_meta(store::META_COUNTERS.to_vec(), c);
        }
        let entry = std::mem::take(&mut txn.entry);
        let (origin, parts) = match &open.origins[..] {
            [one] => (one.origin, Vec::new()),
            _ => (0, open.origins),
        };
        st.in_flight = true;
        drop(st);
        let res = rep.propose(Proposal {
            origin,
            entry: Some(entry),
            parts,
        });
        let mut st = b.lock();
        st.in_flight = false;
        if open.members > 0 {
            st.done.insert(open.id, (res, open.members));
        }
        b.cv.notify_all();
        st
    }
}
