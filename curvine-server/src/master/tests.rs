//! Namespace tests against a temp-dir RocksDB (no RPC).

use std::time::{Duration, Instant};

use curvine_common::conf::MasterConf;
use curvine_common::proto::*;
use curvine_common::{BlockId, FsError, InodeId};

use super::namespace::Namespace;
use super::{RENAME_EXCHANGE, RENAME_NOREPLACE, XATTR_CREATE, XATTR_REPLACE};

pub(super) fn mconf(dir: &std::path::Path) -> MasterConf {
    MasterConf {
        meta_dir: dir.to_path_buf(),
        block_size: curvine_common::conf::ByteSize(1 << 20),
        ..Default::default()
    }
}

pub(super) fn open(dir: &std::path::Path) -> Namespace {
    Namespace::load(mconf(dir), false, Duration::from_secs(30)).unwrap()
}

pub(super) fn root() -> CallerInfo {
    CallerInfo {
        uid: 0,
        gid: 0,
        client_id: 1,
        client_host: "client-host".into(),
        ..Default::default()
    }
}

pub(super) fn user(uid: u32, gid: u32) -> CallerInfo {
    CallerInfo {
        uid,
        gid,
        client_id: 100 + u64::from(uid),
        ..Default::default()
    }
}

pub(super) fn create_req(path: &str, c: &CallerInfo) -> CreateRequest {
    CreateRequest {
        path: path.into(),
        caller: Some(c.clone()),
        ..Default::default()
    }
}

/// Create and complete an empty file.
pub(super) fn touch(ns: &Namespace, path: &str, c: &CallerInfo) -> FileStatus {
    let ((st, _), _) = ns.create(&create_req(path, c)).unwrap();
    let (st2, _) = ns
        .complete(&CompleteRequest {
            file_id: st.id,
            path: path.into(),
            caller: Some(c.clone()),
            ..Default::default()
        })
        .unwrap();
    st2
}

pub(super) fn register(ns: &Namespace, host: &str, mem: (u64, u64), ssd: (u64, u64)) -> u32 {
    let tiers = vec![
        TierReport {
            tier: StorageTier::Mem as i32,
            capacity: mem.0,
            used: mem.1,
            ..Default::default()
        },
        TierReport {
            tier: StorageTier::Ssd as i32,
            capacity: ssd.0,
            used: ssd.1,
            ..Default::default()
        },
    ];
    let (r, _) = ns
        .register_worker(RegisterRequest {
            worker_id: 0,
            address: Some(WorkerAddress {
                worker_id: 0,
                host: host.into(),
                data_port: 1000,
            }),
            tiers,
            blocks: vec![],
            cluster_id: String::new(),
            paged: false,
        })
        .unwrap();
    r.worker_id
}

/// Write a file with blocks of the given lengths through add_block/complete.
pub(super) fn write_file(ns: &Namespace, path: &str, lens: &[u64]) -> FileStatus {
    let c = root();
    let ((st, _), _) = ns.create(&create_req(path, &c)).unwrap();
    let mut prev: Vec<CommittedBlock> = vec![];
    for len in lens {
        let (b, _) = ns
            .add_block(&AddBlockRequest {
                file_id: st.id,
                path: path.into(),
                previous: std::mem::take(&mut prev),
                caller: Some(c.clone()),
                excluded_workers: vec![],
            })
            .unwrap();
        prev.push(CommittedBlock {
            block_id: b.block_id,
            len: *len,
            worker_ids: b.locations.iter().map(|l| l.worker_id).collect(),
        });
    }
    ns.complete(&CompleteRequest {
        file_id: st.id,
        path: path.into(),
        blocks: prev,
        len: lens.iter().sum(),
        caller: Some(c),
        min_len: 0,
        mtime_ms: 0,
    })
    .unwrap()
    .0
}

pub(super) fn stat(ns: &Namespace, p: &str) -> Result<FileStatus, FsError> {
    ns.get_status(p, false, &root())
}

fn names(ns: &Namespace, p: &str) -> Vec<String> {
    ns.list(p, "", 0, &root())
        .unwrap()
        .0
        .into_iter()
        .map(|s| s.name)
        .collect()
}

#[test]
fn mkdir_create_list_stat() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let dir = ns.mkdir("/a/b", true, 0o750, &c).unwrap().0;
    assert_eq!(dir.file_type, FileType::Dir as i32);
    assert_eq!(dir.path, "/a/b");
    assert_eq!(dir.mode, 0o750);
    assert!(matches!(
        ns.mkdir("/a/b", false, 0, &c),
        Err(FsError::AlreadyExists { .. })
    ));
    assert!(ns.mkdir("/a/b", true, 0, &c).is_ok());
    let before = stat(&ns, "/a/b").unwrap();
    std::thread::sleep(Duration::from_millis(2));
    touch(&ns, "/a/b/f1", &c);
    touch(&ns, "/a/b/f0", &c);
    let after = stat(&ns, "/a/b").unwrap();
    assert_eq!(after.children, 2);
    assert!(after.mtime_ms > before.mtime_ms);
    assert_eq!(names(&ns, "/a/b"), vec!["f0", "f1"]);
    let f = stat(&ns, "/a/b/f0").unwrap();
    assert_eq!(f.path, "/a/b/f0");
    assert!(f.complete);
    assert_eq!(f.nlink, 1);
    assert!(f.mtime_ms > 0 && f.atime_ms > 0 && f.ctime_ms > 0);
    // Defaults from conf.
    assert_eq!(f.block_size, 1 << 20);
    assert_eq!(f.replicas, 1);
    assert_eq!(f.storage_tier, StorageTier::Mem as i32);
    let r = ns.report();
    assert_eq!((r.files, r.dirs), (2, 3));
}

#[test]
fn list_pages_in_name_order() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    ns.mkdir("/d", false, 0, &root()).unwrap();
    for i in (0..25).rev() {
        touch(&ns, &format!("/d/f{i:02}"), &root());
    }
    let mut all = vec![];
    let mut after = String::new();
    loop {
        let (page, more) = ns.list("/d", &after, 10, &root()).unwrap();
        assert!(page.len() <= 10);
        after = page.last().map(|s| s.name.clone()).unwrap_or_default();
        all.extend(page.into_iter().map(|s| s.name));
        if !more {
            break;
        }
    }
    let want: Vec<String> = (0..25).map(|i| format!("f{i:02}")).collect();
    assert_eq!(all, want);
}

#[test]
fn create_errors() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    ns.mkdir("/dir", false, 0, &c).unwrap();
    touch(&ns, "/file", &c);
    assert!(matches!(
        ns.create(&create_req("/dir", &c)),
        Err(FsError::IsADirectory { .. })
    ));
    assert!(matches!(
        ns.create(&create_req("/file/x", &c)),
        Err(FsError::NotADirectory { .. })
    ));
    match ns.create(&create_req("/missing/x", &c)) {
        Err(FsError::NotFound { path }) => assert_eq!(path, "/missing"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        ns.create(&create_req("/file", &c)),
        Err(FsError::AlreadyExists { .. })
    ));
    let mut r = create_req("/file", &c);
    r.overwrite = true;
    let old = stat(&ns, "/file").unwrap();
    let new = ns.create(&r).unwrap().0 .0;
    assert_ne!(old.id, new.id);
    r.exclusive = true;
    assert!(matches!(ns.create(&r), Err(FsError::AlreadyExists { .. })));
    let mut r = create_req("/p/q/r/f", &c);
    r.create_parents = true;
    ns.create(&r).unwrap();
    assert_eq!(stat(&ns, "/p/q/r").unwrap().file_type, FileType::Dir as i32);
    assert!(matches!(
        ns.create(&create_req("/", &c)),
        Err(FsError::IsADirectory { .. })
    ));
}

#[test]
fn deep_unicode_and_invalid_paths() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let deep: String = (0..50).map(|i| format!("/l{i}")).collect();
    ns.mkdir(&deep, true, 0, &c).unwrap();
    touch(&ns, &format!("{deep}/leaf"), &c);
    assert_eq!(
        stat(&ns, &format!("{deep}/leaf")).unwrap().path,
        format!("{deep}/leaf")
    );
    touch(&ns, "/数据-ファイル-🚀", &c);
    assert_eq!(
        names(&ns, "/").iter().filter(|n| n.contains('🚀')).count(),
        1
    );
    for bad in ["", "rel/path", "/a/../b", "/a/./b", "/a\0b"] {
        assert!(
            matches!(stat(&ns, bad), Err(FsError::InvalidPath { .. })),
            "{bad:?}"
        );
    }
    let long = format!("/{}", "x".repeat(256));
    assert!(matches!(
        ns.mkdir(&long, false, 0, &c),
        Err(FsError::NameTooLong { .. })
    ));
}

/// `mkdir -p` of a path of 30,000 components (60 KB, under `max_path_len`) makes every
/// directory in one call, without deep recursion; through a symlink it makes the
/// missing ones under the link's target; an intermediate directory the caller may not
/// write stops it with PermissionDenied and nothing made.
#[test]
fn mkdir_parents_of_deep_paths_and_through_symlinks() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let deep = "/d".repeat(30_000);
    // run on a small stack: recursion per component would overflow it
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn_scoped(s, || ns.mkdir(&deep, true, 0, &c).unwrap())
            .unwrap()
            .join()
            .unwrap();
    });
    assert!(stat(&ns, &deep).is_ok());
    assert_eq!(stat(&ns, &"/d".repeat(29_999)).unwrap().nlink, 3);

    ns.mkdir("/real", false, 0, &c).unwrap();
    ns.symlink("/real", "/link", &c).unwrap();
    ns.mkdir("/link/a/b/c", true, 0, &c).unwrap();
    assert!(stat(&ns, "/real/a/b/c").is_ok());

    let u = user(1000, 1000);
    ns.mkdir("/open", false, 0o777, &c).unwrap();
    ns.mkdir("/open/shut", false, 0o555, &c).unwrap();
    assert!(matches!(
        ns.mkdir("/open/shut/x/y", true, 0, &u),
        Err(FsError::PermissionDenied { .. })
    ));
    assert!(ns.mkdir("/open/mine/x/y", true, 0o700, &u).is_ok());
    assert!(matches!(
        stat(&ns, "/open/shut/x"),
        Err(FsError::NotFound { .. })
    ));
}

#[test]
fn rename_rules() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    for p in ["/d1", "/d2", "/full", "/full/sub"] {
        ns.mkdir(p, false, 0, &c).unwrap();
    }
    touch(&ns, "/f1", &c);
    let f2 = touch(&ns, "/f2", &c);
    // File over file replaces it.
    ns.rename("/f2", "/f1", 0, &c).unwrap();
    assert_eq!(stat(&ns, "/f1").unwrap().id, f2.id);
    assert!(matches!(stat(&ns, "/f2"), Err(FsError::NotFound { .. })));
    assert_eq!(ns.report().files, 1);
    // Dir over empty dir replaces; over a non-empty one fails.
    ns.rename("/d1", "/d2", 0, &c).unwrap();
    assert!(stat(&ns, "/d1").is_err());
    assert!(matches!(
        ns.rename("/d2", "/full", 0, &c),
        Err(FsError::DirectoryNotEmpty { .. })
    ));
    assert!(matches!(
        ns.rename("/f1", "/d2", 0, &c),
        Err(FsError::IsADirectory { .. })
    ));
    assert!(matches!(
        ns.rename("/d2", "/f1", 0, &c),
        Err(FsError::NotADirectory { .. })
    ));
    assert!(matches!(
        ns.rename("/full", "/full/sub/x", 0, &c),
        Err(FsError::InvalidArgument { .. })
    ));
    ns.rename("/f1", "/f1", 0, &c).unwrap();
    assert!(matches!(
        ns.rename("/nope", "/x", 0, &c),
        Err(FsError::NotFound { .. })
    ));
    // NOREPLACE.
    touch(&ns, "/g", &c);
    assert!(matches!(
        ns.rename("/g", "/f1", RENAME_NOREPLACE, &c),
        Err(FsError::AlreadyExists { .. })
    ));
    ns.rename("/g", "/h", RENAME_NOREPLACE, &c).unwrap();
    // EXCHANGE: swap a file and a directory.
    let h = stat(&ns, "/h").unwrap();
    let full = stat(&ns, "/full").unwrap();
    ns.rename("/h", "/full", RENAME_EXCHANGE, &c).unwrap();
    assert_eq!(stat(&ns, "/h").unwrap().id, full.id);
    assert_eq!(stat(&ns, "/full").unwrap().id, h.id);
    assert_eq!(stat(&ns, "/h/sub").unwrap().file_type, FileType::Dir as i32);
    assert!(matches!(
        ns.rename("/h", "/missing", RENAME_EXCHANGE, &c),
        Err(FsError::NotFound { .. })
    ));
    // Moving a directory keeps its subtree; parents' entry counts follow.
    ns.rename("/h", "/d2/moved", 0, &c).unwrap();
    assert!(stat(&ns, "/d2/moved/sub").is_ok());
    assert_eq!(stat(&ns, "/d2").unwrap().children, 1);
}

#[test]
fn delete_rules() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    ns.mkdir("/t/a/b", true, 0, &c).unwrap();
    touch(&ns, "/t/a/b/f", &c);
    touch(&ns, "/t/a/g", &c);
    assert!(matches!(
        ns.delete("/t", false, &c),
        Err(FsError::DirectoryNotEmpty { .. })
    ));
    assert!(matches!(
        ns.delete("/", true, &c),
        Err(FsError::InvalidArgument { .. })
    ));
    assert!(matches!(
        ns.delete("/zz", false, &c),
        Err(FsError::NotFound { .. })
    ));
    assert!(ns.delete("/t", true, &c).unwrap().0 > 0);
    assert!(stat(&ns, "/t").is_err());
    let r = ns.report();
    assert_eq!((r.files, r.dirs), (0, 1));
    assert_eq!(stat(&ns, "/").unwrap().children, 0);
}

#[test]
fn hard_links_and_symlinks() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    register(&ns, "h1", (1 << 30, 0), (0, 0));
    let f = write_file(&ns, "/f", &[100]);
    ns.mkdir("/dir", false, 0, &c).unwrap();
    let l = ns.link("/f", "/dir/l", &c).unwrap().0;
    assert_eq!((l.id, l.nlink), (f.id, 2));
    assert!(matches!(
        ns.link("/dir", "/dl", &c),
        Err(FsError::PermissionDenied { .. })
    ));
    assert!(matches!(
        ns.link("/f", "/dir/l", &c),
        Err(FsError::AlreadyExists { .. })
    ));
    ns.delete("/f", false, &c).unwrap();
    let (st, blocks) = ns.open("/dir/l", &c).unwrap();
    assert_eq!((st.nlink, st.len, blocks.len()), (1, 100, 1));
    ns.symlink("/dir", "/sl", &c).unwrap();
    ns.symlink("l", "/dir/rel", &c).unwrap();
    assert_eq!(ns.readlink("/sl", &c).unwrap(), "/dir");
    assert!(matches!(
        ns.readlink("/dir", &c),
        Err(FsError::NotASymlink { .. })
    ));
    assert_eq!(
        stat(&ns, "/sl").unwrap().file_type,
        FileType::Symlink as i32
    );
    assert_eq!(
        ns.get_status("/sl", true, &c).unwrap().file_type,
        FileType::Dir as i32
    );
    // Through a symlink in the middle, and a relative one at the end.
    assert_eq!(stat(&ns, "/sl/l").unwrap().id, f.id);
    assert_eq!(ns.get_status("/sl/rel", true, &c).unwrap().id, f.id);
    assert!(matches!(
        ns.open("/sl", &c),
        Err(FsError::IsADirectory { .. })
    ));
    ns.symlink("/loop2", "/loop1", &c).unwrap();
    ns.symlink("/loop1", "/loop2", &c).unwrap();
    assert!(ns.get_status("/loop1", true, &c).is_err());
}

#[test]
fn xattrs() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    touch(&ns, "/x", &c);
    assert!(matches!(
        ns.set_xattr("/x", "user.a", b"1", XATTR_REPLACE, &c),
        Err(FsError::NoSuchXattr { .. })
    ));
    ns.set_xattr("/x", "user.a", b"1", XATTR_CREATE, &c)
        .unwrap();
    assert!(matches!(
        ns.set_xattr("/x", "user.a", b"2", XATTR_CREATE, &c),
        Err(FsError::AlreadyExists { .. })
    ));
    ns.set_xattr("/x", "user.a", b"2", XATTR_REPLACE, &c)
        .unwrap();
    ns.set_xattr("/x", "user.b", b"", 0, &c).unwrap();
    assert_eq!(ns.get_xattr("/x", "user.a", &c).unwrap(), b"2");
    assert_eq!(ns.list_xattr("/x", &c).unwrap(), vec!["user.a", "user.b"]);
    ns.remove_xattr("/x", "user.a", &c).unwrap();
    assert!(matches!(
        ns.get_xattr("/x", "user.a", &c),
        Err(FsError::NoSuchXattr { .. })
    ));
    assert!(matches!(
        ns.remove_xattr("/x", "user.a", &c),
        Err(FsError::NoSuchXattr { .. })
    ));
}

#[test]
fn append_truncate_and_block_deletes() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let w = register(&ns, "h1", (1 << 30, 0), (0, 0));
    let f = write_file(&ns, "/f", &[100, 100, 30]);
    let (_, blocks) = ns.open("/f", &c).unwrap();
    let offs: Vec<(u64, u64)> = blocks.iter().map(|b| (b.offset, b.len)).collect();
    assert_eq!(offs, vec![(0, 100), (100, 100), (200, 30)]);
    assert_eq!(BlockId(blocks[2].block_id), BlockId::new(InodeId(f.id), 2));
    assert_eq!(blocks[0].locations[0].worker_id, w);
    // Append: new blocks continue the index and the offsets.
    let ((st, last), _) = ns
        .append(&AppendRequest {
            path: "/f".into(),
            caller: Some(c.clone()),
        })
        .unwrap();
    assert!(!st.complete);
    assert_eq!(last.unwrap().offset, 200);
    let (b, _) = ns
        .add_block(&AddBlockRequest {
            file_id: f.id,
            path: "/f".into(),
            caller: Some(c.clone()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(b.offset, 230);
    assert_eq!(BlockId(b.block_id).index(), 3);
    ns.complete(&CompleteRequest {
        file_id: f.id,
        path: "/f".into(),
        blocks: vec![CommittedBlock {
            block_id: b.block_id,
            len: 50,
            worker_ids: vec![w],
        }],
        len: 280,
        caller: Some(c.clone()),
        min_len: 0,
        mtime_ms: 0,
    })
    .unwrap();
    let (st, blocks) = ns.open("/f", &c).unwrap();
    assert_eq!(st.len, 280);
    assert_eq!(
        blocks.iter().map(|b| (b.offset, b.len)).collect::<Vec<_>>(),
        vec![(0, 100), (100, 100), (200, 30), (230, 50)]
    );
    // Truncate to 150: keep two blocks, the second shortened; the rest queued for deletion.
    let st = ns.truncate("/f", 150, &c).unwrap().0;
    assert_eq!(st.len, 150);
    let (_, after) = ns.open("/f", &c).unwrap();
    assert_eq!(
        after.iter().map(|b| (b.offset, b.len)).collect::<Vec<_>>(),
        vec![(0, 100), (100, 50)]
    );
    // Growing leaves a hole past the blocks: no block is added, the length is the new
    // one, and shrinking into the hole keeps the blocks.
    let st = ns.truncate("/f", 1000, &c).unwrap().0;
    assert_eq!((st.len, st.tail_zeros), (1000, 850));
    let st = ns.truncate("/f", 151, &c).unwrap().0;
    assert_eq!((st.len, st.tail_zeros), (151, 1));
    assert_eq!(ns.open("/f", &c).unwrap().1, after);
    assert!(matches!(
        ns.truncate("/f", u64::MAX, &c),
        Err(FsError::InvalidArgument { .. })
    ));
    let st = ns.truncate("/f", 150, &c).unwrap().0;
    assert_eq!((st.len, st.tail_zeros), (150, 0));
    ns.mkdir("/dd", false, 0, &c).unwrap();
    assert!(matches!(
        ns.truncate("/dd", 0, &c),
        Err(FsError::IsADirectory { .. })
    ));
    let (hb, _) = ns
        .heartbeat(HeartbeatRequest {
            worker_id: w,
            ..Default::default()
        })
        .unwrap();
    let mut del = hb.delete_blocks.clone();
    del.sort();
    assert_eq!(del, vec![blocks[2].block_id, blocks[3].block_id]);
    // Deleting the file queues the rest.
    ns.delete("/f", false, &c).unwrap();
    let (hb, _) = ns
        .heartbeat(HeartbeatRequest {
            worker_id: w,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(hb.delete_blocks.len(), 2);
    assert_eq!(ns.report().blocks, 0);
}

#[test]
fn retried_add_block_drops_the_abandoned_block() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let w1 = register(&ns, "h1", (1 << 30, 0), (0, 0));
    let w2 = register(&ns, "h2", (1 << 29, 0), (0, 0));
    let st = ns.create(&create_req("/r", &c)).unwrap().0 .0;
    let req = |excl: Vec<u32>| AddBlockRequest {
        file_id: st.id,
        path: "/r".into(),
        caller: Some(c.clone()),
        excluded_workers: excl,
        ..Default::default()
    };
    let b1 = ns.add_block(&req(vec![])).unwrap().0;
    assert_eq!(b1.locations[0].worker_id, w1, "most free space first");
    let b2 = ns.add_block(&req(vec![w1])).unwrap().0;
    assert_eq!(b2.locations[0].worker_id, w2);
    assert_eq!(b2.offset, 0);
    ns.complete(&CompleteRequest {
        file_id: st.id,
        path: "/r".into(),
        blocks: vec![CommittedBlock {
            block_id: b2.block_id,
            len: 7,
            worker_ids: vec![w2],
        }],
        len: 7,
        caller: Some(c.clone()),
        min_len: 0,
        mtime_ms: 0,
    })
    .unwrap();
    let (st, blocks) = ns.open("/r", &c).unwrap();
    assert_eq!(
        (st.len, blocks.len(), blocks[0].block_id),
        (7, 1, b2.block_id)
    );
    let hb = ns
        .heartbeat(HeartbeatRequest {
            worker_id: w1,
            ..Default::default()
        })
        .unwrap()
        .0;
    assert_eq!(hb.delete_blocks, vec![b1.block_id]);
}

#[test]
fn state_survives_reopen() {
    let d = tempfile::tempdir().unwrap();
    let (fid, w);
    {
        let ns = open(d.path());
        w = register(&ns, "h1", (1 << 30, 0), (0, 0));
        ns.mkdir("/keep/dir", true, 0, &root()).unwrap();
        fid = write_file(&ns, "/keep/f", &[10, 20]).id;
        ns.set_xattr("/keep/f", "user.k", b"v", 0, &root()).unwrap();
        ns.create(&create_req("/keep/open", &root())).unwrap();
    }
    let ns = open(d.path());
    let (st, blocks) = ns.open("/keep/f", &root()).unwrap();
    assert_eq!((st.id, st.len, blocks.len()), (fid, 30, 2));
    assert_eq!(ns.get_xattr("/keep/f", "user.k", &root()).unwrap(), b"v");
    assert!(stat(&ns, "/keep/dir").is_ok());
    // The file being written got a fresh lease; ids keep counting; workers keep their id.
    assert_eq!(ns.leases.len(), 1);
    assert!(touch(&ns, "/keep/new", &root()).id > fid);
    assert!(
        ns.heartbeat(HeartbeatRequest {
            worker_id: w,
            ..Default::default()
        })
        .unwrap()
        .0
        .reregister
    );
    let mut again = RegisterRequest {
        worker_id: w,
        address: Some(WorkerAddress {
            host: "h1".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    again.blocks = blocks
        .iter()
        .map(|b| BlockReplica {
            block_id: b.block_id,
            len: b.len,
            tier: StorageTier::Mem as i32,
        })
        .collect();
    assert_eq!(ns.register_worker(again).unwrap().0.worker_id, w);
    assert_eq!(ns.open("/keep/f", &root()).unwrap().1[1].locations.len(), 1);
    assert_eq!(ns.report().files, 3);
}

#[test]
fn permissions_for_non_root_callers() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let alice = user(1000, 1000);
    let bob = user(1001, 1001);
    ns.mkdir("/locked", false, 0o755, &c).unwrap();
    touch(&ns, "/locked/f", &c);
    assert!(matches!(
        ns.create(&create_req("/locked/x", &alice)),
        Err(FsError::PermissionDenied { .. })
    ));
    assert!(matches!(
        ns.delete("/locked/f", false, &alice),
        Err(FsError::PermissionDenied { .. })
    ));
    ns.mkdir("/private", false, 0o700, &c).unwrap();
    assert!(matches!(
        ns.get_status("/private/x", false, &alice),
        Err(FsError::PermissionDenied { .. })
    ));
    // Own directory: fine. Sticky shared directory: only the owner deletes.
    ns.mkdir("/home", false, 0o777, &c).unwrap();
    ns.mkdir("/home/alice", false, 0o755, &alice).unwrap();
    let f = touch(&ns, "/home/alice/f", &alice);
    assert_eq!((f.uid, f.gid), (1000, 1000));
    ns.mkdir("/tmp", false, 0o1777, &c).unwrap();
    touch(&ns, "/tmp/a", &alice);
    assert!(matches!(
        ns.delete("/tmp/a", false, &bob),
        Err(FsError::NotPermitted { .. })
    ));
    assert!(matches!(
        ns.rename("/tmp/a", "/tmp/b", 0, &bob),
        Err(FsError::NotPermitted { .. })
    ));
    ns.rename("/tmp/a", "/tmp/b", 0, &alice).unwrap();
    // chmod by the owner only; chown by root only; chgrp by the owner to its own group.
    let mut sa = SetAttrRequest {
        path: "/home/alice/f".into(),
        mode: Some(0o600),
        caller: Some(bob.clone()),
        ..Default::default()
    };
    assert!(matches!(
        ns.set_attr(&sa),
        Err(FsError::NotPermitted { .. })
    ));
    sa.caller = Some(alice.clone());
    assert_eq!(ns.set_attr(&sa).unwrap().0.mode, 0o600);
    let chown = SetAttrRequest {
        path: "/home/alice/f".into(),
        uid: Some(1001),
        caller: Some(alice.clone()),
        ..Default::default()
    };
    assert!(matches!(
        ns.set_attr(&chown),
        Err(FsError::NotPermitted { .. })
    ));
    let chown = SetAttrRequest {
        caller: Some(c.clone()),
        ..chown
    };
    assert_eq!(ns.set_attr(&chown).unwrap().0.uid, 1001);
    // Bob now owns it but cannot read through alice's files? He can: 0o755 dir.
    assert!(matches!(
        ns.open("/home/alice/f", &alice),
        Err(FsError::PermissionDenied { .. })
    ));
    assert!(ns.open("/home/alice/f", &bob).is_ok());
}

#[test]
fn setgid_directories_pass_their_group_down() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    ns.mkdir("/g", false, 0o2777, &c).unwrap();
    ns.set_attr(&SetAttrRequest {
        path: "/g".into(),
        gid: Some(77),
        caller: Some(c.clone()),
        ..Default::default()
    })
    .unwrap();
    let alice = user(1000, 1000);
    let f = touch(&ns, "/g/f", &alice);
    assert_eq!(f.gid, 77);
    let sub = ns.mkdir("/g/sub", false, 0o755, &alice).unwrap().0;
    assert_eq!((sub.gid, sub.mode & 0o2000), (77, 0o2000));
}

/// Namespace cost without RPC: `... --lib master::tests::ns_throughput -- --ignored --nocapture`.
/// `NS_FILES`, `NS_WRITE_BUFFER_KB` and `NS_CACHE_KB` change the file count (20,000)
/// and the RocksDB memory (the master's defaults); `NS_DIRS` spreads the files over that
/// many directories (1) and `NS_DIR_CACHE` caps the directory cache (the default).
#[test]
#[ignore]
fn ns_throughput() {
    let d = tempfile::tempdir_in("/var/tmp").unwrap();
    let env = |k: &str, default: u64| match std::env::var(k) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("{k}={v:?} is not a count: {e}")),
        Err(_) => default,
    };
    let mut conf = mconf(d.path());
    conf.meta_write_buffer.0 = env("NS_WRITE_BUFFER_KB", conf.meta_write_buffer.0 >> 10) << 10;
    conf.meta_cache.0 = env("NS_CACHE_KB", conf.meta_cache.0 >> 10) << 10;
    conf.dir_cache_entries = env("NS_DIR_CACHE", conf.dir_cache_entries as u64) as usize;
    let ns = Namespace::load(conf, false, Duration::from_secs(30)).unwrap();
    ns.mkdir("/b", false, 0, &root()).unwrap();
    let n = env("NS_FILES", 20_000);
    let dirs = env("NS_DIRS", 1).max(1);
    let path = |i: u64| match dirs {
        1 => format!("/b/f{i}"),
        _ => format!("/b/d{}/f{i}", i % dirs),
    };
    if dirs > 1 {
        let t0 = Instant::now();
        for d in 0..dirs {
            ns.mkdir(&format!("/b/d{d}"), false, 0o755, &root())
                .unwrap();
        }
        println!("mkdir: {:.0}/s", dirs as f64 / t0.elapsed().as_secs_f64());
    }
    let t0 = Instant::now();
    for i in 0..n {
        touch(&ns, &path(i), &root());
    }
    println!(
        "create+complete: {:.0}/s",
        n as f64 / t0.elapsed().as_secs_f64()
    );
    let t0 = Instant::now();
    for i in 0..n * 5 {
        stat(&ns, &path(i % n)).unwrap();
    }
    println!("stat: {:.0}/s", (n * 5) as f64 / t0.elapsed().as_secs_f64());
    println!("{}", ns.store.memory_report());
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for l in status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
    {
        println!("{l}");
    }
}

/// complete takes the writer's mtime (when its writes happened), never a future one.
#[test]
fn complete_keeps_the_writers_mtime() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let now_ms = curvine_common::types::now_ms;
    let done = |path: &str, mtime_ms: i64| {
        let ((st, _), _) = ns.create(&create_req(path, &c)).unwrap();
        ns.complete(&CompleteRequest {
            file_id: st.id,
            path: path.into(),
            caller: Some(c.clone()),
            mtime_ms,
            ..Default::default()
        })
        .unwrap()
        .0
    };
    assert_eq!(done("/past", 1_000).mtime_ms, 1_000);
    let before = now_ms();
    let future = done("/future", i64::MAX).mtime_ms;
    assert!(future >= before && future <= now_ms(), "{future}");
    assert!(done("/now", 0).mtime_ms >= before);
    // a writer that wrote nothing (its mtime is the create's) leaves the ctime too
    let ((st, _), _) = ns.create(&create_req("/unwritten", &c)).unwrap();
    while now_ms() <= st.ctime_ms {
        std::thread::yield_now();
    }
    let closed = ns
        .complete(&CompleteRequest {
            file_id: st.id,
            path: "/unwritten".into(),
            caller: Some(c.clone()),
            mtime_ms: st.mtime_ms,
            ..Default::default()
        })
        .unwrap()
        .0;
    assert_eq!(
        (closed.mtime_ms, closed.ctime_ms),
        (st.mtime_ms, st.ctime_ms)
    );
}

/// Every path and attribute seen under `p`, depth first, by walking names from `p`.
fn tree(ns: &Namespace, p: &str, out: &mut Vec<String>) {
    let st = ns.get_status(p, false, &root()).unwrap();
    out.push(format!(
        "{p} id={} type={} mode={:o} mtime={} children={} len={} nlink={}",
        st.id, st.file_type, st.mode, st.mtime_ms, st.children, st.len, st.nlink
    ));
    if st.file_type == FileType::Dir as i32 {
        for n in names(ns, p) {
            tree(ns, &format!("{}/{n}", p.trim_end_matches('/')), out);
        }
    }
}

#[test]
fn inode_cache_follows_every_change() {
    let d = tempfile::tempdir().unwrap();
    let c = root();
    let mut seen = Vec::new();
    {
        let ns = open(d.path());
        // A fixed pseudo-random mix of changes over a few names, so renames, exchanges,
        // links and deletes keep hitting directories and files the cache holds.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let names = ["a", "b", "c"];
        fn path(names: &[&str], next: &mut impl FnMut(u64) -> u64) -> String {
            let depth = next(3);
            (0..=depth)
                .map(|_| names[next(3) as usize])
                .fold(String::new(), |p, n| p + "/" + n)
        }
        for _ in 0..4000 {
            let (p, q) = (path(&names, &mut next), path(&names, &mut next));
            let _ = match next(13) {
                0 | 1 => ns.mkdir(&p, true, 0o755, &c).map(drop),
                2 => ns.rename(&p, &q, 0, &c).map(drop),
                3 => ns.rename(&p, &q, RENAME_EXCHANGE, &c).map(drop),
                4 => ns.delete(&p, true, &c).map(drop),
                5 => ns
                    .set_attr(&SetAttrRequest {
                        path: p.clone(),
                        mode: Some(0o700 | next(0o100) as u32),
                        caller: Some(c.clone()),
                        ..Default::default()
                    })
                    .map(drop),
                6 => ns.create(&create_req(&p, &c)).and_then(|((st, _), _)| {
                    ns.complete(&CompleteRequest {
                        file_id: st.id,
                        path: p.clone(),
                        caller: Some(c.clone()),
                        ..Default::default()
                    })
                    .map(drop)
                }),
                7 => ns.link(&p, &q, &c).map(drop),
                8 => ns.symlink(&q, &p, &c).map(drop),
                9 => ns.truncate(&p, next(5000), &c).map(drop),
                10 => ns.get_status(&p, false, &c).map(drop),
                _ => ns.get_status(&p, true, &c).map(drop),
            };
            ns.store.check_cache();
        }
        tree(&ns, "/", &mut seen);
    }
    // A fresh master (empty cache) sees the same tree.
    let ns = open(d.path());
    let mut cold = Vec::new();
    tree(&ns, "/", &mut cold);
    assert_eq!(seen, cold);
    let files = seen.iter().filter(|l| l.contains(" type=1 ")).count();
    assert!(
        seen.len() > 5 && files > 1,
        "the mix left too little to compare: {seen:?}"
    );
}

#[test]
fn rename_reports_the_time_it_gave_both_parents() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    for dir in ["/a", "/b"] {
        ns.mkdir(dir, false, 0o755, &c).unwrap();
    }
    touch(&ns, "/a/f", &c);
    touch(&ns, "/a/h", &c);
    let times = |p: &str| {
        let st = ns.get_status(p, true, &c).unwrap();
        (st.mtime_ms, st.ctime_ms)
    };
    std::thread::sleep(Duration::from_millis(5));
    let (at, _) = ns.rename("/a/f", "/b/g", 0, &c).unwrap();
    assert!(at > 0);
    assert_eq!((times("/a"), times("/b")), ((at, at), (at, at)));
    std::thread::sleep(Duration::from_millis(5));
    let (at, _) = ns.rename("/a/h", "/b/g", RENAME_EXCHANGE, &c).unwrap();
    assert_eq!((times("/a"), times("/b")), ((at, at), (at, at)));
    // changing nothing stamps nothing
    assert_eq!(ns.rename("/b/g", "/b/g", 0, &c).unwrap().0, 0);
    assert_eq!(times("/b"), (at, at));
}
