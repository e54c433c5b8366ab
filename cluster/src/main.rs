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
    Serve(cluster::config::ServeOpts),
    /// Start a local cluster of server processes on free ports.
    Dev(cluster::dev::DevOpts),
    /// Register, inspect and stop jobs on a running cluster.
    #[command(subcommand)]
    Job(cluster::ops::JobCmd),
    /// Inspect the client nodes of a running cluster.
    #[command(subcommand)]
    Node(cluster::ops::NodeCmd),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,openraft=error")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Cmd::Serve(opts) => cluster::server::run(opts).await,
        Cmd::Dev(opts) => cluster::dev::run(opts).await,
        Cmd::Job(cmd) => cluster::ops::run_job(cmd).await,
        Cmd::Node(cmd) => cluster::ops::run_node(cmd).await,
    }
}
