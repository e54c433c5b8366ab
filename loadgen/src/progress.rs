//! A progress line on a terminal while a stream runs: how far through the
//! scenario it is and how the jobs are faring. Drawn to stderr, and not at all
//! when stderr is not a terminal (CI logs, pipes).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::metrics::{LoadMetrics, Outcome};
use crate::scenario::Scenario;

/// How often the line is redrawn.
const TICK: Duration = Duration::from_millis(250);

pub struct Progress {
    bar: ProgressBar,
    updater: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// Starts the display of one variant's stream (submissions for
    /// `scenario.duration`, then the drain).
    pub fn start(scenario: &Scenario, metrics: &LoadMetrics) -> Self {
        let total = scenario.duration.as_secs().max(1);
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len}s {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        let (b, m) = (bar.clone(), metrics.clone());
        let started = tokio::time::Instant::now();
        // The counters are for the whole loadgen process: show this stream's share.
        let base = Counts::read(metrics);
        let updater = tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            loop {
                tick.tick().await;
                let elapsed = started.elapsed().as_secs();
                b.set_position(elapsed.min(total));
                let now = Counts::read(&m);
                let phase = if elapsed >= total { "draining; " } else { "" };
                b.set_message(format!(
                    "{phase}submitted {} placed {} running {} following {} failed {} dropped {}",
                    now.accepted - base.accepted,
                    now.placed - base.placed,
                    now.running - base.running,
                    m.following.get(),
                    now.failed - base.failed,
                    now.dropped - base.dropped,
                ));
            }
        });
        Self { bar, updater }
    }

    /// Ends the display (the summary follows).
    pub fn finish(self) {
        self.updater.abort();
        self.bar.finish_and_clear();
    }
}

struct Counts {
    accepted: u64,
    failed: u64,
    dropped: u64,
    placed: u64,
    running: u64,
}

impl Counts {
    fn read(m: &LoadMetrics) -> Self {
        Self {
            accepted: m.submissions(Outcome::Accepted),
            failed: m.submissions(Outcome::Failed),
            dropped: m.submissions(Outcome::Dropped),
            placed: m.placement.get_sample_count(),
            running: m.time_to_running.get_sample_count(),
        }
    }
}
