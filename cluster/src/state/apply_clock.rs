//! When this server applied each recent raft index, to the microsecond: the
//! "committed" steps of a job's critical path (`JobService.Trace`) and the
//! delivery latency of blocking queries (apply → answer) are read from it.

use std::collections::VecDeque;

/// Marks of `(index, unix µs)`, one per applied batch, both increasing; the
/// oldest dropped past [`ApplyClock::CAPACITY`]. A batch's entries share
/// its mark. Times are this server's. After a restart, the entries that
/// were in its log when it started are replayed: when it applied them
/// first is lost, and the replay's time is not it (a killed leader's
/// replay came seconds after the job had run, and put the job's path out
/// of order), so they get no time here and a job's path takes another
/// server's.
#[derive(Debug, Default)]
pub struct ApplyClock {
    marks: VecDeque<(u64, u64)>,
    /// The newest index whose mark was dropped: older ones are unknown.
    forgotten: u64,
    /// The last index in this server's log when it started: those up to
    /// it are replays.
    replayed_until: u64,
}

impl ApplyClock {
    /// 256 Ki marks (4 MiB): over an hour of batches at the highest rates
    /// measured here (about 50 a second under `c2m-mini`).
    pub const CAPACITY: usize = 1 << 18;

    /// Entries up to `index` were in this server's log when it started:
    /// they get no time.
    pub fn replayed_until(&mut self, index: u64) {
        self.replayed_until = index;
    }

    /// Notes that everything up to `index` was applied at `at_us`.
    pub fn applied(&mut self, index: u64, at_us: u64) {
        if index <= self.replayed_until {
            return;
        }
        match self.marks.back() {
            Some(&(i, _)) if index <= i => {}
            _ => {
                self.marks.push_back((index, at_us));
                if self.marks.len() > Self::CAPACITY {
                    if let Some((i, _)) = self.marks.pop_front() {
                        self.forgotten = i;
                    }
                }
            }
        }
    }

    /// When `index` was applied here; `None` if it has not been, or its
    /// mark is gone, or it was applied before this server started.
    pub fn at(&self, index: u64) -> Option<u64> {
        if index == 0 || index <= self.forgotten || index <= self.replayed_until {
            return None;
        }
        let n = self.marks.partition_point(|&(i, _)| i < index);
        // An index below the first mark came with a snapshot or before
        // start, unless the marks begin right after what was forgotten or
        // replayed.
        if n == 0 && self.forgotten == 0 && self.replayed_until == 0 {
            return self.marks.front().filter(|m| m.0 == index).map(|m| m.1);
        }
        self.marks.get(n).map(|m| m.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_replayed_after_a_restart_get_no_time() {
        let mut c = ApplyClock::default();
        c.replayed_until(10);
        // The replay applies up to 12 in one batch: 11 and 12 are new.
        c.applied(8, 5_000);
        c.applied(12, 6_000);
        assert_eq!(c.at(8), None);
        assert_eq!(c.at(10), None);
        assert_eq!(c.at(11), Some(6_000));
        assert_eq!(c.at(12), Some(6_000));
    }

    #[test]
    fn an_index_takes_the_time_of_the_batch_that_applied_it() {
        let mut c = ApplyClock::default();
        c.applied(5, 1_000);
        c.applied(9, 2_000);
        c.applied(9, 2_500); // nothing new
        c.applied(12, 3_000);
        assert_eq!(c.at(5), Some(1_000));
        assert_eq!(c.at(6), Some(2_000));
        assert_eq!(c.at(9), Some(2_000));
        assert_eq!(c.at(12), Some(3_000));
        assert_eq!(c.at(13), None, "not applied yet");
        assert_eq!(c.at(4), None, "before the first mark: unknown");
        assert_eq!(c.at(0), None);
    }

    #[test]
    fn dropped_marks_leave_their_indexes_unknown() {
        let mut c = ApplyClock::default();
        for i in 1..=ApplyClock::CAPACITY as u64 + 3 {
            c.applied(i, i * 10);
        }
        assert_eq!(c.at(3), None);
        assert_eq!(c.at(4), Some(40));
        assert_eq!(c.marks.len(), ApplyClock::CAPACITY);
    }
}
