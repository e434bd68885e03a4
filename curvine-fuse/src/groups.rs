//! Supplementary groups of the processes calling the mount. A FUSE request carries the
//! caller's uid, primary gid and pid only; the master also needs the other groups (for
//! permission checks and for which group an owner may give a file), so they are read
//! from `/proc/PID/status` ("Groups:") and kept briefly per (pid, uid, gid). Root needs
//! none: it passes every check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the groups read for a process are used without reading them again.
const TTL: Duration = Duration::from_secs(1);
/// Processes remembered at most; past it, expired ones go first.
const MAX_PIDS: usize = 4096;

struct Entry {
    uid: u32,
    gid: u32,
    at: Instant,
    groups: Arc<[u32]>,
}

#[derive(Default)]
pub(crate) struct Groups {
    map: Mutex<HashMap<u32, Entry>>,
}

impl Groups {
    /// The supplementary groups of process `pid`, which made a request as `uid`/`gid`
    /// (empty for root, or when the process is gone).
    pub(crate) fn of(&self, pid: u32, uid: u32, gid: u32) -> Arc<[u32]> {
        if uid == 0 || pid == 0 {
            return Arc::from([]);
        }
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = map.get(&pid) {
            if e.uid == uid && e.gid == gid && e.at.elapsed() < TTL {
                return e.groups.clone();
            }
        }
        drop(map);
        let groups: Arc<[u32]> = read_groups(pid).unwrap_or_default().into();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_PIDS {
            map.retain(|_, e| e.at.elapsed() < TTL);
            if map.len() >= MAX_PIDS {
                map.clear();
            }
        }
        map.insert(
            pid,
            Entry {
                uid,
                gid,
                at: Instant::now(),
                groups: groups.clone(),
            },
        );
        groups
    }
}

/// The "Groups:" line of `/proc/PID/status` (a thread id works too).
fn read_groups(pid: u32) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_groups(&text)
}

fn parse_groups(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line_is_parsed() {
        let s = "Name:\tsh\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nNSpid:\t9\n";
        assert_eq!(parse_groups(s), Some(vec![4, 24, 27]));
        assert_eq!(parse_groups("Groups:\n"), Some(vec![]));
        assert_eq!(parse_groups("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_groups_are_read_and_root_needs_none() {
        let g = Groups::default();
        let me = std::process::id();
        assert!(g.of(me, 0, 0).is_empty());
        let mine = read_groups(me).expect("own status");
        assert_eq!(&*g.of(me, 1000, 1000), &mine[..]);
        assert!(g.of(u32::MAX - 1, 1000, 1000).is_empty(), "no such process");
    }
}
