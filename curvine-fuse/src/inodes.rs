//! Inode table: FUSE is inode based, Curvine is path based. The table maps each inode
//! the kernel knows (FUSE node id = Curvine `FileStatus.id`, the mount's root = 1) to its
//! Curvine path(s), counts the kernel's lookups, and follows renames and unlinks.

use std::collections::HashMap;
use std::sync::Mutex;

use curvine_common::path::{child, MAX_NAME_LEN};

/// The FUSE node id of the mount's root.
pub const ROOT_INO: u64 = 1;

#[derive(Debug, Default)]
struct Entry {
    /// Every known name of the inode (more than one for hard links); the first is used.
    paths: Vec<String>,
    nlookup: u64,
}

#[derive(Default)]
struct Maps {
    by_ino: HashMap<u64, Entry>,
    by_path: HashMap<String, u64>,
}

pub struct InodeTable {
    root_path: String,
    root_id: u64,
    maps: Mutex<Maps>,
}

/// Why a name cannot become a path.
#[derive(Debug, PartialEq, Eq)]
pub enum NameError {
    TooLong,
    Invalid,
}

impl InodeTable {
    /// `root_path`: the Curvine directory shown at the mount point, `root_id` its id.
    pub fn new(root_path: String, root_id: u64) -> InodeTable {
        InodeTable {
            root_path,
            root_id,
            maps: Mutex::new(Maps::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The FUSE node id of a Curvine inode id.
    pub fn ino_of(&self, id: u64) -> u64 {
        if id == self.root_id {
            ROOT_INO
        } else {
            id
        }
    }

    /// The Curvine path of a node, if the kernel may know it.
    pub fn path(&self, ino: u64) -> Option<String> {
        if ino == ROOT_INO {
            return Some(self.root_path.clone());
        }
        self.lock()
            .by_ino
            .get(&ino)
            .and_then(|e| e.paths.first().cloned())
    }

    /// The Curvine path of `name` in the directory `parent`.
    pub fn child_path(&self, parent: u64, name: &str) -> Result<Option<String>, NameError> {
        if name.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong);
        }
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(NameError::Invalid);
        }
        Ok(self.path(parent).map(|dir| child(&dir, name)))
    }

    /// The kernel looked `path` up (or got it from create/readdirplus): one more reference.
    pub fn remember(&self, ino: u64, path: &str) {
        if ino == ROOT_INO {
            return;
        }
        let mut m = self.lock();
        if let Some(old) = m.by_path.get(path).copied() {
            if old != ino {
                // the name now refers to another inode (replaced behind our back)
                remove_path(&mut m, old, path);
            }
        }
        let e = m.by_ino.entry(ino).or_default();
        e.nlookup += 1;
        if !e.paths.iter().any(|p| p == path) {
            e.paths.push(path.to_string());
        }
        m.by_path.insert(path.to_string(), ino);
    }

    /// The kernel dropped `n` references; true when it holds none any more.
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        let mut m = self.lock();
        let gone = match m.by_ino.get_mut(&ino) {
            Some(e) => {
                e.nlookup = e.nlookup.saturating_sub(n);
                e.nlookup == 0
            }
            None => false,
        };
        if gone {
            if let Some(e) = m.by_ino.remove(&ino) {
                for p in e.paths {
                    if m.by_path.get(&p) == Some(&ino) {
                        m.by_path.remove(&p);
                    }
                }
            }
        }
        gone
    }

    /// Whether the kernel may hold node `ino` (it was handed out and not forgotten).
    pub fn knows(&self, ino: u64) -> bool {
        ino == ROOT_INO || self.lock().by_ino.contains_key(&ino)
    }

    /// Every node the kernel may hold.
    pub fn inos(&self) -> Vec<u64> {
        let m = self.lock();
        std::iter::once(ROOT_INO)
            .chain(m.by_ino.keys().copied())
            .collect()
    }

    /// Every entry (directory node, name) the kernel may hold.
    pub fn entries(&self) -> Vec<(u64, String)> {
        let m = self.lock();
        m.by_path
            .keys()
            .filter_map(|p| {
                let (dir, name) = p.rsplit_once('/')?;
                let dir = if dir.is_empty() { "/" } else { dir };
                let parent = if dir == self.root_path {
                    ROOT_INO
                } else {
                    *m.by_path.get(dir)?
                };
                Some((parent, name.to_string()))
            })
            .collect()
    }

    /// The inode known at `path`, if any.
    pub fn ino_at(&self, path: &str) -> Option<u64> {
        self.lock().by_path.get(path).copied()
    }

    /// `path` was removed: forget that name (the inode keeps its other names).
    pub fn unlinked(&self, path: &str) {
        let mut m = self.lock();
        if let Some(ino) = m.by_path.get(path).copied() {
            remove_path(&mut m, ino, path);
        }
    }

    /// `src` was renamed to `dst` (swapped with it when `exchange`): move every name at or
    /// below them.
    pub fn renamed(&self, src: &str, dst: &str, exchange: bool) {
        let mut m = self.lock();
        if !exchange {
            // whatever was at dst is gone
            let below: Vec<(String, u64)> = collect_under(&m, dst);
            for (p, ino) in below {
                remove_path(&mut m, ino, &p);
            }
        }
        let from_src = collect_under(&m, src);
        let from_dst = if exchange {
            collect_under(&m, dst)
        } else {
            Vec::new()
        };
        for (p, ino) in from_src.iter().chain(from_dst.iter()) {
            remove_path(&mut m, *ino, p);
        }
        let moves = from_src
            .into_iter()
            .map(|(p, ino)| (format!("{dst}{}", &p[src.len()..]), ino))
            .chain(
                from_dst
                    .into_iter()
                    .map(|(p, ino)| (format!("{src}{}", &p[dst.len()..]), ino)),
            );
        for (p, ino) in moves {
            if let Some(e) = m.by_ino.get_mut(&ino) {
                e.paths.push(p.clone());
                m.by_path.insert(p, ino);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_ino.len()
    }
}

/// `(path, ino)` for `prefix` itself and every known path below it.
fn collect_under(m: &Maps, prefix: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    if let Some(ino) = m.by_path.get(prefix) {
        out.push((prefix.to_string(), *ino));
    }
    let dir = format!("{}/", prefix.trim_end_matches('/'));
    // one pass over all names; renames of directories are rare next to lookups
    for (p, ino) in &m.by_path {
        if p.starts_with(&dir) {
            out.push((p.clone(), *ino));
        }
    }
    out
}

fn remove_path(m: &mut Maps, ino: u64, path: &str) {
    if m.by_path.get(path) == Some(&ino) {
        m.by_path.remove(path);
    }
    if let Some(e) = m.by_ino.get_mut(&ino) {
        e.paths.retain(|p| p != path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_maps_to_one_and_children_join() {
        let t = InodeTable::new("/sub".into(), 7);
        assert_eq!(t.ino_of(7), ROOT_INO);
        assert_eq!(t.ino_of(9), 9);
        assert_eq!(t.path(ROOT_INO).as_deref(), Some("/sub"));
        assert_eq!(t.child_path(ROOT_INO, "a"), Ok(Some("/sub/a".to_string())));
        assert_eq!(
            t.child_path(ROOT_INO, &"x".repeat(256)),
            Err(NameError::TooLong)
        );
        assert!(t.child_path(ROOT_INO, &"x".repeat(255)).is_ok());
        assert_eq!(t.child_path(42, "a"), Ok(None));
    }

    #[test]
    fn forget_drops_after_all_lookups() {
        let t = InodeTable::new("/".into(), 1);
        t.remember(5, "/a");
        t.remember(5, "/a");
        t.forget(5, 1);
        assert_eq!(t.path(5).as_deref(), Some("/a"));
        t.forget(5, 1);
        assert_eq!(t.path(5), None);
        assert_eq!(t.ino_at("/a"), None);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn rename_moves_descendants() {
        let t = InodeTable::new("/".into(), 1);
        t.remember(2, "/d");
        t.remember(3, "/d/f");
        t.remember(4, "/d/e/g");
        t.remember(5, "/dx");
        t.remember(6, "/t");
        t.renamed("/d", "/t", false);
        assert_eq!(t.path(2).as_deref(), Some("/t"));
        assert_eq!(t.path(3).as_deref(), Some("/t/f"));
        assert_eq!(t.path(4).as_deref(), Some("/t/e/g"));
        assert_eq!(
            t.path(5).as_deref(),
            Some("/dx"),
            "a sibling prefix is untouched"
        );
        assert_eq!(t.path(6), None, "the replaced target lost its name");
        assert_eq!(t.ino_at("/d/f"), None);
    }

    #[test]
    fn exchange_swaps_both_trees() {
        let t = InodeTable::new("/".into(), 1);
        t.remember(2, "/a");
        t.remember(3, "/a/x");
        t.remember(4, "/b");
        t.renamed("/a", "/b", true);
        assert_eq!(t.path(2).as_deref(), Some("/b"));
        assert_eq!(t.path(3).as_deref(), Some("/b/x"));
        assert_eq!(t.path(4).as_deref(), Some("/a"));
    }

    #[test]
    fn known_entries_name_their_directory_node() {
        let t = InodeTable::new("/sub".into(), 7);
        t.remember(2, "/sub/d");
        t.remember(3, "/sub/d/f");
        let mut e = t.entries();
        e.sort();
        assert_eq!(e, vec![(ROOT_INO, "d".to_string()), (2, "f".to_string())]);
        assert!(t.knows(ROOT_INO) && t.knows(3) && !t.knows(4));
        let mut inos = t.inos();
        inos.sort();
        assert_eq!(inos, vec![ROOT_INO, 2, 3]);
    }

    #[test]
    fn hard_link_keeps_other_name() {
        let t = InodeTable::new("/".into(), 1);
        t.remember(2, "/a");
        t.remember(2, "/b");
        t.unlinked("/a");
        assert_eq!(t.path(2).as_deref(), Some("/b"));
    }
}
