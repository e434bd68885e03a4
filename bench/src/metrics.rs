//! The client metrics of a run (`curvine_client::metrics`): served at `/metrics` on
//! `--metrics-port` while the run goes on, and summed up in `client:` lines at its end.

use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use curvine_client::metrics::ClientTotals;
use curvine_client::stdout::Stdout;
use curvine_common::web::{self, Probes, WebAuth};
use curvine_common::ClusterConf;
use tokio_util::sync::CancellationToken;

/// Serve this process's metrics on `0.0.0.0:port` until `cancel` fires (0 = do not).
/// With `cluster.auth_token` set, `/metrics` needs it only under `web.metrics_auth`,
/// as on the servers.
pub async fn serve(conf: &ClusterConf, port: u16, cancel: CancellationToken) -> anyhow::Result<()> {
    let Some(listener) = web::bind("0.0.0.0", port).await.context("--metrics-port")? else {
        return Ok(());
    };
    web::note_process("bench");
    // registered now, so the first scrape lists them before any call
    curvine_client::metrics::client();
    let probes = Probes {
        ready: Arc::new(|| Ok(())),
        refresh: None,
    };
    let app = web::finish(web::probe_routes(probes), WebAuth::new(conf));
    web::spawn(listener, app, cancel);
    Ok(())
}

/// The client's work between `before` and `after`: bytes by path, master calls, errors
/// and their mean latency.
pub fn summary(before: &ClientTotals, after: &ClientTotals) -> std::io::Result<()> {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut out = Stdout::lock();
    writeln!(
        out,
        "client: read {:.2} GiB short-circuit, {:.2} GiB remote; wrote {:.2} GiB \
         short-circuit, {:.2} GiB remote",
        gib(after.read_short_circuit - before.read_short_circuit),
        gib(after.read_remote - before.read_remote),
        gib(after.written_short_circuit - before.written_short_circuit),
        gib(after.written_remote - before.written_remote),
    )?;
    let calls = after.calls - before.calls;
    let secs = after.call_seconds - before.call_seconds;
    writeln!(
        out,
        "client: {calls} master calls, {} failed, {:.0} µs each on average",
        after.errors - before.errors,
        if calls == 0 {
            0.0
        } else {
            secs / calls as f64 * 1e6
        },
    )
}
