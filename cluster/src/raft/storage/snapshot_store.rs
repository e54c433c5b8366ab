//! Snapshots on disk: the latest one, in one file beside the raft store.
//! Only its metadata stays in memory: the state it encodes is read back
//! when it is asked for (a follower to catch up, a restart), which is rare,
//! while its bytes held a quarter of a kilobyte per node of a large fleet
//! for as long as the server ran.
//!
//! File layout: magic, CRC-32 of the rest, length of the metadata, the
//! metadata (bincode), then the state (protobuf `StateSnapshot`). A file is
//! written to a temporary name, synced, and renamed, so a crash leaves either
//! the old snapshot or the new one, never half of one.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::raft::storage::error::StoreError;
use crate::raft::SnapshotMeta;

const MAGIC: &[u8; 8] = b"STMPSNP1";
const FILE: &str = "snapshot.bin";
const TMP: &str = "snapshot.tmp";

/// A snapshot: its raft metadata and the encoded state.
#[derive(Clone, Debug)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta,
    pub data: Arc<Vec<u8>>,
}

#[derive(Debug)]
pub struct SnapshotStore {
    dir: PathBuf,
    /// The metadata of the snapshot in the file, if there is one.
    current: Mutex<Option<SnapshotMeta>>,
}

impl SnapshotStore {
    /// Opens the snapshot dir, creating it, and checks the snapshot in it if any.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::Io(dir.to_path_buf(), e))?;
        let store = Self {
            dir: dir.to_path_buf(),
            current: Mutex::new(None),
        };
        let meta = store.read_file()?.map(|snap| snap.meta);
        *stampede_proto::lock(&store.current) = meta;
        Ok(store)
    }

    /// The current snapshot's metadata, without reading its state.
    pub fn current_meta(&self) -> Option<SnapshotMeta> {
        stampede_proto::lock(&self.current).clone()
    }

    /// The current snapshot, read from its file.
    pub fn current(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        if self.current_meta().is_none() {
            return Ok(None);
        }
        self.read_file()
    }

    fn read_file(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        let path = self.dir.join(FILE);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(decode(&bytes).map_err(|detail| {
                StoreError::Corrupt {
                    path: path.clone(),
                    what: "snapshot",
                    detail,
                }
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io(path, e)),
        }
    }

    /// Persists `snap` durably and makes it the current snapshot.
    pub fn save(&self, snap: StoredSnapshot) -> std::io::Result<()> {
        let meta = bincode::serialize(&snap.meta).map_err(std::io::Error::other)?;
        let mut body = Vec::with_capacity(4 + meta.len() + snap.data.len());
        body.extend_from_slice(&(meta.len() as u32).to_be_bytes());
        body.extend_from_slice(&meta);
        body.extend_from_slice(&snap.data);
        let tmp = self.dir.join(TMP);
        {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(MAGIC)?;
            f.write_all(&crc32fast::hash(&body).to_be_bytes())?;
            f.write_all(&body)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(FILE))?;
        fs::File::open(&self.dir)?.sync_all()?;
        *stampede_proto::lock(&self.current) = Some(snap.meta);
        Ok(())
    }
}

fn decode(bytes: &[u8]) -> Result<StoredSnapshot, String> {
    let header = MAGIC.len() + 4;
    if bytes.len() < header + 4 || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a stampede snapshot file (bad magic or too short)".into());
    }
    let crc = u32::from_be_bytes(bytes[MAGIC.len()..header].try_into().unwrap());
    let body = &bytes[header..];
    if crc32fast::hash(body) != crc {
        return Err("checksum mismatch: the file was damaged".into());
    }
    let meta_len = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
    if body.len() < 4 + meta_len {
        return Err("metadata length runs past the end of the file".into());
    }
    let meta: SnapshotMeta =
        bincode::deserialize(&body[4..4 + meta_len]).map_err(|e| format!("metadata: {e}"))?;
    Ok(StoredSnapshot {
        meta,
        data: Arc::new(body[4 + meta_len..].to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(data: &[u8]) -> StoredSnapshot {
        StoredSnapshot {
            meta: SnapshotMeta {
                snapshot_id: "s1".into(),
                ..Default::default()
            },
            data: Arc::new(data.to_vec()),
        }
    }

    #[test]
    fn saved_snapshot_is_loaded_on_open() {
        let dir = tempfile::tempdir().unwrap();
        SnapshotStore::open(dir.path())
            .unwrap()
            .save(snap(b"state"))
            .unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        assert_eq!(store.current_meta().unwrap().snapshot_id, "s1");
        let loaded = store.current().unwrap().unwrap();
        assert_eq!(loaded.meta.snapshot_id, "s1");
        assert_eq!(loaded.data.as_slice(), b"state");
    }

    #[test]
    fn a_damaged_file_is_reported_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        SnapshotStore::open(dir.path())
            .unwrap()
            .save(snap(b"state"))
            .unwrap();
        let path = dir.path().join(FILE);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, bytes).unwrap();
        let err = SnapshotStore::open(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("corrupt snapshot") && err.contains("checksum"),
            "{err}"
        );
        fs::write(&path, b"garbage").unwrap();
        let err = SnapshotStore::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a stampede snapshot"), "{err}");
    }
}
