//! Namespace entry points of `io.curvine.NativeFs`: connect, stat, list, mkdir, rename,
//! delete, attributes, truncate, xattrs, block locations, cluster report.

use std::sync::Arc;

use curvine_client::SetAttr;
use jni::objects::{JBooleanArray, JByteArray, JClass, JObject, JObjectArray, JString};
use jni::sys::{jboolean, jbyteArray, jint, jlong, jlongArray, jobject, jobjectArray, JNI_TRUE};
use jni::JNIEnv;

use crate::client::{Client, FS_HANDLES};
use crate::conf::{build_conf, check_key, KeyCheck};
use crate::error::{guard, Failure, JniResult};
use crate::status::{group_id, primary_group, status_array, status_object, user_id};

pub fn client(fs: jlong) -> JniResult<Arc<Client>> {
    FS_HANDLES
        .get(fs)
        .map(|c| (*c).clone())
        .ok_or_else(|| Failure::closed("file system"))
}

pub fn jstr(env: &mut JNIEnv<'_>, s: &JString<'_>, what: &str) -> JniResult<String> {
    if s.is_null() {
        return Err(Failure::invalid(format!("{what} is null")));
    }
    Ok(env.get_string(s)?.into())
}

fn string_array(
    env: &mut JNIEnv<'_>,
    arr: &JObjectArray<'_>,
    what: &str,
) -> JniResult<Vec<String>> {
    if arr.is_null() {
        return Err(Failure::invalid(format!("{what} is null")));
    }
    let n = env.get_array_length(arr)?;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let o = env.get_object_array_element(arr, i)?;
        let s = JString::from(o);
        out.push(jstr(env, &s, what)?);
        env.delete_local_ref(s)?;
    }
    Ok(out)
}

fn new_string_array<'l>(env: &mut JNIEnv<'l>, items: &[String]) -> JniResult<JObjectArray<'l>> {
    let arr = env.new_object_array(items.len() as i32, "java/lang/String", JObject::null())?;
    for (i, s) in items.iter().enumerate() {
        let js = env.new_string(s)?;
        env.set_object_array_element(&arr, i as i32, &js)?;
        env.delete_local_ref(js)?;
    }
    Ok(arr)
}

/// 0 = a known key with a good value, 1 = not a configuration key; a bad value throws.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_checkKey<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    key: JString<'l>,
    value: JString<'l>,
) -> jint {
    guard(&mut env, 0, |env| {
        let k = jstr(env, &key, "key")?;
        let v = jstr(env, &value, "value")?;
        match check_key(&k, &v) {
            KeyCheck::Ok => Ok(0),
            KeyCheck::Unknown => Ok(1),
            KeyCheck::Bad(m) => Err(Failure::Fs(curvine_common::FsError::config(m))),
        }
    })
}

/// A handle to the shared client for this configuration (connecting on first use).
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_connect<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
) -> jlong {
    guard(&mut env, 0, |env| {
        let k = string_array(env, &keys, "keys")?;
        let v = string_array(env, &values, "values")?;
        if k.len() != v.len() {
            return Err(Failure::invalid("keys and values differ in length"));
        }
        let pairs: Vec<(String, String)> = k.into_iter().zip(v).collect();
        let (conf, text) = build_conf(&pairs)?;
        let c = Client::get_or_connect(conf, &text)?;
        Ok(FS_HANDLES.insert(c))
    })
}

/// A handle to the shared client for this configuration acting as Hadoop user `user`
/// with groups `groups` (names or numeric ids): its uid, its primary group (the first
/// of `groups` that resolves, else its own), and every resolved group as supplementary.
/// Group names that do not resolve are left out; a user that does not resolve, or with
/// no group at all, is refused.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_connectAs<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
    user: JString<'l>,
    groups: JObjectArray<'l>,
) -> jlong {
    guard(&mut env, 0, |env| {
        let k = string_array(env, &keys, "keys")?;
        let v = string_array(env, &values, "values")?;
        if k.len() != v.len() {
            return Err(Failure::invalid("keys and values differ in length"));
        }
        let user = jstr(env, &user, "user")?;
        let group_names = string_array(env, &groups, "groups")?;
        let uid =
            user_id(&user).ok_or_else(|| Failure::invalid(format!("unknown user {user:?}")))?;
        let gids: Vec<u32> = group_names.iter().filter_map(|g| group_id(g)).collect();
        let gid = gids
            .first()
            .copied()
            .or_else(|| primary_group(&user))
            .ok_or_else(|| Failure::invalid(format!("user {user:?} has no group")))?;
        let pairs: Vec<(String, String)> = k.into_iter().zip(v).collect();
        let (conf, text) = build_conf(&pairs)?;
        let c = Client::get_or_connect(conf, &text)?;
        Ok(FS_HANDLES.insert(c.acting_as(uid, gid, &gids)))
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_disconnect<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
) {
    guard(&mut env, (), |_| {
        FS_HANDLES.remove(fs);
        Ok(())
    })
}

/// Distinct cluster clients in this JVM (tests check that instances share one).
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_clientCount<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
) -> jint {
    guard(&mut env, 0, |_| Ok(Client::count() as jint))
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_mkdirs<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    mode: jint,
) {
    guard(&mut env, (), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        c.block_on(c.fs().mkdir_with_mode(&p, true, mode as u32))?;
        Ok(())
    })
}

/// The status of `path` (following symlinks), or null when it does not exist (including
/// a path under a file, as HDFS answers).
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_getStatus<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
) -> jobject {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        match c.block_on(c.fs().stat(&p)) {
            Ok(st) => Ok(status_object(env, &st)?.into_raw()),
            Err(curvine_common::FsError::NotFound { .. })
            | Err(curvine_common::FsError::NotADirectory { .. }) => Ok(std::ptr::null_mut()),
            Err(e) => Err(e.into()),
        }
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_list<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let list = c.block_on(c.fs().list(&p))?;
        Ok(status_array(env, &list)?.into_raw())
    })
}

/// One page of a listing: entries after `startAfter` (at most `limit`, 0 = the master's
/// page size); `more[0]` is set when entries follow.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_listPage<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    start_after: JString<'l>,
    limit: jint,
    more: JBooleanArray<'l>,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let after = if start_after.is_null() {
            String::new()
        } else {
            jstr(env, &start_after, "startAfter")?
        };
        let limit = u32::try_from(limit)
            .map_err(|_| curvine_common::FsError::invalid(format!("list limit {limit}")))?;
        let (page, has_more) = c.block_on(c.fs().list_page(&p, &after, limit))?;
        if !more.is_null() && env.get_array_length(&more)? > 0 {
            env.set_boolean_array_region(&more, 0, &[u8::from(has_more)])?;
        }
        Ok(status_array(env, &page)?.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_rename<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    src: JString<'l>,
    dst: JString<'l>,
    flags: jint,
) {
    guard(&mut env, (), |env| {
        let c = client(fs)?;
        let s = jstr(env, &src, "source path")?;
        let d = jstr(env, &dst, "destination path")?;
        c.block_on(c.fs().rename_with_flags(&s, &d, flags as u32))?;
        Ok(())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_delete<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    recursive: jboolean,
) {
    guard(&mut env, (), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        c.block_on(c.fs().delete(&p, recursive == JNI_TRUE))?;
        Ok(())
    })
}

/// Change attributes; -1 (or null) leaves one as it is.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_curvine_NativeFs_setAttr<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    mode: jint,
    owner: JString<'l>,
    group: JString<'l>,
    mtime: jlong,
    atime: jlong,
    replicas: jint,
) {
    guard(&mut env, (), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let mut attr = SetAttr {
            mode: (mode >= 0).then_some(mode as u32),
            mtime_ms: (mtime >= 0).then_some(mtime),
            atime_ms: (atime >= 0).then_some(atime),
            replicas: (replicas > 0).then_some(replicas as u32),
            ..Default::default()
        };
        if !owner.is_null() {
            let name = jstr(env, &owner, "owner")?;
            attr.uid = Some(
                user_id(&name).ok_or_else(|| Failure::invalid(format!("unknown user {name:?}")))?,
            );
        }
        if !group.is_null() {
            let name = jstr(env, &group, "group")?;
            attr.gid = Some(
                group_id(&name)
                    .ok_or_else(|| Failure::invalid(format!("unknown group {name:?}")))?,
            );
        }
        c.block_on(c.fs().set_attr(&p, attr))?;
        Ok(())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_truncate<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    len: jlong,
) {
    guard(&mut env, (), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        if len < 0 {
            return Err(Failure::invalid(format!("negative length {len}")));
        }
        c.block_on(c.fs().truncate(&p, len as u64))?;
        Ok(())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_setXattr<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    name: JString<'l>,
    value: JByteArray<'l>,
    flags: jint,
) {
    guard(&mut env, (), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let n = jstr(env, &name, "xattr name")?;
        let v = if value.is_null() {
            Vec::new()
        } else {
            env.convert_byte_array(&value)?
        };
        c.block_on(c.fs().set_xattr(&p, &n, &v, flags as u32))?;
        Ok(())
    })
}

/// The value of an xattr, or null when the file has no such xattr.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_getXattr<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    name: JString<'l>,
) -> jbyteArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let n = jstr(env, &name, "xattr name")?;
        match c.block_on(c.fs().get_xattr(&p, &n)) {
            Ok(v) => Ok(env.byte_array_from_slice(&v)?.into_raw()),
            Err(curvine_common::FsError::NoSuchXattr { .. }) => Ok(std::ptr::null_mut()),
            Err(e) => Err(e.into()),
        }
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_listXattrs<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let names = c.block_on(c.fs().list_xattr(&p))?;
        Ok(new_string_array(env, &names)?.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_removeXattr<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    name: JString<'l>,
) {
    guard(&mut env, (), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let n = jstr(env, &name, "xattr name")?;
        c.block_on(c.fs().remove_xattr(&p, &n))?;
        Ok(())
    })
}

/// Blocks overlapping `[start, start + len)`, one string each:
/// `offset,length,host:port;host:port...` (the worker data addresses of its replicas).
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_blockLocations<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
    path: JString<'l>,
    start: jlong,
    len: jlong,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let c = client(fs)?;
        let p = jstr(env, &path, "path")?;
        let blocks = c.block_on(c.block_locations(&p))?;
        let (start, end) = (
            start.max(0) as u64,
            start.max(0).saturating_add(len.max(0)) as u64,
        );
        let out: Vec<String> = blocks
            .iter()
            .filter(|b| b.offset < end && b.offset + b.len > start)
            .map(|b| {
                let hosts: Vec<String> = b
                    .locations
                    .iter()
                    .filter_map(|l| l.address.as_ref())
                    .map(|a| format!("{}:{}", a.host, a.data_port))
                    .collect();
                format!("{},{},{}", b.offset, b.len, hosts.join(";"))
            })
            .collect();
        Ok(new_string_array(env, &out)?.into_raw())
    })
}

/// `[capacity, used, files, dirs]` of the cluster.
#[no_mangle]
pub extern "system" fn Java_io_curvine_NativeFs_report<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    fs: jlong,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let c = client(fs)?;
        let r = c.block_on(c.fs().report())?;
        let arr = env.new_long_array(4)?;
        let v = [
            r.capacity as i64,
            r.used as i64,
            r.files as i64,
            r.dirs as i64,
        ];
        env.set_long_array_region(&arr, 0, &v)?;
        Ok(arr.into_raw())
    })
}
