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
    /// How far back the history reaches (the longest rule window).
    retention: Duration,
    rules: RulesConfig,
    expect: Expectations,
    engine: rules::Engine,
}

impl Sampler {
    /// Enough history is kept for the longest rule window, in at most
    /// [`HISTORY_MAX`] samples.
    pub fn new(sources: Vec<Box<dyn Source>>, config: &Config) -> Self {
        Sampler {
            sources,
            sequence: 0,
            errors_total: HashMap::new(),
            last_state: HashMap::new(),
            history: VecDeque::new(),
            retention: retention(config),
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
        // Only the latest sample is kept whole; older ones keep what rate
        // rules read (counters, states), which keeps the history small.
        if let Some(previous) = self.history.back_mut() {
            *previous = Arc::new(for_history(previous));
        }
        self.history.push_back(snapshot.clone());
        retain(&mut self.history, self.retention, HISTORY_MAX);
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
        self.retention = retention(config);
        retain(&mut self.history, self.retention, HISTORY_MAX);
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

/// Most samples kept in the history. A 10-minute window at 5 s would be
/// 120 samples; beyond this count the history is thinned evenly instead,
/// which rate rules tolerate (an increase over fewer, wider intervals is the
/// same increase; a reset inside a merged interval is skipped, as any reset).
pub const HISTORY_MAX: usize = 64;

/// How far back the history must reach: the longest rule window and one
/// interval more, so the window's first sample has a predecessor.
fn retention(config: &Config) -> Duration {
    config.rules.longest_window() + config.sample_interval
}

/// What an older sample keeps: everything rules read over a window. The GID
/// tables, the PCI topology, the collectors' states and the findings are only
/// ever read from the latest sample.
fn for_history(s: &Snapshot) -> Snapshot {
    let mut kept = s.clone();
    kept.topology = None;
    kept.findings = Vec::new();
    kept.sources = Vec::new();
    if let Some(rdma) = &mut kept.rdma {
        rdma.errors = Vec::new();
        for port in rdma.devices.iter_mut().flat_map(|d| d.ports.iter_mut()) {
            port.gids = Vec::new();
        }
    }
    kept
}

/// Drops samples older than `retention` (keeping two at least), then, while
/// more than `max` remain, removes the inner sample whose removal merges the
/// shortest pair of intervals, so the samples stay evenly spread over the
/// window. The first and the latest are never removed.
fn retain(history: &mut VecDeque<Arc<Snapshot>>, retention: Duration, max: usize) {
    let time = |s: &Arc<Snapshot>| s.taken_at.unwrap_or(SystemTime::UNIX_EPOCH);
    let Some(latest) = history.back().map(time) else {
        return;
    };
    while history.len() > 2 {
        let oldest = history.front().map(time).unwrap_or(latest);
        if latest.duration_since(oldest).unwrap_or(Duration::ZERO) > retention {
            history.pop_front();
        } else {
            break;
        }
    }
    while history.len() > max.max(2) {
        let span = |a: usize, b: usize| {
            time(&history[b])
                .duration_since(time(&history[a]))
                .unwrap_or(Duration::ZERO)
        };
        let drop = (1..history.len() - 1)
            .min_by_key(|&i| span(i - 1, i + 1))
            .unwrap_or(1);
        history.remove(drop);
    }
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

    fn at(seconds: u64) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            sequence: seconds,
            taken_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)),
            ..Snapshot::default()
        })
    }

    #[test]
    fn history_reaches_back_the_retention_and_no_further() {
        let mut h: VecDeque<Arc<Snapshot>> = VecDeque::new();
        for t in (0..=100).step_by(5) {
            h.push_back(at(t));
            retain(&mut h, Duration::from_secs(30), HISTORY_MAX);
        }
        let seq: Vec<u64> = h.iter().map(|s| s.sequence).collect();
        assert_eq!(seq, vec![70, 75, 80, 85, 90, 95, 100]);
    }

    #[test]
    fn a_long_window_is_thinned_evenly_to_the_cap() {
        // 1 s samples, a 600 s window: 601 samples would be needed.
        let mut h: VecDeque<Arc<Snapshot>> = VecDeque::new();
        for t in 0..=2000 {
            h.push_back(at(t));
            retain(&mut h, Duration::from_secs(601), 64);
        }
        assert_eq!(h.len(), 64);
        assert_eq!(h.back().map(|s| s.sequence), Some(2000));
        let first = h.front().map(|s| s.sequence).unwrap_or(0);
        assert!(
            (1399..=1420).contains(&first),
            "reaches back about the window: {first}"
        );
        let times: Vec<u64> = h.iter().map(|s| s.sequence).collect();
        let widest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        assert!(
            widest <= 32,
            "evenly spread: widest gap {widest} s in {times:?}"
        );
    }

    #[test]
    fn older_samples_keep_counters_and_drop_gids_and_topology() {
        use roce_rdma::{Counter, Device, Gid, GidType, Port, RdmaSnapshot};
        let port = Port {
            number: 1,
            counters: vec![Counter::new("symbol_error", 3)],
            gids: vec![Gid {
                index: 0,
                gid: std::net::Ipv6Addr::LOCALHOST,
                gid_type: GidType::RoceV2,
                netdev: None,
            }],
            ..Port::default()
        };
        let s = Snapshot {
            rdma: Some(RdmaSnapshot {
                devices: vec![Device {
                    name: "mlx5_0".into(),
                    ports: vec![port],
                    ..Device::default()
                }],
                errors: vec![],
            }),
            topology: Some(Default::default()),
            ..Snapshot::default()
        };
        let kept = for_history(&s);
        let p = &kept.rdma.as_ref().unwrap().devices[0].ports[0];
        assert_eq!(p.counter("symbol_error"), Some(3));
        assert!(p.gids.is_empty());
        assert!(kept.topology.is_none());
    }

    #[test]
    fn the_sampler_keeps_the_latest_whole_and_older_ones_thin() {
        struct Gids;
        impl Source for Gids {
            fn name(&self) -> &'static str {
                "rdma"
            }
            fn sample(&mut self, s: &mut Snapshot, _e: &mut Vec<String>) -> SourceState {
                use roce_rdma::{Device, Gid, GidType, Port, RdmaSnapshot};
                let gid = Gid {
                    index: 0,
                    gid: std::net::Ipv6Addr::LOCALHOST,
                    gid_type: GidType::RoceV2,
                    netdev: None,
                };
                let port = Port {
                    number: 1,
                    gids: vec![gid],
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
        let mut sampler = Sampler::new(vec![Box::new(Gids)], &Config::default());
        for _ in 0..3 {
            sampler.sample();
        }
        let gids: Vec<usize> = sampler
            .history()
            .iter()
            .map(|s| {
                s.rdma
                    .as_ref()
                    .map(|r| r.devices[0].ports[0].gids.len())
                    .unwrap_or(0)
            })
            .collect();
        assert_eq!(gids, vec![0, 0, 1]);
    }
}
