//! Data-plane framing: `[u32 frame_len][u32 header_len][DataHeader][payload]`, big endian,
//! where `frame_len = 4 + header_len + payload_len`. The payload is raw bytes so the
//! receiver can read it straight into its own buffer.

use bytes::{Buf, BytesMut};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{FsError, FsResult};
use crate::proto::{DataHeader, DataOp};

/// Headers are small except a short-circuit commit or open, which carries every chunk's
/// CRC of a block (a 1 GiB block of 4 KiB chunks needs about 1.3 MiB); anything larger
/// is garbage or an attack.
pub const MAX_HEADER_LEN: usize = 4 << 20;

/// Write one frame with a single vectored write (header and payload, no copy of the payload).
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    header: &DataHeader,
    payload: &[u8],
) -> FsResult<()> {
    let hlen = header.encoded_len();
    let mut head = Vec::with_capacity(8 + hlen);
    let frame_len = 4 + hlen + payload.len();
    let frame_len =
        u32::try_from(frame_len).map_err(|_| FsError::protocol("frame larger than 4 GiB"))?;
    head.extend_from_slice(&frame_len.to_be_bytes());
    head.extend_from_slice(&(hlen as u32).to_be_bytes());
    header
        .encode(&mut head)
        .map_err(|e| FsError::protocol(format!("encode header: {e}")))?;
    let mut chain = Buf::chain(&head[..], payload);
    w.write_all_buf(&mut chain)
        .await
        .map_err(|e| FsError::io_ctx("write frame", e))
}

/// Read one frame; the payload replaces the contents of `payload`.
/// Returns `Ok(None)` on a clean end of stream before the first byte of a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    payload: &mut BytesMut,
    max_payload: usize,
) -> FsResult<Option<DataHeader>> {
    let mut len4 = [0u8; 4];
    match r.read_exact(&mut len4).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(FsError::io_ctx("read frame", e)),
    }
    let frame_len = u32::from_be_bytes(len4) as usize;
    if frame_len < 4 {
        return Err(FsError::protocol(format!(
            "frame length {frame_len} too small"
        )));
    }
    r.read_exact(&mut len4)
        .await
        .map_err(|e| FsError::io_ctx("read frame header length", e))?;
    let hlen = u32::from_be_bytes(len4) as usize;
    if hlen > MAX_HEADER_LEN || hlen > frame_len - 4 {
        return Err(FsError::protocol(format!(
            "bad header length {hlen} in a frame of {frame_len} bytes"
        )));
    }
    let plen = frame_len - 4 - hlen;
    if plen > max_payload {
        return Err(FsError::protocol(format!(
            "payload of {plen} bytes exceeds the limit of {max_payload}"
        )));
    }
    let mut hbuf = vec![0u8; hlen];
    r.read_exact(&mut hbuf)
        .await
        .map_err(|e| FsError::io_ctx("read frame header", e))?;
    let header = DataHeader::decode(&hbuf[..])
        .map_err(|e| FsError::protocol(format!("decode frame header: {e}")))?;
    // read into the spare capacity: zeroing the payload first cost as much as a copy
    payload.clear();
    payload.reserve(plen);
    let mut rest = r.take(plen as u64);
    while payload.len() < plen {
        let n = rest
            .read_buf(payload)
            .await
            .map_err(|e| FsError::io_ctx("read frame payload", e))?;
        if n == 0 {
            return Err(FsError::io_ctx(
                "read frame payload",
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            ));
        }
    }
    Ok(Some(header))
}

/// A header of the given op (other fields default).
pub fn header(op: DataOp) -> DataHeader {
    DataHeader {
        op: op as i32,
        ..Default::default()
    }
}

/// An error reply frame header.
pub fn error_header(e: &FsError) -> DataHeader {
    DataHeader {
        op: DataOp::Error as i32,
        error: Some(e.to_detail()),
        ..Default::default()
    }
}

/// Turn an error frame into the error it carries; other ops pass through.
pub fn check_error(h: DataHeader) -> FsResult<DataHeader> {
    if h.op == DataOp::Error as i32 {
        return Err(match h.error {
            Some(d) => FsError::from_detail(d),
            None => FsError::protocol("error frame without detail"),
        });
    }
    Ok(h)
}

/// Add the worker's address to transport-level errors; typed errors from the worker
/// (checksum, no space, ...) pass through.
pub fn with_worker(e: FsError, addr: &str) -> FsError {
    match e {
        FsError::Io { message } if !message.contains(addr) => FsError::Io {
            message: format!("worker {addr}: {message}"),
        },
        FsError::Protocol { message } if !message.contains(addr) => FsError::Protocol {
            message: format!("worker {addr}: {message}"),
        },
        FsError::Timeout { message } if !message.contains(addr) => FsError::Timeout {
            message: format!("worker {addr}: {message}"),
        },
        other => other,
    }
}

/// One frame from the worker at `addr`: an error frame becomes its error, a closed
/// stream an I/O error, and transport errors name the worker.
pub async fn recv_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    max_frame: usize,
    addr: &str,
) -> FsResult<DataHeader> {
    match read_frame(rd, buf, max_frame).await {
        Ok(Some(h)) => check_error(h).map_err(|e| with_worker(e, addr)),
        Ok(None) => Err(FsError::io(format!("worker {addr}: connection closed"))),
        Err(e) => Err(with_worker(e, addr)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_errors_name_the_worker() {
        let e = with_worker(FsError::io("broken pipe"), "h:1");
        assert!(e.to_string().contains("h:1"), "{e}");
        let e = with_worker(FsError::no_space("full"), "h:1");
        assert!(matches!(e, FsError::NoSpace { .. }));
    }

    #[tokio::test]
    async fn frame_round_trip() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let mut h = header(DataOp::WriteData);
        h.block_id = 7;
        h.crcs = vec![1, 2, 3];
        write_frame(&mut a, &h, b"hello").await.unwrap();
        write_frame(&mut a, &header(DataOp::WriteCommit), &[])
            .await
            .unwrap();
        drop(a);
        let mut buf = BytesMut::new();
        let got = read_frame(&mut b, &mut buf, 1 << 20)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.block_id, 7);
        assert_eq!(got.crcs, vec![1, 2, 3]);
        assert_eq!(&buf[..], b"hello");
        let got = read_frame(&mut b, &mut buf, 1 << 20)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.op, DataOp::WriteCommit as i32);
        assert!(buf.is_empty());
        assert!(read_frame(&mut b, &mut buf, 1 << 20)
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn garbage_is_rejected_without_huge_allocation() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        // claims a 4 GiB frame with a 4 GiB header
        a.write_all(&[0xff; 16]).await.unwrap();
        drop(a);
        let mut buf = BytesMut::new();
        let e = read_frame(&mut b, &mut buf, 1 << 20).await.unwrap_err();
        assert!(matches!(e, FsError::Protocol { .. }), "{e}");

        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[0, 0, 0, 20, 0, 0, 0, 2, 0xff, 0xff])
            .await
            .unwrap();
        drop(a);
        assert!(read_frame(&mut b, &mut buf, 1 << 20).await.is_err());
    }

    #[tokio::test]
    async fn oversized_payload_is_rejected() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, &header(DataOp::WriteData), &[0u8; 2000])
            .await
            .unwrap();
        let mut buf = BytesMut::new();
        let e = read_frame(&mut b, &mut buf, 1000).await.unwrap_err();
        assert!(matches!(e, FsError::Protocol { .. }));
    }

    #[tokio::test]
    async fn payload_in_pieces_and_cut_short() {
        // a 64-byte pipe hands the payload over in many small reads
        let (mut a, mut b) = tokio::io::duplex(64);
        let body: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let sent = body.clone();
        let w = tokio::spawn(async move {
            write_frame(&mut a, &header(DataOp::WriteData), &sent)
                .await
                .unwrap();
            write_frame(&mut a, &header(DataOp::WriteData), &sent)
                .await
                .unwrap();
        });
        let mut buf = BytesMut::with_capacity(10);
        for _ in 0..2 {
            read_frame(&mut b, &mut buf, 1 << 20)
                .await
                .unwrap()
                .unwrap();
            assert!(buf[..] == body[..]);
        }
        w.await.unwrap();

        // the stream ends inside a payload: an error, not a short payload
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let mut whole = Vec::new();
        let h = header(DataOp::WriteData);
        let hlen = h.encoded_len();
        whole.extend_from_slice(&((4 + hlen + 100) as u32).to_be_bytes());
        whole.extend_from_slice(&(hlen as u32).to_be_bytes());
        h.encode(&mut whole).unwrap();
        whole.extend_from_slice(&[9u8; 60]);
        a.write_all(&whole).await.unwrap();
        drop(a);
        let e = read_frame(&mut b, &mut buf, 1 << 20).await.unwrap_err();
        assert!(e.to_string().contains("payload"), "{e}");
    }
}
