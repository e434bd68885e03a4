//! Byte buffers that start on a page boundary.
//!
//! The kernel copies into and out of user buffers (`pread` into one, `write` from one)
//! with `rep movsb`, which on this machine's AMD CPUs slows down when the user buffer
//! does not start on a 64-byte boundary. A 128 KiB `pread` from tmpfs ran at about
//! 6 GiB/s into a page-aligned buffer, 3.7-5.3 GiB/s into one 16 bytes past it and
//! 1.6-2.2 GiB/s at 8 bytes past; `pwrite` from a buffer 16 bytes off ran about 20 %
//! slower. glibc hands out large allocations 16 bytes past a page boundary, so a plain
//! `vec![0; 1 << 20]` is the slow case. Tools like fio and dd align their buffers too.

use std::ops::{Deref, DerefMut};

/// Alignment of the start of every `AlignedBuf`.
pub const PAGE: usize = 4096;

/// A zero-initialised byte buffer whose first byte is page-aligned. Moving it keeps the
/// alignment: the bytes live in a heap allocation that never moves.
#[derive(Debug, Default)]
pub struct AlignedBuf {
    vec: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        let vec = vec![0u8; len + PAGE];
        // align_offset may in principle give up (usize::MAX); then stay unaligned
        let start = vec.as_ptr().align_offset(PAGE);
        let start = if start < PAGE { start } else { 0 };
        AlignedBuf { vec, start, len }
    }

    /// The length it was made with: the most `set_len` accepts.
    pub fn capacity(&self) -> usize {
        self.vec.len().saturating_sub(PAGE)
    }

    /// Shrink, or grow back up to `capacity` (bytes keep their last content).
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity(),
            "AlignedBuf::set_len({len}) past its capacity {}",
            self.capacity()
        );
        self.len = len;
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.vec[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.vec[self.start..self.start + self.len]
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for AlignedBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_page_and_keeps_it_when_moved() {
        for len in [0, 1, 4095, 4096, 128 << 10, 1 << 20] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            assert_eq!(b.as_ptr() as usize % PAGE, 0, "len {len}");
            b.iter_mut().for_each(|x| *x = 7);
            let moved = Box::new(b);
            assert_eq!(moved.as_ptr() as usize % PAGE, 0);
            assert!(moved.iter().all(|&x| x == 7));
        }
    }

    #[test]
    fn set_len_stays_inside_the_allocation() {
        let mut b = AlignedBuf::zeroed(8192);
        b.set_len(100);
        assert_eq!(b.len(), 100);
        b.set_len(8192);
        assert_eq!(b.len(), 8192);
        assert_eq!(b.capacity(), 8192);
        assert!(std::panic::catch_unwind(move || b.set_len(8193)).is_err());
    }
}
