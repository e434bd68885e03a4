//! Replicated masters (`master.peers`): three masters in this process, a client that
//! follows the leader, a leader stopped under a stream of mutations, and raft calls a
//! master must refuse.

mod common;

use std::time::Duration;

use curvine_client::CurvineFs;
use curvine_common::proto::raft_service_client::RaftServiceClient;
use curvine_common::proto::RaftRequest;
use curvine_common::FsError;
use curvine_server::testing::ha::HaCluster;

const WAIT: Duration = Duration::from_secs(30);

/// The index of the master that accepts a mutation (the leader), once one does.
async fn leader(c: &HaCluster) -> usize {
    common::ha::leader(c, WAIT).await
}

/// Wait until master `i` has every path of `paths` and none of `gone`.
async fn has_all(c: &HaCluster, i: usize, paths: &[String], gone: &[String]) {
    common::ha::has_all(c, i, paths, gone, WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutations_reach_every_master_and_survive_the_leader_stopping() {
    let mut c = HaCluster::start(3).await.unwrap();
    let first = leader(&c).await;
    let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
    // acknowledged changes: paths that must exist, and paths that must not
    let (mut present, mut gone) = (Vec::new(), Vec::new());
    fs.mkdir("/ha", false).await.unwrap();
    present.push("/ha".to_string());
    for n in 0..20 {
        let d = format!("/ha/d{n}");
        fs.mkdir(&d, false).await.unwrap();
        if n % 3 == 0 {
            let to = format!("/ha/r{n}");
            fs.rename(&d, &to).await.unwrap();
            gone.push(d);
            present.push(to);
        } else if n % 3 == 1 {
            fs.delete(&d, false).await.unwrap();
            gone.push(d);
        } else {
            present.push(d);
        }
    }
    for i in 0..3 {
        has_all(&c, i, &present, &gone).await;
    }
    // a follower refuses a mutation, naming the leader
    let follower = (first + 1) % 3;
    let ffs = CurvineFs::connect(c.conf_of(follower)).await.unwrap();
    match ffs.mkdir("/ha/refused", false).await {
        Err(FsError::NotLeader { leader }) => assert_eq!(leader, c.addr(first).to_string()),
        other => panic!("a follower took a mutation: {other:?}"),
    }

    // stop the leader: the others elect one and the client carries on
    c.stop(first).await.unwrap();
    // no leader for a moment: the client's tries go on through the election, within
    // its rpc_timeout
    for n in 0..20 {
        let d = format!("/ha/after{n}");
        fs.mkdir(&d, false).await.unwrap();
        present.push(d);
    }
    let second = leader(&c).await;
    assert_ne!(second, first);
    for i in (0..3).filter(|&i| i != first) {
        has_all(&c, i, &present, &gone).await;
    }

    // the old leader comes back with its data as a follower and catches up
    c.start_again(first).await.unwrap();
    has_all(&c, first, &present, &gone).await;
    let back = CurvineFs::connect(c.conf_of(first)).await.unwrap();
    match back.mkdir("/ha/refused", false).await {
        Err(FsError::NotLeader { .. }) => {}
        other => panic!("the old leader took a mutation: {other:?}"),
    }
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn raft_calls_of_another_cluster_or_garbage_are_refused() {
    let c = HaCluster::start(3).await.unwrap();
    let first = leader(&c).await;
    let ours = curvine_server::master::group_id(&c.client_conf());
    let target = (first + 1) % 3;
    let mut client = RaftServiceClient::connect(format!("http://{}", c.addr(target)))
        .await
        .unwrap();
    let call = |cluster_id: &str, kind: u32, body: Vec<u8>| RaftRequest {
        cluster_id: cluster_id.to_string(),
        from: 9,
        kind,
        body,
    };
    // another cluster: refused before anything is decoded
    let e = client
        .call(call("cv-other-0", 2, Vec::new()))
        .await
        .unwrap_err();
    assert_eq!(
        FsError::from(e).code(),
        curvine_common::ErrorCode::PermissionDenied
    );
    // garbage in every kind, and an unknown kind: refused, nothing panics
    for kind in [1, 2, 3, 77] {
        let e = client
            .call(call(&ours, kind, vec![0xff, 0x01, 0x80, 0x80]))
            .await
            .unwrap_err();
        assert_ne!(e.code(), tonic::Code::Ok);
    }
    // the group still works
    let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
    fs.mkdir("/still", false).await.unwrap();
    has_all(&c, target, &["/still".to_string()], &[]).await;
    c.shutdown().await.unwrap();
}
