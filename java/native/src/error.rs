//! Failures of a JNI call and how they reach Java: a code (the `FsError` code, or one of
//! the `CODE_*` below) and a message, turned into an exception by the Java method
//! `io.curvine.NativeErrors.create(int, String)`. A panic never crosses JNI.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use curvine_common::FsError;
use jni::objects::{JThrowable, JValue};
use jni::JNIEnv;

/// Read or seek past the end of the file (`EOFException`).
pub const CODE_EOF: i32 = 100;
/// The stream or file system was closed (`IOException`).
pub const CODE_CLOSED: i32 = 101;
/// A Rust panic inside the library (`IOException`).
pub const CODE_PANIC: i32 = 102;
/// A null or malformed argument from Java (`IllegalArgumentException`-like `IOException`).
pub const CODE_INVALID: i32 = 103;

#[derive(Debug)]
pub enum Failure {
    /// An error of the client or the cluster.
    Fs(FsError),
    /// A failure with one of the `CODE_*` codes.
    Code(i32, String),
    /// A JNI call failed; a Java exception may already be pending.
    Jni(jni::errors::Error),
}

pub type JniResult<T> = Result<T, Failure>;

impl From<FsError> for Failure {
    fn from(e: FsError) -> Self {
        Failure::Fs(e)
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Self {
        Failure::Jni(e)
    }
}

impl Failure {
    pub fn closed(what: &str) -> Failure {
        Failure::Code(CODE_CLOSED, format!("{what} is closed"))
    }

    pub fn invalid(msg: impl Into<String>) -> Failure {
        Failure::Code(CODE_INVALID, msg.into())
    }

    fn code_and_message(&self) -> (i32, String) {
        match self {
            Failure::Fs(e) => (e.code() as i32, e.to_string()),
            Failure::Code(c, m) => (*c, m.clone()),
            Failure::Jni(jni::errors::Error::NullPtr(what))
            | Failure::Jni(jni::errors::Error::NullDeref(what)) => {
                (CODE_INVALID, format!("null argument ({what})"))
            }
            Failure::Jni(e) => (CODE_PANIC, format!("JNI call failed: {e}")),
        }
    }
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Throw `f` as a Java exception unless one is already pending.
pub fn throw(env: &mut JNIEnv<'_>, f: &Failure) {
    if env.exception_check().unwrap_or(false) {
        return;
    }
    let (code, msg) = f.code_and_message();
    if let Err(e) = throw_mapped(env, code, &msg) {
        // The mapping class is missing or failed: fall back to a plain IOException.
        if env.exception_check().unwrap_or(false) {
            let _ = env.exception_clear();
        }
        let _ = env.throw_new("java/io/IOException", format!("{msg} (code {code}; {e})"));
    }
}

fn throw_mapped(env: &mut JNIEnv<'_>, code: i32, msg: &str) -> jni::errors::Result<()> {
    let jmsg = env.new_string(msg)?;
    let ex = env
        .call_static_method(
            "io/curvine/NativeErrors",
            "create",
            "(ILjava/lang/String;)Ljava/lang/Throwable;",
            &[JValue::Int(code), JValue::Object(&jmsg)],
        )?
        .l()?;
    env.throw(JThrowable::from(ex))
}

/// Run the body of a JNI entry point: a failure or a panic becomes a Java exception and
/// `default` is returned to the JVM (which ignores it while the exception is pending).
pub fn guard<'l, T>(
    env: &mut JNIEnv<'l>,
    default: T,
    body: impl FnOnce(&mut JNIEnv<'l>) -> JniResult<T>,
) -> T {
    match catch_unwind(AssertUnwindSafe(|| body(env))) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            throw(env, &f);
            default
        }
        Err(p) => {
            let f = Failure::Code(
                CODE_PANIC,
                format!("curvine native library panicked: {}", panic_message(&*p)),
            );
            throw(env, &f);
            default
        }
    }
}
