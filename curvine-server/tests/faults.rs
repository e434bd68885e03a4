//! Fault tests: each owns its MiniCluster (or real processes) and stops/restarts nodes.
//! `faults/reports.rs`: reads right after a master restart, while its workers report.

mod common;
#[path = "faults/reports.rs"]
mod reports;

use std::io::Write;
use std::time::Duration;

use common::{block_files, data, runtime, staging_files};
use curvine_client::{CreateOptions, CurvineFs};
use curvine_common::conf::local_socket_path;
use curvine_common::proto::StorageTier;
use curvine_common::{ClusterConf, FsError};
use curvine_server::testing::{wait_until, MiniCluster, TierSpec};
use tokio::io::AsyncWriteExt;

#[test]
fn master_restart_keeps_namespace_and_data() {
    runtime().block_on(async {
        let mut cluster = MiniCluster::builder().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        fs.mkdir("/r/a/b", true).await.unwrap();
        let body = data(9 << 20, 1);
        fs.write_file("/r/a/big", &body).await.unwrap();
        fs.write_file("/r/a/small", b"small").await.unwrap();
        fs.rename("/r/a/small", "/r/a/b/moved").await.unwrap();
        fs.write_file("/r/gone", b"x").await.unwrap();
        fs.delete("/r/gone", false).await.unwrap();

        cluster.restart_master().await.unwrap();
        // the same client keeps working after the master comes back
        assert!(fs.read_file("/r/a/big").await.unwrap() == body);
        assert_eq!(fs.read_file("/r/a/b/moved").await.unwrap(), b"small");
        assert!(!fs.exists("/r/a/small").await.unwrap());
        assert!(!fs.exists("/r/gone").await.unwrap());
        fs.write_file("/r/after", b"after").await.unwrap();
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn local_clients_use_the_master_socket_and_fall_back_to_tcp() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder().start().await.unwrap();
        let conf = cluster.client_conf();
        let base = conf.master.local_socket.clone();
        let port: u16 = conf.client.master_addrs[0]
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap();
        let socket = local_socket_path(&base, port);
        assert!(socket.exists(), "MiniCluster serves {}", socket.display());

        // 127.0.0.2 is loopback, but the master listens on 127.0.0.1 only: just the
        // socket can carry these calls
        let mut via_socket = conf.clone();
        via_socket.client.master_addrs = vec![format!("127.0.0.2:{port}")];
        let fs = CurvineFs::connect(via_socket).await.unwrap();
        fs.mkdir("/sock/d", true).await.unwrap();
        fs.write_file("/sock/d/f", b"over the socket")
            .await
            .unwrap();
        assert_eq!(fs.read_file("/sock/d/f").await.unwrap(), b"over the socket");

        let unreachable = |c: ClusterConf| async move {
            let err = CurvineFs::connect(c).await.err().expect("no way in");
            assert!(
                matches!(err, FsError::Unavailable { .. } | FsError::Timeout { .. }),
                "{err}"
            );
        };
        // the same client with no socket configured has no way in
        let mut tcp_only = conf.clone();
        tcp_only.client.master_addrs = vec![format!("127.0.0.2:{port}")];
        tcp_only.master.local_socket = Default::default();
        unreachable(tcp_only).await;
        // a client for another local master (a port nothing listens on) with the same
        // local_socket setting does not end up at this master
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead = closed.local_addr().unwrap().to_string();
        drop(closed);
        let mut other = conf.clone();
        other.client.master_addrs = vec![dead];
        unreachable(other).await;

        // a socket path that is gone: TCP to the real master
        let mut missing = conf.clone();
        missing.master.local_socket = base.with_file_name("no-such.sock");
        let fs = CurvineFs::connect(missing).await.unwrap();
        assert_eq!(fs.read_file("/sock/d/f").await.unwrap(), b"over the socket");
        cluster.shutdown().await.unwrap();
        assert!(!socket.exists(), "a stopped master removes its socket");
    });
}

#[test]
fn master_refuses_a_socket_in_use_or_a_file_that_is_not_one() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder().start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("m.sock");
        for why in ["another running process", "not a socket"] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let path = local_socket_path(&base, listener.local_addr().unwrap().port());
            // what holds the path: a live socket (served by this test) or a plain file
            let _live = if why == "not a socket" {
                std::fs::write(&path, b"keep me").unwrap();
                None
            } else {
                Some(std::os::unix::net::UnixListener::bind(&path).unwrap())
            };
            let mut conf = cluster.client_conf();
            conf.master.meta_dir = dir.path().join("meta");
            conf.master.local_socket = base.clone();
            let cancel = tokio_util::sync::CancellationToken::new();
            let err = curvine_server::master::run(conf, listener, cancel)
                .await
                .expect_err("the master must not start");
            let msg = err.to_string();
            assert!(
                msg.contains(why) && msg.contains(&*path.to_string_lossy()),
                "{msg}"
            );
            assert!(
                path.exists(),
                "the refused master left {} alone",
                path.display()
            );
            if why == "not a socket" {
                assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
            }
        }
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn worker_restart_rereports_blocks() {
    runtime().block_on(async {
        let mut cluster = MiniCluster::builder().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(10 << 20, 2);
        fs.write_file("/w/f", &body).await.unwrap();
        cluster.restart_worker(0).await.unwrap();
        assert!(fs.read_file("/w/f").await.unwrap() == body);
        let r = cluster.report().await.unwrap();
        let blocks: u64 = r.workers[0].tiers.iter().map(|t| t.blocks).sum();
        assert!(blocks >= 2, "blocks re-reported: {blocks}");
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn corrupted_block_byte_is_detected() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(300_000, 3);
        fs.write_file("/c/f", &body).await.unwrap();
        let files: Vec<_> = block_files(&cluster, 0).into_values().collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let mut bytes = std::fs::read(&files[0]).unwrap();
        bytes[200_000] ^= 0x40;
        std::fs::write(&files[0], &bytes).unwrap();
        for short_circuit in [true, false] {
            let mut conf = cluster.client_conf();
            conf.client.short_circuit = short_circuit;
            let fs = CurvineFs::connect(conf).await.unwrap();
            let e = fs.read_file("/c/f").await.unwrap_err();
            match e {
                FsError::ChecksumMismatch {
                    block_id, worker, ..
                } => {
                    assert_ne!(block_id, 0);
                    assert!(!worker.is_empty());
                }
                other => panic!(
                    "short_circuit={short_circuit}: expected a checksum error, got {other:?}"
                ),
            }
        }
        cluster.shutdown().await.unwrap();
    });
}

/// A MEM tier on tmpfs over an SSD tier on disk, of the given capacities.
fn mem_and_ssd(mem: u64, ssd: u64) -> Vec<TierSpec> {
    vec![
        TierSpec {
            tier: "MEM",
            capacity: mem,
            tmpfs: true,
        },
        TierSpec {
            tier: "SSD",
            capacity: ssd,
            tmpfs: false,
        },
    ]
}

#[test]
fn full_tier_demotes_to_the_next() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder()
            .tiers(mem_and_ssd(24 << 20, 512 << 20))
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let mut bodies = Vec::new();
        for i in 0..8 {
            let body = data(6 << 20, 10 + i);
            let opts = CreateOptions {
                overwrite: true,
                storage_tier: StorageTier::Mem,
                ..Default::default()
            };
            let mut w = fs.create_with(&format!("/t/f{i}"), opts).await.unwrap();
            w.write(&body).await.unwrap();
            w.close().await.unwrap();
            bodies.push(body);
        }
        wait_until(Duration::from_secs(10), || async {
            let r = cluster.report().await.unwrap();
            let tiers = &r.workers[0].tiers;
            let mem = tiers
                .iter()
                .find(|t| t.tier == StorageTier::Mem as i32)
                .unwrap();
            let ssd = tiers
                .iter()
                .find(|t| t.tier == StorageTier::Ssd as i32)
                .unwrap();
            mem.used <= mem.capacity && ssd.used > 0
        })
        .await
        .unwrap();
        for (i, body) in bodies.iter().enumerate() {
            assert!(fs.read_file(&format!("/t/f{i}")).await.unwrap() == *body);
        }
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn deleted_blocks_make_room_before_anything_is_demoted() {
    // Overwriting files that fill most of the MEM tier: the old blocks are freed only
    // when a heartbeat brings their deletion. With heartbeats far apart, the worker must
    // ask for one rather than push live blocks down to SSD.
    runtime().block_on(async {
        let cluster = MiniCluster::builder()
            .tiers(mem_and_ssd(24 << 20, 512 << 20))
            .conf(|c| {
                // no heartbeat unless the worker asks for one
                c.worker.heartbeat_interval = curvine_common::conf::Dur(Duration::from_secs(600));
                c.master.worker_lost_timeout = curvine_common::conf::Dur(Duration::from_secs(1200));
            })
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let opts = CreateOptions {
            overwrite: true,
            storage_tier: StorageTier::Mem,
            ..Default::default()
        };
        let dirs = cluster.worker_dirs(0);
        let blocks_in = |dir: &std::path::Path| {
            let mut v = Vec::new();
            common::files_under(&dir.join("blocks"), &mut v);
            v.iter().filter(|p| p.extension().is_none()).count()
        };
        for round in 0..3u64 {
            for i in 0..3u64 {
                let mut w = fs
                    .create_with(&format!("/o/f{i}"), opts.clone())
                    .await
                    .unwrap();
                w.write(&data(6 << 20, round * 10 + i)).await.unwrap();
                w.close().await.unwrap();
            }
            assert_eq!(blocks_in(&dirs[1]), 0, "round {round}: a block went to SSD");
        }
        assert_eq!(blocks_in(&dirs[0]), 3);
        for i in 0..3u64 {
            assert!(fs.read_file(&format!("/o/f{i}")).await.unwrap() == data(6 << 20, 20 + i));
        }
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn all_tiers_full_is_a_clean_error() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder()
            .tiers(mem_and_ssd(8 << 20, 16 << 20))
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let keep = data(1 << 20, 5);
        fs.write_file("/full/keep", &keep).await.unwrap();
        let big = data(40 << 20, 6);
        let e = fs.write_file("/full/big", &big).await.unwrap_err();
        assert!(matches!(e, FsError::NoSpace { .. }), "{e:?}");
        // no partial file is visible, earlier data is intact, staging is clean
        assert!(!fs.exists("/full/big").await.unwrap());
        assert!(fs.read_file("/full/keep").await.unwrap() == keep);
        wait_until(Duration::from_secs(10), || async {
            staging_files(&cluster, 0).is_empty()
        })
        .await
        .unwrap();
        // space freed by deletion is usable again
        fs.write_file("/full/again", &data(4 << 20, 7))
            .await
            .unwrap();
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn client_killed_mid_write_leaves_nothing() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder().start().await.unwrap();
        let conf = cluster.client_conf();
        // A client on its own runtime, dropped mid-write like a killed process.
        let conf2 = conf.clone();
        std::thread::spawn(move || {
            let rt = runtime();
            rt.block_on(async {
                let fs = CurvineFs::connect(conf2).await.unwrap();
                let mut w = fs.create("/k/partial", true).await.unwrap();
                w.write(&data(9 << 20, 8)).await.unwrap();
                // no close: the writer, its runtime and every connection go away
                drop(w);
            });
            drop(rt);
        })
        .join()
        .unwrap();
        let fs = CurvineFs::connect(conf).await.unwrap();
        wait_until(Duration::from_secs(30), || async {
            !fs.exists("/k/partial").await.unwrap_or(true)
        })
        .await
        .unwrap();
        wait_until(Duration::from_secs(10), || async {
            staging_files(&cluster, 0).is_empty()
        })
        .await
        .unwrap();
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn garbage_bytes_do_not_hurt_servers() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        fs.write_file("/g/before", b"before").await.unwrap();
        let junk = data(100_000, 99);
        for addr in [cluster.master_addr(), cluster.worker_addr(0)] {
            for prefix in [
                &b"\xff\xff\xff\xff"[..],
                b"\x00\x00\x00\x08\x00\x00\x00\x04",
                b"GET / HTTP/1.1\r\n\r\n",
                // the framed transport: a bad version, then bad frames after a good hello
                b"CVMR\x07",
                b"CVMR\x01\x00\x00",
                b"CVMR\x01\x00\x00\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff",
            ] {
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                let _ = s.write_all(prefix).await;
                let _ = s.write_all(&junk).await;
                drop(s);
            }
        }
        assert_eq!(fs.read_file("/g/before").await.unwrap(), b"before");
        fs.write_file("/g/after", &data(1 << 20, 4)).await.unwrap();
        cluster.shutdown().await.unwrap();
    });
}

/// One client's metadata operation in the kill -9 load.
#[derive(Clone, Debug)]
enum MetaOp {
    Mkdir(String),
    /// create + close of an empty file
    Create(String),
    /// rename of an earlier own file to a new name
    Rename(String, String),
    /// delete of an earlier own file
    Delete(String),
}

/// What a client saw: its acknowledged ops in order, and the op that failed (in flight
/// at the kill, so it may or may not have been applied).
#[derive(Debug, Default)]
struct ClientLog {
    acked: Vec<MetaOp>,
    in_flight: Option<MetaOp>,
}

async fn apply_op(fs: &CurvineFs, op: &MetaOp) -> curvine_common::FsResult<()> {
    match op {
        MetaOp::Mkdir(p) => fs.mkdir(p, false).await.map(|_| ()),
        MetaOp::Create(p) => fs.create(p, false).await?.close().await.map(|_| ()),
        MetaOp::Rename(s, d) => fs.rename(s, d).await,
        MetaOp::Delete(p) => fs.delete(p, false).await,
    }
}

/// Run mixed metadata ops in `/k9/t{t}` until one fails; `acked` counts successes of all.
async fn k9_client(
    fs: CurvineFs,
    t: usize,
    acked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> ClientLog {
    let mut log = ClientLog::default();
    let mut live: std::collections::VecDeque<String> = Default::default();
    for i in 0.. {
        let p = |k: &str| format!("/k9/t{t}/{k}{i}");
        let op = match (i % 4, live.len()) {
            (0, _) => MetaOp::Mkdir(p("d")),
            (2, n) if n > 1 => MetaOp::Rename(live[0].clone(), p("r")),
            (3, n) if n > 1 => MetaOp::Delete(live[0].clone()),
            _ => MetaOp::Create(p("f")),
        };
        if let Err(e) = apply_op(&fs, &op).await {
            log.in_flight = Some(op);
            if !matches!(e, FsError::Unavailable { .. } | FsError::Timeout { .. }) {
                eprintln!("client {t}: op failed with {e}");
            }
            return log;
        }
        match &op {
            MetaOp::Create(p) => live.push_back(p.clone()),
            MetaOp::Rename(_, d) => {
                live.pop_front();
                live.push_back(d.clone());
            }
            MetaOp::Delete(_) => {
                live.pop_front();
            }
            MetaOp::Mkdir(_) => {}
        }
        log.acked.push(op);
        acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    log
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Absent,
    Dir,
    File,
    /// a file still under construction
    OpenFile,
}

async fn seen(fs: &CurvineFs, p: &str) -> Seen {
    match fs.stat(p).await {
        Ok(st) if st.file_type == curvine_common::proto::FileType::Dir as i32 => Seen::Dir,
        Ok(st) if st.complete => Seen::File,
        Ok(_) => Seen::OpenFile,
        Err(FsError::NotFound { .. }) => Seen::Absent,
        Err(e) => panic!("stat {p}: {e}"),
    }
}

/// kill -9 the master process during a metadata load of 32 clients (separate
/// connections) mixing mkdir, create+close, rename and delete; after restart every
/// acknowledged op's effect is present and the op in flight at the kill is all or nothing.
#[test]
fn master_kill9_keeps_acknowledged_mutations() {
    kill9_under_load(true, false);
}

/// The same for clients that take acknowledgements before the sync, as a FUSE mount
/// does (`deferring_sync`): the WAL record is written before the reply.
#[test]
fn master_kill9_keeps_mutations_acknowledged_before_their_sync() {
    kill9_under_load(true, true);
}

/// The same with `journal.sync = false`: a mutation is acknowledged once its WAL record
/// is written (not synced), which a process kill cannot undo.
#[test]
fn master_kill9_keeps_acknowledged_mutations_without_journal_sync() {
    kill9_under_load(false, false);
}

fn kill9_under_load(journal_sync: bool, defer_sync: bool) {
    const CLIENTS: usize = 32;
    const ACKED_BEFORE_KILL: usize = 1500;
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let conf_path = dir.path().join("conf.toml");
    let mut f = std::fs::File::create(&conf_path).unwrap();
    write!(
        f,
        "[master]\nhostname = \"127.0.0.1\"\nrpc_port = {port}\nweb_port = 0\nmeta_dir = \"{}\"\n\
         lease_timeout = \"2s\"\nlocal_socket = \"{}\"\n\
         [client]\nmaster_addrs = [\"127.0.0.1:{port}\"]\nrpc_timeout = \"5s\"\nrpc_retries = 1\n\
         [journal]\nsync = {journal_sync}\n\
         [log]\nlevel = \"warn\"\n",
        dir.path().join("meta").display(),
        // one run over TCP, one over the socket (which SIGKILL leaves behind, stale)
        if journal_sync {
            String::new()
        } else {
            dir.path().join("master.sock").display().to_string()
        }
    )
    .unwrap();
    drop(f);
    let start = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_curvine-server"))
            .args(["master", "--conf"])
            .arg(&conf_path)
            .spawn()
            .unwrap()
    };
    let rt = runtime();
    let mut child = start();
    let conf = curvine_common::ClusterConf::load(&conf_path).unwrap();
    let logs = rt.block_on(async {
        let fs = wait_connect(&conf).await;
        for t in 0..CLIENTS {
            fs.mkdir(&format!("/k9/t{t}"), true).await.unwrap();
        }
        let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for t in 0..CLIENTS {
            let fs = CurvineFs::connect(conf.clone()).await.unwrap();
            let fs = fs.deferring_sync(defer_sync);
            tasks.push(tokio::spawn(k9_client(fs, t, acked.clone())));
        }
        // let work get acknowledged by every client, then kill -9 mid-load
        wait_until(Duration::from_secs(30), || async {
            acked.load(std::sync::atomic::Ordering::Relaxed) >= ACKED_BEFORE_KILL
        })
        .await
        .unwrap();
        child.kill().unwrap(); // SIGKILL
        let _ = child.wait();
        let mut logs = Vec::new();
        for t in tasks {
            logs.push(t.await.unwrap());
        }
        logs
    });
    let acked: usize = logs.iter().map(|l| l.acked.len()).sum();
    assert!(acked >= ACKED_BEFORE_KILL, "{acked}");
    let mut child = start();
    let mut findings: std::collections::BTreeMap<String, usize> = Default::default();
    rt.block_on(async {
        let fs = wait_connect(&conf).await;
        for (t, log) in logs.iter().enumerate() {
            // the state the acknowledged ops leave, path by path
            let mut model: std::collections::HashMap<&str, Seen> = Default::default();
            for op in &log.acked {
                match op {
                    MetaOp::Mkdir(p) => model.insert(p.as_str(), Seen::Dir),
                    MetaOp::Create(p) => model.insert(p.as_str(), Seen::File),
                    MetaOp::Rename(s, d) => {
                        model.insert(s.as_str(), Seen::Absent);
                        model.insert(d.as_str(), Seen::File)
                    }
                    MetaOp::Delete(p) => model.insert(p.as_str(), Seen::Absent),
                };
            }
            let touched: Vec<&str> = match &log.in_flight {
                Some(MetaOp::Rename(s, d)) => vec![s.as_str(), d.as_str()],
                Some(MetaOp::Mkdir(p) | MetaOp::Create(p) | MetaOp::Delete(p)) => vec![p.as_str()],
                None => vec![],
            };
            for (p, want) in &model {
                if !touched.contains(p) {
                    let got = seen(&fs, p).await;
                    assert_eq!(got, *want, "client {t}: acknowledged state of {p} lost");
                }
            }
            let Some(op) = &log.in_flight else {
                panic!("client {t} saw no error at the kill");
            };
            let finding = match op {
                MetaOp::Mkdir(p) => match seen(&fs, p).await {
                    Seen::Absent => "mkdir: not applied",
                    Seen::Dir => "mkdir: applied",
                    other => panic!("{p}: in-flight mkdir left {other:?}"),
                },
                MetaOp::Create(p) => match seen(&fs, p).await {
                    Seen::Absent => "create: not applied",
                    Seen::File => "create: applied and closed",
                    Seen::OpenFile => {
                        // created but not closed: the restarted master hands out a fresh
                        // lease, which expires and removes the partial file
                        wait_until(Duration::from_secs(10), || async {
                            seen(&fs, p).await == Seen::Absent
                        })
                        .await
                        .unwrap_or_else(|_| panic!("{p}: open file never expired"));
                        "create: open at the kill, removed by lease expiry"
                    }
                    Seen::Dir => panic!("{p}: in-flight create left a directory"),
                },
                MetaOp::Rename(s, d) => match (seen(&fs, s).await, seen(&fs, d).await) {
                    (Seen::File, Seen::Absent) => "rename: not applied",
                    (Seen::Absent, Seen::File) => "rename: applied",
                    other => panic!("{s} -> {d}: in-flight rename left {other:?}"),
                },
                MetaOp::Delete(p) => match seen(&fs, p).await {
                    Seen::File => "delete: not applied",
                    Seen::Absent => "delete: applied",
                    other => panic!("{p}: in-flight delete left {other:?}"),
                },
            };
            *findings.entry(finding.to_string()).or_default() += 1;
        }
    });
    child.kill().unwrap();
    let _ = child.wait();
    eprintln!(
        "kill -9 under {CLIENTS} clients (journal sync {journal_sync}): {acked} acknowledged ops all present; in flight at \
         the kill: {findings:?}; {:?} in all",
        started.elapsed()
    );
}

async fn wait_connect(conf: &curvine_common::ClusterConf) -> CurvineFs {
    let mut last = None;
    for _ in 0..200 {
        match CurvineFs::connect(conf.clone()).await {
            Ok(fs) => match fs.exists("/").await {
                Ok(_) => return fs,
                Err(e) => last = Some(e),
            },
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("master did not come up: {last:?}");
}

/// A master and a worker as real processes on fresh ports and dirs.
struct Procs {
    dir: tempfile::TempDir,
    conf_path: std::path::PathBuf,
    conf: curvine_common::ClusterConf,
    /// `--set` arguments of every process.
    sets: Vec<String>,
}

impl Procs {
    fn new() -> Procs {
        Self::with(&[])
    }

    /// [`new`](Self::new), with `sets` (`section.key=value`) over the file, as
    /// `curvine-server --set` takes them.
    fn with(sets: &[&str]) -> Procs {
        let dir = tempfile::tempdir().unwrap();
        let free_port = || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let (mport, wport) = (free_port(), free_port());
        let conf_path = dir.path().join("conf.toml");
        let text = format!(
            "[master]\nhostname = \"127.0.0.1\"\nrpc_port = {mport}\nweb_port = 0\nmeta_dir = \"{meta}\"\n\
             block_size = \"8MB\"\nlease_timeout = \"2s\"\nworker_lost_timeout = \"3s\"\n\
             [worker]\nhostname = \"127.0.0.1\"\ndata_port = {wport}\nweb_port = 0\n\
             data_dir = [\"[SSD:1GB]{data}\"]\nheartbeat_interval = \"200ms\"\n\
             [client]\nhostname = \"127.0.0.1\"\nmaster_addrs = [\"127.0.0.1:{mport}\"]\n\
             rpc_timeout = \"3s\"\nconnect_timeout = \"1s\"\nrpc_retries = 1\n\
             short_circuit = false\n\
             [log]\nlevel = \"warn\"\n",
            meta = dir.path().join("meta").display(),
            data = dir.path().join("ssd").display(),
        );
        std::fs::write(&conf_path, text).unwrap();
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let conf = curvine_common::ClusterConf::load_with(&conf_path, &sets).unwrap();
        Procs {
            dir,
            conf_path,
            conf,
            sets,
        }
    }

    fn spawn(&self, role: &str) -> std::process::Child {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_curvine-server"));
        cmd.args([role, "--conf"]).arg(&self.conf_path);
        for s in &self.sets {
            cmd.args(["--set", s]);
        }
        cmd.spawn().unwrap()
    }

    fn staging_files(&self) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        common::files_under(&self.dir.path().join("ssd").join("staging"), &mut out);
        out
    }
}

#[allow(unsafe_code)]
fn sigterm(child: &std::process::Child) {
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(r, 0, "kill(SIGTERM)");
}

/// Wait for `child` to exit; it must exit with status 0 within `within`.
async fn exits_cleanly(child: &mut std::process::Child, within: Duration, what: &str) {
    let t = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "{what} exited with {st}");
            return;
        }
        if t.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {within:?} of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn live_workers(fs: &CurvineFs) -> usize {
    match fs.report().await {
        Ok(r) => r.workers.iter().filter(|w| w.alive).count(),
        Err(_) => 0,
    }
}

/// SIGTERM the worker during a streamed write and the master during metadata calls:
/// every call ends (success or a clean error) within the rpc timeout, both processes
/// exit 0, no staging file is left, and all acknowledged data reads back.
#[test]
fn sigterm_drains_master_and_worker() {
    let rt = runtime();
    let p = Procs::new();
    let rpc_timeout = p.conf.client.rpc_timeout.get();
    let bound = rpc_timeout + Duration::from_secs(2);
    let mut master = p.spawn("master");
    let mut worker = p.spawn("worker");
    rt.block_on(async {
        let fs = wait_connect(&p.conf).await;
        wait_until(Duration::from_secs(20), || async {
            live_workers(&fs).await == 1
        })
        .await
        .unwrap();

        // 1. SIGTERM the worker while a client streams files through it
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, u64)>();
        let writer = {
            let fs = fs.clone();
            tokio::spawn(async move {
                for i in 0u64.. {
                    let path = format!("/gs/f{i}");
                    let body = data(4 << 20, 100 + i);
                    let res = async {
                        let mut w = fs.create(&path, true).await?;
                        for piece in body.chunks(256 << 10) {
                            let t = std::time::Instant::now();
                            w.write(piece).await?;
                            assert!(t.elapsed() < bound, "write hung {:?}", t.elapsed());
                        }
                        let t = std::time::Instant::now();
                        w.close().await?;
                        assert!(t.elapsed() < bound, "close hung {:?}", t.elapsed());
                        Ok::<_, FsError>(())
                    }
                    .await;
                    match res {
                        Ok(()) => {
                            let _ = tx.send((path, 100 + i));
                        }
                        Err(e) => return e,
                    }
                }
                unreachable!()
            })
        };
        let mut acked_files = Vec::new();
        while acked_files.len() < 3 {
            acked_files.push(rx.recv().await.expect("writer stopped early"));
        }
        sigterm(&worker);
        let e = tokio::time::timeout(bound + Duration::from_secs(5), writer)
            .await
            .expect("the write in flight at SIGTERM hung")
            .unwrap();
        eprintln!("write in flight at the worker's SIGTERM failed with: {e}");
        while let Ok(f) = rx.try_recv() {
            acked_files.push(f);
        }
        exits_cleanly(&mut worker, Duration::from_secs(15), "worker").await;
        // the aborted write's staging file went away with the graceful stop
        assert!(p.staging_files().is_empty(), "{:?}", p.staging_files());

        worker = p.spawn("worker");
        wait_until(Duration::from_secs(20), || async {
            fs.write_file("/gs/probe", b"probe").await.is_ok()
        })
        .await
        .unwrap();

        // 2. SIGTERM the master while 8 clients make metadata calls
        let acked_dirs = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let mut tasks = Vec::new();
        for t in 0..8 {
            let fs = CurvineFs::connect(p.conf.clone()).await.unwrap();
            let acked = acked_dirs.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0.. {
                    let d = format!("/gs/m{t}-{i}");
                    let c = std::time::Instant::now();
                    let r = fs.mkdir(&d, false).await;
                    assert!(c.elapsed() < bound, "mkdir hung {:?}", c.elapsed());
                    if r.is_err() {
                        return;
                    }
                    acked.lock().unwrap().push(d.clone());
                    let c = std::time::Instant::now();
                    let r = fs.stat(&d).await;
                    assert!(c.elapsed() < bound, "stat hung {:?}", c.elapsed());
                    if r.is_err() {
                        return;
                    }
                }
            }));
        }
        wait_until(Duration::from_secs(20), || async {
            acked_dirs.lock().unwrap().len() >= 200
        })
        .await
        .unwrap();
        sigterm(&master);
        for t in tasks {
            tokio::time::timeout(bound + Duration::from_secs(5), t)
                .await
                .expect("a metadata client hung after the master's SIGTERM")
                .unwrap();
        }
        exits_cleanly(&mut master, Duration::from_secs(15), "master").await;

        // 3. restart: every acknowledged mutation and byte is there
        master = p.spawn("master");
        let fs = wait_connect(&p.conf).await;
        wait_until(Duration::from_secs(20), || async {
            live_workers(&fs).await == 1
        })
        .await
        .unwrap();
        let dirs = acked_dirs.lock().unwrap().clone();
        for d in &dirs {
            let st = fs.stat(d).await.unwrap_or_else(|e| panic!("{d} lost: {e}"));
            assert_eq!(st.file_type, curvine_common::proto::FileType::Dir as i32);
        }
        for (path, seed) in &acked_files {
            assert!(
                fs.read_file(path).await.unwrap() == data(4 << 20, *seed),
                "{path}"
            );
        }
        assert!(p.staging_files().is_empty(), "{:?}", p.staging_files());
        eprintln!(
            "graceful shutdown: {} files and {} dirs acknowledged, all present after restart",
            acked_files.len(),
            dirs.len()
        );
        sigterm(&worker);
        sigterm(&master);
        exits_cleanly(&mut worker, Duration::from_secs(15), "worker").await;
        exits_cleanly(&mut master, Duration::from_secs(15), "master").await;
    });
}

/// `log.format = "json"` with `log.dir`: the master process writes `master.log`, one
/// JSON object per line.
#[test]
fn master_writes_json_log_lines_to_its_log_dir() {
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let logs = dir.path().join("logs");
    let conf_path = dir.path().join("conf.toml");
    std::fs::write(
        &conf_path,
        format!(
            "[master]\nhostname = \"127.0.0.1\"\nrpc_port = {port}\nweb_port = 0\nmeta_dir = \"{}\"\n\
             [client]\nmaster_addrs = [\"127.0.0.1:{port}\"]\n\
             [log]\nlevel = \"info\"\nformat = \"json\"\ndir = \"{}\"\n",
            dir.path().join("meta").display(),
            logs.display()
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_curvine-server"))
        .args(["master", "--conf"])
        .arg(&conf_path)
        .spawn()
        .unwrap();
    let conf = curvine_common::ClusterConf::load(&conf_path).unwrap();
    runtime().block_on(async {
        let fs = wait_connect(&conf).await;
        fs.mkdir("/logged", false).await.unwrap();
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(logs.join("master.log")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!lines.is_empty(), "no log lines");
    for l in &lines {
        assert!(
            l["level"].is_string() && l["timestamp"].is_string() && l["fields"].is_object(),
            "{l}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "INFO" && l["fields"]["message"].is_string()),
        "{text}"
    );
}
