//! Finding a tier's committed blocks when the worker starts: every block file in
//! `blocks/` with a sidecar that matches it is indexed, anything else is deleted.

use std::fs;
use std::path::Path;

use curvine_common::{FsError, FsResult};
use tracing::warn;

use super::Inner;
use crate::worker::index::BlockMeta;
use crate::worker::layout::{
    canonical_id, remove_quiet, sidecar_of, sidecar_stem, Sidecar, BLOCKS_DIR,
};

/// Index one tier's `blocks/` directory, a shard at a time in one write; invalid
/// entries are deleted. Tiers are scanned fastest first.
pub(super) fn scan_tier(inner: &mut Inner, idx: usize) -> FsResult<()> {
    let dir = inner.tiers[idx].dir.join(BLOCKS_DIR);
    let Ok(shards) = fs::read_dir(&dir) else {
        return Ok(());
    };
    let mut found = Vec::new();
    for shard in shards.flatten() {
        let sp = shard.path();
        let Ok(files) = fs::read_dir(&sp) else {
            continue;
        };
        found.clear();
        for f in files.flatten() {
            let p = f.path();
            let name = f.file_name().to_string_lossy().into_owned();
            if let Some(stem) = sidecar_stem(&name) {
                // sidecars are examined with their block; drop orphans
                if canonical_id(stem).is_none() || !sp.join(stem).exists() {
                    discard(&p, "orphan or malformed sidecar");
                }
                continue;
            }
            let Some(id) = canonical_id(&name) else {
                discard(&p, "unknown file in blocks dir");
                continue;
            };
            match check_block(&p) {
                // the first tier's blocks cannot be in the index yet
                Ok(_) if idx > 0 && inner.blocks.contains(id)? => {
                    // a crash during a move left two copies; keep the faster one
                    discard(&p, "duplicate of a block in a faster tier");
                    discard(&sidecar_of(&p), "duplicate sidecar");
                }
                Ok(sc) => found.push((id, BlockMeta::new(idx, sc.len, sc.chunk_size, 0))),
                Err(why) => {
                    let why = why.to_string();
                    discard(&p, &why);
                    discard(&sidecar_of(&p), &why);
                }
            }
        }
        inner.blocks.insert_new(&found)?;
        let t = &mut inner.tiers[idx];
        for (_, m) in &found {
            t.committed += m.len;
            t.blocks += 1;
        }
    }
    Ok(())
}

/// Why a block file found at start is not indexed.
#[derive(Debug, thiserror::Error)]
enum InvalidBlock {
    #[error("cannot stat the block file: {0}")]
    File(#[from] std::io::Error),
    #[error("{0}")]
    Sidecar(#[from] FsError),
    #[error("block file has {file} bytes, sidecar says {sidecar}")]
    Length { file: u64, sidecar: u64 },
}

/// The sidecar of block file `p`, if it describes the file.
fn check_block(p: &Path) -> Result<Sidecar, InvalidBlock> {
    let file = fs::metadata(p)?.len();
    let sc = Sidecar::read(&sidecar_of(p))?;
    if sc.len != file {
        return Err(InvalidBlock::Length {
            file,
            sidecar: sc.len,
        });
    }
    Ok(sc)
}

fn discard(p: &Path, why: &str) {
    if p.exists() {
        warn!(path = %p.display(), why, "discarding invalid block file");
        if let Err(e) = remove_quiet(p) {
            warn!(path = %p.display(), error = %e, "cannot remove invalid block file");
        }
    }
}
