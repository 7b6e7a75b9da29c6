//! Counter arithmetic over the snapshot history: increases over a window
//! that survive counter resets, and the first sample without history.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::snapshot::Snapshot;

/// Increase of a counter over (at most) a window of history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Increase {
    /// Sum of the increases between consecutive samples. An interval where
    /// the counter went down (driver reload, device re-created) adds nothing:
    /// what happened across a reset is unknown, and guessing would raise
    /// false alarms.
    pub amount: u64,
    /// Time covered by the samples used.
    pub seconds: f64,
    /// Intervals in which the counter went down.
    pub resets: u32,
}

impl Increase {
    pub fn per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.amount as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// The snapshots within `window` of the latest one (oldest first), the
/// latest included.
pub fn within(history: &[Arc<Snapshot>], window: Duration) -> &[Arc<Snapshot>] {
    let Some(latest) = history.last().and_then(|s| s.taken_at) else {
        return &history[history.len().saturating_sub(1)..];
    };
    let start = history
        .iter()
        .position(|s| s.taken_at.is_some_and(|t| age(latest, t) <= window))
        .unwrap_or(history.len().saturating_sub(1));
    &history[start..]
}

fn age(latest: SystemTime, t: SystemTime) -> Duration {
    latest.duration_since(t).unwrap_or(Duration::ZERO)
}

/// Increase of the value `read` extracts, over the samples within `window`.
/// `None` when fewer than two samples carry the value (first sample, or the
/// counter does not exist on this host): a rule then stays silent.
pub fn increase(
    history: &[Arc<Snapshot>],
    window: Duration,
    read: impl Fn(&Snapshot) -> Option<u64>,
) -> Option<Increase> {
    let samples: Vec<(SystemTime, u64)> = within(history, window)
        .iter()
        .filter_map(|s| Some((s.taken_at?, read(s)?)))
        .collect();
    if samples.len() < 2 {
        return None;
    }
    let mut amount = 0u64;
    let mut resets = 0;
    for pair in samples.windows(2) {
        let (prev, next) = (pair[0].1, pair[1].1);
        if next >= prev {
            amount = amount.saturating_add(next - prev);
        } else {
            resets += 1;
        }
    }
    let first = samples[0].0;
    let last = samples[samples.len() - 1].0;
    Some(Increase {
        amount,
        seconds: age(last, first).as_secs_f64(),
        resets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(values: &[(u64, Option<u64>)]) -> Vec<Arc<Snapshot>> {
        // The value rides in `sequence`'s place: tests read it back through
        // the closure, the time is 5 s apart.
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        values
            .iter()
            .enumerate()
            .map(|(i, (_, v))| {
                Arc::new(Snapshot {
                    sequence: v.map(|v| v + 1).unwrap_or(0),
                    taken_at: Some(t0 + Duration::from_secs(5 * i as u64)),
                    ..Snapshot::default()
                })
            })
            .collect()
    }

    fn read(s: &Snapshot) -> Option<u64> {
        s.sequence.checked_sub(1)
    }

    #[test]
    fn first_sample_has_no_increase() {
        let h = history(&[(0, Some(10))]);
        assert_eq!(increase(&h, Duration::from_secs(60), read), None);
    }

    #[test]
    fn plain_increase_and_rate() {
        let h = history(&[(0, Some(10)), (0, Some(20)), (0, Some(40))]);
        let i = increase(&h, Duration::from_secs(60), read).unwrap();
        assert_eq!(i.amount, 30);
        assert_eq!(i.seconds, 10.0);
        assert_eq!(i.per_second(), 3.0);
        assert_eq!(i.resets, 0);
    }

    #[test]
    fn a_reset_adds_nothing_and_is_counted() {
        let h = history(&[(0, Some(1_000_000)), (0, Some(5)), (0, Some(8))]);
        let i = increase(&h, Duration::from_secs(60), read).unwrap();
        assert_eq!(i.amount, 3, "no negative rate, no jump from the reset");
        assert_eq!(i.resets, 1);
    }

    #[test]
    fn window_limits_the_samples_used() {
        let h = history(&[(0, Some(0)), (0, Some(100)), (0, Some(100)), (0, Some(101))]);
        // 15 s of history; a 6 s window holds the last two samples only.
        let i = increase(&h, Duration::from_secs(6), read).unwrap();
        assert_eq!(i.amount, 1);
        assert_eq!(i.seconds, 5.0);
    }

    #[test]
    fn missing_values_are_skipped() {
        let h = history(&[(0, Some(1)), (0, None), (0, Some(4))]);
        let i = increase(&h, Duration::from_secs(60), read).unwrap();
        assert_eq!(i.amount, 3);
        assert_eq!(i.seconds, 10.0);
        let h = history(&[(0, None), (0, Some(4))]);
        assert_eq!(increase(&h, Duration::from_secs(60), read), None);
    }
}
