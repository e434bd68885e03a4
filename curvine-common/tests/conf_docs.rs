//! `docs/configuration.md` documents every key of `ClusterConf`, and only those. The
//! keys come from the code itself (`conf::keys`).

use std::collections::BTreeSet;

use curvine_common::conf::keys::keys;

/// Every `(section, key)` of `ClusterConf`.
fn conf_keys() -> BTreeSet<(String, String)> {
    keys()
        .into_iter()
        .map(|(s, k)| (s.to_string(), k.to_string()))
        .collect()
}

/// Every `(section, key)` that `docs/configuration.md` documents: the first cell,
/// `` `key` ``, of each table row under a `` ## `[section]` `` heading.
fn doc_keys(doc: &str) -> BTreeSet<(String, String)> {
    let mut keys = BTreeSet::new();
    let mut section: Option<String> = None;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            // `[section]`, or `[[section]]` for an array of tables
            section = h
                .trim()
                .strip_prefix("`[")
                .and_then(|s| s.strip_suffix("]`"))
                .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string());
            continue;
        }
        let Some(sec) = &section else { continue };
        let Some(cell) = line.strip_prefix("| `") else {
            continue;
        };
        if let Some((key, _)) = cell.split_once("` |") {
            keys.insert((sec.clone(), key.to_string()));
        }
    }
    keys
}

#[test]
fn every_cluster_conf_key_is_documented() {
    // at run time: a test binary built in another checkout sharing the target dir
    // still reads this checkout's docs
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let path = std::path::Path::new(&dir).join("../docs/configuration.md");
    let doc =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let code = conf_keys();
    assert!(
        code.len() > 50,
        "the probe found only {} keys: {code:?}",
        code.len()
    );
    let documented = doc_keys(&doc);
    let missing: Vec<String> = code
        .difference(&documented)
        .map(|(s, k)| format!("{s}.{k}"))
        .collect();
    let stale: Vec<String> = documented
        .difference(&code)
        .map(|(s, k)| format!("{s}.{k}"))
        .collect();
    assert!(
        missing.is_empty(),
        "keys of ClusterConf missing from docs/configuration.md (add a row under \
         ## `[section]`): {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/configuration.md documents keys ClusterConf does not have: {stale:?}"
    );
}

#[test]
fn the_doc_parser_reads_rows_under_their_section() {
    let doc = "## `[master]`\n\n| key | unit |\n| --- | --- |\n| `rpc_port` | port |\n\n\
               ## Notes\n\n| `not_a_key` | x |\n";
    let keys = doc_keys(doc);
    let want: BTreeSet<(String, String)> = [("master".to_string(), "rpc_port".to_string())]
        .into_iter()
        .collect();
    assert_eq!(keys, want);
}
