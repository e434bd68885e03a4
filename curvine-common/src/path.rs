//! Path validation and normalization. Paths are absolute, `/`-separated UTF-8; `.` and
//! `..` components, NUL bytes and over-long names are rejected rather than guessed at.

use crate::error::{FsError, FsResult};

/// NAME_MAX: the longest name of one entry, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// PATH_MAX: a path given to a call is shorter than this (at most 4095 bytes: Linux
/// counts the terminating NUL in PATH_MAX).
pub const MAX_PATH_LEN: usize = 4096;
/// The longest path a mount makes: its directory, then a path of up to PATH_MAX-1 bytes
/// relative to a directory deep inside it (a program's working directory). The
/// master's `max_path_len` is as long by default.
pub const MAX_MOUNT_PATH_LEN: usize = 65536;

/// Validate `path` (shorter than PATH_MAX) and return its components (empty for `/`).
/// Repeated and trailing slashes are accepted and ignored.
pub fn components(path: &str) -> FsResult<Vec<&str>> {
    components_within(path, MAX_PATH_LEN - 1)
}

/// `components`, for a path of at most `max_len` bytes.
pub fn components_within(path: &str, max_len: usize) -> FsResult<Vec<&str>> {
    let bad = |m: &str| FsError::InvalidPath {
        path: path.to_string(),
        message: m.to_string(),
    };
    if path.is_empty() {
        return Err(bad("empty path"));
    }
    if !path.starts_with('/') {
        return Err(bad("not absolute"));
    }
    if path.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    if path.len() > max_len {
        return Err(FsError::NameTooLong {
            path: path.to_string(),
        });
    }
    let mut out = Vec::new();
    for c in path.split('/') {
        match c {
            "" => continue,
            "." | ".." => return Err(bad("'.' and '..' components are not allowed")),
            _ if c.len() > MAX_NAME_LEN => {
                return Err(FsError::NameTooLong {
                    path: path.to_string(),
                })
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

/// The normalized form of `path` (`/a/b`, or `/`).
pub fn normalize(path: &str) -> FsResult<String> {
    normalize_within(path, MAX_PATH_LEN - 1)
}

/// `normalize`, for a path of at most `max_len` bytes.
pub fn normalize_within(path: &str, max_len: usize) -> FsResult<String> {
    let comps = components_within(path, max_len)?;
    Ok(join(&comps))
}

pub fn join(comps: &[&str]) -> String {
    if comps.is_empty() {
        return "/".to_string();
    }
    let mut s = String::new();
    for c in comps {
        s.push('/');
        s.push_str(c);
    }
    s
}

/// Child path of a normalized directory path.
pub fn child(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Validate a single name (an entry in a directory).
pub fn check_name(name: &str) -> FsResult<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(FsError::InvalidPath {
            path: name.to_string(),
            message: "bad file name".into(),
        });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(FsError::NameTooLong {
            path: name.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_normalizes() {
        assert_eq!(components("/").unwrap(), Vec::<&str>::new());
        assert_eq!(components("//a///b/").unwrap(), vec!["a", "b"]);
        assert_eq!(normalize("/a//b/").unwrap(), "/a/b");
        assert_eq!(components("/数据/ファイル").unwrap().len(), 2);
        assert_eq!(child("/", "x"), "/x");
        assert_eq!(child("/a", "x"), "/a/x");
    }

    #[test]
    fn rejects_bad_paths() {
        for p in ["", "a/b", "/a/../b", "/./a", "/a\0b"] {
            assert!(
                matches!(components(p), Err(FsError::InvalidPath { .. })),
                "{p:?}"
            );
        }
        let long = format!("/{}", "x".repeat(256));
        assert!(matches!(
            components(&long),
            Err(FsError::NameTooLong { .. })
        ));
        let ok = format!("/{}", "x".repeat(255));
        assert!(components(&ok).is_ok());
        let deep = "/abcdefgh".repeat(600);
        assert!(matches!(
            components(&deep),
            Err(FsError::NameTooLong { .. })
        ));
        assert_eq!(
            components_within(&deep, MAX_MOUNT_PATH_LEN).unwrap().len(),
            600
        );
        // PATH_MAX counts the NUL: 4095 bytes pass, 4096 do not
        let under = format!("/{}", "a/".repeat(2047));
        assert_eq!(under.len(), MAX_PATH_LEN - 1);
        assert!(components(&under).is_ok());
        let at = format!("{under}b");
        assert!(matches!(components(&at), Err(FsError::NameTooLong { .. })));
    }
}
