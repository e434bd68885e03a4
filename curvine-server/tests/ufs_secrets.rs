//! Mount secrets against a real S3 server on loopback (s3s-fs): only registered workers
//! get them from the master, and no listing, reply, page or log line shows them. Every
//! log line of the binary (all targets, DEBUG) is kept to check the last.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use curvine_client::proto::MountInfo;
use curvine_client::CurvineFs;
use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::proto::GetMountRequest;
use curvine_server::testing::s3::{object_data, options as s3_options, S3Server, SECRET_KEY};
use curvine_server::testing::MiniCluster;
use tokio::runtime::Runtime;

const BUCKET: &str = "sec";

struct Env {
    rt: Runtime,
    cluster: MiniCluster,
    fs: CurvineFs,
    s3: S3Server,
}

/// Everything logged by this process.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        // as the servers filter it (curvine-server's main), at DEBUG
        let filter =
            curvine_server::ufs::without_secret_logs(tracing_subscriber::EnvFilter::new("debug"));
        tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_env_filter(filter)
            .with_ansi(false)
            .try_init()
            .expect("install the log capture");
        logs
    })
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        logs();
        let rt = curvine_rt();
        let (cluster, fs, s3) = rt.block_on(async {
            let s3 = S3Server::start(&[BUCKET]).await.expect("start s3s-fs");
            let cluster = MiniCluster::builder()
                .workers(1)
                .start()
                .await
                .expect("cluster");
            let fs = CurvineFs::connect(cluster.client_conf())
                .await
                .expect("connect");
            (cluster, fs, s3)
        });
        Env {
            rt,
            cluster,
            fs,
            s3,
        }
    })
}

fn curvine_rt() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime")
}

fn run<F: std::future::Future<Output = ()>>(f: impl FnOnce(&'static Env) -> F) {
    let e = env();
    e.rt.block_on(f(e));
}

fn mount_info(uri: &str, path: &str, options: HashMap<String, String>) -> MountInfo {
    MountInfo {
        path: path.into(),
        ufs_uri: uri.into(),
        options,
        sync_interval_ms: 60_000,
        ..Default::default()
    }
}

async fn put(s3: &S3Server, key: &str, bytes: &[u8]) {
    curvine_server::ufs::build(&format!("s3://{BUCKET}"), &s3_options(&s3.endpoint()))
        .expect("operator")
        .write(key, bytes.to_vec())
        .await
        .expect("put");
}

/// GetMount over gRPC, as a worker would call it.
async fn get_mount(
    cluster: &MiniCluster,
    req: GetMountRequest,
) -> curvine_common::proto::GetMountResponse {
    let mut c = MasterServiceClient::connect(format!("http://{}", cluster.master_addr()))
        .await
        .expect("connect over gRPC");
    c.get_mount(req).await.expect("get_mount").into_inner()
}

#[test]
fn get_mount_gives_secrets_only_to_a_registered_worker() {
    run(|e| async move {
        let v = object_data(70_000, 1);
        put(&e.s3, "t1/obj", &v).await;
        let m =
            e.fs.mount(mount_info(
                &format!("s3://{BUCKET}/t1"),
                "/t1",
                s3_options(&e.s3.endpoint()),
            ))
            .await
            .unwrap();
        assert_eq!(m.options["secret_access_key"], "***");
        // a caller that is no worker, one naming a live worker without its session key,
        // and one with a made-up key: the mount, secrets out
        for (worker_id, session) in [(0, String::new()), (1, String::new()), (1, "0".repeat(32))] {
            let r = get_mount(
                &e.cluster,
                GetMountRequest {
                    mount_id: m.mount_id,
                    worker_id,
                    session,
                },
            )
            .await;
            assert!(r.redacted);
            let info = r.mount.unwrap();
            assert_eq!(info.ufs_uri, format!("s3://{BUCKET}/t1"));
            assert_eq!(info.options["secret_access_key"], "***");
            assert_eq!(info.options["region"], "us-east-1");
        }
        // the worker got them: a cold read goes through it
        assert!(e.fs.read_file("/t1/obj").await.unwrap() == v);
        for listed in e.fs.mounts().await.unwrap() {
            assert!(!format!("{listed:?}").contains(SECRET_KEY), "{listed:?}");
        }
        e.fs.umount("/t1").await.unwrap();
    });
}

#[test]
fn no_log_line_shows_a_secret() {
    run(|e| async move {
        let v = object_data(5_000, 2);
        put(&e.s3, "t2/obj", &v).await;
        let uri = format!("s3://{BUCKET}/t2");
        e.fs.mount(mount_info(&uri, "/t2", s3_options(&e.s3.endpoint())))
            .await
            .unwrap();
        assert!(e.fs.read_file("/t2/obj").await.unwrap() == v);
        let mut wrong = s3_options(&e.s3.endpoint());
        wrong.insert("secret_access_key".into(), "wrong-secret-value".into());
        let err =
            e.fs.mount(mount_info(&uri, "/t2-wrong", wrong))
                .await
                .unwrap_err();
        assert!(!err.to_string().contains("wrong-secret-value"), "{err}");
        e.fs.umount("/t2").await.unwrap();
        let text = String::from_utf8_lossy(&logs().0.lock().unwrap()).into_owned();
        assert!(text.contains("mounted"), "nothing was logged:\n{text}");
        for secret in [SECRET_KEY, "wrong-secret-value"] {
            assert!(!text.contains(secret), "a log line shows {secret}:\n{text}");
        }
    });
}
