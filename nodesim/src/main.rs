use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    stampede_proto::init_logging();
    let summary = nodesim::run(nodesim::Opts::parse()).await?;
    println!("{summary}");
    if summary.registrations == 0 {
        anyhow::bail!("no node registered: is the cluster at --servers up?");
    }
    Ok(())
}
