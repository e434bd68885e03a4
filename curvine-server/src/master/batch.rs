//! Group commit and pipelining on a replicated master. Mutations are built one after
//! the other into the open batch (one `Txn`), which becomes one log entry when it is
//! sealed: at once while fewer than `MAX_IN_FLIGHT` entries wait for their commit,
//! else when one of them is decided, so the mutations that come meanwhile share an
//! entry. A mutation waits for about one commit round, not for a round per entry
//! queued before it.
//!
//! Each batch is built on the overlay of the entries still in flight (`State::carry`):
//! what they wrote is read before the store, which has not applied it yet. Raft logs
//! the entries in the order they were sealed (`Replica::submit`), so an entry is
//! applied after the ones it was built on. An entry counts only in the term it was
//! built in (`Proposal::term`); when one of a chain fails, the batch being built on it
//! fails too, and the next is built from the store once none is in flight.
//!
//! A member that fails leaves no trace (`Txn::rollback_member`). A member's answer
//! waits for its batch's commit, even when it wrote nothing itself or failed but the
//! batch wrote something (it may have read what earlier members wrote). When the
//! commit fails, every member of the batch gets the error.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use curvine_common::types::now_ms;
use curvine_common::{FsError, FsResult};
use prost::Message;

use super::namespace::Namespace;
use super::raft::{Decided, Proposal, ProposalPart, Replica};
use super::records::Counters;
use super::store;
use super::txn::{Parts, Txn};

/// At most this many members share an entry.
const MAX_MEMBERS: usize = 256;
/// A batch is closed once its entry holds this many ops.
const MAX_OPS: usize = 8192;
/// At most this many entries are proposed and not yet decided.
const MAX_IN_FLIGHT: usize = 4;
/// When the overlay carried from entry to entry holds more records than this, new
/// batches wait until no entry is in flight and start from the store again.
const MAX_CARRY: usize = 100_000;

/// The batch being built and the outcomes of the ones proposed.
#[derive(Default)]
pub(super) struct Batcher {
    st: Mutex<State>,
    cv: Condvar,
}

#[derive(Default)]
struct State {
    /// Entries proposed and not yet decided.
    in_flight: usize,
    open: Option<Open>,
    next_id: u64,
    /// Outcomes of proposed batches, with how many members have yet to read them.
    done: HashMap<u64, (FsResult<()>, usize)>,
    /// The overlay of the entries in flight (with an empty journal entry) and the term
    /// they were built in: the next batch is built on it. `None` when none is in flight.
    carry: Option<(Parts, u64)>,
    /// An entry in flight failed: the open batch fails too, and the next one is built
    /// from the store once no entry is in flight.
    broken: bool,
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
    /// The term the batch is built in.
    term: u64,
    /// No more members: it is sealed when an entry in flight is decided.
    full: bool,
}

impl Batcher {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait(g).unwrap_or_else(|p| p.into_inner())
    }

    /// The entry of batch `id`, with `members` waiting for it, is decided.
    fn decided(&self, id: u64, members: usize, res: FsResult<()>) {
        let mut st = self.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        if res.is_err() {
            st.broken = true;
        }
        if st.in_flight == 0 {
            // everything it held is applied (or never will be)
            st.carry = None;
        }
        if members > 0 {
            st.done.insert(id, (res, members));
        }
        self.cv.notify_all();
    }
}

impl State {
    /// Fail the open batch (it was built on an entry that failed).
    fn abort_open(&mut self) {
        if let Some(o) = self.open.take() {
            let e = FsError::Unavailable {
                message: "an entry this mutation was built on was not committed".into(),
            };
            if o.members > 0 {
                self.done.insert(o.id, (Err(e), o.members));
            }
        }
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
        loop {
            if st.broken && st.open.is_some() {
                st.abort_open();
                b.cv.notify_all();
            }
            match &st.open {
                Some(o) if !o.full => break,
                Some(_) => {}
                None if st.in_flight == 0 => {
                    // no entry in flight: built from what the store has applied
                    let counters = self.store.counters()?;
                    let parts = Txn::new(&self.store, counters, 0).into_parts();
                    st.carry = None;
                    st.broken = false;
                    let term = rep.term();
                    open_batch(&mut st, parts, term);
                    break;
                }
                None => {
                    let term = rep.term();
                    let fits = |(p, t): &(Parts, u64)| *t == term && p.overlay_len() <= MAX_CARRY;
                    if !st.broken && st.carry.as_ref().is_some_and(fits) {
                        if let Some((parts, term)) = st.carry.take() {
                            open_batch(&mut st, parts, term);
                            break;
                        }
                    }
                }
            }
            st = b.wait(st);
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
        if after == 0 {
            return out;
        }
        open.members += 1;
        open.full = open.members >= MAX_MEMBERS || after >= MAX_OPS;
        let id = open.id;
        loop {
            if let Some((res, left)) = st.done.get_mut(&id) {
                let res = res.clone();
                *left -= 1;
                if *left == 0 {
                    st.done.remove(&id);
                }
                return res.and(out);
            }
            if st.open.as_ref().is_some_and(|o| o.id == id) {
                if st.broken {
                    st.abort_open();
                    b.cv.notify_all();
                    continue;
                }
                if st.in_flight < MAX_IN_FLIGHT {
                    self.seal(&mut st, rep);
                    continue;
                }
            }
            st = b.wait(st);
        }
    }

    /// Hand the open batch to Raft, its overlay kept for the next batch; the outcome
    /// reaches `done` through `Batcher::decided`.
    fn seal(&self, st: &mut State, rep: &Replica) {
        let Some(open) = st.open.take() else {
            return;
        };
        let mut txn = Txn::resume(&self.store, open.parts, 0);
        if txn.counters != open.start {
            let c = txn.counters.encode_to_vec();
            txn.put_meta(store::META_COUNTERS.to_vec(), c);
        }
        let entry = std::mem::take(&mut txn.entry);
        let (origin, parts) = match &open.origins[..] {
            [one] => (one.origin, Vec::new()),
            _ => (0, open.origins),
        };
        let p = Proposal {
            origin,
            entry: Some(entry),
            parts,
            term: open.term,
        };
        let batch = Arc::clone(&self.batch);
        let (id, members) = (open.id, open.members);
        let decided = Decided::new(move |res| batch.decided(id, members, res));
        match rep.submit(p, decided) {
            Ok(()) => {
                st.in_flight += 1;
                st.carry = Some((txn.into_parts(), open.term));
            }
            Err(decided) => {
                // told here: the batch's lock is held, which `decided` would take
                decided.disarm();
                st.broken = true;
                st.done.insert(id, (Err(super::raft::stopped()), members));
            }
        }
        self.batch.cv.notify_all();
    }
}

/// Begin a batch on `parts` (the store's state, or the overlay of the entries in flight).
fn open_batch(st: &mut State, parts: Parts, term: u64) {
    let id = st.next_id;
    st.next_id += 1;
    st.open = Some(Open {
        id,
        start: parts.counters(),
        parts,
        members: 0,
        origins: Vec::new(),
        term,
        full: false,
    });
}
