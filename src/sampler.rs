//! The sampler: once per interval has the reader call every source (see
//! [`reader`]: one thread, each source under a deadline), times each one,
//! records its state and errors, assembles the snapshot from the parts the
//! sources return, runs the rules (whose engine keeps what they need of
//! earlier samples), and publishes an immutable snapshot. Scrapes never
//! touch the host.
//!
//! Deadlines: a source's call gets one sample interval. A call still running
//! then is reported failed (timed out) and the sample goes on without it; the
//! source is not called again until that call has returned (its late reading
//! is dropped), so a read stuck in the kernel holds one thread, not one per
//! sample, and one sample waits for at most two deadlines.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::{Config, Expectations, RulesConfig};
use crate::rules;
use crate::snapshot::{monotonic_now, Snapshot, SourceStatus};
use crate::sources::{Part, Source};
use roce_host::ErrorKind;

mod logging;
mod reader;
use logging::Logged;
use reader::{Reader, Slot};

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
    /// The sources, in the order they were given (the order of
    /// [`Snapshot::sources`]).
    slots: Arc<[Arc<Slot>]>,
    /// The order they are called in: those that need nothing first, then
    /// those that read the RDMA part.
    order: Arc<[usize]>,
    reader: Reader,
    /// How long a source's call may take (the sample interval).
    deadline: Duration,
    interval: Duration,
    sequence: u64,
    ticks_missed: u64,
    /// Errors since start by collector, by kind in [`ErrorKind::ALL`]'s
    /// order.
    errors_total: HashMap<&'static str, [u64; ErrorKind::ALL.len()]>,
    /// What was last logged per source, to log a change once instead of
    /// every sample, and at most once per [`logging::LOG_SPACING`].
    last_logged: HashMap<&'static str, Logged>,
    /// The RDMA part handed to the sources that read it when the RDMA
    /// source returned none this sample (failed, timed out): the last one
    /// it returned. Taken from `previous` by the reader when first needed.
    stale_rdma: Option<Arc<roce_rdma::RdmaSnapshot>>,
    previous: Option<Arc<Snapshot>>,
    rules: RulesConfig,
    expect: Expectations,
    engine: rules::Engine,
}

impl Sampler {
    /// Enough history is kept for the longest rule window, in at most
    /// [`rules::history::HISTORY_MAX`] samples. The reader's thread starts
    /// with the first sample.
    pub fn new(sources: Vec<Box<dyn Source>>, config: &Config) -> Self {
        let slots: Vec<Arc<Slot>> = sources.into_iter().map(Slot::new).collect();
        Sampler {
            order: call_order(&slots),
            slots: slots.into(),
            reader: Reader::new(),
            deadline: config.sample_interval,
            interval: config.sample_interval,
            sequence: 0,
            ticks_missed: 0,
            errors_total: HashMap::new(),
            last_logged: HashMap::new(),
            stale_rdma: None,
            previous: None,
            rules: config.rules.clone(),
            expect: config.expect.clone(),
            engine: rules::Engine::with_retention(retention(config)),
        }
    }

    /// The sources that are called, in order: those that are not off
    /// ([`Source::disabled`]).
    pub fn running(&self) -> Vec<&'static str> {
        self.slots
            .iter()
            .filter(|s| s.off.is_none())
            .map(|s| s.name)
            .collect()
    }

    /// How long one call of a source may take before it is reported timed
    /// out: one sample interval.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Takes one sample: the sources that need nothing first, then those
    /// that read the RDMA part. A source that panics, fails or misses its
    /// deadline is reported as failed; the others still run.
    pub fn sample(&mut self) -> Arc<Snapshot> {
        self.sequence += 1;
        let mut snapshot = Snapshot {
            sequence: self.sequence,
            ticks_missed_total: self.ticks_missed,
            taken_at: Some(SystemTime::now()),
            monotonic: Some(monotonic_now()),
            interval: self.interval,
            ..Snapshot::default()
        };
        let read = self.reader.read(
            &self.slots,
            &self.order,
            self.previous.clone(),
            self.stale_rdma.take(),
            self.deadline,
        );
        self.stale_rdma = if read.rdma.is_some() {
            None
        } else {
            read.stale
        };
        // The dependent sources have let go of their copies of the Arc,
        // unless one missed its deadline: then the part is copied.
        snapshot.rdma = read
            .rdma
            .map(|r| Arc::try_unwrap(r).unwrap_or_else(|r| (*r).clone()));

        for (slot, outcome) in self.slots.iter().zip(read.outcomes) {
            let Some(outcome) = outcome else { continue };
            let name = slot.name;
            match outcome.part {
                Some(Part::Rdma(r)) => snapshot.rdma = Some(r),
                Some(Part::Netdev(n)) => snapshot.netdev = Some(n),
                Some(Part::Topology(t)) => snapshot.topology = Some(*t),
                Some(Part::Probes(p)) => snapshot.probes = Some(p),
                Some(Part::PeerProbes(p)) => {
                    snapshot.peer_probes = Some(p.results);
                    snapshot.peer_discovery = Some(p.discovery);
                }
                Some(Part::Nccl(n)) => snapshot.nccl = Some(*n),
                Some(Part::Phys(p)) => snapshot.phys = Some(p),
                Some(Part::Lldp(l)) => snapshot.lldp = Some(*l),
                Some(Part::LoadTest(l)) => snapshot.load_test = Some(*l),
                None => {}
            }
            let by_kind = self.errors_total.entry(name).or_default();
            for e in &outcome.errors {
                let kind = e.kind();
                if let Some(i) = ErrorKind::ALL.iter().position(|k| *k == kind) {
                    by_kind[i] += 1;
                }
            }
            let now = Logged::of(&outcome.state, &outcome.errors, self.sequence);
            let spacing = logging::spacing(self.interval);
            if let Some(logged) =
                logging::log_change(name, self.last_logged.get(name), now, spacing)
            {
                self.last_logged.insert(name, logged);
            }
            snapshot.sources.push(SourceStatus {
                name,
                state: outcome.state,
                duration: outcome.duration,
                errors: outcome.errors,
                errors_total: by_kind.iter().sum(),
                errors_by_kind: *by_kind,
                kernel_requests: outcome.kernel_requests,
            });
        }
        // The findings ride on the sample itself.
        snapshot.findings = self.engine.evaluate(&snapshot, &self.rules, &self.expect);
        snapshot.web_auth = roce_web::webconfig::auth_counts().map(|c| crate::snapshot::WebAuth {
            allowed: c.allowed,
            denied: c.denied,
            refused: c.refused,
            verifications: c.verifications,
        });
        snapshot.rule_panics_total = self
            .engine
            .rule_panics()
            .iter()
            .map(|(rule, n)| (rule.as_str(), *n))
            .collect();
        let snapshot = Arc::new(snapshot);
        self.previous = Some(snapshot.clone());
        snapshot
    }

    /// What the rules keep of earlier samples.
    pub fn history(&self) -> &rules::History {
        self.engine.history()
    }

    /// Applies a reloaded configuration. Error totals, the history and the
    /// active findings are kept: the collectors keep their names. A source
    /// whose call is still in flight takes its new settings once that call
    /// returns, so a stuck read is never doubled by a reload.
    pub fn reconfigure(&mut self, sources: Vec<Box<dyn Source>>, config: &Config) {
        let mut slots = Vec::with_capacity(sources.len());
        for source in sources {
            let old = self.slots.iter().find(|s| s.name == source.name());
            match old {
                Some(old) if old.in_flight() && source.disabled().is_none() => {
                    old.replace_later(source);
                    slots.push(old.clone());
                }
                _ => slots.push(Slot::new(source)),
            }
        }
        // A slot left out whose call is stuck is let go by the reader that
        // holds it once the call returns.
        self.order = call_order(&slots);
        self.slots = slots.into();
        self.deadline = config.sample_interval;
        self.interval = config.sample_interval;
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
                        tracing::info!(
                            sample_interval = ?config.sample_interval,
                            "new configuration applied; sampling now"
                        );
                        interval = config.sample_interval;
                        // Sample at once with the new configuration.
                        next = Instant::now();
                    }
                }
            }
        }
    }
}

/// The sources that need nothing first, then those that read the RDMA
/// part; each group in the order given.
fn call_order(slots: &[Arc<Slot>]) -> Arc<[usize]> {
    let first = (0..slots.len()).filter(|&i| !slots[i].needs_rdma);
    let then = (0..slots.len()).filter(|&i| slots[i].needs_rdma);
    first.chain(then).collect()
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

#[cfg(test)]
mod tests;
