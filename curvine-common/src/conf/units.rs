//! The value types of configuration keys: byte sizes (`"128MB"`), durations
//! (`"30s"`) and storage tiers (`"ssd"`), each parsed from its text at load.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::proto::StorageTier;

/// A value a person wrote (in a config file, a mount's settings, on a command line)
/// that does not parse: what it should have been, the text, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad {what} {input:?}: {problem}")]
pub struct ParseError {
    /// What the text should have been: `size`, `duration`, `mode`, ...
    pub what: &'static str,
    pub input: String,
    pub problem: String,
}

impl ParseError {
    pub fn new(what: &'static str, input: &str, problem: impl Into<String>) -> ParseError {
        ParseError {
            what,
            input: input.to_string(),
            problem: problem.into(),
        }
    }
}

/// A byte size written as `"128MB"`, `"4GB"`, `"64KiB"` or a plain integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn as_u64(self) -> u64 {
        self.0
    }
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

/// Parse a size: digits with an optional unit B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB.
/// Units are binary (1KB = 1024 bytes), as in the seed benchmarks.
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = |problem: String| ParseError::new("size", s, problem);
    if num.is_empty() {
        return Err(bad("expected a number with an optional unit".into()));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(bad(format!("unknown unit {other:?}"))),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| bad(format!("{num:?} is not a number")))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(bad("out of range".into()));
    }
    Ok(bytes as u64)
}

impl FromStr for ByteSize {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_size(s).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        for (unit, shift) in [("TB", 40), ("GB", 30), ("MB", 20), ("KB", 10)] {
            if v >= 1 << shift && v.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", v >> shift);
            }
        }
        write!(f, "{v}B")
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(ByteSize(v)),
            Raw::Str(s) => parse_size(&s)
                .map(ByteSize)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A duration written as `"30s"`, `"500ms"`, `"5m"`, `"1h"` (a bare number is seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl Dur {
    pub fn get(self) -> Duration {
        self.0
    }
}

pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = |problem: String| ParseError::new("duration", s, problem);
    let v: f64 = num
        .parse()
        .map_err(|_| bad("expected e.g. 30s, 500ms, 5m".into()))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        other => return Err(bad(format!("unknown unit {other:?}"))),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad("out of range".into()));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(Dur(Duration::from_secs(v))),
            Raw::Str(s) => parse_duration(&s)
                .map(Dur)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A storage tier written as `"mem"`, `"ssd"` or `"hdd"` (or `""` for the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tier(pub StorageTier);

impl<'de> Deserialize<'de> for Tier {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Ok(Tier(StorageTier::Unspecified));
        }
        StorageTier::parse(&s).map(Tier).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown storage tier {s:?} (expected mem, ssd or hdd)"
            ))
        })
    }
}
