//! Failed and interrupted copies leave no partial file: `put`, `get` and `cp` write
//! `NAME._COPYING_` and rename it when whole. A read failing part-way through leaves
//! neither the target nor the temporary, so the retry succeeds; SIGINT and SIGTERM stop
//! a copy with only whole files left.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use curvine_client::CurvineFs;
use curvine_common::conf::{ByteSize, Dur};
use curvine_server::testing::{wait_until, MiniCluster};

use super::faulty::{bytes_at, FaultyDir, Past};
use super::{conf_for, cv, ok};

const MIB: usize = 1 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 239) as u8 ^ seed).collect()
}

/// Neither `path` nor its temporary is in Curvine.
fn nothing_at(rt: &tokio::runtime::Runtime, fs: &CurvineFs, path: &str) {
    for p in [path.to_string(), format!("{path}._COPYING_")] {
        assert!(!rt.block_on(fs.exists(&p)).unwrap(), "{p} was left");
    }
}

/// Wait until the master counts exactly `n` live workers.
fn live_workers(rt: &tokio::runtime::Runtime, cluster: &MiniCluster, n: usize) {
    rt.block_on(wait_until(Duration::from_secs(30), || async {
        cluster.live_workers().await == n
    }))
    .unwrap_or_else(|_| panic!("{n} live workers"));
}

/// Worker `up` alone is live (the other of two is stopped).
fn only_worker(rt: &tokio::runtime::Runtime, cluster: &mut MiniCluster, up: usize) {
    rt.block_on(cluster.start_worker(up)).unwrap();
    live_workers(rt, cluster, 2);
    rt.block_on(cluster.stop_worker(1 - up)).unwrap();
    live_workers(rt, cluster, 1);
}

#[test]
fn a_curvine_read_failing_mid_copy_leaves_no_file_and_the_retry_succeeds() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut cluster = rt
        .block_on(
            MiniCluster::builder()
                .workers(2)
                .conf(|c| {
                    c.master.block_size = ByteSize(1 << 20);
                    c.master.worker_lost_timeout = Dur(Duration::from_secs(1));
                    c.worker.heartbeat_interval = Dur(Duration::from_millis(100));
                })
                .start(),
        )
        .unwrap();
    live_workers(&rt, &cluster, 2);
    let fs = rt
        .block_on(CurvineFs::connect(cluster.client_conf()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());

    // the first 4 MiB (the copy's first read) on worker 0, the last 2 MiB on worker 1
    let body = pattern(6 * MIB, 5);
    rt.block_on(cluster.stop_worker(1)).unwrap();
    live_workers(&rt, &cluster, 1);
    rt.block_on(fs.write_file("/f", &body[..4 * MIB])).unwrap();
    only_worker(&rt, &mut cluster, 1);
    rt.block_on(async {
        let mut w = fs.append("/f").await?;
        w.write(&body[4 * MIB..]).await?;
        w.close().await
    })
    .unwrap();
    rt.block_on(cluster.start_worker(0)).unwrap();
    live_workers(&rt, &cluster, 2);
    let port = |i: usize| u32::from(cluster.worker_addr(i).port());
    let (p0, p1) = (port(0), port(1));
    rt.block_on(wait_until(Duration::from_secs(30), || async {
        let Ok(blocks) = fs.block_locations("/f").await else {
            return false;
        };
        let on = |b: &curvine_client::proto::LocatedBlock| {
            b.locations
                .iter()
                .filter_map(|l| l.address.as_ref().map(|a| a.data_port))
                .collect::<Vec<_>>()
        };
        blocks.len() == 6
            && blocks[..4].iter().all(|b| on(b) == [p0])
            && blocks[4..].iter().all(|b| on(b) == [p1])
    }))
    .expect("the file's blocks are where they were written");

    // worker 1 goes: a copy reads 4 MiB, then finds no replica of the fifth block
    rt.block_on(cluster.stop_worker(1)).unwrap();
    let out = dir.path().join("out.bin");
    let out_s = out.to_str().unwrap();
    let e = cv(&conf, &["fs", "get", "/f", out_s]);
    assert!(!e.status.success(), "{e:?}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("conf.toml")], "{e:?}");
    let e = cv(&conf, &["fs", "cp", "/f", "/g"]);
    assert!(!e.status.success(), "{e:?}");
    nothing_at(&rt, &fs, "/g");
    assert_eq!(rt.block_on(fs.list("/")).unwrap().len(), 1, "only /f");

    // with the worker back the same commands succeed; a temporary a killed copy left
    // is theirs to overwrite
    rt.block_on(cluster.start_worker(1)).unwrap();
    live_workers(&rt, &cluster, 2);
    std::fs::write(dir.path().join("out.bin._COPYING_"), b"stale").unwrap();
    ok(&conf, &["fs", "get", "/f", out_s]);
    assert!(!dir.path().join("out.bin._COPYING_").exists());
    assert!(std::fs::read(&out).unwrap() == body);
    ok(&conf, &["fs", "cp", "/f", "/g"]);
    assert!(rt.block_on(fs.read_file("/g")).unwrap() == body);
    drop(fs);
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn a_local_read_failing_mid_put_leaves_no_file_and_the_retry_succeeds() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let fs = rt
        .block_on(CurvineFs::connect(cluster.client_conf()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());

    // EIO past 5 MiB of 6
    let mnt = dir.path().join("eio");
    std::fs::create_dir(&mnt).unwrap();
    let eio = rt.block_on(FaultyDir::mount(
        &mnt,
        6 * MIB as u64,
        5 * MIB as u64,
        Past::Fail,
    ));
    let src = eio.file();
    let src = src.to_str().unwrap();
    let e = cv(&conf, &["fs", "put", src, "/p"]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        !e.status.success() && err.contains("Input/output error"),
        "{e:?}"
    );
    nothing_at(&rt, &fs, "/p");
    // -f: the file there stays as it was
    rt.block_on(fs.write_file("/old", b"old")).unwrap();
    let e = cv(&conf, &["fs", "put", "-f", src, "/old"]);
    assert!(!e.status.success(), "{e:?}");
    assert_eq!(rt.block_on(fs.read_file("/old")).unwrap(), b"old");
    nothing_at(&rt, &fs, "/p");
    assert!(!rt.block_on(fs.exists("/old._COPYING_")).unwrap());
    eio.heal();
    rt.block_on(fs.write_file("/p._COPYING_", b"stale"))
        .unwrap();
    ok(&conf, &["fs", "put", src, "/p"]);
    assert!(!rt.block_on(fs.exists("/p._COPYING_")).unwrap());
    assert!(rt.block_on(fs.read_file("/p")).unwrap() == bytes_at(0, 6 * MIB as u64));
    ok(&conf, &["fs", "put", "-f", src, "/old"]);
    assert!(rt.block_on(fs.read_file("/old")).unwrap() == bytes_at(0, 6 * MIB as u64));
    rt.block_on(eio.unmount());

    // a file that ends before the size it was listed with is refused, not cut short
    let mnt = dir.path().join("short");
    std::fs::create_dir(&mnt).unwrap();
    let short = rt.block_on(FaultyDir::mount(
        &mnt,
        3 * MIB as u64,
        2 * MIB as u64,
        Past::End,
    ));
    let e = cv(&conf, &["fs", "put", short.file().to_str().unwrap(), "/q"]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        !e.status.success() && err.contains("ended after 2097152 of its 3145728 bytes"),
        "{e:?}"
    );
    nothing_at(&rt, &fs, "/q");
    rt.block_on(short.unmount());
    drop(fs);
    rt.block_on(cluster.shutdown()).unwrap();
}

/// `cv ARGS` started, its standard error kept.
fn spawn_cv(conf: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_cv"))
        .arg("--conf")
        .arg(conf)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cv")
}

/// Send `signal` (`INT`, `TERM`) to `child`, which is copying into `temp` and hangs
/// reading `hang`, and wait for it to exit.
fn stop(
    child: Child,
    signal: &str,
    rt: &tokio::runtime::Runtime,
    fs: &CurvineFs,
    temp: &str,
    hang: &FaultyDir,
) -> Output {
    kill(&child, signal);
    // cv removes the temporary when it stops the copy; its read still hangs, and only
    // once that ends can it exit
    rt.block_on(wait_until(Duration::from_secs(30), || async {
        !fs.exists(temp).await.unwrap_or(true)
    }))
    .unwrap_or_else(|_| panic!("{temp} is removed on SIG{signal}"));
    hang.fail_hung();
    exit_of(child)
}

fn kill(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args(["-s", signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// What `child` printed, once it exited.
fn exit_of(child: Child) -> Output {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    rx.recv_timeout(Duration::from_secs(30))
        .expect("cv exits")
        .unwrap()
}

/// `child` once `path` exists in Curvine; a failure if `child` exits first or the path
/// does not appear within 30 s.
fn when(rt: &tokio::runtime::Runtime, fs: &CurvineFs, path: &str, mut child: Child) -> Child {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rt.block_on(fs.exists(path)).unwrap_or(false) {
        if child.try_wait().unwrap().is_some() {
            panic!("cv ended first: {:?}", child.wait_with_output());
        }
        if Instant::now() > deadline {
            kill(&child, "KILL");
            panic!("{path} never appeared");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn an_interrupted_copy_leaves_only_whole_files() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let fs = rt
        .block_on(CurvineFs::connect(cluster.client_conf()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());
    // tree/a.bin and tree/b.bin are copied first, then tree/m/src.bin, whose reads hang
    // after its first MiB
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("m")).unwrap();
    let (a, b) = (pattern(3 * MIB, 1), pattern(3 * MIB, 2));
    std::fs::write(tree.join("a.bin"), &a).unwrap();
    std::fs::write(tree.join("b.bin"), &b).unwrap();
    let hang = rt.block_on(FaultyDir::mount(
        &tree.join("m"),
        4 * MIB as u64,
        MIB as u64,
        Past::Hang,
    ));

    let child = spawn_cv(&conf, &["fs", "put", "-r", tree.to_str().unwrap(), "/t"]);
    let child = when(&rt, &fs, "/t/m/src.bin._COPYING_", child);
    let out = stop(child, "INT", &rt, &fs, "/t/m/src.bin._COPYING_", &hang);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(130)
            && err
                .contains("put: interrupted by SIGINT; removed the partial /t/m/src.bin._COPYING_"),
        "{out:?}"
    );
    // what is there is whole, and nothing else is
    let mut files = Vec::new();
    let mut dirs = vec!["/t".to_string()];
    while let Some(d) = dirs.pop() {
        for e in rt.block_on(fs.list(&d)).unwrap() {
            if e.file_type == curvine_client::FileType::Dir as i32 {
                dirs.push(e.path.clone());
            } else {
                files.push(e.path.clone());
            }
        }
    }
    files.sort();
    assert_eq!(files, ["/t/a.bin", "/t/b.bin"]);
    assert!(rt.block_on(fs.read_file("/t/a.bin")).unwrap() == a);
    assert!(rt.block_on(fs.read_file("/t/b.bin")).unwrap() == b);

    // SIGTERM too; a file of its own is left as nothing
    let child = spawn_cv(&conf, &["fs", "put", hang.file().to_str().unwrap(), "/one"]);
    let child = when(&rt, &fs, "/one._COPYING_", child);
    let out = stop(child, "TERM", &rt, &fs, "/one._COPYING_", &hang);
    assert_eq!(out.status.code(), Some(143), "{out:?}");
    nothing_at(&rt, &fs, "/one");
    rt.block_on(hang.unmount());
    drop(fs);
    rt.block_on(cluster.shutdown()).unwrap();
}
