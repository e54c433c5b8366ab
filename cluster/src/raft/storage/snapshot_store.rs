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
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::raft::storage::error::StoreError;
use crate::raft::SnapshotMeta;
use crate::state::State;

const MAGIC: &[u8; 8] = b"STMPSNP1";
const FILE: &str = "snapshot.bin";
const TMP: &str = "snapshot.tmp";

/// A snapshot: its raft metadata and the encoded state.
#[derive(Clone, Debug)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta,
    pub data: Arc<Vec<u8>>,
}

/// A snapshot's bytes as openraft carries them (its `SnapshotData`), and,
/// for a snapshot a peer sent that was checked on arrival, the state they
/// decode to: the check decodes it anyway (off raft's threads), and the
/// install takes that state instead of decoding the bytes a second time.
///
/// Dropped, it hands hundreds of MB of bytes, or a decoded state of
/// millions of allocations, to a blocking thread to free: openraft drops a
/// snapshot where it is done with it, on raft's own thread (a snapshot
/// sent, one refused as older than the log), and freeing a large state
/// there took that thread from heartbeats for as long as it took.
#[derive(Default)]
pub struct SnapshotData {
    bytes: Cursor<Vec<u8>>,
    decoded: Option<State>,
}

impl SnapshotData {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self {
            bytes: Cursor::new(bytes),
            decoded: None,
        }
    }

    /// `bytes` and the state they were checked to decode to.
    pub fn checked(bytes: Vec<u8>, state: State) -> Self {
        Self {
            bytes: Cursor::new(bytes),
            decoded: Some(state),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        self.bytes.get_ref()
    }

    /// The bytes, and the state they decode to if it was decoded already.
    pub fn into_parts(mut self) -> (Vec<u8>, Option<State>) {
        (std::mem::take(self.bytes.get_mut()), self.decoded.take())
    }
}

/// Bytes under this are freed where they are dropped.
const FREE_IN_PLACE_BYTES: usize = 4 * 1024 * 1024;

impl Drop for SnapshotData {
    fn drop(&mut self) {
        let bytes = std::mem::take(self.bytes.get_mut());
        let decoded = self.decoded.take();
        if bytes.capacity() >= FREE_IN_PLACE_BYTES || decoded.is_some() {
            drop_off_thread((bytes, decoded));
        }
    }
}

/// Drops `value` on tokio's blocking pool, when called on a runtime: for
/// what takes long to free (a whole state, a snapshot's bytes).
pub fn drop_off_thread<T: Send + 'static>(value: T) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(move || drop(value))),
        Err(_) => drop(value),
    }
}

impl std::fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotData")
            .field("bytes", &self.bytes.get_ref().len())
            .field("decoded", &self.decoded.is_some())
            .finish()
    }
}

impl Clone for SnapshotData {
    fn clone(&self) -> Self {
        Self {
            bytes: self.bytes.clone(),
            decoded: self.decoded.clone(),
        }
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.bytes).poll_read(cx, buf)
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        // What is written is no longer what was decoded.
        self.decoded = None;
        Pin::new(&mut self.bytes).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.bytes).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.bytes).poll_shutdown(cx)
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(mut self: Pin<&mut Self>, position: std::io::SeekFrom) -> std::io::Result<()> {
        Pin::new(&mut self.bytes).start_seek(position)
    }

    fn poll_complete(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        Pin::new(&mut self.bytes).poll_complete(cx)
    }
}

#[derive(Debug)]
pub struct SnapshotStore {
    dir: PathBuf,
    /// The metadata of the snapshot in the file, if there is one.
    current: Mutex<Option<SnapshotMeta>>,
    /// Held for a whole save: a snapshot built in the background and one
    /// installed from the leader may finish at once, and both write the
    /// same temporary file.
    saving: Mutex<()>,
}

impl SnapshotStore {
    /// Opens the snapshot dir, creating it, and checks the snapshot in it if any.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::Io(dir.to_path_buf(), e))?;
        let store = Self {
            dir: dir.to_path_buf(),
            current: Mutex::new(None),
            saving: Mutex::new(()),
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
            Ok(bytes) => Ok(Some(decode(bytes).map_err(|detail| {
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

    /// Persists `snap` durably and makes it the current snapshot, unless
    /// the current one is newer: a build that began before a newer
    /// snapshot was installed from the leader does not replace it (after a
    /// restart, the older one would leave a gap between it and the log,
    /// which was purged up to the newer). Returns whether `snap` is now
    /// the current snapshot. The state's bytes are written as they are,
    /// checksummed as they go: no copy of a snapshot of hundreds of MB is
    /// made to frame it.
    pub fn save(&self, snap: &StoredSnapshot) -> std::io::Result<bool> {
        let _saving = stampede_proto::lock(&self.saving);
        let newer = self
            .current_meta()
            .is_some_and(|current| current.last_log_id > snap.meta.last_log_id);
        if newer {
            return Ok(false);
        }
        let meta = bincode::serialize(&snap.meta).map_err(std::io::Error::other)?;
        let meta_len = (meta.len() as u32).to_be_bytes();
        let mut crc = crc32fast::Hasher::new();
        crc.update(&meta_len);
        crc.update(&meta);
        crc.update(&snap.data);
        let tmp = self.dir.join(TMP);
        {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(MAGIC)?;
            f.write_all(&crc.finalize().to_be_bytes())?;
            f.write_all(&meta_len)?;
            f.write_all(&meta)?;
            f.write_all(&snap.data)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(FILE))?;
        fs::File::open(&self.dir)?.sync_all()?;
        *stampede_proto::lock(&self.current) = Some(snap.meta.clone());
        Ok(true)
    }
}

/// The snapshot in `bytes`, a whole file: checked, and its state moved
/// out of the file's bytes (the metadata in front shifted out, not the
/// state copied into a buffer of its own).
fn decode(mut bytes: Vec<u8>) -> Result<StoredSnapshot, String> {
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
    bytes.drain(..header + 4 + meta_len);
    Ok(StoredSnapshot {
        meta,
        data: Arc::new(bytes),
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
            .save(&snap(b"state"))
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
            .save(&snap(b"state"))
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

    fn at(index: u64, data: &[u8]) -> StoredSnapshot {
        StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: Some(openraft::LogId::new(
                    openraft::CommittedLeaderId::new(1, 1),
                    index,
                )),
                snapshot_id: format!("at-{index}"),
                ..Default::default()
            },
            data: Arc::new(data.to_vec()),
        }
    }

    #[test]
    fn an_older_snapshot_finished_late_does_not_replace_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SnapshotStore::open(dir.path()).unwrap());
        assert!(store.save(&at(200, b"installed")).unwrap());
        // A build from index 150 that finishes after the install.
        assert!(!store.save(&at(150, b"built")).unwrap());
        assert_eq!(store.current_meta().unwrap().snapshot_id, "at-200");
        let reopened = SnapshotStore::open(dir.path()).unwrap();
        let kept = reopened.current().unwrap().unwrap();
        assert_eq!(
            (kept.meta.snapshot_id.as_str(), kept.data.as_slice()),
            ("at-200", &b"installed"[..])
        );
        // Saves at once from two threads leave one whole snapshot, the newest.
        let big = |i: u64| at(i, &vec![i as u8; 1 << 20]);
        let threads: Vec<_> = (201..209)
            .map(|i| {
                let store = store.clone();
                std::thread::spawn(move || store.save(&big(i)).unwrap())
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let kept = SnapshotStore::open(dir.path())
            .unwrap()
            .current()
            .unwrap()
            .unwrap();
        assert_eq!(kept.meta.snapshot_id, "at-208");
        assert_eq!(kept.data.as_slice(), &vec![208u8; 1 << 20][..]);
    }
}
