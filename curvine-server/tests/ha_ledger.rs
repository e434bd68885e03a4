//! Replicated masters under load, with a master stopped in the middle: 32 clients make
//! mkdirs, creates (metadata only: the group has no workers), renames, deletes and
//! chmods, each keeping a ledger of what was acknowledged and what failed. Afterwards
//! the namespace on the leader must hold every acknowledged change exactly once (a
//! renamed entry at its new name only, a deleted one gone, a mode as last set), and an
//! operation that failed must be applied wholly or not at all. Every name is new, so a
//! retry applied twice shows as an error (`AlreadyExists`, `NotFound`), which fails the
//! test: with request ids and the retry cache, a retried mutation gets its first reply.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use curvine_client::{CurvineFs, FileType, FsError, SetAttr};
use curvine_server::testing::ha::HaCluster;
use curvine_server::testing::wait_until;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
const CLIENTS: usize = 32;
/// Acknowledged operations (all clients) before the fault, and again after it.
const OPS_BEFORE: u64 = 300;
const OPS_AFTER: u64 = 300;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
}

/// What a client knows of an entry of its directory.
#[derive(Clone, Debug)]
struct Known {
    kind: Kind,
    mode: u32,
}

/// An operation whose outcome the client does not know: it must be applied wholly or
/// not at all.
#[derive(Debug)]
enum Unknown {
    /// `name` exists as `kind` (with any mode) or not at all.
    Made(String, Kind),
    /// Exactly one of `from`, `to` exists, as `kind`.
    Renamed(String, String, Kind),
    /// `name` exists as `kind` or not.
    Deleted(String, Kind),
    /// `name` exists as `kind` with mode `old` or `new`.
    Chmod(String, Kind, u32, u32),
}

#[derive(Default, Debug)]
struct Ledger {
    known: BTreeMap<String, Known>,
    unknown: Vec<Unknown>,
    acked: u64,
    /// Errors that no retry of an acknowledged-once operation may give.
    wrong: Vec<String>,
}

fn is_unknown(e: &FsError) -> bool {
    matches!(
        e,
        FsError::Unavailable { .. }
            | FsError::Timeout { .. }
            | FsError::NotLeader { .. }
            | FsError::Busy { .. }
    )
}

/// A small deterministic generator (xorshift), one per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One client's load in `dir` until `stop`; `acked` counts acknowledged operations of
/// every client.
async fn client(
    fs: CurvineFs,
    dir: String,
    seed: u64,
    acked: Arc<AtomicU64>,
    stop: CancellationToken,
) -> Ledger {
    let mut l = Ledger::default();
    let mut rng = Rng(seed * 2 + 1);
    let mut n = 0u64;
    let mut failures = 0;
    while !stop.is_cancelled() && failures < 20 {
        n += 1;
        let pick = rng.next(10);
        let existing: Vec<String> = l.known.keys().cloned().collect();
        let target = (!existing.is_empty())
            .then(|| existing[rng.next(existing.len() as u64) as usize].clone());
        let res = match (pick, target) {
            (0..=2, _) | (_, None) => {
                let name = format!("d{n}");
                let r = fs.mkdir(&format!("{dir}/{name}"), false).await.map(|_| ());
                settle(&mut l, r, &name, |l| {
                    l.known.insert(
                        name.clone(),
                        Known {
                            kind: Kind::Dir,
                            mode: 0o755,
                        },
                    );
                })
                .then(|| Unknown::Made(name.clone(), Kind::Dir))
            }
            (3..=5, _) => {
                let name = format!("f{n}");
                let path = format!("{dir}/{name}");
                let r = async {
                    let mut w = fs
                        .create_with(
                            &path,
                            curvine_client::CreateOptions {
                                exclusive: true,
                                mode: 0o644,
                                ..Default::default()
                            },
                        )
                        .await?;
                    w.close().await.map(|_| ())
                }
                .await;
                settle(&mut l, r, &name, |l| {
                    l.known.insert(
                        name.clone(),
                        Known {
                            kind: Kind::File,
                            mode: 0o644,
                        },
                    );
                })
                .then(|| Unknown::Made(name.clone(), Kind::File))
            }
            (6..=7, Some(from)) => {
                let to = format!("r{n}");
                let kind = l.known[&from].kind;
                let r = fs
                    .rename(&format!("{dir}/{from}"), &format!("{dir}/{to}"))
                    .await;
                settle(&mut l, r, &from, |l| {
                    let k = l.known.remove(&from).expect("known");
                    l.known.insert(to.clone(), k);
                })
                .then(|| {
                    l.known.remove(&from);
                    Unknown::Renamed(from.clone(), to.clone(), kind)
                })
            }
            (8, Some(name)) => {
                let kind = l.known[&name].kind;
                let r = fs.delete(&format!("{dir}/{name}"), false).await;
                settle(&mut l, r, &name, |l| {
                    l.known.remove(&name);
                })
                .then(|| {
                    l.known.remove(&name);
                    Unknown::Deleted(name.clone(), kind)
                })
            }
            (_, Some(name)) => {
                let Known { kind, mode: old } = l.known[&name].clone();
                let new = 0o600 | (n as u32 % 0o100);
                let attr = SetAttr {
                    mode: Some(new),
                    ..Default::default()
                };
                let r = fs
                    .set_attr(&format!("{dir}/{name}"), attr)
                    .await
                    .map(|_| ());
                settle(&mut l, r, &name, |l| {
                    if let Some(k) = l.known.get_mut(&name) {
                        k.mode = new;
                    }
                })
                .then(|| {
                    l.known.remove(&name);
                    Unknown::Chmod(name.clone(), kind, old, new)
                })
            }
        };
        match res {
            Some(u) => {
                failures += 1;
                l.unknown.push(u);
            }
            None => {
                acked.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    l
}

/// Record an operation's result: acknowledged (apply `ok` to the ledger), or failed
/// (true: its outcome is unknown). An error that says the namespace was not as this
/// client knows it is wrong: a retry was applied twice, or an acknowledged change lost.
fn settle(
    l: &mut Ledger,
    r: Result<(), FsError>,
    name: &str,
    ok: impl FnOnce(&mut Ledger),
) -> bool {
    match r {
        Ok(()) => {
            l.acked += 1;
            ok(l);
            false
        }
        Err(e) if is_unknown(&e) => true,
        Err(e) => {
            l.wrong.push(format!("{name}: {e}"));
            true
        }
    }
}

/// Check every client's ledger against what the master at `conf` serves.
async fn check(fs: &CurvineFs, ledgers: &[(String, Ledger)]) {
    let mut unknown = 0;
    for (dir, l) in ledgers {
        assert!(l.wrong.is_empty(), "{dir}: wrong answers {:?}", l.wrong);
        let listed: BTreeMap<String, (Kind, u32)> = fs
            .list(dir)
            .await
            .unwrap()
            .into_iter()
            .map(|s| {
                let kind = if s.file_type == FileType::Dir as i32 {
                    Kind::Dir
                } else {
                    Kind::File
                };
                (s.name, (kind, s.mode & 0o7777))
            })
            .collect();
        let mut allowed: BTreeMap<&str, ()> = BTreeMap::new();
        for (name, k) in &l.known {
            assert_eq!(
                listed.get(name),
                Some(&(k.kind, k.mode)),
                "{dir}/{name}: acknowledged as {k:?}"
            );
            allowed.insert(name, ());
        }
        for u in &l.unknown {
            unknown += 1;
            match u {
                Unknown::Made(name, kind) | Unknown::Deleted(name, kind) => {
                    if let Some((k, _)) = listed.get(name) {
                        assert_eq!(k, kind, "{dir}/{name}");
                    }
                    allowed.insert(name, ());
                }
                Unknown::Renamed(from, to, kind) => {
                    let (a, b) = (listed.get(from), listed.get(to));
                    assert!(
                        a.is_some() != b.is_some(),
                        "{dir}: rename {from} -> {to} half applied: {a:?} {b:?}"
                    );
                    assert_eq!(a.or(b).map(|x| x.0), Some(*kind));
                    allowed.insert(from, ());
                    allowed.insert(to, ());
                }
                Unknown::Chmod(name, kind, old, new) => {
                    let got = listed.get(name);
                    assert!(
                        got == Some(&(*kind, *old)) || got == Some(&(*kind, *new)),
                        "{dir}/{name}: chmod {old:o} -> {new:o} gave {got:?}"
                    );
                    allowed.insert(name, ());
                }
            }
        }
        for name in listed.keys() {
            assert!(
                allowed.contains_key(name.as_str()),
                "{dir}/{name}: present, never acknowledged nor tried"
            );
        }
    }
    // the retry cache turns lost replies into answers: unknown outcomes stay rare
    assert!(
        unknown <= CLIENTS / 8,
        "{unknown} operations of unknown outcome"
    );
}

/// The index of the master that accepts a mutation (the leader), once one does.
async fn leader(c: &HaCluster) -> usize {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        for i in (0..c.len()).filter(|&i| c.running(i)) {
            if let Ok(fs) = CurvineFs::connect(c.conf_of(i)).await {
                if fs.mkdir("/", true).await.is_ok() {
                    return i;
                }
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillLeader,
    KillFollower,
    RestartLeader,
    /// A master stopped, its data directory emptied, and started again: a new master
    /// that joins by snapshot (the leader's log no longer reaches back to its start).
    WipeFollower,
    WipeLeader,
    /// A fourth master added (learner, then voter) and the leader removed from the
    /// group, then stopped.
    ReplaceLeader,
}

/// A snapshot every this many entries in the tests that wipe a master: the load
/// before the fault compacts the log, so the empty master needs a snapshot.
const SNAPSHOT_ENTRIES: u64 = 100;

async fn run(fault: Fault) {
    let wipes = matches!(fault, Fault::WipeFollower | Fault::WipeLeader);
    let mut c = HaCluster::start_with(3, |c| {
        if wipes {
            c.master.snapshot_entries = SNAPSHOT_ENTRIES;
        }
    })
    .await
    .unwrap();
    let first = leader(&c).await;
    let mut conf = c.client_conf();
    // the master that joins runs from the start, waiting to be added: the clients
    // know its address, so they follow a hint to it should it come to lead
    let added = match fault {
        Fault::ReplaceLeader => {
            let i = c.add_master().await.unwrap();
            conf.client.master_addrs.push(c.addr(i).to_string());
            Some(i)
        }
        _ => None,
    };
    let setup = CurvineFs::connect(conf.clone()).await.unwrap();
    let acked = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let dir = format!("/ledger/c{i}");
        setup.mkdir(&dir, true).await.unwrap();
        let fs = CurvineFs::connect(conf.clone()).await.unwrap();
        let t = tokio::spawn(client(
            fs,
            dir.clone(),
            i as u64 + 7,
            acked.clone(),
            stop.clone(),
        ));
        tasks.push((dir, t));
    }
    let reach = |n: u64| {
        let acked = acked.clone();
        async move {
            let a = &acked;
            wait_until(WAIT, || async move { a.load(Ordering::Relaxed) >= n })
                .await
                .expect("load made no progress");
        }
    };
    reach(OPS_BEFORE).await;
    let stopped = match fault {
        Fault::KillLeader | Fault::RestartLeader | Fault::WipeLeader | Fault::ReplaceLeader => {
            first
        }
        Fault::KillFollower | Fault::WipeFollower => (first + 1) % 3,
    };
    if let Some(new) = added {
        // under the load: the new master joins, then the leader leaves the group
        setup
            .add_master(new as u64 + 1, &c.addr(new).to_string())
            .await
            .unwrap();
        setup.remove_master(first as u64 + 1).await.unwrap();
    }
    c.stop(stopped).await.unwrap();
    if wipes {
        c.wipe(stopped).unwrap();
    }
    let at = acked.load(Ordering::Relaxed);
    reach(at + OPS_AFTER).await;
    if matches!(
        fault,
        Fault::RestartLeader | Fault::WipeFollower | Fault::WipeLeader
    ) {
        c.start_again(stopped).await.unwrap();
        let at = acked.load(Ordering::Relaxed);
        reach(at + OPS_AFTER).await;
    }
    stop.cancel();
    let mut ledgers = Vec::new();
    for (dir, t) in tasks {
        ledgers.push((dir, t.await.unwrap()));
    }
    let now = leader(&c).await;
    if matches!(
        fault,
        Fault::KillLeader | Fault::WipeLeader | Fault::ReplaceLeader
    ) {
        assert_ne!(now, first);
    }
    let fs = CurvineFs::connect(c.conf_of(now)).await.unwrap();
    check(&fs, &ledgers).await;
    // the master started again (or added) caught up with the same namespace
    let back = match fault {
        Fault::RestartLeader | Fault::WipeFollower | Fault::WipeLeader => Some(stopped),
        _ => added.filter(|&a| a != now),
    };
    if let Some(back) = back {
        let back_fs = CurvineFs::connect(c.conf_of(back)).await.unwrap();
        let want: Vec<_> = ledgers.iter().map(|(d, _)| d.clone()).collect();
        let (fs, b) = (&fs, &back_fs);
        let want = &want;
        wait_until(WAIT, || async move {
            for d in want {
                let x = fs.list(d).await.map(|v| v.len());
                let y = b.list(d).await.map(|v| v.len());
                if x.is_err() || x.ok() != y.ok() {
                    return false;
                }
            }
            true
        })
        .await
        .unwrap_or_else(|_| panic!("master {back} did not catch up"));
        check(b, &ledgers).await;
        if wipes {
            // it joined through a snapshot: the start of the log never reached it
            c.stop(back).await.unwrap();
            let st = c.stored_raft(back).unwrap();
            assert!(st.installed.is_some(), "no snapshot installed: {st:?}");
            assert!(st.first_log.is_none_or(|f| f > 1), "{st:?}");
        }
    }
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_operations_survive_a_leader_kill() {
    run(Fault::KillLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_operations_survive_a_follower_kill() {
    run(Fault::KillFollower).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_operations_survive_a_leader_restart() {
    run(Fault::RestartLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_operations_survive_a_follower_replaced_empty() {
    run(Fault::WipeFollower).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_operations_survive_a_leader_replaced_empty() {
    run(Fault::WipeLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_operations_survive_a_membership_change() {
    run(Fault::ReplaceLeader).await;
}
