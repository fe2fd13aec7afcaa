//! Makes sure a Kafka partition read again from a checkpoint's position starts there.
//!
//! A consumer placed at offset *N* should first receive *N*, or the next message there
//! is when *N* was compacted away or held a transaction marker. Some brokers (tansu, the
//! broker the tests run) answer a fetch at an offset inside a record batch with the
//! batch *after* it, and a fetch inside the last batch with nothing, so the rest of that
//! batch would be skipped without a word: rows lost across a restart.
//!
//! So a resumed reader fetches from *N - 1* (a message the checkpoint already counted),
//! and drops every message before *N*. A message before *N* shows the fetch covered *N*:
//! from then on any gap is real. A first message after *N*, or nothing at all for a
//! while, means the broker skipped: the reader seeks back further each time (2, 4, 8,
//! ... offsets before *N*), never before the partition's first offset; there, a first
//! message after *N* is a real gap, and silence is waited out. Messages before *N* are
//! dropped until the check ends, so a slow fetch never makes them count twice. With a broker that serves fetches as Kafka does, the first fetch
//! covers *N* and costs one message.

use std::time::{Duration, Instant};

/// How long a fetch may bring nothing before the reader seeks back further.
const PATIENCE: Duration = Duration::from_millis(500);

/// What the reader does with one message while it checks where it resumed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Read it (the check is over).
    Deliver,
    /// Skip it: it comes before the position the checkpoint recorded.
    Drop,
    /// Skip it and fetch again from this offset.
    SeekBack(i64),
}

/// The check of one resumed partition, until its first message to read.
#[derive(Debug)]
pub(super) struct ResumeCheck {
    /// The offset the checkpoint says comes next.
    expected: i64,
    /// The partition's first offset: no fetch starts before it.
    floor: i64,
    /// Where the last fetch started.
    seek: i64,
    /// How far the next seek goes back from `expected`.
    step: i64,
    /// A message before `expected` arrived: the fetch covered it, any gap is real.
    covered: bool,
    /// When the last fetch started.
    since: Instant,
    patience: Duration,
}

impl ResumeCheck {
    /// The check of a partition resumed at `expected` whose first offset is
    /// `first_offset`; `None` when no message before `expected` is left to fetch.
    pub fn start(expected: i64, first_offset: i64) -> Option<Self> {
        Self::with_patience(expected, first_offset, PATIENCE)
    }

    fn with_patience(expected: i64, first_offset: i64, patience: Duration) -> Option<Self> {
        let floor = first_offset.max(0);
        (expected > floor).then(|| Self {
            expected,
            floor,
            seek: expected - 1,
            step: 2,
            covered: false,
            since: Instant::now(),
            patience,
        })
    }

    /// Where the first fetch starts.
    pub fn seek(&self) -> i64 {
        self.seek
    }

    pub fn expected(&self) -> i64 {
        self.expected
    }

    /// What to do with a message at `offset`.
    pub fn judge(&mut self, offset: i64) -> Verdict {
        if offset < self.expected {
            self.covered = true;
            return Verdict::Drop;
        }
        if offset == self.expected || self.covered {
            return Verdict::Deliver;
        }
        self.step_back()
    }

    /// Nothing arrived: after a while, the broker skipped the batch holding the position,
    /// and the reader seeks back further. `None`: keep waiting — always once the seek is
    /// at the partition's first offset (that fetch's messages before the position must
    /// still be dropped when they come). A slow broker only makes the seeks go back
    /// further than needed.
    pub fn silent(&mut self) -> Option<Verdict> {
        if self.covered || self.seek <= self.floor || self.since.elapsed() < self.patience {
            return None;
        }
        Some(self.step_back())
    }

    /// The fetch missed `expected`: seek back further, unless already at the partition's
    /// first offset (then the gap is real).
    fn step_back(&mut self) -> Verdict {
        if self.seek <= self.floor {
            return Verdict::Deliver;
        }
        self.seek = (self.expected - self.step).max(self.floor);
        self.step = self.step.saturating_mul(2);
        self.since = Instant::now();
        Verdict::SeekBack(self.seek)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a broker that serves a fetch inside a batch from the next batch sends first
    /// (batches start at 0, 10, 20 and 30; the last ends at 39).
    fn next_batch_broker(seek: i64) -> Option<i64> {
        [0, 10, 20, 30].into_iter().find(|s| *s >= seek)
    }

    /// Resumes at `expected` against [`next_batch_broker`]: the seeks made until the
    /// broker sent `expected` or a message before it.
    fn resume(expected: i64) -> Vec<i64> {
        let mut check = ResumeCheck::with_patience(expected, 0, Duration::ZERO).unwrap();
        let mut seeks = vec![check.seek()];
        loop {
            let first = next_batch_broker(*seeks.last().unwrap());
            let verdict = match first {
                Some(first) => check.judge(first),
                None => check.silent().unwrap(),
            };
            match verdict {
                Verdict::SeekBack(to) => seeks.push(to),
                Verdict::Drop => return seeks,
                Verdict::Deliver if first == Some(expected) => return seeks,
                Verdict::Deliver => panic!("would skip from {expected}"),
            }
        }
    }

    #[test]
    fn seeks_back_until_the_batch_holding_the_position_is_fetched() {
        // 16, 15 and 13 are inside the batch of 17 (the broker sends 20); 9 is inside
        // the batch before, so the broker sends the batch from 10.
        assert_eq!(resume(17), vec![16, 15, 13, 9]);
        // Inside the last batch the broker sends nothing until 23.
        assert_eq!(resume(39), vec![38, 37, 35, 31, 23]);
        // At a batch's start the broker sends that batch.
        assert_eq!(resume(20), vec![19]);
    }

    #[test]
    fn a_broker_that_fetches_as_kafka_does_costs_one_message() {
        let mut check = ResumeCheck::start(17, 0).unwrap();
        assert_eq!(check.seek(), 16);
        assert_eq!(check.judge(16), Verdict::Drop);
        assert_eq!(check.silent(), None);
        assert_eq!(check.judge(17), Verdict::Deliver);
    }

    #[test]
    fn a_real_gap_is_accepted_once_the_fetch_covers_the_position() {
        // Offsets 15..=19 were compacted away: a fetch from before shows 14, then 20.
        let mut check = ResumeCheck::start(17, 0).unwrap();
        assert_eq!(check.judge(20), Verdict::SeekBack(15));
        assert_eq!(check.judge(20), Verdict::SeekBack(13));
        assert_eq!(check.judge(13), Verdict::Drop);
        assert_eq!(check.judge(14), Verdict::Drop);
        assert_eq!(check.judge(20), Verdict::Deliver);
    }

    #[test]
    fn a_gap_at_the_partitions_start_is_accepted() {
        // Retention deleted everything before 40: nothing to check.
        assert!(ResumeCheck::start(17, 40).is_none());
        assert!(ResumeCheck::start(17, 17).is_none());
        // The first offset is 12: the seeks stop there.
        let mut check = ResumeCheck::start(17, 12).unwrap();
        assert_eq!(check.judge(20), Verdict::SeekBack(15));
        assert_eq!(check.judge(20), Verdict::SeekBack(13));
        assert_eq!(check.judge(20), Verdict::SeekBack(12));
        assert_eq!(check.judge(20), Verdict::Deliver);
    }

    #[test]
    fn silence_waits_for_the_patience_to_run_out() {
        let mut check = ResumeCheck::start(17, 0).unwrap();
        assert_eq!(check.silent(), None);
        let mut check = ResumeCheck::with_patience(1, 0, Duration::ZERO).unwrap();
        assert_eq!(check.seek(), 0);
        // At the partition's start: wait for that fetch, whose first message is dropped.
        assert_eq!(check.silent(), None);
        assert_eq!(check.judge(0), Verdict::Drop);
        assert_eq!(check.judge(1), Verdict::Deliver);
        // A slow fetch: the seeks reach the partition's start, and messages before the
        // position are still dropped when they come.
        let mut check = ResumeCheck::with_patience(5, 0, Duration::ZERO).unwrap();
        assert_eq!(check.silent(), Some(Verdict::SeekBack(3)));
        assert_eq!(check.silent(), Some(Verdict::SeekBack(1)));
        assert_eq!(check.silent(), Some(Verdict::SeekBack(0)));
        assert_eq!(check.silent(), None);
        for offset in 0..5 {
            assert_eq!(check.judge(offset), Verdict::Drop);
        }
        assert_eq!(check.judge(5), Verdict::Deliver);
    }
}
