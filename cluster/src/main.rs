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
    // Every command keeps Rust's default of ignoring SIGPIPE: a peer that
    // resets its connection must give an error on that connection, not kill
    // the process. The printing commands print with `print_out`, so that
    // `cluster job status | head` ends quietly.
    stampede_proto::exit_with(match Cli::parse().command {
        // On a runtime of its own size (--threads), built in the library.
        Cmd::Serve(opts) => cluster::server::run_blocking(*opts),
        Cmd::Dev(opts) => stampede_proto::block_on(cluster::cli::dev::run(opts)),
        Cmd::Job(cmd) => stampede_proto::block_on(cluster::cli::run_job(cmd)),
        Cmd::Node(cmd) => stampede_proto::block_on(cluster::cli::run_node(cmd)),
        Cmd::Tls(cmd) => cluster::cli::tls::run(cmd),
        Cmd::Acl(cmd) => cluster::cli::acl::run(cmd),
        Cmd::Health(opts) => stampede_proto::block_on(cluster::cli::health::run(opts)),
        Cmd::RecoverVote { data_dir } => recover_vote(&data_dir),
    })
}

/// `cluster recover-vote`: the stopped server's stored vote replaced.
fn recover_vote(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let done = cluster::raft::vote_recovery::recover_vote(&data_dir.join("raft"))?;
    println!("{}: {done}", data_dir.display());
    Ok(())
}
