//! `FileStatus` -> `io.curvine.NativeStatus`, and uid/gid <-> user/group names.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::{LazyLock, Mutex};

use curvine_client::FileStatus;
use jni::objects::{JClass, JObject, JObjectArray, JValue};
use jni::JNIEnv;

use crate::error::JniResult;

const STATUS_CLASS: &str = "io/curvine/NativeStatus";
const STATUS_CTOR: &str =
    "(Ljava/lang/String;IJIJJJILjava/lang/String;Ljava/lang/String;Ljava/lang/String;I)V";

static USERS: LazyLock<Mutex<HashMap<u32, String>>> = LazyLock::new(Default::default);
static GROUPS: LazyLock<Mutex<HashMap<u32, String>>> = LazyLock::new(Default::default);

/// Buffer size for the reentrant passwd/group lookups.
const PW_BUF: usize = 16 << 10;

fn lookup_user(uid: u32) -> Option<String> {
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; PW_BUF];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to live, correctly sized local storage.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_name is a NUL-terminated string inside `buf`.
    Some(
        unsafe { CStr::from_ptr(pwd.pw_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn lookup_group(gid: u32) -> Option<String> {
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; PW_BUF];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in lookup_user.
    let rc = unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || grp.gr_name.is_null() {
        return None;
    }
    // SAFETY: getgrgid_r succeeded, so gr_name is a NUL-terminated string inside `buf`.
    Some(
        unsafe { CStr::from_ptr(grp.gr_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn cached(cache: &Mutex<HashMap<u32, String>>, id: u32, f: fn(u32) -> Option<String>) -> String {
    let mut m = cache.lock().unwrap_or_else(|p| p.into_inner());
    m.entry(id)
        .or_insert_with(|| f(id).unwrap_or_else(|| id.to_string()))
        .clone()
}

pub fn user_name(uid: u32) -> String {
    cached(&USERS, uid, lookup_user)
}

pub fn group_name(gid: u32) -> String {
    cached(&GROUPS, gid, lookup_group)
}

/// A user name (or a numeric id) -> uid.
pub fn user_id(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse() {
        return Some(n);
    }
    let c = CString::new(name).ok()?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; PW_BUF];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to live local storage; `c` is NUL-terminated.
    let rc =
        unsafe { libc::getpwnam_r(c.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut out) };
    (rc == 0 && !out.is_null()).then_some(pwd.pw_uid)
}

/// The primary group of user `name` (a name or a numeric uid) from the passwd database.
pub fn primary_group(name: &str) -> Option<u32> {
    // SAFETY: passwd is plain data (integers and pointers); all zeros is a valid value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; PW_BUF];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let rc = if let Ok(uid) = name.parse::<u32>() {
        // SAFETY: every pointer refers to live, correctly sized local storage.
        unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut out) }
    } else {
        let c = CString::new(name).ok()?;
        // SAFETY: as above; `c` is NUL-terminated.
        unsafe { libc::getpwnam_r(c.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut out) }
    };
    (rc == 0 && !out.is_null()).then_some(pwd.pw_gid)
}

/// A group name (or a numeric id) -> gid.
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse() {
        return Some(n);
    }
    let c = CString::new(name).ok()?;
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; PW_BUF];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in user_id.
    let rc =
        unsafe { libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut out) };
    (rc == 0 && !out.is_null()).then_some(grp.gr_gid)
}

fn to_java<'l>(env: &mut JNIEnv<'l>, class: &JClass<'l>, s: &FileStatus) -> JniResult<JObject<'l>> {
    let path = env.new_string(&s.path)?;
    let owner = env.new_string(user_name(s.uid))?;
    let group = env.new_string(group_name(s.gid))?;
    let target = env.new_string(&s.symlink_target)?;
    let obj = env.new_object(
        class,
        STATUS_CTOR,
        &[
            JValue::Object(&path),
            JValue::Int(s.file_type),
            JValue::Long(s.len as i64),
            JValue::Int(s.mode as i32),
            JValue::Long(s.mtime_ms),
            JValue::Long(s.atime_ms),
            JValue::Long(s.block_size as i64),
            JValue::Int(s.replicas as i32),
            JValue::Object(&owner),
            JValue::Object(&group),
            JValue::Object(&target),
            JValue::Int(s.children as i32),
        ],
    )?;
    env.delete_local_ref(path)?;
    env.delete_local_ref(owner)?;
    env.delete_local_ref(group)?;
    env.delete_local_ref(target)?;
    Ok(obj)
}

pub fn status_object<'l>(env: &mut JNIEnv<'l>, s: &FileStatus) -> JniResult<JObject<'l>> {
    let class = env.find_class(STATUS_CLASS)?;
    to_java(env, &class, s)
}

pub fn status_array<'l>(env: &mut JNIEnv<'l>, list: &[FileStatus]) -> JniResult<JObjectArray<'l>> {
    let class = env.find_class(STATUS_CLASS)?;
    let arr = env.new_object_array(list.len() as i32, &class, JObject::null())?;
    for (i, s) in list.iter().enumerate() {
        let o = to_java(env, &class, s)?;
        env.set_object_array_element(&arr, i as i32, &o)?;
        env.delete_local_ref(o)?;
    }
    Ok(arr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_resolves_both_ways_and_unknown_ids_stay_numeric() {
        assert_eq!(user_name(0), "root");
        assert_eq!(user_id("root"), Some(0));
        assert_eq!(user_id("1234"), Some(1234));
        assert_eq!(user_id("no-such-user-xyz"), None);
        assert_eq!(user_name(4_000_000_000), "4000000000");
        assert_eq!(group_id("no-such-group-xyz"), None);
    }
}
