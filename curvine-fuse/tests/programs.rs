//! Real programs on the mount: tar, cp -a, git, sqlite3, concurrent appenders, mmap.

#![allow(unsafe_code)]

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::{data, sh, shared, test_dir};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A small source tree: nested dirs, files of several sizes and modes, a symlink.
fn make_tree(root: &Path) {
    for d in ["src/a/b", "src/c", "docs"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for (i, name) in [
        "src/main.rs",
        "src/a/x.txt",
        "src/a/b/y.bin",
        "src/c/z",
        "docs/README",
    ]
    .iter()
    .enumerate()
    {
        fs::write(root.join(name), data(1000 * i * i + 17, i as u64)).unwrap();
    }
    fs::write(root.join("src/big.bin"), data(3 << 20, 99)).unwrap();
    fs::set_permissions(root.join("src/c/z"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(root.join("docs/README"), fs::Permissions::from_mode(0o444)).unwrap();
    std::os::unix::fs::symlink("../docs/README", root.join("src/readme-link")).unwrap();
}

#[test]
fn tar_extract_then_diff() {
    let (dir, _) = test_dir("tar");
    let local = tempfile::tempdir().unwrap();
    make_tree(&local.path().join("tree"));
    sh(local.path(), "tar -cf tree.tar tree");
    let tarball = local.path().join("tree.tar");
    sh(&dir, &format!("tar -xf {}", tarball.display()));
    sh(
        &dir,
        &format!("diff -r {} tree", local.path().join("tree").display()),
    );
    let m = fs::metadata(dir.join("tree/src/c/z")).unwrap();
    assert_eq!(m.mode() & 0o777, 0o755);
}

#[test]
fn cp_a_preserves_modes_and_times() {
    let (dir, _) = test_dir("cpa");
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("tree");
    make_tree(&src);
    sh(&dir, &format!("cp -a {} copy", src.display()));
    sh(&dir, &format!("diff -r {} copy", src.display()));
    for f in ["src/main.rs", "src/c/z", "docs/README", "src/big.bin"] {
        let a = fs::metadata(src.join(f)).unwrap();
        let b = fs::metadata(dir.join("copy").join(f)).unwrap();
        assert_eq!(a.mode(), b.mode(), "{f} mode");
        assert_eq!(a.mtime(), b.mtime(), "{f} mtime");
        assert_eq!(a.len(), b.len(), "{f} len");
    }
    assert!(fs::symlink_metadata(dir.join("copy/src/readme-link"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn git_init_add_commit_log() {
    if !have("git") {
        eprintln!("git not installed; skipped");
        return;
    }
    let (dir, _) = test_dir("git");
    make_tree(&dir.join("repo"));
    let repo = dir.join("repo");
    let git = "git -c user.email=t@example.com -c user.name=tester -c init.defaultBranch=main";
    sh(&repo, &format!("{git} init -q ."));
    sh(&repo, &format!("{git} add -A && {git} commit -qm first"));
    fs::write(repo.join("src/main.rs"), b"fn main() {}\n").unwrap();
    sh(&repo, &format!("{git} commit -qam second"));
    let log = sh(&repo, &format!("{git} log --oneline"));
    assert_eq!(log.lines().count(), 2, "{log}");
    assert!(log.contains("second"), "{log}");
    sh(&repo, &format!("{git} fsck --strict"));
    assert!(sh(&repo, &format!("{git} status --porcelain")).is_empty());
}

#[test]
fn sqlite_transactions_and_integrity() {
    if !have("sqlite3") {
        eprintln!("sqlite3 not installed; skipped");
        return;
    }
    let (dir, _) = test_dir("sqlite");
    let mut script = String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n");
    for i in 0..400 {
        script.push_str(&format!(
            "BEGIN; INSERT INTO t(v) VALUES('row {i} {}'); COMMIT;\n",
            "x".repeat(i % 200)
        ));
    }
    script.push_str("UPDATE t SET v = 'u' WHERE id % 7 = 0;\nDELETE FROM t WHERE id % 11 = 0;\n");
    fs::write(dir.join("script.sql"), script).unwrap();
    sh(&dir, "sqlite3 db.sqlite < script.sql");
    let out = sh(
        &dir,
        "sqlite3 db.sqlite 'PRAGMA integrity_check; SELECT count(*) FROM t;'",
    );
    assert_eq!(out, "ok\n364\n");
}

#[test]
fn concurrent_appenders_lose_nothing() {
    let (dir, _) = test_dir("appenders");
    // several rounds, each on a new log: the first opens race to create it, later ones
    // append while other writers' streams close
    let script = "rm -f log; for p in 1 2 3 4; do (for i in $(seq 1 100); do echo \"p$p line $i\" >> log; done) & done; wait";
    for round in 0..5 {
        sh(&dir, script);
        let text = fs::read_to_string(dir.join("log")).unwrap();
        assert_eq!(text.lines().count(), 400, "round {round}");
        for p in 1..=4 {
            for i in [1, 50, 100] {
                assert!(
                    text.lines().any(|l| l == format!("p{p} line {i}")),
                    "round {round}: p{p} line {i}"
                );
            }
        }
    }
}

#[test]
fn mmap_read_matches_content() {
    let (dir, _) = test_dir("mmap");
    let body = data(1 << 20, 5);
    fs::write(dir.join("f"), &body).unwrap();
    let f = fs::File::open(dir.join("f")).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    // SAFETY: a private read-only mapping of a file we hold open, unmapped below.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            body.len(),
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            fd,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let got = std::slice::from_raw_parts(p as *const u8, body.len());
        assert!(got == &body[..]);
        libc::munmap(p, body.len());
    }
}

/// A bucket of the local S3 server (s3s-fs) mounted into the namespace: `ls -l` and
/// readdir + stat through the mount show its objects with their sizes and mtimes, and
/// its common prefixes as directories; a cold read returns the object.
#[test]
fn ls_l_shows_a_mounted_bucket() {
    use curvine_server::testing::s3::{options, S3Server};
    let s = shared();
    let s3 =
        s.rt.block_on(S3Server::start(&["lsbkt"]))
            .expect("start s3s-fs");
    let op = curvine_server::ufs::build("s3://lsbkt", &options(&s3.endpoint())).unwrap();
    let objects: [(&str, usize); 4] = [
        ("top.txt", 11),
        ("empty", 0),
        ("logs/2024/a.log", 70_000),
        ("logs/b.log", 1),
    ];
    let mut mtimes = std::collections::HashMap::new();
    for (i, (key, len)) in objects.iter().enumerate() {
        s.rt.block_on(op.write(key, data(*len, i as u64))).unwrap();
        let m = s.rt.block_on(op.stat(key)).unwrap();
        let t = std::time::SystemTime::from(m.last_modified().expect("an mtime"));
        let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        mtimes.insert(*key, secs);
    }
    let info = curvine_client::proto::MountInfo {
        path: "/ls-bucket".into(),
        ufs_uri: "s3://lsbkt".into(),
        options: options(&s3.endpoint()),
        sync_interval_ms: 60_000,
        ..Default::default()
    };
    s.rt.block_on(s.fs.mount(info)).expect("mount the bucket");
    let root = s.mnt.join("ls-bucket");

    // readdir + stat
    let mut names: Vec<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["empty", "logs", "top.txt"]);
    for (key, len) in objects {
        let m = fs::metadata(root.join(key)).unwrap();
        assert!(m.is_file(), "{key}");
        assert_eq!(m.len(), len as u64, "{key}");
        assert_eq!(m.mtime(), mtimes[key], "{key} mtime");
    }
    for dir in ["logs", "logs/2024"] {
        assert!(fs::metadata(root.join(dir)).unwrap().is_dir(), "{dir}");
    }

    // ls -l: a directory line for the prefix, size and name for each object
    let out = sh(&root, "LC_ALL=C ls -l --time-style=+%s . logs");
    let line_of = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().last() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{out}"))
            .to_string()
    };
    let fields = |name: &str| -> Vec<String> {
        line_of(name)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert!(line_of("logs").starts_with('d'), "{out}");
    assert!(line_of("2024").starts_with('d'), "{out}");
    for (name, key) in [
        ("top.txt", "top.txt"),
        ("empty", "empty"),
        ("b.log", "logs/b.log"),
    ] {
        let f = fields(name);
        let len = objects.iter().find(|(k, _)| *k == key).unwrap().1;
        // mode, links, owner, group, size, mtime (+%s), name
        assert!(f[0].starts_with('-'), "{out}");
        assert_eq!(f[4], len.to_string(), "{name}: {out}");
        assert_eq!(f[5], mtimes[key].to_string(), "{name}: {out}");
    }

    assert_eq!(
        fs::read(root.join("logs/2024/a.log")).unwrap(),
        data(70_000, 2)
    );
    s.rt.block_on(s.fs.umount("/ls-bucket")).expect("umount");
}
