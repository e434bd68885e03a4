//! Applying a journal entry as one pure step: the entry in, the RocksDB write batch and
//! the entry's typed effects on the master's memory out. The step reads the entry and
//! the store's column family handles and nothing else, and writes nothing: a Raft state
//! machine can run it for each committed entry on every replica. `Namespace::mutate`
//! runs it for the entries it builds, writes the batch (`Store::write`) and then hands
//! the effects to the lease table, the worker registry and re-replication.

use curvine_common::proto::{MountInfo, StorageTier};
use curvine_common::{BlockId, FsError, FsResult, WorkerId};
use prost::Message;
use rocksdb::WriteBatch;

use super::mounts::mount_id;
use super::records::{op::Kind, Counters, JournalEntry};
use super::store::{self, Store};

/// A replica to delete: `len` bytes in `tier` of `worker` become free once it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Delete {
    pub worker: WorkerId,
    pub block: BlockId,
    pub tier: StorageTier,
    pub len: u64,
}

/// A tier as records carry it; a value this build does not know counts as unspecified
/// (no worker reports capacity there).
pub(super) fn tier_of(t: i32) -> StorageTier {
    StorageTier::try_from(t).unwrap_or(StorageTier::Unspecified)
}

/// A writer's lease: `client_id` writes `inode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grant {
    pub inode: u64,
    pub client_id: u64,
}

/// A replica committed: `len` bytes of `block` on `worker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Committed {
    pub worker: WorkerId,
    pub block: BlockId,
    pub len: u64,
}

/// A replica that left the block map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Freed {
    pub worker: WorkerId,
    pub block: BlockId,
}

/// A change of the mount table (`mnt/` records of `meta`): every master keeps the
/// table's mounts, with their operators, in memory, so a new leader serves them at once.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum MountChange {
    Put(MountInfo),
    Del(u64),
}

/// What the master's memory learns from one entry. `Namespace::mutate` applies the
/// fields in their order here: leases released, then granted (a file replaced by a new
/// one hands its writer over), then the workers' accounting, then the deletions.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Effects {
    /// The id allocators and statistics after the entry, when the entry changed them.
    pub counters: Option<Counters>,
    /// Inodes whose writer's lease ends.
    pub released: Vec<u64>,
    pub granted: Vec<Grant>,
    pub committed: Vec<Committed>,
    pub freed: Vec<Freed>,
    /// Replicas to delete on their workers.
    pub deletes: Vec<Delete>,
    /// A block record was dropped (re-replication's count of missing blocks may change).
    pub blocks_dropped: bool,
    pub mounts: Vec<MountChange>,
}

/// One entry, ready to write: the batch (empty when the entry changes no record) and
/// the effects to apply once it is written.
pub(super) struct Applied {
    pub batch: WriteBatch,
    pub effects: Effects,
}

/// Turn `entry` into its write batch for `store` and its effects.
pub(super) fn step(store: &Store, entry: &JournalEntry) -> FsResult<Applied> {
    let mut b = WriteBatch::default();
    let mut fx = Effects::default();
    let (inodes, edges, blocks, wb, meta) = (
        store.cf(store::CF_INODES)?,
        store.cf(store::CF_EDGES)?,
        store.cf(store::CF_BLOCKS)?,
        store.cf(store::CF_WORKER_BLOCKS)?,
        store.cf(store::CF_META)?,
    );
    for op in &entry.ops {
        match &op.kind {
            Some(Kind::PutInode(i)) => b.put_cf(inodes, i.id.to_be_bytes(), i.encode_to_vec()),
            Some(Kind::DelInode(id)) => b.delete_cf(inodes, id.to_be_bytes()),
            Some(Kind::PutEdge(e)) => b.put_cf(
                edges,
                store::edge_key(e.parent, &e.name),
                e.child.to_be_bytes(),
            ),
            Some(Kind::DelEdge(e)) => b.delete_cf(edges, store::edge_key(e.parent, &e.name)),
            Some(Kind::PutBlock(r)) => b.put_cf(blocks, r.id.to_be_bytes(), r.encode_to_vec()),
            Some(Kind::DelBlock(id)) => {
                b.delete_cf(blocks, id.to_be_bytes());
                fx.blocks_dropped = true;
            }
            Some(Kind::PutWorkerBlock(r)) => {
                b.put_cf(wb, store::worker_block_key(r.worker_id, r.block_id), [])
            }
            Some(Kind::DelWorkerBlock(r)) => {
                b.delete_cf(wb, store::worker_block_key(r.worker_id, r.block_id))
            }
            Some(Kind::PutMeta(m)) => {
                if m.key == store::META_COUNTERS {
                    let c = Counters::decode(&*m.value).map_err(|e| {
                        FsError::internal(format!("journal entry: corrupt counters: {e}"))
                    })?;
                    fx.counters = Some(c);
                } else if let Some(id) = mount_id(&m.key) {
                    let info = MountInfo::decode(&*m.value).map_err(|e| {
                        FsError::internal(format!("journal entry: corrupt mount {id}: {e}"))
                    })?;
                    fx.mounts.push(MountChange::Put(info));
                }
                b.put_cf(meta, &m.key, &m.value)
            }
            Some(Kind::DelMeta(k)) => {
                if let Some(id) = mount_id(k) {
                    fx.mounts.push(MountChange::Del(id));
                }
                b.delete_cf(meta, k)
            }
            Some(Kind::GrantLease(l)) => fx.granted.push(Grant {
                inode: l.inode,
                client_id: l.client_id,
            }),
            Some(Kind::ReleaseLease(id)) => fx.released.push(*id),
            Some(Kind::ReplicaCommitted(r)) => fx.committed.push(Committed {
                worker: WorkerId(r.worker_id),
                block: BlockId(r.block_id),
                len: r.len,
            }),
            Some(Kind::ReplicaFreed(r)) => fx.freed.push(Freed {
                worker: WorkerId(r.worker_id),
                block: BlockId(r.block_id),
            }),
            Some(Kind::DeleteReplica(r)) => fx.deletes.push(Delete {
                worker: WorkerId(r.worker_id),
                block: BlockId(r.block_id),
                tier: tier_of(r.tier),
                len: r.len,
            }),
            None => {}
        }
    }
    Ok(Applied {
        batch: b,
        effects: fx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::records::{
        BlockRec, EdgeRec, InodeRec, LeaseRec, MetaRec, ReplicaRec, WorkerBlockRec,
    };

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), 1 << 20, 1 << 20, 16, 64 << 10).unwrap();
        (dir, s)
    }

    fn replica(worker_id: u32, block_id: u64, tier: i32, len: u64) -> ReplicaRec {
        ReplicaRec {
            worker_id,
            block_id,
            tier,
            len,
        }
    }

    /// The step writes nothing: the store is unchanged until the batch is written, and
    /// then holds exactly the entry's records.
    #[test]
    fn the_step_writes_nothing_and_its_batch_holds_the_records() {
        let (_d, s) = store();
        let mut e = JournalEntry::default();
        e.push(Kind::PutInode(InodeRec {
            id: 7,
            name: "f".into(),
            ..Default::default()
        }));
        e.push(Kind::PutEdge(EdgeRec {
            parent: 1,
            name: "f".into(),
            child: 7,
        }));
        e.push(Kind::PutBlock(BlockRec {
            id: 9,
            inode: 7,
            len: 5,
            ..Default::default()
        }));
        e.push(Kind::PutWorkerBlock(WorkerBlockRec {
            worker_id: 2,
            block_id: 9,
        }));
        e.push(Kind::PutMeta(MetaRec {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
        }));
        let a = step(&s, &e).unwrap();
        assert_eq!(a.batch.len(), 5);
        assert_eq!(
            a.effects,
            Effects::default(),
            "records alone have no effect"
        );
        assert_eq!(s.inode(7).unwrap(), None);
        assert_eq!(s.child(1, "f").unwrap(), None);
        s.write(a.batch, &e).unwrap();
        assert_eq!(s.inode(7).unwrap().map(|i| i.name), Some("f".into()));
        assert_eq!(s.child(1, "f").unwrap(), Some(7));
        assert_eq!(s.block(9).unwrap().map(|b| b.len), Some(5));
        assert_eq!(s.worker_blocks(2, 0..=u64::MAX).unwrap(), [9]);
        assert_eq!(s.meta(b"k").unwrap(), Some(b"v".to_vec()));
        // the deletes of the same records
        let mut e = JournalEntry::default();
        e.push(Kind::DelInode(7));
        e.push(Kind::DelEdge(EdgeRec {
            parent: 1,
            name: "f".into(),
            child: 0,
        }));
        e.push(Kind::DelBlock(9));
        e.push(Kind::DelWorkerBlock(WorkerBlockRec {
            worker_id: 2,
            block_id: 9,
        }));
        e.push(Kind::DelMeta(b"k".to_vec()));
        let a = step(&s, &e).unwrap();
        assert_eq!(a.batch.len(), 5);
        assert!(
            a.effects.blocks_dropped,
            "a dropped block record is an effect"
        );
        assert!(s.block(9).unwrap().is_some());
        s.write(a.batch, &e).unwrap();
        assert_eq!(s.inode(7).unwrap(), None);
        assert_eq!(s.child(1, "f").unwrap(), None);
        assert_eq!(s.block(9).unwrap(), None);
        assert!(s.worker_blocks(2, 0..=u64::MAX).unwrap().is_empty());
        assert_eq!(s.meta(b"k").unwrap(), None);
    }

    /// Effect kinds write no record and come out typed, each kind in entry order.
    #[test]
    fn effect_kinds_write_nothing_and_come_out_in_order() {
        let (_d, s) = store();
        let mut e = JournalEntry::default();
        e.push(Kind::DeleteReplica(replica(3, 30, 1, 300)));
        e.push(Kind::GrantLease(LeaseRec {
            inode: 10,
            client_id: 99,
        }));
        e.push(Kind::ReleaseLease(11));
        e.push(Kind::ReplicaCommitted(replica(1, 40, 0, 400)));
        e.push(Kind::ReplicaFreed(WorkerBlockRec {
            worker_id: 4,
            block_id: 50,
        }));
        e.push(Kind::ReleaseLease(12));
        e.push(Kind::DeleteReplica(replica(5, 31, 2, 301)));
        let a = step(&s, &e).unwrap();
        assert!(a.batch.is_empty(), "effects are not records");
        assert_eq!(
            a.effects,
            Effects {
                counters: None,
                released: vec![11, 12],
                granted: vec![Grant {
                    inode: 10,
                    client_id: 99
                }],
                committed: vec![Committed {
                    worker: WorkerId(1),
                    block: BlockId(40),
                    len: 400
                }],
                freed: vec![Freed {
                    worker: WorkerId(4),
                    block: BlockId(50)
                }],
                deletes: vec![
                    Delete {
                        worker: WorkerId(3),
                        block: BlockId(30),
                        tier: StorageTier::Mem,
                        len: 300
                    },
                    Delete {
                        worker: WorkerId(5),
                        block: BlockId(31),
                        tier: StorageTier::Ssd,
                        len: 301
                    },
                ],
                blocks_dropped: false,
                mounts: Vec::new(),
            }
        );
    }

    /// New counters are both a record and an effect; corrupt ones fail the step.
    #[test]
    fn counters_are_written_and_returned() {
        let (_d, s) = store();
        let c = Counters {
            next_inode: 100,
            files: 3,
            dirs: 2,
            ..Default::default()
        };
        let mut e = JournalEntry::default();
        e.push(Kind::PutMeta(MetaRec {
            key: store::META_COUNTERS.to_vec(),
            value: c.encode_to_vec(),
        }));
        let a = step(&s, &e).unwrap();
        assert_eq!(a.effects.counters, Some(c));
        s.write(a.batch, &e).unwrap();
        assert_eq!(s.counters().unwrap(), c);
        let mut bad = JournalEntry::default();
        bad.push(Kind::PutMeta(MetaRec {
            key: store::META_COUNTERS.to_vec(),
            value: vec![0xff; 3],
        }));
        assert!(matches!(step(&s, &bad), Err(FsError::Internal { .. })));
    }

    #[test]
    fn mount_records_are_table_changes() {
        let (_d, s) = store();
        let info = MountInfo {
            mount_id: 3,
            path: "/m".into(),
            ufs_uri: "file:///tmp".into(),
            ..Default::default()
        };
        let key = crate::master::mounts::mount_key(3);
        let mut e = JournalEntry::default();
        e.push(Kind::PutMeta(MetaRec {
            key: key.clone(),
            value: info.encode_to_vec(),
        }));
        e.push(Kind::DelMeta(crate::master::mounts::mount_key(4)));
        let a = step(&s, &e).unwrap();
        assert_eq!(
            a.effects.mounts,
            [MountChange::Put(info), MountChange::Del(4)]
        );
        let mut bad = JournalEntry::default();
        bad.push(Kind::PutMeta(MetaRec {
            key,
            value: vec![0xff; 3],
        }));
        assert!(matches!(step(&s, &bad), Err(FsError::Internal { .. })));
        // a key of another kind under the prefix's bytes is no mount
        assert_eq!(mount_id(b"mnt/x"), None);
    }
}
