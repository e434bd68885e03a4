//! Throughput probe (ignored by default; run with `--ignored --nocapture`):
//! remote write and read of 128 MiB blocks over loopback into /dev/shm.

use std::time::Instant;

use curvine_common::checksum::chunk_crcs;
use curvine_common::conf::ByteSize;
use curvine_common::frame::write_frame;
use curvine_common::proto::DataOp;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn remote_throughput_probe() {
    const BLOCK: usize = 128 << 20;
    const FRAME: usize = 1 << 20;
    const CHUNK: usize = 64 << 10;
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut conf = conf_with(tmp.path(), &["MEM:2GB"]);
    conf.worker.chunk_size = ByteSize(CHUNK as u64);
    let srv = TestServer::start_with_chunk(&conf, CHUNK as u32).await;
    let data = pattern(FRAME, 7);
    let crcs = chunk_crcs(&data, CHUNK);
    let mut s = connect(srv.addr).await;
    s.set_nodelay(true).unwrap();
    let blocks = 4u64;
    let t = Instant::now();
    for id in 0..blocks {
        let mut open = open_hdr(DataOp::WriteOpen, id);
        open.reserve = BLOCK as u64;
        write_frame(&mut s, &open, &[]).await.unwrap();
        recv(&mut s).await.unwrap();
        for i in 0..BLOCK / FRAME {
            let mut h = open_hdr(DataOp::WriteData, id);
            h.offset = (i * FRAME) as u64;
            h.crcs = crcs.clone();
            write_frame(&mut s, &h, &data).await.unwrap();
        }
        let mut c = open_hdr(DataOp::WriteCommit, id);
        c.len = BLOCK as u64;
        write_frame(&mut s, &c, &[]).await.unwrap();
        recv(&mut s).await.unwrap();
    }
    let w = t.elapsed();
    let t = Instant::now();
    let mut buf = BytesMut::new();
    let mut total = 0usize;
    for id in 0..blocks {
        write_frame(&mut s, &open_hdr(DataOp::ReadOpen, id), &[])
            .await
            .unwrap();
        recv(&mut s).await.unwrap();
        loop {
            let h = recv_into(&mut s, &mut buf).await.unwrap();
            if h.op == DataOp::ReadEnd as i32 {
                break;
            }
            total += buf.len();
        }
    }
    let r = t.elapsed();
    assert_eq!(total, BLOCK * blocks as usize);
    let gib = (BLOCK as f64 * blocks as f64) / (1u64 << 30) as f64;
    println!(
        "remote write {:.2} GiB/s, remote read {:.2} GiB/s ({gib} GiB, 1 MiB frames, 64 KiB chunks)",
        gib / w.as_secs_f64(),
        gib / r.as_secs_f64()
    );
    srv.stop().await;
}
