//! The master's web port: the probes and `/metrics` (`curvine_common::web`), the console
//! (server-rendered HTML, no script, everything in this binary) and the JSON APIs behind
//! it (docs/web.md). Pages: `/` overview, `/workers`, `/browse?path=` (a directory's
//! entries, or a file with its blocks and their workers), `/conf` (secrets masked).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use curvine_common::proto::{CallerInfo, FileStatus, FileType, LocatedBlock, ReportResponse};
use curvine_common::report::{
    block_json, human, report_json, reporting_line, status_json, tier_name, tiers_total, type_name,
};
use curvine_common::web::{self, Probes, WebAuth};
use curvine_common::{ClusterConf, FsError, FsResult};
use serde_json::{json, Value};

use super::namespace::Namespace;
use crate::metrics;

/// What the console's handlers share.
pub struct Console {
    /// Weak: a connection a browser keeps open must not keep RocksDB open past shutdown.
    ns: Weak<Namespace>,
    name: String,
    conf_text: String,
    started: Instant,
    started_ms: i64,
}

/// The master's whole web app: probes, metrics, console and `/api`.
pub fn app(conf: &ClusterConf, ns: &Arc<Namespace>, serving: Arc<AtomicBool>) -> Router {
    web::note_process("master");
    let m = metrics::master();
    let refresh_ns = Arc::downgrade(ns);
    let ready_ns = Arc::downgrade(ns);
    let probes = Probes {
        // not ready while it waits for its workers' reports: a read of a block on a
        // worker that has not reported yet waits until it has
        ready: Arc::new(move || {
            if !serving.load(Ordering::Acquire) {
                return Err("not serving calls".into());
            }
            match ready_ns.upgrade().map(|ns| ns.waiting_for_workers()) {
                None => Err("stopping".into()),
                Some(Some(w)) => Err(reporting_line(&w)),
                Some(None) => Ok(()),
            }
        }),
        refresh: Some(Arc::new(move || {
            if let Some(ns) = refresh_ns.upgrade() {
                m.refresh(&ns.report());
            }
        })),
    };
    let console = Arc::new(Console {
        ns: Arc::downgrade(ns),
        name: conf.cluster.name.clone(),
        conf_text: masked_conf(conf),
        started: Instant::now(),
        started_ms: now_ms(),
    });
    let pages = Router::new()
        .route("/", get(overview_page))
        .route("/workers", get(workers_page))
        .route("/browse", get(browse_page))
        .route("/conf", get(conf_page))
        .route("/api/info", get(api_info))
        .route("/api/report", get(api_report))
        .route("/api/workers", get(api_workers))
        .route("/api/list", get(api_list))
        .route("/api/file", get(api_file))
        .route("/api/conf", get(api_conf))
        .with_state(console);
    web::finish(web::probe_routes(probes).merge(pages), WebAuth::new(conf))
}

/// The configuration as the master runs with it, the token replaced by `********` and
/// the secret options of `[[mount]]` entries by `***`.
pub fn masked_conf(conf: &ClusterConf) -> String {
    let mut c = conf.clone();
    if !c.cluster.auth_token.is_empty() {
        c.cluster.auth_token = "********".into();
    }
    for m in &mut c.mount {
        for (k, v) in m.options.iter_mut() {
            if curvine_common::mount::is_secret_option(k) {
                *v = "***".into();
            }
        }
    }
    format!("{c:#?}")
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The console reads the namespace as the superuser: it is guarded by the cluster token.
fn root() -> CallerInfo {
    CallerInfo {
        user: "root".into(),
        ..CallerInfo::default()
    }
}

/// A failed console request: a status and a message.
struct WebError(StatusCode, String);

impl From<FsError> for WebError {
    fn from(e: FsError) -> WebError {
        let status = match e {
            FsError::NotFound { .. } => StatusCode::NOT_FOUND,
            FsError::PermissionDenied { .. } => StatusCode::FORBIDDEN,
            FsError::InvalidArgument { .. }
            | FsError::InvalidPath { .. }
            | FsError::NameTooLong { .. }
            | FsError::IsADirectory { .. }
            | FsError::NotADirectory { .. } => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        WebError(status, e.to_string())
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

/// Run a namespace read on the blocking pool (RocksDB reads block).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> FsResult<T> + Send + 'static,
) -> Result<T, WebError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(WebError::from),
        Err(e) => Err(WebError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("request failed: {e}"),
        )),
    }
}

impl Console {
    fn ns(&self) -> Result<Arc<Namespace>, WebError> {
        self.ns.upgrade().ok_or_else(|| {
            WebError(
                StatusCode::SERVICE_UNAVAILABLE,
                "the master is stopping".into(),
            )
        })
    }
}

async fn report(c: &Arc<Console>) -> Result<ReportResponse, WebError> {
    let ns = c.ns()?;
    blocking(move || Ok(ns.report())).await
}

#[derive(serde::Deserialize)]
struct PathQuery {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    start_after: Option<String>,
}

impl PathQuery {
    fn path(&self) -> String {
        match self.path.as_deref() {
            None | Some("") => "/".into(),
            Some(p) => p.to_string(),
        }
    }
}

/// A directory's entries (one page) or, for a file, the file itself.
async fn list(
    c: &Arc<Console>,
    path: String,
    after: String,
) -> Result<(Vec<FileStatus>, bool), WebError> {
    let ns = c.ns()?;
    blocking(move || ns.list(&path, &after, 0, &root())).await
}

async fn open(
    c: &Arc<Console>,
    path: String,
) -> Result<(FileStatus, Option<Vec<LocatedBlock>>), WebError> {
    let ns = c.ns()?;
    blocking(move || {
        let st = ns.get_status(&path, false, &root())?;
        if st.file_type == FileType::File as i32 {
            let (st, blocks) = ns.open(&path, &root())?;
            Ok((st, Some(blocks)))
        } else {
            Ok((st, None))
        }
    })
    .await
}

async fn api_info(State(c): State<Arc<Console>>) -> Result<Json<Value>, WebError> {
    Ok(Json(json!({
        "name": c.name,
        "cluster_id": c.ns()?.cluster_id(),
        "version": env!("CARGO_PKG_VERSION"),
        "started_ms": c.started_ms,
        "uptime_seconds": c.started.elapsed().as_secs(),
    })))
}

async fn api_report(State(c): State<Arc<Console>>) -> Result<Json<Value>, WebError> {
    Ok(Json(report_json(&report(&c).await?)))
}

async fn api_workers(State(c): State<Arc<Console>>) -> Result<Json<Value>, WebError> {
    let r = report_json(&report(&c).await?);
    Ok(Json(r["workers"].clone()))
}

async fn api_list(
    State(c): State<Arc<Console>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, WebError> {
    let path = q.path();
    let after = q.start_after.clone().unwrap_or_default();
    let (entries, more) = list(&c, path.clone(), after).await?;
    Ok(Json(json!({
        "path": path,
        "entries": entries.iter().map(status_json).collect::<Vec<_>>(),
        "has_more": more,
    })))
}

async fn api_file(
    State(c): State<Arc<Console>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, WebError> {
    let (st, blocks) = open(&c, q.path()).await?;
    Ok(Json(json!({
        "status": status_json(&st),
        "blocks": blocks.unwrap_or_default().iter().map(block_json).collect::<Vec<_>>(),
    })))
}

async fn api_conf(State(c): State<Arc<Console>>) -> Json<Value> {
    Json(json!({ "conf": c.conf_text }))
}

// ---------- HTML ----------

const STYLE: &str = "body{font-family:sans-serif;margin:0;color:#222}\
header{background:#1f3b57;color:#fff;padding:.6em 1em}header a{color:#fff;margin-right:1.2em}\
main{padding:1em}table{border-collapse:collapse;margin:.5em 0 1.5em}\
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}th{background:#eef}\
td.n{text-align:right;font-variant-numeric:tabular-nums}pre{background:#f6f6f6;padding:1em}\
.lost{color:#b00;font-weight:bold}.alive{color:#070}";

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Escape a query value (`path=`).
fn url_value(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_./~".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

/// A number cell: the exact value in `data-value`, shown as is.
fn num(key: &str, v: u64) -> String {
    format!("<td class=\"n\" data-key=\"{key}\" data-value=\"{v}\">{v}</td>")
}

/// A byte cell: the exact value in `data-value`, shown in binary units.
fn bytes(key: &str, v: u64) -> String {
    format!(
        "<td class=\"n\" data-key=\"{key}\" data-value=\"{v}\" title=\"{v} bytes\">{}</td>",
        human(v)
    )
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Curvine: {t}</title><link rel=\"icon\" href=\"data:,\">\
         <style>{STYLE}</style></head><body><header><strong>Curvine</strong> &nbsp; \
         <a href=\"/\" id=\"nav-overview\">Overview</a><a href=\"/workers\" id=\"nav-workers\">Workers</a>\
         <a href=\"/browse?path=/\" id=\"nav-browse\">Browse</a><a href=\"/conf\" id=\"nav-conf\">Configuration</a>\
         </header><main><h1>{t}</h1>\n{body}</main></body></html>\n",
        t = esc(title)
    ))
}

fn error_page(e: WebError) -> Response {
    let body = format!("<p class=\"error\">{}</p>", esc(&e.1));
    (e.0, page("Error", &body)).into_response()
}

fn uptime(secs: u64) -> String {
    format!(
        "{}d {:02}:{:02}:{:02}",
        secs / 86400,
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

async fn overview_page(State(c): State<Arc<Console>>) -> Response {
    let r = match report(&c).await {
        Ok(r) => r,
        Err(e) => return error_page(e),
    };
    let live = r.workers.iter().filter(|w| w.alive).count() as u64;
    let mut b = String::new();
    let _ = write!(
        b,
        "<table id=\"cluster\"><tr><th>Cluster</th><td data-key=\"name\">{}</td></tr>\
         <tr><th>Cluster id</th><td data-key=\"cluster_id\">{}</td></tr>\
         <tr><th>Version</th><td data-key=\"version\">{}</td></tr>\
         <tr><th>Uptime</th><td data-key=\"uptime\">{}</td></tr></table>",
        esc(&c.name),
        esc(&r.cluster_id),
        env!("CARGO_PKG_VERSION"),
        uptime(c.started.elapsed().as_secs())
    );
    if let Some(w) = &r.reporting {
        // blocks on the workers not heard from yet are not lost, and reads of them wait
        let _ = write!(
            b,
            "<h2>Worker reports</h2><p class=\"lost\" id=\"reporting-line\">{}: reads of \
             blocks on the others wait; re-replication waits.</p><table id=\"reporting\">\
             <tr><th>Reported</th>{}</tr><tr><th>Expected</th>{}</tr></table>",
            esc(&reporting_line(w)),
            num("reporting.reported", u64::from(w.reported)),
            num("reporting.expected", u64::from(w.expected)),
        );
    }
    let _ = write!(
        b,
        "<h2>Capacity</h2><table id=\"capacity\"><tr><th>Tier</th><th>Capacity</th>\
         <th>Used</th><th>Free</th><th>Block replicas</th></tr><tr><th>all</th>{}{}{}{}</tr>",
        bytes("capacity", r.capacity),
        bytes("used", r.used),
        bytes("free", r.capacity.saturating_sub(r.used)),
        num(
            "replicas",
            tiers_total(&r).iter().map(|t| t.blocks).sum::<u64>()
        ),
    );
    for t in tiers_total(&r) {
        let name = tier_name(t.tier);
        let _ = write!(
            b,
            "<tr data-tier=\"{name}\"><th>{name}</th>{}{}{}{}</tr>",
            bytes("tier.capacity", t.capacity),
            bytes("tier.used", t.used),
            bytes("tier.free", t.capacity.saturating_sub(t.used)),
            num("tier.blocks", t.blocks),
        );
    }
    b.push_str("</table>");
    let _ = write!(
        b,
        "<h2>Namespace</h2><table id=\"namespace\"><tr><th>Files</th>{}</tr>\
         <tr><th>Directories</th>{}</tr><tr><th>Blocks</th>{}</tr></table>",
        num("files", r.files),
        num("dirs", r.dirs),
        num("blocks", r.blocks)
    );
    let _ = write!(
        b,
        "<h2>Replication</h2><table id=\"replication\">\
         <tr><th>Under-replicated blocks</th>{}</tr><tr><th>Missing blocks</th>{}</tr>\
         <tr><th>Copies in flight</th>{}</tr><tr><th>Copies done</th>{}</tr>\
         <tr><th>Copies failed</th>{}</tr><tr><th>Bad replicas</th>{}</tr></table>",
        num("replication.under_replicated", r.under_replicated),
        num("replication.missing_blocks", r.missing_blocks),
        num("replication.copies_in_flight", r.copies_in_flight),
        num("replication.copies_done", r.copies_done),
        num("replication.copies_failed", r.copies_failed),
        num("replication.bad_replicas", r.bad_replicas),
    );
    let _ = write!(
        b,
        "<h2>Workers</h2><table id=\"worker-counts\"><tr><th>Live</th>{}</tr>\
         <tr><th>Lost</th>{}</tr></table><p><a href=\"/workers\" id=\"to-workers\">All workers</a> · \
         <a href=\"/browse?path=/\" id=\"to-browse\">Browse the namespace</a></p>",
        num("workers_live", live),
        num("workers_lost", r.workers.len() as u64 - live),
    );
    b.push_str("<h2>Background tasks</h2>");
    tasks_table(&mut b, "tasks", &r.tasks);
    page("Overview", &b).into_response()
}

async fn workers_page(State(c): State<Arc<Console>>) -> Response {
    let r = match report(&c).await {
        Ok(r) => r,
        Err(e) => return error_page(e),
    };
    let now = now_ms();
    let mut b = String::from(
        "<table id=\"workers\"><tr><th>Id</th><th>Address</th><th>State</th>\
         <th>Last heartbeat</th><th>Tier</th><th>Capacity</th><th>Used</th><th>Blocks</th>\
         <th>Scrubbed</th></tr>",
    );
    for w in &r.workers {
        let a = w.address.clone().unwrap_or_default();
        let (state, class) = if w.alive {
            ("alive", "alive")
        } else {
            ("lost", "lost")
        };
        let ago = (now - w.last_heartbeat_ms).max(0) as f64 / 1000.0;
        let rows = w.tiers.len().max(1);
        let _ = write!(
            b,
            "<tr data-worker=\"{id}\"><td rowspan=\"{rows}\" data-key=\"id\">{id}</td>\
             <td rowspan=\"{rows}\" data-key=\"address\">{addr}</td>\
             <td rowspan=\"{rows}\" class=\"{class}\" data-key=\"state\">{state}</td>\
             <td rowspan=\"{rows}\" data-key=\"last_heartbeat_ms\" data-value=\"{hb}\">{ago:.1} s ago</td>",
            id = a.worker_id,
            addr = esc(&format!("{}:{}", a.host, a.data_port)),
            hb = w.last_heartbeat_ms,
        );
        let scrub = bytes("scrubbed_bytes", w.scrubbed_bytes);
        if w.tiers.is_empty() {
            let _ = write!(b, "<td></td><td></td><td></td><td></td>{scrub}</tr>");
        }
        for (i, t) in w.tiers.iter().enumerate() {
            if i > 0 {
                let _ = write!(b, "<tr data-worker=\"{}\">", a.worker_id);
            }
            let _ = write!(
                b,
                "<td data-key=\"tier\">{}</td>{}{}{}{}</tr>",
                tier_name(t.tier),
                bytes("tier.capacity", t.capacity),
                bytes("tier.used", t.used),
                num("tier.blocks", t.blocks),
                if i == 0 {
                    scrub.clone()
                } else {
                    "<td></td>".into()
                },
            );
        }
    }
    b.push_str("</table>");
    for w in &r.workers {
        let a = w.address.clone().unwrap_or_default();
        let _ = write!(
            b,
            "<h2>Tasks of worker {} ({})</h2>",
            a.worker_id,
            esc(&format!("{}:{}", a.host, a.data_port))
        );
        tasks_table(&mut b, &format!("tasks-{}", a.worker_id), &w.tasks);
    }
    page("Workers", &b).into_response()
}

/// Background tasks (`curvine_common::tasks`): name, state, what it does or its last
/// error, rounds and failures.
fn tasks_table(b: &mut String, id: &str, tasks: &[curvine_common::proto::TaskReport]) {
    let _ = write!(
        b,
        "<table id=\"{id}\"><tr><th>Task</th><th>State</th><th>Doing / last error</th>\
         <th>Runs</th><th>Errors</th></tr>"
    );
    for t in tasks {
        let state = curvine_common::tasks::state_name(t.state);
        let what = if state == "busy" {
            &t.detail
        } else {
            &t.last_error
        };
        let _ = write!(
            b,
            "<tr data-task=\"{name}\"><td>{name}</td><td class=\"{state}\">{state}</td>\
             <td>{what}</td>{}{}</tr>",
            num("runs", t.runs),
            num("errors", t.errors),
            name = esc(&t.name),
            what = esc(what),
        );
    }
    b.push_str("</table>");
}

fn breadcrumb(path: &str) -> String {
    let mut b = String::from("<p id=\"breadcrumb\"><a href=\"/browse?path=/\">/</a>");
    let mut acc = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        acc.push('/');
        acc.push_str(part);
        let _ = write!(
            b,
            " <a href=\"/browse?path={}\">{}</a> /",
            url_value(&acc),
            esc(part)
        );
    }
    b.push_str("</p>");
    b
}

async fn browse_page(State(c): State<Arc<Console>>, Query(q): Query<PathQuery>) -> Response {
    let path = q.path();
    let (st, blocks) = match open(&c, path.clone()).await {
        Ok(v) => v,
        Err(e) => return error_page(e),
    };
    let mut b = breadcrumb(&st.path);
    if st.file_type == FileType::Dir as i32 {
        let after = q.start_after.clone().unwrap_or_default();
        let (entries, more) = match list(&c, path, after).await {
            Ok(v) => v,
            Err(e) => return error_page(e),
        };
        b.push_str(
            "<table id=\"entries\"><tr><th>Name</th><th>Type</th><th>Size</th><th>Mode</th>\
             <th>Owner</th><th>Replicas</th></tr>",
        );
        for e in &entries {
            let _ = write!(
                b,
                "<tr><td><a href=\"/browse?path={}\" data-key=\"name\">{}</a></td>\
                 <td data-key=\"type\">{}</td>{}<td data-key=\"mode\">{:o}</td>\
                 <td data-key=\"owner\">{}:{}</td>{}</tr>",
                url_value(&e.path),
                esc(&e.name),
                type_name(e.file_type),
                bytes("len", e.len),
                e.mode & 0o7777,
                e.uid,
                e.gid,
                num("replicas", u64::from(e.replicas)),
            );
        }
        b.push_str("</table>");
        if let (true, Some(last)) = (more, entries.last()) {
            let _ = write!(
                b,
                "<p><a id=\"more\" href=\"/browse?path={}&amp;start_after={}\">More</a></p>",
                url_value(&st.path),
                url_value(&last.name)
            );
        }
        return page(&format!("Browse {}", st.path), &b).into_response();
    }
    let _ = write!(
        b,
        "<table id=\"file\"><tr><th>Path</th><td data-key=\"path\">{}</td></tr>\
         <tr><th>Type</th><td data-key=\"type\">{}</td></tr><tr><th>Size</th>{}</tr>\
         <tr><th>Mode</th><td data-key=\"mode\">{:o}</td></tr>\
         <tr><th>Owner</th><td data-key=\"owner\">{}:{}</td></tr><tr><th>Replicas</th>{}</tr>\
         <tr><th>Block size</th>{}</tr><tr><th>Storage tier</th><td>{}</td></tr>\
         <tr><th>Complete</th><td data-key=\"complete\">{}</td></tr></table>",
        esc(&st.path),
        type_name(st.file_type),
        bytes("len", st.len),
        st.mode & 0o7777,
        st.uid,
        st.gid,
        num("replicas", u64::from(st.replicas)),
        bytes("block_size", st.block_size),
        tier_name(st.storage_tier),
        st.complete,
    );
    if let Some(blocks) = blocks {
        b.push_str(
            "<h2>Blocks</h2><table id=\"blocks\"><tr><th>Block</th><th>Offset</th>\
             <th>Length</th><th>Worker</th><th>Address</th><th>Tier</th></tr>",
        );
        for blk in &blocks {
            let rows = blk.locations.len().max(1);
            let _ = write!(
                b,
                "<tr data-block=\"{id}\"><td rowspan=\"{rows}\" data-key=\"block_id\">{id}</td>\
                 <td rowspan=\"{rows}\" class=\"n\" data-key=\"offset\" data-value=\"{off}\">{off}</td>\
                 <td rowspan=\"{rows}\" class=\"n\" data-key=\"len\" data-value=\"{len}\">{len}</td>",
                id = blk.block_id,
                off = blk.offset,
                len = blk.len,
            );
            if blk.locations.is_empty() {
                b.push_str("<td colspan=\"3\" class=\"lost\">no live replica</td></tr>");
            }
            for (i, l) in blk.locations.iter().enumerate() {
                if i > 0 {
                    let _ = write!(b, "<tr data-block=\"{}\">", blk.block_id);
                }
                let a = l.address.clone().unwrap_or_default();
                let _ = write!(
                    b,
                    "<td data-key=\"worker_id\">{}</td><td data-key=\"address\">{}</td>\
                     <td data-key=\"tier\">{}</td></tr>",
                    l.worker_id,
                    esc(&format!("{}:{}", a.host, a.data_port)),
                    tier_name(l.tier)
                );
            }
        }
        b.push_str("</table>");
    }
    page(&format!("File {}", st.path), &b).into_response()
}

async fn conf_page(State(c): State<Arc<Console>>) -> Html<String> {
    page(
        "Configuration",
        &format!("<pre id=\"conf\">{}</pre>", esc(&c.conf_text)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_masks_the_token() {
        let mut c = ClusterConf::default();
        c.cluster.auth_token = "s3cret-token".into();
        let text = masked_conf(&c);
        assert!(!text.contains("s3cret-token"));
        assert!(text.contains("********"));
    }

    #[test]
    fn conf_masks_mount_secrets() {
        let mut c = ClusterConf::default();
        let mut m = curvine_common::mount::MountConf {
            ufs: "s3://b/p".into(),
            path: "/m".into(),
            ..Default::default()
        };
        m.options
            .insert("secret_access_key".into(), "s3cret-key".into());
        m.options
            .insert("session_token".into(), "s3cret-token".into());
        m.options.insert("region".into(), "us-east-1".into());
        c.mount.push(m);
        let text = masked_conf(&c);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("us-east-1"), "{text}");
    }

    #[test]
    fn html_and_urls_are_escaped() {
        assert_eq!(esc("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
        assert_eq!(url_value("/a b/c&d"), "/a%20b/c%26d");
    }
}
