//! One request id follows a client operation through the processes: the client's
//! `client.call` span, the master's `master.call` span of that call, and the worker's
//! `worker.write` / `worker.read` span of the block the call allocated or located all
//! carry it. The spans are captured in this process (client, master and worker share
//! it in a MiniCluster); one test in its own binary, as it installs the global
//! subscriber.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use curvine_client::CurvineFs;
use curvine_common::types::REQUEST_TARGET;
use curvine_server::testing::MiniCluster;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// A span as opened: its name and fields, as text.
#[derive(Debug, Clone)]
struct Opened {
    name: &'static str,
    fields: HashMap<String, String>,
}

impl Opened {
    fn field(&self, f: &str) -> &str {
        self.fields.get(f).map_or("", String::as_str)
    }
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

struct Capture;

fn opened() -> &'static Mutex<Vec<Opened>> {
    static SPANS: OnceLock<Mutex<Vec<Opened>>> = OnceLock::new();
    SPANS.get_or_init(Mutex::default)
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        opened().lock().unwrap().push(Opened {
            name: attrs.metadata().name(),
            fields,
        });
    }
}

fn spans(name: &str, method: Option<&str>) -> Vec<Opened> {
    opened()
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.name == name && method.is_none_or(|m| s.field("method") == m))
        .cloned()
        .collect()
}

/// The request id of the only `client.call` span of `method` opened since `from`.
fn client_call(method: &str) -> String {
    let calls = spans("client.call", Some(method));
    assert_eq!(calls.len(), 1, "{calls:?}");
    let req = calls[0].field("req").to_string();
    assert!(req.contains('-') && req != "-", "{req}");
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_request_id_in_client_master_and_worker_spans() {
    tracing_subscriber::registry()
        .with(Capture.with_filter(Targets::new().with_target(REQUEST_TARGET, Level::DEBUG)))
        .init();
    let cluster = MiniCluster::builder().workers(1).start().await.unwrap();
    let mut conf = cluster.client_conf();
    conf.client.short_circuit = false; // the read streams from the worker
    let fs = CurvineFs::connect(conf).await.unwrap();
    let data = vec![7u8; 300_000];

    // the create allocates the file's one block: the worker's write carries its id
    fs.write_file("/traced", &data).await.unwrap();
    let create = client_call("Create");
    let master: Vec<_> = spans("master.call", Some("Create"));
    assert!(
        master.iter().any(|s| s.field("req") == create),
        "{create} not in {master:?}"
    );
    let writes = spans("worker.write", None);
    assert!(
        writes.iter().any(|s| s.field("req") == create),
        "{create} not in {writes:?}"
    );

    // the open locates it: the worker's read carries the open's id
    assert_eq!(fs.read_file("/traced").await.unwrap(), data);
    let open = client_call("Open");
    assert_ne!(open, create);
    let master = spans("master.call", Some("Open"));
    assert!(
        master.iter().any(|s| s.field("req") == open),
        "{open} not in {master:?}"
    );
    let reads = spans("worker.read", None);
    assert!(
        reads.iter().any(|s| s.field("req") == open),
        "{open} not in {reads:?}"
    );
    let client_reads = spans("client.read", None);
    assert!(
        client_reads.iter().any(|s| s.field("req") == open),
        "{client_reads:?}"
    );
    // calls that carry no caller (worker heartbeats) have no id
    assert!(spans("master.call", Some("Heartbeat"))
        .iter()
        .all(|s| s.field("req") == "-"));
    cluster.shutdown().await.unwrap();
}
