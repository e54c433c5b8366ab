//! The catch-up window: how many entries the log keeps behind its snapshot,
//! sized from the write rate.
//!
//! A follower that is behind by more than the log holds catches up through
//! a snapshot: the leader sends its latest, the follower installs it, and
//! then asks for the entries after it. If the leader has purged those
//! meanwhile, the follower needs a snapshot again, and under load it can go
//! on like that ("send snapshot, already stale, send again"). HashiCorp's
//! rule for raft's trailing logs is the one here: the log must keep at
//! least as many entries as are written while a snapshot is sent and
//! installed, with a margin.
//!
//! So openraft purges nothing by itself (`max_in_snapshot_log_to_keep` is
//! `u64::MAX`, `server::config`), and [`follow`] purges the log once a
//! second behind the snapshot, keeping ([`Rule::window`]):
//!
//! - at least `--keep-entries`;
//! - [`MARGIN`] × (entries written a second, over the last minute) ×
//!   (the last snapshot build's seconds + the last send's, install
//!   included; until a send was timed, [`SEND_PER_BUILD`] builds): the
//!   build counts because the snapshot a follower gets may be as old as a
//!   build;
//! - no more than makes the whole log kept (these entries and those after
//!   the snapshot) [`SNAPSHOT_SHARE`] of the snapshot's bytes: a follower
//!   further behind than that catches up faster through the snapshot than
//!   by replaying the log;
//! - at most `--keep-max-bytes` of entries (at the entries' average size
//!   over the last minute), so the disk the log takes stays bounded;
//!   `--keep-entries` is kept whatever their size.
//!
//! And while a snapshot is being sent, and for [`SENT_GRACE`] after, the
//! entries after it are not purged either (within the same bound): the
//! follower asks for them next, whatever the rate did meanwhile.
//!
//! Every server keeps its own log this way, followers too: the one that
//! leads next has the window already. A server purges nothing until it has
//! measured the rate for [`WARM_UP`] and built a snapshot itself, so a
//! restart does not cut the log it kept down to the floor.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::raft::metrics::Metrics;
use crate::raft::Raft;

/// The window is this many times the entries written during a snapshot's
/// build, send and install.
pub const MARGIN: f64 = 2.0;

/// Until this server has timed a snapshot's send and install, it is taken
/// to be this many builds: the follower decodes and indexes what the
/// leader encoded, and the bytes cross the network between.
pub const SEND_PER_BUILD: f64 = 2.0;

/// The most entry bytes kept behind a snapshot, as a share of its own
/// bytes. Replaying the log costs a follower more per byte than installing
/// a snapshot (each entry is written and synced to its log, and applied
/// through raft, with reports that later ones replace): at c2m, a follower
/// killed for 60 s caught up in 30.5 s replaying about 260 MB of log, and
/// in 22.5 s through a snapshot of about 300 MB and the log after it
/// (docs/bench-log/issue-62-elections.md).
pub const SNAPSHOT_SHARE: f64 = 0.5;

/// How long after a snapshot's send ended its entries stay held: the time
/// for the leader's raft to go on from the snapshot to the entries after.
pub const SENT_GRACE: Duration = Duration::from_secs(5);

/// How often the window is measured and the log purged.
const TICK: Duration = Duration::from_secs(1);

/// How far back the write rate is measured.
const RATE_SPAN: Duration = Duration::from_secs(60);

/// How long the rate is measured before the log is purged at all, after
/// a start: until then (and until this server has built a snapshot, which
/// takes `--snapshot-entries` written since) the window cannot be sized,
/// and the log a restarted server kept for it stays.
const WARM_UP: Duration = Duration::from_secs(3);

/// What the window is sized by: the flags.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    /// `--keep-entries`: kept whatever the rate.
    pub floor: u64,
    /// `--keep-max-bytes`: most bytes of entries kept past the floor.
    pub max_bytes: u64,
}

/// What the window is sized from, measured on this server.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measured {
    /// Entries the log grew by a second.
    pub entries_per_s: f64,
    /// The entries' average size (0: unknown).
    pub bytes_per_entry: f64,
    /// The last snapshot build's duration, if there was one.
    pub build: Option<Duration>,
    /// The last snapshot send's, install included, if there was one.
    pub send: Option<Duration>,
    /// The latest snapshot's size (0: none yet).
    pub snapshot_bytes: u64,
    /// Entries in the log after the latest snapshot: a follower behind the
    /// snapshot replays these too.
    pub since_snapshot: u64,
}

impl Measured {
    /// The seconds a follower's catch-up through a snapshot takes to
    /// cover: the build, and the send and install.
    pub fn catch_up_seconds(&self) -> f64 {
        let build = self.build.map_or(0.0, |b| b.as_secs_f64());
        let send = self
            .send
            .map_or(SEND_PER_BUILD * build, |s| s.as_secs_f64());
        build + send
    }
}

impl Rule {
    /// The most entries kept behind the snapshot: `max_bytes` of them at
    /// their measured size, and never under the floor.
    pub fn most(&self, m: &Measured) -> u64 {
        let by_bytes = if m.bytes_per_entry > 0.0 {
            (self.max_bytes as f64 / m.bytes_per_entry) as u64
        } else if self.max_bytes == 0 {
            0
        } else {
            u64::MAX
        };
        by_bytes.max(self.floor)
    }

    /// Entries to keep behind the snapshot.
    pub fn window(&self, m: &Measured) -> u64 {
        let needed = (MARGIN * m.entries_per_s.max(0.0) * m.catch_up_seconds()).ceil();
        let needed = if needed.is_finite() {
            needed.min(u64::MAX as f64) as u64
        } else {
            0
        };
        needed
            .min(Self::cheaper_than_snapshot(m))
            .max(self.floor)
            .min(self.most(m))
    }

    /// The most entries kept behind the snapshot for a follower to replay
    /// rather than take the snapshot: with those after the snapshot, which
    /// it replays either way, [`SNAPSHOT_SHARE`] of the snapshot's bytes
    /// (no bound while either size is unknown).
    fn cheaper_than_snapshot(m: &Measured) -> u64 {
        if m.snapshot_bytes == 0 || m.bytes_per_entry <= 0.0 {
            return u64::MAX;
        }
        let replayed = (SNAPSHOT_SHARE * m.snapshot_bytes as f64 / m.bytes_per_entry) as u64;
        replayed.saturating_sub(m.since_snapshot)
    }
}

/// Where to purge the log to (inclusive), if anywhere: `window` entries
/// behind the `snapshot`'s index, and, while a snapshot ending at
/// `sending` is sent, no further than it, unless that holds more than
/// `most` entries. `None` when that purges nothing the log still holds
/// (`purged`: the last index purged).
pub fn purge_upto(
    snapshot: Option<u64>,
    purged: Option<u64>,
    window: u64,
    most: u64,
    sending: Option<u64>,
) -> Option<u64> {
    let snapshot = snapshot?;
    // Nothing to purge below `window`: the log keeps indexes
    // snapshot - window + 1 ..= snapshot, and 0 is an index.
    let mut upto = snapshot.checked_sub(window)?;
    if let Some(sent) = sending {
        let bound = snapshot.saturating_sub(most);
        upto = upto.min(sent.max(bound));
    }
    match purged {
        Some(p) if upto <= p => None,
        _ => Some(upto),
    }
}

/// The write rate over the last [`RATE_SPAN`], from the log's last index
/// and the bytes of the entries applied.
#[derive(Default)]
struct Rate {
    /// (when, last log index, entries applied, bytes applied)
    samples: VecDeque<(Instant, u64, u64, u64)>,
    bytes_per_entry: f64,
}

impl Rate {
    fn sample(&mut self, at: Instant, last_index: u64, entries: u64, bytes: u64) -> (f64, f64) {
        // A log that went back (a restart, a truncation) starts over.
        if self.samples.back().is_some_and(|s| s.1 > last_index) {
            self.samples.clear();
        }
        self.samples.push_back((at, last_index, entries, bytes));
        while self
            .samples
            .front()
            .is_some_and(|s| at.duration_since(s.0) > RATE_SPAN)
        {
            self.samples.pop_front();
        }
        let (first, last) = (self.samples.front(), self.samples.back());
        let (Some(first), Some(last)) = (first, last) else {
            return (0.0, self.bytes_per_entry);
        };
        let secs = last.0.duration_since(first.0).as_secs_f64();
        let entries_per_s = if secs > 0.0 {
            last.1.saturating_sub(first.1) as f64 / secs
        } else {
            0.0
        };
        let applied = last.2.saturating_sub(first.2);
        if applied > 0 {
            self.bytes_per_entry = last.3.saturating_sub(first.3) as f64 / applied as f64;
        }
        (entries_per_s, self.bytes_per_entry)
    }

    /// How long the samples measure.
    fn span(&self) -> Duration {
        match (self.samples.front(), self.samples.back()) {
            (Some(first), Some(last)) => last.0.duration_since(first.0),
            _ => Duration::ZERO,
        }
    }
}

/// Bytes of commands applied, all types.
fn bytes_applied(metrics: &Metrics) -> u64 {
    stampede_proto::MESSAGE_TYPES
        .iter()
        .map(|t| metrics.raft_entry_bytes.with_label_values(&[t]).get())
        .sum()
}

/// Keeps the log's catch-up window until `stop` turns true: once a
/// second, measures the write rate, sizes the window and purges the log
/// behind it.
pub async fn follow(
    raft: Raft,
    rule: Rule,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let mut rate = Rate::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let (last_index, snapshot, purged) = {
            let m = raft.metrics();
            let m = m.borrow();
            (
                m.last_log_index.unwrap_or(0),
                m.snapshot.map(|l| l.index),
                m.purged.map(|l| l.index),
            )
        };
        let (entries_per_s, bytes_per_entry) = rate.sample(
            Instant::now(),
            last_index,
            metrics.raft_log_entries.get(),
            bytes_applied(&metrics),
        );
        let measured = Measured {
            entries_per_s,
            bytes_per_entry,
            build: metrics.snapshots.times.last_build(),
            send: metrics.snapshots.times.last_send(),
            snapshot_bytes: metrics.snapshots.bytes.get().max(0) as u64,
            since_snapshot: snapshot.map_or(0, |s| last_index.saturating_sub(s)),
        };
        let window = rule.window(&measured);
        metrics.snapshots.catch_up_window_entries.set(window as i64);
        if measured.build.is_none() || rate.span() < WARM_UP {
            continue;
        }
        let sending = metrics.snapshots.times.oldest_sending(SENT_GRACE);
        let Some(upto) = purge_upto(snapshot, purged, window, rule.most(&measured), sending) else {
            continue;
        };
        tracing::debug!(upto, window, ?sending, ?measured, "purging the raft log");
        if let Err(e) = raft.trigger().purge_log(upto).await {
            tracing::debug!("raft stopped: {e}");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: Rule = Rule {
        floor: 1_000,
        max_bytes: 1 << 30,
    };

    fn measured(entries_per_s: f64, build_s: u64, send_s: Option<u64>) -> Measured {
        Measured {
            entries_per_s,
            bytes_per_entry: 100_000.0,
            build: Some(Duration::from_secs(build_s)),
            send: send_s.map(Duration::from_secs),
            snapshot_bytes: 0,
            since_snapshot: 0,
        }
    }

    #[test]
    fn the_window_covers_the_entries_written_during_a_build_and_a_send_twice() {
        // 36 entries a second (c2m), a 17 s build and a 30 s send and install.
        let m = measured(36.0, 17, Some(30));
        assert_eq!(m.catch_up_seconds(), 47.0);
        assert_eq!(RULE.window(&m), 2 * 36 * 47);
        // Until a send was timed, it counts as two builds.
        let m = measured(36.0, 17, None);
        assert_eq!(m.catch_up_seconds(), 51.0);
        assert_eq!(RULE.window(&m), 2 * 36 * 51);
    }

    #[test]
    fn the_window_is_never_under_the_floor() {
        // Idle, small, or never built: --keep-entries.
        assert_eq!(RULE.window(&measured(0.0, 85, Some(120))), 1_000);
        assert_eq!(RULE.window(&measured(500.0, 0, Some(0))), 1_000);
        assert_eq!(RULE.window(&Measured::default()), 1_000);
        let unknown = Measured {
            entries_per_s: 1e6,
            ..Default::default()
        };
        assert_eq!(
            RULE.window(&unknown),
            1_000,
            "no build: no snapshot to send"
        );
    }

    #[test]
    fn the_window_is_bounded_by_bytes_but_keeps_the_floor_whatever_the_size() {
        // 1 GiB of 100 KB entries: 10,737 of them.
        let m = measured(1_000.0, 85, Some(300));
        assert_eq!(RULE.most(&m), 10_737);
        assert_eq!(RULE.window(&m), 10_737);
        // Entries so large that the floor alone is over the bound.
        let huge = Measured {
            bytes_per_entry: 1e9,
            ..m
        };
        assert_eq!(RULE.window(&huge), 1_000);
        // No bytes allowed past the floor: the fixed window of before.
        let fixed = Rule {
            max_bytes: 0,
            ..RULE
        };
        assert_eq!(fixed.window(&m), 1_000);
        assert_eq!(fixed.window(&Measured::default()), 1_000);
        // Sizes not measured yet: no bound but the floor's.
        let unmeasured = Measured {
            bytes_per_entry: 0.0,
            ..m
        };
        assert_eq!(RULE.window(&unmeasured), 2 * 1_000 * 385);
    }

    #[test]
    fn a_follower_behind_by_more_than_half_a_snapshot_takes_the_snapshot() {
        // c2m at 90 s: 36 entries a second of 120 KB, a 20 s build, and a
        // snapshot of 170 MB: half of it is 708 entries, 20 s of writes,
        // where the rate alone would keep 2 * 36 * 60 = 4,320.
        let m = Measured {
            bytes_per_entry: 120_000.0,
            snapshot_bytes: 170_000_000,
            ..measured(36.0, 20, None)
        };
        assert_eq!(
            RULE.window(&Measured {
                snapshot_bytes: 0,
                ..m
            }),
            4_320
        );
        let small_floor = Rule { floor: 100, ..RULE };
        assert_eq!(small_floor.window(&m), 708);
        // The entries after the snapshot are replayed too: with 500 of
        // them, 208 more are kept behind it.
        let behind = Measured {
            since_snapshot: 500,
            ..m
        };
        assert_eq!(small_floor.window(&behind), 208);
        let far_behind = Measured {
            since_snapshot: 2_000,
            ..m
        };
        assert_eq!(small_floor.window(&far_behind), 100, "the floor");
        // Never under the floor, however small the snapshot.
        assert_eq!(RULE.window(&m), 1_000);
        // A large snapshot bounds nothing the rate does not.
        let large = Measured {
            snapshot_bytes: 10_000_000_000,
            ..m
        };
        assert_eq!(small_floor.window(&large), 4_320);
    }

    #[test]
    fn the_log_is_purged_to_the_window_behind_the_snapshot() {
        // Nothing before a snapshot, nor while the log is within the window.
        assert_eq!(purge_upto(None, None, 10, 100, None), None);
        assert_eq!(purge_upto(Some(9), None, 10, 100, None), None);
        assert_eq!(purge_upto(Some(10), None, 10, 100, None), Some(0));
        assert_eq!(purge_upto(Some(25), None, 10, 100, None), Some(15));
        // Only past what was purged already.
        assert_eq!(purge_upto(Some(25), Some(15), 10, 100, None), None);
        assert_eq!(purge_upto(Some(26), Some(15), 10, 100, None), Some(16));
    }

    #[test]
    fn a_snapshot_being_sent_holds_the_entries_after_it_within_the_bound() {
        // Sending the snapshot at 40 while the latest is at 100: the
        // follower asks for 41 on next, so it is kept.
        assert_eq!(
            purge_upto(Some(100), Some(10), 10, 1_000, Some(40)),
            Some(40)
        );
        assert_eq!(purge_upto(Some(100), Some(40), 10, 1_000, Some(40)), None);
        // A send of the latest holds nothing more than the window does.
        assert_eq!(purge_upto(Some(100), None, 10, 1_000, Some(100)), Some(90));
        // A send so old that holding it would keep more than the bound.
        assert_eq!(
            purge_upto(Some(5_000), None, 10, 1_000, Some(40)),
            Some(4_000)
        );
    }

    #[test]
    fn the_rate_is_measured_over_the_last_minute() {
        let mut rate = Rate::default();
        let t0 = Instant::now();
        assert_eq!(rate.sample(t0, 100, 0, 0), (0.0, 0.0));
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(rate.sample(at(10), 600, 500, 50_000), (50.0, 100.0));
        assert_eq!(rate.sample(at(60), 3_100, 3_000, 300_000), (50.0, 100.0));
        // The first sample is past the minute now: 10 s to 70 s.
        assert_eq!(rate.sample(at(70), 3_600, 3_500, 350_000).0, 50.0);
        // Idle from 70 s: the rate falls as the busy samples age out.
        assert_eq!(rate.sample(at(100), 3_600, 3_500, 350_000).0, 12.5);
        let (idle, size) = rate.sample(at(125), 3_600, 3_500, 350_000);
        assert_eq!(idle, 0.0);
        assert_eq!(size, 100.0, "the size of the last entries measured");
        assert_eq!(rate.span(), Duration::from_secs(55));
        // A log that starts over (a restart) is not a negative rate, and
        // is measured again from there.
        assert_eq!(rate.sample(at(126), 10, 0, 0).0, 0.0);
        assert_eq!(rate.span(), Duration::ZERO);
    }
}
