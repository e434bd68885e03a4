//! Worker registry, placement, block reports and leases.

use std::time::{Duration, Instant};

use curvine_common::conf::{Dur, MasterConf};
use curvine_common::proto::*;
use curvine_common::{BlockId, FsError, InodeId, WorkerId};

use super::namespace::Namespace;
use super::tests::{create_req, mconf, open, register, root, stat, user, write_file};

#[test]
fn placement_prefers_local_then_free_space_with_tier_fallback() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let small = WorkerId(register(&ns, "client-host", (8 << 20, 0), (1 << 30, 0)));
    let big = WorkerId(register(&ns, "other", (1 << 30, 0), (1 << 30, 0)));
    let big2 = WorkerId(register(&ns, "third", (1 << 29, 0), (0, 0)));
    let w = &ns.workers;
    let t = w
        .place(StorageTier::Mem, 1, 1 << 20, "client-host", &[])
        .unwrap();
    assert_eq!(t[0].worker_id, small, "local host first");
    let t = w
        .place(StorageTier::Mem, 1, 1 << 20, "elsewhere", &[])
        .unwrap();
    assert_eq!(t[0].worker_id, big, "then most free space");
    let t = w
        .place(StorageTier::Mem, 2, 1 << 20, "elsewhere", &[big])
        .unwrap();
    let ids: Vec<WorkerId> = t.iter().map(|t| t.worker_id).collect();
    assert_eq!(ids, vec![big2, small]);
    // The local worker's MEM tier fills up (reservations since its last heartbeat):
    // the next block for it falls back to its SSD tier... or another MEM worker first.
    for _ in 0..8 {
        w.place(StorageTier::Mem, 1, 1 << 20, "client-host", &[big, big2])
            .unwrap();
    }
    let t = w
        .place(StorageTier::Mem, 1, 1 << 20, "client-host", &[big, big2])
        .unwrap();
    assert_eq!((t[0].worker_id, t[0].tier), (small, StorageTier::Ssd));
    assert!(matches!(
        w.place(StorageTier::Mem, 4, 1 << 20, "", &[]),
        Err(FsError::NoSpace { .. })
    ));
    assert!(matches!(
        w.place(StorageTier::Mem, 1, 1 << 20, "", &[small, big, big2]),
        Err(FsError::Unavailable { .. })
    ));
}

#[test]
fn no_workers_is_unavailable() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let st = ns.create(&create_req("/f", &root())).unwrap().0 .0;
    let e = ns
        .add_block(&AddBlockRequest {
            file_id: st.id,
            path: "/f".into(),
            caller: Some(root()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(&e, FsError::Unavailable { message } if message.contains("no live workers")),
        "{e}"
    );
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn lost_worker_is_excluded_and_comes_back() {
    let d = tempfile::tempdir().unwrap();
    let ns = Namespace::load(mconf(d.path()), false, Duration::from_millis(200)).unwrap();
    let a = register(&ns, "a", (1 << 30, 0), (0, 0));
    let b = register(&ns, "b", (1 << 29, 0), (0, 0));
    let f = write_file(&ns, "/f", &[5]);
    let _ = f;
    // Keep b alive, let a go silent.
    wait_until("a lost", || {
        ns.heartbeat(HeartbeatRequest {
            worker_id: b,
            ..Default::default()
        })
        .unwrap();
        ns.workers.detect_lost();
        !ns.workers.is_alive(WorkerId(a))
    });
    let t = ns.workers.place(StorageTier::Mem, 1, 1, "", &[]).unwrap();
    assert_eq!(t[0].worker_id, WorkerId(b));
    let (_, blocks) = ns.open("/f", &root()).unwrap();
    assert!(blocks[0].locations.is_empty(), "a's replica is hidden");
    let rep = ns.report();
    assert_eq!(rep.workers.iter().filter(|w| w.alive).count(), 1);
    assert_eq!(rep.capacity, 1 << 29);
    // its block is missing: a scan counts it, and nothing is left to scan for
    ns.replication_scan().unwrap();
    assert_eq!(ns.report().missing_blocks, 1);
    assert!(!ns.repl.needs_scan());
    ns.heartbeat(HeartbeatRequest {
        worker_id: a,
        ..Default::default()
    })
    .unwrap();
    assert!(ns.repl.needs_scan(), "a worker back: count again");
    ns.replication_scan().unwrap();
    assert_eq!(ns.report().missing_blocks, 0);
    assert_eq!(
        ns.open("/f", &root()).unwrap().1[0].locations[0].worker_id,
        a
    );
    assert!(
        ns.heartbeat(HeartbeatRequest {
            worker_id: 999,
            ..Default::default()
        })
        .unwrap()
        .0
        .reregister
    );
}

/// Worker `w` (host "h") registers again with `blocks` as its full report.
fn report_blocks(ns: &Namespace, w: u32, blocks: Vec<BlockReplica>) {
    let (r, _) = ns
        .register_worker(RegisterRequest {
            worker_id: w,
            address: Some(WorkerAddress {
                host: "h".into(),
                ..Default::default()
            }),
            blocks,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(r.worker_id, w);
}

#[test]
fn unknown_reported_blocks_are_queued_for_deletion() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let w = register(&ns, "h", (1 << 30, 0), (0, 0));
    let writing = ns.create(&create_req("/w", &root())).unwrap().0 .0;
    let orphan = BlockId::new(InodeId(999_999), 0).0;
    let in_flight = BlockId::new(InodeId(writing.id), 0).0;
    let rep = |id| BlockReplica {
        block_id: id,
        len: 1,
        tier: StorageTier::Mem as i32,
    };
    report_blocks(&ns, w, vec![rep(orphan), rep(in_flight)]);
    let hb = ns
        .heartbeat(HeartbeatRequest {
            worker_id: w,
            added: vec![rep(BlockId::new(InodeId(888_888), 3).0)],
            ..Default::default()
        })
        .unwrap()
        .0;
    let mut del = hb.delete_blocks;
    del.sort();
    assert_eq!(del, vec![BlockId::new(InodeId(888_888), 3).0, orphan]);
}

#[test]
fn expired_lease_removes_the_file() {
    let d = tempfile::tempdir().unwrap();
    let mut conf = mconf(d.path());
    conf.lease_timeout = curvine_common::conf::Dur(Duration::from_millis(50));
    let ns = Namespace::load(conf, false, Duration::from_secs(30)).unwrap();
    let st = ns.create(&create_req("/partial", &root())).unwrap().0 .0;
    let kept = ns.create(&create_req("/renewed", &root())).unwrap().0 .0;
    wait_until("lease expiry", || {
        ns.renew_lease(root().client_id, &[kept.id]);
        ns.expire_leases().unwrap();
        stat(&ns, "/partial").is_err()
    });
    assert!(stat(&ns, "/renewed").is_ok());
    let e = ns
        .complete(&CompleteRequest {
            file_id: st.id,
            path: "/partial".into(),
            caller: Some(root()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, FsError::NotFound { .. }), "{e}");
    // Another client cannot complete a file whose lease is held.
    let e = ns
        .complete(&CompleteRequest {
            file_id: kept.id,
            path: "/renewed".into(),
            caller: Some(user(5, 5)),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, FsError::Busy { .. }), "{e}");
}

#[test]
fn create_can_allocate_the_first_block() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let req = |path: &str| CreateRequest {
        first_block: true,
        ..create_req(path, &root())
    };
    let complete = |st: &FileStatus, blocks: Vec<CommittedBlock>, len: u64| {
        ns.complete(&CompleteRequest {
            file_id: st.id,
            path: st.path.clone(),
            blocks,
            len,
            caller: Some(root()),
            ..Default::default()
        })
        .unwrap()
        .0
    };
    // No worker yet: the create still succeeds, and the writer's add_block waits.
    let ((early, none), _) = ns.create(&req("/early")).unwrap();
    assert!(none.is_none());
    let w = register(&ns, "h", (1 << 30, 0), (0, 0));
    complete(&early, vec![], 0);

    // A file of one block: the create brings it, the complete commits it.
    let ((st, first), _) = ns.create(&req("/one")).unwrap();
    let b = first.expect("a first block");
    assert_eq!((b.offset, b.len), (0, 0));
    assert_eq!(BlockId(b.block_id).inode(), InodeId(st.id));
    assert_eq!(b.locations.len(), 1);
    assert_eq!(b.locations[0].worker_id, w);
    let done = complete(
        &st,
        vec![CommittedBlock {
            block_id: b.block_id,
            len: 4096,
            worker_ids: vec![w],
        }],
        4096,
    );
    assert_eq!(done.len, 4096);
    let (_, blocks) = ns.open("/one", &root()).unwrap();
    assert_eq!(
        blocks.iter().map(|b| b.block_id).collect::<Vec<_>>(),
        [b.block_id]
    );

    // More blocks follow the first with add_block as usual.
    let ((st, first), _) = ns.create(&req("/two")).unwrap();
    let b0 = first.unwrap();
    let c0 = CommittedBlock {
        block_id: b0.block_id,
        len: 10,
        worker_ids: vec![w],
    };
    let (b1, _) = ns
        .add_block(&AddBlockRequest {
            file_id: st.id,
            path: "/two".into(),
            previous: vec![c0],
            caller: Some(root()),
            excluded_workers: vec![],
        })
        .unwrap();
    assert_eq!(b1.offset, 10);
    assert_eq!(BlockId(b1.block_id).index(), 1);
    let c1 = CommittedBlock {
        block_id: b1.block_id,
        len: 5,
        worker_ids: vec![w],
    };
    assert_eq!(complete(&st, vec![c1], 15).len, 15);

    // Closed empty: the block goes back, and nothing counts it.
    let ((st, first), _) = ns.create(&req("/empty")).unwrap();
    assert!(first.is_some());
    assert_eq!(ns.counters().blocks, 4);
    assert_eq!(complete(&st, vec![], 0).len, 0);
    assert!(ns.open("/empty", &root()).unwrap().1.is_empty());
    assert_eq!(ns.counters().blocks, 3, "/one's and /two's");
}

/// (worker, tier) of each replica of the first block of `f`.
fn first_block_locs(ns: &Namespace, f: &str) -> Vec<(u32, i32)> {
    ns.open(f, &root()).unwrap().1[0]
        .locations
        .iter()
        .map(|l| (l.worker_id, l.tier))
        .collect()
}

#[test]
fn a_full_report_is_compared_with_what_is_recorded() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let w = register(&ns, "h", (1 << 30, 0), (1 << 30, 0));
    for f in ["/a", "/b", "/c"] {
        write_file(&ns, f, &[10]);
    }
    let block_of = |f: &str| ns.open(f, &root()).unwrap().1[0].block_id;
    let (a, b) = (block_of("/a"), block_of("/b"));
    let locs = |f: &str| first_block_locs(&ns, f);
    assert_eq!(locs("/c"), vec![(w, StorageTier::Mem as i32)]);
    let (low, high) = (
        BlockId::new(InodeId(1), 5).0,
        BlockId::new(InodeId(999_999), 0).0,
    );
    let rep = |id, tier: StorageTier| BlockReplica {
        block_id: id,
        len: 10,
        tier: tier as i32,
    };
    // unsorted, `a` twice, `b` moved to SSD, `c` gone, two blocks the master never had
    let report = |blocks| report_blocks(&ns, w, blocks);
    report(vec![
        rep(high, StorageTier::Mem),
        rep(a, StorageTier::Mem),
        rep(b, StorageTier::Ssd),
        rep(low, StorageTier::Mem),
        rep(a, StorageTier::Mem),
    ]);
    assert_eq!(locs("/a"), vec![(w, StorageTier::Mem as i32)]);
    assert_eq!(locs("/b"), vec![(w, StorageTier::Ssd as i32)]);
    assert_eq!(locs("/c"), vec![]);
    let mut del = ns
        .heartbeat(HeartbeatRequest {
            worker_id: w,
            ..Default::default()
        })
        .unwrap()
        .0
        .delete_blocks;
    del.sort();
    assert_eq!(del, vec![low, high]);
    // the same report again changes nothing
    report(vec![rep(a, StorageTier::Mem), rep(b, StorageTier::Ssd)]);
    assert_eq!(locs("/a"), vec![(w, StorageTier::Mem as i32)]);
    assert_eq!(locs("/b"), vec![(w, StorageTier::Ssd as i32)]);
    // an empty report forgets everything the worker held
    report(vec![]);
    assert_eq!((locs("/a"), locs("/b")), (vec![], vec![]));
}

#[test]
fn a_paged_report_forgets_only_within_each_page() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let w = register(&ns, "h", (1 << 30, 0), (1 << 30, 0));
    for f in ["/a", "/b", "/c", "/d"] {
        write_file(&ns, f, &[10]);
    }
    let block_of = |f: &str| ns.open(f, &root()).unwrap().1[0].block_id;
    let [a, b, c, d] = ["/a", "/b", "/c", "/d"].map(block_of);
    assert!(a < b && b < c && c < d);
    let locs = |f: &str| first_block_locs(&ns, f);
    let mem = vec![(w, StorageTier::Mem as i32)];
    let rep = |id, tier: StorageTier| BlockReplica {
        block_id: id,
        len: 10,
        tier: tier as i32,
    };
    let page = |first, last, blocks| {
        ns.report_blocks(BlockReportPage {
            worker_id: w,
            first,
            last,
            blocks,
        })
        .map(|(r, _)| r.reregister)
    };
    // a paged registration carries no blocks and forgets nothing by itself
    let again = |blocks| {
        ns.register_worker(RegisterRequest {
            worker_id: w,
            address: Some(WorkerAddress {
                host: "h".into(),
                ..Default::default()
            }),
            blocks,
            paged: true,
            ..Default::default()
        })
    };
    let err = again(vec![rep(a, StorageTier::Mem)]).unwrap_err();
    assert!(matches!(err, FsError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(again(vec![]).unwrap().0.worker_id, w);
    assert_eq!(locs("/b"), mem);

    // the first page, up to b: b is gone, the blocks above b are not touched
    assert!(!page(0, b, vec![rep(a, StorageTier::Mem)]).unwrap());
    assert_eq!((locs("/a"), locs("/b")), (mem.clone(), vec![]));
    assert_eq!((locs("/c"), locs("/d")), (mem.clone(), mem.clone()));
    // bad pages change nothing: ids the wrong way round, a block outside the page
    for bad in [
        page(c, b, vec![]),
        page(b + 1, u64::MAX, vec![rep(a, StorageTier::Mem)]),
    ] {
        assert!(
            matches!(bad, Err(FsError::InvalidArgument { .. })),
            "{bad:?}"
        );
    }
    assert_eq!((locs("/c"), locs("/d")), (mem.clone(), mem.clone()));
    // the last page, to the end: c moved to SSD, d as recorded
    let last = vec![rep(d, StorageTier::Mem), rep(c, StorageTier::Ssd)];
    assert!(!page(b + 1, u64::MAX, last).unwrap());
    assert_eq!(locs("/c"), vec![(w, StorageTier::Ssd as i32)]);
    assert_eq!((locs("/a"), locs("/d")), (mem.clone(), mem.clone()));
    // a page from a worker this master does not know asks it to register again
    let unknown = ns.report_blocks(BlockReportPage {
        worker_id: w + 100,
        first: 0,
        last: u64::MAX,
        blocks: vec![],
    });
    assert!(unknown.unwrap().0.reregister);
}

/// Mount secrets go only to a caller that shows a live worker's current session key,
/// from that worker's host.
#[test]
fn only_a_registered_worker_is_recognized() {
    let d = tempfile::tempdir().unwrap();
    let ns = open(d.path());
    let reg = |id: u32| {
        ns.register_worker(RegisterRequest {
            worker_id: id,
            address: Some(WorkerAddress {
                host: "127.0.0.1".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap()
        .0
    };
    let first = reg(0);
    let (id, key) = (first.worker_id, first.session.clone());
    assert_eq!(key.len(), 32, "{key}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let is = |id: u32, key: &str, peer: Option<&str>| {
        rt.block_on(ns.is_worker(WorkerId(id), key, peer.map(|p| p.parse().unwrap())))
    };
    assert!(is(id, &key, Some("127.0.0.1")));
    assert!(
        is(id, &key, Some("::ffff:127.0.0.1")),
        "an IPv4-mapped peer"
    );
    assert!(is(id, &key, None), "the transport does not know the peer");
    assert!(!is(id, &key, Some("10.1.2.3")), "another host");
    assert!(!is(id, "", Some("127.0.0.1")));
    assert!(!is(id, &"0".repeat(32), Some("127.0.0.1")));
    assert!(!is(id + 1, &key, Some("127.0.0.1")), "another worker's id");
    assert!(!is(0, &key, Some("127.0.0.1")));
    // a new registration makes a new key; the old one is void
    let again = reg(id);
    assert_eq!(again.worker_id, id);
    assert_ne!(again.session, key);
    assert!(!is(id, &key, Some("127.0.0.1")));
    assert!(is(id, &again.session, Some("127.0.0.1")));
    // a worker whose host is a name: the name is resolved
    let named = ns
        .register_worker(RegisterRequest {
            address: Some(WorkerAddress {
                host: "localhost".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap()
        .0;
    assert!(is(named.worker_id, &named.session, Some("127.0.0.1")));
    assert!(!is(named.worker_id, &named.session, Some("10.1.2.3")));
}

/// A worker's registration after a restart, with its blocks (`blocks`).
fn reregister(ns: &Namespace, id: u32, host: &str, blocks: &[u64]) {
    ns.register_worker(RegisterRequest {
        worker_id: id,
        address: Some(WorkerAddress {
            worker_id: id,
            host: host.into(),
            data_port: 1000,
        }),
        tiers: vec![TierReport {
            tier: StorageTier::Mem as i32,
            capacity: 1 << 30,
            ..Default::default()
        }],
        blocks: blocks
            .iter()
            .map(|&b| BlockReplica {
                block_id: b,
                len: 5,
                tier: StorageTier::Mem as i32,
            })
            .collect(),
        cluster_id: String::new(),
        paged: false,
    })
    .unwrap();
}

#[test]
fn a_restarted_master_waits_for_its_workers_before_a_block_counts_lost() {
    let d = tempfile::tempdir().unwrap();
    let blocks = |ns: &Namespace, id: u64| ns.located_blocks(id).unwrap();
    let (a, b, f, g) = {
        let ns = open(d.path());
        let a = register(&ns, "a", (1 << 30, 0), (0, 0));
        let b = register(&ns, "b", (1 << 20, 0), (0, 0));
        let f = write_file(&ns, "/on-a", &[5]);
        let located = |p: &str| ns.open(p, &root()).unwrap().1[0].locations[0].worker_id;
        assert_eq!(located("/on-a"), a);
        // the next block goes to b: a is full for now
        ns.workers
            .place(StorageTier::Mem, 1, 1 << 30, "", &[])
            .unwrap();
        let g = write_file(&ns, "/on-b", &[5]);
        assert_eq!(located("/on-b"), b);
        let f = (f.id, blocks(&ns, f.id)[0].block_id);
        let g = (g.id, blocks(&ns, g.id)[0].block_id);
        (a, b, f, g)
    };
    // restarted: no worker has registered yet
    let ns = open(d.path());
    let w = ns.waiting_for_workers().expect("it waits for a and b");
    assert_eq!((w.reported, w.expected), (0, 2));
    let r = ns.report().reporting.expect("the report says so");
    assert_eq!((r.reported, r.expected), (0, 2));
    let e = ns
        .check_locations_known("/on-a", &blocks(&ns, f.0))
        .unwrap_err();
    assert!(
        matches!(&e, FsError::ReplicasUnknown { path, block_id, .. }
            if path == "/on-a" && *block_id == f.1),
        "{e}"
    );
    assert!(e.to_string().contains("0 of 2 workers"), "{e}");
    // a reports: its block is located, b's is not known yet
    reregister(&ns, a, "a", &[f.1]);
    ns.check_locations_known("/on-a", &blocks(&ns, f.0))
        .unwrap();
    assert_eq!(blocks(&ns, f.0)[0].locations[0].worker_id, a);
    assert!(matches!(
        ns.check_locations_known("/on-b", &blocks(&ns, g.0)),
        Err(FsError::ReplicasUnknown { .. })
    ));
    assert_eq!(ns.waiting_for_workers().map(|w| w.reported), Some(1));
    // b reports: the wait is over
    reregister(&ns, b, "b", &[g.1]);
    assert_eq!(ns.waiting_for_workers(), None);
    assert_eq!(ns.report().reporting, None);
    ns.check_locations_known("/on-b", &blocks(&ns, g.0))
        .unwrap();
    drop(ns);

    // restarted with no grace: b never comes back, and its block counts lost at once
    let ns = Namespace::load(
        MasterConf {
            worker_report_grace: Some(Dur(Duration::ZERO)),
            ..mconf(d.path())
        },
        false,
        Duration::from_secs(30),
    )
    .unwrap();
    reregister(&ns, a, "a", &[f.1]);
    assert_eq!(ns.waiting_for_workers(), None);
    let lost = blocks(&ns, g.0);
    assert!(lost[0].locations.is_empty());
    ns.check_locations_known("/on-b", &lost).unwrap();
    ns.replication_scan().unwrap();
    assert_eq!(ns.report().missing_blocks, 1);
}
