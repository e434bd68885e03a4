//! Property-based fuzzing of the decoders and handlers: the data-plane frame decoder,
//! the worker's data-plane handler (malformed frames, oversized lengths, wrong ops,
//! truncated streams, random offsets and lengths) and the master's gRPC handlers
//! (random requests on every RPC, raw garbage on the port). No panic, no hang, no
//! unbounded allocation: after each run the servers still serve normal requests.
//!
//! `CURVINE_FUZZ_CASES` sets the cases per property (default 48; use thousands locally).

mod common;

use std::time::Duration;

use bytes::BytesMut;
use common::{data, shared};
use curvine_common::frame::{read_frame, write_frame};
use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::proto::*;
use proptest::prelude::*;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WORKERS: usize = 1;

fn cases() -> u32 {
    std::env::var("CURVINE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A DataHeader with arbitrary field values.
fn any_header() -> impl Strategy<Value = DataHeader> {
    (
        (0i32..16, prop_oneof![Just(0u64), 1u64..4, any::<u64>()]),
        (
            any::<u64>(),
            prop_oneof![Just(0u64), 1u64..1 << 20, any::<u64>()],
        ),
        proptest::collection::vec(any::<u32>(), 0..8),
        (0i32..6, any::<bool>(), ".{0,40}", any::<u32>()),
        (
            any::<u64>(),
            ".{0,8}",
            prop_oneof![Just(0u64), any::<u64>()],
        ),
    )
        .prop_map(
            |((op, block_id), (offset, len), crcs, (tier, sc, path, cs), (bl, token, reserve))| {
                DataHeader {
                    op,
                    block_id,
                    offset,
                    len,
                    crcs,
                    tier,
                    short_circuit: sc,
                    path,
                    chunk_size: cs,
                    block_len: bl,
                    error: None,
                    token,
                    reserve,
                    ufs: None,
                    // arbitrary request ids (only logged)
                    client_id: reserve,
                    call_id: bl,
                }
            },
        )
}

/// Bytes of a stream of frames, possibly cut short or with a forged length prefix.
fn any_stream() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(
            (
                any_header(),
                proptest::collection::vec(any::<u8>(), 0..3000),
            ),
            1..4,
        ),
        prop_oneof![Just(None), any::<usize>().prop_map(Some)],
        prop_oneof![Just(None), any::<u32>().prop_map(Some)],
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(frames, cut, forged_len, garbage)| {
            let mut out = Vec::new();
            for (h, payload) in frames {
                let hb = h.encode_to_vec();
                let frame_len = (4 + hb.len() + payload.len()) as u32;
                out.extend_from_slice(&forged_len.unwrap_or(frame_len).to_be_bytes());
                out.extend_from_slice(&(hb.len() as u32).to_be_bytes());
                out.extend_from_slice(&hb);
                out.extend_from_slice(&payload);
            }
            out.extend_from_slice(&garbage);
            if let Some(c) = cut {
                out.truncate(c % (out.len() + 1));
            }
            out
        })
}

#[test]
fn frame_decoder_never_panics_or_overallocates() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    proptest!(config(), |(bytes in prop_oneof![
        any_stream(),
        proptest::collection::vec(any::<u8>(), 0..256),
    ])| {
        rt.block_on(async {
            let mut rd: &[u8] = &bytes;
            let mut buf = BytesMut::new();
            const MAX: usize = 64 << 10;
            for _ in 0..8 {
                match read_frame(&mut rd, &mut buf, MAX).await {
                    Ok(Some(_)) => assert!(buf.len() <= MAX),
                    Ok(None) | Err(_) => break,
                }
            }
        });
    });
}

/// Send `bytes` to the worker and close our side: the worker must answer or close
/// within a bounded time.
async fn poke_worker(addr: std::net::SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let _ = s.shutdown().await;
    let mut sink = vec![0u8; 64 << 10];
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "worker hung on {} bytes of input",
        bytes.len()
    );
}

#[test]
fn worker_data_plane_survives_malformed_streams() {
    let s = shared(WORKERS);
    let addr = s.cluster.worker_addr(0);
    let n = std::sync::atomic::AtomicU32::new(0);
    proptest!(config(), |(bytes in any_stream())| {
        s.rt.block_on(poke_worker(addr, &bytes));
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let n = n.into_inner();
    assert!(n >= cases(), "ran {n} cases");
    // still healthy: a normal write and read, no staging left behind
    s.rt.block_on(async {
        let body = data(200_000, 1);
        s.fs.write_file("/fuzz/after-worker", &body).await.unwrap();
        assert_eq!(s.fs.read_file("/fuzz/after-worker").await.unwrap(), body);
        // a well-formed frame sequence still works on a raw connection
        let mut c = TcpStream::connect(addr).await.unwrap();
        let mut h = curvine_common::frame::header(DataOp::ReadOpen);
        h.block_id = 1;
        write_frame(&mut c, &h, &[]).await.unwrap();
        let mut buf = BytesMut::new();
        let reply = read_frame(&mut c, &mut buf, 1 << 20)
            .await
            .unwrap()
            .unwrap();
        assert!(reply.op == DataOp::Error as i32 || reply.op == DataOp::Ok as i32);
    });
}

fn any_path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_string()),
        Just(String::new()),
        "(/[a-c.]{0,3}){1,4}",
        ".{0,50}",
        Just("/x".repeat(3000)),
    ]
}

fn caller() -> impl Strategy<Value = Option<CallerInfo>> {
    prop_oneof![
        Just(None),
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(uid, gid, client_id)| Some(
            CallerInfo {
                uid,
                gid,
                client_id,
                ..Default::default()
            }
        )),
    ]
}

#[derive(Debug, Clone)]
enum Call {
    Mkdir(MkdirRequest),
    Create(CreateRequest),
    AddBlock(AddBlockRequest),
    Complete(CompleteRequest),
    Rename(RenameRequest),
    Delete(DeleteRequest),
    SetAttr(SetAttrRequest),
    Truncate(TruncateRequest),
    List(ListRequest),
    Open(OpenRequest),
    Heartbeat(HeartbeatRequest),
    Register(RegisterRequest),
    Pages(BlockReportPage),
    BadBlock(ReportBadBlockRequest),
    Xattr(SetXattrRequest),
}

fn replicas(v: Vec<(u64, u64, i32)>) -> Vec<BlockReplica> {
    v.into_iter()
        .map(|(block_id, len, tier)| BlockReplica {
            block_id,
            len,
            tier,
        })
        .collect()
}

fn any_call() -> impl Strategy<Value = Call> {
    let id = prop_oneof![Just(0u64), 1u64..64, any::<u64>()];
    prop_oneof![
        (any_path(), any::<bool>(), any::<u32>(), caller()).prop_map(
            |(path, parents, mode, caller)| {
                Call::Mkdir(MkdirRequest {
                    path,
                    parents,
                    mode,
                    caller,
                })
            }
        ),
        (
            any_path(),
            any::<bool>(),
            any::<u32>(),
            any::<u64>(),
            0i32..6,
            caller()
        )
            .prop_map(
                |(path, overwrite, replicas, block_size, tier, caller)| Call::Create(
                    CreateRequest {
                        path,
                        overwrite,
                        create_parents: true,
                        replicas: replicas % 20,
                        block_size,
                        storage_tier: tier,
                        caller,
                        // half of the creates allocate their first block too
                        first_block: replicas % 2 == 0,
                        ..Default::default()
                    }
                )
            ),
        (
            id.clone(),
            any_path(),
            proptest::collection::vec(
                (
                    any::<u64>(),
                    any::<u64>(),
                    proptest::collection::vec(0u32..5, 0..4)
                ),
                0..3
            ),
            proptest::collection::vec(any::<u32>(), 0..3),
            caller()
        )
            .prop_map(
                |(file_id, path, prev, excluded_workers, caller)| Call::AddBlock(AddBlockRequest {
                    file_id,
                    path,
                    previous: prev
                        .into_iter()
                        .map(|(block_id, len, worker_ids)| CommittedBlock {
                            block_id,
                            len,
                            worker_ids
                        })
                        .collect(),
                    caller,
                    excluded_workers,
                })
            ),
        (id.clone(), any_path(), any::<(u64, u64, i64)>(), caller()).prop_map(
            |(file_id, path, (len, min_len, mtime_ms), caller)| Call::Complete(CompleteRequest {
                file_id,
                path,
                len,
                caller,
                blocks: vec![],
                min_len,
                mtime_ms,
            })
        ),
        (any_path(), any_path(), any::<u32>(), caller()).prop_map(|(src, dst, flags, caller)| {
            Call::Rename(RenameRequest {
                src,
                dst,
                flags,
                caller,
            })
        }),
        (any_path(), any::<bool>(), caller()).prop_map(|(path, recursive, caller)| Call::Delete(
            DeleteRequest {
                path,
                recursive,
                caller
            }
        )),
        (
            any_path(),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<i64>()),
            caller()
        )
            .prop_map(|(path, mode, replicas, mtime_ms, caller)| Call::SetAttr(
                SetAttrRequest {
                    path,
                    mode,
                    replicas,
                    mtime_ms,
                    caller,
                    ..Default::default()
                }
            )),
        (any_path(), any::<u64>(), caller())
            .prop_map(|(path, len, caller)| Call::Truncate(TruncateRequest { path, len, caller })),
        (any_path(), ".{0,10}", any::<u32>(), caller(), any::<bool>()).prop_map(
            |(path, start_after, limit, caller, accept_names)| Call::List(ListRequest {
                path,
                start_after,
                limit,
                caller,
                accept_names,
            })
        ),
        (any_path(), caller()).prop_map(|(path, caller)| Call::Open(OpenRequest {
            path,
            caller,
            exclude_fetchers: vec![],
        })),
        (
            0u32..6,
            proptest::collection::vec((any::<u64>(), any::<u64>(), 0i32..6), 0..4),
            proptest::collection::vec(any::<u64>(), 0..4),
            proptest::collection::vec((any::<u64>(), any::<bool>()), 0..3),
            any::<u64>()
        )
            .prop_map(|(worker_id, added, removed, results, scrubbed_bytes)| {
                Call::Heartbeat(HeartbeatRequest {
                    worker_id,
                    added: replicas(added),
                    removed,
                    copy_results: results
                        .into_iter()
                        .map(|(block_id, ok)| CopyResult {
                            block_id,
                            ok,
                            error: String::new(),
                        })
                        .collect(),
                    bad_blocks: vec![],
                    load_results: vec![],
                    scrubbed_bytes,
                    tiers: vec![],
                    tasks: vec![],
                })
            }),
        (
            any::<u32>(),
            ".{0,12}",
            any::<u32>(),
            ".{0,6}",
            any::<bool>()
        )
            .prop_map(|(worker_id, host, port, cluster_id, paged)| Call::Register(
                RegisterRequest {
                    // only ids that cannot collide with the real worker's
                    worker_id: worker_id | 0x8000_0000,
                    address: Some(WorkerAddress {
                        worker_id: 0,
                        host,
                        data_port: port
                    }),
                    tiers: vec![],
                    blocks: vec![],
                    cluster_id,
                    paged,
                }
            )),
        (
            // ids the fuzz's own registrations get, never a real worker's (1..=WORKERS)
            (WORKERS as u32 + 1)..(WORKERS as u32 + 6),
            prop_oneof![Just(0u64), any::<u64>()],
            prop_oneof![Just(u64::MAX), any::<u64>()],
            proptest::collection::vec((any::<u64>(), any::<u64>(), 0i32..6), 0..4),
        )
            .prop_map(|(worker_id, first, last, blocks)| {
                Call::Pages(BlockReportPage {
                    worker_id,
                    first,
                    last,
                    blocks: replicas(blocks),
                })
            }),
        (any::<u64>(), 0u32..6, ".{0,10}", caller()).prop_map(
            |(block_id, worker_id, reason, caller)| Call::BadBlock(ReportBadBlockRequest {
                block_id,
                worker_id,
                reason,
                caller
            })
        ),
        (
            any_path(),
            ".{0,20}",
            proptest::collection::vec(any::<u8>(), 0..100),
            any::<u32>(),
            caller()
        )
            .prop_map(
                |(path, name, value, flags, caller)| Call::Xattr(SetXattrRequest {
                    path,
                    name,
                    value,
                    flags,
                    caller
                })
            ),
    ]
}

async fn send(c: &mut MasterServiceClient<tonic::transport::Channel>, call: Call) {
    // every outcome but a transport failure (the master died or hung) is fine
    let r: Result<(), tonic::Status> = match call {
        Call::Mkdir(r) => c.mkdir(r).await.map(drop),
        Call::Create(r) => c.create(r).await.map(drop),
        Call::AddBlock(r) => c.add_block(r).await.map(drop),
        Call::Complete(r) => c.complete(r).await.map(drop),
        Call::Rename(r) => c.rename(r).await.map(drop),
        Call::Delete(r) => c.delete(r).await.map(drop),
        Call::SetAttr(r) => c.set_attr(r).await.map(drop),
        Call::Truncate(r) => c.truncate(r).await.map(drop),
        Call::List(r) => c.list(r).await.map(drop),
        Call::Open(r) => c.open(r).await.map(drop),
        Call::Heartbeat(r) => c.heartbeat(r).await.map(drop),
        Call::Register(r) => c.register_worker(r).await.map(drop),
        Call::Pages(r) => c.report_blocks(r).await.map(drop),
        Call::BadBlock(r) => c.report_bad_block(r).await.map(drop),
        Call::Xattr(r) => c.set_xattr(r).await.map(drop),
    };
    // Any reply is fine (the health check after the run shows the master survived);
    // only a dead connection is not.
    if let Err(st) = r {
        assert!(
            !st.message().contains("transport error"),
            "transport-level failure: {st:?}"
        );
    }
}

#[test]
fn master_handlers_survive_random_requests() {
    let s = shared(WORKERS);
    let master = s.cluster.master_addr();
    let client = s.rt.block_on(async {
        MasterServiceClient::connect(format!("http://{master}"))
            .await
            .unwrap()
    });
    proptest!(config(), |(calls in proptest::collection::vec(any_call(), 1..6))| {
        let mut client = client.clone();
        s.rt.block_on(async {
            for call in calls {
                tokio::time::timeout(Duration::from_secs(20), send(&mut client, call))
                    .await
                    .expect("master call hung");
            }
        });
    });
    // raw garbage on the gRPC port
    proptest!(config(), |(bytes in proptest::collection::vec(any::<u8>(), 0..512))| {
        s.rt.block_on(poke_worker(master, &bytes));
    });
    s.rt.block_on(async {
        let body = data(10_000, 2);
        s.fs.write_file("/fuzz/after-master", &body).await.unwrap();
        assert_eq!(s.fs.read_file("/fuzz/after-master").await.unwrap(), body);
        assert!(s.cluster.live_workers().await >= 1);
    });
}
