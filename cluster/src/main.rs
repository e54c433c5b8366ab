use clap::{Parser, Subcommand};

/// The stampede server under test, and tools to run it.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one server.
    Serve(Box<cluster::server::config::ServeOpts>),
    /// Start a local cluster of server processes on free ports.
    Dev(cluster::cli::dev::DevOpts),
    /// Register, inspect and stop jobs on a running cluster.
    #[command(subcommand)]
    Job(cluster::cli::JobCmd),
    /// Inspect the client nodes of a running cluster.
    #[command(subcommand)]
    Node(cluster::cli::NodeCmd),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    stampede_proto::default_sigpipe();
    stampede_proto::init_logging();
    match Cli::parse().command {
        Cmd::Serve(opts) => cluster::server::run(*opts).await,
        Cmd::Dev(opts) => cluster::cli::dev::run(opts).await,
        Cmd::Job(cmd) => cluster::cli::run_job(cmd).await,
        Cmd::Node(cmd) => cluster::cli::run_node(cmd).await,
    }
}
