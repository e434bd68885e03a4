//! Re-replication scheduling, bad-replica reports and the replica-count check.

use std::time::Duration;

use curvine_common::proto::*;
use curvine_common::{BlockId, FsError, WorkerId};

use super::namespace::Namespace;
use super::tests::{create_req, mconf, register, root};

fn ns_with(
    dir: &std::path::Path,
    f: impl FnOnce(&mut curvine_common::conf::MasterConf),
) -> Namespace {
    let mut c = mconf(dir);
    c.replicas = 2;
    f(&mut c);
    Namespace::load(c, false, Duration::from_secs(30)).unwrap()
}

fn hb(ns: &Namespace, w: u32, req: HeartbeatRequest) -> HeartbeatResponse {
    ns.heartbeat(HeartbeatRequest {
        worker_id: w,
        ..req
    })
    .unwrap()
    .0
}

/// A namespace of 2-replica files with three workers; returns it and their ids.
fn three_workers(dir: &std::path::Path) -> (Namespace, Vec<u32>) {
    let ns = ns_with(dir, |_| {});
    let ids = ["a", "b", "c"]
        .iter()
        .map(|h| register(&ns, h, (1 << 30, 0), (0, 0)))
        .collect();
    (ns, ids)
}

/// `target` reports its copy of the 1000-byte `block` finished and committed.
fn copy_done(ns: &Namespace, target: u32, block: u64) {
    hb(
        ns,
        target,
        HeartbeatRequest {
            added: vec![BlockReplica {
                block_id: block,
                len: 1000,
                tier: StorageTier::Mem as i32,
            }],
            copy_results: vec![CopyResult {
                block_id: block,
                ok: true,
                error: String::new(),
            }],
            ..Default::default()
        },
    );
}

/// `w` reports its replica of `block` gone.
fn replica_gone(ns: &Namespace, w: u32, block: u64) {
    hb(
        ns,
        w,
        HeartbeatRequest {
            removed: vec![block],
            ..Default::default()
        },
    );
}

/// A complete 2-replica file of one 1000-byte block; returns (block, its workers).
fn two_replica_file(ns: &Namespace, path: &str) -> (u64, Vec<u32>) {
    let c = root();
    let st = ns.create(&create_req(path, &c)).unwrap().0 .0;
    let b = ns
        .add_block(&AddBlockRequest {
            file_id: st.id,
            path: path.into(),
            caller: Some(c.clone()),
            ..Default::default()
        })
        .unwrap()
        .0;
    let ws: Vec<u32> = b.locations.iter().map(|l| l.worker_id).collect();
    assert_eq!(ws.len(), 2);
    ns.complete(&CompleteRequest {
        file_id: st.id,
        path: path.into(),
        blocks: vec![CommittedBlock {
            block_id: b.block_id,
            len: 1000,
            worker_ids: ws.clone(),
        }],
        len: 1000,
        caller: Some(c),
        min_len: 0,
        mtime_ms: 0,
    })
    .unwrap();
    (b.block_id, ws)
}

#[test]
fn complete_refuses_a_block_with_too_few_replicas() {
    let d = tempfile::tempdir().unwrap();
    let ns = ns_with(d.path(), |_| {});
    for h in ["a", "b"] {
        register(&ns, h, (1 << 30, 0), (0, 0));
    }
    let c = root();
    let st = ns.create(&create_req("/f", &c)).unwrap().0 .0;
    let b = ns
        .add_block(&AddBlockRequest {
            file_id: st.id,
            path: "/f".into(),
            caller: Some(c.clone()),
            ..Default::default()
        })
        .unwrap()
        .0;
    let e = ns
        .complete(&CompleteRequest {
            file_id: st.id,
            path: "/f".into(),
            blocks: vec![CommittedBlock {
                block_id: b.block_id,
                len: 10,
                // the same worker twice is still one replica
                worker_ids: vec![b.locations[0].worker_id, b.locations[0].worker_id],
            }],
            len: 10,
            caller: Some(c),
            min_len: 0,
            mtime_ms: 0,
        })
        .unwrap_err();
    assert!(
        matches!(&e, FsError::Unavailable { message } if message.contains("1 of 2")),
        "{e:?}"
    );
    assert!(!ns.get_status("/f", true, &root()).unwrap().complete);
}

#[test]
fn bad_replica_is_removed_and_copied_back() {
    let d = tempfile::tempdir().unwrap();
    let (ns, ids) = three_workers(d.path());
    let (block, ws) = two_replica_file(&ns, "/f");
    let spare = *ids.iter().find(|w| !ws.contains(w)).unwrap();
    assert_eq!(ns.replication_scan().unwrap(), 0, "fully replicated");
    // a report about a worker without the replica changes nothing
    assert!(
        !ns.report_bad_block(BlockId(block), WorkerId(spare), "x")
            .unwrap()
            .0
    );
    let (removed, _) = ns
        .report_bad_block(BlockId(block), WorkerId(ws[0]), "checksum")
        .unwrap();
    assert!(removed);
    assert_eq!(ns.report().bad_replicas, 1);
    // the last live replica is never dropped
    assert!(
        !ns.report_bad_block(BlockId(block), WorkerId(ws[1]), "checksum")
            .unwrap()
            .0
    );
    assert_eq!(ns.replication_scan().unwrap(), 1);
    // scheduled once: a second scan does not duplicate it
    assert_eq!(ns.replication_scan().unwrap(), 0);
    let r = ns.report();
    assert_eq!((r.under_replicated, r.copies_in_flight), (1, 1));
    // the bad worker is told to delete its copy
    let replies: Vec<(u32, HeartbeatResponse)> = [ws[0], spare]
        .into_iter()
        .map(|w| (w, hb(&ns, w, HeartbeatRequest::default())))
        .collect();
    assert_eq!(replies[0].1.delete_blocks, vec![block]);
    // the copy goes to a worker without the block, from the good replica
    let (target, reply) = replies
        .into_iter()
        .find(|(_, r)| !r.copy_blocks.is_empty())
        .expect("a copy command");
    let cmd = &reply.copy_blocks[0];
    assert_eq!((cmd.block_id, cmd.len), (block, 1000));
    assert_eq!(cmd.source.as_ref().unwrap().worker_id, ws[1]);
    // the target commits it and reports
    copy_done(&ns, target, block);
    assert_eq!(ns.replication_scan().unwrap(), 0);
    let r = ns.report();
    assert_eq!(
        (r.under_replicated, r.copies_in_flight, r.copies_done),
        (0, 0, 1)
    );
    let (_, blocks) = ns.open("/f", &root()).unwrap();
    let mut locs: Vec<u32> = blocks[0].locations.iter().map(|l| l.worker_id).collect();
    locs.sort();
    let mut want = vec![ws[1], target];
    want.sort();
    assert_eq!(locs, want);
}

#[test]
fn failed_or_timed_out_copies_free_their_slot() {
    let d = tempfile::tempdir().unwrap();
    let ns = ns_with(d.path(), |c| {
        c.replication_timeout = curvine_common::conf::Dur(Duration::from_millis(50));
    });
    let ids: Vec<u32> = ["a", "b", "c"]
        .iter()
        .map(|h| register(&ns, h, (1 << 30, 0), (0, 0)))
        .collect();
    let (block, ws) = two_replica_file(&ns, "/f");
    let spare = *ids.iter().find(|w| !ws.contains(w)).unwrap();
    assert!(
        ns.report_bad_block(BlockId(block), WorkerId(ws[0]), "bad")
            .unwrap()
            .0
    );
    assert_eq!(ns.replication_scan().unwrap(), 1);
    let target = [spare, ws[0]]
        .into_iter()
        .find(|w| {
            !hb(&ns, *w, HeartbeatRequest::default())
                .copy_blocks
                .is_empty()
        })
        .unwrap();
    // a failed copy frees the slot and is scheduled again
    hb(
        &ns,
        target,
        HeartbeatRequest {
            copy_results: vec![CopyResult {
                block_id: block,
                ok: false,
                error: "source gone".into(),
            }],
            ..Default::default()
        },
    );
    let r = ns.report();
    assert_eq!((r.copies_in_flight, r.copies_failed), (0, 1));
    assert_eq!(ns.replication_scan().unwrap(), 1);
    // a copy never reported expires
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(
        ns.replication_scan().unwrap(),
        1,
        "rescheduled after the timeout"
    );
    assert_eq!(ns.report().copies_failed, 2);
}

#[test]
fn inflight_copies_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    let ns = ns_with(d.path(), |c| {
        c.replication_max_inflight = 3;
        c.replication_per_worker = 2;
    });
    for h in ["a", "b", "c", "d"] {
        register(&ns, h, (1 << 30, 0), (0, 0));
    }
    for i in 0..6 {
        let (block, ws) = two_replica_file(&ns, &format!("/f{i}"));
        assert!(
            ns.report_bad_block(BlockId(block), WorkerId(ws[0]), "bad")
                .unwrap()
                .0
        );
    }
    assert_eq!(ns.replication_scan().unwrap(), 3, "cluster-wide bound");
    let r = ns.report();
    assert_eq!((r.under_replicated, r.copies_in_flight), (6, 3));
    for w in r.workers {
        assert!(w.copies_in_flight <= 2, "per-worker bound: {w:?}");
    }
}

#[test]
fn periodic_scans_run_only_after_a_block_may_have_come_up_short() {
    let d = tempfile::tempdir().unwrap();
    let (ns, ids) = three_workers(d.path());
    assert!(ns.repl.needs_scan(), "a new master scans once");
    let (block, ws) = two_replica_file(&ns, "/f");
    assert_eq!(ns.replication_scan().unwrap(), 0);
    assert!(!ns.repl.needs_scan(), "every block whole, nothing since");
    // whole files written and deleted change nothing
    two_replica_file(&ns, "/g");
    ns.delete("/g", false, &root()).unwrap();
    assert!(!ns.repl.needs_scan());
    let replicas = |r: u32| SetAttrRequest {
        path: "/f".into(),
        replicas: Some(r),
        caller: Some(root()),
        ..Default::default()
    };
    ns.set_attr(&replicas(2)).unwrap();
    assert!(!ns.repl.needs_scan(), "the same replica count");
    // a file asking for more replicas: scans go on while its copy is in flight
    ns.set_attr(&replicas(3)).unwrap();
    assert!(ns.repl.needs_scan());
    assert_eq!(ns.replication_scan().unwrap(), 1);
    assert!(ns.repl.needs_scan(), "a copy in flight");
    let spare = *ids.iter().find(|w| !ws.contains(w)).unwrap();
    assert_eq!(
        hb(&ns, spare, HeartbeatRequest::default()).copy_blocks[0].block_id,
        block
    );
    copy_done(&ns, spare, block);
    assert_eq!(ns.replication_scan().unwrap(), 0);
    assert!(!ns.repl.needs_scan(), "whole again");
    // a worker reporting a replica gone
    replica_gone(&ns, ws[0], block);
    assert!(ns.repl.needs_scan());
    ns.set_attr(&replicas(2)).unwrap();
    assert_eq!(ns.replication_scan().unwrap(), 0);
    assert!(!ns.repl.needs_scan());
    // a worker registering (new, restarted or back from a loss)
    register(&ns, "d", (1 << 30, 0), (0, 0));
    assert!(ns.repl.needs_scan());
    assert_eq!(ns.replication_scan().unwrap(), 0);
    assert!(!ns.repl.needs_scan());
    // a block with no replica left is counted missing, but does not keep scans going
    let (h, hw) = two_replica_file(&ns, "/h");
    for w in hw {
        replica_gone(&ns, w, h);
    }
    assert_eq!(ns.replication_scan().unwrap(), 0);
    assert_eq!(ns.report().missing_blocks, 1);
    assert!(!ns.repl.needs_scan(), "nothing to copy from");
    // deleting its file counts it again
    ns.delete("/h", false, &root()).unwrap();
    assert!(ns.repl.needs_scan());
    ns.replication_scan().unwrap();
    assert_eq!(ns.report().missing_blocks, 0);
    assert!(!ns.repl.needs_scan());
    // deletes while nothing is missing do not
    two_replica_file(&ns, "/i");
    ns.delete("/i", false, &root()).unwrap();
    assert!(!ns.repl.needs_scan());
    // a bad replica, or a lost worker: marked and woken
    ns.repl.wake();
    assert!(ns.repl.needs_scan());
}
