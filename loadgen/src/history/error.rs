//! Why the run history could not be read, written or checked: each error
//! names the file or database and what was wrong with it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error(
        "history {at}: no history here yet (a capacity run or `loadgen history import` starts one)"
    )]
    Missing { at: String },
    #[error("history {at}: cannot open: {why}")]
    Open { at: String, why: String },
    #[error("history {at}: not a database (corrupt, or another kind of file): {why}")]
    Corrupt { at: String, why: String },
    #[error(
        "history {at}: a database with tables of its own but no history_schema: not a run history"
    )]
    NotAHistory { at: String },
    #[error("history {at}: written by a newer loadgen (schema version {found}; this one reads up to {supported}); nothing was written")]
    Newer {
        at: String,
        found: i64,
        supported: i64,
    },
    #[error("history {at}: {why}")]
    Database { at: String, why: String },
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a run directory: it has no summary.json")]
    NoSummary { path: PathBuf },
    #[error("{path}: not a loadgen summary.json: {why}")]
    NotASummary { path: PathBuf, why: String },
    #[error("{path}: variant {variant}: {why}")]
    Unrecordable {
        path: PathBuf,
        variant: String,
        why: String,
    },
    #[error("no measure {0:?} (one of: {names})", names = crate::summary::measures::names())]
    UnknownMeasure(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}
