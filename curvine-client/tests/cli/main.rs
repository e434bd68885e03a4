//! The `cv` CLI against a MiniCluster: every `cv fs` command, `cv report`, and the
//! one-line error with a non-zero exit, also for a chmod or chown the master refuses.
//! Copies and their progress are in `copy.rs`, failed and interrupted copies in
//! `partial.rs` (with `faulty.rs`, a FUSE file that fails part-way); counts, blocks,
//! replicas, `--json`, `cv version` and completions in `info.rs`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use curvine_server::testing::MiniCluster;

mod admin;
mod copy;
mod faulty;
mod info;
mod partial;

/// A client configuration file for `cluster`, in `dir`.
fn conf_for(cluster: &MiniCluster, dir: &Path) -> PathBuf {
    let conf = dir.join("conf.toml");
    std::fs::write(
        &conf,
        format!(
            "[client]\nmaster_addrs = [\"{}\"]\n[log]\nlevel = \"warn\"\n",
            cluster.master_addr()
        ),
    )
    .unwrap();
    conf
}

/// A cluster of `workers` workers with 1 MiB blocks and quick heartbeats and
/// re-replication scans, every worker registered.
fn small_block_cluster(rt: &tokio::runtime::Runtime, workers: usize) -> MiniCluster {
    use curvine_common::conf::{ByteSize, Dur};
    use std::time::Duration;
    let cluster = rt
        .block_on(
            MiniCluster::builder()
                .workers(workers)
                .conf(|c| {
                    c.master.block_size = ByteSize(1 << 20);
                    c.master.replication_interval = Dur(Duration::from_millis(200));
                    c.worker.heartbeat_interval = Dur(Duration::from_millis(100));
                })
                .start(),
        )
        .unwrap();
    rt.block_on(cluster.wait_workers_live(workers)).unwrap();
    cluster
}

/// `cv` failed on bad input: one line on stderr starting `cv: ` that says `why`.
fn one_line_error(out: &Output, why: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.starts_with("cv: ")
            && err.trim_end().lines().count() == 1
            && err.contains(why),
        "{out:?}"
    );
}

fn cv(conf: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cv"))
        .arg("--conf")
        .arg(conf)
        .args(args)
        .output()
        .expect("run cv")
}

fn ok(conf: &Path, args: &[&str]) -> String {
    let out = cv(conf, args);
    assert!(
        out.status.success(),
        "cv {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn cv_commands_work_end_to_end() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.toml");
    std::fs::write(
        &conf,
        format!(
            "[client]\nmaster_addrs = [\"{}\"]\n[log]\nlevel = \"warn\"\n",
            cluster.master_addr()
        ),
    )
    .unwrap();
    let local = dir.path().join("in.bin");
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&local, &body).unwrap();

    ok(&conf, &["fs", "mkdir", "-p", "/cli/a/b"]);
    ok(
        &conf,
        &["fs", "put", local.to_str().unwrap(), "/cli/a/x.bin"],
    );
    let ls = ok(&conf, &["fs", "ls", "-l", "/cli/a"]);
    assert!(ls.contains("x.bin") && ls.contains('b'), "{ls}");
    let out = dir.path().join("out.bin");
    ok(&conf, &["fs", "get", "/cli/a/x.bin", out.to_str().unwrap()]);
    assert!(std::fs::read(&out).unwrap() == body);
    let cat = cv(&conf, &["fs", "cat", "/cli/a/x.bin"]);
    assert!(cat.status.success() && cat.stdout == body);
    // a reader that stops early (`cv fs cat F | head -c 10`) ends cat quietly, with the
    // status of a program ended by SIGPIPE; a full disk is still an error
    let mut child = Command::new(env!("CARGO_BIN_EXE_cv"))
        .arg("--conf")
        .arg(&conf)
        .args(["fs", "cat", "/cli/a/x.bin"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    assert_eq!(head[..], body[..10]);
    let cut = child.wait_with_output().unwrap();
    assert_eq!(cut.status.code(), Some(141), "{cut:?}");
    assert!(cut.stderr.is_empty(), "{cut:?}");
    let full = Command::new(env!("CARGO_BIN_EXE_cv"))
        .arg("--conf")
        .arg(&conf)
        .args(["fs", "cat", "/cli/a/x.bin"])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&full.stderr);
    assert!(
        full.status.code() == Some(1)
            && err.contains("standard output: No space left")
            && err.lines().count() == 1,
        "{full:?}"
    );
    let stat = ok(&conf, &["fs", "stat", "/cli/a/x.bin"]);
    assert!(stat.contains("3000000"), "{stat}");
    ok(&conf, &["fs", "mv", "/cli/a/x.bin", "/cli/a/b/y.bin"]);
    let du = ok(&conf, &["fs", "du", "-s", "/cli"]);
    assert!(du.contains("3000000"), "{du}");
    ok(&conf, &["fs", "touch", "/cli/t"]);
    ok(&conf, &["fs", "chmod", "600", "/cli/t"]);
    let st = ok(&conf, &["fs", "stat", "/cli/t"]);
    assert!(st.contains("600") || st.contains("rw-------"), "{st}");
    ok(&conf, &["fs", "ln", "-s", "/cli/t", "/cli/link"]);
    ok(&conf, &["fs", "ln", "/cli/a/b/y.bin", "/cli/hard"]);
    let df = ok(&conf, &["fs", "df"]);
    assert!(!df.trim().is_empty());
    let report = ok(&conf, &["report"]);
    assert!(report.contains("MEM") && report.contains("SSD"), "{report}");
    ok(&conf, &["fs", "rm", "-r", "/cli"]);

    // errors: one line on stderr, non-zero exit
    let e = cv(&conf, &["fs", "cat", "/cli/missing"]);
    assert!(!e.status.success());
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        err.starts_with("cv: ") && err.trim().lines().count() == 1,
        "{err}"
    );
    let e = cv(&conf, &["fs", "mkdir", "relative/path"]);
    assert!(!e.status.success());

    // several paths: each is done; a failing one is named and the exit is non-zero
    ok(&conf, &["fs", "mkdir", "-p", "/many/a", "/many/b"]);
    ok(
        &conf,
        &["fs", "touch", "/many/a/1", "/many/a/2", "/many/b/3"],
    );
    let ls = ok(&conf, &["fs", "ls", "/many/a"]);
    assert_eq!(ls.lines().count(), 2, "{ls}");
    let e = cv(&conf, &["fs", "rm", "/many/a/1", "/many/nope", "/many/a/2"]);
    assert!(!e.status.success());
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        err.contains("rm /many/nope:") && err.contains("1 of 3 paths failed"),
        "{err}"
    );
    assert!(ok(&conf, &["fs", "ls", "/many/a"]).trim().is_empty());
    ok(&conf, &["fs", "rm", "-r", "/many/a", "/many/b"]);
    assert!(ok(&conf, &["fs", "ls", "/many"]).trim().is_empty());
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn cv_reports_an_unreachable_master_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &conf,
        format!("[client]\nmaster_addrs = [\"127.0.0.1:{port}\"]\nconnect_timeout = \"1s\"\n"),
    )
    .unwrap();
    let e = cv(&conf, &["fs", "ls", "/"]);
    assert!(!e.status.success());
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(err.starts_with("cv: "), "{err}");
    let e = cv(&conf, &["fs", "ls", "/", "--bogus"]);
    assert_eq!(e.status.code(), Some(2));
}

/// `cv` run as `uid`/`gid` (no supplementary groups), as an unprivileged user would.
fn cv_as(uid: u32, gid: u32, conf: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg(env!("CARGO_BIN_EXE_cv"))
        .arg("--conf")
        .arg(conf)
        .args(args)
        .output()
        .expect("run setpriv")
}

/// One line on stderr that names the path and says why; a non-zero exit.
fn refused(out: &Output, path: &str, why: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.starts_with("cv: ")
            && err.trim_end().lines().count() == 1
            && err.contains(path)
            && err.to_lowercase().contains(why),
        "{out:?}"
    );
}

/// `conf_for`, readable by the unprivileged users `cv_as` runs as.
fn conf_for_all(cluster: &MiniCluster, dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    conf_for(cluster, dir)
}

#[test]
fn refused_chmod_and_chown_print_one_line_and_fail() {
    if !is_root() {
        eprintln!("skipped: setpriv needs root to act as another user");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for_all(&cluster, dir.path());
    ok(&conf, &["fs", "mkdir", "-p", "/perm"]);
    ok(&conf, &["fs", "chmod", "777", "/perm"]);
    ok(&conf, &["fs", "touch", "/perm/root-file"]);
    let before = ok(&conf, &["fs", "stat", "/perm/root-file"]);
    // another user's file: neither its mode nor its owner
    let e = cv_as(
        5001,
        5001,
        &conf,
        &["fs", "chmod", "777", "/perm/root-file"],
    );
    refused(&e, "/perm/root-file", "not permitted");
    let e = cv_as(
        5001,
        5001,
        &conf,
        &["fs", "chown", "5001", "/perm/root-file"],
    );
    refused(&e, "/perm/root-file", "not permitted");
    // its own file: not to another owner, nor to a group it is not in
    let out = cv_as(5001, 5001, &conf, &["fs", "touch", "/perm/a-file"]);
    assert!(out.status.success(), "{out:?}");
    let e = cv_as(5001, 5001, &conf, &["fs", "chown", "5002", "/perm/a-file"]);
    refused(&e, "/perm/a-file", "not permitted");
    let e = cv_as(5001, 5001, &conf, &["fs", "chown", ":7002", "/perm/a-file"]);
    refused(&e, "/perm/a-file", "not permitted");
    // a file it may not even see
    ok(&conf, &["fs", "mkdir", "/perm/closed"]);
    ok(&conf, &["fs", "chmod", "700", "/perm/closed"]);
    ok(&conf, &["fs", "touch", "/perm/closed/f"]);
    let e = cv_as(5001, 5001, &conf, &["fs", "chmod", "777", "/perm/closed/f"]);
    refused(&e, "/perm/closed", "permission denied");
    // nothing changed; what the rules allow works
    assert_eq!(ok(&conf, &["fs", "stat", "/perm/root-file"]), before);
    let out = cv_as(5001, 5001, &conf, &["fs", "chmod", "600", "/perm/a-file"]);
    assert!(out.status.success(), "{out:?}");
    ok(&conf, &["fs", "chown", "5002:7002", "/perm/a-file"]);
    let st = ok(&conf, &["fs", "stat", "/perm/a-file"]);
    assert!(st.contains("5002") && st.contains("7002"), "{st}");
    rt.block_on(cluster.shutdown()).unwrap();
}

/// `cv fs ls` of a directory another user may read but not search prints the names
/// (as `ls`, which needs no stat for them); `-l` and `--json`, which show attributes,
/// are refused, as `ls -l` fails to stat each entry. Search without read gives the
/// entries but not the listing.
#[test]
fn ls_of_a_directory_read_but_not_searched_prints_names() {
    if !is_root() {
        eprintln!("skipped: setpriv needs root to act as another user");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for_all(&cluster, dir.path());
    ok(&conf, &["fs", "mkdir", "-p", "/rd/sub", "/xd/sub"]);
    ok(&conf, &["fs", "touch", "/rd/f", "/xd/f"]);
    ok(&conf, &["fs", "chmod", "604", "/rd"]);
    ok(&conf, &["fs", "chmod", "601", "/xd"]);
    let out = cv_as(5001, 5001, &conf, &["fs", "ls", "/rd"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "f\nsub\n");
    for args in [
        &["fs", "ls", "-l", "/rd"][..],
        &["fs", "ls", "--json", "/rd"],
        &["fs", "stat", "/rd/f"],
    ] {
        refused(&cv_as(5001, 5001, &conf, args), "/rd", "permission denied");
    }
    refused(
        &cv_as(5001, 5001, &conf, &["fs", "ls", "/xd"]),
        "/xd",
        "permission denied",
    );
    let out = cv_as(5001, 5001, &conf, &["fs", "ls", "/xd/sub"]);
    assert!(out.status.success(), "{out:?}");
    let out = cv_as(5001, 5001, &conf, &["fs", "stat", "/xd/f"]);
    assert!(out.status.success(), "{out:?}");
    rt.block_on(cluster.shutdown()).unwrap();
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                == Some("0")
        })
        .unwrap_or(false)
}

/// A client process killed with SIGKILL mid-write leaves no file and no staging.
#[test]
fn killed_writer_process_leaves_nothing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt
        .block_on(
            MiniCluster::builder()
                .conf(|c| {
                    c.master.lease_timeout =
                        curvine_common::conf::Dur(std::time::Duration::from_secs(2))
                })
                .start(),
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.toml");
    std::fs::write(
        &conf,
        format!(
            "[master]\nlease_timeout = \"2s\"\n[client]\nmaster_addrs = [\"{}\"]\n[log]\nlevel = \"warn\"\n",
            cluster.master_addr()
        ),
    )
    .unwrap();
    let fs = rt
        .block_on(curvine_client::CurvineFs::connect(cluster.client_conf()))
        .unwrap();
    // an endless source: the upload only ends when the process is killed; it writes
    // under the temporary name, which SIGKILL leaves behind until its lease expires
    let mut child = Command::new(env!("CARGO_BIN_EXE_cv"))
        .arg("--conf")
        .arg(&conf)
        .args(["fs", "put", "/dev/zero", "/killed"])
        .spawn()
        .unwrap();
    rt.block_on(curvine_server::testing::wait_until(
        std::time::Duration::from_secs(20),
        || async { fs.exists("/killed._COPYING_").await.unwrap_or(false) },
    ))
    .expect("the upload made progress");
    child.kill().unwrap();
    child.wait().unwrap();
    rt.block_on(curvine_server::testing::wait_until(
        std::time::Duration::from_secs(30),
        || async { !fs.exists("/killed._COPYING_").await.unwrap_or(true) },
    ))
    .expect("the partial file is removed when its lease expires");
    assert!(!rt.block_on(fs.exists("/killed")).unwrap());
    let staging = |cluster: &MiniCluster| -> usize {
        cluster
            .worker_dirs(0)
            .iter()
            .map(|d| {
                std::fs::read_dir(d.join("staging"))
                    .map(|r| r.count())
                    .unwrap_or(0)
            })
            .sum()
    };
    rt.block_on(curvine_server::testing::wait_until(
        std::time::Duration::from_secs(10),
        || async { staging(&cluster) == 0 },
    ))
    .expect("staging is cleaned");
    // blocks committed before the kill are deleted through heartbeat replies
    rt.block_on(curvine_server::testing::wait_until(
        std::time::Duration::from_secs(10),
        || async {
            let r = fs.report().await.unwrap();
            r.workers[0].tiers.iter().map(|t| t.blocks).sum::<u64>() == 0
        },
    ))
    .expect("the killed file's blocks are removed from the worker");
    drop(fs);
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn cv_mount_lists_loads_frees_and_unmounts_without_printing_secrets() {
    use curvine_server::testing::s3::{S3Server, ACCESS_KEY, SECRET_KEY};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let s3 = rt.block_on(S3Server::start(&["cli"])).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.toml");
    std::fs::write(
        &conf,
        format!(
            "[client]\nmaster_addrs = [\"{}\"]\n[log]\nlevel = \"warn\"\n",
            cluster.master_addr()
        ),
    )
    .unwrap();
    let data = dir.path().join("store");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(data.join("sub/obj.bin"), &body).unwrap();
    std::fs::write(data.join("top.txt"), b"top\n").unwrap();
    let uri = format!("file://{}", data.display());

    ok(&conf, &["mount", &uri, "/cli-file"]);
    let ls = ok(&conf, &["fs", "ls", "-l", "/cli-file/sub"]);
    assert!(ls.contains("obj.bin"), "{ls}");
    let st = ok(&conf, &["fs", "stat", "/cli-file/sub/obj.bin"]);
    assert!(
        st.contains("size: 300000") && st.contains("under-store key: sub/obj.bin"),
        "{st}"
    );
    let cat = cv(&conf, &["fs", "cat", "/cli-file/sub/obj.bin"]);
    assert!(cat.status.success() && cat.stdout == body);
    let load = cv(&conf, &["load", "-r", "/cli-file"]);
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let progress = String::from_utf8_lossy(&load.stderr);
    assert!(progress.contains("files 2/2"), "{progress}");
    assert!(String::from_utf8_lossy(&load.stdout).contains("loaded 2 files"));
    // a job in the background, then its status by id and by path
    let id = ok(&conf, &["load", "--no-wait", "-r", "/cli-file"]);
    let id = id.trim();
    assert!(id.parse::<u64>().is_ok(), "{id}");
    let mut status = String::new();
    for _ in 0..100 {
        status = ok(&conf, &["load", "--status", id]);
        if !status.contains(" running ") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        status.starts_with(&format!("job {id} done /cli-file: files 2/2")),
        "{status}"
    );
    let by_path = ok(&conf, &["load", "--status", "/cli-file"]);
    assert_eq!(by_path.lines().count(), 2, "{by_path}");
    let cancelled = ok(&conf, &["load", "--cancel", id]);
    assert!(
        cancelled.contains(" done "),
        "an ended job stays as it ended: {cancelled}"
    );
    let unknown = cv(&conf, &["load", "--status", "99999"]);
    assert!(!unknown.status.success());
    let report = ok(&conf, &["report"]);
    assert!(report.contains("load jobs running: 0"), "{report}");
    let freed = ok(&conf, &["free", "/cli-file"]);
    assert!(freed.starts_with("freed "), "{freed}");
    let resync = ok(&conf, &["mount", "resync", "/cli-file"]);
    assert!(resync.contains("resynced /cli-file"), "{resync}");

    let endpoint = format!("endpoint=http://{}", s3.addr);
    let secret = format!("secret_access_key={SECRET_KEY}");
    let key = format!("access_key_id={ACCESS_KEY}");
    let out = ok(
        &conf,
        &[
            "mount",
            "s3://cli/p",
            "/cli-s3",
            "-o",
            &endpoint,
            "-o",
            "region=us-east-1",
            "-o",
            &key,
            "-o",
            &secret,
            "--sync-interval",
            "never",
        ],
    );
    assert!(out.contains("mounted s3://cli/p on /cli-s3"), "{out}");
    let list = ok(&conf, &["mount"]);
    assert!(
        list.contains("s3://cli/p on /cli-s3") && list.contains("sync_interval=never"),
        "{list}"
    );
    assert!(
        list.contains(&format!("file://{}", data.display())),
        "{list}"
    );
    let json = ok(&conf, &["mount", "--json"]);
    assert!(
        json.starts_with('[') && json.contains("\"path\":\"/cli-s3\""),
        "{json}"
    );
    for text in [&out, &list, &json] {
        assert!(!text.contains(SECRET_KEY), "a secret was printed: {text}");
    }
    assert!(json.contains("\"secret_access_key\":\"***\""), "{json}");

    // bad input: one line naming the cause, non-zero exit, nothing mounted
    let bad = cv(&conf, &["mount", &uri, "/cli-bad", "-o", "regoin=x"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("unknown option \"regoin\""), "{err}");
    let nested = cv(&conf, &["mount", &uri, "/cli-file/inner"]);
    assert!(!nested.status.success());
    let bad_mode = cv(&conf, &["mount", &uri, "/cli-bad", "--mode", "sometimes"]);
    assert!(!bad_mode.status.success());

    ok(&conf, &["umount", "/cli-s3"]);
    ok(&conf, &["umount", "/cli-file"]);
    assert!(!ok(&conf, &["mount"]).contains("/cli-"), "mounts left");
    assert!(
        data.join("sub/obj.bin").exists(),
        "umount touched the store"
    );
    drop(s3);
    rt.block_on(cluster.shutdown()).unwrap();
}
