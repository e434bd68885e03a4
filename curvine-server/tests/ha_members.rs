//! Membership of replicated masters (`cv admin masters`, `add-master`,
//! `remove-master`) and workers that follow the leader: a master added and another
//! removed under a stream of mutations, the roles the leader reports, bad changes
//! refused, and a worker that re-registers with a new leader after a failover.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use curvine_client::CurvineFs;
use curvine_common::conf::Dur;
use curvine_common::proto::MasterInfo;
use curvine_common::FsError;
use curvine_server::testing::ha::HaCluster;
use curvine_server::testing::wait_until;

const WAIT: Duration = Duration::from_secs(30);

/// The index of the master that accepts a mutation (the leader), once one does.
async fn leader(c: &HaCluster) -> usize {
    common::ha::leader(c, WAIT).await
}

/// The masters as master `i` (the leader) lists them, by id.
async fn masters(c: &HaCluster, i: usize) -> Vec<MasterInfo> {
    let fs = CurvineFs::connect(c.conf_of(i)).await.unwrap();
    let mut m = fs.list_masters().await.unwrap().masters;
    m.sort_by_key(|m| m.id);
    m
}

fn role_of(list: &[MasterInfo], id: u64) -> String {
    list.iter()
        .find(|m| m.id == id)
        .map_or("absent".into(), |m| m.role.clone())
}

/// Wait until master `i` has every path of `paths`.
async fn has_all(c: &HaCluster, i: usize, paths: &[String]) {
    common::ha::has_all(c, i, paths, &[], WAIT).await
}

/// Mutations from one client until `stop`: the paths of those acknowledged.
fn mutate_until(
    fs: Arc<CurvineFs>,
    prefix: &'static str,
    stop: Arc<AtomicBool>,
) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<String>>>) {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let a = acked.clone();
    let task = tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let p = format!("{prefix}/d{n}");
            if fs.mkdir(&p, false).await.is_ok() {
                a.lock().unwrap().push(p);
            }
            n += 1;
        }
    });
    (task, acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_added_and_another_removed_under_mutations() {
    let mut c = HaCluster::start(3).await.unwrap();
    let l = leader(&c).await;
    let fs = Arc::new(CurvineFs::connect(c.client_conf()).await.unwrap());
    fs.mkdir("/members", false).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (task, acked) = mutate_until(fs.clone(), "/members", stop.clone());

    // a fourth master joins: a learner, then a voter once it has caught up
    let new = c.add_master().await.unwrap();
    let new_id = new as u64 + 1;
    fs.add_master(new_id, &c.addr(new).to_string())
        .await
        .unwrap();
    let list = masters(&c, l).await;
    assert_eq!(list.len(), 4, "{list:?}");
    let added = list.iter().find(|m| m.id == new_id).unwrap();
    assert!(added.voter, "{added:?}");
    assert_eq!(added.address, c.addr(new).to_string());

    // remove a follower of the first three and stop it: three voters are left, so
    // stopping one more still leaves a majority (with four voters it would not)
    let gone = (l + 1) % 3;
    let other = (l + 2) % 3;
    fs.remove_master(gone as u64 + 1).await.unwrap();
    let list = masters(&c, l).await;
    assert_eq!(role_of(&list, gone as u64 + 1), "absent", "{list:?}");
    c.stop(gone).await.unwrap();
    c.stop(other).await.unwrap();
    let before = acked.lock().unwrap().len();
    let more = wait_until(WAIT, || async { acked.lock().unwrap().len() > before + 20 }).await;
    assert!(
        more.is_ok(),
        "the leader and the new master no longer commit"
    );
    stop.store(true, Ordering::Relaxed);
    task.await.unwrap();

    // every acknowledged mutation is on the masters still in the group
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 20);
    has_all(&c, l, &acked).await;
    has_all(&c, new, &acked).await;
    // the master stopped while a member catches up when it comes back
    c.start_again(other).await.unwrap();
    has_all(&c, other, &acked).await;
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn masters_lists_the_roles_the_leader_sees() {
    let mut c = HaCluster::start(3).await.unwrap();
    let l = leader(&c).await;
    let list = masters(&c, l).await;
    assert_eq!(list.len(), 3);
    for (i, m) in list.iter().enumerate() {
        assert_eq!(m.address, c.addr(i).to_string());
    }
    let ok = wait_until(WAIT, || async {
        let list = masters(&c, l).await;
        (0..3).all(|i| {
            let want = if i == l { "leader" } else { "follower" };
            role_of(&list, i as u64 + 1) == want
        })
    })
    .await;
    assert!(ok.is_ok(), "{:?}", masters(&c, l).await);

    // a follower refuses, naming the leader
    let f = (l + 1) % 3;
    let ffs = CurvineFs::connect(c.conf_of(f)).await.unwrap();
    // (the follower names the leader once a heartbeat of this term has reached it)
    let named = wait_until(WAIT, || async {
        match ffs.list_masters().await {
            Err(FsError::NotLeader { leader }) => leader == c.addr(l).to_string(),
            other => panic!("a follower listed the masters: {other:?}"),
        }
    })
    .await;
    assert!(named.is_ok(), "the follower does not name the leader");

    // a stopped follower turns unreachable
    c.stop(f).await.unwrap();
    let ok = wait_until(WAIT, || async {
        role_of(&masters(&c, l).await, f as u64 + 1) == "unreachable"
    })
    .await;
    assert!(ok.is_ok(), "{:?}", masters(&c, l).await);
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_membership_changes_are_refused() {
    let c = HaCluster::start(3).await.unwrap();
    let l = leader(&c).await;
    let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
    let taken = c.addr((l + 1) % 3).to_string();
    // an id that exists, an address a member has, malformed addresses, id 0
    for (id, addr) in [
        (1, "127.0.0.1:1"),
        (9, taken.as_str()),
        (9, "127.0.0.1"),
        (9, "127.0.0.1:http"),
        (9, ":80"),
        (0, "127.0.0.1:1"),
    ] {
        let e = fs.add_master(id, addr).await.unwrap_err();
        assert!(
            matches!(
                e,
                FsError::AlreadyExists { .. } | FsError::InvalidArgument { .. }
            ),
            "add-master {id} {addr}: {e:?}"
        );
    }
    match fs.remove_master(9).await {
        Err(FsError::NotFound { .. }) => {}
        other => panic!("removed an unknown master: {other:?}"),
    }
    assert_eq!(
        masters(&c, l).await.len(),
        3,
        "a refused change changed the group"
    );
    // down to the leader alone: it cannot remove itself
    for i in (0..3).filter(|&i| i != l) {
        fs.remove_master(i as u64 + 1).await.unwrap();
    }
    // the leader's view of the membership follows the commit of the change
    let alone = wait_until(WAIT, || async { masters(&c, l).await.len() == 1 }).await;
    assert!(alone.is_ok(), "{:?}", masters(&c, l).await);
    match fs.remove_master(l as u64 + 1).await {
        Err(FsError::InvalidArgument { message }) => assert!(message.contains("last voter")),
        other => panic!("removed the last voter: {other:?}"),
    }
    // the group of one still commits
    fs.mkdir("/alone", false).await.unwrap();
    c.shutdown().await.unwrap();
}

/// Live workers in the report of master `i`.
async fn live_workers(c: &HaCluster, i: usize) -> usize {
    let Ok(fs) = CurvineFs::connect(c.conf_of(i)).await else {
        return 0;
    };
    match fs.report().await {
        Ok(r) => r.workers.iter().filter(|w| w.alive).count(),
        Err(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_follows_the_leader_and_its_blocks_stay_readable() {
    let mut c = HaCluster::start(3).await.unwrap();
    let first = leader(&c).await;
    c.start_workers(1).await.unwrap();
    let ok = wait_until(WAIT, || async { live_workers(&c, first).await == 1 }).await;
    assert!(ok.is_ok(), "the worker did not register with the leader");
    let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 + 3) as u8).collect();
    fs.write_file("/before", &data).await.unwrap();

    c.stop(first).await.unwrap();
    let second = leader(&c).await;
    assert_ne!(second, first);
    let ok = wait_until(WAIT, || async { live_workers(&c, second).await == 1 }).await;
    assert!(
        ok.is_ok(),
        "the worker did not re-register with the new leader"
    );
    // the new leader knows where the block is from the worker's report
    assert_eq!(fs.read_file("/before").await.unwrap(), data);
    // and places new blocks on it
    fs.write_file("/after", &data[..1 << 20]).await.unwrap();
    assert_eq!(fs.read_file("/after").await.unwrap(), &data[..1 << 20]);
    // a follower refuses a worker's heartbeat: the old leader, back, has none alive
    c.start_again(first).await.unwrap();
    has_all(&c, first, &["/after".to_string()]).await;
    assert_eq!(live_workers(&c, first).await, 0);
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_right_after_a_failover_waits_for_the_workers() {
    let mut c = HaCluster::start(3).await.unwrap();
    let first = leader(&c).await;
    // a worker at the default heartbeat (3 s) notices the failover after the new
    // leader serves: that leader has not heard from it where the file's block is
    c.start_workers_with(1, |w| {
        w.worker.heartbeat_interval = Dur(Duration::from_secs(3));
    })
    .await
    .unwrap();
    let ok = wait_until(WAIT, || async { live_workers(&c, first).await == 1 }).await;
    assert!(ok.is_ok(), "the worker did not register with the leader");
    let mut conf = c.client_conf();
    conf.client.rpc_timeout = Dur(Duration::from_secs(30));
    let fs = CurvineFs::connect(conf).await.unwrap();
    let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 5 + 1) as u8).collect();
    fs.write_file("/early", &data).await.unwrap();

    let stopped = std::time::Instant::now();
    c.stop(first).await.unwrap();
    // at once: the read waits for the election, then for the worker's report to the
    // new leader
    let got = fs.read_file("/early").await;
    eprintln!(
        "FIGURE leader stopped to the first good read (worker heartbeat 3 s): {:.2} s",
        stopped.elapsed().as_secs_f64()
    );
    assert_eq!(got.unwrap(), data);
    let second = leader(&c).await;
    assert_ne!(second, first);
    assert_eq!(live_workers(&c, second).await, 1);
    c.shutdown().await.unwrap();
}
