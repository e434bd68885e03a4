//! The web ports: probes, 404s, the body limit, the token on the console, and the
//! console's APIs agreeing with the master's report.

use std::time::Duration;

use curvine_client::CurvineFs;
use curvine_server::testing::http::{get, metric_names, request};
use curvine_server::testing::{wait_until, MiniCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readyz_follows_registration() {
    let mut cluster = MiniCluster::builder().workers(1).start().await.unwrap();
    let (m, w) = (cluster.master_web_addr(), cluster.worker_web_addr(0));
    assert_eq!(get(m, "/healthz", &[]).await.unwrap().status, 200);
    assert_eq!(get(m, "/readyz", &[]).await.unwrap().status, 200);
    // the master lists the worker a moment before the worker hears back
    let ready = wait_until(Duration::from_secs(20), || async {
        get(w, "/readyz", &[]).await.is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ready.is_ok(), "worker not ready once registered");
    // without a master the worker is not registered: not ready, but alive
    cluster.stop_master().await.unwrap();
    assert!(
        get(m, "/healthz", &[]).await.is_err(),
        "master web port closed"
    );
    let not_ready = wait_until(Duration::from_secs(20), || async {
        get(w, "/readyz", &[]).await.is_ok_and(|r| r.status == 503)
    })
    .await;
    assert!(not_ready.is_ok(), "worker still ready without a master");
    assert_eq!(get(w, "/healthz", &[]).await.unwrap().status, 200);
    cluster.start_master().await.unwrap();
    let ready = wait_until(Duration::from_secs(30), || async {
        get(w, "/readyz", &[]).await.is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ready.is_ok(), "worker not ready after the master came back");
    assert_eq!(get(m, "/readyz", &[]).await.unwrap().status, 200);
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_paths_and_big_bodies_are_refused() {
    let cluster = MiniCluster::builder().workers(1).start().await.unwrap();
    for addr in [cluster.master_web_addr(), cluster.worker_web_addr(0)] {
        for p in ["/nope", "/api/nope", "/metrics/x", "/../etc/passwd"] {
            let r = get(addr, p, &[]).await.unwrap();
            assert_eq!(r.status, 404, "{p} on {addr}");
        }
        let big = vec![b'a'; 64 << 10];
        let r = request(
            addr,
            "POST",
            "/login",
            &["Content-Type: application/x-www-form-urlencoded"],
            &big,
        )
        .await
        .unwrap();
        assert_eq!(r.status, 413, "{addr}");
        let r = request(addr, "POST", "/metrics", &[], b"x").await.unwrap();
        assert_eq!(r.status, 405, "{addr}");
    }
    // a bad query is a 4xx, not a crash
    let m = cluster.master_web_addr();
    let r = get(m, "/api/file?path=/does-not-exist", &[]).await.unwrap();
    assert_eq!(r.status, 404, "{}", r.body);
    let r = get(m, "/browse?path=%ZZ", &[]).await.unwrap();
    assert!((400..500).contains(&r.status), "{}", r.status);
    assert_eq!(get(m, "/healthz", &[]).await.unwrap().status, 200);
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_token_guards_the_console_but_not_the_probes() {
    let token = "web-test-token-1234";
    let cluster = MiniCluster::builder()
        .workers(1)
        .conf(move |c| c.cluster.auth_token = token.into())
        .start()
        .await
        .unwrap();
    let m = cluster.master_web_addr();
    let bearer = format!("Authorization: Bearer {token}");
    for p in ["/", "/workers", "/browse?path=/", "/conf", "/api/report"] {
        let r = get(m, p, &[]).await.unwrap();
        assert_eq!(r.status, 401, "{p} without a token");
        let r = get(m, p, &["Authorization: Bearer wrong"]).await.unwrap();
        assert_eq!(r.status, 401, "{p} with a wrong token");
        let r = get(m, p, &[&bearer]).await.unwrap();
        assert_eq!(r.status, 200, "{p} with the token");
        assert!(!r.body.contains(token), "{p} shows the token");
    }
    // a browser is sent to the login form, which sets the cookie
    let r = get(m, "/", &["Accept: text/html"]).await.unwrap();
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/login"));
    assert_eq!(get(m, "/login", &[]).await.unwrap().status, 200);
    let form = format!("token={token}");
    let r = request(
        m,
        "POST",
        "/login",
        &["Content-Type: application/x-www-form-urlencoded"],
        form.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 303, "{}", r.body);
    let cookie = r.header("set-cookie").expect("a cookie").to_string();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    let pair = cookie.split(';').next().unwrap();
    let r = get(m, "/", &[&format!("Cookie: {pair}")]).await.unwrap();
    assert_eq!(r.status, 200);
    let bad = request(
        m,
        "POST",
        "/login",
        &["Content-Type: application/x-www-form-urlencoded"],
        b"token=nope",
    )
    .await
    .unwrap();
    assert_eq!(bad.status, 401);
    // the probes stay open
    for addr in [m, cluster.worker_web_addr(0)] {
        for p in ["/metrics", "/healthz"] {
            assert_eq!(get(addr, p, &[]).await.unwrap().status, 200, "{p}");
        }
        // 200 or, for a worker not yet registered, 503: never 401
        let r = get(addr, "/readyz", &[]).await.unwrap();
        assert!(r.status == 200 || r.status == 503, "{}", r.status);
    }
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_auth_guards_the_probes_too() {
    let cluster = MiniCluster::builder()
        .workers(1)
        .conf(|c| {
            c.cluster.auth_token = "probe-token".into();
            c.web.metrics_auth = true;
        })
        .start()
        .await
        .unwrap();
    let m = cluster.master_web_addr();
    for p in ["/metrics", "/healthz", "/readyz"] {
        assert_eq!(get(m, p, &[]).await.unwrap().status, 401, "{p}");
        let r = get(m, p, &["Authorization: Bearer probe-token"])
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{p}");
    }
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_shows_the_report() {
    let cluster = MiniCluster::builder().workers(2).start().await.unwrap();
    let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
    fs.mkdir("/web/dir", true).await.unwrap();
    fs.write_file("/web/dir/a <b>.txt", &vec![7u8; 9 << 20])
        .await
        .unwrap();
    let m = cluster.master_web_addr();
    let api: serde_json::Value =
        serde_json::from_str(&get(m, "/api/report", &[]).await.unwrap().body).unwrap();
    let want = curvine_common::report::report_json(&cluster.report().await.unwrap());
    for k in ["cluster_id", "files", "dirs", "blocks", "capacity", "used"] {
        assert_eq!(api[k], want[k], "{k}");
    }
    assert_eq!(api["workers"].as_array().map(Vec::len), Some(2));
    assert_eq!(api["workers_live"], 2);
    // the directory lists the file; the file shows its two blocks and where they are
    let list: serde_json::Value =
        serde_json::from_str(&get(m, "/api/list?path=/web/dir", &[]).await.unwrap().body).unwrap();
    assert_eq!(list["entries"][0]["name"], "a <b>.txt");
    let file: serde_json::Value = serde_json::from_str(
        &get(m, "/api/file?path=/web/dir/a%20%3Cb%3E.txt", &[])
            .await
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(file["status"]["len"], 9 << 20);
    let blocks = file["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 2, "{file}");
    assert!(blocks
        .iter()
        .all(|b| !b["locations"].as_array().unwrap().is_empty()));
    // the pages render, names escaped
    for p in [
        "/",
        "/workers",
        "/browse?path=/web/dir",
        "/conf",
        "/api/info",
        "/api/conf",
    ] {
        let r = get(m, p, &[]).await.unwrap();
        assert_eq!(r.status, 200, "{p}: {}", r.body);
    }
    let dir = get(m, "/browse?path=/web/dir", &[]).await.unwrap().body;
    assert!(dir.contains("a &lt;b&gt;.txt"), "{dir}");
    assert!(!dir.contains("a <b>.txt"));
    let page = get(m, "/browse?path=/web/dir/a%20%3Cb%3E.txt", &[])
        .await
        .unwrap()
        .body;
    assert!(page.contains("id=\"blocks\""), "{page}");
    let overview = get(m, "/", &[]).await.unwrap().body;
    assert!(overview.contains(&format!(
        "data-key=\"files\" data-value=\"{}\"",
        want["files"]
    )));
    // every process's metrics have HELP text and the curvine_ prefix
    let text = get(m, "/metrics", &[]).await.unwrap().body;
    let names = metric_names(&text);
    assert!(names.iter().all(|n| n.starts_with("curvine_")), "{names:?}");
    assert!(names.contains(&"curvine_master_files".to_string()));
    cluster.shutdown().await.unwrap();
}

/// The metric names the Grafana dashboard queries (histogram series by their family).
fn dashboard_metrics() -> Vec<String> {
    let text = include_str!("../../etc/grafana/curvine.json");
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("curvine_"))
        .map(|w| {
            ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| w.strip_suffix(s).filter(|b| b.ends_with("_seconds")))
                .unwrap_or(w)
                .to_string()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_metric_the_dashboard_queries_is_exported() {
    let cluster = MiniCluster::builder().workers(1).start().await.unwrap();
    let mut exported = metric_names(
        &get(cluster.master_web_addr(), "/metrics", &[])
            .await
            .unwrap()
            .body,
    );
    exported.extend(metric_names(
        &get(cluster.worker_web_addr(0), "/metrics", &[])
            .await
            .unwrap()
            .body,
    ));
    let wanted = dashboard_metrics();
    assert!(wanted.len() > 20, "{wanted:?}");
    // the mount's metrics are checked by curvine-fuse's own test
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|n| !n.starts_with("curvine_fuse_"))
        .filter(|n| !exported.contains(n))
        .collect();
    assert!(missing.is_empty(), "queried but not exported: {missing:?}");
    cluster.shutdown().await.unwrap();
}
