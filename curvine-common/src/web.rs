//! The HTTP server on each process's web port (docs/web.md): `/metrics` in the Prometheus
//! text format, `/healthz` (the process is up) and `/readyz` (it does its job: the master
//! serves, a worker is registered, a mount is mounted), plus whatever routes the process
//! adds (the master's console and `/api`).
//!
//! Unknown paths get 404, request bodies over [`MAX_BODY`] get 413, a handler that panics
//! answers 500 and the server goes on. With `cluster.auth_token` set every route except
//! `/metrics`, `/healthz`, `/readyz` (those too with `web.metrics_auth`) and the login form
//! needs the token, as `Authorization: Bearer <token>` or the [`TOKEN_COOKIE`] cookie the
//! login form sets.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use futures_util::FutureExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::conf::ClusterConf;
use crate::error::{FsError, FsResult};

pub use prometheus;

/// Largest request body accepted (the login form is the only route that reads one).
pub const MAX_BODY: usize = 8 << 10;

/// The cookie the login form sets; holds the cluster token.
pub const TOKEN_COOKIE: &str = "curvine_token";

/// The routes that stay open without a token unless `web.metrics_auth` is set.
const PROBE_PATHS: [&str; 3] = ["/metrics", "/healthz", "/readyz"];

/// Whether the process does its job now (`/readyz`): `Err` says why not.
pub type ReadyFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Sets the gauges that are read at scrape time; may block (runs on the blocking pool).
pub type RefreshFn = Arc<dyn Fn() + Send + Sync>;

/// What one process's web server answers on its probes and `/metrics`.
#[derive(Clone)]
pub struct Probes {
    pub ready: ReadyFn,
    pub refresh: Option<RefreshFn>,
}

/// Who may use the web port: nobody needs a token unless `cluster.auth_token` is set.
#[derive(Clone)]
pub struct WebAuth {
    token: Option<Arc<str>>,
    metrics_auth: bool,
}

impl WebAuth {
    pub fn new(conf: &ClusterConf) -> WebAuth {
        let t = &conf.cluster.auth_token;
        WebAuth {
            token: (!t.is_empty()).then(|| Arc::from(t.as_str())),
            metrics_auth: conf.web.metrics_auth,
        }
    }

    /// Whether a request to `path` with `headers` may be served.
    pub fn allows(&self, path: &str, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        if path == "/login" || (!self.metrics_auth && PROBE_PATHS.contains(&path)) {
            return true;
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == TOKEN_COOKIE)
            .map(|(_, v)| v);
        [bearer, cookie]
            .into_iter()
            .flatten()
            .any(|given| same(given.as_bytes(), token.as_bytes()))
    }
}

/// Compare without an early exit on the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Metrics every process exports: its version and when it started.
struct ProcessMetrics {
    build: prometheus::IntGaugeVec,
    start: prometheus::IntGauge,
}

static PROCESS: LazyLock<ProcessMetrics> = LazyLock::new(|| {
    let build = register(
        prometheus::IntGaugeVec::new(
            prometheus::Opts::new(
                "curvine_build_info",
                "Always 1; the labels name the running version and role.",
            ),
            &["version", "role"],
        )
        .expect("valid metric"),
    );
    let start = register(
        prometheus::IntGauge::new(
            "curvine_process_start_time_seconds",
            "Unix time the process started its web server, in seconds.",
        )
        .expect("valid metric"),
    );
    ProcessMetrics { build, start }
});

/// Whether this process records metrics on its request paths (`web.metrics`).
static RECORDING: AtomicBool = AtomicBool::new(true);

/// Whether metrics are recorded: with `web.metrics = false` every counter and histogram
/// update on the request paths (master calls, the WAL sync, worker and client bytes,
/// client calls, mount requests) is skipped, clock readings included, so the cost of
/// recording can be measured against a run without it (`bin/metrics-cost.sh`).
#[inline]
pub fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Set once by a process's main from its conf (`web.metrics`).
pub fn set_recording(on: bool) {
    RECORDING.store(on, Ordering::Relaxed);
}

/// Register `metric` in the process's registry; a failure (a name taken twice, a bug) is
/// logged and leaves the metric working but unexported.
pub fn register<M: prometheus::core::Collector + Clone + 'static>(metric: M) -> M {
    if let Err(e) = prometheus::register(Box::new(metric.clone())) {
        error!(error = %e, "metric not registered");
    }
    metric
}

/// Record the version and role (`master`, `worker`, `fuse`) and the start time.
pub fn note_process(role: &str) {
    PROCESS
        .build
        .with_label_values(&[env!("CARGO_PKG_VERSION"), role])
        .set(1);
    if PROCESS.start.get() == 0 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        PROCESS.start.set(i64::try_from(now).unwrap_or(i64::MAX));
    }
}

/// The routes every process serves: `/metrics`, `/healthz`, `/readyz`.
pub fn probe_routes(probes: Probes) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(probes)
}

/// Add the login form, the 404 fallback, auth, the body limit and the panic guard to `app`.
pub fn finish(app: Router, auth: WebAuth) -> Router {
    let login_form = Router::new()
        .route("/login", get(login_page).post(login))
        .with_state(auth.clone());
    app.merge(login_form)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(auth, guard))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(limit_and_catch))
}

/// Bind `host:port` for a web server; `Ok(None)` when the port is 0 (off).
pub async fn bind(host: &str, port: u16) -> FsResult<Option<TcpListener>> {
    if port == 0 {
        return Ok(None);
    }
    let addr = format!("{host}:{port}");
    TcpListener::bind(&addr)
        .await
        .map(Some)
        .map_err(|e| FsError::io_ctx(format!("bind web address {addr}"), e))
}

/// Serve `app` on `listener` until `cancel` fires; connections still open a few seconds
/// later are dropped.
pub fn spawn(
    listener: TcpListener,
    app: Router,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let addr = listener.local_addr().ok();
    tokio::spawn(async move {
        let stop = cancel.clone();
        let serve = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(stop.cancelled_owned());
        tokio::select! {
            r = serve => {
                if let Err(e) = r {
                    error!(?addr, error = %e, "web server failed");
                }
            }
            // graceful shutdown waits for open connections; a browser may keep one idle
            _ = async {
                cancel.cancelled().await;
                tokio::time::sleep(Duration::from_secs(3)).await;
            } => {}
        }
    })
}

async fn metrics(State(p): State<Probes>) -> Response {
    if let Some(refresh) = p.refresh.clone() {
        if let Err(e) = tokio::task::spawn_blocking(move || refresh()).await {
            warn!(error = %e, "refreshing metrics failed");
            return internal_error();
        }
    }
    let families = prometheus::gather();
    let mut out = String::new();
    match prometheus::TextEncoder::new().encode_utf8(&families, &mut out) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            out,
        )
            .into_response(),
        Err(e) => {
            warn!(error = %e, "encoding metrics failed");
            internal_error()
        }
    }
}

async fn readyz(State(p): State<Probes>) -> Response {
    match (p.ready)() {
        Ok(()) => "ready\n".into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

fn internal_error() -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response()
}

async fn guard(State(auth): State<WebAuth>, req: Request, next: Next) -> Response {
    if auth.allows(req.uri().path(), req.headers()) {
        return next.run(req).await;
    }
    let wants_html = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"));
    if wants_html && !req.uri().path().starts_with("/api/") {
        return Redirect::to("/login").into_response();
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "a token is required\n",
    )
        .into_response()
}

/// Refuse declared bodies over `MAX_BODY` before reading them, and answer 500 when a
/// handler panics.
async fn limit_and_catch(req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response();
    }
    let path = req.uri().path().to_string();
    match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(r) => r,
        Err(_) => {
            error!(%path, "web handler panicked");
            internal_error()
        }
    }
}

const LOGIN_PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Curvine: sign in</title>
<link rel="icon" href="data:,"></head>
<body><h1>Curvine</h1><form method="post" action="/login">
<label>Cluster token <input type="password" name="token" autofocus></label>
<button type="submit">Sign in</button></form></body></html>
"#;

async fn login_page() -> Html<&'static str> {
    Html(LOGIN_PAGE)
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(auth): State<WebAuth>, Form(f): Form<LoginForm>) -> Response {
    let ok = auth
        .token
        .as_ref()
        .is_none_or(|t| same(f.token.as_bytes(), t.as_bytes()));
    if !ok {
        return (StatusCode::UNAUTHORIZED, Html(LOGIN_PAGE)).into_response();
    }
    let cookie = format!(
        "{TOKEN_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        f.token
    );
    match HeaderValue::from_str(&cookie) {
        Ok(v) => ([(header::SET_COOKIE, v)], Redirect::to("/")).into_response(),
        Err(_) => (StatusCode::BAD_REQUEST, "the token is not a valid cookie\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(token: &str, metrics_auth: bool) -> WebAuth {
        let mut c = ClusterConf::default();
        c.cluster.auth_token = token.into();
        c.web.metrics_auth = metrics_auth;
        WebAuth::new(&c)
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k, HeaderValue::from_str(v).expect("ascii"));
        }
        h
    }

    #[test]
    fn no_token_allows_everything() {
        assert!(auth("", false).allows("/api/report", &HeaderMap::new()));
    }

    #[test]
    fn token_guards_console_but_not_probes() {
        let a = auth("s3cret", false);
        assert!(!a.allows("/", &HeaderMap::new()));
        assert!(!a.allows("/api/report", &HeaderMap::new()));
        assert!(a.allows("/metrics", &HeaderMap::new()));
        assert!(a.allows("/readyz", &HeaderMap::new()));
        assert!(a.allows("/login", &HeaderMap::new()));
        let b = headers(&[(header::AUTHORIZATION, "Bearer s3cret")]);
        assert!(a.allows("/api/report", &b));
        let wrong = headers(&[(header::AUTHORIZATION, "Bearer s3cre")]);
        assert!(!a.allows("/api/report", &wrong));
        let c = headers(&[(header::COOKIE, "x=1; curvine_token=s3cret")]);
        assert!(a.allows("/", &c));
    }

    #[test]
    fn metrics_auth_guards_probes() {
        let a = auth("s3cret", true);
        assert!(!a.allows("/metrics", &HeaderMap::new()));
        assert!(!a.allows("/healthz", &HeaderMap::new()));
        assert!(a.allows("/login", &HeaderMap::new()));
    }
}
