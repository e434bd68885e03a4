//! The mount's web port (`fuse.web_port`): `/metrics`, `/healthz`, `/readyz` (ready
//! while the file system is mounted) and `/api/tasks` (the daemon's background tasks).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use axum::routing::get;
use axum::Json;
use curvine_common::report::task_json;
use curvine_common::web::{self, Probes, WebAuth};
use curvine_common::ClusterConf;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// Serve the mount's web port until `cancel` fires; nothing when `fuse.web_port` is 0.
/// Binds the client's host name when it is an address or `localhost`, else every
/// interface.
pub async fn start(
    conf: &ClusterConf,
    mounted: Arc<AtomicBool>,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let host = conf.client.hostname.as_str();
    let host = if host == "localhost" || host.parse::<std::net::IpAddr>().is_ok() {
        host
    } else {
        "0.0.0.0"
    };
    let Some(listener) = web::bind(host, conf.fuse.web_port)
        .await
        .context("fuse.web_port")?
    else {
        return Ok(());
    };
    web::note_process("fuse");
    // every metric exists from the start, before the first request
    let _ = crate::metrics::fuse();
    let probes = Probes {
        ready: Arc::new(move || {
            if mounted.load(Ordering::Acquire) {
                Ok(())
            } else {
                Err("not mounted".into())
            }
        }),
        refresh: None,
    };
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "web port serving /metrics");
    }
    let routes =
        web::probe_routes(probes).route("/api/tasks", get(|| async { Json(tasks_json()) }));
    let app = web::finish(routes, WebAuth::new(conf));
    web::spawn(listener, app, cancel);
    Ok(())
}

/// The daemon's background tasks as JSON, each as `cv report --json` shows a server's.
fn tasks_json() -> serde_json::Value {
    let tasks: Vec<serde_json::Value> = crate::tasks().report().iter().map(task_json).collect();
    serde_json::json!({ "tasks": tasks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_are_listed_with_their_state() {
        let t = crate::tasks().spawn("web_test_task", |t| async move {
            t.busy("waiting");
            t.cancelled().await;
        });
        tokio::task::yield_now().await;
        let j = tasks_json();
        let row = j["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "web_test_task")
            .cloned()
            .unwrap();
        assert_eq!(row["state"], "busy", "{row}");
        assert_eq!(row["detail"], "waiting", "{row}");
        drop(t);
    }
}
