//! The gRPC server end to end: tonic client on 127.0.0.1:0, restart on the same meta_dir.

use std::net::SocketAddr;
use std::time::Duration;

use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::proto::*;
use curvine_common::{ClusterConf, FsError};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

struct Running {
    addr: SocketAddr,
    cancel: CancellationToken,
    handle: JoinHandle<curvine_common::FsResult<()>>,
}

async fn start(dir: &std::path::Path) -> Running {
    let mut conf = ClusterConf {
        master: super::tests::mconf(dir),
        ..Default::default()
    };
    conf.journal.sync = std::env::var("CV_NOSYNC").is_err();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(super::run(conf, listener, cancel.clone()));
    Running {
        addr,
        cancel,
        handle,
    }
}

impl Running {
    async fn client(&self) -> MasterServiceClient<Channel> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match MasterServiceClient::connect(format!("http://{}", self.addr)).await {
                Ok(c) => return c,
                Err(e) => {
                    assert!(tokio::time::Instant::now() < deadline, "connect: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
    async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.handle)
            .await
            .expect("master stops")
            .unwrap()
            .unwrap();
    }
}

fn caller() -> Option<CallerInfo> {
    Some(CallerInfo {
        client_id: 7,
        ..Default::default()
    })
}

async fn create_complete(c: &mut MasterServiceClient<Channel>, path: &str) -> FileStatus {
    let st = c
        .create(CreateRequest {
            path: path.into(),
            caller: caller(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    c.complete(CompleteRequest {
        file_id: st.id,
        path: path.into(),
        caller: caller(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .status
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_and_keeps_acknowledged_state_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path()).await;
    let mut c = m.client().await;
    c.mkdir(MkdirRequest {
        path: "/data/sub".into(),
        parents: true,
        caller: caller(),
        ..Default::default()
    })
    .await
    .unwrap();
    // Concurrent mutations share WAL syncs.
    let mut tasks = Vec::new();
    for i in 0..64 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            create_complete(&mut c, &format!("/data/f{i}")).await
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap().complete);
    }
    let err = c
        .get_status(GetStatusRequest {
            path: "/data/missing".into(),
            caller: caller(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(FsError::from(err), FsError::NotFound { path } if path == "/data/missing"));
    let err = c
        .open(OpenRequest {
            path: "/data".into(),
            caller: caller(),
            exclude_fetchers: vec![],
        })
        .await
        .unwrap_err();
    assert!(matches!(FsError::from(err), FsError::IsADirectory { .. }));
    let report = c.report(ReportRequest {}).await.unwrap().into_inner();
    assert_eq!(report.files, 64);
    assert!(!report.cluster_id.is_empty());
    drop(c);
    m.stop().await;

    let m = start(dir.path()).await;
    let mut c = m.client().await;
    let list = c
        .list(ListRequest {
            path: "/data".into(),
            caller: caller(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.statuses.len(), 65);
    let again = c.report(ReportRequest {}).await.unwrap().into_inner();
    assert_eq!(again.cluster_id, report.cluster_id);
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_connections_do_not_hurt() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path()).await;
    let mut c = m.client().await;
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(m.addr).await.unwrap();
        let _ = s
            .write_all(b"GET / HTTP/1.1\r\n\r\n\x00\xff garbage \x13\x37")
            .await;
        let _ = s.shutdown().await;
    }
    let st = create_complete(&mut c, "/after-garbage").await;
    assert_eq!(st.path, "/after-garbage");
    // A connected client does not hold up shutdown, and the same dir reopens at once.
    m.stop().await;
    let m = start(dir.path()).await;
    let mut c2 = m.client().await;
    drop(c);
    assert_eq!(
        c2.report(ReportRequest {})
            .await
            .unwrap()
            .into_inner()
            .files,
        1
    );
    m.stop().await;
}

/// Throughput probe, not an assertion: `cargo test --release -p curvine-server --lib
/// master::tests_rpc::throughput -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn throughput() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let m = start(dir.path()).await;
    let c = m.client().await;
    let n_clients = 8;
    let per = 2000;
    let t0 = std::time::Instant::now();
    let mut tasks = Vec::new();
    for k in 0..n_clients {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                create_complete(&mut c, &format!("/k{k}-{i}")).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let el = t0.elapsed();
    println!(
        "create+complete: {:.0}/s",
        (n_clients * per) as f64 / el.as_secs_f64()
    );
    let t0 = std::time::Instant::now();
    let mut tasks = Vec::new();
    for k in 0..n_clients {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per * 2 {
                c.get_status(GetStatusRequest {
                    path: format!("/k{k}-{}", i % per),
                    caller: caller(),
                    ..Default::default()
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let el = t0.elapsed();
    println!(
        "stat: {:.0}/s",
        (n_clients * per * 2) as f64 / el.as_secs_f64()
    );
    drop(c);
    m.stop().await;
}
