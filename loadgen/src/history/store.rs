//! The history's database: one SQLite file by default, or a PostgreSQL
//! database (`postgres://...`) that a team shares. Both hold one schema,
//! made by numbered migrations ([`MIGRATIONS`]) whose count is written in
//! `history_schema`; a history from a newer loadgen, a file that is not a
//! database, or a database of something else is refused before anything
//! is written. The SQL is the subset both speak (`$N` parameters, `ON
//! CONFLICT DO NOTHING`, BIGINT, DOUBLE PRECISION, BOOLEAN, TEXT).
//!
//! The PostgreSQL client is the blocking one: it runs a runtime of its own,
//! so it is called from a blocking thread (`tokio::task::spawn_blocking`),
//! never from inside loadgen's async runtime.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::HistoryError;
use super::record::{RunRow, StageRow};
use crate::summary::Machine;

/// Where a history is when neither `--history` nor `STAMPEDE_HISTORY` says:
/// beside the run directories `loadgen capacity` makes.
pub const DEFAULT_FILE: &str = "runs/history.sqlite";

/// Each migration, in order: migration N brings the schema to version N.
pub const MIGRATIONS: &[&str] = &["
CREATE TABLE runs (
    run_key TEXT PRIMARY KEY,
    scenario TEXT NOT NULL,
    variant TEXT NOT NULL,
    build_commit TEXT NOT NULL,
    dirty BOOLEAN NOT NULL,
    machine_cores BIGINT,
    machine_memory_mib BIGINT,
    machine_fingerprint TEXT,
    started_unix DOUBLE PRECISION NOT NULL,
    repetition BIGINT NOT NULL,
    valid BOOLEAN NOT NULL,
    source TEXT NOT NULL
);
CREATE INDEX runs_by_series ON runs (scenario, variant, build_commit);
CREATE TABLE measures (
    run_key TEXT NOT NULL REFERENCES runs (run_key),
    measure TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_key, measure)
);
CREATE TABLE stages (
    run_key TEXT NOT NULL REFERENCES runs (run_key),
    stage TEXT NOT NULL,
    p50_ms DOUBLE PRECISION NOT NULL,
    p99_ms DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_key, stage)
);
"];

/// The schema version this loadgen writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const INSERT_RUN: &str = "INSERT INTO runs (run_key, scenario, variant, build_commit, dirty, \
     machine_cores, machine_memory_mib, machine_fingerprint, started_unix, repetition, valid, source) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (run_key) DO NOTHING";
const INSERT_MEASURE: &str = "INSERT INTO measures (run_key, measure, value) VALUES ($1, $2, $3)";
const INSERT_STAGE: &str =
    "INSERT INTO stages (run_key, stage, p50_ms, p99_ms) VALUES ($1, $2, $3, $4)";
const SELECT_RUNS: &str = "SELECT run_key, scenario, variant, build_commit, dirty, machine_cores, \
     machine_memory_mib, machine_fingerprint, started_unix, repetition, valid, source FROM runs";
const SELECT_MEASURES: &str = "SELECT run_key, measure, value FROM measures";
const SELECT_STAGES: &str = "SELECT run_key, stage, p50_ms, p99_ms FROM stages ORDER BY stage";

/// A history's place: a SQLite file or a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq)]
pub enum Location {
    File(PathBuf),
    Postgres(String),
}

impl Location {
    /// `postgres://...` or `postgresql://...` is a database; anything else a file.
    pub fn parse(s: &str) -> Location {
        match s.starts_with("postgres://") || s.starts_with("postgresql://") {
            true => Location::Postgres(s.into()),
            false => Location::File(s.into()),
        }
    }

    /// `given`, or [`DEFAULT_FILE`].
    pub fn or_default(given: Option<&str>) -> Location {
        given.map_or_else(|| Location::File(DEFAULT_FILE.into()), Location::parse)
    }

    /// How messages name it: the path, or the URL without its password.
    pub fn label(&self) -> String {
        match self {
            Location::File(p) => p.display().to_string(),
            Location::Postgres(url) => hide_password(url),
        }
    }
}

/// `postgres://user:secret@host/db` as `postgres://user:***@host/db`.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    let Some((auth, host)) = rest.split_once('@') else {
        return url.into();
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.into(),
    }
}

enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

/// An open history at the current schema.
pub struct Store {
    db: Db,
    at: String,
}

impl Store {
    /// Opens the history at `loc` to record into it: a new file (and its
    /// directory) or an empty database gets the schema, an older schema is
    /// migrated.
    pub fn open(loc: &Location) -> Result<Store, HistoryError> {
        Self::connect(loc, true)
    }

    /// Opens a history that exists, to read it; a missing one is an error
    /// and nothing is made.
    pub fn open_existing(loc: &Location) -> Result<Store, HistoryError> {
        Self::connect(loc, false)
    }

    fn connect(loc: &Location, create: bool) -> Result<Store, HistoryError> {
        let at = loc.label();
        let open = |why: String| HistoryError::Open {
            at: at.clone(),
            why,
        };
        let db = match loc {
            Location::File(path) => Db::Sqlite(open_file(path, create, &at)?),
            Location::Postgres(url) => Db::Postgres(Box::new(
                postgres::Client::connect(url, postgres::NoTls).map_err(|e| open(e.to_string()))?,
            )),
        };
        let mut store = Store { db, at };
        store.migrate(create)?;
        Ok(store)
    }

    /// Where it is, as messages say it.
    pub fn label(&self) -> &str {
        &self.at
    }

    fn fail(&self, e: impl std::fmt::Display) -> HistoryError {
        HistoryError::Database {
            at: self.at.clone(),
            why: e.to_string(),
        }
    }

    /// The version written in `history_schema`: 0 for a new, empty
    /// database; refused when the database holds tables of something else.
    fn version(&mut self) -> Result<i64, HistoryError> {
        let tables: Vec<String> = match &mut self.db {
            Db::Sqlite(c) => sqlite_tables(c).map_err(|e| corrupt_or(e, &self.at))?,
            Db::Postgres(c) => c
                .query(
                    "SELECT tablename::TEXT FROM pg_tables WHERE schemaname = current_schema()",
                    &[],
                )
                .map_err(|e| self.fail(e))?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()
                .map_err(|e| self.fail(e))?,
        };
        if !tables.iter().any(|t| t == "history_schema") {
            return match tables.is_empty() {
                true => Ok(0),
                false => Err(HistoryError::NotAHistory {
                    at: self.at.clone(),
                }),
            };
        }
        let sql = "SELECT MAX(version) FROM history_schema";
        let v: Option<i64> = match &mut self.db {
            Db::Sqlite(c) => c
                .query_row(sql, [], |r| r.get(0))
                .map_err(|e| self.fail(e))?,
            Db::Postgres(c) => c
                .query_one(sql, &[])
                .and_then(|r| r.try_get(0))
                .map_err(|e| self.fail(e))?,
        };
        Ok(v.unwrap_or(0))
    }

    /// Brings the schema to [`SCHEMA_VERSION`] in one transaction, or
    /// refuses a newer one (or, reading, an empty database) untouched.
    fn migrate(&mut self, create: bool) -> Result<(), HistoryError> {
        let found = self.version()?;
        if found > SCHEMA_VERSION {
            return Err(HistoryError::Newer {
                at: self.at.clone(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found == 0 && !create {
            return Err(HistoryError::Missing {
                at: self.at.clone(),
            });
        }
        if found == SCHEMA_VERSION {
            return Ok(());
        }
        let mut sql =
            String::from("CREATE TABLE IF NOT EXISTS history_schema (version BIGINT NOT NULL);\n");
        for m in &MIGRATIONS[found as usize..] {
            sql.push_str(m);
        }
        sql.push_str(&format!(
            "DELETE FROM history_schema;\nINSERT INTO history_schema (version) VALUES ({SCHEMA_VERSION});\n"
        ));
        let done = match &mut self.db {
            Db::Sqlite(c) => c
                .transaction()
                .and_then(|tx| tx.execute_batch(&sql).and_then(|_| tx.commit()))
                .map_err(|e| e.to_string()),
            Db::Postgres(c) => c
                .transaction()
                .and_then(|mut tx| tx.batch_execute(&sql).and_then(|_| tx.commit()))
                .map_err(|e| e.to_string()),
        };
        match done {
            Ok(()) => Ok(()),
            // Another loadgen made the schema first (two runs recording into
            // a new history at once): its tables are the ones wanted.
            Err(_) if self.version()? == SCHEMA_VERSION => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Adds the rows it does not hold yet (by key), each with its measures
    /// and stages, in one transaction; returns how many were new.
    pub fn insert(&mut self, rows: &[RunRow]) -> Result<usize, HistoryError> {
        let added = match &mut self.db {
            Db::Sqlite(c) => insert_sqlite(c, rows).map_err(|e| e.to_string()),
            Db::Postgres(c) => insert_postgres(c, rows).map_err(|e| e.to_string()),
        };
        added.map_err(|e| self.fail(e))
    }

    /// Every run it holds, with its measures and stages, in no set order.
    pub fn load(&mut self) -> Result<Vec<RunRow>, HistoryError> {
        let loaded = match &mut self.db {
            Db::Sqlite(c) => load_sqlite(c).map_err(|e| e.to_string()),
            Db::Postgres(c) => load_postgres(c).map_err(|e| e.to_string()),
        };
        let (mut runs, measures, stages) = loaded.map_err(|e| self.fail(e))?;
        for (key, measure, value) in measures {
            if let Some(r) = runs.get_mut(&key) {
                r.measures.insert(measure, value);
            }
        }
        for (key, stage) in stages {
            if let Some(r) = runs.get_mut(&key) {
                r.stages.push(stage);
            }
        }
        Ok(runs.into_values().collect())
    }
}

/// Opens a SQLite file; creating it (and its directory) only when asked.
fn open_file(path: &Path, create: bool, at: &str) -> Result<rusqlite::Connection, HistoryError> {
    use rusqlite::OpenFlags;
    let open = |why: String| HistoryError::Open { at: at.into(), why };
    if !create && !path.exists() {
        return Err(HistoryError::Missing { at: at.into() });
    }
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| open(format!("{}: {e}", dir.display())))?;
        }
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let c = rusqlite::Connection::open_with_flags(path, flags).map_err(|e| open(e.to_string()))?;
    // Two loadgens recording at once wait for each other instead of failing.
    c.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(|e| open(e.to_string()))?;
    Ok(c)
}

fn sqlite_tables(c: &rusqlite::Connection) -> rusqlite::Result<Vec<String>> {
    let mut q = c.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
    let names = q.query_map([], |r| r.get(0))?;
    names.collect()
}

/// A file SQLite cannot read as a database is corrupt; other errors are the database's.
fn corrupt_or(e: rusqlite::Error, at: &str) -> HistoryError {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    match e.sqlite_error_code() {
        Some(NotADatabase | DatabaseCorrupt) => HistoryError::Corrupt {
            at: at.into(),
            why: e.to_string(),
        },
        _ => HistoryError::Database {
            at: at.into(),
            why: e.to_string(),
        },
    }
}

/// A row's columns as both drivers take them.
struct Columns<'a> {
    cores: Option<i64>,
    memory: Option<i64>,
    fingerprint: Option<&'a str>,
    repetition: i64,
}

impl<'a> Columns<'a> {
    fn of(r: &'a RunRow) -> Self {
        Columns {
            cores: r.machine.as_ref().map(|m| m.cores as i64),
            memory: r.machine.as_ref().map(|m| m.memory_mib as i64),
            fingerprint: r.machine.as_ref().map(|m| m.fingerprint.as_str()),
            repetition: r.round as i64,
        }
    }
}

fn insert_sqlite(c: &mut rusqlite::Connection, rows: &[RunRow]) -> rusqlite::Result<usize> {
    use rusqlite::params;
    let tx = c.transaction()?;
    let mut added = 0;
    for r in rows {
        let m = Columns::of(r);
        let p = params![
            r.key,
            r.scenario,
            r.variant,
            r.commit,
            r.dirty,
            m.cores,
            m.memory,
            m.fingerprint,
            r.started_unix,
            m.repetition,
            r.valid,
            r.source
        ];
        if tx.execute(INSERT_RUN, p)? == 0 {
            continue;
        }
        added += 1;
        for (name, value) in &r.measures {
            tx.execute(INSERT_MEASURE, params![r.key, name, value])?;
        }
        for s in &r.stages {
            tx.execute(INSERT_STAGE, params![r.key, s.stage, s.p50_ms, s.p99_ms])?;
        }
    }
    tx.commit()?;
    Ok(added)
}

fn insert_postgres(c: &mut postgres::Client, rows: &[RunRow]) -> Result<usize, postgres::Error> {
    let mut tx = c.transaction()?;
    let mut added = 0;
    for r in rows {
        let m = Columns::of(r);
        let n = tx.execute(
            INSERT_RUN,
            &[
                &r.key,
                &r.scenario,
                &r.variant,
                &r.commit,
                &r.dirty,
                &m.cores,
                &m.memory,
                &m.fingerprint,
                &r.started_unix,
                &m.repetition,
                &r.valid,
                &r.source,
            ],
        )?;
        if n == 0 {
            continue;
        }
        added += 1;
        for (name, value) in &r.measures {
            tx.execute(INSERT_MEASURE, &[&r.key, name, value])?;
        }
        for s in &r.stages {
            tx.execute(INSERT_STAGE, &[&r.key, &s.stage, &s.p50_ms, &s.p99_ms])?;
        }
    }
    tx.commit()?;
    Ok(added)
}

type Loaded = (
    BTreeMap<String, RunRow>,
    Vec<(String, String, f64)>,
    Vec<(String, StageRow)>,
);

/// A run's columns as [`SELECT_RUNS`] reads them, in its order.
#[allow(clippy::type_complexity)]
fn run_row(
    cols: (
        String,
        String,
        String,
        String,
        bool,
        Option<i64>,
        Option<i64>,
        Option<String>,
    ),
    started_unix: f64,
    repetition: i64,
    valid: bool,
    source: String,
) -> RunRow {
    let (key, scenario, variant, commit, dirty, cores, memory, fingerprint) = cols;
    let machine = match (cores, memory, fingerprint) {
        (Some(c), Some(m), Some(f)) => Some(Machine {
            cores: c as u32,
            memory_mib: m as u64,
            fingerprint: f,
        }),
        _ => None,
    };
    RunRow {
        key,
        scenario,
        variant,
        commit,
        dirty,
        machine,
        started_unix,
        round: repetition as u32,
        valid,
        source,
        measures: BTreeMap::new(),
        stages: Vec::new(),
    }
}

fn load_sqlite(c: &mut rusqlite::Connection) -> rusqlite::Result<Loaded> {
    let mut runs = BTreeMap::new();
    let mut q = c.prepare(SELECT_RUNS)?;
    let mut rows = q.query([])?;
    while let Some(r) = rows.next()? {
        let cols = (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        );
        let row = run_row(cols, r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?);
        runs.insert(row.key.clone(), row);
    }
    let mut q = c.prepare(SELECT_MEASURES)?;
    let measures = q
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut q = c.prepare(SELECT_STAGES)?;
    let stages = q
        .query_map([], |r| {
            let stage = StageRow {
                stage: r.get(1)?,
                p50_ms: r.get(2)?,
                p99_ms: r.get(3)?,
            };
            Ok((r.get(0)?, stage))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok((runs, measures, stages))
}

fn load_postgres(c: &mut postgres::Client) -> Result<Loaded, postgres::Error> {
    let mut runs = BTreeMap::new();
    for r in c.query(SELECT_RUNS, &[])? {
        let cols = (
            r.try_get(0)?,
            r.try_get(1)?,
            r.try_get(2)?,
            r.try_get(3)?,
            r.try_get(4)?,
            r.try_get(5)?,
            r.try_get(6)?,
            r.try_get(7)?,
        );
        let row = run_row(
            cols,
            r.try_get(8)?,
            r.try_get(9)?,
            r.try_get(10)?,
            r.try_get(11)?,
        );
        runs.insert(row.key.clone(), row);
    }
    let measures = c
        .query(SELECT_MEASURES, &[])?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect::<Result<_, postgres::Error>>()?;
    let stages = c
        .query(SELECT_STAGES, &[])?
        .iter()
        .map(|r| {
            let stage = StageRow {
                stage: r.try_get(1)?,
                p50_ms: r.try_get(2)?,
                p99_ms: r.try_get(3)?,
            };
            Ok((r.try_get(0)?, stage))
        })
        .collect::<Result<_, postgres::Error>>()?;
    Ok((runs, measures, stages))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_a_database_and_anything_else_a_file() {
        assert_eq!(
            Location::parse("postgres://u:p@h/db"),
            Location::Postgres("postgres://u:p@h/db".into())
        );
        assert_eq!(
            Location::parse("h.sqlite"),
            Location::File("h.sqlite".into())
        );
        assert_eq!(
            Location::or_default(None),
            Location::File(DEFAULT_FILE.into())
        );
        assert_eq!(
            Location::parse("postgresql://me:secret@db:5432/h").label(),
            "postgresql://me:***@db:5432/h"
        );
    }
}
