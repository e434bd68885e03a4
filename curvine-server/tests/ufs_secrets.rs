//! Mount secrets against a real S3 server on loopback (s3s-fs): only registered workers
//! get them from the master, and no listing, reply, page or log line shows them. Every
//! log line of the binary (all targets, DEBUG) is kept to check the last.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use common::ufs::{mount_info, run_s3, S3Env};
use curvine_client::CurvineFs;
use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::proto::GetMountRequest;
use curvine_server::testing::s3::{
    object_data, options as s3_options, S3Server, ACCESS_KEY, SECRET_KEY,
};
use curvine_server::testing::MiniCluster;
use tokio::runtime::Runtime;

const BUCKET: &str = "sec";

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

/// One cluster (1 worker) and one S3 server for the tests of this binary, started
/// after the log capture.
fn run<F: std::future::Future<Output = ()>>(f: impl FnOnce(&'static S3Env) -> F) {
    logs();
    run_s3(&[BUCKET], 1, |_| {}, f)
}

fn curvine_rt() -> Runtime {
    common::runtime()
}

async fn put(s3: &S3Server, key: &str, bytes: &[u8]) {
    common::ufs::put(s3, BUCKET, key, bytes).await
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

/// The test server's endpoint and region: no keys.
fn keyless(endpoint: &str) -> HashMap<String, String> {
    let mut o = s3_options(endpoint);
    o.remove("access_key_id");
    o.remove("secret_access_key");
    o
}

/// A credentials file in AWS's shared format, with the test server's keys.
fn credentials_file(dir: &std::path::Path) -> String {
    let file = dir.join("s3.credentials");
    std::fs::write(
        &file,
        format!(
            "# for the test bucket\n[default]\naws_access_key_id = {ACCESS_KEY}\n\
             aws_secret_access_key = {SECRET_KEY}\n"
        ),
    )
    .unwrap();
    file.display().to_string()
}

#[test]
fn a_credentials_file_gives_the_keys_and_its_values_are_never_shown() {
    run(|e| async move {
        let dir = tempfile::tempdir().unwrap();
        let file = credentials_file(dir.path());
        let v = object_data(100_000, 3);
        put(&e.s3, "t3/obj", &v).await;
        let mut o = keyless(&e.s3.endpoint());
        o.insert("credentials_file".into(), file.clone());
        let m =
            e.fs.mount(mount_info(&format!("s3://{BUCKET}/t3"), "/t3", o))
                .await
                .unwrap();
        assert_eq!(m.options["credentials_file"], file, "the file is named");
        assert!(!m.options.contains_key("secret_access_key"));
        // the master read the file when mounting; workers get its values from the master
        std::fs::remove_file(&file).unwrap();
        assert!(e.fs.read_file("/t3/obj").await.unwrap() == v);
        let r = get_mount(
            &e.cluster,
            GetMountRequest {
                mount_id: m.mount_id,
                ..Default::default()
            },
        )
        .await;
        let info = r.mount.unwrap();
        assert!(!info.options.contains_key("secret_access_key"), "{info:?}");
        assert!(!info.options.contains_key("access_key_id"), "{info:?}");
        let listed = e.fs.mounts().await.unwrap();
        let mine = listed.iter().find(|m| m.path == "/t3").unwrap();
        assert!(!format!("{mine:?}").contains(SECRET_KEY), "{mine:?}");
        assert!(!format!("{mine:?}").contains(ACCESS_KEY), "{mine:?}");
        e.fs.umount("/t3").await.unwrap();
    });
}

#[test]
fn a_bad_credentials_file_is_refused_naming_it_and_nothing_is_mounted() {
    run(|e| async move {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("s3://{BUCKET}/t4");
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let missing = dir.path().join("missing").display().to_string();
        let cases = [
            (missing, "No such file"),
            (
                file("garbled", "s3cr3t-value\n"),
                "line 1: expected key = value",
            ),
            (
                file("unknown", "secret_key = s3cr3t-value\n"),
                "line 1: unknown option \"secret_key\"",
            ),
            (
                file("twice", "secret_access_key = s3cr3t-value\n"),
                "given as an option too",
            ),
        ];
        for (path, why) in cases {
            let mut o = keyless(&e.s3.endpoint());
            o.insert("credentials_file".into(), path.clone());
            if why.contains("option too") {
                o.insert("secret_access_key".into(), "other".into());
            }
            let err = e.fs.mount(mount_info(&uri, "/t4", o)).await.unwrap_err();
            let text = err.to_string();
            assert!(text.contains(&path), "{text}");
            assert!(text.contains(why), "{text}");
            assert!(!text.contains("s3cr3t-value"), "{text}");
            assert!(!e.fs.exists("/t4").await.unwrap(), "{path}: /t4 was made");
        }
        // a file with the wrong secret: the store refuses, nothing is mounted
        let wrong = file(
            "wrong",
            &format!("access_key_id = {ACCESS_KEY}\nsecret_access_key = s3cr3t-value\n"),
        );
        let mut o = keyless(&e.s3.endpoint());
        o.insert("credentials_file".into(), wrong);
        let err = e.fs.mount(mount_info(&uri, "/t4", o)).await.unwrap_err();
        assert!(
            matches!(err, curvine_client::FsError::UnderStore { .. }),
            "{err:?}"
        );
        assert!(!err.to_string().contains("s3cr3t-value"), "{err}");
        assert!(!e.fs.exists("/t4").await.unwrap());
    });
}

/// Its own cluster: `[[mount]]` entries, one with a credentials file and one with its
/// secret inline. The console's configuration shows neither secret; a restarted master
/// reads the file again (and, once it is gone, the mount's calls fail naming it).
#[test]
fn a_conf_mount_reads_its_credentials_file_at_each_start() {
    let rt = curvine_rt();
    rt.block_on(async {
        let s3 = S3Server::start(&["confmnt"]).await.unwrap();
        common::ufs::put(&s3, "confmnt", "a/obj", b"from the bucket").await;
        let dir = tempfile::tempdir().unwrap();
        let file = credentials_file(dir.path());
        let endpoint = s3.endpoint();
        let f = file.clone();
        let mut cluster = MiniCluster::builder()
            .workers(1)
            .conf(move |c| {
                let mut by_file = curvine_common::mount::MountConf {
                    ufs: "s3://confmnt/a".into(),
                    path: "/by-file".into(),
                    ..Default::default()
                };
                by_file.options = keyless(&endpoint).into_iter().collect();
                by_file.options.insert("credentials_file".into(), f.clone());
                let mut inline = curvine_common::mount::MountConf {
                    ufs: "s3://confmnt".into(),
                    path: "/inline".into(),
                    ..Default::default()
                };
                inline.options = s3_options(&endpoint).into_iter().collect();
                c.mount = vec![by_file, inline];
            })
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        assert_eq!(
            fs.read_file("/by-file/obj").await.unwrap(),
            b"from the bucket"
        );
        assert_eq!(
            fs.read_file("/inline/a/obj").await.unwrap(),
            b"from the bucket"
        );
        for page in ["/api/conf", "/conf"] {
            let r = curvine_server::testing::http::get(cluster.master_web_addr(), page, &[])
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{page}");
            let body = &r.body;
            assert!(body.contains("confmnt"), "{page}: {body}");
            assert!(!body.contains(SECRET_KEY), "{page} shows a secret: {body}");
        }

        cluster.restart_master().await.unwrap();
        cluster.wait_workers_live(1).await.unwrap();
        common::ufs::put(&s3, "confmnt", "a/new", b"new").await;
        fs.resync("/by-file").await.unwrap();
        assert_eq!(fs.read_file("/by-file/new").await.unwrap(), b"new");

        std::fs::remove_file(&file).unwrap();
        cluster.restart_master().await.unwrap();
        cluster.wait_workers_live(1).await.unwrap();
        let err = fs.resync("/by-file").await.unwrap_err();
        assert!(err.to_string().contains(&file), "{err}");
        cluster.shutdown().await.unwrap();
    });
}

/// Credentials only in the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_REGION`): OpenDAL's S3 service reads them when the options give none. The body
/// runs in a child process (this binary, this test alone) with those variables set, so
/// no other test shares its environment.
#[test]
fn aws_environment_credentials_are_used_when_no_key_is_given() {
    const NAME: &str = "aws_environment_credentials_are_used_when_no_key_is_given";
    if std::env::var_os("CURVINE_TEST_AWS_ENV_CHILD").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env("CURVINE_TEST_AWS_ENV_CHILD", "1")
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_REGION", "us-east-1")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_ENDPOINT_URL")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
        return;
    }
    let rt = curvine_rt();
    rt.block_on(async {
        let s3 = S3Server::start(&["envbkt"]).await.unwrap();
        let v = object_data(30_000, 4);
        common::ufs::put(&s3, "envbkt", "obj", &v).await;
        let cluster = MiniCluster::builder().workers(1).start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        // the endpoint only: region and keys come from the environment
        let o: HashMap<String, String> = [("endpoint".to_string(), s3.endpoint())].into();
        let m = fs
            .mount(mount_info("s3://envbkt", "/env", o))
            .await
            .unwrap();
        assert_eq!(m.options.len(), 1, "{m:?}");
        assert!(fs.read_file("/env/obj").await.unwrap() == v);
        cluster.shutdown().await.unwrap();
    });
}
