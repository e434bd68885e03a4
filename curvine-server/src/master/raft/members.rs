//! Membership of the replicated group: the masters as the leader sees them
//! (`cv admin masters`), and adding or removing one through openraft (`add_learner`,
//! then `change_membership`). The group's membership lives in the replicated log; the
//! addresses of its masters are those of its `BasicNode`s.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use curvine_common::conf::is_host_port;
use curvine_common::proto::MasterInfo;
use curvine_common::{FsError, FsResult};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, RaftMetrics};
use tracing::info;

use super::Replica;

/// Log once, at start, when `master.peers` and the membership stored in the log differ:
/// the stored one is the group's.
pub(super) fn note_stored_membership(
    m: &RaftMetrics<u64, BasicNode>,
    peers: &BTreeMap<u64, String>,
) {
    let stored: BTreeMap<u64, String> = m
        .membership_config
        .membership()
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    if !stored.is_empty() && &stored != peers {
        info!(stored = ?stored, peers = ?peers,
            "master.peers differs from the group's stored membership; the stored one is used");
    }
}

fn write_err(e: RaftError<u64, ClientWriteError<u64, BasicNode>>, r: &Replica) -> FsError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => FsError::NotLeader {
            leader: r.leader_addr(f.leader_id),
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            FsError::invalid(format!("membership change refused: {c}"))
        }
        e => FsError::Unavailable {
            message: format!("membership change: {e}"),
        },
    }
}

impl Replica {
    /// Every master of the membership with its role as this master, the leader, sees
    /// it, and the current term. A follower answers `NotLeader`.
    pub fn masters(&self) -> FsResult<(Vec<MasterInfo>, u64)> {
        self.check_leader()?;
        let m = self.metrics.borrow();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        let last = m.last_log_index.unwrap_or(0);
        let mut out = Vec::new();
        for (id, node) in membership.nodes() {
            let matched = if *id == self.id {
                Some(last)
            } else {
                (m.replication.as_ref())
                    .and_then(|r| r.get(id))
                    .map(|l| l.map_or(0, |l| l.index))
            };
            let answered = *id == self.id
                || self
                    .reach
                    .since(*id)
                    .is_some_and(|t| t <= self.election_timeout);
            let role = if *id == self.id {
                "leader"
            } else if !answered {
                "unreachable"
            } else if voters.contains(id) {
                "follower"
            } else {
                "learner"
            };
            let index = matched.unwrap_or(0);
            out.push(MasterInfo {
                id: *id,
                address: node.addr.clone(),
                role: role.into(),
                last_log_index: index,
                lag: last.saturating_sub(index),
                voter: voters.contains(id),
            });
        }
        Ok((out, m.current_term))
    }

    /// Add master `id` at `addr`: as a learner, then, once it holds the log up to the
    /// entry that added it (within `catch_up`), as a voter. A master that does not catch
    /// up in time stays a learner, and the error says so.
    pub async fn add_master(&self, id: u64, addr: &str, catch_up: Duration) -> FsResult<()> {
        self.check_leader()?;
        if id == 0 {
            return Err(FsError::invalid("a master's id must be a positive number"));
        }
        if !is_host_port(addr) {
            return Err(FsError::invalid(format!(
                "master address {addr:?} is not host:port"
            )));
        }
        {
            let m = self.metrics.borrow();
            for (nid, n) in m.membership_config.membership().nodes() {
                if *nid == id {
                    return Err(FsError::AlreadyExists {
                        path: format!("master {id} (at {})", n.addr),
                    });
                }
                if n.addr == addr {
                    return Err(FsError::AlreadyExists {
                        path: format!("master address {addr} (master {nid})"),
                    });
                }
            }
        }
        info!(master = id, %addr, "adding a master as a learner");
        let raft = self.raft.clone();
        let node = BasicNode::new(addr);
        let added = self
            .handle
            .spawn(async move { raft.add_learner(id, node, false).await })
            .await
            .map_err(|e| FsError::internal(format!("add learner: {e}")))?
            .map_err(|e| write_err(e, self))?;
        let upto = added.log_id.index;
        let raft = self.raft.clone();
        let caught_up = self
            .handle
            .spawn(async move {
                raft.wait(Some(catch_up))
                    .metrics(
                        move |m| {
                            (m.replication.as_ref())
                                .and_then(|r| r.get(&id))
                                .is_some_and(|l| l.is_some_and(|l| l.index >= upto))
                        },
                        "the new master caught up",
                    )
                    .await
            })
            .await
            .map_err(|e| FsError::internal(format!("wait for a learner: {e}")))?;
        if caught_up.is_err() {
            return Err(FsError::Timeout {
                message: format!(
                    "master {id} at {addr} did not catch up within {catch_up:?}: it stays a \
                     learner; check that it runs (node_id = {id}), then add it again"
                ),
            });
        }
        let raft = self.raft.clone();
        self.handle
            .spawn(async move {
                raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                    .await
            })
            .await
            .map_err(|e| FsError::internal(format!("change membership: {e}")))?
            .map_err(|e| write_err(e, self))?;
        info!(master = id, %addr, "master added as a voter");
        Ok(())
    }

    /// Remove master `id` from the group (a voter or a learner). The last voter stays.
    pub async fn remove_master(&self, id: u64) -> FsResult<()> {
        self.check_leader()?;
        let (voter, voters) = {
            let m = self.metrics.borrow();
            let ms = m.membership_config.membership();
            if ms.get_node(&id).is_none() {
                return Err(FsError::NotFound {
                    path: format!("master {id}"),
                });
            }
            let voters: BTreeSet<u64> = ms.voter_ids().collect();
            (voters.contains(&id), voters.len())
        };
        if voter && voters == 1 {
            return Err(FsError::invalid(format!(
                "master {id} is the group's last voter: it cannot be removed"
            )));
        }
        let change = if voter {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        let raft = self.raft.clone();
        self.handle
            .spawn(async move { raft.change_membership(change, false).await })
            .await
            .map_err(|e| FsError::internal(format!("change membership: {e}")))?
            .map_err(|e| write_err(e, self))?;
        info!(master = id, "master removed from the group");
        Ok(())
    }
}
