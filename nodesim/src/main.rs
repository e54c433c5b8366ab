use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    stampede_proto::init_logging();
    stampede_proto::exit_with(run().await)
}

async fn run() -> anyhow::Result<()> {
    let summary = nodesim::run(nodesim::Opts::parse()).await?;
    println!("{summary}");
    if summary.registrations == 0 {
        anyhow::bail!("no node registered: is the cluster at --servers up?");
    }
    Ok(())
}
