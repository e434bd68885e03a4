//! Namespace semantics through the Rust client against a MiniCluster.

mod common;

use common::run;
use curvine_client::{CreateOptions, SetAttr};
use curvine_common::proto::FileType;
use curvine_common::FsError;

#[test]
fn mkdir_create_list_stat() {
    run(1, |s| async move {
        let fs = &s.fs;
        fs.mkdir("/ns1/a/b", true).await.unwrap();
        fs.write_file("/ns1/a/f1", b"hello").await.unwrap();
        fs.write_file("/ns1/a/f2", b"").await.unwrap();
        let names: Vec<String> = fs
            .list("/ns1/a")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, vec!["b", "f1", "f2"]);
        let st = fs.stat("/ns1/a/f1").await.unwrap();
        assert_eq!(st.len, 5);
        assert_eq!(st.file_type, FileType::File as i32);
        assert!(st.complete);
        assert_eq!(
            fs.stat("/ns1/a").await.unwrap().file_type,
            FileType::Dir as i32
        );
        assert!(matches!(
            fs.stat("/ns1/nope").await,
            Err(FsError::NotFound { .. })
        ));
        // mkdir without parents under a missing dir fails; over a file fails
        assert!(matches!(
            fs.mkdir("/ns1/x/y", false).await,
            Err(FsError::NotFound { .. })
        ));
        assert!(fs.mkdir("/ns1/a/f1", false).await.is_err());
        assert!(matches!(
            fs.mkdir("/ns1/a/f1/sub", true).await,
            Err(FsError::NotADirectory { .. })
        ));
    });
}

#[test]
fn create_over_directory_and_exclusive() {
    run(1, |s| async move {
        let fs = &s.fs;
        fs.mkdir("/ns2/d", true).await.unwrap();
        assert!(matches!(
            fs.create("/ns2/d", true).await,
            Err(FsError::IsADirectory { .. })
        ));
        fs.write_file("/ns2/f", b"1").await.unwrap();
        assert!(matches!(
            fs.create("/ns2/f", false).await,
            Err(FsError::AlreadyExists { .. })
        ));
        let excl = CreateOptions {
            exclusive: true,
            overwrite: true,
            ..Default::default()
        };
        assert!(matches!(
            fs.create_with("/ns2/f", excl).await,
            Err(FsError::AlreadyExists { .. })
        ));
        // overwrite replaces content
        fs.write_file("/ns2/f", b"second").await.unwrap();
        assert_eq!(fs.read_file("/ns2/f").await.unwrap(), b"second");
        // a file as a parent
        assert!(matches!(
            fs.create("/ns2/f/child", true).await,
            Err(FsError::NotADirectory { .. })
        ));
    });
}

#[test]
fn rename_rules() {
    run(1, |s| async move {
        let fs = &s.fs;
        fs.mkdir("/ns3/src", true).await.unwrap();
        fs.write_file("/ns3/f1", b"one").await.unwrap();
        fs.write_file("/ns3/f2", b"two").await.unwrap();
        // file over existing file replaces it
        fs.rename("/ns3/f1", "/ns3/f2").await.unwrap();
        assert_eq!(fs.read_file("/ns3/f2").await.unwrap(), b"one");
        assert!(!fs.exists("/ns3/f1").await.unwrap());
        // dir over empty dir replaces it
        fs.mkdir("/ns3/empty", false).await.unwrap();
        fs.write_file("/ns3/src/inner", b"x").await.unwrap();
        fs.rename("/ns3/src", "/ns3/empty").await.unwrap();
        assert_eq!(fs.read_file("/ns3/empty/inner").await.unwrap(), b"x");
        // dir over non-empty dir fails
        fs.mkdir("/ns3/full", false).await.unwrap();
        fs.write_file("/ns3/full/y", b"y").await.unwrap();
        fs.mkdir("/ns3/d2", false).await.unwrap();
        assert!(matches!(
            fs.rename("/ns3/d2", "/ns3/full").await,
            Err(FsError::DirectoryNotEmpty { .. })
        ));
        // file over dir, dir over file
        assert!(matches!(
            fs.rename("/ns3/f2", "/ns3/d2").await,
            Err(FsError::IsADirectory { .. })
        ));
        assert!(matches!(
            fs.rename("/ns3/d2", "/ns3/f2").await,
            Err(FsError::NotADirectory { .. })
        ));
        // into its own subtree
        assert!(fs.rename("/ns3/full", "/ns3/full/y/z").await.is_err());
        fs.mkdir("/ns3/full/sub", false).await.unwrap();
        assert!(matches!(
            fs.rename("/ns3/full", "/ns3/full/sub/moved").await,
            Err(FsError::InvalidArgument { .. })
        ));
        // missing source
        assert!(matches!(
            fs.rename("/ns3/missing", "/ns3/m2").await,
            Err(FsError::NotFound { .. })
        ));
        // NOREPLACE and EXCHANGE
        fs.write_file("/ns3/a", b"A").await.unwrap();
        fs.write_file("/ns3/b", b"B").await.unwrap();
        assert!(matches!(
            fs.rename_with_flags("/ns3/a", "/ns3/b", 1).await,
            Err(FsError::AlreadyExists { .. })
        ));
        fs.rename_with_flags("/ns3/a", "/ns3/b", 2).await.unwrap();
        assert_eq!(fs.read_file("/ns3/a").await.unwrap(), b"B");
        assert_eq!(fs.read_file("/ns3/b").await.unwrap(), b"A");
    });
}

#[test]
fn delete_rules() {
    run(1, |s| async move {
        let fs = &s.fs;
        fs.mkdir("/ns4/d/e", true).await.unwrap();
        fs.write_file("/ns4/d/e/f", b"data").await.unwrap();
        assert!(matches!(
            fs.delete("/ns4/d", false).await,
            Err(FsError::DirectoryNotEmpty { .. })
        ));
        assert!(fs.exists("/ns4/d/e/f").await.unwrap());
        fs.delete("/ns4/d", true).await.unwrap();
        assert!(!fs.exists("/ns4/d").await.unwrap());
        assert!(matches!(
            fs.delete("/ns4/d", true).await,
            Err(FsError::NotFound { .. })
        ));
        assert!(fs.delete("/", true).await.is_err());
    });
}

#[test]
fn deep_paths_and_unicode_names() {
    run(1, |s| async move {
        let fs = &s.fs;
        let deep: String = (0..60).map(|i| format!("/d{i}")).collect();
        let deep = format!("/ns5{deep}");
        fs.mkdir(&deep, true).await.unwrap();
        let f = format!("{deep}/leaf");
        fs.write_file(&f, b"deep").await.unwrap();
        assert_eq!(fs.read_file(&f).await.unwrap(), b"deep");
        for name in [
            "数据集",
            "ファイル名",
            "emoji-🚀",
            "space name",
            "tab\tname",
        ] {
            let p = format!("/ns5/{name}");
            fs.write_file(&p, name.as_bytes()).await.unwrap();
            assert_eq!(fs.read_file(&p).await.unwrap(), name.as_bytes());
        }
        let names: Vec<String> = fs
            .list("/ns5")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert!(names.contains(&"数据集".to_string()), "{names:?}");
    });
}

#[test]
fn invalid_paths_are_rejected() {
    run(1, |s| async move {
        let fs = &s.fs;
        for p in ["", "relative/x", "/a/../b", "/a/./b", "/nul\0byte"] {
            let e = fs.mkdir(p, true).await.unwrap_err();
            assert!(matches!(e, FsError::InvalidPath { .. }), "{p:?} gave {e:?}");
        }
        let long = format!("/ns6/{}", "n".repeat(256));
        assert!(matches!(
            fs.create(&long, true).await,
            Err(FsError::NameTooLong { .. })
        ));
        let ok = format!("/ns6/{}", "n".repeat(255));
        fs.write_file(&ok, b"ok").await.unwrap();
    });
}

#[test]
fn links_xattrs_attrs() {
    run(1, |s| async move {
        let fs = &s.fs;
        fs.mkdir("/ns7", true).await.unwrap();
        fs.write_file("/ns7/target", b"payload").await.unwrap();
        fs.symlink("/ns7/target", "/ns7/sym").await.unwrap();
        assert_eq!(fs.readlink("/ns7/sym").await.unwrap(), "/ns7/target");
        assert_eq!(fs.stat("/ns7/sym").await.unwrap().len, 7);
        assert_eq!(
            fs.lstat("/ns7/sym").await.unwrap().file_type,
            FileType::Symlink as i32
        );
        assert!(matches!(
            fs.readlink("/ns7/target").await,
            Err(FsError::NotASymlink { .. })
        ));
        fs.link("/ns7/target", "/ns7/hard").await.unwrap();
        assert_eq!(fs.stat("/ns7/target").await.unwrap().nlink, 2);
        fs.delete("/ns7/target", false).await.unwrap();
        assert_eq!(fs.read_file("/ns7/hard").await.unwrap(), b"payload");
        assert_eq!(fs.stat("/ns7/hard").await.unwrap().nlink, 1);

        fs.set_xattr("/ns7/hard", "user.k", b"v1", 0).await.unwrap();
        assert_eq!(fs.get_xattr("/ns7/hard", "user.k").await.unwrap(), b"v1");
        assert_eq!(fs.list_xattr("/ns7/hard").await.unwrap(), vec!["user.k"]);
        fs.remove_xattr("/ns7/hard", "user.k").await.unwrap();
        assert!(matches!(
            fs.get_xattr("/ns7/hard", "user.k").await,
            Err(FsError::NoSuchXattr { .. })
        ));

        let st = fs
            .set_attr(
                "/ns7/hard",
                SetAttr {
                    mode: Some(0o600),
                    mtime_ms: Some(1_000_000),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(st.mode & 0o7777, 0o600);
        assert_eq!(st.mtime_ms, 1_000_000);
    });
}

#[test]
fn append_and_truncate() {
    run(1, |s| async move {
        let fs = &s.fs;
        fs.mkdir("/ns8", true).await.unwrap();
        fs.write_file("/ns8/f", b"hello").await.unwrap();
        let mut w = fs.append("/ns8/f").await.unwrap();
        w.write(b" world").await.unwrap();
        w.close().await.unwrap();
        assert_eq!(fs.read_file("/ns8/f").await.unwrap(), b"hello world");
        fs.truncate("/ns8/f", 4).await.unwrap();
        assert_eq!(fs.read_file("/ns8/f").await.unwrap(), b"hell");
        fs.truncate("/ns8/f", 6).await.unwrap();
        assert_eq!(fs.read_file("/ns8/f").await.unwrap(), b"hell\0\0");
        assert!(matches!(
            fs.truncate("/ns8", 0).await,
            Err(FsError::IsADirectory { .. })
        ));
    });
}

#[test]
fn report_shows_worker_tiers() {
    run(1, |s| async move {
        let r = s.fs.report().await.unwrap();
        assert_eq!(r.workers.len(), 1);
        assert!(r.workers[0].alive);
        assert!(r.capacity > 0);
        assert_eq!(r.workers[0].tiers.len(), 2);
    });
}

/// Every background loop is a named task in the report: the master's, and each
/// worker's as of its last heartbeat.
#[test]
fn report_lists_the_background_tasks() {
    run(1, |s| async move {
        use curvine_common::tasks::state_name;
        let names = |t: &[curvine_common::proto::TaskReport]| {
            t.iter().map(|t| t.name.clone()).collect::<Vec<_>>()
        };
        let r = s.fs.report().await.unwrap();
        assert_eq!(
            names(&r.tasks),
            [
                "journal_sync",
                "lease_expiry",
                "load_jobs",
                "lost_workers",
                "persist",
                "purge",
                "replication",
                "ttl"
            ]
        );
        assert!(r.tasks.iter().all(|t| state_name(t.state) != "stopped"));
        curvine_server::testing::wait_until(std::time::Duration::from_secs(20), || async {
            let r = s.fs.report().await.unwrap();
            let have = names(&r.workers[0].tasks);
            ["data_server", "eviction", "heartbeat", "scrubber", "web"]
                .iter()
                .all(|n| have.iter().any(|h| h == n))
        })
        .await
        .expect("the worker reports its tasks");
        // the lease task has run by now, and none failed
        curvine_server::testing::wait_until(std::time::Duration::from_secs(20), || async {
            let r = s.fs.report().await.unwrap();
            r.tasks
                .iter()
                .any(|t| t.name == "lease_expiry" && t.runs > 0)
        })
        .await
        .expect("lease expiry ran");
        let r = s.fs.report().await.unwrap();
        assert!(r.tasks.iter().all(|t| t.errors == 0), "{:?}", r.tasks);
    });
}

#[test]
fn the_change_log_tells_one_client_what_another_changed() {
    run(1, |s| async move {
        use std::time::Duration;
        let fs = &s.fs;
        let other = curvine_client::CurvineFs::connect(s.cluster.client_conf())
            .await
            .unwrap();
        let me = other.watch_changes("", 0, Duration::ZERO).await.unwrap();
        assert!(me.reset, "a first call learns the epoch");
        let (epoch, after) = (me.epoch, me.last_seq);

        // the follower's own change is left out; another client's reaches it
        other.mkdir("/watch1", true).await.unwrap();
        fs.write_file("/watch1/f", b"abc").await.unwrap();
        let dir = fs.stat("/watch1").await.unwrap();
        let file = fs.stat("/watch1/f").await.unwrap();
        let mut seen = Vec::new();
        let mut inodes = Vec::new();
        let mut at = after;
        while !seen
            .iter()
            .any(|(p, n): &(u64, String)| *p == dir.id && n == "f")
        {
            let r = other
                .watch_changes(&epoch, at, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(!r.reset);
            assert!(!r.changes.is_empty(), "the change arrives within the wait");
            for c in &r.changes {
                assert!(
                    !c.entries.iter().any(|e| e.name == "watch1"),
                    "the follower's own mkdir is not reported back to it"
                );
                inodes.extend(c.inodes.iter().copied());
                seen.extend(c.entries.iter().map(|e| (e.parent, e.name.clone())));
            }
            at = r.last_seq;
        }
        assert!(inodes.contains(&file.id) && inodes.contains(&dir.id));

        // other tests share the cluster, so more changes may come; the wait ends either
        // way. A stale epoch is told to reset.
        let r = other
            .watch_changes(&epoch, at, Duration::from_millis(50))
            .await
            .unwrap();
        assert!(!r.reset && r.last_seq >= at);
        assert!(
            other
                .watch_changes("another", at, Duration::ZERO)
                .await
                .unwrap()
                .reset
        );
    });
}
