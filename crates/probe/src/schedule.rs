//! When each target is due: every `interval` with ±10 % jitter, so that the
//! probes of many ports (and many hosts started together) do not line up.
//! A new target's first round comes within the first tenth of an interval.
//! Pure: the caller passes the time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ProbeTarget;

/// Jitter as a fraction of the interval, each way.
pub const JITTER: f64 = 0.1;

pub struct Schedule {
    interval: Duration,
    next: BTreeMap<ProbeTarget, Instant>,
    rng: u64,
}

impl Schedule {
    /// `seed` makes the jitter reproducible in tests; any value works.
    pub fn new(interval: Duration, seed: u64) -> Self {
        Schedule {
            interval,
            next: BTreeMap::new(),
            // xorshift must not start at zero
            rng: seed | 1,
        }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Forgets targets no longer wanted, schedules new ones.
    pub fn retain(&mut self, targets: &[ProbeTarget], now: Instant) {
        self.next.retain(|t, _| targets.contains(t));
        for t in targets {
            if !self.next.contains_key(t) {
                let first = self.interval.mul_f64(JITTER * self.unit());
                self.next.insert(t.clone(), now + first);
            }
        }
    }

    /// Targets due at `now`, earliest first.
    pub fn due(&self, now: Instant) -> Vec<ProbeTarget> {
        let mut due: Vec<(&Instant, &ProbeTarget)> = self
            .next
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(t, at)| (at, t))
            .collect();
        due.sort();
        due.into_iter().map(|(_, t)| t.clone()).collect()
    }

    /// Records that `target` ran (finishing at `now`): next in one interval,
    /// jittered.
    pub fn done(&mut self, target: &ProbeTarget, now: Instant) {
        let delay = self.jittered();
        if let Some(at) = self.next.get_mut(target) {
            *at = now + delay;
        }
    }

    /// When the next target is due (`None` without targets).
    pub fn next_due(&self) -> Option<Instant> {
        self.next.values().min().copied()
    }

    /// interval × (1 ± JITTER).
    pub fn jittered(&mut self) -> Duration {
        let f = 1.0 + JITTER * (2.0 * self.unit() - 1.0);
        self.interval.mul_f64(f)
    }

    /// Uniform in [0, 1) (xorshift64: enough to spread probes).
    fn unit(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}
