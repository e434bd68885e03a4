//! Snapshot files: a dump of one store installed into another gives the same records
//! and applied state; a file cut short or with a changed byte is refused, and the store
//! it was to replace is left as it was.

use std::collections::{BTreeMap, BTreeSet};

use openraft::{CommittedLeaderId, LogId, Membership, StoredMembership};

use super::*;
use crate::master::records::{op::Kind, EdgeRec, InodeRec, JournalEntry, MetaRec};

fn open(dir: &Path) -> Store {
    Store::open(dir, 1 << 20, 1 << 20, 16, 64 << 10).unwrap()
}

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(3, 1), index)
}

fn set_applied(store: &Store, index: u64) {
    let nodes: BTreeMap<u64, BasicNode> = (1..=3)
        .map(|i| (i, BasicNode::new(format!("127.0.0.1:{i}"))))
        .collect();
    let m = Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes);
    let stored = StoredMembership::new(Some(log_id(1)), m);
    let mut b = WriteBatch::default();
    b.put_cf(
        store.cf(CF_RAFT_META).unwrap(),
        APPLIED,
        wire::applied(&Some(log_id(index)), &stored).encode_to_vec(),
    );
    store.write_raw(b, false).unwrap();
}

/// A store with `n` files under the root, a meta key, and applied index `index`.
fn filled(dir: &Path, n: u64, index: u64) -> Store {
    let store = open(dir);
    let mut e = JournalEntry::default();
    for i in 0..n {
        e.push(Kind::PutInode(InodeRec {
            id: 100 + i,
            ..Default::default()
        }));
        e.push(Kind::PutEdge(EdgeRec {
            parent: 1,
            name: format!("f{i}"),
            child: 100 + i,
        }));
    }
    e.push(Kind::PutMeta(MetaRec {
        key: b"k".to_vec(),
        value: format!("v{n}").into_bytes(),
    }));
    store.apply(&e).unwrap();
    set_applied(&store, index);
    store
}

/// Every namespace record of `store`, column family by column family.
fn dump(store: &Store) -> Vec<Record> {
    let mut out = Vec::new();
    for cf in CFS {
        for item in store
            .db()
            .iterator_cf(store.cf(cf).unwrap(), IteratorMode::Start)
        {
            let (k, v) = item.unwrap();
            out.push((cf, k.to_vec(), v.to_vec()));
        }
    }
    out
}

fn applied_index(store: &Store) -> Option<u64> {
    let v = store.raft_meta(APPLIED).unwrap()?;
    let (last, _) = wire::from_applied(&wire::decode("applied", &v).unwrap()).unwrap();
    last.map(|l| l.index)
}

#[test]
fn a_snapshot_installed_elsewhere_gives_the_same_records() {
    let d = tempfile::tempdir().unwrap();
    let src = filled(&d.path().join("a"), 500, 42);
    let snaps = d.path().join("snaps");
    let meta = build(&src, &snaps, "t.tmp", 1).unwrap();
    let path = snaps.join("t.tmp");
    assert_eq!(meta.last_log_id, Some(log_id(42)));
    assert!(valid_id(&meta.snapshot_id), "{}", meta.snapshot_id);
    assert_eq!(
        meta.last_membership
            .membership()
            .voter_ids()
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(read_meta(&path).unwrap(), meta);
    assert_eq!(verify(&path).unwrap(), meta);
    assert_eq!(records(&path).unwrap(), dump(&src));

    // another store, with records of its own that the snapshot does not have
    let dst = filled(&d.path().join("b"), 700, 7);
    assert!(dst.inode(100 + 600).unwrap().is_some());
    let m = load_into(&dst, &path).unwrap();
    assert_eq!(m, meta);
    assert_eq!(dump(&dst), dump(&src));
    assert!(
        dst.inode(100 + 600).unwrap().is_none(),
        "an old record stayed"
    );
    assert_eq!(dst.child(1, "f499").unwrap(), Some(599));
    assert_eq!(applied_index(&dst), Some(42));
    assert!(dst.raft_meta(INSTALLED).unwrap().is_some());
}

#[test]
fn a_cut_or_changed_snapshot_is_refused_and_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let src = filled(&d.path().join("a"), 300, 42);
    let snaps = d.path().join("snaps");
    build(&src, &snaps, "t.tmp", 1).unwrap();
    let good = std::fs::read(snaps.join("t.tmp")).unwrap();
    let dst = filled(&d.path().join("b"), 10, 7);
    let before = dump(&dst);
    let bad = d.path().join("bad.snap");
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for cut in [0, 5, 20, good.len() / 2, good.len() - 13, good.len() - 1] {
        cases.push((format!("cut at {cut}"), good[..cut].to_vec()));
    }
    for at in [3, 30, good.len() / 3, good.len() - 2] {
        let mut b = good.clone();
        b[at] ^= 0x40;
        cases.push((format!("byte {at} changed"), b));
    }
    let mut longer = good.clone();
    longer.push(0);
    cases.push(("a byte added".into(), longer));
    for (what, bytes) in cases {
        std::fs::write(&bad, &bytes).unwrap();
        assert!(verify(&bad).is_err(), "{what}: accepted");
        assert!(load_into(&dst, &bad).is_err(), "{what}: installed");
        assert_eq!(dump(&dst), before, "{what}: the store changed");
        assert_eq!(applied_index(&dst), Some(7), "{what}: applied changed");
    }
    // the intact file is still taken
    std::fs::write(&bad, &good).unwrap();
    load_into(&dst, &bad).unwrap();
    assert_eq!(dump(&dst), dump(&src));
}

#[test]
fn an_interrupted_install_is_finished_at_start() {
    let d = tempfile::tempdir().unwrap();
    let src = filled(&d.path().join("a"), 50, 9);
    let meta_dir = d.path().join("b");
    let dst = filled(&meta_dir, 5, 2);
    let dir = meta_dir.join(DIR);
    build(&src, &dir, INSTALL, 1).unwrap();
    // a leftover of a transfer that never ended
    std::fs::write(dir.join("recv-1-2-3.snap"), b"partial").unwrap();
    recover(&dst, &meta_dir).unwrap();
    assert_eq!(dump(&dst), dump(&src));
    assert_eq!(applied_index(&dst), Some(9));
    assert!(!dir.join(INSTALL).exists());
    assert_eq!(
        read_meta(&dir.join(CURRENT)).unwrap().last_log_id,
        Some(log_id(9))
    );
    assert!(!dir.join("recv-1-2-3.snap").exists());
    // nothing to do the second time
    recover(&dst, &meta_dir).unwrap();
    assert_eq!(dump(&dst), dump(&src));
}
