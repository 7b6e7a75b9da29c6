//! The sampler: runs every source once per interval on its own thread,
//! times each one, records its state and errors, runs the rules (whose
//! engine keeps what they need of earlier samples), and publishes an
//! immutable snapshot. Scrapes never touch the host.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::{Config, Expectations, RulesConfig};
use crate::rules;
use crate::snapshot::{Snapshot, SourceState, SourceStatus};
use crate::sources::Source;

/// A message to a running sampler. Dropping the sender stops it.
pub enum Control {
    /// New sources and settings from a reloaded configuration.
    Reload {
        sources: Vec<Box<dyn Source>>,
        config: Box<Config>,
    },
}

/// Runs the sources and the rules.
pub struct Sampler {
    sources: Vec<Box<dyn Source>>,
    sequence: u64,
    ticks_missed: u64,
    errors_total: HashMap<&'static str, u64>,
    /// Last state per source, to log a change once instead of every sample.
    last_state: HashMap<&'static str, SourceState>,
    rules: RulesConfig,
    expect: Expectations,
    engine: rules::Engine,
}

impl Sampler {
    /// Enough history is kept for the longest rule window, in at most
    /// [`rules::history::HISTORY_MAX`] samples.
    pub fn new(sources: Vec<Box<dyn Source>>, config: &Config) -> Self {
        Sampler {
            sources,
            sequence: 0,
            ticks_missed: 0,
            errors_total: HashMap::new(),
            last_state: HashMap::new(),
            rules: config.rules.clone(),
            expect: config.expect.clone(),
            engine: rules::Engine::with_retention(retention(config)),
        }
    }

    /// Takes one sample: every source, in order. A panicking source is
    /// caught and reported as failed; the others still run.
    pub fn sample(&mut self) -> Arc<Snapshot> {
        self.sequence += 1;
        let mut snapshot = Snapshot {
            sequence: self.sequence,
            ticks_missed_total: self.ticks_missed,
            taken_at: Some(SystemTime::now()),
            ..Snapshot::default()
        };
        for source in &mut self.sources {
            let name = source.name();
            let started = Instant::now();
            let mut errors = Vec::new();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                source.sample(&mut snapshot, &mut errors)
            }));
            let state = outcome.unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                SourceState::Failed(format!("collector panicked: {what}"))
            });
            let duration = started.elapsed();
            let total = self.errors_total.entry(name).or_insert(0);
            *total += errors.len() as u64;
            log_change(name, self.last_state.get(name), &state, &errors);
            self.last_state.insert(name, state.clone());
            snapshot.sources.push(SourceStatus {
                name,
                state,
                duration,
                errors,
                errors_total: *total,
                kernel_requests: source.kernel_requests(),
            });
        }
        // The findings ride on the sample itself.
        snapshot.findings = self.engine.evaluate(&snapshot, &self.rules, &self.expect);
        Arc::new(snapshot)
    }

    /// What the rules keep of earlier samples.
    pub fn history(&self) -> &rules::History {
        self.engine.history()
    }
    /// Applies a reloaded configuration. Error totals, the history and the
    /// active findings are kept: the collectors keep their names.
    pub fn reconfigure(&mut self, sources: Vec<Box<dyn Source>>, config: &Config) {
        self.sources = sources;
        self.engine.set_retention(retention(config));
        // The device selection may have changed: a device now excluded is
        // not gone (expect.devices still holds what the host must have).
        self.engine.forget_devices();
        self.rules = config.rules.clone();
        self.expect = config.expect.clone();
    }

    /// Samples every `interval` until `control` is dropped; calls `publish`
    /// after each sample. The schedule is kept against drift: a slow sample
    /// delays the next one, it does not shift all later ones.
    pub fn run(
        mut self,
        mut interval: Duration,
        control: mpsc::Receiver<Control>,
        mut publish: impl FnMut(&Sampler, Arc<Snapshot>),
    ) {
        let mut next = Instant::now();
        loop {
            let snapshot = self.sample();
            publish(&self, snapshot);
            // The configuration bounds durations (config::MAX_DURATION);
            // an instant past the clock's range would still be no reason to
            // panic: then sample again after a second.
            let later = |from: Instant| {
                from.checked_add(interval)
                    .unwrap_or_else(|| from + Duration::from_secs(1))
            };
            next = later(next);
            let now = Instant::now();
            if next < now {
                // Missed ticks are skipped, not run back to back; counted so
                // that a gap in the series has a visible cause.
                self.ticks_missed = self
                    .ticks_missed
                    .saturating_add(ticks_passed(next, now, interval));
                next = later(now);
            }
            loop {
                let wait = next.saturating_duration_since(Instant::now());
                match control.recv_timeout(wait) {
                    Err(mpsc::RecvTimeoutError::Timeout) => break,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    Ok(Control::Reload { sources, config }) => {
                        self.reconfigure(sources, &config);
                        interval = config.sample_interval;
                        // Sample at once with the new configuration.
                        next = Instant::now();
                    }
                }
            }
        }
    }
}

/// Scheduled ticks at `next`, `next + interval`, ... that have come by `now`:
/// the samples a schedule that skips late ticks never takes.
fn ticks_passed(next: Instant, now: Instant, interval: Duration) -> u64 {
    let Some(late) = now.checked_duration_since(next) else {
        return 0;
    };
    if late.is_zero() {
        return 0;
    }
    // A zero interval cannot come from the configuration (at least 100 ms);
    // treated as one tick missed rather than a division by zero.
    let whole = late
        .as_nanos()
        .checked_div(interval.as_nanos())
        .unwrap_or(0);
    u64::try_from(whole).unwrap_or(u64::MAX).saturating_add(1)
}

/// How far back the history must reach: the longest rule window and one
/// interval more, so the window's first sample has a predecessor.
fn retention(config: &Config) -> Duration {
    config
        .rules
        .longest_window()
        .saturating_add(config.sample_interval)
}

fn log_change(name: &str, previous: Option<&SourceState>, state: &SourceState, errors: &[String]) {
    let changed =
        previous.map(|p| std::mem::discriminant(p) != std::mem::discriminant(state) || p != state);
    if changed == Some(false) {
        if !errors.is_empty() {
            tracing::debug!(collector = name, errors = errors.len(), first = %errors[0], "read errors");
        }
        return;
    }
    match state {
        SourceState::Ok => {
            if errors.is_empty() {
                tracing::info!(collector = name, "collector ok");
            } else {
                tracing::warn!(collector = name, errors = errors.len(), first = %errors[0], "collector ok with read errors");
            }
        }
        SourceState::Unavailable(why) => {
            tracing::info!(collector = name, reason = %why, "collector has nothing to read")
        }
        SourceState::Disabled(why) => {
            tracing::info!(collector = name, reason = %why, "collector disabled")
        }
        SourceState::Failed(why) => {
            tracing::error!(collector = name, error = %why, "collector failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake {
        name: &'static str,
        script: Vec<Result<usize, &'static str>>,
        step: usize,
    }

    impl Source for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn sample(&mut self, _s: &mut Snapshot, errors: &mut Vec<String>) -> SourceState {
            let step = self.script[self.step.min(self.script.len() - 1)];
            self.step += 1;
            match step {
                Ok(n) => {
                    errors.extend((0..n).map(|i| format!("file {i}: Input/output error")));
                    SourceState::Ok
                }
                Err("panic") => panic!("boom"),
                Err(msg) => SourceState::Failed(msg.into()),
            }
        }
    }

    #[test]
    fn failing_and_panicking_sources_do_not_stop_the_others() {
        let sources: Vec<Box<dyn Source>> = vec![
            Box::new(Fake {
                name: "a",
                script: vec![Err("panic")],
                step: 0,
            }),
            Box::new(Fake {
                name: "b",
                script: vec![Err("no socket")],
                step: 0,
            }),
            Box::new(Fake {
                name: "c",
                script: vec![Ok(2), Ok(1)],
                step: 0,
            }),
        ];
        let mut sampler = Sampler::new(sources, &Config::default());
        let s1 = sampler.sample();
        assert_eq!(s1.sources.len(), 3);
        assert!(matches!(&s1.sources[0].state, SourceState::Failed(m) if m.contains("boom")));
        assert_eq!(s1.sources[1].state, SourceState::Failed("no socket".into()));
        assert_eq!(s1.sources[2].state, SourceState::Ok);
        assert_eq!(s1.sources[2].errors_total, 2);
        let s2 = sampler.sample();
        assert_eq!(s2.sources[2].errors_total, 3, "errors accumulate");
        assert_eq!(s2.sequence, 2);
    }

    #[test]
    fn the_engine_follows_counters_across_samples() {
        struct Counting(u64);
        impl Source for Counting {
            fn name(&self) -> &'static str {
                "rdma"
            }
            fn sample(&mut self, s: &mut Snapshot, _e: &mut Vec<String>) -> SourceState {
                use roce_rdma::{Counter, Device, Port, RdmaSnapshot};
                self.0 += 2;
                let port = Port {
                    number: 1,
                    counters: vec![Counter::new("link_downed", self.0)],
                    ..Port::default()
                };
                s.rdma = Some(RdmaSnapshot {
                    devices: vec![Device {
                        name: "x".into(),
                        ports: vec![port],
                        ..Device::default()
                    }],
                    errors: vec![],
                });
                SourceState::Ok
            }
        }
        let mut sampler = Sampler::new(vec![Box::new(Counting(0))], &Config::default());
        for _ in 0..3 {
            sampler.sample();
        }
        assert_eq!(sampler.history().len(), 3);
        let inc = sampler
            .history()
            .port("x", 1)
            .increase(rules::history::Value::LinkDowned, Duration::MAX)
            .map(|i| i.amount);
        assert_eq!(inc, Some(4));
    }

    #[test]
    fn ticks_passed_counts_whole_intervals() {
        let t0 = Instant::now();
        let i = Duration::from_millis(100);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(ticks_passed(at(100), at(100), i), 0, "on time");
        assert_eq!(ticks_passed(at(100), at(50), i), 0, "early");
        assert_eq!(ticks_passed(at(100), at(101), i), 1);
        assert_eq!(ticks_passed(at(100), at(199), i), 1);
        // A sample started at 0 that ends at 350: ticks 100, 200, 300 passed.
        assert_eq!(ticks_passed(at(100), at(350), i), 3);
        assert_eq!(ticks_passed(at(100), at(101), Duration::ZERO), 1);
    }

    #[test]
    fn run_counts_samples_and_the_ticks_a_slow_sample_skips() {
        const INTERVAL: Duration = Duration::from_millis(20);
        struct Slow;
        impl Source for Slow {
            fn name(&self) -> &'static str {
                "slow"
            }
            fn sample(&mut self, _s: &mut Snapshot, _e: &mut Vec<String>) -> SourceState {
                std::thread::sleep(INTERVAL * 3);
                SourceState::Ok
            }
        }
        let sampler = Sampler::new(vec![Box::new(Slow)], &Config::default());
        let (control, control_rx) = mpsc::channel();
        let (published, snapshots) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            sampler.run(INTERVAL, control_rx, |_, s| {
                let _ = published.send(s);
            })
        });
        let got: Vec<Arc<Snapshot>> = snapshots.iter().take(3).collect();
        drop(control);
        thread.join().unwrap();
        assert_eq!(
            got.iter().map(|s| s.sequence).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        // Counted after a sample, so the first snapshot cannot carry a miss.
        // A sample sleeps at least three intervals, so at least three ticks
        // pass during each (the one it started on is not one of them); more
        // on a loaded machine, never fewer.
        assert_eq!(got[0].ticks_missed_total, 0);
        assert!(
            got[1].ticks_missed_total >= 3,
            "{}",
            got[1].ticks_missed_total
        );
        assert!(
            got[2].ticks_missed_total >= 6,
            "{}",
            got[2].ticks_missed_total
        );
    }
}
