//! The keys `ClusterConf` accepts, read from the code itself: serde's derived
//! `Deserialize` names a struct's fields when it asks for a struct, so a deserializer
//! that stops right there reports the sections of `ClusterConf` and the keys of each.
//! The Java client checks `fs.cv.<key>` settings against them, and a test checks that
//! `docs/configuration.md` documents each.

use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::ClusterConf;

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
        // not a struct (a test fails on the missing keys then)
        Err(Stop::Other(_)) | Ok(_) => &[],
    }
}

/// Every `(section, key)` of `ClusterConf`, in the order the code declares them.
pub fn keys() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for section in fields(None) {
        for key in fields(Some(section)) {
            out.push((*section, *key));
        }
    }
    out
}

/// Whether `[section] key` is a key of `ClusterConf`.
pub fn is_key(section: &str, key: &str) -> bool {
    fields(None)
        .iter()
        .find(|s| **s == section)
        .is_some_and(|s| fields(Some(s)).contains(&key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_sections() {
        assert!(is_key("master", "rpc_port"));
        assert!(is_key("client", "read_ahead"));
        assert!(!is_key("client", "rpc_port"));
        assert!(!is_key("nosuch", "rpc_port"));
        assert!(keys().len() > 50);
    }
}
