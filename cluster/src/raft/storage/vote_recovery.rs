//! `cluster recover-vote`: the offline way back for a data dir whose stored
//! vote no election can move past (a term far beyond its log's, or a vote
//! for a server that is not a member), as a forged or corrupted message
//! could have left before the inbound checks refused such messages.
//!
//! The vote is replaced by one for this server at the term of its last log
//! entry, not committed: on restart it campaigns from there. This can let
//! the server vote twice in a term it already voted in, so run it only on
//! a server that cannot rejoin otherwise, with the server stopped.

use std::path::Path;

use openraft::Vote;
use rocksdb::{Options, DB};

use super::error::StoreError;
use super::log_store::{Identity, LogStore, CF_LOGS, CF_META, KEY_IDENTITY, KEY_VOTE};
use crate::raft::{NodeId, MAX_TERM_AHEAD};

/// What `recover-vote` found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// The stored vote (if any) is one an election can move past: kept.
    Usable(Option<Vote<NodeId>>),
    /// The stored vote was replaced.
    Reset {
        from: Vote<NodeId>,
        to: Vote<NodeId>,
    },
}

impl std::fmt::Display for Recovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Recovered::Usable(None) => write!(f, "no vote stored; nothing to recover"),
            Recovered::Usable(Some(v)) => write!(f, "the stored vote {v} is usable; kept"),
            Recovered::Reset { from, to } => write!(f, "the stored vote {from} replaced by {to}"),
        }
    }
}

/// Checks the vote stored in the raft store at `dir` (a server's
/// `DATA_DIR/raft`) and replaces it if no election can move past it.
pub fn recover_vote(dir: &Path) -> Result<Recovered, StoreError> {
    if !dir.join("CURRENT").exists() {
        return Err(StoreError::Io(
            dir.to_path_buf(),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no raft store here (give the server's --data-dir; the store is its raft/ folder)",
            ),
        ));
    }
    // Opened as the server would, as the owner the store names.
    let identity: Identity = {
        let db = DB::open_cf_for_read_only(&Options::default(), dir, [CF_LOGS, CF_META], false)
            .map_err(|source| StoreError::Open {
                path: dir.to_path_buf(),
                source,
            })?;
        let meta = db.cf_handle(CF_META).expect("opened with it");
        let bytes =
            (db.get_cf(meta, KEY_IDENTITY).ok().flatten()).ok_or_else(|| StoreError::Corrupt {
                path: dir.to_path_buf(),
                what: "server identity",
                detail: "no owner record".into(),
            })?;
        bincode::deserialize(&bytes).map_err(|e| StoreError::Corrupt {
            path: dir.to_path_buf(),
            what: "server identity",
            detail: e.to_string(),
        })?
    };
    let store = LogStore::open(dir, &identity)?;
    let corrupt = |what, e: openraft::AnyError| StoreError::Corrupt {
        path: dir.to_path_buf(),
        what,
        detail: e.to_string(),
    };
    let vote: Option<Vote<NodeId>> = store.get_meta(KEY_VOTE).map_err(|e| corrupt("vote", e))?;
    let last_term =
        (store.last_log_id().map_err(|e| corrupt("raft log", e))?).map_or(0, |l| l.leader_id.term);
    let Some(from) = vote else {
        return Ok(Recovered::Usable(None));
    };
    let usable = from.leader_id.term <= last_term.saturating_add(MAX_TERM_AHEAD)
        && identity.members.contains(&from.leader_id.node_id);
    if usable {
        return Ok(Recovered::Usable(Some(from)));
    }
    let to = Vote::new(last_term, identity.server_id);
    store
        .put_meta(KEY_VOTE, &to, true)
        .map_err(|e| corrupt("vote", e))?;
    Ok(Recovered::Reset { from, to })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::storage::RaftLogStorage;

    #[tokio::test]
    async fn an_unusable_vote_is_replaced_once_and_a_usable_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let raft = dir.path().join("raft");
        let identity = Identity {
            server_id: 2,
            members: [1, 2, 3].into(),
        };
        {
            let mut store = LogStore::open(&raft, &identity).unwrap();
            // What the forged message left: a term at the old cap, for a stranger.
            let forged = Vote::new(u64::MAX - (1 << 32), 9);
            store.save_vote(&forged).await.unwrap();
        }
        let done = recover_vote(&raft).unwrap();
        let to = Vote::new(0, 2);
        assert!(
            matches!(done, Recovered::Reset { from, to: t } if from.leader_id.node_id == 9 && t == to),
            "{done}"
        );
        assert_eq!(recover_vote(&raft).unwrap(), Recovered::Usable(Some(to)));

        let missing = recover_vote(&dir.path().join("nowhere"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("no raft store here"), "{missing}");
    }
}
