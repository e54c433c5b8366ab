use clap::Parser;

/// Simulates a fleet of client nodes against a stampede cluster.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    opts: nodesim::Opts,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    stampede_proto::init_logging();
    let s = nodesim::run(Cli::parse().opts).await?;
    println!(
        "registered {} nodes ({} failed) in {:.2}s, last raft index {}",
        s.registered,
        s.failed,
        s.elapsed.as_secs_f64(),
        s.last_index
    );
    if s.failed > 0 {
        anyhow::bail!("{} registrations failed", s.failed);
    }
    Ok(())
}
