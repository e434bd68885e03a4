//! Reads right after a master restart, with real processes and `kill -9`: the master
//! waits for its workers' reports before it counts a block none of them reported as
//! lost (`master.worker_report_grace`).

use std::process::Child;
use std::time::{Duration, Instant};

use curvine_common::conf::Dur;
use curvine_common::FsError;
use curvine_server::testing::{http, wait_until};

use super::{data, live_workers, runtime, wait_connect, Procs};

/// Processes killed (SIGKILL) when the test ends, however it ends.
struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// kill -9 of the master, started again at once: a client's first read of a file
/// written before gets the right bytes and no error, though the worker holding it
/// (at the default heartbeat, 3 s) has not re-registered yet when the read starts.
/// Prints the time from the restart to that read (`FIGURE`).
#[test]
fn a_read_right_after_a_master_kill9_waits_for_the_worker() {
    let rt = runtime();
    let p = Procs::with(&[
        "worker.heartbeat_interval=3s",
        "master.worker_lost_timeout=30s",
    ]);
    let mut conf = p.conf.clone();
    conf.client.rpc_timeout = Dur(Duration::from_secs(15));
    let mut procs = Killed(vec![p.spawn("master"), p.spawn("worker")]);
    rt.block_on(async {
        let fs = wait_connect(&conf).await;
        wait_until(Duration::from_secs(20), || async {
            live_workers(&fs).await == 1
        })
        .await
        .unwrap();
        let body = data(9 << 20, 48);
        fs.write_file("/kr/two-blocks", &body).await.unwrap();
        drop(fs);

        procs.0[0].kill().unwrap(); // SIGKILL
        procs.0[0].wait().unwrap();
        let restart = Instant::now();
        procs.0[0] = p.spawn("master");
        let fs = wait_connect(&conf).await;
        let up = restart.elapsed();
        // failed reads are counted (and retried) to give the time to the first good
        // read where the master does not wait for its workers
        let mut failed = Vec::new();
        let got = loop {
            match fs.read_file("/kr/two-blocks").await {
                Ok(b) => break b,
                Err(e) if restart.elapsed() < Duration::from_secs(30) => failed.push(e),
                Err(e) => panic!("no read succeeded within 30 s: {e}"),
            }
        };
        eprintln!(
            "FIGURE master kill -9 and restart to the first good read: {:.2} s (master \
             serving after {:.2} s; {} reads failed before it)",
            restart.elapsed().as_secs_f64(),
            up.as_secs_f64(),
            failed.len()
        );
        assert!(
            got == body,
            "the read after the restart returned other bytes"
        );
        assert!(
            failed.is_empty(),
            "reads failed after the restart: {failed:?}"
        );
        assert!(fs.report().await.unwrap().reporting.is_none());
    });
}

/// A block whose only worker is gone for good: after a master restart its read waits
/// out `master.worker_report_grace`, during which the report and `/readyz` say that
/// the master waits for that worker, then fails saying no live replica is left.
#[test]
fn a_block_lost_with_its_worker_fails_after_the_grace() {
    const GRACE: Duration = Duration::from_secs(3);
    let rt = runtime();
    let web = free_port();
    let web_set = format!("master.web_port={web}");
    let p = Procs::with(&["master.worker_report_grace=3s", &web_set]);
    let mut conf = p.conf.clone();
    conf.client.rpc_timeout = Dur(Duration::from_secs(15));
    let mut procs = Killed(vec![p.spawn("master"), p.spawn("worker")]);
    let web: std::net::SocketAddr = ([127, 0, 0, 1], web).into();
    rt.block_on(async {
        let fs = wait_connect(&conf).await;
        wait_until(Duration::from_secs(20), || async {
            live_workers(&fs).await == 1
        })
        .await
        .unwrap();
        fs.write_file("/kl/lost", &data(1 << 20, 49)).await.unwrap();
        drop(fs);

        // the worker goes for good, then the master restarts
        for c in &mut procs.0 {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        let restart = Instant::now();
        procs.0 = vec![p.spawn("master")];
        let fs = wait_connect(&conf).await;
        // the master knows of one worker that has not reported
        let r = fs.report().await.unwrap();
        let w = r.reporting.expect("the master waits for its worker");
        assert_eq!((w.reported, w.expected), (0, 1), "{w:?}");
        assert!(
            w.left_ms > 0 && w.left_ms <= GRACE.as_millis() as u64,
            "{w:?}"
        );
        let ready = http::get(web, "/readyz", &[]).await.unwrap();
        assert_eq!(ready.status, 503, "{}", ready.body);
        assert!(
            ready.body.contains("waiting for worker reports: 0 of 1"),
            "{}",
            ready.body
        );

        let e = fs.read_file("/kl/lost").await.unwrap_err();
        let waited = restart.elapsed();
        match &e {
            FsError::Unavailable { message } => {
                assert!(message.contains("no live replica"), "{e}")
            }
            other => panic!("a lost block's read failed with {other:?}"),
        }
        assert!(waited >= GRACE, "failed after {waited:?}, before the grace");
        assert!(
            waited < conf.client.rpc_timeout.get(),
            "failed only after {waited:?}"
        );
        eprintln!(
            "a block lost with its worker fails {:.2} s after the master's restart: {e}",
            waited.as_secs_f64()
        );
        assert!(fs.report().await.unwrap().reporting.is_none());
        let ready = http::get(web, "/readyz", &[]).await.unwrap();
        assert_eq!(ready.status, 200, "{}", ready.body);
    });
}
