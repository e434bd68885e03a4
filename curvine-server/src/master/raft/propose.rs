//! Proposals handed to Raft without waiting (`Replica::submit`): one task logs them in
//! the order they were submitted, so a leader can have several entries in flight, each
//! built on the ones before it (`master::batch`), and be told of each outcome.

use curvine_common::{FsError, FsResult};
use openraft::error::ClientWriteError;
use tokio::sync::mpsc;

use super::{Proposal, Raft, Replica};

/// Told a proposal's outcome once: `Ok` when it was committed and applied here; when
/// dropped untold (Raft stopped), it is told `Unavailable`.
pub struct Decided(Option<Box<dyn FnOnce(FsResult<()>) + Send>>);

impl Decided {
    pub fn new(f: impl FnOnce(FsResult<()>) + Send + 'static) -> Decided {
        Decided(Some(Box::new(f)))
    }

    fn tell(mut self, res: FsResult<()>) {
        if let Some(f) = self.0.take() {
            f(res);
        }
    }

    /// Drop it without telling anyone (the caller learned the outcome itself).
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Decided {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(stopped()));
        }
    }
}

/// Raft has stopped: nothing more is logged here.
pub fn stopped() -> FsError {
    FsError::Unavailable {
        message: "replication stopped".into(),
    }
}

pub(super) type Queue = mpsc::UnboundedSender<(Proposal, Decided)>;

/// Start the task that logs proposals in order, on Raft's runtime.
pub(super) fn start(raft: Raft, rt: &tokio::runtime::Handle) -> Queue {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Proposal, Decided)>();
    rt.spawn(async move {
        while let Some((p, decided)) = rx.recv().await {
            // `client_write_ff` only queues the entry for Raft's core: the order of
            // these calls is the order of the log
            match raft.client_write_ff(p).await {
                Ok(answer) => {
                    tokio::spawn(async move {
                        let res = match answer.await {
                            Ok(Ok(r)) if r.data => Ok(()),
                            Ok(Ok(_)) => Err(FsError::Unavailable {
                                message: "the entry was logged in a later term than the one \
                                          it was built in, and applied as nothing"
                                    .into(),
                            }),
                            Ok(Err(ClientWriteError::ForwardToLeader(f))) => {
                                Err(FsError::NotLeader {
                                    leader: f.leader_node.map(|n| n.addr).unwrap_or_default(),
                                })
                            }
                            Ok(Err(e)) => Err(FsError::Unavailable {
                                message: format!("replication: {e}"),
                            }),
                            Err(_) => Err(stopped()),
                        };
                        decided.tell(res);
                    });
                }
                Err(e) => decided.tell(Err(FsError::Unavailable {
                    message: format!("replication: {e}"),
                })),
            }
        }
    });
    tx
}

impl Replica {
    /// Hand `p` to Raft without waiting; `decided` is told, on Raft's runtime, once it
    /// is committed and applied here. Proposals are logged in the order submitted.
    /// `NotLeader`: it was not taken (or was dropped from the log, so never applied)
    /// and may be retried on the leader; `Unavailable`: this master stopped or lost
    /// its place, and the entry may still be committed by the next leader. When Raft
    /// has stopped, `decided` is handed back untold.
    pub fn submit(&self, p: Proposal, decided: Decided) -> Result<(), Decided> {
        self.proposals.send((p, decided)).map_err(|e| (e.0).1)
    }

    /// The term this master is in.
    pub fn term(&self) -> u64 {
        self.metrics.borrow().current_term
    }
}
