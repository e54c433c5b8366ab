//! The newest raft entries, kept in memory beside the log on disk.
//!
//! The leader reads each entry back once per follower to replicate it and
//! once more to apply it, and a follower reads it once to apply it. From
//! RocksDB each read is an iterator, a copy and a bincode decode, and the
//! apply then decodes the command again. From here a read is a clone of a
//! shared buffer, whose command is already decoded where it was made (the
//! leader) or checked on arrival (a follower).
//!
//! The tail is a run of consecutive entries that ends at the log's last
//! entry, or is empty: every append, truncation and purge of the log goes
//! through it. So a range that starts inside it is all here, and one that
//! starts before it is read from disk (a follower far behind, a restart).

use std::collections::VecDeque;

use openraft::EntryPayload;

use crate::raft::Entry;

/// Most entries kept.
const MAX_ENTRIES: usize = 256;
/// Most encoded bytes of commands kept; the newest entry stays whatever
/// its size. A few MiB hold a few milliseconds of the busiest writing,
/// which is as far as replication and the apply run behind.
const MAX_BYTES: usize = 4 << 20;

#[derive(Default)]
pub struct LogTail {
    entries: VecDeque<Entry>,
    bytes: usize,
}

fn size(entry: &Entry) -> usize {
    match &entry.payload {
        EntryPayload::Normal(command) => command.encoded_len(),
        _ => 0,
    }
}

impl LogTail {
    /// `entries` were written to the log, in order, after what it held.
    pub fn appended(&mut self, entries: Vec<Entry>) {
        for entry in entries {
            if let Some(last) = self.entries.back() {
                if last.log_id.index + 1 != entry.log_id.index {
                    // Not the next entry (after a snapshot was installed):
                    // the tail starts again here.
                    self.entries.clear();
                    self.bytes = 0;
                }
            }
            self.bytes += size(&entry);
            self.entries.push_back(entry);
        }
        while self.entries.len() > MAX_ENTRIES || (self.bytes > MAX_BYTES && self.entries.len() > 1)
        {
            self.pop_front();
        }
    }

    /// The log's entries from `index` on were deleted.
    pub fn truncated(&mut self, index: u64) {
        while self.entries.back().is_some_and(|e| e.log_id.index >= index) {
            let entry = self.entries.pop_back().expect("checked");
            self.bytes -= size(&entry);
        }
    }

    /// The log's entries up to `index` (included) were deleted.
    pub fn purged(&mut self, index: u64) {
        while self
            .entries
            .front()
            .is_some_and(|e| e.log_id.index <= index)
        {
            self.pop_front();
        }
    }

    /// The log's entries from `start` up to `end` (excluded; `None`: to the
    /// last), if the tail holds all of them; only those whose commands fit
    /// in `budget` bytes (at least one), so that a long range of large
    /// entries is not copied to send a few.
    pub fn get(&self, start: u64, end: Option<u64>, budget: u64) -> Option<Vec<Entry>> {
        let first = self.entries.front()?.log_id.index;
        if start < first {
            return None;
        }
        // The tail ends where the log does: past it there is nothing.
        let after_last = first + self.entries.len() as u64;
        let end = end.map_or(after_last, |e| e.min(after_last));
        if start >= end {
            return Some(Vec::new());
        }
        let mut used = 0u64;
        let fitting = self
            .entries
            .range((start - first) as usize..(end - first) as usize)
            .enumerate()
            .take_while(|(i, e)| {
                used = used.saturating_add(size(e) as u64);
                *i == 0 || used <= budget
            })
            .map(|(_, e)| e.clone());
        Some(fitting.collect())
    }

    fn pop_front(&mut self) {
        if let Some(entry) = self.entries.pop_front() {
            self.bytes -= size(&entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId};

    use super::*;
    use crate::raft::Command;

    fn entry(index: u64, bytes: usize) -> Entry {
        let command = Command::from_bytes(vec![0u8; bytes]);
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(command),
        }
    }

    fn indexes(entries: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        entries.map(|es| es.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn a_range_is_served_only_when_the_tail_holds_all_of_it() {
        let mut tail = LogTail::default();
        assert_eq!(
            indexes(tail.get(1, None, u64::MAX)),
            None,
            "empty: read the disk"
        );
        tail.appended((5..=9).map(|i| entry(i, 10)).collect());
        assert_eq!(indexes(tail.get(5, Some(8), u64::MAX)), Some(vec![5, 6, 7]));
        assert_eq!(indexes(tail.get(7, None, u64::MAX)), Some(vec![7, 8, 9]));
        assert_eq!(indexes(tail.get(8, Some(100), u64::MAX)), Some(vec![8, 9]));
        assert_eq!(
            indexes(tail.get(10, None, u64::MAX)),
            Some(vec![]),
            "past the log's end"
        );
        assert_eq!(
            indexes(tail.get(4, Some(6), u64::MAX)),
            None,
            "starts before the tail"
        );
    }

    #[test]
    fn a_range_within_a_budget_stops_at_the_budget_but_never_before_one_entry() {
        let mut tail = LogTail::default();
        tail.appended((5..=9).map(|i| entry(i, 10)).collect());
        assert_eq!(indexes(tail.get(5, Some(10), 25)), Some(vec![5, 6]));
        assert_eq!(indexes(tail.get(5, Some(10), 30)), Some(vec![5, 6, 7]));
        assert_eq!(indexes(tail.get(6, Some(8), 1_000)), Some(vec![6, 7]));
        assert_eq!(indexes(tail.get(7, None, 1)), Some(vec![7]));
        assert_eq!(indexes(tail.get(10, Some(12), 100)), Some(vec![]));
        assert_eq!(indexes(tail.get(4, Some(6), 100)), None);
    }

    #[test]
    fn truncation_purge_and_a_gap_keep_the_tail_the_logs_own_end() {
        let mut tail = LogTail::default();
        tail.appended((1..=6).map(|i| entry(i, 10)).collect());
        tail.truncated(5);
        assert_eq!(indexes(tail.get(1, None, u64::MAX)), Some(vec![1, 2, 3, 4]));
        tail.appended(vec![entry(5, 10)]);
        tail.purged(2);
        assert_eq!(indexes(tail.get(3, None, u64::MAX)), Some(vec![3, 4, 5]));
        assert_eq!(indexes(tail.get(2, None, u64::MAX)), None);
        // After a snapshot, the log goes on past a gap.
        tail.appended(vec![entry(40, 10)]);
        assert_eq!(indexes(tail.get(40, None, u64::MAX)), Some(vec![40]));
        assert_eq!(indexes(tail.get(5, None, u64::MAX)), None);
        assert_eq!(tail.bytes, 10);
    }

    #[test]
    fn the_tail_is_bounded_by_entries_and_bytes_but_keeps_the_newest() {
        let mut tail = LogTail::default();
        tail.appended(
            (1..=(MAX_ENTRIES as u64 + 10))
                .map(|i| entry(i, 1))
                .collect(),
        );
        assert_eq!(tail.entries.len(), MAX_ENTRIES);
        assert_eq!(tail.entries.front().unwrap().log_id.index, 11);
        tail.appended(vec![entry(MAX_ENTRIES as u64 + 11, MAX_BYTES * 2)]);
        assert_eq!(
            indexes(tail.get(MAX_ENTRIES as u64 + 11, None, u64::MAX))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            tail.entries.len(),
            1,
            "one entry over the budget stays alone"
        );
    }
}
