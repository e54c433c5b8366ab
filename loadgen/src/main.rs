use clap::{Parser, Subcommand};

/// Drives load at a stampede cluster and measures what it costs.
#[derive(Parser)]
#[command(version, about)]
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    stampede_proto::default_sigpipe();
    stampede_proto::init_logging();
    match Cli::parse().command {
        Cmd::Writes(opts) => {
            let json = opts.json;
            let report = loadgen::writes::run(opts).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{report}");
            }
        }
        Cmd::Place(opts) => {
            let json = opts.json;
            let report = loadgen::place::run(opts).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{report}");
            }
        }
    }
    Ok(())
}
