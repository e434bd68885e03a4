//! Snapshots of replicated masters (`master.snapshot_entries`): the log is compacted
//! behind a snapshot, a master with an empty data directory or one too far behind
//! catches up by snapshot while a client goes on writing, every master restarted still
//! has the whole namespace, and snapshot chunks that are not sound are refused.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use curvine_client::CurvineFs;
use curvine_common::proto::raft_service_client::RaftServiceClient;
use curvine_common::proto::RaftRequest;
use curvine_common::FsError;
use curvine_server::testing::ha::HaCluster;

const WAIT: Duration = Duration::from_secs(60);
/// A snapshot every this many entries: small, so a few hundred mutations compact the log
/// several times over.
const SNAPSHOT_ENTRIES: u64 = 20;

async fn start() -> HaCluster {
    HaCluster::start_with(3, |c| c.master.snapshot_entries = SNAPSHOT_ENTRIES)
        .await
        .unwrap()
}

/// The index of the master that accepts a mutation (the leader), once one does.
async fn leader(c: &HaCluster) -> usize {
    common::ha::leader(c, WAIT).await
}

/// Wait until master `i` has every path of `paths` and none of `gone`.
async fn has_all(c: &HaCluster, i: usize, paths: &[String], gone: &[String]) {
    common::ha::has_all(c, i, paths, gone, WAIT).await
}

/// Acknowledged changes: paths that must exist and paths that must not.
#[derive(Default)]
struct Ledger {
    present: Vec<String>,
    gone: Vec<String>,
}

impl Ledger {
    /// `n` mutations under `dir` (made already): mkdirs, some renamed, some deleted.
    async fn mutate(&mut self, fs: &CurvineFs, dir: &str, n: usize) {
        for k in 0..n {
            let d = format!("{dir}/d{k}");
            fs.mkdir(&d, false).await.unwrap();
            match k % 4 {
                0 => {
                    let to = format!("{dir}/r{k}");
                    fs.rename(&d, &to).await.unwrap();
                    self.gone.push(d);
                    self.present.push(to);
                }
                1 => {
                    fs.delete(&d, false).await.unwrap();
                    self.gone.push(d);
                }
                _ => self.present.push(d),
            }
        }
    }
}

/// A client making mutations until told to stop; what it had acknowledged.
fn background_writer(fs: CurvineFs, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Ledger> {
    tokio::spawn(async move {
        let mut l = Ledger::default();
        fs.mkdir("/bg", false).await.unwrap();
        l.present.push("/bg".into());
        let mut k = 0;
        while !stop.load(Ordering::Relaxed) {
            let d = format!("/bg/d{k}");
            // an error leaves the outcome unknown: such a path is checked neither way
            if fs.mkdir(&d, false).await.is_ok() {
                if k % 3 == 0 && fs.delete(&d, false).await.is_ok() {
                    l.gone.push(d);
                } else if k % 3 != 0 {
                    l.present.push(d);
                }
            }
            k += 1;
        }
        assert!(k > 0);
        l
    })
}

/// Stop leaders until master `want` is elected (each election among the other two
/// running masters is a coin toss).
async fn make_leader(c: &mut HaCluster, want: usize) {
    for _ in 0..30 {
        let l = leader(c).await;
        if l == want {
            return;
        }
        c.stop(l).await.unwrap();
        leader(c).await;
        c.start_again(l).await.unwrap();
    }
    panic!("master {want} never became leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_with_an_empty_data_dir_joins_by_snapshot_under_load() {
    let mut c = start().await;
    let first = leader(&c).await;
    let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
    let mut ledger = Ledger::default();
    fs.mkdir("/a", false).await.unwrap();
    ledger.present.push("/a".into());
    ledger.mutate(&fs, "/a", 40).await;

    // a follower loses its data; the log moves on past what the leader keeps
    let new = (first + 1) % 3;
    c.stop(new).await.unwrap();
    c.wipe(new).unwrap();
    fs.mkdir("/b", false).await.unwrap();
    ledger.present.push("/b".into());
    ledger.mutate(&fs, "/b", 60).await;

    // it comes back empty while a client goes on writing
    let stop = Arc::new(AtomicBool::new(false));
    let bg = background_writer(
        CurvineFs::connect(c.client_conf()).await.unwrap(),
        stop.clone(),
    );
    c.start_again(new).await.unwrap();
    has_all(&c, new, &ledger.present, &ledger.gone).await;
    stop.store(true, Ordering::Relaxed);
    let more = bg.await.unwrap();
    has_all(&c, new, &more.present, &more.gone).await;

    // it got there through a snapshot: the start of the log never reached it
    c.stop(new).await.unwrap();
    let st = c.stored_raft(new).unwrap();
    assert!(st.installed.is_some(), "no snapshot installed: {st:?}");
    assert!(st.first_log.is_none_or(|f| f > 1), "{st:?}");
    c.start_again(new).await.unwrap();

    // it can lead, and serves every acknowledged change
    make_leader(&mut c, new).await;
    has_all(&c, new, &ledger.present, &ledger.gone).await;
    has_all(&c, new, &more.present, &more.gone).await;
    let nfs = CurvineFs::connect(c.conf_of(new)).await.unwrap();
    nfs.mkdir("/a/after", false).await.unwrap();
    let back = (new + 1) % 3;
    has_all(&c, back, &["/a/after".to_string()], &[]).await;
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_log_is_compacted_and_every_master_restarts_with_the_namespace() {
    let mut c = start().await;
    leader(&c).await;
    let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
    let mut ledger = Ledger::default();
    fs.mkdir("/c", false).await.unwrap();
    ledger.present.push("/c".into());
    ledger.mutate(&fs, "/c", 80).await;
    for i in 0..3 {
        has_all(&c, i, &ledger.present, &ledger.gone).await;
    }
    for i in 0..3 {
        c.stop(i).await.unwrap();
    }
    for i in 0..3 {
        let st = c.stored_raft(i).unwrap();
        // 160 entries or so: the early ones are gone, behind a snapshot
        assert!(st.purged.is_some() && st.snapshot.is_some(), "{i}: {st:?}");
        assert!(st.first_log.is_some_and(|f| f > 10), "{i}: {st:?}");
        assert!(
            st.last_log.unwrap() - st.first_log.unwrap() < 3 * SNAPSHOT_ENTRIES,
            "{i}: {st:?}"
        );
    }
    for i in 0..3 {
        c.start_again(i).await.unwrap();
    }
    leader(&c).await;
    for i in 0..3 {
        has_all(&c, i, &ledger.present, &ledger.gone).await;
    }
    fs.mkdir("/c/again", false).await.unwrap();
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_behind_the_compacted_log_catches_up_by_snapshot() {
    let mut c = start().await;
    let first = leader(&c).await;
    let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
    let mut ledger = Ledger::default();
    fs.mkdir("/e", false).await.unwrap();
    ledger.present.push("/e".into());
    let stale = (first + 2) % 3;
    has_all(&c, stale, &ledger.present, &[]).await;
    c.stop(stale).await.unwrap();
    let before = c.stored_raft(stale).unwrap();
    ledger.mutate(&fs, "/e", 60).await;
    c.start_again(stale).await.unwrap();
    has_all(&c, stale, &ledger.present, &ledger.gone).await;
    c.stop(stale).await.unwrap();
    let st = c.stored_raft(stale).unwrap();
    assert!(
        st.installed
            .is_some_and(|i| i > before.last_log.unwrap_or(0)),
        "{before:?} then {st:?}"
    );
    c.start_again(stale).await.unwrap();
    has_all(&c, stale, &ledger.present, &ledger.gone).await;
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshot_chunks_out_of_order_or_not_sound_are_refused() {
    let c = start().await;
    let first = leader(&c).await;
    let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
    fs.mkdir("/kept", false).await.unwrap();
    let target = (first + 1) % 3;
    has_all(&c, target, &["/kept".to_string()], &[]).await;
    let ours = curvine_server::master::group_id(&c.client_conf());
    let mut client = RaftServiceClient::connect(format!("http://{}", c.addr(target)))
        .await
        .unwrap();
    // WSnapChunk: vote (1: term, 2: node, 3: committed), id, offset, data, done
    let chunk = |id: &str, offset: u64, data: &[u8], done: bool| {
        let mut b = vec![0x0a, 0x06, 0x08, 0xff, 0xff, 0x03, 0x10, 0x01];
        b.extend([0x12, id.len() as u8]);
        b.extend(id.as_bytes());
        b.extend([0x18, offset as u8]);
        b.extend([0x22, data.len() as u8]);
        b.extend(data);
        b.extend([0x28, done as u8]);
        RaftRequest {
            cluster_id: ours.clone(),
            from: 9,
            kind: 3,
            body: b,
        }
    };
    let refused = |r: Result<tonic::Response<_>, tonic::Status>, what: &str| match r {
        Err(s) => assert_eq!(
            FsError::from(s).code(),
            curvine_common::ErrorCode::Protocol,
            "{what}"
        ),
        Ok(_) => panic!("{what}: accepted"),
    };
    // a chunk that does not start a snapshot
    refused(
        client.call(chunk("9-1-1-1", 5, b"abc", false)).await,
        "a chunk at offset 5 first",
    );
    // a whole "snapshot" of garbage, and one cut short of a real header
    refused(
        client.call(chunk("9-1-1-2", 0, b"garbage!", true)).await,
        "garbage",
    );
    client
        .call(chunk("9-1-1-3", 0, b"CVSNAP01", false))
        .await
        .unwrap();
    refused(
        client.call(chunk("9-1-1-3", 8, b"\x05\x00", true)).await,
        "a cut file",
    );
    // a name that is no snapshot id of ours
    refused(
        client.call(chunk("../x", 0, b"x", true)).await,
        "a path as id",
    );
    // nothing changed there, and the group goes on
    has_all(&c, target, &["/kept".to_string()], &[]).await;
    fs.mkdir("/still", false).await.unwrap();
    has_all(&c, target, &["/still".to_string()], &[]).await;
    c.shutdown().await.unwrap();
}
