//! criterion micro-benchmarks of the Rust client's write and read paths against an
//! in-process MiniCluster (one worker, MEM tier on tmpfs), short-circuit and remote.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use curvine_client::CurvineFs;
use curvine_server::testing::MiniCluster;

const FILE: usize = 16 << 20;

fn client_io(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = rt
        .block_on(MiniCluster::builder().workers(1).start())
        .expect("start MiniCluster");
    let data: Vec<u8> = (0..FILE).map(|i| (i * 31 % 251) as u8).collect();

    let mut group = c.benchmark_group("client");
    group.throughput(Throughput::Bytes(FILE as u64));
    group.sample_size(10);
    for short_circuit in [true, false] {
        let mut conf = cluster.client_conf();
        conf.client.short_circuit = short_circuit;
        let fs = rt.block_on(CurvineFs::connect(conf)).expect("connect");
        let mode = if short_circuit {
            "short_circuit"
        } else {
            "remote"
        };
        let path = format!("/bench-{mode}");
        group.bench_function(BenchmarkId::new("write_16MiB", mode), |b| {
            b.to_async(&rt).iter(|| async {
                let mut w = fs.create(&path, true).await.expect("create");
                for chunk in data.chunks(128 << 10) {
                    w.write(chunk).await.expect("write");
                }
                w.close().await.expect("close");
            })
        });
        group.bench_function(BenchmarkId::new("read_16MiB", mode), |b| {
            b.to_async(&rt).iter(|| async {
                let mut buf = vec![0u8; 128 << 10];
                let mut r = fs.open(&path).await.expect("open");
                let mut total = 0;
                loop {
                    let n = r.read(&mut buf).await.expect("read");
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                assert_eq!(total, FILE);
            })
        });
    }
    group.finish();
    rt.block_on(cluster.shutdown()).expect("shutdown");
}

criterion_group!(benches, client_io);
criterion_main!(benches);
