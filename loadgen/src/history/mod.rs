//! `loadgen history`: every run remembered. Each capacity run (and each
//! run `compare` reads) is recorded in a history, one SQLite file by
//! default (`runs/history.sqlite`) or a shared PostgreSQL database, keyed
//! by scenario, variant, build, machine and time with every compared
//! measure and every stage's p50 and p99; `check` finds the commits where a
//! measure changed.
//!
//! Its parts, each importing only from those listed before it:
//!
//! - [`error`]: what can go wrong, naming the file or database.
//! - [`record`]: a summary's rows (one per repetition of each variant).
//! - [`store`]: the database, its schema and migrations, on SQLite or
//!   PostgreSQL.
//! - [`import`]: run directories and summary files read as rows.
//! - [`detect`]: change points in a series of builds (E-divisive means
//!   with a permutation test; pure).
//! - [`check`]: series by build in commit order, and their changes sized
//!   and judged against each measure's floor (pure, but for asking git
//!   the commit order).
//! - [`page`]: `list`, `show` and the `report` page.
//!
//! The commands here are blocking (the PostgreSQL client runs a runtime of
//! its own): an async caller runs them with `spawn_blocking`.

mod check;
mod detect;
mod error;
mod import;
mod page;
mod record;
mod store;

use std::path::{Path, PathBuf};

pub use check::{Change, CommitOrder};
pub use detect::Detector;
pub use error::HistoryError;
pub use import::{read_run, read_runs};
pub use record::{rows, rows_by_variant, this_machine, RunRow, StageRow};
pub use store::{Location, Store, DEFAULT_FILE, MIGRATIONS, SCHEMA_VERSION};

use crate::summary::measures::by_name;

/// The file `check` writes its change points to.
pub const CHANGES_FILE: &str = "changes.json";

/// Which history a command uses.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct HistoryArg {
    /// The run history: a SQLite file, or a postgres://USER:PASSWORD@HOST/DB
    /// URL shared by a team [default: runs/history.sqlite].
    #[arg(long = "history", env = "STAMPEDE_HISTORY", value_name = "PATH|URL")]
    pub history: Option<String>,
}

impl HistoryArg {
    pub fn location(&self) -> Location {
        Location::or_default(self.history.as_deref())
    }
}

/// `loadgen history`'s commands.
#[derive(Debug, clap::Subcommand)]
pub enum HistoryCmd {
    /// Record existing runs: run directories or summary.json files. Runs
    /// already recorded are left as they are.
    Import {
        #[arg(required = true, value_name = "DIR|SUMMARY")]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        at: HistoryArg,
    },
    /// The recorded runs, by scenario, variant, machine and build.
    List {
        /// Only this scenario's runs.
        #[arg(long, value_name = "NAME")]
        scenario: Option<String>,
        #[command(flatten)]
        at: HistoryArg,
    },
    /// One measure over the builds, with the changes found (a name from
    /// `loadgen compare`'s table, e.g. placements_per_s).
    Show {
        #[arg(value_name = "MEASURE")]
        measure: String,
        #[arg(long, value_name = "NAME", required = true)]
        scenario: String,
        #[command(flatten)]
        at: HistoryArg,
    },
    /// Change points of every measure in commit order; writes changes.json.
    /// Exits 1 when a --gate measure changed for the worse, 0 otherwise.
    Check {
        /// A measure whose change for the worse fails the check (exit 1);
        /// may be repeated.
        #[arg(long = "gate", value_name = "MEASURE")]
        gates: Vec<String>,
        /// Where to write changes.json [default: the current directory].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Only this scenario's runs.
        #[arg(long, value_name = "NAME")]
        scenario: Option<String>,
        /// Each run its own point (labelled COMMIT@START), in the order of
        /// the builds and then of time, rather than the runs of a build
        /// pooled: drift among runs of one build (an A/A history, nights
        /// with no new commit).
        #[arg(long)]
        each_run: bool,
        #[command(flatten)]
        at: HistoryArg,
    },
    /// One HTML page: each measure over the builds, change points marked.
    Report {
        /// Where to write history.html [default: the current directory].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Only this scenario's runs.
        #[arg(long, value_name = "NAME")]
        scenario: Option<String>,
        #[command(flatten)]
        at: HistoryArg,
    },
}

/// What a command found: whether a gated measure changed for the worse
/// (`check`'s exit code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Fine,
    WorseInGate,
}

/// Runs a `loadgen history` command (blocking).
pub fn run(cmd: HistoryCmd) -> Result<Outcome, HistoryError> {
    match cmd {
        HistoryCmd::Import { paths, at } => {
            // Every run read before the history is opened (or made).
            let rows = read_runs(&paths)?;
            let mut store = Store::open(&at.location())?;
            let added = store.insert(&rows)?;
            crate::say(format!(
                "imported {added} runs into {} ({} already there)",
                store.label(),
                rows.len() - added
            ));
        }
        HistoryCmd::List { scenario, at } => {
            let rows = Store::open_existing(&at.location())?.load()?;
            let all = check::series(&rows, &CommitOrder::of_checkout(), scenario.as_deref());
            crate::say(page::list(&all).trim_end());
        }
        HistoryCmd::Show {
            measure,
            scenario,
            at,
        } => {
            let m = by_name(&measure).ok_or(HistoryError::UnknownMeasure(measure))?;
            let rows = Store::open_existing(&at.location())?.load()?;
            let all = check::series(&rows, &CommitOrder::of_checkout(), Some(&scenario));
            let changes = check::changes(&all, &Detector::default());
            crate::say(page::show(&all, m, &changes).trim_end());
        }
        HistoryCmd::Check {
            gates,
            out,
            scenario,
            each_run,
            at,
        } => {
            let scope = Scope {
                scenario: scenario.as_deref(),
                each_run,
            };
            return check_cmd(&gates, out.as_deref(), scope, &at.location());
        }
        HistoryCmd::Report { out, scenario, at } => {
            let rows = Store::open_existing(&at.location())?.load()?;
            let order = CommitOrder::of_checkout();
            let all = check::series(&rows, &order, scenario.as_deref());
            let changes = check::changes(&all, &Detector::default());
            let by_commit = order.orders_all(&all);
            let path = out.unwrap_or_default().join("history.html");
            write(&path, &page::html(&all, &changes, by_commit))?;
            crate::say(format!("wrote {}", path.display()));
        }
    }
    Ok(Outcome::Fine)
}

/// Which runs `history check` reads, and whether each is its own point.
struct Scope<'a> {
    scenario: Option<&'a str>,
    each_run: bool,
}

/// `history check`: prints each change, writes changes.json, and says
/// whether a gated measure changed for the worse.
fn check_cmd(
    gates: &[String],
    out: Option<&Path>,
    scope: Scope,
    at: &Location,
) -> Result<Outcome, HistoryError> {
    for g in gates {
        by_name(g).ok_or_else(|| HistoryError::UnknownMeasure(g.clone()))?;
    }
    let rows = Store::open_existing(at)?.load()?;
    let all = check::series(&rows, &CommitOrder::of_checkout(), scope.scenario);
    let all = match scope.each_run {
        true => check::each_run(all),
        false => all,
    };
    let changes = check::changes(&all, &Detector::default());
    let gated = |c: &Change| c.worse && gates.contains(&c.measure);
    for c in &changes {
        let gate = if gated(c) { "  GATED" } else { "" };
        crate::say(format!(
            "{} / {} {}: {}{gate}",
            c.scenario,
            c.variant,
            c.measure,
            page::said(c)
        ));
    }
    let runs = all
        .iter()
        .flat_map(|s| &s.builds)
        .map(|b| b.runs.len())
        .sum::<usize>();
    crate::say(format!(
        "{} change points in {} series ({runs} runs)",
        changes.len(),
        all.len()
    ));
    let path = out.unwrap_or(Path::new("")).join(CHANGES_FILE);
    let json = serde_json::to_string_pretty(&changes).expect("changes serialize") + "\n";
    write(&path, &json)?;
    crate::say(format!("wrote {}", path.display()));
    Ok(match changes.iter().any(gated) {
        true => Outcome::WorseInGate,
        false => Outcome::Fine,
    })
}

/// Writes `text` to `path`, making its directory.
fn write(path: &Path, text: &str) -> Result<(), HistoryError> {
    let fail = |source| HistoryError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    std::fs::write(path, text).map_err(fail)
}
