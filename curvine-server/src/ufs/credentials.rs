//! Credentials a mount takes from a file (`credentials_file`), read by the master when
//! it mounts and when it starts. Their values join the options the operator is built
//! from and reach workers as the mount's other secrets do; they are never stored with
//! the mount, listed or logged (the file's path is).
//!
//! The file holds `key = value` lines, `#` or `;` comments and blank lines. Keys are the
//! service's option keys; for S3 the names of AWS's shared credentials file
//! (`aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`) are accepted too.
//! Lines under a `[name]` (or `[profile name]`) header belong to that profile: only the
//! one named by `credentials_profile` (default `default`) is read, with the lines above
//! the first header. So `~/.aws/credentials` itself can be named.

use std::collections::HashMap;
use std::path::Path;

use curvine_common::{FsError, FsResult};

/// The option naming the file.
pub const FILE_OPTION: &str = "credentials_file";
/// The option naming the profile (section) of the file to read.
pub const PROFILE_OPTION: &str = "credentials_profile";
const DEFAULT_PROFILE: &str = "default";

/// Whether `key` is one of Curvine's own options (read by the master, never given to
/// OpenDAL).
pub fn is_own_option(key: &str) -> bool {
    key == FILE_OPTION || key == PROFILE_OPTION
}

/// `options` as the operator of `uri` is built from them: the credentials file's
/// values merged in, Curvine's own options out. A file that cannot be read or parsed,
/// or that sets a key the options set too, is refused naming the file (and the line),
/// never a value.
pub fn resolve(
    uri: &str,
    options: &HashMap<String, String>,
    known: impl Fn(&str) -> bool,
) -> FsResult<HashMap<String, String>> {
    let mut out: HashMap<String, String> = options
        .iter()
        .filter(|(k, _)| !is_own_option(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let Some(file) = options.get(FILE_OPTION) else {
        if options.contains_key(PROFILE_OPTION) {
            return Err(FsError::invalid(format!(
                "option {PROFILE_OPTION:?} needs {FILE_OPTION:?}"
            )));
        }
        return Ok(out);
    };
    let bad = |why: String| FsError::invalid(format!("{FILE_OPTION} {file}: {why}"));
    if !Path::new(file).is_absolute() {
        return Err(bad("not an absolute path".into()));
    }
    let profile = options
        .get(PROFILE_OPTION)
        .map_or(DEFAULT_PROFILE, String::as_str);
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let pairs = parse(&text, profile, bad)?;
    if pairs.is_empty() {
        return Err(bad(format!(
            "no key = value line (read: the lines above any [section], and [{profile}])"
        )));
    }
    let s3 = uri.starts_with("s3://");
    for (line, key, value) in pairs {
        let key = match key.as_str() {
            "aws_access_key_id" if s3 => "access_key_id".to_string(),
            "aws_secret_access_key" if s3 => "secret_access_key".to_string(),
            "aws_session_token" if s3 => "session_token".to_string(),
            _ => key,
        };
        if is_own_option(&key) {
            return Err(bad(format!(
                "line {line}: {key:?} cannot be set in the file"
            )));
        }
        if !known(&key) {
            return Err(bad(format!(
                "line {line}: unknown option {key:?} for {uri}"
            )));
        }
        if out.contains_key(&key) {
            return Err(bad(format!(
                "line {line}: {key:?} is given as an option too (give it in one place)"
            )));
        }
        out.insert(key, value);
    }
    Ok(out)
}

/// The (line number, key, value) of the lines above any section and of section
/// `profile`. An error names the line, never its content.
fn parse(
    text: &str,
    profile: &str,
    bad: impl Fn(String) -> FsError,
) -> FsResult<Vec<(usize, String, String)>> {
    let mut out = Vec::new();
    let mut section: Option<String> = None;
    let mut found = false;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest
                .strip_suffix(']')
                .ok_or_else(|| bad(format!("line {n}: a section header must end with ]")))?
                .trim();
            let name = name.strip_prefix("profile ").unwrap_or(name).trim();
            found |= name == profile;
            section = Some(name.to_string());
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| bad(format!("line {n}: expected key = value")))?;
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(bad(format!("line {n}: expected key = value")));
        }
        if section.as_deref().is_some_and(|s| s != profile) {
            continue;
        }
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        if out
            .iter()
            .any(|(_, key, _): &(usize, String, String)| key == k)
        {
            return Err(bad(format!("line {n}: {k:?} is set twice")));
        }
        out.push((n, k.to_string(), v.to_string()));
    }
    if section.is_some() && !found && profile != DEFAULT_PROFILE {
        return Err(bad(format!("no [{profile}] section")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn any(_: &str) -> bool {
        true
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn a_key_value_file_is_merged_and_own_options_go() {
        let f = file("# keys\naccess_key_id = AKIA\n\nsecret_access_key=\"s3cr3t\"\n");
        let path = f.path().to_str().unwrap();
        let o = opts(&[("region", "us-east-1"), (FILE_OPTION, path)]);
        let r = resolve("s3://b/p", &o, any).unwrap();
        assert_eq!(
            r,
            opts(&[
                ("region", "us-east-1"),
                ("access_key_id", "AKIA"),
                ("secret_access_key", "s3cr3t")
            ])
        );
        let none = opts(&[("region", "us-east-1")]);
        assert_eq!(resolve("s3://b/p", &none, any).unwrap(), none);
    }

    #[test]
    fn an_aws_credentials_file_gives_its_profile() {
        let f = file(
            "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n\
             [profile prod]\naws_access_key_id = P\naws_secret_access_key = PS\n\
             aws_session_token = PT\n",
        );
        let path = f.path().to_str().unwrap();
        let r = resolve("s3://b", &opts(&[(FILE_OPTION, path)]), any).unwrap();
        assert_eq!(r["access_key_id"], "D");
        assert_eq!(r.len(), 2);
        let r = resolve(
            "s3://b",
            &opts(&[(FILE_OPTION, path), (PROFILE_OPTION, "prod")]),
            any,
        )
        .unwrap();
        assert_eq!(
            r,
            opts(&[
                ("access_key_id", "P"),
                ("secret_access_key", "PS"),
                ("session_token", "PT")
            ])
        );
    }

    #[test]
    fn a_bad_file_is_refused_naming_it_and_never_a_value() {
        let check = |text: Option<&str>, extra: &[(&str, &str)], why: &str| {
            let f = file(text.unwrap_or(""));
            let path = if text.is_some() {
                f.path().to_str().unwrap().to_string()
            } else {
                "/no/such/credentials".to_string()
            };
            let mut o = opts(extra);
            o.insert(FILE_OPTION.into(), path.clone());
            let e = resolve("s3://b", &o, |k| k != "unknown")
                .unwrap_err()
                .to_string();
            assert!(e.contains(&path), "{e}");
            assert!(e.contains(why), "{e}");
            assert!(!e.contains("s3cr3t"), "{e}");
        };
        check(None, &[], "No such file");
        check(Some(""), &[], "no key = value line");
        check(Some("s3cr3t\n"), &[], "line 1: expected key = value");
        check(Some("a = 1\n[x\n"), &[], "line 2: a section header");
        check(
            Some("secret_access_key = s3cr3t\n"),
            &[("secret_access_key", "other")],
            "given as an option too",
        );
        check(
            Some("k = s3cr3t\nk = s3cr3t\n"),
            &[],
            "line 2: \"k\" is set twice",
        );
        check(
            Some("[default]\nk = s3cr3t\n"),
            &[(PROFILE_OPTION, "prod")],
            "no [prod] section",
        );
        check(
            Some("credentials_file = /x\n"),
            &[],
            "cannot be set in the file",
        );
        check(Some("unknown = s3cr3t\n"), &[], "line 1: unknown option");
        let e = resolve("s3://b", &opts(&[(FILE_OPTION, "rel/path")]), any).unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
        let e = resolve("s3://b", &opts(&[(PROFILE_OPTION, "p")]), any).unwrap_err();
        assert!(e.to_string().contains(FILE_OPTION), "{e}");
    }
}
