//! Counter arithmetic over a run of samples: the increase of a counter that
//! survives counter resets, and nothing at all from a single sample.
//!
//! Sample times are points on the monotonic clock ([`Snapshot::clock`]), as
//! a [`Duration`] from its origin: a wall-clock step (NTP, an operator's
//! `date -s`) moves neither a window nor a rate.
//!
//! [`Snapshot::clock`]: crate::snapshot::Snapshot::clock

use std::time::Duration;

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

/// Increase over `samples` (monotonic time, value), oldest first. `None` with fewer
/// than two samples (first sample, or the counter does not exist on this
/// host): a rule then stays silent.
pub fn increase_over(samples: impl IntoIterator<Item = (Duration, u64)>) -> Option<Increase> {
    let mut samples = samples.into_iter();
    let (first, mut previous) = samples.next()?;
    let mut last = first;
    let mut amount = 0u64;
    let mut resets = 0;
    let mut pairs = 0;
    for (t, value) in samples {
        if value >= previous {
            amount = amount.saturating_add(value - previous);
        } else {
            resets += 1;
        }
        previous = value;
        last = t;
        pairs += 1;
    }
    (pairs > 0).then(|| Increase {
        amount,
        seconds: age(last, first).as_secs_f64(),
        resets,
    })
}

/// How long before `latest` the time `t` was; zero when `t` is the later
/// (samples out of order: snapshots made by hand).
pub fn age(latest: Duration, t: Duration) -> Duration {
    latest.saturating_sub(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples 5 s apart.
    fn samples(values: &[u64]) -> Vec<(Duration, u64)> {
        let t0 = Duration::from_secs(1_000_000);
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (t0 + Duration::from_secs(5 * i as u64), *v))
            .collect()
    }

    #[test]
    fn one_sample_has_no_increase() {
        assert_eq!(increase_over(samples(&[10])), None);
        assert_eq!(increase_over(samples(&[])), None);
    }

    #[test]
    fn plain_increase_and_rate() {
        let i = increase_over(samples(&[10, 20, 40])).unwrap();
        assert_eq!(i.amount, 30);
        assert_eq!(i.seconds, 10.0);
        assert_eq!(i.per_second(), 3.0);
        assert_eq!(i.resets, 0);
    }

    #[test]
    fn a_reset_adds_nothing_and_is_counted() {
        let i = increase_over(samples(&[1_000_000, 5, 8])).unwrap();
        assert_eq!(i.amount, 3, "no negative rate, no jump from the reset");
        assert_eq!(i.resets, 1);
    }

    #[test]
    fn samples_out_of_order_cover_no_time() {
        let t0 = Duration::from_secs(1_000_000);
        let i = increase_over([(t0, 1), (t0 - Duration::from_secs(5), 4)]).unwrap();
        assert_eq!(i.amount, 3);
        assert_eq!(i.seconds, 0.0);
        assert_eq!(i.per_second(), 0.0);
    }
}
