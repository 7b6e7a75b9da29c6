//! The sampler: runs every source once per interval, each on its own worker
//! thread under a deadline, times each one, records its state and errors,
//! assembles the snapshot from the parts the sources return, runs the rules
//! (whose engine keeps what they need of earlier samples), and publishes an
//! immutable snapshot. Scrapes never touch the host.
//!
//! Deadlines: a source's call gets one sample interval. A call still running
//! then is reported failed (timed out) and the sample goes on without it; the
//! source is not called again until that call has returned (its late reading
//! is dropped), so a read stuck in the kernel holds one thread, not one per
//! sample. Sources that read the RDMA source's part start once it returned
//! or missed its deadline, so one sample takes at most two deadlines.

use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::{Config, Expectations, RulesConfig};
use crate::rules;
use crate::snapshot::{monotonic_now, KernelRequests, Snapshot, SourceState, SourceStatus};
use crate::sources::{Input, Part, Sampled, Source};
use roce_host::{ErrorKind, HostError};

/// A message to a running sampler. Dropping the sender stops it.
pub enum Control {
    /// New sources and settings from a reloaded configuration.
    Reload {
        sources: Vec<Box<dyn Source>>,
        config: Box<Config>,
    },
}

/// What a worker is asked to do, in order.
enum Job {
    Sample(Input),
    /// Take this source instead (a reloaded configuration): applied after
    /// the call in flight, if any, has returned.
    Replace(Box<dyn Source>),
}

/// What one call returned, measured on the worker.
struct Done {
    reading: Sampled,
    errors: Vec<HostError>,
    duration: Duration,
    kernel_requests: Option<KernelRequests>,
}

/// How one source fared in this sample, before it is counted.
struct Outcome {
    state: SourceState,
    part: Option<Part>,
    errors: Vec<HostError>,
    duration: Duration,
    kernel_requests: Option<KernelRequests>,
}

impl Outcome {
    fn failed(why: String, duration: Duration) -> Self {
        Outcome {
            state: SourceState::Failed(why),
            part: None,
            errors: Vec::new(),
            duration,
            kernel_requests: None,
        }
    }
}

/// One source on its own thread: the thread owns the source and runs its
/// calls one after the other.
struct Worker {
    name: &'static str,
    needs_rdma: bool,
    /// `None` when the thread could not be started.
    jobs: Option<mpsc::Sender<Job>>,
    done: mpsc::Receiver<Done>,
    /// When the call whose result has not come back yet started.
    in_flight: Option<Instant>,
    /// Why the source is off ([`Source::disabled`]): then it has no thread
    /// and is never called.
    off: Option<String>,
}

impl Worker {
    fn spawn(source: Box<dyn Source>) -> Worker {
        let name = source.name();
        let needs_rdma = source.needs_rdma();
        if let Some(why) = source.disabled() {
            let (_, done) = mpsc::channel::<Done>();
            return Worker {
                name,
                needs_rdma,
                jobs: None,
                done,
                in_flight: None,
                off: Some(why),
            };
        }
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel::<Done>();
        let spawned = std::thread::Builder::new()
            .name(format!("roce-src-{name}"))
            .spawn(move || work(source, job_rx, done_tx));
        let jobs = match spawned {
            Ok(_) => Some(jobs),
            Err(e) => {
                tracing::error!(collector = name, error = %e, "cannot start the collector's thread");
                None
            }
        };
        Worker {
            name,
            needs_rdma,
            jobs,
            done,
            in_flight: None,
            off: None,
        }
    }

    /// Hands the worker a new source, applied once its call in flight (if
    /// any) returns. A source that is off, or one that replaces a source
    /// that was off, gets a new worker (the old thread, if any, ends after
    /// its call in flight).
    fn replace(&mut self, source: Box<dyn Source>) {
        if self.off.is_some() || source.disabled().is_some() {
            *self = Worker::spawn(source);
            return;
        }
        self.needs_rdma = source.needs_rdma();
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(Job::Replace(source));
        }
    }

    /// Collects a result that came back after its deadline: the reading is
    /// dropped (a newer call follows at once), the source is free again.
    fn collect_late(&mut self) {
        while let Ok(done) = self.done.try_recv() {
            self.in_flight = None;
            tracing::info!(
                collector = self.name,
                took = ?done.duration,
                "collector call returned after its deadline; that reading is dropped"
            );
        }
    }

    /// Starts a call, unless the last one has not returned: then the
    /// outcome is already known (still timed out).
    fn start(&mut self, input: &Input, deadline: Duration) -> Result<Instant, Box<Outcome>> {
        if let Some(why) = &self.off {
            return Err(Box::new(Outcome {
                state: SourceState::Disabled(why.clone()),
                part: None,
                errors: Vec::new(),
                duration: Duration::ZERO,
                kernel_requests: None,
            }));
        }
        self.collect_late();
        if let Some(since) = self.in_flight {
            return Err(Box::new(Outcome::failed(
                timeout_reason(deadline),
                since.elapsed(),
            )));
        }
        let Some(jobs) = &self.jobs else {
            return Err(Box::new(Outcome::failed(
                "its thread could not be started".into(),
                Duration::ZERO,
            )));
        };
        let now = Instant::now();
        if jobs.send(Job::Sample(input.clone())).is_err() {
            return Err(Box::new(Outcome::failed(
                "its thread has ended".into(),
                Duration::ZERO,
            )));
        }
        self.in_flight = Some(now);
        Ok(now)
    }

    /// Waits for the call started at `started` until `deadline` after it.
    fn finish(&mut self, started: Instant, deadline: Duration) -> Outcome {
        let until = started.checked_add(deadline);
        let wait = until.map_or(Duration::MAX, |u| {
            u.saturating_duration_since(Instant::now())
        });
        match self.done.recv_timeout(wait) {
            Ok(done) => {
                self.in_flight = None;
                Outcome {
                    state: done.reading.state,
                    part: done.reading.part,
                    errors: done.errors,
                    duration: done.duration,
                    kernel_requests: done.kernel_requests,
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                Outcome::failed(timeout_reason(deadline), started.elapsed())
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.in_flight = None;
                self.jobs = None;
                Outcome::failed("its thread has ended".into(), started.elapsed())
            }
        }
    }
}

/// Kept the same from the first timed-out sample to the last, so that the
/// state is logged once.
fn timeout_reason(deadline: Duration) -> String {
    format!(
        "timed out: the call did not return within its deadline of {deadline:?} (one sample interval); not started again until it returns"
    )
}

/// A worker thread: runs calls until the sampler lets go of it. A panic in
/// the source is caught and reported as a failed call.
fn work(mut source: Box<dyn Source>, jobs: mpsc::Receiver<Job>, done: mpsc::Sender<Done>) {
    for job in jobs {
        let input = match job {
            Job::Replace(s) => {
                source = s;
                continue;
            }
            Job::Sample(input) => input,
        };
        let started = Instant::now();
        let mut errors = Vec::new();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            source.sample(&input, &mut errors)
        }));
        // Let go of the input before answering: the sampler then moves the
        // RDMA part into the snapshot instead of copying it.
        drop(input);
        let reading = outcome.unwrap_or_else(|panic| {
            Sampled::bare(SourceState::Failed(format!(
                "collector panicked: {}",
                panic_message(panic.as_ref())
            )))
        });
        let duration = started.elapsed();
        let kernel_requests =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| source.kernel_requests()))
                .unwrap_or(None);
        let sent = done.send(Done {
            reading,
            errors,
            duration,
            kernel_requests,
        });
        if sent.is_err() {
            return;
        }
    }
}

pub use roce_rules::panic_message;

/// What was last logged of a source: its state and its set of read errors.
#[derive(Debug, Clone, PartialEq)]
struct Logged {
    state: SourceState,
    errors: BTreeSet<String>,
}

/// Runs the sources and the rules.
pub struct Sampler {
    workers: Vec<Worker>,
    /// How long a source's call may take (the sample interval).
    deadline: Duration,
    interval: Duration,
    sequence: u64,
    ticks_missed: u64,
    /// Errors since start by collector, by kind in [`ErrorKind::ALL`]'s
    /// order.
    errors_total: HashMap<&'static str, [u64; ErrorKind::ALL.len()]>,
    /// What was last logged per source, to log a change once instead of
    /// every sample.
    last_logged: HashMap<&'static str, Logged>,
    /// The RDMA part handed to the sources that read it when the RDMA
    /// source returned none this sample (failed, timed out): the last one
    /// it returned. Taken from `previous` when first needed.
    stale_rdma: Option<Arc<roce_rdma::RdmaSnapshot>>,
    previous: Option<Arc<Snapshot>>,
    rules: RulesConfig,
    expect: Expectations,
    engine: rules::Engine,
}

impl Sampler {
    /// Enough history is kept for the longest rule window, in at most
    /// [`rules::history::HISTORY_MAX`] samples. Each source gets its
    /// worker thread here.
    pub fn new(sources: Vec<Box<dyn Source>>, config: &Config) -> Self {
        Sampler {
            workers: sources.into_iter().map(Worker::spawn).collect(),
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

    /// The sources that have a thread of their own, in order: those that
    /// are not off ([`Source::disabled`]).
    pub fn running(&self) -> Vec<&'static str> {
        self.workers
            .iter()
            .filter(|w| w.off.is_none())
            .map(|w| w.name)
            .collect()
    }

    /// How long one call of a source may take before it is reported timed
    /// out: one sample interval.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Takes one sample: the sources that need nothing first, in parallel,
    /// then those that read the RDMA part, in parallel. A source that
    /// panics, fails or misses its deadline is reported as failed; the
    /// others still run.
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
        let mut outcomes: Vec<Option<Outcome>> = self.workers.iter().map(|_| None).collect();
        self.run_phase(false, &Input::default(), &mut outcomes);

        let rdma_now = outcomes
            .iter_mut()
            .flatten()
            .find_map(|o| match o.part.take() {
                Some(Part::Rdma(r)) => Some(Arc::new(r)),
                other => {
                    o.part = other;
                    None
                }
            });
        let rdma_input = match &rdma_now {
            Some(r) => {
                self.stale_rdma = None;
                Some(r.clone())
            }
            None => {
                if self.stale_rdma.is_none() {
                    self.stale_rdma = self
                        .previous
                        .as_ref()
                        .and_then(|p| p.rdma.clone())
                        .map(Arc::new);
                }
                self.stale_rdma.clone()
            }
        };
        let input = Input {
            rdma: rdma_input,
            previous: self.previous.clone(),
        };
        self.run_phase(true, &input, &mut outcomes);
        drop(input);
        // The dependent sources have returned their copies of the Arc,
        // unless one missed its deadline: then the part is copied.
        snapshot.rdma = rdma_now.map(|r| Arc::try_unwrap(r).unwrap_or_else(|r| (*r).clone()));

        for (worker, outcome) in self.workers.iter().zip(outcomes) {
            let Some(outcome) = outcome else { continue };
            let name = worker.name;
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
                None => {}
            }
            let by_kind = self.errors_total.entry(name).or_default();
            for e in &outcome.errors {
                let kind = e.kind();
                if let Some(i) = ErrorKind::ALL.iter().position(|k| *k == kind) {
                    by_kind[i] += 1;
                }
            }
            let logged = Logged {
                state: outcome.state.clone(),
                errors: outcome.errors.iter().map(ToString::to_string).collect(),
            };
            log_change(name, self.last_logged.get(name), &logged);
            self.last_logged.insert(name, logged);
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

    /// Starts the workers whose `needs_rdma` is `dependent` with `input`,
    /// then waits for each until its deadline.
    fn run_phase(&mut self, dependent: bool, input: &Input, outcomes: &mut [Option<Outcome>]) {
        let deadline = self.deadline;
        let mut started = Vec::new();
        for (i, worker) in self.workers.iter_mut().enumerate() {
            if worker.needs_rdma != dependent {
                continue;
            }
            match worker.start(input, deadline) {
                Ok(at) => started.push((i, at)),
                Err(outcome) => outcomes[i] = Some(*outcome),
            }
        }
        for (i, at) in started {
            outcomes[i] = Some(self.workers[i].finish(at, deadline));
        }
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
        let mut old: Vec<Worker> = std::mem::take(&mut self.workers);
        for source in sources {
            let name = source.name();
            match old.iter().position(|w| w.name == name) {
                Some(i) => {
                    let mut worker = old.remove(i);
                    worker.replace(source);
                    self.workers.push(worker);
                }
                None => self.workers.push(Worker::spawn(source)),
            }
        }
        // Workers left in `old` end once their call in flight returns.
        drop(old);
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

/// Logs a source's state when it changes, and its set of read errors when
/// that changes (new errors at warn, naming each file and errno; their end
/// at warn too, so the pair is seen at the level the first was): once per
/// change, not every sample.
fn log_change(name: &str, previous: Option<&Logged>, now: &Logged) {
    const SHOWN: usize = 5;
    let list = |errors: &mut dyn Iterator<Item = &String>| {
        let all: Vec<&String> = errors.collect();
        let mut text = all
            .iter()
            .take(SHOWN)
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        if all.len() > SHOWN {
            text.push_str(&format!("; and {} more", all.len() - SHOWN));
        }
        text
    };
    let state_changed = previous.is_none_or(|p| p.state != now.state);
    if !state_changed {
        let before = previous.map(|p| &p.errors);
        if before == Some(&now.errors) {
            if let Some(first) = now.errors.iter().next() {
                tracing::debug!(collector = name, errors = now.errors.len(), first = %first, "read errors");
            }
            return;
        }
        let before = before.cloned().unwrap_or_default();
        if now.errors.is_empty() {
            tracing::warn!(collector = name, cleared = %list(&mut before.iter()), "collector read errors cleared");
        } else {
            let new = list(&mut now.errors.difference(&before));
            let gone = list(&mut before.difference(&now.errors));
            tracing::warn!(collector = name, errors = now.errors.len(), new = %new, cleared = %gone, "collector read errors changed");
        }
        return;
    }
    match &now.state {
        SourceState::Ok => {
            if now.errors.is_empty() {
                tracing::info!(collector = name, "collector ok");
            } else {
                tracing::warn!(collector = name, errors = now.errors.len(), new = %list(&mut now.errors.iter()), "collector ok with read errors");
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
    use crate::sources::HostError;

    struct Fake {
        name: &'static str,
        script: Vec<Result<usize, &'static str>>,
        step: usize,
    }

    impl Source for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn sample(&mut self, _i: &Input, errors: &mut Vec<HostError>) -> Sampled {
            let step = self.script[self.step.min(self.script.len() - 1)];
            self.step += 1;
            Sampled::bare(match step {
                Ok(n) => {
                    errors.extend((0..n).map(|i| {
                        roce_host::ReadError::io(
                            std::path::Path::new(&format!("file {i}")),
                            &std::io::Error::from_raw_os_error(libc::EIO),
                        )
                        .into()
                    }));
                    SourceState::Ok
                }
                Err("panic") => panic!("boom"),
                Err(msg) => SourceState::Failed(msg.into()),
            })
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
            fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
                use roce_rdma::{Counter, Device, Port, RdmaSnapshot};
                self.0 += 2;
                let port = Port {
                    number: 1,
                    counters: vec![Counter::new("link_downed", self.0)],
                    ..Port::default()
                };
                let rdma = RdmaSnapshot {
                    devices: vec![Device {
                        name: "x".into(),
                        ports: vec![port],
                        ..Device::default()
                    }],
                    errors: vec![],
                };
                Sampled::new(SourceState::Ok, Part::Rdma(rdma))
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
            .increase(rules::history::FollowedCounter::LinkDowned, Duration::MAX)
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
            fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
                std::thread::sleep(INTERVAL * 3);
                Sampled::bare(SourceState::Ok)
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

    /// A source whose calls block until the test lets them go, counting
    /// the calls started.
    struct Gate {
        calls: Arc<std::sync::atomic::AtomicUsize>,
        release: Arc<std::sync::Mutex<mpsc::Receiver<()>>>,
    }

    impl Source for Gate {
        fn name(&self) -> &'static str {
            "gate"
        }
        fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = self.release.lock().unwrap().recv();
            Sampled::bare(SourceState::Ok)
        }
    }

    fn short_interval() -> Config {
        Config::parse("sample_interval: 100ms\n", "test").unwrap()
    }

    #[test]
    fn a_stuck_source_times_out_once_and_is_not_called_on_top_of_itself() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (release, gate) = mpsc::channel();
        let gate = Gate {
            calls: calls.clone(),
            release: Arc::new(std::sync::Mutex::new(gate)),
        };
        let sources: Vec<Box<dyn Source>> = vec![
            Box::new(gate),
            Box::new(Fake {
                name: "c",
                script: vec![Ok(0)],
                step: 0,
            }),
        ];
        let mut sampler = Sampler::new(sources, &short_interval());
        for n in 1..=4u64 {
            let s = sampler.sample();
            assert_eq!(s.sequence, n);
            let gate = s.source("gate").unwrap();
            assert!(
                matches!(&gate.state, SourceState::Failed(m) if m.starts_with("timed out")),
                "{:?}",
                gate.state
            );
            assert!(!gate.state.success());
            assert!(gate.duration >= sampler.deadline(), "{:?}", gate.duration);
            assert_eq!(s.source("c").unwrap().state, SourceState::Ok);
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Once the call returns, the source is called again.
        release.send(()).unwrap();
        release.send(()).unwrap();
        let mut recovered = false;
        for _ in 0..200 {
            if sampler.sample().source("gate").unwrap().state == SourceState::Ok {
                recovered = true;
                break;
            }
        }
        assert!(recovered);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_reload_while_a_call_is_stuck_does_not_start_another() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (release, gate_rx) = mpsc::channel();
        let gate_rx = Arc::new(std::sync::Mutex::new(gate_rx));
        let gate = |calls: &Arc<std::sync::atomic::AtomicUsize>| -> Box<dyn Source> {
            Box::new(Gate {
                calls: calls.clone(),
                release: gate_rx.clone(),
            })
        };
        let config = short_interval();
        let mut sampler = Sampler::new(vec![gate(&calls)], &config);
        sampler.sample();
        sampler.reconfigure(vec![gate(&calls)], &config);
        let s = sampler.sample();
        assert!(!s.source("gate").unwrap().state.success());
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        drop(release);
    }

    #[test]
    fn dependent_sources_get_this_samples_rdma_part_or_the_last_one() {
        use roce_rdma::{Device, RdmaSnapshot};
        struct Rdma(Vec<Option<&'static str>>);
        impl Source for Rdma {
            fn name(&self) -> &'static str {
                "rdma"
            }
            fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
                match self.0.remove(0) {
                    Some(name) => Sampled::new(
                        SourceState::Ok,
                        Part::Rdma(RdmaSnapshot {
                            devices: vec![Device {
                                name: name.into(),
                                ..Device::default()
                            }],
                            errors: vec![],
                        }),
                    ),
                    None => Sampled::bare(SourceState::Failed("no".into())),
                }
            }
        }
        struct Seen(mpsc::Sender<Option<String>>);
        impl Source for Seen {
            fn name(&self) -> &'static str {
                "seen"
            }
            fn needs_rdma(&self) -> bool {
                true
            }
            fn sample(&mut self, i: &Input, _e: &mut Vec<HostError>) -> Sampled {
                let name = i.rdma.as_ref().map(|r| r.devices[0].name.clone());
                let _ = self.0.send(name);
                Sampled::bare(SourceState::Ok)
            }
        }
        let (tx, seen) = mpsc::channel();
        let sources: Vec<Box<dyn Source>> = vec![
            Box::new(Seen(tx)),
            Box::new(Rdma(vec![Some("a"), None, None, Some("b")])),
        ];
        let mut sampler = Sampler::new(sources, &Config::default());
        let mut rdma_parts = Vec::new();
        for _ in 0..4 {
            let s = sampler.sample();
            rdma_parts.push(s.rdma.as_ref().map(|r| r.devices[0].name.clone()));
            // Listed in the order given, whatever the order they ran in.
            assert_eq!(
                s.sources.iter().map(|st| st.name).collect::<Vec<_>>(),
                ["seen", "rdma"]
            );
        }
        let seen: Vec<Option<String>> = seen.try_iter().collect();
        let some = |s: &str| Some(s.to_string());
        assert_eq!(seen, [some("a"), some("a"), some("a"), some("b")]);
        // The snapshot carries only what the RDMA source read this sample.
        assert_eq!(rdma_parts, [some("a"), None, None, some("b")]);
    }
}
