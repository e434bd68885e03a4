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

/// Size and alignment of a transparent huge page (x86-64, and arm64 with 4 KiB pages).
const HUGE: usize = 2 << 20;

/// A buffer for O_DIRECT reads of up to a few MiB: its own anonymous mapping, and from
/// 1 MiB on aligned to 2 MiB and advised as huge-page memory (`MADV_HUGEPAGE`).
///
/// An O_DIRECT read goes to the disk as one scatter-gather entry per physically
/// contiguous run of the buffer. Into 4 KiB pages from anywhere, a 1 MiB read is 256
/// entries, more than this project's virtio disk takes in one request (254), and each
/// request took 0.91-1.23 ms; into one huge page it is a single entry and took 0.73-0.79
/// ms, and SSD reads went from 1.27-1.71 to 1.98-2.08 GiB/s.
/// Where the kernel has no huge pages to give, the advice is refused or does
/// nothing and the buffer works as plain pages. The mapping is fresh, so its pages are
/// zero until written; no bytes are touched before the first read fills them.
#[derive(Debug)]
pub struct MappedBuf {
    /// Start of the mapping (null when empty) and its size.
    map: *mut u8,
    map_len: usize,
    /// Offset of the buffer in the mapping, its usable size and its current length.
    start: usize,
    cap: usize,
    len: usize,
}

// SAFETY: the mapping is owned by the value alone, like a Vec's heap memory.
#[allow(unsafe_code)]
unsafe impl Send for MappedBuf {}
#[allow(unsafe_code)]
unsafe impl Sync for MappedBuf {}

impl Default for MappedBuf {
    fn default() -> MappedBuf {
        MappedBuf {
            map: std::ptr::null_mut(),
            map_len: 0,
            start: 0,
            cap: 0,
            len: 0,
        }
    }
}

impl MappedBuf {
    /// A buffer of `cap` bytes, `cap` long. Fails only when the kernel refuses the mapping.
    #[allow(unsafe_code)]
    pub fn new(cap: usize) -> std::io::Result<MappedBuf> {
        if cap == 0 {
            return Ok(MappedBuf::default());
        }
        let huge = cap >= HUGE / 2;
        let map_len = if huge {
            // room to start on a 2 MiB boundary and cover whole huge pages from there
            cap.div_ceil(HUGE) * HUGE + HUGE
        } else {
            cap.div_ceil(PAGE) * PAGE
        };
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let map = map.cast::<u8>();
        let mut start = 0;
        if huge {
            start = map.align_offset(HUGE).min(HUGE);
            // SAFETY: the range lies inside the mapping made above. Advice only: a kernel
            // without transparent huge pages refuses it, and the pages stay small.
            unsafe {
                libc::madvise(
                    map.add(start).cast(),
                    cap.div_ceil(HUGE) * HUGE,
                    libc::MADV_HUGEPAGE,
                )
            };
        }
        Ok(MappedBuf {
            map,
            map_len,
            start,
            cap,
            len: cap,
        })
    }

    /// The length it was made with: the most `set_len` accepts.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Shrink, or grow back up to `capacity` (bytes keep their last content).
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.cap,
            "MappedBuf::set_len({len}) past its capacity {}",
            self.cap
        );
        self.len = len;
    }
}

impl Drop for MappedBuf {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if !self.map.is_null() {
            // SAFETY: the mapping made in `new`, unmapped once; no slices of it outlive
            // `self` (they borrow it).
            unsafe { libc::munmap(self.map.cast(), self.map_len) };
        }
    }
}

impl Deref for MappedBuf {
    type Target = [u8];
    #[allow(unsafe_code)]
    fn deref(&self) -> &[u8] {
        if self.map.is_null() {
            return &[];
        }
        // SAFETY: `start + len` lies inside the mapping, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.map.add(self.start), self.len) }
    }
}

impl DerefMut for MappedBuf {
    #[allow(unsafe_code)]
    fn deref_mut(&mut self) -> &mut [u8] {
        if self.map.is_null() {
            return &mut [];
        }
        // SAFETY: as in `deref`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.map.add(self.start), self.len) }
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
    fn mapped_bufs_start_on_a_page_or_a_huge_page_and_hold_their_bytes() {
        for cap in [0, 1, 4096, 64 << 10, 1 << 20, 3 << 20] {
            let mut b = MappedBuf::new(cap).unwrap();
            assert_eq!((b.len(), b.capacity()), (cap, cap));
            assert!(b.iter().all(|&x| x == 0));
            if cap > 0 {
                let align = if cap >= HUGE / 2 { HUGE } else { PAGE };
                assert_eq!(b.as_ptr() as usize % align, 0, "cap {cap}");
            }
            b.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8);
            let moved = Box::new(b);
            assert!(moved.iter().enumerate().all(|(i, &x)| x == i as u8));
        }
        let mut b = MappedBuf::new(8192).unwrap();
        b.set_len(100);
        assert_eq!(b.len(), 100);
        assert!(std::panic::catch_unwind(move || b.set_len(8193)).is_err());
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
