use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Drives load at a stampede cluster and measures what it costs.
#[derive(Parser)]
#[command(version = stampede_proto::long_version!(), about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure raft write throughput: concurrent writers, each one write in flight.
    Writes(loadgen::writes::WritesOpts),
    /// Measure scheduler throughput: register nodes and jobs, wait for every placement.
    Place(loadgen::place::PlaceOpts),
    /// A capacity-planning run: a local cluster and fleet (or given ones), a
    /// scenario's job stream, and a report of what it cost.
    Capacity(Box<loadgen::capacity::CapacityOpts>),
    /// Compare two capacity runs: each measure's ratio B/A with a 95%
    /// interval and a verdict (better, worse, inconclusive). Exits 1 when a
    /// gated measure is worse, 2 when the runs cannot be compared.
    Compare(loadgen::compare::CompareOpts),
    /// The run history: import runs, list them, show a measure over the
    /// builds, check for the commits where a measure changed (exits 1 when
    /// a --gate measure changed for the worse, 2 when the history cannot be
    /// read), or write its HTML report.
    History {
        #[command(subcommand)]
        command: loadgen::history::HistoryCmd,
    },
    /// TCP proxies that delay every byte each way: link latency without
    /// netem (scripts/multihost.sh). Runs until killed.
    Link(LinkOpts),
}

#[derive(clap::Args)]
struct LinkOpts {
    /// LISTEN=TARGET@DELAY, e.g. 10.77.0.11:4747=127.0.0.1:4647@1ms (DELAY in s, ms or us).
    #[arg(required = true, value_name = "LISTEN=TARGET@DELAY")]
    links: Vec<stampede_launch::delay::DelayLink>,
}

/// `loadgen compare`'s exit code when the runs cannot be compared, and
/// `loadgen history`'s when the history cannot be read (1 is a gated
/// measure judged worse, or changed for the worse).
const CANNOT_COMPARE: u8 = 2;

fn main() -> ExitCode {
    stampede_proto::init_logging();
    let done = match parse().command {
        Cmd::Capacity(opts) => capacity(*opts),
        // Off any runtime: the history may be a PostgreSQL database, whose
        // client runs a runtime of its own.
        Cmd::Compare(opts) => return compare(&opts),
        Cmd::History { command } => return history(command),
        Cmd::Writes(opts) => stampede_proto::block_on(writes(opts)),
        Cmd::Place(opts) => stampede_proto::block_on(place(opts)),
        Cmd::Link(opts) => stampede_proto::block_on(link(opts)),
    };
    stampede_proto::exit_with(done)
}

/// The command line, and for `loadgen capacity` whether its addresses
/// came from STAMPEDE_ADDRESS (a refusal says which to drop).
fn parse() -> Cli {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Cmd::Capacity(opts), Some(m)) =
        (&mut cli.command, matches.subcommand_matches("capacity"))
    {
        opts.address_from_env =
            m.value_source(stampede_proto::address::ADDRESS_ARG) == Some(ValueSource::EnvVariable);
    }
    cli
}

/// `loadgen compare`: 0 when no gated measure is worse, 1 when one is, 2
/// when the runs cannot be compared.
fn compare(opts: &loadgen::compare::CompareOpts) -> ExitCode {
    match loadgen::compare::run(opts) {
        Ok(c) if c.worse.is_empty() => ExitCode::SUCCESS,
        Ok(c) => {
            eprintln!("error: worse than A: {}", c.worse.join("; "));
            ExitCode::FAILURE
        }
        Err(loadgen::compare::CompareError::History(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(CANNOT_COMPARE)
        }
        Err(e) => {
            eprintln!("error: the runs cannot be compared: {e}");
            ExitCode::from(CANNOT_COMPARE)
        }
    }
}

/// `loadgen history`: 0, or 1 when `check` found a gated measure changed
/// for the worse; 2 when the history or a run cannot be read or written.
fn history(cmd: loadgen::history::HistoryCmd) -> ExitCode {
    match loadgen::history::run(cmd) {
        Ok(loadgen::history::Outcome::Fine) => ExitCode::SUCCESS,
        Ok(loadgen::history::Outcome::WorseInGate) => {
            eprintln!("error: a gated measure changed for the worse (changes.json)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(CANNOT_COMPARE)
        }
    }
}

/// `loadgen capacity`: an error when the run failed, was interrupted, is
/// worse than its baseline, breached its SLO (a search excepted: it probes
/// past the SLO on purpose, and its answer is the result) or is partial.
fn capacity(opts: loadgen::capacity::CapacityOpts) -> anyhow::Result<()> {
    let summary = loadgen::capacity::run_until_stopped(opts)?;
    if !summary.regressions.is_empty() {
        anyhow::bail!(
            "worse than the baseline: {}",
            summary.regressions.join("; ")
        );
    }
    if !summary.slo_breaches.is_empty() && summary.search.is_none() {
        anyhow::bail!("SLO breached: {}", summary.slo_breaches.join("; "));
    }
    if !summary.complete {
        anyhow::bail!("the run did not complete; the report is partial");
    }
    Ok(())
}

/// `loadgen writes`: its report, as a table or JSON.
async fn writes(opts: loadgen::writes::WritesOpts) -> anyhow::Result<()> {
    let json = opts.json;
    say_report(json, &loadgen::writes::run(opts).await?)
}

/// `loadgen place`: its report, as a table or JSON.
async fn place(opts: loadgen::place::PlaceOpts) -> anyhow::Result<()> {
    let json = opts.json;
    say_report(json, &loadgen::place::run(opts).await?)
}

/// A report on stdout, as pretty JSON (`--json`) or as its table.
fn say_report(
    json: bool,
    report: &(impl serde::Serialize + std::fmt::Display),
) -> anyhow::Result<()> {
    if json {
        loadgen::say(serde_json::to_string_pretty(report)?);
    } else {
        loadgen::say(report);
    }
    Ok(())
}

/// `loadgen link`: a delaying proxy per link, until one fails or the
/// process is killed.
async fn link(opts: LinkOpts) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for l in opts.links {
        let listener = tokio::net::TcpListener::bind(&l.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", l.listen))?;
        eprintln!(
            "loadgen link: {} -> {} delayed {:?} each way",
            l.listen, l.target, l.delay
        );
        let listen = l.listen.clone();
        tasks.spawn(async move {
            stampede_launch::delay::serve(listener, l.target, l.delay)
                .await
                .map_err(|e| anyhow::anyhow!("link {listen}: {e}"))
        });
    }
    if let Some(Ok(Err(e))) = tasks.join_next().await {
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_capacity_help_names_every_built_in_scenario() {
        let cli = Cli::command();
        let capacity = cli.find_subcommand("capacity").unwrap();
        let scenario = capacity
            .get_arguments()
            .find(|a| a.get_id() == "scenario")
            .unwrap();
        let help = scenario.get_help().unwrap().to_string();
        for (name, _) in loadgen::BUILT_IN {
            assert!(
                help.contains(name),
                "--scenario's help lacks {name}: {help}"
            );
        }
    }
}
