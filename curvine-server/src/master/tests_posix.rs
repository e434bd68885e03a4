//! POSIX rules the master enforces for every client (FUSE, `cv`, Java): sticky
//! directories, chown/chmod and the set-ID bits, supplementary groups, read and search
//! permission on directories, times, directory link counts, long paths, symlink
//! ownership. A refused call changes nothing.

use curvine_common::proto::*;
use curvine_common::FsError;

use super::namespace::Namespace;
use super::tests::{create_req, open, root, stat, touch, user};
use super::RENAME_EXCHANGE;

fn with_groups(mut c: CallerInfo, groups: &[u32]) -> CallerInfo {
    c.groups = groups.to_vec();
    c
}

fn set(
    ns: &Namespace,
    path: &str,
    c: &CallerInfo,
    f: impl FnOnce(&mut SetAttrRequest),
) -> Result<FileStatus, FsError> {
    let mut r = SetAttrRequest {
        path: path.into(),
        caller: Some(c.clone()),
        ..Default::default()
    };
    f(&mut r);
    ns.set_attr(&r).map(|(st, _)| st)
}

fn chmod(ns: &Namespace, path: &str, mode: u32, c: &CallerInfo) -> Result<FileStatus, FsError> {
    set(ns, path, c, |r| r.mode = Some(mode))
}

/// Wait until the master's clock passes `ms` (ctime checks need a later tick).
fn after(ms: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while curvine_common::types::now_ms() <= ms {
        assert!(std::time::Instant::now() < deadline, "clock stuck");
        std::thread::yield_now();
    }
}

#[test]
fn sticky_directories_protect_other_users_entries() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let (c, alice, bob) = (root(), user(1000, 1000), user(1001, 1001));
    ns.mkdir("/tmp", false, 0o1777, &c).unwrap();
    touch(&ns, "/tmp/a", &alice);
    touch(&ns, "/tmp/b", &bob);
    ns.mkdir("/tmp/da", false, 0o777, &alice).unwrap();
    ns.mkdir("/tmp/db", false, 0o777, &bob).unwrap();
    let before = stat(&ns, "/tmp").unwrap();
    let np = |r: Result<(i64, u64), FsError>| matches!(r, Err(FsError::NotPermitted { .. }));
    assert!(
        np(ns.delete("/tmp/a", false, &bob)),
        "unlink of another's file"
    );
    assert!(
        np(ns.rename("/tmp/a", "/tmp/x", 0, &bob)),
        "rename of another's file"
    );
    assert!(
        np(ns.rename("/tmp/b", "/tmp/a", 0, &bob)),
        "rename over another's file"
    );
    assert!(
        np(ns.rename("/tmp/db", "/tmp/da", 0, &bob)),
        "directory over another's"
    );
    assert!(np(ns.rename("/tmp/b", "/tmp/a", RENAME_EXCHANGE, &bob)));
    // a rename into the sticky directory over another's file, from elsewhere
    ns.mkdir("/bob", false, 0o755, &bob).unwrap();
    touch(&ns, "/bob/f", &bob);
    assert!(np(ns.rename("/bob/f", "/tmp/a", 0, &bob)));
    // nothing changed
    let after_st = stat(&ns, "/tmp").unwrap();
    assert_eq!(
        (after_st.mtime_ms, after_st.children),
        (before.mtime_ms, before.children)
    );
    assert_eq!(stat(&ns, "/tmp/a").unwrap().uid, 1000);
    assert!(stat(&ns, "/bob/f").is_ok());
    // the entry's owner, the directory's owner and root may
    ns.rename("/tmp/b", "/tmp/b2", 0, &bob).unwrap();
    ns.delete("/tmp/a", false, &alice).unwrap();
    ns.mkdir("/alice", false, 0o1777, &alice).unwrap();
    touch(&ns, "/alice/x", &bob);
    ns.delete("/alice/x", false, &alice).unwrap();
    ns.delete("/tmp/b2", false, &c).unwrap();
}

#[test]
fn chown_and_chgrp_follow_linux_rules() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let alice = with_groups(user(1000, 1000), &[500, 501]);
    ns.mkdir("/d", false, 0o777, &c).unwrap();
    let f = touch(&ns, "/d/f", &alice);
    let np = |r: Result<FileStatus, FsError>| matches!(r, Err(FsError::NotPermitted { .. }));
    // the owner cannot give the file away, nor to its own uid when not the owner
    assert!(np(set(&ns, "/d/f", &alice, |r| r.uid = Some(1001))));
    assert!(np(
        set(&ns, "/d/f", &user(1001, 1001), |r| r.uid = Some(1000))
    ));
    // chgrp by the owner: to its primary or a supplementary group, not another
    assert_eq!(
        set(&ns, "/d/f", &alice, |r| r.gid = Some(501)).unwrap().gid,
        501
    );
    assert!(np(set(&ns, "/d/f", &alice, |r| r.gid = Some(600))));
    assert!(
        np(set(&ns, "/d/f", &user(1000, 1000), |r| r.gid = Some(500))),
        "without its groups"
    );
    assert!(
        np(set(&ns, "/d/f", &user(1001, 501), |r| r.gid = Some(501))),
        "not the owner"
    );
    // root gives it to any uid, known or not
    let st = set(&ns, "/d/f", &c, |r| {
        r.uid = Some(4_000_000);
        r.gid = Some(4_000_001);
    })
    .unwrap();
    assert_eq!((st.uid, st.gid), (4_000_000, 4_000_001));
    assert_eq!(st.id, f.id);
}

#[test]
fn set_id_bits_go_on_chown_and_on_writes_of_others() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let alice = with_groups(user(1000, 1000), &[500]);
    let bob = user(1001, 1001);
    ns.mkdir("/d", false, 0o777, &c).unwrap();
    touch(&ns, "/d/f", &alice);
    // chown drops set-user-ID, and set-group-ID when group-executable (root's too)
    chmod(&ns, "/d/f", 0o6755, &alice).unwrap();
    let st = set(&ns, "/d/f", &c, |r| r.uid = Some(1000)).unwrap();
    assert_eq!(st.mode & 0o7777, 0o755);
    chmod(&ns, "/d/f", 0o6745, &alice).unwrap();
    let st = set(&ns, "/d/f", &alice, |r| r.gid = Some(500)).unwrap();
    assert_eq!(
        st.mode & 0o7777,
        0o2745,
        "set-group-ID without group-execute stays"
    );
    // directories keep theirs
    ns.mkdir("/d/sub", false, 0o2775, &alice).unwrap();
    let st = set(&ns, "/d/sub", &c, |r| r.uid = Some(1001)).unwrap();
    assert_eq!(st.mode & 0o7777, 0o2775);

    // chmod by an owner outside the file's group: set-group-ID is dropped
    let st = set(&ns, "/d/f", &c, |r| r.gid = Some(777)).unwrap();
    assert_eq!(st.gid, 777);
    assert_eq!(
        chmod(&ns, "/d/f", 0o2755, &alice).unwrap().mode & 0o7777,
        0o755
    );
    assert_eq!(
        chmod(&ns, "/d/f", 0o4755, &alice).unwrap().mode & 0o7777,
        0o4755
    );
    // ... and kept by a member through a supplementary group
    set(&ns, "/d/f", &c, |r| r.gid = Some(500)).unwrap();
    assert_eq!(
        chmod(&ns, "/d/f", 0o6777, &alice).unwrap().mode & 0o7777,
        0o6777
    );

    // a writer who is not the owner truncates: the set-ID bits go
    ns.truncate("/d/f", 10, &bob).unwrap();
    assert_eq!(stat(&ns, "/d/f").unwrap().mode & 0o7777, 0o777);
    // root keeps them
    chmod(&ns, "/d/f", 0o6777, &alice).unwrap();
    ns.truncate("/d/f", 20, &c).unwrap();
    assert_eq!(stat(&ns, "/d/f").unwrap().mode & 0o7777, 0o6777);
    // an append (open for writing) by another
    let ((st, _), _) = ns
        .append(&AppendRequest {
            path: "/d/f".into(),
            caller: Some(bob.clone()),
        })
        .unwrap();
    assert_eq!(st.mode & 0o7777, 0o777);
    ns.abandon(st.id, "/d/f", Some(bob.client_id)).unwrap();

    // a writer may drop the set-ID bits itself (what the kernel sends before a write),
    // nothing more; one without write permission may not
    chmod(&ns, "/d/f", 0o6766, &alice).unwrap();
    // (set-group-ID goes too: bob is not in the file's group)
    assert_eq!(
        chmod(&ns, "/d/f", 0o2766, &bob).unwrap().mode & 0o7777,
        0o766
    );
    assert!(matches!(
        chmod(&ns, "/d/f", 0o2777, &bob),
        Err(FsError::NotPermitted { .. })
    ));
    assert!(matches!(
        chmod(&ns, "/d/f", 0o6766, &bob),
        Err(FsError::NotPermitted { .. })
    ));
    chmod(&ns, "/d/f", 0o6744, &alice).unwrap();
    assert!(matches!(
        chmod(&ns, "/d/f", 0o2744, &bob),
        Err(FsError::PermissionDenied { .. })
    ));
    assert_eq!(stat(&ns, "/d/f").unwrap().mode & 0o7777, 0o6744);
}

#[test]
fn ctime_moves_on_every_change_and_not_on_a_refused_one() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let (c, alice, bob) = (root(), user(1000, 1000), user(1001, 1001));
    ns.mkdir("/d", false, 0o777, &c).unwrap();
    let mut last = touch(&ns, "/d/f", &alice);
    type Change = Box<dyn Fn(&mut SetAttrRequest)>;
    let changes: Vec<(CallerInfo, Change)> = vec![
        (alice.clone(), Box::new(|r| r.mode = Some(0o600))),
        (alice.clone(), Box::new(|r| r.mode = Some(0o600))),
        (alice.clone(), Box::new(|r| r.gid = Some(1000))),
        (c.clone(), Box::new(|r| r.uid = Some(1000))),
        (c.clone(), Box::new(|r| r.uid = Some(55))),
    ];
    for (who, f) in changes {
        after(last.ctime_ms);
        let st = set(&ns, "/d/f", &who, f).unwrap();
        assert!(st.ctime_ms > last.ctime_ms);
        last = st;
    }
    after(last.ctime_ms);
    for r in [
        set(&ns, "/d/f", &bob, |r| r.mode = Some(0o777)),
        set(&ns, "/d/f", &bob, |r| r.uid = Some(1001)),
        set(&ns, "/d/f", &bob, |r| r.gid = Some(1001)),
        set(&ns, "/d/f", &bob, |r| r.mtime_ms = Some(5)),
    ] {
        assert!(matches!(r, Err(FsError::NotPermitted { .. })), "{r:?}");
    }
    let now = stat(&ns, "/d/f").unwrap();
    assert_eq!(
        (now.ctime_ms, now.mode, now.uid, now.gid),
        (last.ctime_ms, last.mode, last.uid, last.gid)
    );
}

#[test]
fn supplementary_groups_count_for_permissions() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    ns.mkdir("/d", false, 0o755, &c).unwrap();
    touch(&ns, "/d/f", &c);
    set(&ns, "/d/f", &c, |r| {
        r.gid = Some(500);
        r.mode = Some(0o060);
    })
    .unwrap();
    let member = with_groups(user(1000, 1000), &[499, 500]);
    let outsider = user(1000, 1000);
    assert!(ns.open("/d/f", &member).is_ok());
    assert!(matches!(
        ns.open("/d/f", &outsider),
        Err(FsError::PermissionDenied { .. })
    ));
    ns.truncate("/d/f", 3, &member).unwrap();
    // the owner's bits count for the owner, even when the group's would allow
    set(&ns, "/d/f", &c, |r| r.uid = Some(1000)).unwrap();
    assert!(matches!(
        ns.open("/d/f", &member),
        Err(FsError::PermissionDenied { .. })
    ));
    // others' bits for those in none of the groups
    chmod(&ns, "/d/f", 0o604, &c).unwrap();
    assert!(ns.open("/d/f", &user(2000, 2000)).is_ok());
    assert!(matches!(
        ns.open("/d/f", &with_groups(user(2000, 2000), &[500])),
        Err(FsError::PermissionDenied { .. })
    ));
    // search permission on directories through a supplementary group
    ns.mkdir("/g", false, 0o750, &c).unwrap();
    set(&ns, "/g", &c, |r| r.gid = Some(500)).unwrap();
    touch(&ns, "/g/x", &c);
    assert!(ns.get_status("/g/x", false, &member).is_ok());
    assert!(matches!(
        ns.get_status("/g/x", false, &outsider),
        Err(FsError::PermissionDenied { .. })
    ));
}

#[test]
fn times_by_the_owner_now_by_a_writer() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let (c, alice, bob, carol) = (root(), user(1000, 1000), user(1001, 1001), user(1002, 1002));
    ns.mkdir("/d", false, 0o777, &c).unwrap();
    touch(&ns, "/d/f", &alice);
    chmod(&ns, "/d/f", 0o646, &alice).unwrap();
    // the owner: any times, beyond 2038 and before 1970 too, kept exactly
    for t in [
        4_294_967_296_000i64,
        2_147_483_648_123,
        -1_500,
        100_000_000_100,
    ] {
        let st = set(&ns, "/d/f", &alice, |r| {
            r.mtime_ms = Some(t);
            r.atime_ms = Some(t + 1);
        })
        .unwrap();
        assert_eq!((st.mtime_ms, st.atime_ms), (t, t + 1));
    }
    // a writer who is not the owner: now only
    assert!(matches!(
        set(&ns, "/d/f", &bob, |r| r.mtime_ms = Some(7)),
        Err(FsError::NotPermitted { .. })
    ));
    let st = set(&ns, "/d/f", &bob, |r| {
        r.times_now = true;
        r.mtime_ms = Some(7);
        r.atime_ms = Some(7);
    })
    .unwrap();
    assert!(
        st.mtime_ms > 1_000_000 && st.atime_ms == st.mtime_ms,
        "the master's now"
    );
    // the owner sending the same gets the times it sent
    let st = set(&ns, "/d/f", &alice, |r| {
        r.times_now = true;
        r.mtime_ms = Some(7);
        r.atime_ms = Some(8);
    })
    .unwrap();
    assert_eq!((st.mtime_ms, st.atime_ms), (7, 8));
    // no write permission: not even now
    chmod(&ns, "/d/f", 0o644, &alice).unwrap();
    assert!(matches!(
        set(&ns, "/d/f", &carol, |r| r.times_now = true),
        Err(FsError::PermissionDenied { .. })
    ));
    assert_eq!(stat(&ns, "/d/f").unwrap().mtime_ms, 7);
}

#[test]
fn times_set_to_the_nanosecond_are_kept_across_a_restart() {
    let d = tempfile::tempdir().unwrap();
    let alice = user(1000, 1000);
    // 2106-02-07 06:28:16.123456789 and 2038-01-19 03:14:08.000000001
    let (m, a) = (
        (4_294_967_296_123i64, 123_456_789u32),
        (2_147_483_648_000i64, 1u32),
    );
    {
        let ns = open(d.path());
        ns.mkdir("/d", false, 0o777, &root()).unwrap();
        touch(&ns, "/d/f", &alice);
        touch(&ns, "/d/g", &alice);
        let st = set(&ns, "/d/f", &alice, |r| {
            (r.mtime_ms, r.mtime_nsec) = (Some(m.0), Some(m.1));
            (r.atime_ms, r.atime_nsec) = (Some(a.0), Some(a.1));
        })
        .unwrap();
        assert_eq!((st.mtime_ms, st.mtime_nsec), m);
        assert_eq!((st.atime_ms, st.atime_nsec), a);
        // nanoseconds outside the millisecond sent: refused, nothing changes
        assert!(matches!(
            set(&ns, "/d/f", &alice, |r| {
                (r.mtime_ms, r.mtime_nsec) = (Some(5), Some(6_000_000));
            }),
            Err(FsError::InvalidArgument { .. })
        ));
        // milliseconds alone: the nanoseconds of that millisecond
        let st = set(&ns, "/d/g", &alice, |r| r.mtime_ms = Some(-1_500)).unwrap();
        assert_eq!((st.mtime_ms, st.mtime_nsec), (-1_500, 500_000_000));
    }
    let ns = open(d.path());
    let st = stat(&ns, "/d/f").unwrap();
    assert_eq!((st.mtime_ms, st.mtime_nsec), m);
    assert_eq!((st.atime_ms, st.atime_nsec), a);
    // a write sets mtime to the master's now in milliseconds: the old nanoseconds go
    let st = set(&ns, "/d/f", &alice, |r| r.times_now = true).unwrap();
    assert_eq!(
        st.mtime_nsec,
        (st.mtime_ms.rem_euclid(1000) * 1_000_000) as u32
    );
}

#[test]
fn overwriting_a_file_needs_write_permission_on_it() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let (alice, bob) = (user(1000, 1000), user(1001, 1001));
    ns.mkdir("/d", false, 0o777, &root()).unwrap();
    let old = touch(&ns, "/d/f", &alice);
    chmod(&ns, "/d/f", 0o644, &alice).unwrap();
    let mut req = create_req("/d/f", &bob);
    req.overwrite = true;
    assert!(matches!(
        ns.create(&req),
        Err(FsError::PermissionDenied { .. })
    ));
    assert_eq!(stat(&ns, "/d/f").unwrap().id, old.id);
    chmod(&ns, "/d/f", 0o646, &alice).unwrap();
    let ((st, _), _) = ns.create(&req).unwrap();
    assert_eq!((st.uid, stat(&ns, "/d/f").unwrap().id), (1001, st.id));
}

#[test]
fn directory_link_counts_follow_subdirectories() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let nlink = |p: &str| stat(&ns, p).unwrap().nlink;
    assert_eq!(nlink("/"), 2);
    ns.mkdir("/a", false, 0o755, &c).unwrap();
    ns.mkdir("/b", false, 0o755, &c).unwrap();
    assert_eq!((nlink("/"), nlink("/a")), (4, 2));
    ns.mkdir("/a/x", false, 0o755, &c).unwrap();
    ns.mkdir("/a/y", false, 0o755, &c).unwrap();
    touch(&ns, "/a/f", &c);
    assert_eq!(nlink("/a"), 4, "files are no links of the directory");
    ns.rename("/a/x", "/b/x", 0, &c).unwrap();
    assert_eq!((nlink("/a"), nlink("/b")), (3, 3));
    ns.rename("/a/y", "/a/y2", 0, &c).unwrap();
    assert_eq!(nlink("/a"), 3);
    // a directory renamed over an empty one
    ns.rename("/a/y2", "/b/x", 0, &c).unwrap();
    assert_eq!((nlink("/a"), nlink("/b")), (2, 3));
    // exchange of a directory and a file across parents
    ns.rename("/b/x", "/a/f", RENAME_EXCHANGE, &c).unwrap();
    assert_eq!((nlink("/a"), nlink("/b")), (3, 2));
    ns.delete("/a/f", false, &c).unwrap();
    assert_eq!(nlink("/a"), 2);
    ns.mkdir("/a/p/q/r", true, 0o755, &c).unwrap();
    assert_eq!((nlink("/a"), nlink("/a/p"), nlink("/a/p/q")), (3, 3, 3));
    ns.delete("/a/p", true, &c).unwrap();
    assert_eq!(nlink("/a"), 2);
    // moving a directory to another parent needs write permission on it (its `..`)
    let alice = user(1000, 1000);
    ns.mkdir("/pub", false, 0o777, &c).unwrap();
    ns.mkdir("/pub/ro", false, 0o555, &alice).unwrap();
    ns.mkdir("/pub/to", false, 0o777, &c).unwrap();
    assert!(matches!(
        ns.rename("/pub/ro", "/pub/to/ro", 0, &alice),
        Err(FsError::PermissionDenied { .. })
    ));
    ns.rename("/pub/ro", "/pub/ro2", 0, &alice).unwrap();
}

#[test]
fn directories_of_a_format_1_namespace_get_their_link_counts_at_start() {
    use super::records::{op::Kind, JournalEntry, MetaRec};
    let d = tempfile::tempdir().unwrap();
    let c = root();
    {
        let ns = open(d.path());
        ns.mkdir("/a/x/deep", true, 0o755, &c).unwrap();
        ns.mkdir("/a/y", false, 0o755, &c).unwrap();
        ns.mkdir("/b", false, 0o755, &c).unwrap();
        touch(&ns, "/a/f", &c);
        // what a format 1 master left: every directory at nlink 1
        let mut e = JournalEntry::default();
        for p in ["/", "/a", "/a/x", "/a/x/deep", "/a/y", "/b"] {
            let id = stat(&ns, p).unwrap().id;
            let mut ino = ns.store.inode(id).unwrap().unwrap();
            ino.nlink = 1;
            e.push(Kind::PutInode(ino));
        }
        e.push(Kind::PutMeta(MetaRec {
            key: super::store::META_FORMAT.to_vec(),
            value: b"1".to_vec(),
        }));
        ns.store.apply(&e).unwrap();
        assert_eq!(stat(&ns, "/a").unwrap().nlink, 1);
    }
    let ns = open(d.path());
    let nlink = |p: &str| stat(&ns, p).unwrap().nlink;
    assert_eq!(
        [
            nlink("/"),
            nlink("/a"),
            nlink("/a/x"),
            nlink("/a/x/deep"),
            nlink("/b")
        ],
        [4, 4, 3, 2, 2]
    );
    assert_eq!(nlink("/a/f"), 1);
    assert_eq!(
        ns.store.meta(super::store::META_FORMAT).unwrap().unwrap(),
        b"2"
    );
    // and counting goes on from there
    ns.delete("/a/y", false, &c).unwrap();
    assert_eq!(nlink("/a"), 3);
}

#[test]
fn long_paths_and_names() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let name = "n".repeat(255);
    ns.mkdir(&format!("/{name}"), false, 0o755, &c).unwrap();
    assert!(matches!(
        ns.mkdir(&format!("/{}", "n".repeat(256)), false, 0o755, &c),
        Err(FsError::NameTooLong { .. })
    ));
    // a mount makes paths past PATH_MAX: its directory, then up to 4095 bytes
    let mut p = String::new();
    while p.len() < 6000 {
        p.push('/');
        p.push_str(&"d".repeat(200));
        ns.mkdir(&p, false, 0o755, &c).unwrap();
    }
    touch(&ns, &format!("{p}/f"), &c);
    assert!(stat(&ns, &format!("{p}/f")).is_ok());
    let too_long = format!("/{}", "x/".repeat(40_000));
    assert!(matches!(
        stat(&ns, &too_long),
        Err(FsError::NameTooLong { .. })
    ));
    // a symlink's target is shorter than PATH_MAX
    assert!(matches!(
        ns.symlink(&"t".repeat(4096), "/l", &c),
        Err(FsError::NameTooLong { .. })
    ));
    ns.symlink(&"t/".repeat(2047), "/l", &c).unwrap();
}

#[test]
fn symlinks_are_owned_by_their_creator_and_lchown_changes_the_link() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = root();
    let alice = user(1000, 1000);
    ns.mkdir("/d", false, 0o777, &c).unwrap();
    touch(&ns, "/d/target", &c);
    let (l, _) = ns.symlink("target", "/d/l", &alice).unwrap();
    assert_eq!((l.uid, l.gid), (1000, 1000));
    let st = set(&ns, "/d/l", &c, |r| {
        r.no_follow = true;
        r.uid = Some(77);
        r.gid = Some(78);
        r.mtime_ms = Some(1234);
    })
    .unwrap();
    assert_eq!((st.id, st.uid, st.gid, st.mtime_ms), (l.id, 77, 78, 1234));
    let t = stat(&ns, "/d/target").unwrap();
    assert_eq!((t.uid, t.gid), (0, 0));
    // without no_follow the target changes
    let st = set(&ns, "/d/l", &c, |r| r.uid = Some(5)).unwrap();
    assert_eq!(st.id, t.id);
    assert_eq!(stat(&ns, "/d/target").unwrap().uid, 5);
    assert!(ns.create(&create_req("/d/l2", &alice)).is_ok());
}

/// The caller of the directory-permission tests: uid 1000, in group 500 through a
/// supplementary group.
fn reader() -> CallerInfo {
    with_groups(user(1000, 1000), &[500])
}

/// `/CLASS-TAG` holding a file `f` (0644) and a directory `sub`, its mode `bits` in the
/// place of `class` (owner, group or other) alone, owned so that `reader()` falls in
/// that class. Returns the directory's path and the ids of `f` and `sub`.
fn class_dir(ns: &Namespace, class: &str, tag: &str, bits: u32) -> (String, u64, u64) {
    let c = root();
    let dir = format!("/{class}-{tag}");
    ns.mkdir(&dir, false, 0o755, &c).unwrap();
    let f = touch(ns, &format!("{dir}/f"), &c).id;
    chmod(ns, &format!("{dir}/f"), 0o644, &c).unwrap();
    let sub = ns
        .mkdir(&format!("{dir}/sub"), false, 0o755, &c)
        .unwrap()
        .0
        .id;
    let (uid, gid) = match class {
        "owner" => (1000, 0),
        "group" => (0, 500),
        _ => (0, 0),
    };
    set(ns, &dir, &c, |r| {
        r.uid = Some(uid);
        r.gid = Some(gid);
        r.mode = Some(bits << shift(class));
    })
    .unwrap();
    (dir, f, sub)
}

/// Where a class's bits sit in a mode.
fn shift(class: &str) -> u32 {
    match class {
        "owner" => 6,
        "group" => 3,
        _ => 0,
    }
}

fn denied<T: std::fmt::Debug>(r: Result<T, FsError>, what: &str) {
    assert!(
        matches!(r, Err(FsError::PermissionDenied { .. })),
        "{what}: {r:?}"
    );
}

// Ground truth, ext4 and tmpfs as uid 65534 (the same for owner, group and other):
// mode r (0600 of the class): open(O_RDONLY) and readdir work and give names and
// d_type; stat and open of an entry, chdir and stat of a missing name fail EACCES.
// mode x (0100): open and readdir fail EACCES; stat and open of an entry work, a
// missing name is ENOENT. Neither (0000): all of these fail EACCES.

#[test]
fn a_directory_read_but_not_searched_lists_names_alone() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = reader();
    for class in ["owner", "group", "other"] {
        let (dir, f, sub) = class_dir(&ns, class, "r", 0o6);
        let l = ns.list_page(&dir, "", 0, true, &c).unwrap();
        assert!(l.names_only && !l.has_more, "{class}");
        // what readdir gives (d_ino, d_type) and nothing more
        let want = [
            (f, "f", FileType::File, format!("{dir}/f")),
            (sub, "sub", FileType::Dir, format!("{dir}/sub")),
        ];
        assert_eq!(l.statuses.len(), 2, "{class}");
        for (st, (id, name, kind, path)) in l.statuses.iter().zip(want) {
            let only = FileStatus {
                id,
                name: name.into(),
                file_type: kind as i32,
                path,
                ..Default::default()
            };
            assert_eq!(st, &only, "{class}");
        }
        // a listing with attributes, an entry and a missing name need search permission
        denied(ns.list(&dir, "", 0, &c), class);
        denied(ns.get_status(&format!("{dir}/f"), false, &c), class);
        denied(ns.get_status(&format!("{dir}/sub"), false, &c), class);
        denied(ns.open(&format!("{dir}/f"), &c), class);
        denied(ns.get_status(&format!("{dir}/nope"), false, &c), class);
        // the directory itself is seen from its parent
        assert_eq!(
            ns.get_status(&dir, false, &c).unwrap().mode,
            0o6 << shift(class)
        );
        // root gets the attributes
        let full = ns.list_page(&dir, "", 0, true, &root()).unwrap();
        assert!(
            !full.names_only && full.statuses[0].mode == 0o644,
            "{class}"
        );
    }
}

#[test]
fn a_directory_searched_but_not_read_gives_its_entries_not_its_names() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = reader();
    for class in ["owner", "group", "other"] {
        let (dir, f, sub) = class_dir(&ns, class, "x", 0o1);
        denied(ns.list_page(&dir, "", 0, true, &c), class);
        denied(ns.list(&dir, "", 0, &c), class);
        let st = ns.get_status(&format!("{dir}/f"), false, &c).unwrap();
        assert_eq!((st.id, st.mode), (f, 0o644), "{class}");
        assert_eq!(
            ns.get_status(&format!("{dir}/sub"), false, &c).unwrap().id,
            sub
        );
        assert_eq!(ns.open(&format!("{dir}/f"), &c).unwrap().0.id, f);
        // entries of a subdirectory that may be read and searched are listed in full
        let l = ns
            .list_page(&format!("{dir}/sub"), "", 0, true, &c)
            .unwrap();
        assert!(!l.names_only && l.statuses.is_empty(), "{class}");
        assert!(
            matches!(
                ns.get_status(&format!("{dir}/nope"), false, &c),
                Err(FsError::NotFound { .. })
            ),
            "{class}"
        );
    }
}

#[test]
fn a_directory_neither_read_nor_searched_gives_nothing() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let c = reader();
    for class in ["owner", "group", "other"] {
        let (dir, _, _) = class_dir(&ns, class, "none", 0);
        denied(ns.list_page(&dir, "", 0, true, &c), class);
        denied(ns.list(&dir, "", 0, &c), class);
        denied(ns.get_status(&format!("{dir}/f"), false, &c), class);
        denied(ns.open(&format!("{dir}/f"), &c), class);
        denied(ns.get_status(&format!("{dir}/nope"), false, &c), class);
        // root needs no permission
        assert_eq!(ns.list(&dir, "", 0, &root()).unwrap().0.len(), 2);
    }
}
