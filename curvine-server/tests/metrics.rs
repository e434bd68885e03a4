//! Metrics move with the work done: the worker's and the client's byte counters grow by
//! exactly what this test wrote and read, by path, and the master's and the client's
//! error counters by the failures it provoked. One test in its own binary: the counters are per process, and no other test
//! may move them meanwhile.

use curvine_client::CurvineFs;
use curvine_server::testing::http::{get, metric_sum};
use curvine_server::testing::MiniCluster;

async fn scrape(addr: std::net::SocketAddr) -> String {
    let r = get(addr, "/metrics", &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{:?}",
        r.headers
    );
    r.body
}

fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counters_grow_by_the_work_done() {
    let cluster = MiniCluster::builder().workers(1).start().await.unwrap();
    let wweb = cluster.worker_web_addr(0);
    let mweb = cluster.master_web_addr();
    let mut remote_conf = cluster.client_conf();
    remote_conf.client.short_circuit = false;
    let remote = CurvineFs::connect(remote_conf).await.unwrap();
    let mut local_conf = cluster.client_conf();
    local_conf.client.short_circuit = true;
    let local = CurvineFs::connect(local_conf).await.unwrap();

    // remote writes and reads
    let before = scrape(wweb).await;
    let len = (3 << 20) + 12_345;
    let data = body(len);
    remote.write_file("/metrics-remote", &data).await.unwrap();
    assert!(remote.read_file("/metrics-remote").await.unwrap() == data);
    let after = scrape(wweb).await;
    let delta = |name: &str, path: &str| {
        metric_sum(&after, name, &[("path", path)]) - metric_sum(&before, name, &[("path", path)])
    };
    assert_eq!(
        delta("curvine_worker_written_bytes_total", "remote"),
        len as f64
    );
    assert_eq!(
        delta("curvine_worker_read_bytes_total", "remote"),
        len as f64
    );
    assert_eq!(
        delta("curvine_worker_written_bytes_total", "short_circuit"),
        0.0
    );
    // the client's own counters (this process's registry, exported on every port here)
    assert_eq!(
        delta("curvine_client_written_bytes_total", "remote"),
        len as f64
    );
    assert_eq!(
        delta("curvine_client_read_bytes_total", "remote"),
        len as f64
    );
    assert_eq!(
        delta("curvine_client_read_bytes_total", "short_circuit"),
        0.0
    );

    // short-circuit writes and reads
    let before = scrape(wweb).await;
    let len2 = (1 << 20) + 77;
    let data2 = body(len2);
    local.write_file("/metrics-local", &data2).await.unwrap();
    assert!(local.read_file("/metrics-local").await.unwrap() == data2);
    let after = scrape(wweb).await;
    let delta = |name: &str, path: &str| {
        metric_sum(&after, name, &[("path", path)]) - metric_sum(&before, name, &[("path", path)])
    };
    assert_eq!(
        delta("curvine_worker_written_bytes_total", "short_circuit"),
        len2 as f64
    );
    assert_eq!(
        delta("curvine_worker_read_bytes_total", "short_circuit"),
        len2 as f64
    );
    assert_eq!(delta("curvine_worker_written_bytes_total", "remote"), 0.0);
    assert_eq!(
        delta("curvine_client_written_bytes_total", "short_circuit"),
        len2 as f64
    );
    assert_eq!(
        delta("curvine_client_read_bytes_total", "short_circuit"),
        len2 as f64
    );
    assert_eq!(delta("curvine_client_read_bytes_total", "remote"), 0.0);
    // both files are stored: the tier gauges see them
    let stored = metric_sum(&after, "curvine_worker_blocks", &[]);
    assert!(stored >= 2.0, "blocks gauge {stored}");

    // failures the test provokes: stats of missing paths
    let not_found = [("method", "GetStatus"), ("code", "NotFound")];
    let before = scrape(mweb).await;
    for i in 0..5 {
        assert!(remote.stat(&format!("/metrics-missing-{i}")).await.is_err());
    }
    let after = scrape(mweb).await;
    assert_eq!(
        metric_sum(&after, "curvine_master_calls_total", &not_found)
            - metric_sum(&before, "curvine_master_calls_total", &not_found),
        5.0
    );
    assert_eq!(
        metric_sum(&after, "curvine_client_master_calls_total", &not_found)
            - metric_sum(&before, "curvine_client_master_calls_total", &not_found),
        5.0
    );
    let stats = [("method", "GetStatus")];
    let timed = "curvine_client_master_call_duration_seconds_count";
    assert_eq!(
        metric_sum(&after, timed, &stats) - metric_sum(&before, timed, &stats),
        5.0
    );
    let ok_creates = [("method", "Create"), ("code", "Ok")];
    assert!(metric_sum(&after, "curvine_master_calls_total", &ok_creates) >= 2.0);
    assert!(
        metric_sum(
            &after,
            "curvine_master_call_duration_seconds_count",
            &[("method", "Create")]
        ) >= 2.0
    );
    // the namespace gauges are the report's numbers
    let r = cluster.report().await.unwrap();
    assert_eq!(
        metric_sum(&after, "curvine_master_files", &[]),
        r.files as f64
    );
    assert_eq!(
        metric_sum(&after, "curvine_master_dirs", &[]),
        r.dirs as f64
    );
    assert_eq!(
        metric_sum(&after, "curvine_master_workers", &[("state", "live")]),
        1.0
    );
    cluster.shutdown().await.unwrap();
}
