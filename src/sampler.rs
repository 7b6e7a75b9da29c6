//! The sampler: runs every source once per interval on its own thread,
//! times each one, records its state and errors, and publishes an immutable
//! snapshot with a short history. Scrapes never touch the host.

use std::collections::{HashMap, VecDeque};
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

/// Runs the sources and keeps the history.
pub struct Sampler {
    sources: Vec<Box<dyn Source>>,
    sequence: u64,
    errors_total: HashMap<&'static str, u64>,
    /// Last state per source, to log a change once instead of every sample.
    last_state: HashMap<&'static str, SourceState>,
    history: VecDeque<Arc<Snapshot>>,
    history_len: usize,
    rules: RulesConfig,
    expect: Expectations,
    engine: rules::Engine,
}

impl Sampler {
    /// Enough history is kept for the longest rule window.
    pub fn new(sources: Vec<Box<dyn Source>>, config: &Config) -> Self {
        Sampler {
            sources,
            sequence: 0,
            errors_total: HashMap::new(),
            last_state: HashMap::new(),
            history: VecDeque::new(),
            history_len: history_len(config),
            rules: config.rules.clone(),
            expect: config.expect.clone(),
            engine: rules::Engine::new(),
        }
    }

    /// Takes one sample: every source, in order. A panicking source is
    /// caught and reported as failed; the others still run.
    pub fn sample(&mut self) -> Arc<Snapshot> {
        self.sequence += 1;
        let mut snapshot = Snapshot {
            sequence: self.sequence,
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
            });
        }
        // Rules see the history with this sample last; the findings then
        // ride on the sample itself.
        let mut history: Vec<Arc<Snapshot>> = self.history.iter().cloned().collect();
        history.push(Arc::new(snapshot));
        let findings = self.engine.evaluate(&history, &self.rules, &self.expect);
        let latest = history.pop();
        drop(history);
        let mut snapshot = match latest.map(Arc::try_unwrap) {
            Some(Ok(s)) => s,
            Some(Err(shared)) => (*shared).clone(),
            None => Snapshot::default(),
        };
        snapshot.findings = findings;
        let snapshot = Arc::new(snapshot);
        if self.history.len() >= self.history_len {
            self.history.pop_front();
        }
        self.history.push_back(snapshot.clone());
        snapshot
    }

    /// Oldest first, the latest last.
    pub fn history(&self) -> &VecDeque<Arc<Snapshot>> {
        &self.history
    }

    /// Applies a reloaded configuration. Error totals, the history and the
    /// active findings are kept: the collectors keep their names.
    pub fn reconfigure(&mut self, sources: Vec<Box<dyn Source>>, config: &Config) {
        self.sources = sources;
        self.history_len = history_len(config);
        while self.history.len() > self.history_len {
            self.history.pop_front();
        }
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
            next += interval;
            let now = Instant::now();
            if next < now {
                // Missed ticks are skipped, not run back to back.
                next = now + interval;
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

/// Samples needed to cover the longest rule window, plus the sample before
/// it; bounded so a huge window with a tiny interval cannot eat memory.
fn history_len(config: &Config) -> usize {
    let interval = config.sample_interval.as_secs_f64().max(0.001);
    let needed = (config.rules.longest_window().as_secs_f64() / interval).ceil() as usize + 2;
    needed.clamp(2, 4096)
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
    fn history_covers_the_longest_rule_window_and_is_bounded() {
        let mut config = Config {
            sample_interval: Duration::from_secs(5),
            ..Config::default()
        };
        config.rules.link_flap.window = Duration::from_secs(20);
        config.rules.symbol_errors.window = Duration::from_secs(20);
        config.rules.hold = Duration::from_secs(10);
        for r in [
            &mut config.rules.retransmissions,
            &mut config.rules.sequence_errors,
            &mut config.rules.out_of_buffer,
            &mut config.rules.cnp_spike,
            &mut config.rules.ecn_spike,
        ] {
            r.window = Duration::from_secs(10);
        }
        assert_eq!(history_len(&config), 6);
        let mut sampler = Sampler::new(vec![], &config);
        for _ in 0..9 {
            sampler.sample();
        }
        let seq: Vec<u64> = sampler.history().iter().map(|s| s.sequence).collect();
        assert_eq!(seq, vec![4, 5, 6, 7, 8, 9]);
        config.sample_interval = Duration::from_millis(100);
        config.rules.link_flap.window = Duration::from_secs(100_000);
        assert_eq!(history_len(&config), 4096);
    }
}
