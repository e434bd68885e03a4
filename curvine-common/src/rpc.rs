//! The framed control-plane transport: the `MasterService` calls carried over plain TCP
//! instead of gRPC, for clients that make many small calls (creates, stats).
//!
//! It shares the master's port with gRPC; the master tells them apart by the first four
//! bytes of a connection (`HELLO_MAGIC` here, `PRI ` for HTTP/2).
//!
//! Wire format, all integers big endian:
//! - hello, once, client to master: `CVMR`, version `u8`, token length `u16`, token.
//! - request: `[u32 len][u64 id][u16 method][prost request]`, `len` counting what follows it.
//! - reply: `[u32 len][u64 id][u8 kind][body]`:
//!   - `REPLY_OK`: the prost response;
//!   - `REPLY_ERR`: `[i32 grpc code][u32 message length][message][ErrorDetail]`, the same
//!     parts a `tonic::Status` carries, so errors decode exactly as they do over gRPC;
//!   - `REPLY_GOAWAY` (id 0): the master is stopping; it answers every request up to the
//!     `u64` id in the body and applied none after it.
//!
//! Requests on one connection are answered in any order; ids match them up.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{FsError, FsResult};
use crate::proto::*;
use crate::types::RequestId;

pub const HELLO_MAGIC: [u8; 4] = *b"CVMR";
pub const VERSION: u8 = 1;
/// The largest request or reply (matches the gRPC service's message limit).
pub const MAX_FRAME: usize = 256 << 20;
pub const MAX_TOKEN: usize = 4096;

pub const REPLY_OK: u8 = 0;
pub const REPLY_ERR: u8 = 1;
pub const REPLY_GOAWAY: u8 = 2;

/// The request id a master call carries (`CallerInfo.client_id` and `call_id`), for
/// the spans that follow it through client and master; none for calls without a caller.
pub trait HasRequestId {
    fn request_id(&self) -> RequestId;
}

macro_rules! with_caller {
    ($($req:ident)*) => {
        $(impl HasRequestId for $req {
            fn request_id(&self) -> RequestId {
                self.caller.as_ref().map_or_else(RequestId::default, |c| RequestId {
                    client: c.client_id,
                    call: c.call_id,
                })
            }
        })*
    };
}
with_caller! {
    AbandonRequest AddBlockRequest AddMasterRequest AppendRequest CancelLoadRequest
    CompleteRequest CreateRequest DecommissionRequest DeleteRequest FreeRequest
    GetStatusRequest GetXattrRequest LinkRequest ListMastersRequest ListRequest
    ListXattrRequest MkdirRequest MknodRequest MountRequest OpenRequest PersistRequest
    ReadlinkRequest RemoveMasterRequest RemoveXattrRequest RenameRequest
    ReportBadBlockRequest ResyncRequest SetAttrRequest SetXattrRequest SubmitLoadRequest
    SymlinkRequest SyncRequest TruncateRequest UmountRequest
}

macro_rules! without_caller {
    ($($req:ident)*) => {
        $(impl HasRequestId for $req {
            fn request_id(&self) -> RequestId {
                RequestId::default()
            }
        })*
    };
}
without_caller! {
    ReportRequest RegisterRequest HeartbeatRequest WatchRequest BlockReportPage
    ListMountsRequest GetMountRequest SyncJournalRequest GetLoadRequest
}

impl HasRequestId for RenewLeaseRequest {
    fn request_id(&self) -> RequestId {
        RequestId {
            client: self.client_id,
            call: 0,
        }
    }
}

/// A master call that can travel over this transport: its method number and reply type.
pub trait MasterRpc:
    prost::Message + Default + Clone + Send + Sync + HasRequestId + 'static
{
    const METHOD: u16;
    const NAME: &'static str;
    type Response: prost::Message + Default + Send + 'static;
}

/// Calls `$m!` with the table of master methods: `number Name Request Response fn_name;`.
/// Numbers are wire values: never reuse or renumber one.
#[macro_export]
macro_rules! master_methods {
    ($m:ident) => {
        $m! {
            1 Mkdir MkdirRequest MkdirResponse mkdir;
            2 Create CreateRequest CreateResponse create;
            3 Append AppendRequest AppendResponse append;
            4 AddBlock AddBlockRequest AddBlockResponse add_block;
            5 Complete CompleteRequest CompleteResponse complete;
            6 Sync SyncRequest SyncResponse sync;
            7 Abandon AbandonRequest AbandonResponse abandon;
            8 RenewLease RenewLeaseRequest RenewLeaseResponse renew_lease;
            9 GetStatus GetStatusRequest GetStatusResponse get_status;
            10 List ListRequest ListResponse list;
            11 Open OpenRequest OpenResponse open;
            12 Rename RenameRequest RenameResponse rename;
            13 Delete DeleteRequest DeleteResponse delete;
            14 SetAttr SetAttrRequest SetAttrResponse set_attr;
            15 Truncate TruncateRequest TruncateResponse truncate;
            16 Symlink SymlinkRequest SymlinkResponse symlink;
            17 Mknod MknodRequest MknodResponse mknod;
            18 Readlink ReadlinkRequest ReadlinkResponse readlink;
            19 Link LinkRequest LinkResponse link;
            20 SetXattr SetXattrRequest SetXattrResponse set_xattr;
            21 GetXattr GetXattrRequest GetXattrResponse get_xattr;
            22 ListXattr ListXattrRequest ListXattrResponse list_xattr;
            23 RemoveXattr RemoveXattrRequest RemoveXattrResponse remove_xattr;
            24 Report ReportRequest ReportResponse report;
            25 RegisterWorker RegisterRequest RegisterResponse register_worker;
            26 Heartbeat HeartbeatRequest HeartbeatResponse heartbeat;
            27 ReportBadBlock ReportBadBlockRequest ReportBadBlockResponse report_bad_block;
            28 Watch WatchRequest WatchResponse watch;
            29 ReportBlocks BlockReportPage BlockReportPageResponse report_blocks;
            30 Mount MountRequest MountResponse mount;
            31 Umount UmountRequest UmountResponse umount;
            32 ListMounts ListMountsRequest ListMountsResponse list_mounts;
            33 GetMount GetMountRequest GetMountResponse get_mount;
            34 Resync ResyncRequest ResyncResponse resync;
            35 Free FreeRequest FreeResponse free;
            50 SyncJournal SyncJournalRequest SyncJournalResponse sync_journal;
            40 SubmitLoad SubmitLoadRequest SubmitLoadResponse submit_load;
            41 GetLoad GetLoadRequest GetLoadResponse get_load;
            42 CancelLoad CancelLoadRequest CancelLoadResponse cancel_load;
            36 Persist PersistRequest PersistResponse persist;
            60 Decommission DecommissionRequest DecommissionResponse decommission;
            61 ListMasters ListMastersRequest ListMastersResponse list_masters;
            62 AddMaster AddMasterRequest AddMasterResponse add_master;
            63 RemoveMaster RemoveMasterRequest RemoveMasterResponse remove_master;
        }
    };
}

macro_rules! impl_master_rpc {
    ($($id:literal $name:ident $req:ident $resp:ident $f:ident;)*) => {
        $(impl MasterRpc for $req {
            const METHOD: u16 = $id;
            const NAME: &'static str = stringify!($name);
            type Response = $resp;
        })*
    };
}
master_methods!(impl_master_rpc);

/// The hello a client sends first.
pub fn hello(token: &str) -> FsResult<Vec<u8>> {
    if token.len() > MAX_TOKEN {
        return Err(FsError::config("cluster.auth_token is too long"));
    }
    let mut b = Vec::with_capacity(7 + token.len());
    b.extend_from_slice(&HELLO_MAGIC);
    b.push(VERSION);
    b.put_u16(token.len() as u16);
    b.extend_from_slice(token.as_bytes());
    Ok(b)
}

/// Append one request frame to `out`.
pub fn encode_request<R: MasterRpc>(out: &mut BytesMut, id: u64, req: &R) {
    let len = 8 + 2 + req.encoded_len();
    out.reserve(4 + len);
    out.put_u32(len as u32);
    out.put_u64(id);
    out.put_u16(R::METHOD);
    // BytesMut grows as needed, so encoding cannot run out of space
    let _ = req.encode(out);
}

/// Append one reply frame to `out`: the encoded response, or an error with the parts a
/// `tonic::Status` carries.
pub fn encode_reply(out: &mut BytesMut, id: u64, reply: Result<&[u8], &tonic::Status>) {
    match reply {
        Ok(body) => {
            out.reserve(4 + 9 + body.len());
            out.put_u32((9 + body.len()) as u32);
            out.put_u64(id);
            out.put_u8(REPLY_OK);
            out.extend_from_slice(body);
        }
        Err(st) => {
            let (message, details) = (st.message(), st.details());
            let len = 9 + 4 + 4 + message.len() + details.len();
            out.reserve(4 + len);
            out.put_u32(len as u32);
            out.put_u64(id);
            out.put_u8(REPLY_ERR);
            out.put_i32(st.code() as i32);
            out.put_u32(message.len() as u32);
            out.extend_from_slice(message.as_bytes());
            out.extend_from_slice(details);
        }
    }
}

/// Append a goaway frame: requests up to `last_id` are answered, later ones were not
/// applied.
pub fn encode_goaway(out: &mut BytesMut, last_id: u64) {
    out.put_u32(9 + 8);
    out.put_u64(0);
    out.put_u8(REPLY_GOAWAY);
    out.put_u64(last_id);
}

/// Take one whole frame (without its length prefix) off the front of `buf`, if `buf`
/// holds one. A length above `MAX_FRAME` or below `min` is a protocol error.
pub fn split_frame(buf: &mut BytesMut, min: usize) -> FsResult<Option<Bytes>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if !(min..=MAX_FRAME).contains(&len) {
        return Err(FsError::protocol(format!("bad rpc frame length {len}")));
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// A request frame's parts: id, method and the encoded request.
pub fn parse_request(mut frame: Bytes) -> FsResult<(u64, u16, Bytes)> {
    if frame.len() < 10 {
        return Err(FsError::protocol("short rpc request"));
    }
    let id = frame.get_u64();
    let method = frame.get_u16();
    Ok((id, method, frame))
}

/// A reply as the client sees it.
#[derive(Debug)]
pub enum Reply {
    Ok(Bytes),
    Err(tonic::Status),
    /// The master stops; it applied no request with a larger id than this.
    GoAway(u64),
}

/// A reply frame's id and contents.
pub fn parse_reply(mut frame: Bytes) -> FsResult<(u64, Reply)> {
    if frame.len() < 9 {
        return Err(FsError::protocol("short rpc reply"));
    }
    let id = frame.get_u64();
    match frame.get_u8() {
        REPLY_OK => Ok((id, Reply::Ok(frame))),
        REPLY_ERR => {
            if frame.len() < 8 {
                return Err(FsError::protocol("short rpc error reply"));
            }
            let code = frame.get_i32();
            let mlen = frame.get_u32() as usize;
            if frame.len() < mlen {
                return Err(FsError::protocol("rpc error message past the frame"));
            }
            let message = String::from_utf8_lossy(&frame.split_to(mlen)).into_owned();
            let status = tonic::Status::with_details(tonic::Code::from_i32(code), message, frame);
            Ok((id, Reply::Err(status)))
        }
        REPLY_GOAWAY => {
            if frame.len() < 8 {
                return Err(FsError::protocol("short rpc goaway"));
            }
            Ok((id, Reply::GoAway(frame.get_u64())))
        }
        k => Err(FsError::protocol(format!("unknown rpc reply kind {k}"))),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn request_and_replies_round_trip() {
        let req = GetStatusRequest {
            path: "/a/ü".into(),
            ..Default::default()
        };
        let mut buf = BytesMut::new();
        encode_request(&mut buf, 7, &req);
        encode_reply(&mut buf, 7, Ok(b"xyz"));
        let st = tonic::Status::from(FsError::not_found("/a%zz"));
        encode_reply(&mut buf, 8, Err(&st));
        encode_goaway(&mut buf, 8);
        buf.extend_from_slice(&[0, 0]); // a partial next frame

        let f = split_frame(&mut buf, 10).unwrap().unwrap();
        let (id, method, body) = parse_request(f).unwrap();
        assert_eq!((id, method), (7, GetStatusRequest::METHOD));
        assert_eq!(GetStatusRequest::decode(body).unwrap(), req);

        let f = split_frame(&mut buf, 9).unwrap().unwrap();
        assert!(matches!(parse_reply(f).unwrap(), (7, Reply::Ok(b)) if &b[..] == b"xyz"));
        let f = split_frame(&mut buf, 9).unwrap().unwrap();
        let (id, Reply::Err(back)) = parse_reply(f).unwrap() else {
            panic!("not an error")
        };
        assert_eq!(id, 8);
        let e = FsError::from(back);
        assert!(matches!(e, FsError::NotFound { .. }), "{e}");
        assert!(e.to_string().contains("/a%zz"), "{e}");
        let f = split_frame(&mut buf, 9).unwrap().unwrap();
        assert!(matches!(parse_reply(f).unwrap(), (0, Reply::GoAway(8))));
        assert!(split_frame(&mut buf, 9).unwrap().is_none());
    }

    #[test]
    fn bad_lengths_are_refused() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 1][..]);
        assert!(split_frame(&mut buf, 9).is_err());
        let mut buf = BytesMut::from(&[0, 0, 0, 2, 1, 2][..]);
        assert!(split_frame(&mut buf, 9).is_err());
        assert!(parse_reply(Bytes::from_static(&[0; 9][..])).is_ok());
        let mut f = vec![0u8; 8];
        f.push(REPLY_ERR);
        f.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 200]);
        assert!(parse_reply(Bytes::from(f)).is_err(), "message past the end");
        assert!(parse_request(Bytes::from_static(&[0; 9][..])).is_err());
        let mut ids = std::collections::HashSet::new();
        macro_rules! unique {
            ($($id:literal $name:ident $req:ident $resp:ident $f:ident;)*) => {
                $(assert!(ids.insert($req::METHOD), stringify!($name));)*
            };
        }
        master_methods!(unique);
        assert_eq!(ids.len(), 44);
    }
}
