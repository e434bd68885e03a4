//! The encoding of openraft's types, for the log in RocksDB and for the RPCs between
//! masters: prost messages of our own, so the log and the wire do not depend on how a
//! release of openraft happens to serialize its types.

use std::collections::{BTreeMap, BTreeSet};

use curvine_common::{FsError, FsResult};
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, StoredMembership, Vote,
};
use prost::Message;

use super::{Cfg, Proposal};

#[derive(Clone, PartialEq, prost::Message)]
pub struct WVote {
    #[prost(uint64, tag = "1")]
    pub term: u64,
    #[prost(uint64, tag = "2")]
    pub node_id: u64,
    #[prost(bool, tag = "3")]
    pub committed: bool,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct WLogId {
    #[prost(uint64, tag = "1")]
    pub term: u64,
    #[prost(uint64, tag = "2")]
    pub node_id: u64,
    #[prost(uint64, tag = "3")]
    pub index: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WConfig {
    #[prost(uint64, repeated, tag = "1")]
    pub ids: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WNode {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub addr: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WMembership {
    #[prost(message, repeated, tag = "1")]
    pub configs: Vec<WConfig>,
    #[prost(message, repeated, tag = "2")]
    pub nodes: Vec<WNode>,
}

/// One log entry. `kind`: 0 blank (a new leader's first), 1 a proposal, 2 membership.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WEntry {
    #[prost(message, optional, tag = "1")]
    pub log_id: Option<WLogId>,
    #[prost(uint32, tag = "2")]
    pub kind: u32,
    #[prost(message, optional, tag = "3")]
    pub proposal: Option<Proposal>,
    #[prost(message, optional, tag = "4")]
    pub membership: Option<WMembership>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WAppend {
    #[prost(message, optional, tag = "1")]
    pub vote: Option<WVote>,
    #[prost(message, optional, tag = "2")]
    pub prev: Option<WLogId>,
    #[prost(message, repeated, tag = "3")]
    pub entries: Vec<WEntry>,
    #[prost(message, optional, tag = "4")]
    pub commit: Option<WLogId>,
}

/// `kind`: 0 success, 1 partial success up to `matching`, 2 conflict, 3 higher vote.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WAppendReply {
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    #[prost(message, optional, tag = "2")]
    pub matching: Option<WLogId>,
    #[prost(message, optional, tag = "3")]
    pub vote: Option<WVote>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WVoteReq {
    #[prost(message, optional, tag = "1")]
    pub vote: Option<WVote>,
    #[prost(message, optional, tag = "2")]
    pub last: Option<WLogId>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WVoteReply {
    #[prost(message, optional, tag = "1")]
    pub vote: Option<WVote>,
    #[prost(bool, tag = "2")]
    pub granted: bool,
    #[prost(message, optional, tag = "3")]
    pub last: Option<WLogId>,
}

/// One chunk of a snapshot file (`raft::snapshot`) sent to a follower: `data` is the
/// file's bytes from `offset`; `done` on the last one, after which the follower checks
/// the whole file and installs it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WSnapChunk {
    #[prost(message, optional, tag = "1")]
    pub vote: Option<WVote>,
    #[prost(string, tag = "2")]
    pub id: String,
    #[prost(uint64, tag = "3")]
    pub offset: u64,
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
    #[prost(bool, tag = "5")]
    pub done: bool,
}

/// The follower's vote, after a chunk (a higher one stops the sender).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WSnapReply {
    #[prost(message, optional, tag = "1")]
    pub vote: Option<WVote>,
}

/// What the state machine has applied: stored with every applied entry.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WApplied {
    #[prost(message, optional, tag = "1")]
    pub applied: Option<WLogId>,
    #[prost(message, optional, tag = "2")]
    pub membership_log: Option<WLogId>,
    #[prost(message, optional, tag = "3")]
    pub membership: Option<WMembership>,
}

fn bad(what: &str) -> FsError {
    FsError::Protocol {
        message: format!("raft message: {what}"),
    }
}

pub fn vote(v: &Vote<u64>) -> WVote {
    WVote {
        term: v.leader_id.term,
        node_id: v.leader_id.node_id,
        committed: v.committed,
    }
}

pub fn from_vote(v: Option<&WVote>) -> FsResult<Vote<u64>> {
    let v = v.ok_or_else(|| bad("no vote"))?;
    Ok(if v.committed {
        Vote::new_committed(v.term, v.node_id)
    } else {
        Vote::new(v.term, v.node_id)
    })
}

pub fn log_id(l: &LogId<u64>) -> WLogId {
    WLogId {
        term: l.leader_id.term,
        node_id: l.leader_id.node_id,
        index: l.index,
    }
}

pub fn opt_log_id(l: &Option<LogId<u64>>) -> Option<WLogId> {
    l.as_ref().map(log_id)
}

pub fn from_log_id(l: &WLogId) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(l.term, l.node_id), l.index)
}

pub fn from_opt_log_id(l: &Option<WLogId>) -> Option<LogId<u64>> {
    l.as_ref().map(from_log_id)
}

pub fn membership(m: &Membership<u64, BasicNode>) -> WMembership {
    WMembership {
        configs: m
            .get_joint_config()
            .iter()
            .map(|c| WConfig {
                ids: c.iter().copied().collect(),
            })
            .collect(),
        nodes: m
            .nodes()
            .map(|(id, n)| WNode {
                id: *id,
                addr: n.addr.clone(),
            })
            .collect(),
    }
}

pub fn from_membership(m: &WMembership) -> FsResult<Membership<u64, BasicNode>> {
    let configs: Vec<BTreeSet<u64>> = m
        .configs
        .iter()
        .map(|c| c.ids.iter().copied().collect())
        .collect();
    if configs.is_empty() || configs.iter().any(|c| c.is_empty()) {
        return Err(bad("empty membership"));
    }
    let nodes: BTreeMap<u64, BasicNode> = m
        .nodes
        .iter()
        .map(|n| (n.id, BasicNode::new(&n.addr)))
        .collect();
    Ok(Membership::new(configs, nodes))
}

pub fn entry(e: &Entry<Cfg>) -> WEntry {
    let mut w = WEntry {
        log_id: Some(log_id(&e.log_id)),
        ..Default::default()
    };
    match &e.payload {
        EntryPayload::Blank => {}
        EntryPayload::Normal(p) => {
            w.kind = 1;
            w.proposal = Some(p.clone());
        }
        EntryPayload::Membership(m) => {
            w.kind = 2;
            w.membership = Some(membership(m));
        }
    }
    w
}

pub fn from_entry(w: WEntry) -> FsResult<Entry<Cfg>> {
    let log_id = from_log_id(w.log_id.as_ref().ok_or_else(|| bad("entry without id"))?);
    let payload = match w.kind {
        0 => EntryPayload::Blank,
        1 => EntryPayload::Normal(w.proposal.ok_or_else(|| bad("entry without proposal"))?),
        2 => EntryPayload::Membership(from_membership(
            w.membership
                .as_ref()
                .ok_or_else(|| bad("entry without members"))?,
        )?),
        k => return Err(bad(&format!("entry of unknown kind {k}"))),
    };
    Ok(Entry { log_id, payload })
}

pub fn decode<M: Message + Default>(what: &str, b: &[u8]) -> FsResult<M> {
    M::decode(b).map_err(|e| bad(&format!("{what}: {e}")))
}

pub fn applied(last: &Option<LogId<u64>>, m: &StoredMembership<u64, BasicNode>) -> WApplied {
    WApplied {
        applied: opt_log_id(last),
        membership_log: opt_log_id(m.log_id()),
        membership: Some(membership(m.membership())),
    }
}

/// The last applied log id and membership.
pub type AppliedState = (Option<LogId<u64>>, StoredMembership<u64, BasicNode>);

pub fn from_applied(w: &WApplied) -> FsResult<AppliedState> {
    let m = match &w.membership {
        Some(m) if !m.configs.is_empty() => from_membership(m)?,
        _ => Membership::default(),
    };
    Ok((
        from_opt_log_id(&w.applied),
        StoredMembership::new(from_opt_log_id(&w.membership_log), m),
    ))
}
