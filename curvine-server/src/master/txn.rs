//! A mutation being built (`Txn`): its journal entry and an overlay of what it has
//! written, read before the store. On replicated masters several clients' mutations
//! share one `Txn` (a batch, `batch.rs`): each member's writes can be undone alone when
//! it fails, and a member's listing of a directory sees what earlier members changed
//! in it.

use std::collections::{BTreeMap, HashMap};

use curvine_common::proto::FileType;
use curvine_common::{FsError, FsResult};

use super::namespace::Reader;
use super::records::{
    op::Kind, BlockRec, Counters, EdgeRec, InodeRec, JournalEntry, LeaseRec, MetaRec, ReplicaRec,
    WorkerBlockRec,
};
use super::store::{self, Store};

pub(super) use super::apply::Delete;

/// A mutation being built: the journal entry plus an overlay of what it has written.
/// Effects on the master's memory (leases, replica accounting, deletions) are recorded
/// in the entry too, so that applying it (`apply::step`) needs nothing else.
pub(super) struct Txn<'a> {
    store: &'a Store,
    pub counters: Counters,
    pub now: i64,
    pub(super) entry: JournalEntry,
    pub(super) inodes: HashMap<u64, Option<InodeRec>>,
    pub(super) edges: HashMap<(u64, String), Option<u64>>,
    blocks: HashMap<u64, Option<BlockRec>>,
    metas: HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// While a member of a batch is built: how to undo each overlay change it made.
    undo: Option<Vec<Undo>>,
    /// The entries earlier members of the batch changed, by directory.
    prior_edges: HashMap<u64, BTreeMap<String, Option<u64>>>,
}

/// An overlay slot as it was before a member changed it (`None`: not in the overlay).
enum Undo {
    Inode(u64, Option<Option<InodeRec>>),
    Edge(u64, String, Option<Option<u64>>),
    Block(u64, Option<Option<BlockRec>>),
    Meta(Vec<u8>, Option<Option<Vec<u8>>>),
}

/// Where a member of a batch started (`Txn::begin_member`).
pub(super) struct Mark {
    ops: usize,
    counters: Counters,
}

/// What a batch keeps of its `Txn` between members (the store is borrowed anew).
#[derive(Default)]
pub(super) struct Parts {
    counters: Counters,
    entry: JournalEntry,
    inodes: HashMap<u64, Option<InodeRec>>,
    edges: HashMap<(u64, String), Option<u64>>,
    blocks: HashMap<u64, Option<BlockRec>>,
    metas: HashMap<Vec<u8>, Option<Vec<u8>>>,
    prior_edges: HashMap<u64, BTreeMap<String, Option<u64>>>,
}

impl Parts {
    /// The counters as the batch left them.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// How many records the overlay holds.
    pub fn overlay_len(&self) -> usize {
        self.inodes.len()
            + self.edges.len()
            + self.blocks.len()
            + self.metas.len()
            + self.prior_edges.values().map(BTreeMap::len).sum::<usize>()
    }
}

impl Reader for Txn<'_> {
    fn inode(&self, id: u64) -> FsResult<Option<InodeRec>> {
        match self.inodes.get(&id) {
            Some(v) => Ok(v.clone()),
            None => self.store.inode(id),
        }
    }
    fn child(&self, parent: u64, name: &str) -> FsResult<Option<u64>> {
        match self.edges.get(&(parent, name.to_string())) {
            Some(v) => Ok(*v),
            None => self.store.child(parent, name),
        }
    }
}

impl<'a> Txn<'a> {
    pub fn new(store: &'a Store, counters: Counters, now: i64) -> Txn<'a> {
        Txn::resume(
            store,
            Parts {
                counters,
                ..Default::default()
            },
            now,
        )
    }

    /// A batch's `Txn` again, for its next member.
    pub fn resume(store: &'a Store, p: Parts, now: i64) -> Txn<'a> {
        Txn {
            store,
            counters: p.counters,
            now,
            entry: p.entry,
            inodes: p.inodes,
            edges: p.edges,
            blocks: p.blocks,
            metas: p.metas,
            undo: None,
            prior_edges: p.prior_edges,
        }
    }

    /// What the batch keeps until its next member.
    pub fn into_parts(self) -> Parts {
        Parts {
            counters: self.counters,
            entry: self.entry,
            inodes: self.inodes,
            edges: self.edges,
            blocks: self.blocks,
            metas: self.metas,
            prior_edges: self.prior_edges,
        }
    }

    /// Start a member of a batch: from here its overlay changes can be undone.
    pub fn begin_member(&mut self) -> Mark {
        self.undo = Some(Vec::new());
        Mark {
            ops: self.entry.ops.len(),
            counters: self.counters,
        }
    }

    /// The member begun at `m` failed: drop everything it wrote.
    pub fn rollback_member(&mut self, m: Mark) {
        self.entry.ops.truncate(m.ops);
        self.counters = m.counters;
        for u in self.undo.take().unwrap_or_default().into_iter().rev() {
            match u {
                Undo::Inode(k, old) => restore(&mut self.inodes, k, old),
                Undo::Edge(d, n, old) => restore(&mut self.edges, (d, n), old),
                Undo::Block(k, old) => restore(&mut self.blocks, k, old),
                Undo::Meta(k, old) => restore(&mut self.metas, k, old),
            }
        }
    }

    /// The member succeeded: the entries it changed are seen by the later members'
    /// listings.
    pub fn end_member(&mut self) {
        for u in self.undo.take().unwrap_or_default() {
            if let Undo::Edge(d, n, _) = u {
                let now = self.edges.get(&(d, n.clone())).copied().flatten();
                self.prior_edges.entry(d).or_default().insert(n, now);
            }
        }
    }

    fn note(&mut self, u: impl FnOnce() -> Undo) {
        if let Some(log) = &mut self.undo {
            log.push(u());
        }
    }

    /// A block record, this mutation's (or its batch's) own first.
    pub fn block(&self, id: u64) -> FsResult<Option<BlockRec>> {
        match self.blocks.get(&id) {
            Some(b) => Ok(b.clone()),
            None => self.store.block(id),
        }
    }

    /// `block` for each of `ids`, in order.
    pub fn blocks(&self, ids: &[u64]) -> FsResult<Vec<Option<BlockRec>>> {
        if !ids.iter().any(|id| self.blocks.contains_key(id)) {
            return self.store.blocks(ids);
        }
        ids.iter().map(|&id| self.block(id)).collect()
    }

    /// A meta record, this mutation's (or its batch's) own first.
    pub fn meta(&self, key: &[u8]) -> FsResult<Option<Vec<u8>>> {
        match self.metas.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.store.meta(key),
        }
    }

    /// Whether this mutation (or its batch) deleted meta record `key`.
    pub fn meta_deleted(&self, key: &[u8]) -> bool {
        matches!(self.metas.get(key), Some(None))
    }

    /// Up to `limit` entries of directory `dir` after `start_after` in name order, and
    /// whether there are more: the store's, with the changes earlier members of the
    /// batch made in `dir` (a mutation's own changes are not merged: it lists what was
    /// there when it began, as it always has).
    pub fn list(
        &self,
        dir: u64,
        start_after: &str,
        limit: usize,
    ) -> FsResult<(Vec<(String, u64)>, bool)> {
        let Some(changed) = self.prior_edges.get(&dir) else {
            return self.store.list(dir, start_after, limit);
        };
        let mut after = start_after.to_string();
        loop {
            let (page, more) = self.store.list(dir, &after, limit)?;
            // names past the store's page are left for the next page, which the
            // caller asks for whenever `more`
            let last = match more {
                true => page.last().map(|(n, _)| n.clone()),
                false => None,
            };
            let mut merged: BTreeMap<String, u64> = page.into_iter().collect();
            let from = (!after.is_empty()).then_some(after.as_str());
            for (name, child) in changed {
                if from.is_some_and(|f| name.as_str() <= f)
                    || last.as_ref().is_some_and(|l| name > l)
                {
                    continue;
                }
                match child {
                    Some(c) => merged.insert(name.clone(), *c),
                    None => merged.remove(name),
                };
            }
            let mut out: Vec<(String, u64)> = merged.into_iter().collect();
            let more = more || out.len() > limit;
            out.truncate(limit);
            match last {
                // every name of the store's page was removed: on to its next page
                Some(l) if out.is_empty() => after = l,
                _ => return Ok((out, more)),
            }
        }
    }

    /// `inode` for a walk over many (a recursive delete): what the store has is read
    /// without filling its cache.
    pub fn inode_for_scan(&self, id: u64) -> FsResult<Option<InodeRec>> {
        match self.inodes.get(&id) {
            Some(v) => Ok(v.clone()),
            None => self.store.inode_for_scan(id),
        }
    }

    pub fn alloc_inode(&mut self) -> u64 {
        let id = self.counters.next_inode;
        self.counters.next_inode += 1;
        id
    }
    pub fn put_inode(&mut self, i: InodeRec) {
        let old = self.inodes.insert(i.id, Some(i.clone()));
        self.note(|| Undo::Inode(i.id, old));
        self.entry.push(Kind::PutInode(i));
    }
    pub fn del_inode(&mut self, id: u64) {
        let old = self.inodes.insert(id, None);
        self.note(|| Undo::Inode(id, old));
        self.entry.push(Kind::DelInode(id));
    }
    pub fn put_edge(&mut self, parent: u64, name: &str, child: u64) {
        let old = self.edges.insert((parent, name.to_string()), Some(child));
        self.note(|| Undo::Edge(parent, name.to_string(), old));
        self.entry.push(Kind::PutEdge(EdgeRec {
            parent,
            name: name.to_string(),
            child,
        }));
    }
    pub fn del_edge(&mut self, parent: u64, name: &str) {
        let old = self.edges.insert((parent, name.to_string()), None);
        self.note(|| Undo::Edge(parent, name.to_string(), old));
        self.entry.push(Kind::DelEdge(EdgeRec {
            parent,
            name: name.to_string(),
            child: 0,
        }));
    }
    pub fn put_block(&mut self, b: BlockRec) {
        let old = self.blocks.insert(b.id, Some(b.clone()));
        self.note(|| Undo::Block(b.id, old));
        self.entry.push(Kind::PutBlock(b));
    }
    pub fn put_worker_block(&mut self, worker_id: u32, block_id: u64) {
        self.entry.push(Kind::PutWorkerBlock(WorkerBlockRec {
            worker_id,
            block_id,
        }));
    }
    pub fn del_worker_block(&mut self, worker_id: u32, block_id: u64) {
        self.entry.push(Kind::DelWorkerBlock(WorkerBlockRec {
            worker_id,
            block_id,
        }));
    }
    /// Drop a block record and queue its replicas for deletion on their workers.
    pub fn drop_block(&mut self, b: &BlockRec) {
        for l in &b.locs {
            self.del_worker_block(l.worker_id, b.id);
            self.delete_replica(Delete {
                worker: curvine_common::WorkerId(l.worker_id),
                block: curvine_common::BlockId(b.id),
                tier: super::apply::tier_of(l.tier),
                len: b.len,
            });
            self.replica_freed(l.worker_id, b.id);
        }
        let old = self.blocks.insert(b.id, None);
        self.note(|| Undo::Block(b.id, old));
        self.entry.push(Kind::DelBlock(b.id));
        self.counters.blocks = self.counters.blocks.saturating_sub(1);
    }
    /// Once applied, have the worker delete replica `d`.
    pub fn delete_replica(&mut self, d: Delete) {
        self.entry.push(Kind::DeleteReplica(ReplicaRec {
            worker_id: d.worker.0,
            block_id: d.block.0,
            tier: d.tier as i32,
            len: d.len,
        }));
    }
    /// Once applied, the replica of `block` on `worker` is out of the block map (for
    /// the worker's reservations).
    pub fn replica_freed(&mut self, worker: u32, block: u64) {
        self.entry.push(Kind::ReplicaFreed(WorkerBlockRec {
            worker_id: worker,
            block_id: block,
        }));
    }
    /// Once applied, `len` bytes of `block` are committed on `worker`.
    pub fn replica_committed(&mut self, worker: u32, block: u64, len: u64) {
        self.entry.push(Kind::ReplicaCommitted(ReplicaRec {
            worker_id: worker,
            block_id: block,
            tier: 0,
            len,
        }));
    }
    /// Once applied, `client_id` holds the writer's lease on `inode`.
    pub fn grant_lease(&mut self, inode: u64, client_id: u64) {
        self.entry
            .push(Kind::GrantLease(LeaseRec { inode, client_id }));
    }
    /// Once applied, nobody holds a lease on `inode`.
    pub fn release_lease(&mut self, inode: u64) {
        self.entry.push(Kind::ReleaseLease(inode));
    }
    pub fn put_meta(&mut self, key: Vec<u8>, value: Vec<u8>) {
        let old = self.metas.insert(key.clone(), Some(value.clone()));
        self.note(|| Undo::Meta(key.clone(), old));
        self.entry.push(Kind::PutMeta(MetaRec { key, value }));
    }
    pub fn del_meta(&mut self, key: Vec<u8>) {
        let old = self.metas.insert(key.clone(), None);
        self.note(|| Undo::Meta(key.clone(), old));
        self.entry.push(Kind::DelMeta(key));
    }

    /// Add `name -> child` to directory `dir` (updating its entry count and times).
    pub fn link_entry(&mut self, dir: u64, name: &str, child: u64) -> FsResult<()> {
        self.link_entry_as(dir, name, child, false)
    }

    /// `link_entry`; `subdir`: the child is a directory, whose `..` links `dir` (a
    /// directory's link count is 2 plus its subdirectories).
    pub fn link_entry_as(
        &mut self,
        dir: u64,
        name: &str,
        child: u64,
        subdir: bool,
    ) -> FsResult<()> {
        let mut d = self.must_inode(dir)?;
        d.children += 1;
        if subdir {
            d.nlink = d.nlink.max(2) + 1;
        }
        d.mtime_ms = self.now;
        d.ctime_ms = self.now;
        self.put_edge(dir, name, child);
        self.put_inode(d);
        Ok(())
    }

    /// Remove `name` from directory `dir` (the child inode is left alone).
    pub fn unlink_entry(&mut self, dir: u64, name: &str) -> FsResult<()> {
        self.unlink_entry_as(dir, name, false)
    }

    /// `unlink_entry`; `subdir`: the entry is a directory (see `link_entry_as`).
    pub fn unlink_entry_as(&mut self, dir: u64, name: &str, subdir: bool) -> FsResult<()> {
        let mut d = self.must_inode(dir)?;
        d.children = d.children.saturating_sub(1);
        if subdir {
            d.nlink = d.nlink.saturating_sub(1).max(2);
        }
        d.mtime_ms = self.now;
        d.ctime_ms = self.now;
        self.del_edge(dir, name);
        self.put_inode(d);
        Ok(())
    }

    pub fn must_inode(&self, id: u64) -> FsResult<InodeRec> {
        self.inode(id)?
            .ok_or_else(|| FsError::internal(format!("inode {id} vanished")))
    }

    /// Drop one link to `child` (already unlinked from its directory): the inode and its
    /// blocks go when the last link does. Directories must already be empty.
    pub fn release_inode(&mut self, mut child: InodeRec) -> FsResult<()> {
        if child.file_type == FileType::Dir as i32 {
            self.del_inode(child.id);
            self.counters.dirs = self.counters.dirs.saturating_sub(1);
            return Ok(());
        }
        child.nlink = child.nlink.saturating_sub(1);
        if child.nlink > 0 {
            child.ctime_ms = self.now;
            self.put_inode(child);
            return Ok(());
        }
        let blocks = self.blocks(&child.blocks)?;
        for b in blocks.into_iter().flatten() {
            self.drop_block(&b);
        }
        if !child.complete {
            self.del_meta(store::open_key(child.id));
            self.release_lease(child.id);
        }
        if child.ufs.as_ref().is_some_and(|u| !u.persisted) {
            self.del_meta(super::persist::pending_key(child.id));
        }
        self.del_inode(child.id);
        self.counters.files = self.counters.files.saturating_sub(1);
        Ok(())
    }
}

fn restore<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>, k: K, old: Option<V>) {
    match old {
        Some(v) => m.insert(k, v),
        None => m.remove(&k),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), 1 << 20, 1 << 20, 16, 64 << 10).unwrap();
        (dir, s)
    }

    fn names(page: &[(String, u64)]) -> Vec<&str> {
        page.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// A failed member leaves the overlays, the entry and the counters as they were;
    /// the members before it keep theirs.
    #[test]
    fn a_failed_member_is_undone_and_the_others_stay() {
        let (_d, s) = store();
        let mut t = Txn::new(&s, Counters::default(), 0);
        let m = t.begin_member();
        t.put_edge(1, "a", 10);
        t.put_meta(b"k".to_vec(), b"first".to_vec());
        t.counters.files += 1;
        t.end_member();
        let _ = m;
        let kept = t.entry.ops.len();

        let m = t.begin_member();
        t.put_edge(1, "b", 11);
        t.del_edge(1, "a");
        t.put_meta(b"k".to_vec(), b"second".to_vec());
        t.put_block(BlockRec {
            id: 5,
            ..Default::default()
        });
        t.counters.files += 1;
        t.rollback_member(m);

        assert_eq!(t.entry.ops.len(), kept);
        assert_eq!(t.counters.files, 1);
        assert_eq!(t.child(1, "a").unwrap(), Some(10));
        assert_eq!(t.child(1, "b").unwrap(), None);
        assert_eq!(t.meta(b"k").unwrap(), Some(b"first".to_vec()));
        assert_eq!(t.block(5).unwrap(), None);
    }

    /// A member's listing sees what earlier members added and removed, page by page,
    /// and not its own changes.
    #[test]
    fn a_listing_merges_the_earlier_members_changes() {
        let (_d, s) = store();
        let mut e = JournalEntry::default();
        for (i, n) in ["b", "d", "f"].iter().enumerate() {
            e.push(Kind::PutEdge(EdgeRec {
                parent: 1,
                name: n.to_string(),
                child: 20 + i as u64,
            }));
        }
        let a = super::super::apply::step(&s, &e).unwrap();
        s.write(a.batch, &e).unwrap();

        let mut t = Txn::new(&s, Counters::default(), 0);
        t.begin_member();
        t.put_edge(1, "a", 30);
        t.put_edge(1, "e", 31);
        t.del_edge(1, "d");
        t.put_edge(2, "x", 32);
        t.end_member();
        t.begin_member();
        t.put_edge(1, "c", 33); // this member's own: not listed
        let (all, more) = t.list(1, "", 10).unwrap();
        assert_eq!(names(&all), ["a", "b", "e", "f"]);
        assert!(!more);
        let (p1, more) = t.list(1, "", 2).unwrap();
        assert_eq!(names(&p1), ["a", "b"]);
        assert!(more);
        let (p2, more) = t.list(1, "b", 2).unwrap();
        assert_eq!(names(&p2), ["e", "f"]);
        assert!(!more);
        assert_eq!(t.list(2, "", 10).unwrap().0, [("x".to_string(), 32)]);
        // a page whose every stored name was removed goes on to the next
        t.end_member();
        t.begin_member();
        t.del_edge(1, "a");
        t.del_edge(1, "b");
        t.end_member();
        let (p, more) = t.list(1, "", 1).unwrap();
        assert_eq!(names(&p), ["c"]);
        assert!(more);
    }
}
