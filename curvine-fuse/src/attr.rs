//! Conversions between Curvine's `FileStatus` and FUSE attributes, times and errnos.

use curvine_client::{FileStatus, FileType as CvType, FsError};
use fuse3::raw::prelude::{FileAttr, FileType};
use fuse3::{Errno, Timestamp};

/// `st_blksize` reported to programs: large, so stdio and cp use big buffers.
pub const BLKSIZE: u32 = 1 << 20;

pub fn errno(e: &FsError) -> Errno {
    Errno::from(e.errno())
}

pub fn kind(st: &FileStatus) -> FileType {
    match CvType::try_from(st.file_type) {
        Ok(CvType::Dir) => FileType::Directory,
        Ok(CvType::Symlink) => FileType::Symlink,
        Ok(CvType::Fifo) => FileType::NamedPipe,
        Ok(CvType::Socket) => FileType::Socket,
        Ok(CvType::CharDevice) => FileType::CharDevice,
        Ok(CvType::BlockDevice) => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub fn ts(ms: i64) -> Timestamp {
    Timestamp::new(
        ms.div_euclid(1000),
        (ms.rem_euclid(1000) * 1_000_000) as u32,
    )
}

/// A time kept as milliseconds with the nanoseconds of its second beside them.
pub fn ts_nsec(ms: i64, nsec: u32) -> Timestamp {
    Timestamp::new(
        ms.div_euclid(1000),
        curvine_common::types::time_nsec(ms, nsec),
    )
}

pub fn ms(t: Timestamp) -> i64 {
    t.sec * 1000 + i64::from(t.nsec / 1_000_000)
}

/// FUSE attributes of `st` under node id `ino`.
pub fn to_attr(st: &FileStatus, ino: u64) -> FileAttr {
    let kind = kind(st);
    let size = match kind {
        FileType::Symlink => st.symlink_target.len() as u64,
        FileType::Directory => 4096,
        _ => st.len,
    };
    let nlink = match kind {
        FileType::Directory => st.nlink.max(2),
        _ => st.nlink.max(1),
    };
    // space in use: a hole past the data takes none (du shows what is stored)
    let stored = match kind {
        FileType::RegularFile => size - st.tail_zeros.min(size),
        _ => size,
    };
    FileAttr {
        ino,
        size,
        blocks: stored.div_ceil(512),
        atime: ts_nsec(st.atime_ms, st.atime_nsec),
        mtime: ts_nsec(st.mtime_ms, st.mtime_nsec),
        ctime: ts(st.ctime_ms),
        kind,
        perm: (st.mode & 0o7777) as u16,
        nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: st.rdev,
        blksize: BLKSIZE,
    }
}

/// Attributes of a node that does not exist (negative lookup replies, `.`/`..`).
pub fn empty_attr(ino: u64, kind: FileType) -> FileAttr {
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: ts(0),
        mtime: ts(0),
        ctime: ts(0),
        kind,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLKSIZE,
    }
}

/// Apply local (unflushed) length and mtime.
pub fn apply_local(attr: &mut FileAttr, len: u64, mtime_ms: i64) {
    attr.size = len;
    attr.blocks = len.div_ceil(512);
    if mtime_ms > 0 {
        attr.mtime = ts(mtime_ms);
        attr.ctime = ts(mtime_ms);
    }
}

/// May a caller with `uid`/`gid` access a node with `mode`/`owner` for `mask` (R=4 W=2 X=1)?
pub fn permits(uid: u32, gid: u32, st: &FileStatus, mask: u32) -> bool {
    if uid == 0 {
        // root may do anything except execute a file nobody may execute
        return mask & 1 == 0 || st.mode & 0o111 != 0 || kind(st) == FileType::Directory;
    }
    let bits = if uid == st.uid {
        (st.mode >> 6) & 7
    } else if gid == st.gid {
        (st.mode >> 3) & 7
    } else {
        st.mode & 7
    };
    bits & mask == mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_with_negative_values() {
        for v in [0i64, 1, 999, 1_000, 1_234_567, -1, -1_500] {
            assert_eq!(ms(ts(v)), v);
        }
    }

    #[test]
    fn times_carry_their_nanoseconds() {
        let st = FileStatus {
            mtime_ms: 4_294_967_296_123,
            mtime_nsec: 123_456_789,
            // a status without nanoseconds: those of the millisecond
            atime_ms: -1_500,
            ..Default::default()
        };
        let a = to_attr(&st, 2);
        assert_eq!((a.mtime.sec, a.mtime.nsec), (4_294_967_296, 123_456_789));
        assert_eq!((a.atime.sec, a.atime.nsec), (-2, 500_000_000));
    }

    #[test]
    fn attr_of_file_and_dir() {
        let st = FileStatus {
            id: 9,
            file_type: CvType::File as i32,
            len: 1000,
            mode: 0o4755,
            nlink: 1,
            ..Default::default()
        };
        let a = to_attr(&st, 9);
        assert_eq!(a.kind, FileType::RegularFile);
        assert_eq!(a.size, 1000);
        assert_eq!(a.blocks, 2);
        assert_eq!(a.perm, 0o4755);
        // a hole past the data takes no blocks
        let sparse = FileStatus {
            len: 1 << 30,
            tail_zeros: (1 << 30) - 1000,
            ..st.clone()
        };
        assert_eq!(to_attr(&sparse, 9).size, 1 << 30);
        assert_eq!(to_attr(&sparse, 9).blocks, 2);
        let d = FileStatus {
            file_type: CvType::Dir as i32,
            ..st
        };
        assert_eq!(to_attr(&d, 1).kind, FileType::Directory);
        assert_eq!(to_attr(&d, 1).nlink, 2);
    }

    #[test]
    fn permission_bits() {
        let st = FileStatus {
            uid: 10,
            gid: 20,
            mode: 0o640,
            file_type: CvType::File as i32,
            ..Default::default()
        };
        assert!(permits(10, 0, &st, 6));
        assert!(permits(11, 20, &st, 4));
        assert!(!permits(11, 20, &st, 2));
        assert!(!permits(11, 21, &st, 4));
        assert!(permits(0, 0, &st, 6));
        assert!(!permits(0, 0, &st, 1));
    }
}
