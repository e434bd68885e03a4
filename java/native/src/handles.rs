//! Handle tables: Java holds a `long` id, never a pointer, so a closed or bogus handle
//! is a clean error instead of a crash.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

pub struct Table<T> {
    next: AtomicI64,
    map: RwLock<HashMap<i64, Arc<T>>>,
}

impl<T> Table<T> {
    pub fn new() -> Self {
        Table {
            next: AtomicI64::new(1),
            map: RwLock::new(HashMap::new()),
        }
    }

    pub fn insert(&self, v: T) -> i64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.map
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::new(v));
        id
    }

    pub fn get(&self, id: i64) -> Option<Arc<T>> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    pub fn remove(&self, id: i64) -> Option<Arc<T>> {
        self.map
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
    }

    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_handles_are_gone_and_ids_are_not_reused() {
        let t = Table::new();
        let a = t.insert(1u32);
        let b = t.insert(2u32);
        assert_ne!(a, b);
        assert_eq!(*t.get(a).unwrap(), 1);
        assert_eq!(*t.remove(a).unwrap(), 1);
        assert!(t.get(a).is_none());
        assert!(t.remove(a).is_none());
        let c = t.insert(3u32);
        assert!(c != a && c != b);
        assert_eq!(t.len(), 2);
    }
}
