//! An `azblob://` mount against a real Azure Blob server on loopback (Azurite, from
//! npm, installed by `bin/setup.sh`): list, stat and read-through of a container's
//! blobs, warm reads from cache, a `through` write landing in the container, the
//! account key masked, wrong credentials refused. Built with `--features ufs-azblob`.
//! Block size 96 KiB so that multi-block blobs stay small.

use std::collections::HashMap;
use std::time::Duration;

use curvine_client::proto::{MountInfo, MountMode};
use curvine_client::{CurvineFs, FileType, FsError};
use curvine_common::conf::{ByteSize, Dur};
use curvine_server::testing::azurite::{options as az_options, Azurite, ACCOUNT, ACCOUNT_KEY};
use curvine_server::testing::s3::{object_data as data, Proxy};
use curvine_server::testing::MiniCluster;

const BS: usize = 96 << 10;
const CONTAINER: &str = "cnt";

fn mount_info(uri: &str, path: &str, options: HashMap<String, String>) -> MountInfo {
    MountInfo {
        path: path.into(),
        ufs_uri: uri.into(),
        options,
        mode: MountMode::Through as i32,
        sync_interval_ms: 60_000,
        ..Default::default()
    }
}

fn container_op(az: &Azurite) -> opendal::Operator {
    curvine_server::ufs::build(
        &format!("azblob://{CONTAINER}"),
        &az_options(&az.endpoint()),
    )
    .expect("operator")
}

async fn sorted_names(fs: &CurvineFs, path: &str) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(path)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_container_mounts_lists_reads_through_and_takes_writes() {
    let az = Azurite::start(&[CONTAINER]).await.expect("start azurite");
    let cluster = MiniCluster::builder()
        .workers(1)
        .conf(|c| {
            c.master.block_size = ByteSize(BS as u64);
            c.worker.chunk_size = ByteSize(16 << 10);
            c.worker.heartbeat_interval = Dur(Duration::from_millis(100));
        })
        .start()
        .await
        .expect("cluster");
    let fs = CurvineFs::connect(cluster.client_conf())
        .await
        .expect("connect");

    let blobs: Vec<(&str, Vec<u8>)> = vec![
        ("pre/empty", Vec::new()),
        ("pre/one", data(1, 1)),
        ("pre/d/exact", data(BS, 2)),
        ("pre/d/sub/several", data(3 * BS + 5, 3)),
        ("pre/ünï/日本 語.bin", data(1000, 4)),
    ];
    let op = container_op(&az);
    for (k, v) in &blobs {
        op.write(k, v.clone()).await.expect("put blob");
    }

    // wrong credentials: refused at mount time naming the store, nothing mounted
    let mut bad = az_options(&az.endpoint());
    bad.insert("account_key".into(), "d3Jvbmcta2V5".into());
    let uri = format!("azblob://{CONTAINER}/pre");
    let err = fs.mount(mount_info(&uri, "/az", bad)).await.unwrap_err();
    assert!(matches!(err, FsError::UnderStore { .. }), "{err:?}");
    assert!(err.to_string().contains(&uri), "{err}");
    assert!(!err.to_string().contains("d3Jvbmcta2V5"), "{err}");
    assert!(fs.mounts().await.unwrap().is_empty());

    let proxy = Proxy::start(az.addr).await.unwrap();
    let endpoint = format!("{}/{ACCOUNT}", proxy.endpoint());
    let m = fs
        .mount(mount_info(&uri, "/az", az_options(&endpoint)))
        .await
        .unwrap();
    assert_eq!(m.options["account_key"], "***", "the key was shown");
    let listed = fs.mounts().await.unwrap();
    assert_eq!(listed[0].options["account_key"], "***");
    assert_eq!(listed[0].options["account_name"], ACCOUNT);
    assert!(!format!("{listed:?}").contains(ACCOUNT_KEY));

    assert_eq!(sorted_names(&fs, "/az").await, ["d", "empty", "one", "ünï"]);
    assert_eq!(sorted_names(&fs, "/az/d").await, ["exact", "sub"]);
    let st = fs.stat("/az/d/sub").await.unwrap();
    assert_eq!(st.file_type, FileType::Dir as i32);
    for (k, v) in &blobs {
        let path = format!("/az/{}", k.strip_prefix("pre/").unwrap());
        let st = fs.stat(&path).await.unwrap();
        assert_eq!(st.len, v.len() as u64, "{path}");
        assert!(st.persisted && st.mtime_ms > 0, "{path}: {st:?}");
        assert!(
            fs.read_file(&path).await.unwrap() == *v,
            "{path}: cold read"
        );
    }
    // every block is cached: a warm read asks nothing of the store
    let before = proxy.received();
    for (k, v) in &blobs {
        let path = format!("/az/{}", k.strip_prefix("pre/").unwrap());
        assert!(
            fs.read_file(&path).await.unwrap() == *v,
            "{path}: warm read"
        );
    }
    assert_eq!(proxy.received(), before, "a warm read went to the store");

    // a through write is in the container when close returns
    let v = data(2 * BS + 3, 9);
    fs.write_file("/az/d/new", &v).await.unwrap();
    let got = op.read("pre/d/new").await.expect("the blob").to_vec();
    assert!(got == v, "the container holds other bytes");
    assert!(fs.stat("/az/d/new").await.unwrap().persisted);
    fs.delete("/az/d/new", false).await.unwrap();
    let gone = op.stat("pre/d/new").await.unwrap_err();
    assert_eq!(gone.kind(), opendal::ErrorKind::NotFound);

    fs.umount("/az").await.unwrap();
    assert!(fs.mounts().await.unwrap().is_empty());
    assert!(op.stat("pre/one").await.is_ok(), "umount touched the store");
}
