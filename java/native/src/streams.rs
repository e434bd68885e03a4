//! Stream entry points of `io.curvine.NativeFs`: readers (positional reads into a Java
//! array or a direct ByteBuffer) and writers. Java keeps the stream position; a read
//! at `pos` never moves anything on this side, so `seek` is free.

use std::cell::RefCell;
use std::sync::{Arc, LazyLock, Mutex};

use curvine_client::{CreateOptions, FsReader, FsWriter};
use curvine_common::aligned::AlignedBuf;
use jni::objects::{JByteArray, JByteBuffer, JClass, JString};
use jni::sys::{jboolean, jint, jlong, JNI_TRUE};
use jni::JNIEnv;

use crate::client::Client;
use crate::error::{guard, Failure, JniResult};
use crate::handles::Table;
use crate::namespace::{client, jstr};

/// Largest piece copied between a Java array and the native buffer at once.
const COPY_CHUNK: usize = 8 << 20;

struct Reader {
    client: Arc<Client>,
    len: u64,
    inner: Mutex<FsReader>,
}

struct Writer {
    client: Arc<Client>,
    inner: Mutex<FsWriter>,
}

static READERS: LazyLock<Table<Reader>> = LazyLock::new(Table::new);
static WRITERS: LazyLock<Table<Writer>> = LazyLock::new(Table::new);

thread_local! {
    /// Per-thread staging buffer for heap-array reads and writes (reused, never shrunk
    /// below what the last call needed).
    static STAGING: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::default());
}

fn reader(h: jlong) -> JniResult<Arc<Reader>> {
    READERS
        .get(h)
        .ok_or_else(|| Failure::closed("input stream"))
}

fn writer(h: jlong) -> JniResult<Arc<Writer>> {
    WRITERS
        .get(h)
        .ok_or_else(|| Failure::closed("output stream"))
}

fn as_i8(buf: &[u8]) -> &[i8] {
    // SAFETY: u8 and i8 have the same size and alignment; every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<i8>(), buf.len()) }
}

fn as_i8_mut(buf: &mut [u8]) -> &mut [i8] {
    // SAFETY: as in as_i8.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<i8>(), buf.len()) }
}

fn check_range(off: jint, len: jint, cap: usize) -> JniResult<(usize, usize)> {
    if off < 0 || len < 0 || off as usize + len as usize > cap {
        return Err(Failure::Code(
            crate::error::CODE_INVALID,
            format!("range off={off} len={len} outside a buffer of {cap} bytes"),
        ));
    }
    Ok((off as usize, len as usize))
}

/// The memory of a direct ByteBuffer, `[off, off + len)`.
fn direct_slice<'a>(
    env: &mut JNIEnv<'_>,
    buf: &JByteBuffer<'_>,
    off: jint,
    len: jint,
) -> JniResult<&'a mut [u8]> {
    if buf.is_null() {
        return Err(Failure::invalid("buffer is null"));
    }
    let addr = env.get_direct_buffer_address(buf)?;
    let cap = env.get_direct_buffer_capacity(buf)?;
    let (off, len) = check_range(off, len, cap)?;
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: a direct buffer's memory is valid for `cap` bytes while the buffer is
    // reachable, which the Java caller guarantees for the duration of this call; the
    // range was checked against `cap`.
    Ok(unsafe { std::slice::from_raw_parts_mut(addr.add(off), len) })
}

// ---------------- readers ----------------

/// Make the staging buffer `len` bytes long, page-aligned (the block file is read into
/// it and written from it; see `curvine_common::aligned`).
fn staging_len(s: &mut AlignedBuf, len: usize) {
    if s.capacity() < len {
        *s = AlignedBuf::zeroed(len);
    }
    s.set_len(len);
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_openReader<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
) -> jlong {
    guard(&mut env, 0, |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let r = c.block_on(c.fs().open(&p))?;
        Ok(READERS.insert(Reader {
            len: r.len(),
            inner: Mutex::new(r),
            client: c,
        }))
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_readerLength<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jlong {
    guard(&mut env, -1, |_| Ok(reader(h)?.len as jlong))
}

fn pread(r: &Reader, pos: i64, dst: &mut [u8]) -> JniResult<jint> {
    if pos < 0 {
        return Err(Failure::Code(
            crate::error::CODE_EOF,
            format!("negative read position {pos}"),
        ));
    }
    if dst.is_empty() {
        return Ok(0);
    }
    if pos as u64 >= r.len {
        return Ok(-1);
    }
    let mut g = r.inner.lock().unwrap_or_else(|p| p.into_inner());
    let n = r.client.block_on(g.pread(pos as u64, dst))?;
    Ok(if n == 0 { -1 } else { n as jint })
}

/// Read up to `len` bytes at `pos` into `b[off..]`; -1 at the end of the file.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_read<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
    pos: jlong,
    b: JByteArray<'l>,
    off: jint,
    len: jint,
) -> jint {
    guard(&mut env, -1, |env| {
        let r = reader(h)?;
        if b.is_null() {
            return Err(Failure::invalid("buffer is null"));
        }
        let cap = env.get_array_length(&b)? as usize;
        let (off, len) = check_range(off, len, cap)?;
        let len = len.min(COPY_CHUNK);
        STAGING.with(|s| {
            let mut s = s.borrow_mut();
            staging_len(&mut s, len);
            let n = pread(&r, pos, &mut s[..len])?;
            if n > 0 {
                env.set_byte_array_region(&b, off as i32, as_i8(&s[..n as usize]))?;
            }
            Ok(n)
        })
    })
}

/// Read up to `len` bytes at `pos` straight into a direct ByteBuffer at `off`.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_readDirect<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
    pos: jlong,
    buf: JByteBuffer<'l>,
    off: jint,
    len: jint,
) -> jint {
    guard(&mut env, -1, |env| {
        let r = reader(h)?;
        let dst = direct_slice(env, &buf, off, len)?;
        pread(&r, pos, dst)
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_closeReader<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
) {
    guard(&mut env, (), |_| {
        READERS.remove(h);
        Ok(())
    })
}

// ---------------- writers ----------------

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_curvine_NativeFs_create<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    overwrite: jboolean,
    mode: jint,
    replicas: jint,
    block_size: jlong,
    create_parents: jboolean,
) -> jlong {
    guard(&mut env, 0, |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let opts = CreateOptions {
            overwrite: overwrite == JNI_TRUE,
            exclusive: overwrite != JNI_TRUE,
            create_parents: create_parents == JNI_TRUE,
            mode: if mode >= 0 { mode as u32 } else { 0o644 },
            replicas: replicas.max(0) as u32,
            block_size: block_size.max(0) as u64,
            // a Hadoop output stream is made to be written to
            first_block: true,
            ..Default::default()
        };
        let w = c.block_on(c.fs().create_with(&p, opts))?;
        Ok(WRITERS.insert(Writer {
            client: c,
            inner: Mutex::new(w),
        }))
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_append<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
) -> jlong {
    guard(&mut env, 0, |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let w = c.block_on(c.fs().append(&p))?;
        Ok(WRITERS.insert(Writer {
            client: c,
            inner: Mutex::new(w),
        }))
    })
}

/// The file length when the writer was opened (non-zero for appends).
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_writerPos<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jlong {
    guard(&mut env, -1, |_| {
        let w = writer(h)?;
        let g = w.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(g.pos() as jlong)
    })
}

fn write_all(w: &Writer, data: &[u8]) -> JniResult<()> {
    let mut g = w.inner.lock().unwrap_or_else(|p| p.into_inner());
    w.client.block_on(g.write(data))?;
    Ok(())
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_write<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
    b: JByteArray<'l>,
    off: jint,
    len: jint,
) {
    guard(&mut env, (), |env| {
        let w = writer(h)?;
        if b.is_null() {
            return Err(Failure::invalid("buffer is null"));
        }
        let cap = env.get_array_length(&b)? as usize;
        let (off, len) = check_range(off, len, cap)?;
        STAGING.with(|s| {
            let mut s = s.borrow_mut();
            let mut done = 0;
            while done < len {
                let n = (len - done).min(COPY_CHUNK);
                staging_len(&mut s, n);
                env.get_byte_array_region(&b, (off + done) as i32, as_i8_mut(&mut s[..n]))?;
                write_all(&w, &s[..n])?;
                done += n;
            }
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_writeDirect<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
    buf: JByteBuffer<'l>,
    off: jint,
    len: jint,
) {
    guard(&mut env, (), |env| {
        let w = writer(h)?;
        let src = direct_slice(env, &buf, off, len)?;
        write_all(&w, src)
    })
}

/// hflush/hsync: commit what was written and publish it to new readers.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_sync<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
) {
    guard(&mut env, (), |_| {
        let w = writer(h)?;
        let mut g = w.inner.lock().unwrap_or_else(|p| p.into_inner());
        w.client.block_on(g.sync())?;
        Ok(())
    })
}

/// Complete the file. The handle is gone afterwards, whether or not this succeeded.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_closeWriter<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    h: jlong,
) {
    guard(&mut env, (), |_| {
        let Some(w) = WRITERS.remove(h) else {
            return Ok(());
        };
        let mut g = w.inner.lock().unwrap_or_else(|p| p.into_inner());
        w.client.block_on(g.close())?;
        Ok(())
    })
}

/// Open readers plus writers in this JVM (tests check that closing releases them).
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_openStreams<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
) -> jint {
    guard(&mut env, 0, |_| Ok((READERS.len() + WRITERS.len()) as jint))
}
