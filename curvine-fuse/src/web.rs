//! The mount's web port (`fuse.web_port`): `/metrics`, `/healthz`, and `/readyz`, ready
//! while the file system is mounted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
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
        ready: Arc::new(move || mounted.load(Ordering::Acquire)),
        refresh: None,
    };
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "web port serving /metrics");
    }
    let app = web::finish(web::probe_routes(probes), WebAuth::new(conf));
    web::spawn(listener, app, cancel);
    Ok(())
}
