use clap::Parser;

/// A simulated fleet allocates and frees small buffers for every report,
/// update and answer; glibc's malloc was a quarter of nodesim's CPU, and
/// mimalloc (without transparent huge pages, see the root Cargo.toml)
/// spends less on them and keeps an idle node under 10 KiB.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    stampede_proto::init_logging();
    let opts = nodesim::Opts::parse();
    stampede_proto::exit_with(nodesim::run_blocking(opts).and_then(|summary| {
        println!("{summary}");
        if summary.registrations == 0 {
            anyhow::bail!("no node registered: is the cluster at --address (STAMPEDE_ADDRESS) up?");
        }
        Ok(())
    }))
}
