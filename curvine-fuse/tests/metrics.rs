//! The mount's web port: `/readyz` is ready while mounted, and `/metrics` counts the
//! requests, bytes and errors this test caused. Its own binary and mount: the counters
//! are per process, and only this test uses this mount.

#![allow(unsafe_code)]

mod common;

use std::fs;
use std::net::SocketAddr;
use std::time::Duration;

use common::{data, is_mounted, shared, spawn_daemon, wait_for, write_conf};
use curvine_server::testing::http::{get, metric_sum};

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn scrape(addr: SocketAddr) -> String {
    let r = shared().rt.block_on(get(addr, "/metrics", &[])).unwrap();
    assert_eq!(r.status, 200);
    r.body
}

#[test]
fn metrics_count_what_the_mount_did() {
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("m");
    fs::create_dir(&mnt).unwrap();
    let conf = t.path().join("metrics.toml");
    let port = free_port();
    write_conf(
        &shared().cluster,
        &conf,
        &format!("web_port = {port}\ndirect_io = true"),
    );
    let mut child = spawn_daemon(&conf, &mnt, &[]);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let ready = || {
        shared()
            .rt
            .block_on(get(addr, "/readyz", &[]))
            .is_ok_and(|r| r.status == 200)
    };
    assert!(
        wait_for(Duration::from_secs(20), || is_mounted(&mnt) && ready()),
        "mount not ready"
    );
    let healthz = shared().rt.block_on(get(addr, "/healthz", &[])).unwrap();
    assert_eq!(healthz.status, 200);

    let before = scrape(addr);
    let body = data((2 << 20) + 4321, 5);
    fs::create_dir_all(mnt.join("fuse-metrics")).unwrap();
    fs::write(mnt.join("fuse-metrics/f"), &body).unwrap();
    assert!(fs::read(mnt.join("fuse-metrics/f")).unwrap() == body);
    for i in 0..3 {
        assert!(fs::metadata(mnt.join(format!("fuse-metrics/missing-{i}"))).is_err());
    }
    let after = scrape(addr);
    let delta = |name: &str, with: &[(&str, &str)]| {
        metric_sum(&after, name, with) - metric_sum(&before, name, with)
    };
    assert_eq!(
        delta("curvine_fuse_written_bytes_total", &[]),
        body.len() as f64
    );
    assert_eq!(
        delta("curvine_fuse_read_bytes_total", &[]),
        body.len() as f64
    );
    assert!(delta("curvine_fuse_requests_total", &[("op", "write")]) >= 1.0);
    assert!(delta("curvine_fuse_requests_total", &[("op", "create")]) >= 1.0);
    assert!(
        delta(
            "curvine_fuse_errors_total",
            &[("op", "lookup"), ("errno", "ENOENT")]
        ) >= 3.0
    );
    assert!(
        delta(
            "curvine_fuse_request_duration_seconds_count",
            &[("op", "lookup")]
        ) >= 3.0
    );

    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let st = child.wait().unwrap();
    assert!(st.success(), "{st:?}");
    assert!(!is_mounted(&mnt));
}
