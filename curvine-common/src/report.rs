//! The JSON forms of the cluster report, file statuses and block locations: what
//! `cv ... --json` prints and the console's `/api/...` serves, from one function each
//! so the two always agree.

use serde_json::{json, Value};

use crate::proto::{
    FileStatus, FileType, LocatedBlock, ReportResponse, StorageTier, TaskReport, TierReport,
    WorkerReport, WorkerReports,
};
use crate::tasks::state_name;

/// `bytes` in binary units with one decimal (`1.5 GiB`), whole bytes below 1 KiB.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A master's wait for its workers' reports in words, as `cv report`, the console and
/// `/readyz` say it.
pub fn reporting_line(w: &WorkerReports) -> String {
    format!(
        "waiting for worker reports: {} of {} reported in {:.1} s, at most {:.1} s left",
        w.reported,
        w.expected,
        w.elapsed_ms as f64 / 1000.0,
        w.left_ms as f64 / 1000.0
    )
}

pub fn tier_name(t: i32) -> &'static str {
    StorageTier::try_from(t)
        .unwrap_or(StorageTier::Unspecified)
        .name()
}

/// `file`, `dir`, `symlink`, `fifo`, `socket`, `char` or `block`.
pub fn type_name(t: i32) -> &'static str {
    match FileType::try_from(t) {
        Ok(FileType::File) => "file",
        Ok(FileType::Dir) => "dir",
        Ok(FileType::Symlink) => "symlink",
        Ok(FileType::Fifo) => "fifo",
        Ok(FileType::Socket) => "socket",
        Ok(FileType::CharDevice) => "char",
        Ok(FileType::BlockDevice) => "block",
        _ => "unknown",
    }
}

/// A path's status (field names are documented in docs/web.md).
pub fn status_json(s: &FileStatus) -> Value {
    json!({
        "id": s.id,
        "path": s.path,
        "name": s.name,
        "type": type_name(s.file_type),
        "len": s.len,
        "mode": format!("{:o}", s.mode & 0o7777),
        "uid": s.uid,
        "gid": s.gid,
        "nlink": s.nlink,
        "mtime_ms": s.mtime_ms,
        "atime_ms": s.atime_ms,
        "ctime_ms": s.ctime_ms,
        "replicas": s.replicas,
        "block_size": s.block_size,
        "storage_tier": tier_name(s.storage_tier),
        "complete": s.complete,
        "symlink_target": s.symlink_target,
        "children": s.children,
        "ufs_key": s.ufs_key,
        "persisted": s.persisted,
    })
}

/// A block of a file and the workers holding it, each with the tier of its replica.
pub fn block_json(b: &LocatedBlock) -> Value {
    json!({
        "block_id": b.block_id,
        "offset": b.offset,
        "len": b.len,
        "locations": b.locations.iter().map(|l| {
            let a = l.address.clone().unwrap_or_default();
            json!({
                "worker_id": l.worker_id,
                "address": format!("{}:{}", a.host, a.data_port),
                "tier": tier_name(l.tier),
            })
        }).collect::<Vec<_>>(),
    })
}

fn tier_json(t: &TierReport) -> Value {
    json!({
        "tier": tier_name(t.tier),
        "capacity": t.capacity,
        "used": t.used,
        "blocks": t.blocks,
        "dir": t.dir,
    })
}

/// One background task (`curvine_common::tasks`).
pub fn task_json(t: &TaskReport) -> Value {
    json!({
        "name": t.name,
        "state": state_name(t.state),
        "detail": t.detail,
        "since_ms": t.since_ms,
        "runs": t.runs,
        "errors": t.errors,
        "last_error": t.last_error,
    })
}

/// Where a worker's decommission stands: `none`, `draining` (blocks left, or not yet
/// counted since it began) or `drained` (no block left on it).
pub fn drain_state(w: &WorkerReport) -> &'static str {
    match (w.decommissioning, w.drain_scanned && w.draining_blocks == 0) {
        (false, _) => "none",
        (true, false) => "draining",
        (true, true) => "drained",
    }
}

fn worker_json(w: &WorkerReport) -> Value {
    let a = w.address.clone().unwrap_or_default();
    json!({
        "id": a.worker_id,
        "address": format!("{}:{}", a.host, a.data_port),
        "state": if w.alive { "alive" } else { "lost" },
        "last_heartbeat_ms": w.last_heartbeat_ms,
        "scrubbed_bytes": w.scrubbed_bytes,
        "copies_in_flight": w.copies_in_flight,
        "decommission": drain_state(w),
        "draining_blocks": w.draining_blocks,
        "blocks": w.tiers.iter().map(|t| t.blocks).sum::<u64>(),
        "tiers": w.tiers.iter().map(tier_json).collect::<Vec<_>>(),
        "tasks": w.tasks.iter().map(task_json).collect::<Vec<_>>(),
    })
}

/// Capacity, usage and blocks per tier over the live workers, in tier order.
pub fn tiers_total(r: &ReportResponse) -> Vec<TierReport> {
    let mut out: Vec<TierReport> = Vec::new();
    for t in r.workers.iter().filter(|w| w.alive).flat_map(|w| &w.tiers) {
        match out.iter_mut().find(|o| o.tier == t.tier) {
            Some(o) => {
                o.capacity += t.capacity;
                o.used += t.used;
                o.blocks += t.blocks;
                o.evictable += t.evictable;
            }
            None => out.push(TierReport {
                tier: t.tier,
                capacity: t.capacity,
                used: t.used,
                blocks: t.blocks,
                dir: String::new(),
                evictable: t.evictable,
            }),
        }
    }
    out.sort_by_key(|t| t.tier);
    out
}

/// The report as one JSON object (field names are documented in docs/web.md).
pub fn report_json(r: &ReportResponse) -> Value {
    let live = r.workers.iter().filter(|w| w.alive).count();
    json!({
        "cluster_id": r.cluster_id,
        "capacity": r.capacity,
        "used": r.used,
        "free": r.capacity.saturating_sub(r.used),
        "files": r.files,
        "dirs": r.dirs,
        "blocks": r.blocks,
        "tiers": tiers_total(r).iter().map(|t| json!({
            "tier": tier_name(t.tier),
            "capacity": t.capacity,
            "used": t.used,
            "blocks": t.blocks,
        })).collect::<Vec<_>>(),
        "replication": {
            "under_replicated": r.under_replicated,
            "missing_blocks": r.missing_blocks,
            "copies_in_flight": r.copies_in_flight,
            "copies_done": r.copies_done,
            "copies_failed": r.copies_failed,
            "bad_replicas": r.bad_replicas,
        },
        "persist": {
            "pending": r.persist_pending,
            "pending_bytes": r.persist_pending_bytes,
            "failed": r.persist_failed,
        },
        "reporting": r.reporting.as_ref().map(|w| json!({
            "reported": w.reported,
            "expected": w.expected,
            "elapsed_ms": w.elapsed_ms,
            "left_ms": w.left_ms,
        })),
        "workers_live": live,
        "workers_lost": r.workers.len() - live,
        "workers": r.workers.iter().map(worker_json).collect::<Vec<_>>(),
        "tasks": r.tasks.iter().map(task_json).collect::<Vec<_>>(),
    })
}
