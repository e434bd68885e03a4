//! Reply buffers for large reads, reused. A 1 MiB read reply allocated fresh each time
//! costs more than the copy it holds: glibc serves it with mmap (page faults, zeroing,
//! and a TLB shootdown on every core at munmap) or memsets heap memory. The pool keeps
//! a few initialised buffers; a reply hands its buffer back when fuse3 drops it after
//! writing it to /dev/fuse.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use curvine_common::aligned::AlignedBuf;

/// Reads at least this large take a pooled buffer; smaller ones allocate.
const POOL_MIN: usize = 64 << 10;
/// Size of every pooled buffer: the largest read the kernel sends (256 pages).
const POOL_BUF: usize = 1 << 20;
/// Free buffers kept at most (the rest are freed).
const POOL_KEEP: usize = 32;

#[derive(Default)]
pub(crate) struct BufPool {
    free: Mutex<Vec<AlignedBuf>>,
}

/// A read buffer of a requested length; pooled ones return to the pool on drop.
pub(crate) struct ReadBuf {
    buf: Storage,
    len: usize,
    pool: Option<Arc<BufPool>>,
}

enum Storage {
    /// A small read's own allocation.
    Small(Vec<u8>),
    /// A pooled buffer of `POOL_BUF` bytes, page-aligned: the worker's block file is
    /// read into it and the kernel copies out of it, both faster from an aligned start.
    Pooled(AlignedBuf),
}

impl BufPool {
    /// A buffer of `len` bytes (content unspecified: the reader overwrites it).
    pub(crate) fn get(self: &Arc<Self>, len: usize) -> ReadBuf {
        if !(POOL_MIN..=POOL_BUF).contains(&len) {
            return ReadBuf {
                buf: Storage::Small(vec![0u8; len]),
                len,
                pool: None,
            };
        }
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        ReadBuf {
            buf: Storage::Pooled(reused.unwrap_or_else(|| AlignedBuf::zeroed(POOL_BUF))),
            len,
            pool: Some(self.clone()),
        }
    }

    #[cfg(test)]
    fn free_count(&self) -> usize {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl ReadBuf {
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Storage::Small(v) => &mut v[..self.len],
            Storage::Pooled(b) => &mut b[..self.len],
        }
    }

    pub(crate) fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// The reply: no copy, the buffer goes back to the pool when the reply is dropped.
    pub(crate) fn into_bytes(mut self) -> Bytes {
        if let Storage::Small(v) = &mut self.buf {
            let mut v = std::mem::take(v);
            v.truncate(self.len);
            return Bytes::from(v);
        }
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for ReadBuf {
    fn as_ref(&self) -> &[u8] {
        match &self.buf {
            Storage::Small(v) => &v[..self.len],
            Storage::Pooled(b) => &b[..self.len],
        }
    }
}

impl Drop for ReadBuf {
    fn drop(&mut self) {
        if let (Some(pool), Storage::Pooled(b)) = (self.pool.take(), &mut self.buf) {
            let mut free = pool.free.lock().unwrap_or_else(|p| p.into_inner());
            if free.len() < POOL_KEEP {
                free.push(std::mem::take(b));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_are_reused_small_ones_are_not() {
        let pool = Arc::new(BufPool::default());
        let mut b = pool.get(1 << 20);
        b.as_mut_slice()[0] = 7;
        b.truncate(100);
        let bytes = b.into_bytes();
        assert_eq!(bytes.len(), 100);
        assert_eq!(bytes[0], 7);
        assert_eq!(pool.free_count(), 0, "in use until the reply is dropped");
        drop(bytes);
        assert_eq!(pool.free_count(), 1);
        let again = pool.get(128 << 10);
        assert_eq!(again.as_ref().len(), 128 << 10);
        assert_eq!(again.as_ref().as_ptr() as usize % 4096, 0, "page-aligned");
        assert_eq!(pool.free_count(), 0, "the free buffer was taken");
        drop(again);
        assert_eq!(pool.free_count(), 1);

        let small = pool.get(4096);
        assert_eq!(small.into_bytes().len(), 4096);
        assert_eq!(pool.free_count(), 1, "small reads do not use the pool");
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_of_buffers() {
        let pool = Arc::new(BufPool::default());
        let held: Vec<ReadBuf> = (0..POOL_KEEP + 4).map(|_| pool.get(POOL_BUF)).collect();
        drop(held);
        assert_eq!(pool.free_count(), POOL_KEEP);
    }
}
