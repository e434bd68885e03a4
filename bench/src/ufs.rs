//! `ufs.read`: under-store figures against an S3 server, each beside the server's own
//! rate measured in the same run with OpenDAL at the same concurrency: cold read through
//! Curvine, `cv load`, and listing a cold prefix (then warm); and the warm read beside a
//! read of native Curvine files of the same shape, the two alternating. Objects and
//! native files are put first (outside the timings) and kept for later runs.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use curvine_client::proto::{LoadState, MountInfo};
use curvine_client::stdout::Stdout;
use curvine_client::CurvineFs;
use curvine_common::aligned::AlignedBuf;
use futures_util::TryStreamExt;
use opendal::Operator;

macro_rules! say {
    ($($arg:tt)*) => {
        writeln!(Stdout::lock(), $($arg)*)
    };
}

/// What `ufs.read` needs from the command line.
pub struct UfsArgs {
    pub dir: String,
    pub endpoint: String,
    pub bucket: String,
    pub threads: usize,
    pub file_size: u64,
    pub file_num: usize,
    pub buf_size: usize,
    pub list_objects: usize,
}

fn options(endpoint: &str) -> anyhow::Result<HashMap<String, String>> {
    let mut o = HashMap::new();
    o.insert("endpoint".into(), endpoint.to_string());
    o.insert("region".into(), "us-east-1".into());
    for (k, env) in [
        ("access_key_id", "AWS_ACCESS_KEY_ID"),
        ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
    ] {
        let v = std::env::var(env).with_context(|| format!("${env} names the S3 credentials"))?;
        o.insert(k.into(), v);
    }
    Ok(o)
}

fn gib_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1u64 << 30) as f64 / d.as_secs_f64().max(1e-9)
}

/// Run `f(i)` for i in 0..n on `threads` tasks; the bytes they return, summed.
async fn parallel<F, Fut>(n: usize, threads: usize, f: F) -> anyhow::Result<u64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<u64>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..threads {
        let (f, next) = (f.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut total = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return anyhow::Ok(total);
                }
                total += f(i).await?;
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.context("task")??;
    }
    Ok(total)
}

/// Rounds of the warm read, each followed by a read of the native files.
const WARM_ROUNDS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Read `path` to its end as `fs.read` does (a page-aligned buffer of `buf` bytes).
async fn read_curvine(fs: CurvineFs, path: String, buf: usize) -> anyhow::Result<u64> {
    let mut r = fs
        .open(&path)
        .await
        .with_context(|| format!("open {path}"))?;
    let mut b = AlignedBuf::zeroed(buf);
    let mut n = 0u64;
    loop {
        let k = r
            .read(&mut b)
            .await
            .with_context(|| format!("read {path}"))?;
        if k == 0 {
            return Ok(n);
        }
        n += k as u64;
    }
}

pub async fn ufs_read(fs: &CurvineFs, a: &UfsArgs) -> anyhow::Result<()> {
    let opts = options(&a.endpoint)?;
    let op: Operator =
        curvine_server::ufs::build(&format!("s3://{}", a.bucket), &opts).context("S3 operator")?;
    let size = a.file_size as usize;
    // fixtures
    let body = bytes::Bytes::from(vec![0x5au8; size]);
    for i in 0..a.file_num {
        let key = format!("data/obj-{i:05}");
        if op.stat(&key).await.map(|m| m.content_length()).ok() != Some(a.file_size) {
            op.write(&key, body.clone()).await.context("put")?;
        }
    }
    if op.stat("list/.done").await.is_err() {
        let op2 = op.clone();
        parallel(a.list_objects, 8, move |i| {
            let op = op2.clone();
            async move {
                op.write(&format!("list/o-{i:06}"), vec![1u8])
                    .await
                    .context("put")?;
                Ok(0)
            }
        })
        .await?;
        op.write("list/.done", vec![1u8]).await.context("put")?;
    }
    say!(
        "ufs.read: {} objects of {} bytes, {} threads; {} small objects to list",
        a.file_num,
        a.file_size,
        a.threads,
        a.list_objects
    )?;

    // the store's own read rate
    let t = Instant::now();
    let op2 = op.clone();
    let bytes = parallel(a.file_num, a.threads, move |i| {
        let op = op2.clone();
        async move {
            let r = op
                .reader_with(&format!("data/obj-{i:05}"))
                .chunk(8 << 20)
                .await
                .context("reader")?;
            let mut s = r.into_bytes_stream(..).await.context("stream")?;
            let mut n = 0u64;
            while let Some(b) = s.try_next().await.context("read")? {
                n += b.len() as u64;
            }
            Ok(n)
        }
    })
    .await?;
    let store = gib_s(bytes, t.elapsed());
    say!("ufs.read: store (OpenDAL) read {store:.3} GiB/s")?;

    // mount afresh: everything is cold
    let _ = fs.umount(&a.dir).await;
    fs.mount(MountInfo {
        path: a.dir.clone(),
        ufs_uri: format!("s3://{}", a.bucket),
        options: opts.clone(),
        sync_interval_ms: 3_600_000,
        ..Default::default()
    })
    .await
    .context("mount")?;
    let data_dir = format!("{}/data", a.dir);
    fs.list(&data_dir).await.context("list data")?;
    let run_reads = |label: &'static str, dir: &str| {
        let (fs, dir, buf, n, th) = (
            fs.clone(),
            dir.to_string(),
            a.buf_size,
            a.file_num,
            a.threads,
        );
        async move {
            let t = Instant::now();
            let bytes = parallel(n, th, move |i| {
                read_curvine(fs.clone(), format!("{dir}/obj-{i:05}"), buf)
            })
            .await?;
            if bytes != n as u64 * size as u64 {
                bail!("{label}: read {bytes} bytes");
            }
            anyhow::Ok(gib_s(bytes, t.elapsed()))
        }
    };
    let cold = run_reads("cold", &data_dir).await?;
    say!(
        "ufs.read: cold read {cold:.3} GiB/s = {:.2} x store (goal >= 0.8)",
        cold / store
    )?;
    // the same shape in native files (same names, so the reads differ only in where
    // the blocks came from)
    let native_dir = format!("{}-native", a.dir);
    fs.mkdir(&native_dir, true).await.context("mkdir native")?;
    for i in 0..a.file_num {
        let path = format!("{native_dir}/obj-{i:05}");
        if fs.stat(&path).await.map(|st| st.len).ok() != Some(a.file_size) {
            fs.write_file(&path, &body)
                .await
                .with_context(|| format!("write {path}"))?;
        }
    }
    let (mut warm, mut native) = (Vec::new(), Vec::new());
    for _ in 0..WARM_ROUNDS {
        warm.push(run_reads("warm", &data_dir).await?);
        native.push(run_reads("native", &native_dir).await?);
    }
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (w, n) = (fmt(&warm), fmt(&native));
    say!(
        "ufs.read: warm read {w} GiB/s, native files {n} GiB/s: median {:.2} x native (goal >= 0.9)",
        median(warm) / median(native)
    )?;

    // load after a free
    fs.free(&a.dir).await.context("free")?;
    tokio::time::sleep(Duration::from_secs(2)).await; // the workers drop freed blocks
    let t = Instant::now();
    let job = fs.submit_load(&data_dir, true).await.context("load")?;
    let j = loop {
        let j = fs.load_job(job.id).await?;
        if j.state != LoadState::LoadRunning as i32 {
            break j;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if j.state != LoadState::LoadDone as i32 {
        bail!("load ended {:?}: {:?}", j.state, j.errors);
    }
    let load = gib_s(j.bytes_done, t.elapsed());
    say!(
        "ufs.read: cv load {load:.3} GiB/s ({} bytes) = {:.2} x store (goal >= 0.8)",
        j.bytes_done,
        load / store
    )?;

    // listing: the store's paginated listing, then Curvine cold and warm
    let t = Instant::now();
    let mut lister = op.lister("list/").await.context("lister")?;
    let mut n = 0usize;
    while lister.try_next().await.context("list")?.is_some() {
        n += 1;
    }
    let store_list = t.elapsed();
    let list_dir = format!("{}/list", a.dir);
    let t = Instant::now();
    let cold_n = fs.list(&list_dir).await.context("cold list")?.len();
    let cold_list = t.elapsed();
    let t = Instant::now();
    let warm_n = fs.list(&list_dir).await.context("warm list")?.len();
    let warm_list = t.elapsed();
    say!(
        "ufs.read: list {n} store {:.3} s, cold {cold_n} {:.3} s = {:.2} x store (goal <= 2), warm {warm_n} {:.3} s = {:.1} x faster than cold (goal >= 10)",
        store_list.as_secs_f64(),
        cold_list.as_secs_f64(),
        cold_list.as_secs_f64() / store_list.as_secs_f64().max(1e-9),
        warm_list.as_secs_f64(),
        cold_list.as_secs_f64() / warm_list.as_secs_f64().max(1e-9)
    )?;
    Ok(())
}
