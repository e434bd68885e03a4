//! `docs/configuration.md` documents every key of `ClusterConf`, and only those.
//!
//! The keys come from the code itself: serde's derived `Deserialize` names a struct's
//! fields when it asks for a struct, so a deserializer that stops right there reports
//! the sections of `ClusterConf` and the keys of each section.

use std::collections::BTreeSet;
use std::fmt;

use curvine_common::ClusterConf;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;

/// Why the probe stopped: the field names of the struct it was asked for, or anything
/// else (which the test reports).
#[derive(Debug)]
enum Stop {
    Fields(&'static [&'static str]),
    Other(String),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Fields(fields) => write!(f, "struct with fields {fields:?}"),
            Stop::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Stop::Other(msg.to_string())
    }
}

/// Stops at the first struct asked of it, with that struct's field names. With
/// `enter = Some(field)`, it instead hands the struct one entry, `field`, and stops
/// inside that field's value: the field names of a section.
struct Probe {
    enter: Option<&'static str>,
}

impl<'de> de::Deserializer<'de> for Probe {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop::Other("not a struct".into()))
    }

    /// An array of tables (`[[mount]]`): the probe goes on into its first element.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        match self.enter {
            None => visitor.visit_seq(OneElement { done: false }),
            Some(_) => Err(Stop::Other("not a struct".into())),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        match self.enter {
            None => Err(Stop::Fields(fields)),
            Some(field) => visitor.visit_map(OneEntry { key: Some(field) }),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// A sequence of one element, a `Probe` that stops at its struct.
struct OneElement {
    done: bool,
}

impl<'de> de::SeqAccess<'de> for OneElement {
    type Error = Stop;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Stop> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(None);
        }
        seed.deserialize(Probe { enter: None }).map(Some)
    }
}

/// A map of one entry whose value is a `Probe` that stops at its struct.
struct OneEntry {
    key: Option<&'static str>,
}

impl<'de> MapAccess<'de> for OneEntry {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        match self.key.take() {
            Some(k) => seed.deserialize(k.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        seed.deserialize(Probe { enter: None })
    }
}

/// The field names `ClusterConf` asks for, at the top (`enter = None`) or in a section.
fn fields(enter: Option<&'static str>) -> &'static [&'static str] {
    match ClusterConf::deserialize(Probe { enter }) {
        Err(Stop::Fields(f)) => f,
        Err(Stop::Other(e)) => panic!("ClusterConf section {enter:?} is not a struct: {e}"),
        Ok(_) => panic!("the probe of ClusterConf section {enter:?} did not stop"),
    }
}

/// Every `(section, key)` of `ClusterConf`.
fn conf_keys() -> BTreeSet<(String, String)> {
    let mut keys = BTreeSet::new();
    for section in fields(None) {
        for key in fields(Some(section)) {
            keys.insert((section.to_string(), key.to_string()));
        }
    }
    keys
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
