//! Text forms of sizes, modes, times and statuses for `cv`'s human-readable output.

use curvine_client::{FileStatus, FileType, StorageTier};

pub use curvine_common::report::human;

pub fn percent(used: u64, cap: u64) -> String {
    if cap == 0 {
        return "-".into();
    }
    format!("{:.0}%", used as f64 * 100.0 / cap as f64)
}

pub fn tier_name(t: i32) -> &'static str {
    StorageTier::try_from(t)
        .unwrap_or(StorageTier::Unspecified)
        .name()
}

pub fn mode_string(st: &FileStatus) -> String {
    let kind = match FileType::try_from(st.file_type) {
        Ok(FileType::Dir) => 'd',
        Ok(FileType::Symlink) => 'l',
        Ok(FileType::Fifo) => 'p',
        Ok(FileType::Socket) => 's',
        Ok(FileType::CharDevice) => 'c',
        Ok(FileType::BlockDevice) => 'b',
        _ => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    let m = st.mode;
    for (shift, special, special_ch) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (m & special != 0, x) {
            (true, true) => special_ch,
            (true, false) => special_ch.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `YYYY-MM-DD HH:MM` (UTC) from milliseconds since the epoch.
pub fn format_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // civil-from-days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

pub fn long_line(e: &FileStatus) -> String {
    let mut name = e.name.clone();
    if e.file_type == FileType::Symlink as i32 {
        name = format!("{name} -> {}", e.symlink_target);
    }
    format!(
        "{} {:>3} {:>6} {:>6} {:>10} {} {}",
        mode_string(e),
        e.nlink,
        e.uid,
        e.gid,
        human(e.len),
        format_time(e.mtime_ms),
        name
    )
}

pub fn stat_text(s: &FileStatus) -> String {
    let kind = match FileType::try_from(s.file_type) {
        Ok(FileType::Dir) => "directory",
        Ok(FileType::Symlink) => "symlink",
        Ok(FileType::Fifo) => "fifo",
        Ok(FileType::Socket) => "socket",
        Ok(FileType::CharDevice) => "character device",
        Ok(FileType::BlockDevice) => "block device",
        _ => "file",
    };
    let mut t = format!(
        "path: {}\ntype: {kind}\nid: {}\nsize: {} ({})\nmode: {} ({:04o})\nuid: {}\ngid: {}\nlinks: {}\nmtime: {}\natime: {}\nctime: {}\nblock size: {}\nreplicas: {}\ntier: {}\ncomplete: {}",
        s.path,
        s.id,
        s.len,
        human(s.len),
        mode_string(s),
        s.mode & 0o7777,
        s.uid,
        s.gid,
        s.nlink,
        format_time(s.mtime_ms),
        format_time(s.atime_ms),
        format_time(s.ctime_ms),
        human(s.block_size),
        s.replicas,
        tier_name(s.storage_tier),
        s.complete
    );
    if !s.symlink_target.is_empty() {
        t.push_str(&format!("\ntarget: {}", s.symlink_target));
    }
    if !s.ufs_key.is_empty() {
        t.push_str(&format!(
            "\nunder-store key: {}\npersisted: {}",
            s.ufs_key, s.persisted
        ));
    }
    if s.file_type == FileType::Dir as i32 {
        t.push_str(&format!("\nchildren: {}", s.children));
    }
    t
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_human_readable() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(4 << 30), "4.0 GiB");
        assert_eq!(percent(1, 4), "25%");
        assert_eq!(percent(1, 0), "-");
    }

    #[test]
    fn modes_print() {
        let st = FileStatus {
            file_type: FileType::Dir as i32,
            mode: 0o1777,
            ..Default::default()
        };
        assert_eq!(mode_string(&st), "drwxrwxrwt");
        let st = FileStatus {
            file_type: FileType::File as i32,
            mode: 0o4644,
            ..Default::default()
        };
        assert_eq!(mode_string(&st), "-rwSr--r--");
    }

    #[test]
    fn times_format_in_utc() {
        assert_eq!(format_time(0), "1970-01-01 00:00");
        assert_eq!(format_time(951_782_400_000), "2000-02-29 00:00");
        assert_eq!(format_time(1_700_000_000_000), "2023-11-14 22:13");
    }
}
