//! Recursive deletes of subtrees of `master.delete_batch` inodes or more: detached in
//! one entry, removed in bounded entries by `purge_step`, resumed after a restart.

use std::time::Duration;

use curvine_common::proto::*;
use curvine_common::FsError;

use super::namespace::Namespace;
use super::purge::Cursor;
use super::tests::{mconf, root, touch, user};

fn open(dir: &std::path::Path, batch: u32) -> Namespace {
    let mut conf = mconf(dir);
    conf.delete_batch = batch;
    Namespace::load(conf, false, Duration::from_secs(30)).unwrap()
}

/// `top` with 3 directories, each holding 10 files and a directory of 5: 51 inodes
/// below `top`.
fn build(ns: &Namespace, top: &str, c: &CallerInfo) {
    for d in 0..3 {
        ns.mkdir(&format!("{top}/d{d}/s"), true, 0o755, c).unwrap();
        for f in 0..10 {
            touch(ns, &format!("{top}/d{d}/f{f}"), c);
        }
        for f in 0..5 {
            touch(ns, &format!("{top}/d{d}/s/f{f}"), c);
        }
    }
}

fn totals(ns: &Namespace) -> (u64, u64) {
    let r = ns.report();
    (r.files, r.dirs)
}

fn names(ns: &Namespace, dir: &str) -> Vec<String> {
    let (l, _) = ns.list(dir, "", 0, &root()).unwrap();
    l.into_iter().map(|s| s.name).collect()
}

/// Run `purge_step` until the subtree is gone; checks every entry's bound and returns
/// how many entries it took.
fn purge_all(ns: &Namespace, id: u64, batch: u64, cursor: &mut Cursor) -> u64 {
    let mut steps = 0;
    loop {
        let before = totals(ns);
        let (removed, done, _) = ns.purge_step(id, cursor).unwrap();
        let after = totals(ns);
        assert!(removed <= batch, "{removed} inodes in one entry");
        assert_eq!(before.0 + before.1 - after.0 - after.1, removed);
        steps += 1;
        if done {
            return steps;
        }
        assert!(steps < 1000, "the removal does not end");
    }
}

#[test]
fn a_large_subtree_goes_at_once_then_in_bounded_entries() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path(), 8);
    let c = root();
    touch(&ns, "/keep", &c);
    let base = totals(&ns);
    build(&ns, "/big", &c);
    let id = ns.get_status("/big", false, &c).unwrap().id;
    let d0 = ns.get_status("/big/d0/s", false, &c).unwrap().id;
    assert_eq!(totals(&ns), (base.0 + 45, base.1 + 7));
    ns.delete("/big", true, &c).unwrap();
    // gone at once for every caller; removed later
    assert!(matches!(
        ns.get_status("/big", false, &c),
        Err(FsError::NotFound { .. })
    ));
    assert_eq!(names(&ns, "/"), ["keep"]);
    assert_eq!(ns.get_status("/", false, &c).unwrap().nlink, 2);
    assert_eq!(ns.detached_roots().unwrap(), [id]);
    assert_eq!(totals(&ns), (base.0 + 45, base.1 + 7));
    let steps = purge_all(&ns, id, 8, &mut Cursor::default());
    assert_eq!(steps, 7, "52 inodes, 8 per entry");
    assert_eq!(totals(&ns), base);
    assert!(ns.detached_roots().unwrap().is_empty());
    for gone in [id, d0] {
        assert_eq!(ns.store.inode(gone).unwrap(), None);
        assert!(ns.store.list(gone, "", 10).unwrap().0.is_empty());
    }
    ns.store.check_cache();
    // the name is free again
    build(&ns, "/big", &c);
    assert_eq!(totals(&ns), (base.0 + 45, base.1 + 7));
}

#[test]
fn removal_resumes_after_a_restart() {
    let d = tempfile::tempdir().unwrap();
    let c = root();
    let (id, base) = {
        let ns = open(d.path(), 8);
        let base = totals(&ns);
        build(&ns, "/big", &c);
        let id = ns.get_status("/big", false, &c).unwrap().id;
        ns.delete("/big", true, &c).unwrap();
        let mut cursor = Cursor::default();
        for _ in 0..3 {
            let (removed, done, _) = ns.purge_step(id, &mut cursor).unwrap();
            assert_eq!((removed, done), (8, false));
        }
        (id, base)
    };
    let ns = open(d.path(), 8);
    assert_eq!(ns.detached_roots().unwrap(), [id]);
    assert!(ns.get_status("/big", false, &c).is_err());
    assert_eq!(totals(&ns).0 + totals(&ns).1, base.0 + base.1 + 52 - 24);
    let steps = purge_all(&ns, id, 8, &mut Cursor::default());
    assert_eq!(steps, 4, "28 inodes left, 8 per entry");
    assert_eq!(totals(&ns), base);
    assert!(ns.detached_roots().unwrap().is_empty());
}

#[test]
fn a_subtree_below_the_batch_is_deleted_in_its_own_entry() {
    // 51 inodes below /big: with a batch of 52 the whole delete is one entry
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path(), 52);
    let c = root();
    let base = totals(&ns);
    build(&ns, "/big", &c);
    ns.delete("/big", true, &c).unwrap();
    assert!(ns.detached_roots().unwrap().is_empty());
    assert_eq!(totals(&ns), base);
    // with 51, it is detached
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path(), 51);
    build(&ns, "/big", &c);
    ns.delete("/big", true, &c).unwrap();
    assert_eq!(ns.detached_roots().unwrap().len(), 1);
    assert_eq!(totals(&ns), (45, 8));
}

#[test]
fn a_refusal_deep_in_a_large_subtree_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path(), 4);
    let (c, alice) = (root(), user(1000, 1000));
    ns.mkdir("/u", false, 0o777, &c).unwrap();
    build(&ns, "/u/big", &alice);
    // a directory of root's deep inside, with something in it alice may not remove
    ns.mkdir("/u/big/d2/s/locked", false, 0o755, &c).unwrap();
    touch(&ns, "/u/big/d2/s/locked/f", &c);
    let before = totals(&ns);
    let e = ns.delete("/u/big", true, &alice).unwrap_err();
    assert!(
        matches!(&e, FsError::PermissionDenied { path } if path == "/u/big/d2/s/locked"),
        "{e:?}"
    );
    assert!(ns.get_status("/u/big/d0/f0", false, &alice).is_ok());
    assert!(ns.detached_roots().unwrap().is_empty());
    assert_eq!(totals(&ns), before);
    // root may, and the subtree is detached
    ns.delete("/u/big", true, &c).unwrap();
    assert_eq!(ns.detached_roots().unwrap().len(), 1);
}

/// A `file://` store with `n` files in `dir` (made if missing).
fn store_files(root: &std::path::Path, dir: &str, n: usize) {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).unwrap();
    for i in 0..n {
        std::fs::write(d.join(format!("f{i}")), b"x").unwrap();
    }
}

/// `umount`, and a `resync` that finds a directory gone from the store, remove trees
/// of more inodes than the batch as the recursive delete does: gone at once, removed
/// by the purge task in bounded entries; smaller ones in their own entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn umount_and_resync_hand_large_trees_to_the_purge() {
    let d = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    // 20 files at the top, `big` of 30 files and `big/sub` of 10, `small` of 3
    store_files(store.path(), "", 20);
    store_files(store.path(), "big", 30);
    store_files(store.path(), "big/sub", 10);
    store_files(store.path(), "small", 3);
    let ns = std::sync::Arc::new(open(d.path(), 8));
    let c = root();
    let base = totals(&ns);
    let info = |path: &str| MountInfo {
        path: path.into(),
        ufs_uri: format!("file://{}", store.path().display()),
        mode: MountMode::Cache as i32,
        sync_interval_ms: -1,
        ..Default::default()
    };
    ns.mount(info("/m"), &c).await.unwrap();
    ns.resync("/m").await.unwrap(); // loads every directory
    assert_eq!(totals(&ns), (base.0 + 63, base.1 + 4));
    let big = ns.get_status("/m/big", false, &c).unwrap().id;

    // resync: `big` (41 inodes below it) left the store: gone at once, removed later
    std::fs::remove_dir_all(store.path().join("big")).unwrap();
    let s = ns.resync("/m").await.unwrap();
    assert_eq!((s.removed, s.detached), (1, 1), "{s:?}");
    assert!(matches!(
        ns.get_status("/m/big", false, &c),
        Err(FsError::NotFound { .. })
    ));
    assert_eq!(ns.detached_roots().unwrap(), [big]);
    let steps = purge_all(&ns, big, 8, &mut Cursor::default());
    assert_eq!(steps, 6, "42 inodes, 8 per entry");
    assert_eq!(totals(&ns), (base.0 + 23, base.1 + 2));

    // a directory below the batch goes in the resync's own entry
    std::fs::remove_dir_all(store.path().join("small")).unwrap();
    let s = ns.resync("/m").await.unwrap();
    assert_eq!((s.removed, s.detached), (1, 0), "{s:?}");
    assert!(ns.detached_roots().unwrap().is_empty());
    assert_eq!(totals(&ns), (base.0 + 20, base.1 + 1));

    // umount of 20 entries: the mount point is empty at once (a new directory with
    // the old one's attributes), the old one and its entries go in bounded entries
    ns.set_attr(&SetAttrRequest {
        path: "/m".into(),
        mode: Some(0o750),
        mtime_ms: Some(1_000_000),
        caller: Some(c.clone()),
        ..Default::default()
    })
    .unwrap();
    let old = ns.get_status("/m", false, &c).unwrap();
    ns.umount("/m", &c).await.unwrap();
    let now = ns.get_status("/m", false, &c).unwrap();
    assert_ne!(now.id, old.id);
    assert_eq!(
        (now.mode & 0o7777, now.uid, now.mtime_ms),
        (0o750, old.uid, old.mtime_ms)
    );
    assert!(names(&ns, "/m").is_empty());
    assert!(ns.mounts.list().is_empty());
    assert_eq!(ns.detached_roots().unwrap(), [old.id]);
    let steps = purge_all(&ns, old.id, 8, &mut Cursor::default());
    assert_eq!(steps, 3, "21 inodes, 8 per entry");
    assert_eq!(totals(&ns), (base.0, base.1 + 1));
    ns.store.check_cache();

    // a small mount unmounts in its own entry, keeping its mount point
    let small = tempfile::tempdir().unwrap();
    store_files(small.path(), "", 3);
    let mut i = info("/m");
    i.ufs_uri = format!("file://{}", small.path().display());
    ns.mount(i, &c).await.unwrap();
    ns.resync("/m").await.unwrap();
    let id = ns.get_status("/m", false, &c).unwrap().id;
    ns.umount("/m", &c).await.unwrap();
    assert_eq!(ns.get_status("/m", false, &c).unwrap().id, id);
    assert!(ns.detached_roots().unwrap().is_empty());
    assert_eq!(totals(&ns), (base.0, base.1 + 1));
}
