use clap::{Parser, Subcommand};

/// Servers allocate and free many small buffers per request (protobuf,
/// h2 frames, copy-on-write state nodes); mimalloc spends less CPU on
/// them than glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The stampede server under test, and tools to run it.
#[derive(Parser)]
#[command(version = stampede_proto::long_version!(), about)]
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
    /// Certificates for mutual TLS between the cluster's processes.
    #[command(subcommand)]
    Tls(cluster::cli::tls::TlsCmd),
    /// ACL tokens for the public API.
    #[command(subcommand)]
    Acl(cluster::cli::acl::AclCmd),
    /// Exit 0 if a server answers /v1/status (with --leader: and knows a
    /// leader); the image's health check and the Kubernetes probes.
    Health(cluster::cli::health::HealthOpts),
    /// Offline, with the server stopped: replace a stored raft vote that no
    /// election can move past (a term far beyond the log's, or a vote for a
    /// non-member) by one at the last log entry's term.
    RecoverVote {
        /// The stopped server's --data-dir.
        #[arg(long)]
        data_dir: std::path::PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    stampede_proto::init_logging();
    let cli = Cli::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Cmd::Serve(opts) = &cli.command {
        if let Some(n) = opts.threads {
            runtime.worker_threads(n as usize);
        }
    }
    stampede_proto::exit_with(
        runtime
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(run(cli))),
    )
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // Every command keeps Rust's default of ignoring SIGPIPE: a peer that
    // resets its connection must give an error on that connection, not kill
    // the process. The printing commands print with `print_out`, so that
    // `cluster job status | head` ends quietly.
    match cli.command {
        Cmd::Serve(opts) => cluster::server::run(*opts).await,
        Cmd::Dev(opts) => cluster::cli::dev::run(opts).await,
        Cmd::Job(cmd) => cluster::cli::run_job(cmd).await,
        Cmd::Node(cmd) => cluster::cli::run_node(cmd).await,
        Cmd::Tls(cmd) => cluster::cli::tls::run(cmd),
        Cmd::Acl(cmd) => cluster::cli::acl::run(cmd),
        Cmd::Health(opts) => cluster::cli::health::run(opts).await,
        Cmd::RecoverVote { data_dir } => {
            let done = cluster::raft::vote_recovery::recover_vote(&data_dir.join("raft"))?;
            println!("{}: {done}", data_dir.display());
            Ok(())
        }
    }
}
