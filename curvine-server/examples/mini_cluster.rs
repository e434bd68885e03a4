//! A MiniCluster with a little data, for the console's browser test
//! (`web-test/console.test.mjs`): a master and two workers on ephemeral 127.0.0.1 ports,
//! a directory with a small file and a three-block file kept on both workers. Prints one
//! JSON line, `{"web": "127.0.0.1:PORT", "conf": "FILE"}` (FILE is a configuration `cv`
//! can use), then runs until its standard input closes.
//!
//!   cargo run --release -p curvine-server --example mini_cluster

use std::io::Read;
use std::time::Duration;

use anyhow::Context;
use curvine_client::{CreateOptions, CurvineFs};
use curvine_server::testing::{wait_until, MiniCluster};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cluster = MiniCluster::builder()
        .workers(2)
        .start()
        .await
        .context("start the MiniCluster")?;
    let fs = CurvineFs::connect(cluster.client_conf())
        .await
        .context("connect")?;
    fs.mkdir("/console/data", true).await?;
    fs.write_file("/console/readme.txt", b"the console's test data\n")
        .await?;
    let opts = CreateOptions {
        overwrite: true,
        replicas: 2,
        ..CreateOptions::default()
    };
    let mut w = fs.create_with("/console/data/big.bin", opts).await?;
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    for _ in 0..20 {
        w.write(&chunk).await?;
    }
    w.close().await?;
    // the workers report their usage with their next heartbeat: wait for it, so the
    // numbers the test compares stay put
    let stored = 2 * (20 << 20) + 24;
    wait_until(Duration::from_secs(30), || async {
        cluster.report().await.is_ok_and(|r| r.used >= stored)
    })
    .await
    .context("usage reported")?;

    let dir = tempfile::tempdir().context("temp dir")?;
    let conf = dir.path().join("cv.toml");
    let c = cluster.client_conf();
    let text = format!(
        "[cluster]\nauth_token = \"{}\"\n[client]\nmaster_addrs = [\"{}\"]\nhostname = \"127.0.0.1\"\n\
         [log]\nlevel = \"warn\"\n",
        c.cluster.auth_token,
        cluster.master_addr()
    );
    std::fs::write(&conf, text).context("write the cv conf")?;
    println!(
        "{}",
        serde_json::json!({
            "web": cluster.master_web_addr().to_string(),
            "conf": conf.display().to_string(),
        })
    );
    // until the test closes our stdin (or dies)
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await
    .context("wait for stdin")?;
    cluster.shutdown().await.context("shut down")?;
    Ok(())
}
