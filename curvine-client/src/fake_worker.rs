//! A tiny in-test worker on 127.0.0.1:0 speaking the data-plane protocol: remote and
//! short-circuit writes and reads, with switches for corruption and failures.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use curvine_common::checksum::{chunk_crcs, verify_chunks};
use curvine_common::frame::{error_header, header, read_frame, write_frame};
use curvine_common::proto::{BlockLocation, DataHeader, DataOp, LocatedBlock, WorkerAddress};
use curvine_common::FsError;
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
pub(crate) struct State {
    pub blocks: HashMap<u64, Vec<u8>>,
    pub chunk_size: usize,
    /// Offer short-circuit paths when asked.
    pub short_circuit: bool,
    /// Flip a byte in every streamed payload (CRCs stay those of the good data).
    pub corrupt_reads: bool,
    pub fail_commit: bool,
    pub data_frames: usize,
    pub streamed_frames: usize,
    pub sc_opens: usize,
    pub connections: usize,
    /// Tier reported in WRITE_OPEN's OK (0 = none).
    pub tier: i32,
}

pub(crate) struct FakeWorker {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
    pub dir: tempfile::TempDir,
}

impl FakeWorker {
    pub(crate) async fn start(chunk_size: usize) -> FakeWorker {
        Self::start_in(chunk_size, &std::env::temp_dir()).await
    }

    /// A fake worker keeping its block files under `parent`.
    pub(crate) async fn start_in(chunk_size: usize, parent: &std::path::Path) -> FakeWorker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dir = tempfile::tempdir_in(parent).unwrap();
        std::fs::create_dir_all(dir.path().join("staging")).unwrap();
        std::fs::create_dir_all(dir.path().join("blocks")).unwrap();
        let state = Arc::new(Mutex::new(State {
            chunk_size,
            ..Default::default()
        }));
        let (st, root) = (state.clone(), dir.path().to_path_buf());
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                st.lock().unwrap().connections += 1;
                tokio::spawn(serve(sock, st.clone(), root.clone()));
            }
        });
        FakeWorker { addr, state, dir }
    }

    pub(crate) fn location(&self) -> BlockLocation {
        BlockLocation {
            worker_id: u32::from(self.addr.port()),
            address: Some(WorkerAddress {
                worker_id: u32::from(self.addr.port()),
                host: "127.0.0.1".into(),
                data_port: u32::from(self.addr.port()),
            }),
            tier: 1,
        }
    }

    pub(crate) fn put_block(&self, id: u64, data: Vec<u8>) {
        self.state.lock().unwrap().blocks.insert(id, data);
    }

    pub(crate) fn block(&self, id: u64) -> Option<Vec<u8>> {
        self.state.lock().unwrap().blocks.get(&id).cloned()
    }

    pub(crate) fn block_path(&self, id: u64) -> PathBuf {
        self.dir.path().join("blocks").join(id.to_string())
    }
}

pub(crate) fn located(id: u64, offset: u64, len: u64, workers: &[&FakeWorker]) -> LocatedBlock {
    LocatedBlock {
        block_id: id,
        offset,
        len,
        locations: workers.iter().map(|w| w.location()).collect(),
        ufs: None,
    }
}

async fn serve(mut sock: TcpStream, st: Arc<Mutex<State>>, root: PathBuf) {
    let mut buf = BytesMut::new();
    while let Ok(Some(h)) = read_frame(&mut sock, &mut buf, 64 << 20).await {
        let ok = match DataOp::try_from(h.op) {
            Ok(DataOp::WriteOpen) => write_block(&mut sock, &st, &root, h).await,
            Ok(DataOp::ReadOpen) => read_block(&mut sock, &st, &root, h).await,
            _ => Err(FsError::protocol(format!("unexpected op {}", h.op))),
        };
        if let Err(e) = ok {
            let _ = write_frame(&mut sock, &error_header(&e), &[]).await;
            return;
        }
    }
}

async fn write_block(
    sock: &mut TcpStream,
    st: &Mutex<State>,
    root: &std::path::Path,
    open: DataHeader,
) -> Result<(), FsError> {
    let (cs, sc, tier) = {
        let s = st.lock().unwrap();
        (s.chunk_size, s.short_circuit && open.short_circuit, s.tier)
    };
    let id = open.block_id;
    let mut ok = header(DataOp::Ok);
    ok.chunk_size = cs as u32;
    ok.tier = tier;
    let staging = root.join("staging").join(id.to_string());
    if sc {
        std::fs::write(&staging, b"").unwrap();
        ok.path = staging.display().to_string();
    }
    write_frame(sock, &ok, &[]).await?;
    let mut data = Vec::new();
    let mut buf = BytesMut::new();
    loop {
        let h = read_frame(sock, &mut buf, 64 << 20)
            .await?
            .ok_or_else(|| FsError::io("client went away"))?;
        match DataOp::try_from(h.op) {
            Ok(DataOp::WriteData) => {
                if h.offset != data.len() as u64 {
                    return Err(FsError::protocol("bad offset"));
                }
                verify_chunks(&buf, cs, &h.crcs).map_err(|_| FsError::ChecksumMismatch {
                    block_id: id,
                    worker: "fake".into(),
                    message: "write".into(),
                })?;
                data.extend_from_slice(&buf);
                st.lock().unwrap().data_frames += 1;
            }
            Ok(DataOp::WriteCommit) => {
                if st.lock().unwrap().fail_commit {
                    return Err(FsError::io("disk failed"));
                }
                if sc {
                    data = std::fs::read(&staging).unwrap();
                    if h.crcs != chunk_crcs(&data, cs) {
                        return Err(FsError::ChecksumMismatch {
                            block_id: id,
                            worker: "fake".into(),
                            message: "short-circuit commit".into(),
                        });
                    }
                }
                if h.len != data.len() as u64 {
                    return Err(FsError::protocol("bad commit length"));
                }
                st.lock().unwrap().blocks.insert(id, data);
                let mut ok = header(DataOp::Ok);
                ok.len = h.len;
                return write_frame(sock, &ok, &[]).await;
            }
            _ => return Err(FsError::protocol("unexpected op in a write")),
        }
    }
}

async fn read_block(
    sock: &mut TcpStream,
    st: &Mutex<State>,
    root: &std::path::Path,
    h: DataHeader,
) -> Result<(), FsError> {
    let (cs, sc, corrupt, data) = {
        let mut s = st.lock().unwrap();
        let data = s.blocks.get(&h.block_id).cloned();
        let sc = s.short_circuit && h.short_circuit;
        if sc {
            s.sc_opens += 1;
        }
        (s.chunk_size, sc, s.corrupt_reads, data)
    };
    let data = data.ok_or(FsError::BlockNotFound {
        block_id: h.block_id,
        worker: "fake".into(),
    })?;
    let blen = data.len() as u64;
    let mut ok = header(DataOp::Ok);
    ok.chunk_size = cs as u32;
    ok.block_len = blen;
    if sc {
        let p = root.join("blocks").join(h.block_id.to_string());
        if !p.exists() {
            std::fs::write(&p, &data).unwrap();
        }
        ok.path = p.display().to_string();
        ok.crcs = chunk_crcs(&data, cs);
        return write_frame(sock, &ok, &[]).await;
    }
    write_frame(sock, &ok, &[]).await?;
    let c = cs as u64;
    let start = h.offset / c * c;
    let end = if h.len == 0 {
        blen
    } else {
        (h.offset + h.len).div_ceil(c).saturating_mul(c).min(blen)
    };
    let frame = ((1 << 20) / cs).max(1) as u64 * c;
    let mut off = start;
    while off < end {
        let e = (off + frame).min(end);
        let mut payload = data[off as usize..e as usize].to_vec();
        let mut d = header(DataOp::ReadData);
        d.offset = off;
        d.crcs = chunk_crcs(&payload, cs);
        if corrupt {
            payload[0] ^= 0xff;
        }
        write_frame(sock, &d, &payload).await?;
        st.lock().unwrap().streamed_frames += 1;
        off = e;
    }
    write_frame(sock, &header(DataOp::ReadEnd), &[]).await
}
