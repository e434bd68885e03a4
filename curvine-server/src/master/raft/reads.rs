//! What the leader checks before it answers: for a read, that it still leads (a
//! read index: a heartbeat round to a majority, openraft's `ensure_linearizable`) and
//! has applied what was committed before the read came; for a mutation, that it has
//! applied every entry of the terms before its own, so the mutation is built on the
//! whole committed state.
//!
//! Confirmations are shared: one round is in flight at a time, and every read that
//! arrives meanwhile waits for the next round, which starts after it came (so it still
//! sees every mutation acknowledged before it).
//!
//! A confirmation also gives the leader a lease: a follower that answered a heartbeat
//! sent at time `t` votes for no other candidate until openraft's leader lease (twice
//! `master.election_timeout`) has passed since it answered, so no other leader can be
//! elected before `t` plus that. For half of `master.election_timeout` after a round
//! began, a read needs no round of its own: every mutation acknowledged before it was
//! applied here before it was acknowledged. A read in the second half of the lease
//! starts the next round without waiting for it, so a steady stream of reads rarely
//! waits for one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use curvine_common::{FsError, FsResult};
use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::{BasicNode, RaftMetrics};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::{Raft, Replica};

type Waiter = oneshot::Sender<FsResult<()>>;

/// The reads waiting for a confirmation of the leadership.
#[derive(Default)]
pub(super) struct ReadIndex {
    queue: OnceLock<mpsc::UnboundedSender<Waiter>>,
    lease: Arc<Lease>,
}

#[derive(Default)]
struct Lease {
    /// When the last confirmed round began, and in which term.
    held: Mutex<Option<(Instant, u64)>>,
    /// A round that renews the lease is asked for (no read waits for it).
    renewing: AtomicBool,
}

/// Whether this node leads and has applied an entry of its own term (the blank entry
/// a new leader starts its term with): every earlier entry is applied then.
fn term_applied(m: &RaftMetrics<u64, BasicNode>, id: u64) -> bool {
    m.state.is_leader()
        && m.current_leader == Some(id)
        && m.last_applied
            .is_some_and(|l| l.leader_id.term == m.current_term)
}

/// One confirmation at a time; the waiters queued while it ran share the next one.
async fn confirm_loop(
    raft: Raft,
    peers: Peers,
    lease: Arc<Lease>,
    mut rx: mpsc::UnboundedReceiver<Waiter>,
) {
    let mut batch = Vec::new();
    while let Some(w) = rx.recv().await {
        batch.push(w);
        while let Ok(w) = rx.try_recv() {
            batch.push(w);
        }
        lease.renewing.store(false, Ordering::Relaxed);
        let began = Instant::now();
        let term = raft.metrics().borrow().current_term;
        let res = match raft.ensure_linearizable().await {
            Ok(_) => {
                *lease.held.lock().unwrap_or_else(|p| p.into_inner()) = Some((began, term));
                Ok(())
            }
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                Err(FsError::NotLeader {
                    leader: peers.addr(f.leader_id),
                })
            }
            Err(e) => {
                debug!(error = %e, "read index not confirmed");
                Err(FsError::Unavailable {
                    message: format!("leadership not confirmed: {e}"),
                })
            }
        };
        for w in batch.drain(..) {
            let _ = w.send(res.clone());
        }
    }
}

/// The peer addresses, for leader hints from the confirmation task.
#[derive(Clone)]
struct Peers(std::collections::BTreeMap<u64, String>);

impl Peers {
    fn addr(&self, id: Option<u64>) -> String {
        id.and_then(|l| self.0.get(&l)).cloned().unwrap_or_default()
    }
}

impl Replica {
    /// Wait until this leader may answer a linearizable read: `NotLeader` on a
    /// follower (or a leader that finds it was deposed), else once a majority has
    /// confirmed its leadership and it has applied every entry committed before.
    pub async fn read_index(&self) -> FsResult<()> {
        self.check_leader()?;
        let queue = self.reads.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let peers = Peers(self.peers.clone());
            let lease = self.reads.lease.clone();
            self.handle
                .spawn(confirm_loop(self.raft.clone(), peers, lease, rx));
            tx
        });
        let held = *self
            .reads
            .lease
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((began, term)) = held {
            let age = began.elapsed();
            let lease = self.election_timeout / 2;
            if age < lease && term == self.metrics.borrow().current_term {
                if age >= lease / 2 && !self.reads.lease.renewing.swap(true, Ordering::Relaxed) {
                    // renew ahead of time; nobody waits for this round
                    let (tx, _) = oneshot::channel();
                    let _ = queue.send(tx);
                }
                return Ok(());
            }
        }
        let (tx, rx) = oneshot::channel();
        queue.send(tx).map_err(|_| FsError::Unavailable {
            message: "replication stopped".into(),
        })?;
        rx.await.map_err(|_| FsError::Unavailable {
            message: "replication stopped".into(),
        })?
    }

    /// For a mutation (blocking): `Ok` once this master leads and has applied the
    /// entries of earlier terms, waiting up to `wait` for a new leader to get there.
    pub fn ready_to_mutate(&self, wait: Duration) -> FsResult<()> {
        self.check_leader()?;
        if term_applied(&self.metrics.borrow(), self.id) {
            return Ok(());
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (raft, id) = (self.raft.clone(), self.id);
        self.handle.spawn(async move {
            let r = raft
                .wait(Some(wait))
                .metrics(
                    move |m| term_applied(m, id) || !m.state.is_leader(),
                    "the new leader applied its term's first entry",
                )
                .await;
            let _ = tx.send(r.is_ok());
        });
        let _ = rx.recv();
        self.check_leader()?;
        if term_applied(&self.metrics.borrow(), self.id) {
            Ok(())
        } else {
            Err(FsError::Unavailable {
                message: "the new leader is still applying the log".into(),
            })
        }
    }
}
