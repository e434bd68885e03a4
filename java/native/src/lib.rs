//! JNI library behind the Java client (`io.curvine.CurvineFileSystem`).
//!
//! Java calls the static natives of `io.curvine.NativeFs`; every entry point runs inside
//! `error::guard`, which catches panics and turns every failure into a Java exception
//! (an error code mapped to the Hadoop exception type on the Java side). Clients,
//! readers and writers live in handle tables, so a stale or closed handle is a clean
//! `IOException`, never a dangling pointer.
//!
//! `unsafe` is allowed here (the workspace denies it): JNI entry points must be
//! `#[no_mangle]`, and the zero-copy paths view Java memory as Rust slices.
#![allow(unsafe_code)]

mod client;
mod conf;
mod error;
mod handles;
mod namespace;
mod status;
mod streams;

pub use client::Client;
pub use conf::{build_conf, check_key, KeyCheck};
pub use error::{Failure, CODE_CLOSED, CODE_EOF, CODE_INVALID, CODE_PANIC};
