//! The peer-probe runtime: the threads that probe other hosts and keep the
//! fleet's endpoints. The binary's peer-probe source hands it the local
//! ports to probe from and copies its results into the snapshot.
//!
//! The work runs on threads of its own, never in a sample: one thread per
//! local port keeps the UD responder and runs the paced rounds over the
//! peers on its rail ([`crate::peer_rails`]); one coordinator thread
//! starts and stops the port threads and plans the discovery work, which
//! a pool of [`FETCH_WORKERS`] threads carries out: the peer list (DNS,
//! SRV, file) every `refresh`, then the peers' endpoint documents, or one
//! Prometheus query every `refresh` ([`crate::peer_endpoints`]). Each
//! result is admitted and published as soon as its request ends: a slow
//! peer holds one worker for at most its fetch deadline, never the rest,
//! and the snapshot keeps being published and counted meanwhile.
//!
//! Documents are not fetched from every peer every refresh (N² requests
//! over a fleet, forever): a peer's document is fetched once, when this
//! node's walk over the list reaches it (in an order of this node's own,
//! at most [`FETCH_RATE`] new peers a second), kept while probes to it
//! pass, and fetched again only when probes to it fail (a restarted peer
//! has new QPNs), with a growing interval while that brings nothing new.
//! Every listed peer is fetched once rather than only those about to be
//! probed because the responder answers only the peers whose endpoints it
//! holds: a node that learnt its peers only as its probe walk reached them
//! would drop the others' probes for the whole walk (67 minutes over
//! 10,000 peers), and they would see it lost.
//!
//! The sampler hands targets in and copies results out (the ownership of
//! the loopback probe's runner: shared state behind the runner, no
//! globals); dropping the source stops and joins the coordinator and the
//! port threads (a fetch worker ends by itself within its deadline).

pub use roce_model::peer::{DiscoveryMode, PeerDiscovery, RequestKind};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce_probe::peer::{
    spacing, Endpoint, PeerKey, PeerResults, PeerSettings, PeerVerbs, PortProber, ProberId, QKEY,
};
use roce_probe::verbs::OpenError;
use roce_probe::ProbeState;

use crate::peer_endpoints::{instance_host, Admission, Fetch, FleetSeries, Query, Refusal};
use crate::peer_http::{FetchError, FetchReason};
use crate::peer_list::{PeerAddress, PeerList};
use crate::peer_rails::{LocalPort, Net};

/// Failures of probes to a peer ask for its endpoints again, at the
/// soonest this long after the last fetch; each fetch that brings the same
/// document doubles it, up to [`MAX_REFETCH_INTERVAL`]. A failed fetch is
/// tried again after this long too, doubling up to [`MAX_RETRY_INTERVAL`].
pub const REFETCH_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// The longest interval between fetches of a live peer whose probes keep
/// failing while its document stays the same (a black-holed port: every
/// prober asks its exporter once per this long, not more).
pub const MAX_REFETCH_INTERVAL: Duration = Duration::from_secs(300);
/// The longest interval between tries of a peer whose fetches fail (its
/// exporter down: a refused connection costs the prober alone), so that a
/// restarted exporter is found within this long.
pub const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(60);
/// Requests (documents, the list, the query) in flight at once: the
/// threads of the fetch pool. A peer that answers one byte a second holds
/// one of them for its fetch deadline, not the others.
pub const FETCH_WORKERS: usize = 16;
/// Documents fetched at once when peers are first known (the first
/// rounds of every port find peers to probe at once).
pub const FETCH_BURST: f64 = 16.0;
/// New peers' documents fetched a second at most after the burst: a node
/// knows 1,000 peers 20 s after its start (10,000 in 200 s), and when a
/// whole fleet starts at once each exporter serves about this many
/// document requests a second.
pub const FETCH_RATE: f64 = 50.0;
/// A port that cannot be opened is tried again after this long.
const REOPEN_AFTER: Duration = Duration::from_secs(10);
/// Granularity of the threads' stop checks while idle.
const TICK: Duration = Duration::from_millis(200);

/// A local port to probe from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LocalTarget {
    pub device: String,
    pub port: u8,
    pub gid_index: u32,
    pub traffic_class: u8,
    /// Position of the device in the sorted device list.
    pub device_index: u32,
    /// The netdev behind the port (rails by netdev name).
    pub netdev: Option<String>,
}

/// The subnet of a GID's IPv4 address on this host (the rail key).
pub type SubnetOf = fn(&std::net::Ipv6Addr) -> Option<Net>;

/// Where the fleet's endpoints come from.
pub enum EndpointSource {
    /// The peer list, and each peer's own document.
    Documents {
        list: Box<PeerList>,
        fetcher: Arc<dyn Fetch>,
    },
    /// One query of the fleet's Prometheus per refresh.
    Prometheus(Arc<dyn Query>),
}

/// What one port thread publishes.
#[derive(Debug, Clone, Default)]
struct PortState {
    endpoint: Option<Endpoint>,
    stats: roce_probe::peer::PortStats,
    /// The rail this port computed (`None`: none could be).
    rail: Option<String>,
    /// Why the port is not probing (open failed), for the log.
    failure: Option<String>,
    unavailable: Option<String>,
}

#[derive(Default)]
struct Shared {
    targets: Mutex<Vec<LocalTarget>>,
    /// Every admitted peer endpoint.
    peers: Mutex<Arc<Vec<Endpoint>>>,
    ports: Mutex<BTreeMap<(String, u8), PortState>>,
    discovery: Mutex<PeerDiscovery>,
    /// Peer ports whose latest small probe was lost: their endpoints are
    /// fetched again (a restarted peer has new QPNs).
    failing: Mutex<BTreeSet<PeerKey>>,
    stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running peer prober; dropping it stops and joins its threads.
pub struct PeerRunner {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What the runner needs besides the verbs and the endpoint source.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    pub node: String,
    pub probe: PeerSettings,
    pub refresh: Duration,
    pub subnet_of: SubnetOf,
    pub admission: Admission,
}

impl PeerRunner {
    pub fn spawn<V>(
        verbs: V,
        source: EndpointSource,
        settings: RunnerSettings,
    ) -> std::io::Result<PeerRunner>
    where
        V: PeerVerbs + Clone + 'static,
    {
        let shared = Arc::new(Shared::default());
        lock(&shared.discovery).mode = match &source {
            EndpointSource::Documents { .. } => DiscoveryMode::Documents,
            EndpointSource::Prometheus(_) => DiscoveryMode::Prometheus,
        };
        let inner = shared.clone();
        let thread = std::thread::Builder::new()
            .name("roce-peer-probe".into())
            .spawn(move || coordinate(verbs, source, settings, &inner))?;
        Ok(PeerRunner {
            shared,
            thread: Some(thread),
        })
    }

    pub fn set_targets(&self, targets: Vec<LocalTarget>) {
        let mut t = lock(&self.shared.targets);
        if *t != targets {
            *t = targets;
        }
    }

    /// The peer-list errors of the latest refresh.
    pub fn list_errors(&self) -> Vec<String> {
        lock(&self.shared.discovery).list_errors.clone()
    }

    /// The latest results: every port's endpoint and statistics, and the
    /// discovery's counts.
    pub fn results(&self) -> (PeerResults, PeerDiscovery) {
        let ports = lock(&self.shared.ports);
        let mut out = PeerResults::default();
        let mut unavailable = None;
        let mut rails = Vec::new();
        for ((device, port), state) in ports.iter() {
            if let Some(e) = &state.endpoint {
                out.endpoints.push(e.clone());
                out.ports.push((e.clone(), state.stats.clone()));
                rails.push((device.clone(), *port, state.rail.clone()));
            }
            if let Some(u) = &state.unavailable {
                unavailable = Some(u.clone());
            }
        }
        drop(ports);
        out.state = match unavailable {
            Some(u) if out.endpoints.is_empty() => ProbeState::Unavailable(u),
            _ if out.endpoints.is_empty() => ProbeState::Starting,
            _ => ProbeState::Running,
        };
        let mut d = lock(&self.shared.discovery).clone();
        d.rails = rails;
        (out, d)
    }

    /// Why ports are not probing, by port (for the log).
    pub fn failures(&self) -> Vec<(String, String)> {
        lock(&self.shared.ports)
            .iter()
            .filter_map(|((d, p), s)| s.failure.clone().map(|f| (format!("{d}/{p}"), f)))
            .collect()
    }
}

impl Drop for PeerRunner {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sleeps `d` in ticks; false when asked to stop meanwhile.
fn nap(stop: &AtomicBool, d: Duration) -> bool {
    let until = Instant::now() + d;
    while !stop.load(Ordering::SeqCst) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(TICK));
    }
    false
}

struct PortThread {
    target: LocalTarget,
    /// The traffic class the thread's probes carry: a change applies at
    /// the next probe, without reopening the port (each address handle
    /// carries its class; the queue pair has none).
    class: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl LocalTarget {
    /// The same port, GID and rail inputs: a change of traffic class alone
    /// does not reopen the port.
    fn same_port(&self, other: &LocalTarget) -> bool {
        LocalTarget {
            traffic_class: other.traffic_class,
            ..self.clone()
        } == *other
    }
}

/// Work for the fetch pool.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Job {
    List,
    Document(PeerAddress),
    Query,
}

/// A finished job.
enum Done {
    List(Vec<PeerAddress>, Vec<String>),
    Document(PeerAddress, Result<Vec<Endpoint>, FetchError>),
    Query(Result<Vec<FleetSeries>, FetchError>),
}

/// What the pool's workers run jobs with.
struct Work {
    list: Mutex<Option<PeerList>>,
    fetcher: Option<Arc<dyn Fetch>>,
    query: Option<Arc<dyn Query>>,
}

impl Work {
    fn run(&self, job: Job) -> Done {
        let failed = |what: &str| FetchError {
            reason: FetchReason::Unsupported,
            message: format!("no {what} configured"),
        };
        match job {
            Job::List => {
                let mut list = lock(&self.list);
                match list.as_mut() {
                    Some(l) => {
                        let peers = l.current();
                        Done::List(peers, l.errors.clone())
                    }
                    None => Done::List(Vec::new(), Vec::new()),
                }
            }
            Job::Document(peer) => {
                let r = match &self.fetcher {
                    Some(f) => f.fetch(&peer),
                    None => Err(failed("fetcher")),
                };
                Done::Document(peer, r)
            }
            Job::Query => Done::Query(match &self.query {
                Some(q) => q.query(),
                None => Err(failed("query")),
            }),
        }
    }
}

/// The fetch workers: jobs in, results out, each as soon as it ends. A
/// worker that panics answers its job with an error (the coordinator's
/// count of jobs in flight stays true).
struct Pool {
    jobs: Option<mpsc::Sender<Job>>,
    done: mpsc::Receiver<Done>,
}

impl Pool {
    fn start(work: Arc<Work>, workers: usize) -> Pool {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel::<Done>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        for _ in 0..workers.max(1) {
            let (rx, tx, work) = (job_rx.clone(), done_tx.clone(), work.clone());
            let spawned = std::thread::Builder::new()
                .name("roce-peer-fetch".into())
                .spawn(move || loop {
                    let job = match lock(&rx).recv() {
                        Ok(j) => j,
                        Err(_) => return,
                    };
                    let again = job.clone();
                    let done =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.run(job)))
                            .unwrap_or_else(|_| {
                                let e = FetchError {
                                    reason: FetchReason::Parse,
                                    message: "the fetch panicked".into(),
                                };
                                match again {
                                    Job::List => Done::List(
                                        Vec::new(),
                                        vec!["the peer list panicked".into()],
                                    ),
                                    Job::Document(p) => Done::Document(p, Err(e)),
                                    Job::Query => Done::Query(Err(e)),
                                }
                            });
                    if tx.send(done).is_err() {
                        return;
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start a peer fetch thread");
            }
        }
        Pool {
            jobs: Some(jobs),
            done,
        }
    }

    fn submit(&self, job: Job) -> bool {
        self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Workers end once their current job (bounded by its deadline) is done.
        self.jobs.take();
    }
}

/// One peer address as the coordinator knows it.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// Its admitted endpoints (kept when a later fetch fails: a stopped
    /// peer shows as unreachable, not gone).
    endpoints: Vec<Endpoint>,
    /// The node its endpoints name.
    node: Option<String>,
    /// Whether a fetch was started at all.
    tried: bool,
    in_flight: bool,
    /// Consecutive fetches that failed or found no endpoint.
    failures: u32,
    /// When to try again after such a fetch.
    retry_at: Option<Instant>,
    /// Fetches for failing probes since the endpoints last changed.
    refetches: u32,
    /// The soonest next fetch for failing probes.
    refetch_at: Option<Instant>,
    /// Last error text, logged on change.
    last_error: Option<String>,
}

/// The coordinator's plan: which requests to start and when (no clock
/// and no I/O of its own: `now` is handed in, so tests drive it).
struct Catalog {
    mode: DiscoveryMode,
    refresh: Duration,
    entries: BTreeMap<PeerAddress, Entry>,
    /// This node's walk: the listed peers in an order of its own.
    order: Vec<PeerAddress>,
    /// Where this node's walk starts (random per start: the fleet does
    /// not fetch, nor probe, the same peers first).
    offset: u64,
    /// New documents fetched at most at this pace (tokens per second), up
    /// to [`FETCH_BURST`] at once.
    rate: f64,
    tokens: f64,
    tokens_at: Option<Instant>,
    list_due: Option<Instant>,
    query_due: Option<Instant>,
    query_failures: u32,
    /// List or query in flight.
    pass_in_flight: bool,
    in_flight: usize,
    /// Prometheus mode: the admitted fleet.
    fleet: Vec<Endpoint>,
    fleet_peers: (usize, usize),
}

/// The interval after `n` unfruitful tries: 5 s, 10 s, 20 s, … up to `max`.
fn backoff(n: u32, max: Duration) -> Duration {
    let f = 1u32 << n.saturating_sub(1).min(12);
    (REFETCH_AFTER_FAILURE * f).min(max.max(REFETCH_AFTER_FAILURE))
}

impl Catalog {
    fn new(mode: DiscoveryMode, refresh: Duration, rate: f64, offset: u64) -> Catalog {
        Catalog {
            mode,
            refresh: refresh.max(Duration::from_secs(1)),
            entries: BTreeMap::new(),
            order: Vec::new(),
            offset,
            rate: rate.max(0.1),
            tokens: FETCH_BURST,
            tokens_at: None,
            list_due: None,
            query_due: None,
            query_failures: 0,
            pass_in_flight: false,
            in_flight: 0,
            fleet: Vec::new(),
            fleet_peers: (0, 0),
        }
    }

    /// A new peer list: entries of peers no longer listed are dropped.
    fn set_list(&mut self, peers: Vec<PeerAddress>) {
        let listed: BTreeSet<&PeerAddress> = peers.iter().collect();
        self.entries
            .retain(|a, e| listed.contains(a) || e.in_flight);
        for p in &peers {
            self.entries.entry(p.clone()).or_default();
        }
        let n = peers.len().max(1);
        let start = (self.offset % n as u64) as usize;
        self.order = peers
            .iter()
            .cycle()
            .skip(start)
            .take(peers.len())
            .cloned()
            .collect();
    }

    /// The requests to start now, at most `free`, given the peer ports
    /// whose probes fail.
    fn plan(&mut self, now: Instant, free: usize, failing: &BTreeSet<PeerKey>) -> Vec<Job> {
        let mut jobs = Vec::new();
        if free == 0 {
            return jobs;
        }
        match self.mode {
            DiscoveryMode::Prometheus => {
                if !self.pass_in_flight && self.query_due.is_none_or(|t| now >= t) {
                    self.pass_in_flight = true;
                    jobs.push(Job::Query);
                }
                self.in_flight += jobs.len();
                return jobs;
            }
            DiscoveryMode::Documents => {}
        }
        if !self.pass_in_flight && self.list_due.is_none_or(|t| now >= t) {
            self.pass_in_flight = true;
            jobs.push(Job::List);
        }
        if let Some(at) = self.tokens_at {
            let add = now.saturating_duration_since(at).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + add).min(FETCH_BURST);
        }
        self.tokens_at = Some(now);
        // Peers whose probes fail, then peers to try again, then new ones
        // in this node's order, at most FETCH_RATE a second.
        let mut pick: Vec<PeerAddress> = Vec::new();
        for (addr, e) in &self.entries {
            let fails = e.endpoints.iter().any(|ep| failing.contains(&ep.key()));
            if fails && !e.in_flight && e.refetch_at.is_none_or(|t| now >= t) {
                pick.push(addr.clone());
            }
        }
        for (addr, e) in &self.entries {
            if e.tried
                && !e.in_flight
                && e.retry_at.is_some_and(|t| now >= t)
                && !pick.contains(addr)
            {
                pick.push(addr.clone());
            }
        }
        for addr in &self.order {
            if self.tokens < 1.0 {
                break;
            }
            if self.entries.get(addr).is_some_and(|e| !e.tried) && !pick.contains(addr) {
                self.tokens -= 1.0;
                pick.push(addr.clone());
            }
        }
        for addr in pick {
            if jobs.len() >= free {
                break;
            }
            let Some(e) = self.entries.get_mut(&addr) else {
                continue;
            };
            e.tried = true;
            e.in_flight = true;
            e.retry_at = None;
            jobs.push(Job::Document(addr));
        }
        self.in_flight += jobs.len();
        jobs
    }

    /// Whether a node is claimed by a listed address other than `addr`.
    fn claimed_by_other(&self, node: &str, addr: &PeerAddress) -> bool {
        self.entries
            .iter()
            .any(|(a, e)| a != addr && e.node.as_deref() == Some(node) && !e.endpoints.is_empty())
    }

    /// Every admitted endpoint now.
    fn endpoints(&self) -> Vec<Endpoint> {
        match self.mode {
            DiscoveryMode::Prometheus => self.fleet.clone(),
            DiscoveryMode::Documents => self
                .entries
                .values()
                .flat_map(|e| e.endpoints.iter().cloned())
                .collect(),
        }
    }

    /// (listed, known) peers.
    fn peer_counts(&self) -> (usize, usize) {
        match self.mode {
            DiscoveryMode::Prometheus => self.fleet_peers,
            DiscoveryMode::Documents => (
                self.entries.len(),
                self.entries
                    .values()
                    .filter(|e| !e.endpoints.is_empty())
                    .count(),
            ),
        }
    }

    /// Takes a finished job in; true when the admitted endpoints changed.
    fn apply(
        &mut self,
        done: Done,
        now: Instant,
        admission: &Admission,
        d: &mut PeerDiscovery,
    ) -> bool {
        self.in_flight = self.in_flight.saturating_sub(1);
        match done {
            Done::List(peers, errors) => {
                self.pass_in_flight = false;
                self.list_due = Some(now + self.refresh);
                d.passes += 1;
                d.list_errors = errors;
                let before = self.endpoints().len();
                self.set_list(peers);
                before != self.endpoints().len()
            }
            Done::Document(addr, result) => {
                let refresh = self.refresh;
                let claimed = match &result {
                    Ok(eps) => eps
                        .first()
                        .is_some_and(|e| self.claimed_by_other(&e.node, &addr)),
                    Err(_) => false,
                };
                let Some(entry) = self.entries.get_mut(&addr) else {
                    return false;
                };
                entry.in_flight = false;
                match result {
                    Ok(eps) if eps.is_empty() => {
                        // Its responders still opening: asked again soon;
                        // what it had is kept.
                        entry.failures += 1;
                        let next = now + backoff(entry.failures, MAX_RETRY_INTERVAL);
                        entry.retry_at = Some(next);
                        entry.refetch_at = Some(next);
                        false
                    }
                    Ok(eps) => {
                        let admitted = admission.admit(addr.host(), eps, &|_| claimed);
                        for (r, n) in &admitted.refused {
                            *d.refused.entry(*r).or_insert(0) += n;
                        }
                        if entry.last_error.take().is_some() {
                            tracing::info!(peer = %addr.0, "peer endpoints fetched again");
                        }
                        if !admitted.refused.is_empty() {
                            tracing::warn!(peer = %addr.0, refused = ?admitted.refused.iter().map(|(r, n)| (r.as_str(), *n)).collect::<Vec<_>>(), "peer endpoints refused");
                        }
                        entry.failures = 0;
                        // A document with nothing admissible is asked for
                        // again at the refresh, not sooner.
                        entry.retry_at = admitted.endpoints.is_empty().then(|| now + refresh);
                        let changed = admitted.endpoints != entry.endpoints;
                        if changed {
                            // New QPNs or a new incarnation: probes resume,
                            // and failures ask again soon.
                            entry.refetches = 0;
                            entry.refetch_at = None;
                        } else {
                            // The same document while probes fail (a
                            // black-holed path, not a restart): asked
                            // again less and less often.
                            entry.refetches += 1;
                            entry.refetch_at =
                                Some(now + backoff(entry.refetches, MAX_REFETCH_INTERVAL));
                        }
                        entry.endpoints = admitted.endpoints;
                        entry.node = admitted.node;
                        changed
                    }
                    Err(e) => {
                        *d.fetch_errors.entry(e.reason).or_insert(0) += 1;
                        if entry.last_error.as_ref() != Some(&e.message) {
                            tracing::warn!(peer = %addr.0, reason = e.reason.as_str(), "cannot fetch peer endpoints: {}", e.message);
                            entry.last_error = Some(e.message);
                        }
                        entry.failures += 1;
                        let next = now + backoff(entry.failures, MAX_RETRY_INTERVAL);
                        entry.retry_at = Some(next);
                        entry.refetch_at = Some(next);
                        false
                    }
                }
            }
            Done::Query(result) => {
                self.pass_in_flight = false;
                d.passes += 1;
                match result {
                    Ok(series) => {
                        self.query_failures = 0;
                        self.query_due = Some(now + self.refresh);
                        let (fleet, peers) = admit_fleet(series, admission, &mut d.refused);
                        let changed = fleet != self.fleet;
                        self.fleet = fleet;
                        self.fleet_peers = peers;
                        changed
                    }
                    Err(e) => {
                        *d.fetch_errors.entry(e.reason).or_insert(0) += 1;
                        tracing::warn!(
                            reason = e.reason.as_str(),
                            "cannot query the fleet's peer endpoints: {}",
                            e.message
                        );
                        self.query_failures += 1;
                        self.query_due = Some(now + backoff(self.query_failures, self.refresh));
                        false
                    }
                }
            }
        }
    }
}

/// Admits the endpoints of a Prometheus answer, grouped by the instance
/// each was scraped from (the peer), exactly as documents are; a node
/// claimed by two instances keeps the first (in sorted order). Returns
/// the endpoints and (instances listed, instances with endpoints).
fn admit_fleet(
    series: Vec<FleetSeries>,
    admission: &Admission,
    refused: &mut BTreeMap<Refusal, u64>,
) -> (Vec<Endpoint>, (usize, usize)) {
    let mut by_instance: BTreeMap<String, Vec<Endpoint>> = BTreeMap::new();
    for s in series {
        match s.endpoint {
            Ok(e) => by_instance.entry(s.instance).or_default().push(e),
            Err(r) => {
                *refused.entry(r).or_insert(0) += 1;
                by_instance.entry(s.instance).or_default();
            }
        }
    }
    let mut owners: BTreeMap<String, String> = BTreeMap::new();
    let mut fleet = Vec::new();
    let mut known = 0;
    let listed = by_instance.len();
    for (instance, eps) in by_instance {
        let claimed = eps
            .first()
            .is_some_and(|e| owners.get(&e.node).is_some_and(|o| *o != instance));
        let admitted = admission.admit(instance_host(&instance), eps, &|_| claimed);
        for (r, n) in admitted.refused {
            *refused.entry(r).or_insert(0) += n;
        }
        if let Some(node) = admitted.node.filter(|_| !admitted.endpoints.is_empty()) {
            owners.entry(node).or_insert(instance);
            known += 1;
            fleet.extend(admitted.endpoints);
        }
    }
    (fleet, (listed, known))
}

fn coordinate<V>(verbs: V, source: EndpointSource, settings: RunnerSettings, shared: &Arc<Shared>)
where
    V: PeerVerbs + Clone + 'static,
{
    let mut seed = seed();
    // This exporter's incarnation: in its endpoints and its probes, so
    // that peers tell a restart from a path that lost packets.
    seed = xorshift(seed);
    let incarnation = seed;
    let (work, mode) = match source {
        EndpointSource::Documents { list, fetcher } => (
            Work {
                list: Mutex::new(Some(*list)),
                fetcher: Some(fetcher),
                query: None,
            },
            DiscoveryMode::Documents,
        ),
        EndpointSource::Prometheus(q) => (
            Work {
                list: Mutex::new(None),
                fetcher: None,
                query: Some(q),
            },
            DiscoveryMode::Prometheus,
        ),
    };
    let dns_queries = lock(&work.list).as_ref().map_or(0, PeerList::dns_queries) as u64;
    let pool = Pool::start(Arc::new(work), FETCH_WORKERS);
    seed = xorshift(seed);
    let mut catalog = Catalog::new(mode, settings.refresh, FETCH_RATE, seed);
    let mut threads: Vec<PortThread> = Vec::new();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let targets = lock(&shared.targets).clone();
        // Stop the threads of removed or changed ports; a new traffic
        // class alone is handed to the running thread.
        let (keep, gone): (Vec<PortThread>, Vec<PortThread>) = threads
            .into_iter()
            .partition(|t| targets.iter().any(|n| n.same_port(&t.target)));
        threads = keep;
        for t in &mut threads {
            if let Some(n) = targets.iter().find(|n| n.same_port(&t.target)) {
                t.class.store(n.traffic_class, Ordering::SeqCst);
                t.target = n.clone();
            }
        }
        for t in gone {
            t.stop.store(true, Ordering::SeqCst);
            let _ = t.handle.join();
            let key = (t.target.device.clone(), t.target.port);
            if !threads
                .iter()
                .any(|o| (o.target.device.clone(), o.target.port) == key)
            {
                lock(&shared.ports).remove(&key);
            }
        }
        for target in &targets {
            if threads.iter().any(|t| &t.target == target) {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let class = Arc::new(AtomicU8::new(target.traffic_class));
            let (s, sh, v, st, t, c) = (
                stop.clone(),
                shared.clone(),
                verbs.clone(),
                settings.clone(),
                target.clone(),
                class.clone(),
            );
            seed = xorshift(seed);
            let id = ProberId {
                nonce: (seed >> 16) as u32,
                incarnation,
            };
            let spawned = std::thread::Builder::new()
                .name(format!("roce-peer-{}", target.device))
                .spawn(move || run_port(v, t, st, id, &c, &sh, &s));
            match spawned {
                Ok(handle) => threads.push(PortThread {
                    target: target.clone(),
                    class,
                    stop,
                    handle,
                }),
                Err(e) => tracing::warn!(error = %e, "cannot start a peer-probe port thread"),
            }
        }
        // Results that ended since the last tick, each published at once;
        // the next requests planned and counted under the same lock, so a
        // reader never sees a finished pass without what it started.
        let now = Instant::now();
        let jobs = {
            let mut d = lock(&shared.discovery);
            let mut changed = false;
            while let Ok(done) = pool.done.try_recv() {
                changed |= catalog.apply(done, now, &settings.admission, &mut d);
            }
            if changed {
                *lock(&shared.peers) = Arc::new(catalog.endpoints());
            }
            let failing = std::mem::take(&mut *lock(&shared.failing));
            let jobs = catalog.plan(
                now,
                FETCH_WORKERS.saturating_sub(catalog.in_flight),
                &failing,
            );
            for job in &jobs {
                let (kind, n) = match job {
                    Job::List => (RequestKind::Dns, dns_queries),
                    Job::Document(_) => (RequestKind::Document, 1),
                    Job::Query => (RequestKind::Prometheus, 1),
                };
                if n > 0 {
                    *d.requests.entry(kind).or_insert(0) += n;
                }
            }
            let (listed, known) = catalog.peer_counts();
            d.peers_configured = listed;
            d.peers_known = known;
            d.endpoints = lock(&shared.peers).len();
            d.in_flight = catalog.in_flight;
            jobs
        };
        for job in jobs {
            if !pool.submit(job) {
                catalog.in_flight = catalog.in_flight.saturating_sub(1);
            }
        }
        if !nap(&shared.stop, TICK) {
            break;
        }
    }
    for t in &threads {
        t.stop.store(true, Ordering::SeqCst);
    }
    for t in threads {
        let _ = t.handle.join();
    }
}

fn run_port<V: PeerVerbs>(
    mut verbs: V,
    target: LocalTarget,
    settings: RunnerSettings,
    id: ProberId,
    class: &AtomicU8,
    shared: &Shared,
    stop: &AtomicBool,
) {
    let key = (target.device.clone(), target.port);
    let publish = |f: &dyn Fn(&mut PortState)| {
        let mut ports = lock(&shared.ports);
        f(ports.entry(key.clone()).or_default());
    };
    let halt = || stop.load(Ordering::SeqCst) || shared.stop.load(Ordering::SeqCst);
    let mut seed = u64::from(id.nonce) | 1;
    while !halt() {
        let port = match verbs.open_port(&target.device, target.port, target.gid_index) {
            Ok(p) => p,
            Err(e) => {
                let (failure, unavailable) = match e {
                    OpenError::Unavailable(why) => (None, Some(why)),
                    OpenError::Failed(f) => {
                        (Some(format!("{}: {}", f.reason.as_str(), f.message)), None)
                    }
                };
                publish(&|s| {
                    s.endpoint = None;
                    s.failure = failure.clone();
                    s.unavailable = unavailable.clone();
                });
                if !nap(stop, REOPEN_AFTER) {
                    return;
                }
                continue;
            }
        };
        let (gid, qpn, mtu) = roce_probe::peer::PeerPort::local(&port);
        let subnet = (settings.subnet_of)(&gid);
        let rails = &settings.admission.rails;
        let rail = rails.local(&LocalPort {
            device: &target.device,
            device_index: target.device_index,
            netdev: target.netdev.as_deref(),
            gid,
            subnet,
        });
        let endpoint = Endpoint {
            node: settings.node.clone(),
            device: target.device.clone(),
            device_index: target.device_index,
            port: target.port,
            gid,
            gid_index: target.gid_index,
            qpn,
            qkey: QKEY,
            mtu,
            subnet: subnet.map(|n| n.to_string()),
            rail: rail.as_ref().map(super::peer_rails::Rail::name),
            incarnation: id.incarnation,
        };
        let all_to_all = settings.probe.all_to_all;
        let probe_settings = PeerSettings {
            traffic_class: target.traffic_class,
            // The peers handed to the prober are already this port's (by
            // the rail rule above): it does not choose again.
            all_to_all: true,
            ..settings.probe.clone()
        };
        let mut prober = PortProber::new(endpoint.clone(), port, probe_settings, id);
        let rail_name = endpoint.rail.clone();
        publish(&|s| {
            s.endpoint = Some(endpoint.clone());
            s.rail = rail_name.clone();
            s.failure = None;
            s.unavailable = None;
        });
        let pps = prober.settings.packets_per_second;
        let mut seen: Option<Arc<Vec<Endpoint>>> = None;
        let mut mine: Vec<Endpoint> = Vec::new();
        // The responder (GID, QPN, incarnation) each peer port had: another
        // one is a restarted peer, whose history starts afresh (the probes
        // lost to its old QPN are no loss on the path).
        let mut responders: BTreeMap<PeerKey, (std::net::Ipv6Addr, u32, u64)> = BTreeMap::new();
        while !halt() {
            let peers = lock(&shared.peers).clone();
            if !seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &peers)) {
                mine = peers
                    .iter()
                    .filter(|p| all_to_all || rail.as_ref().is_some_and(|r| rails.on_rail(r, p)))
                    .cloned()
                    .collect();
                seen = Some(peers);
                let mut now = BTreeMap::new();
                for p in &mine {
                    let key = p.key();
                    if responders
                        .get(&key)
                        .is_some_and(|r| *r != (p.gid, p.qpn, p.incarnation))
                    {
                        prober.stats.peers.remove(&key);
                    }
                    now.insert(key, (p.gid, p.qpn, p.incarnation));
                }
                responders = now;
            }
            prober.settings.traffic_class = class.load(Ordering::SeqCst);
            let known = prober.matching(&mine).len();
            if known != prober.stats.peers_known {
                // Published before the round (which takes seconds): the
                // rules read whether this port has peers at all.
                prober.stats.peers_known = known;
                let stats = prober.stats.clone();
                publish(&|s| s.stats = stats.clone());
            }
            if known == 0 {
                prober.serve(&mine);
                prober.idle(TICK);
            } else {
                let mut mark = Instant::now();
                prober.round_with(&mine, &mut || {
                    if halt() {
                        return None;
                    }
                    seed = xorshift(seed);
                    let d = gap_after(
                        spacing(pps, (seed % 10_000) as f64 / 10_000.0),
                        mark.elapsed(),
                    );
                    mark = Instant::now() + d;
                    Some(d)
                });
                // Only the small probe: a lost large one with the small
                // answered is a path MTU, which a new document cannot fix.
                // A responder whose answers carry another incarnation than
                // its document is a restarted peer whose new QP took the
                // old QPN: its document is stale too.
                let stale = |k: &PeerKey, seen: Option<u64>| {
                    mine.iter().any(|e| {
                        e.key() == *k
                            && e.incarnation != 0
                            && seen.is_some_and(|i| i != e.incarnation)
                    })
                };
                let failing: Vec<PeerKey> = prober
                    .stats
                    .peers
                    .iter()
                    .filter(|(k, p)| {
                        p.rounds_since_sampled == 0
                            && (p.last_small_ok == Some(false) || stale(k, p.answered_by))
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                if !failing.is_empty() {
                    lock(&shared.failing).extend(failing);
                }
            }
            let stats = prober.stats.clone();
            publish(&|s| s.stats = stats.clone());
        }
        return;
    }
}

/// The wait after a probe: what is left of its `spacing` once the probe
/// itself took `spent` (its RTT, or the whole timeout when lost). Probes
/// are sent one at a time, so this keeps the configured rate while the
/// answers come faster than the spacing; a lost probe still takes its
/// timeout (see docs/peer-probes.md, "Achieved rate").
pub fn gap_after(spacing: Duration, spent: Duration) -> Duration {
    spacing.saturating_sub(spent)
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// The subnet of a RoCE v2 GID's IPv4 address, from this host's interfaces.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{PeerProbeConfig, RailConfig};
    use crate::peer_endpoints::Refusal;
    use crate::peer_rails::Rails;
    use roce_model::snapshot::Snapshot;
    use roce_probe::peer::{Outcome, PeerPort, Probe, Responder, Served};
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::atomic::AtomicU32;

    /// A fabric that records where every probe was aimed. node-b's
    /// responder answers on `live_qpn` only (a restarted peer's old QPN is
    /// gone); with `answer_all` every probe is answered.
    #[derive(Clone, Default)]
    struct Fabric {
        live_qpn: Arc<AtomicU32>,
        answer_all: Arc<AtomicBool>,
        /// Every n-th small probe is lost on the path (0: none).
        lose_every: Arc<AtomicU32>,
        pings: Arc<AtomicU32>,
        /// Fetches still to answer with an empty document (the peer's
        /// responder not open yet).
        empty_docs: Arc<AtomicU32>,
        aimed: Arc<Mutex<BTreeSet<(Ipv6Addr, u32)>>>,
        /// The traffic class of every probe, in order.
        classes: Arc<Mutex<Vec<u8>>>,
        /// Ports opened.
        opens: Arc<AtomicU32>,
    }

    struct FabricPort(Fabric);

    impl PeerPort for FabricPort {
        fn local(&self) -> (Ipv6Addr, u32, u32) {
            (Ipv4Addr::new(10, 0, 2, 15).to_ipv6_mapped(), 7, 1024)
        }
        fn ping(
            &mut self,
            to: &Endpoint,
            probe: &Probe,
            _timeout: Duration,
            _responder: &mut Responder,
            _served: &mut Served,
        ) -> Outcome {
            lock(&self.0.aimed).insert((to.gid, to.qpn));
            lock(&self.0.classes).push(probe.traffic_class);
            let every = self.0.lose_every.load(Ordering::SeqCst);
            if every > 0 && probe.size == roce_probe::peer::SMALL_PAYLOAD {
                let n = self.0.pings.fetch_add(1, Ordering::SeqCst) + 1;
                if n.is_multiple_of(every) {
                    return Outcome::Lost;
                }
            }
            if self.0.answer_all.load(Ordering::SeqCst)
                || to.qpn == self.0.live_qpn.load(Ordering::SeqCst)
            {
                Outcome::Answered {
                    rtt: Duration::from_micros(30),
                    incarnation: to.incarnation,
                }
            } else {
                Outcome::Lost
            }
        }
        fn serve(&mut self, _: &mut Responder, _: &mut Served) {}
    }

    impl PeerVerbs for Fabric {
        type Port = FabricPort;
        fn open_port(&mut self, _: &str, _: u8, _: u32) -> Result<FabricPort, OpenError> {
            self.opens.fetch_add(1, Ordering::SeqCst);
            Ok(FabricPort(self.clone()))
        }
    }

    fn ep(node: &str, gid: Ipv6Addr, qpn: u32) -> Endpoint {
        Endpoint {
            node: node.into(),
            device: "rxe0".into(),
            device_index: 0,
            port: 1,
            gid,
            gid_index: 1,
            qpn,
            qkey: QKEY,
            mtu: 1024,
            subnet: None,
            rail: None,
            incarnation: 0,
        }
    }

    fn b_gid() -> Ipv6Addr {
        Ipv4Addr::new(10, 0, 2, 16).to_ipv6_mapped()
    }

    /// node-b's exporter: publishes the responder QPN it has now; not
    /// started yet for its first `.1` fetches.
    struct PeerExporter(Fabric, AtomicU32);

    impl Fetch for PeerExporter {
        fn fetch(&self, _peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
            if self
                .1
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(FetchError {
                    reason: FetchReason::Connect,
                    message: "connection refused".into(),
                });
            }
            if self
                .0
                .empty_docs
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Ok(Vec::new());
            }
            Ok(vec![ep(
                "node-b",
                b_gid(),
                self.0.live_qpn.load(Ordering::SeqCst),
            )])
        }
    }

    fn rx0() -> LocalTarget {
        LocalTarget {
            device: "rxe0".into(),
            port: 1,
            gid_index: 1,
            traffic_class: 104,
            device_index: 0,
            netdev: Some("eth0".into()),
        }
    }

    fn settings(all_to_all: bool, refresh: Duration) -> RunnerSettings {
        RunnerSettings {
            node: "node-a".into(),
            probe: PeerSettings {
                packets_per_second: 50.0,
                all_to_all,
                ..PeerSettings::default()
            },
            refresh,
            subnet_of: |g| g.to_ipv4_mapped().map(|a| Net::of(a, 24)),
            admission: Admission {
                rails: Rails::new(&RailConfig::default()).unwrap(),
                allow_link_local: false,
            },
        }
    }

    fn documents(peers: &[&str], fetcher: impl Fetch) -> EndpointSource {
        let config = PeerProbeConfig {
            enabled: true,
            peers: peers.iter().map(|p| p.to_string()).collect(),
            ..PeerProbeConfig::default()
        };
        EndpointSource::Documents {
            list: Box::new(PeerList::new(&config, false)),
            fetcher: Arc::new(fetcher),
        }
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        // A bound against a hang, not a timing assertion.
        let until = Instant::now() + Duration::from_secs(60);
        while !cond() {
            assert!(Instant::now() < until, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn answered(r: &PeerResults) -> u64 {
        r.ports.first().map_or(0, |(_, s)| s.small.answered)
    }

    /// Peers that each hold their fetch until `want` fetches are in flight
    /// at once (or 2 s, against a hang): a sequential pass sees one.
    struct Concurrency {
        in_flight: Mutex<usize>,
        max: AtomicU32,
        want: usize,
        cv: std::sync::Condvar,
    }

    impl Fetch for Concurrency {
        fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
            let mut n = lock(&self.in_flight);
            *n += 1;
            self.max.fetch_max(*n as u32, Ordering::SeqCst);
            self.cv.notify_all();
            let (mut n, _) = self
                .cv
                .wait_timeout_while(n, Duration::from_secs(2), |n| *n < self.want)
                .unwrap_or_else(PoisonError::into_inner);
            *n -= 1;
            drop(n);
            if peer.0.contains("dead") {
                return Err(FetchError {
                    reason: FetchReason::Timeout,
                    message: "no answer".into(),
                });
            }
            let i: u8 = peer.host().trim_start_matches('n').parse().unwrap_or(0);
            Ok(vec![ep(
                peer.host(),
                Ipv4Addr::new(10, 0, 2, 100 + i).to_ipv6_mapped(),
                5,
            )])
        }
    }

    #[test]
    fn endpoint_fetches_run_concurrently_so_dead_peers_do_not_serialize_them() {
        let fabric = Fabric::default();
        let fetcher = Arc::new(Concurrency {
            in_flight: Mutex::new(0),
            max: AtomicU32::new(0),
            want: 8,
            cv: std::sync::Condvar::new(),
        });
        struct Shared(Arc<Concurrency>);
        impl Fetch for Shared {
            fn fetch(&self, p: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
                self.0.fetch(p)
            }
        }
        let peers: Vec<String> = (0..16)
            .map(|i| {
                if i % 4 == 0 {
                    format!("dead{i}:9879")
                } else {
                    format!("n{i}:9879")
                }
            })
            .collect();
        let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
        let runner = PeerRunner::spawn(
            fabric,
            documents(&peers, Shared(fetcher.clone())),
            settings(false, Duration::from_secs(3600)),
        )
        .unwrap();
        wait_for("every live peer's endpoints", || {
            let (_, d) = runner.results();
            d.peers_known == 12 && d.fetch_errors.get(&FetchReason::Timeout) >= Some(&4)
        });
        let max = fetcher.max.load(Ordering::SeqCst);
        assert!(max >= 8, "fetches in flight at once: {max}");
        assert!(max as usize <= FETCH_WORKERS);
        let (_, d) = runner.results();
        assert_eq!((d.peers_configured, d.endpoints), (16, 12));
        assert_eq!(d.mode, DiscoveryMode::Documents);
    }

    /// A peer whose fetch never ends within the test holds one worker: the
    /// others are fetched, probed and published meanwhile.
    #[test]
    fn one_slow_peer_never_freezes_the_others_or_the_published_results() {
        struct Slow(Arc<(Mutex<bool>, std::sync::Condvar)>);
        impl Fetch for Slow {
            fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
                if peer.host() == "slow" {
                    let (m, cv) = &*self.0;
                    let g = lock(m);
                    let _ =
                        cv.wait_timeout_while(g, Duration::from_secs(60), |released| !*released);
                    return Err(FetchError {
                        reason: FetchReason::Timeout,
                        message: "deadline".into(),
                    });
                }
                Ok(vec![ep("node-b", b_gid(), 11)])
            }
        }
        let fabric = Fabric::default();
        fabric.live_qpn.store(11, Ordering::SeqCst);
        let release = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let runner = PeerRunner::spawn(
            fabric.clone(),
            documents(&["slow:9879", "node-b:9879"], Slow(release.clone())),
            settings(false, Duration::from_secs(3600)),
        )
        .unwrap();
        runner.set_targets(vec![rx0()]);
        wait_for("node-b probed while slow's fetch is in flight", || {
            answered(&runner.results().0) > 3
        });
        let (_, d) = runner.results();
        assert_eq!((d.peers_configured, d.peers_known), (2, 1));
        assert!(d.fetch_errors.is_empty(), "slow's fetch has not ended");
        *lock(&release.0) = true;
        release.1.notify_all();
        wait_for("slow's failure counted", || {
            runner.results().1.fetch_errors.get(&FetchReason::Timeout) == Some(&1)
        });
    }

    /// Each hostile value of a fetched document is refused, counted by
    /// reason and never probed, even with all_to_all (no rail to hide
    /// behind); the good peer is probed.
    #[test]
    fn hostile_documents_are_refused_counted_and_never_probed() {
        let v4 = |a, b, c, d| Ipv4Addr::new(a, b, c, d).to_ipv6_mapped();
        let mut docs: BTreeMap<String, Vec<Endpoint>> = BTreeMap::new();
        let mut hostile = |name: &str, f: &dyn Fn(&mut Endpoint)| {
            let mut e = ep(name, v4(10, 0, 2, 50 + docs.len() as u8), 17);
            f(&mut e);
            docs.insert(name.to_string(), vec![e]);
        };
        for (i, gid) in crate::peer_endpoints::HOSTILE_GIDS.iter().enumerate() {
            let g: Ipv6Addr = gid.parse().unwrap();
            hostile(&format!("gid{i}"), &move |e| e.gid = g);
        }
        for (i, qpn) in [0, 1, u32::MAX].iter().enumerate() {
            hostile(&format!("qpn{i}"), &move |e| e.qpn = *qpn);
        }
        hostile("mtu0", &|e| e.mtu = 0);
        hostile("offrail", &|e| {
            e.gid = Ipv4Addr::new(10, 9, 9, 9).to_ipv6_mapped();
            e.subnet = Some("10.0.2.0/24".into());
        });
        // A peer whose document names another node.
        docs.insert("liar".into(), vec![ep("good", v4(10, 0, 2, 99), 23)]);
        let mut good = ep("good", b_gid(), 17);
        good.subnet = Some("10.0.2.0/24".into());
        good.rail = Some("10.0.2.0/24".into());
        docs.insert("good".into(), vec![good]);
        struct Docs(BTreeMap<String, Vec<Endpoint>>);
        impl Fetch for Docs {
            fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
                Ok(self.0.get(peer.host()).cloned().unwrap_or_default())
            }
        }
        let peers: Vec<String> = docs.keys().map(|k| format!("{k}:9879")).collect();
        let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
        let fabric = Fabric::default();
        fabric.answer_all.store(true, Ordering::SeqCst);
        let runner = PeerRunner::spawn(
            fabric.clone(),
            documents(&peers, Docs(docs)),
            settings(true, Duration::from_secs(3600)),
        )
        .unwrap();
        runner.set_targets(vec![rx0()]);
        wait_for("every document fetched and the good peer probed", || {
            let (r, d) = runner.results();
            d.requests.get(&RequestKind::Document) >= Some(&13) && answered(&r) > 4
        });
        let (_, d) = runner.results();
        let refused: Vec<(&str, u64)> = d.refused.iter().map(|(r, n)| (r.as_str(), *n)).collect();
        assert_eq!(
            refused,
            [
                ("node_mismatch", 1),
                ("gid", 6),
                ("qpn", 3),
                ("mtu", 1),
                ("off_rail", 1)
            ]
        );
        assert_eq!(*lock(&fabric.aimed), BTreeSet::from([(b_gid(), 17)]));
        assert_eq!(d.peers_known, 1);
    }

    #[test]
    fn a_peer_started_late_or_restarted_with_a_new_qpn_is_fetched_again_without_a_restart() {
        let fabric = Fabric::default();
        fabric.live_qpn.store(11, Ordering::SeqCst);
        fabric.empty_docs.store(1, Ordering::SeqCst);
        let runner = PeerRunner::spawn(
            fabric.clone(),
            // The peer starts after this exporter: its first fetch fails,
            // the second finds its responder not open yet.
            documents(
                &["node-b:9879"],
                PeerExporter(fabric.clone(), AtomicU32::new(1)),
            ),
            // Far beyond the test: only a failure can trigger the re-fetch.
            settings(false, Duration::from_secs(3600)),
        )
        .unwrap();
        runner.set_targets(vec![rx0()]);
        let sent = |r: &PeerResults| r.ports.first().map_or(0, |(_, s)| s.small.sent);
        wait_for("answers from the first QPN", || {
            answered(&runner.results().0) > 0
        });
        let (r, d) = runner.results();
        assert_eq!(r.endpoints.len(), 1);
        assert_eq!(r.endpoints[0].node, "node-a");
        assert_eq!(r.endpoints[0].rail.as_deref(), Some("10.0.2.0/24"));
        assert_eq!((d.peers_configured, d.peers_known), (1, 1));
        // The peer restarts: its old QPN is gone; its document is empty
        // at first (responder opening), then names the new QPN.
        fabric.empty_docs.store(2, Ordering::SeqCst);
        fabric.live_qpn.store(99, Ordering::SeqCst);
        let (before, _) = runner.results();
        wait_for("a probe to the old QPN lost", || {
            let (r, _) = runner.results();
            sent(&r) - answered(&r) > sent(&before) - answered(&before)
        });
        // The old QPN never answers again: any answer now is the new one's,
        // which only a re-fetch (not due for an hour) can have brought.
        let after_loss = answered(&runner.results().0);
        wait_for("answers from the new QPN", || {
            answered(&runner.results().0) > after_loss
        });
        let (_, d) = runner.results();
        assert_eq!(d.fetch_errors.get(&FetchReason::Connect), Some(&1));
        assert_eq!((d.peers_configured, d.peers_known), (1, 1));
    }

    #[test]
    fn a_new_traffic_class_applies_without_reopening_the_port() {
        let fabric = Fabric::default();
        fabric.answer_all.store(true, Ordering::SeqCst);
        fabric.live_qpn.store(11, Ordering::SeqCst);
        let runner = PeerRunner::spawn(
            fabric.clone(),
            documents(
                &["node-b:9879"],
                PeerExporter(fabric.clone(), AtomicU32::new(0)),
            ),
            settings(false, Duration::from_secs(3600)),
        )
        .unwrap();
        runner.set_targets(vec![rx0()]);
        wait_for("probes with class 104", || {
            lock(&fabric.classes).contains(&104)
        });
        let mut nccl = rx0();
        nccl.traffic_class = 106;
        runner.set_targets(vec![nccl]);
        wait_for("probes with class 106", || {
            lock(&fabric.classes).contains(&106)
        });
        let classes = lock(&fabric.classes).clone();
        let first = classes.iter().position(|c| *c == 106).unwrap_or(0);
        assert!(classes[first..].iter().all(|c| *c == 106), "{classes:?}");
        assert_eq!(
            fabric.opens.load(Ordering::SeqCst),
            1,
            "the port was not reopened"
        );
        // A change of the port itself (another GID index) does reopen it.
        let mut other = rx0();
        other.gid_index = 3;
        runner.set_targets(vec![other]);
        wait_for("the port opened again", || {
            fabric.opens.load(Ordering::SeqCst) == 2
        });
    }

    /// The findings of the rules on what the runner publishes now.
    fn rule_findings(runner: &PeerRunner) -> Vec<&'static str> {
        let (results, discovery) = runner.results();
        let s = Snapshot {
            sequence: 1,
            peer_probes: Some(results),
            peer_discovery: Some(discovery),
            ..Snapshot::default()
        };
        let mut ids: Vec<&str> = roce_rules::evaluate(
            &[Arc::new(s)],
            &roce_rules::settings::RulesConfig::default(),
            &roce_rules::settings::Expectations::default(),
        )
        .into_iter()
        .map(|f| f.rule.as_str())
        .filter(|r| r.starts_with("peer_probe_"))
        .collect();
        ids.dedup();
        ids
    }

    /// A peer restarted with a new responder QPN: the probes lost to its
    /// old QPN until its document is fetched again are not loss on the
    /// path (its history starts afresh), while the same losses on a peer
    /// that did not restart are.
    #[test]
    fn a_restarted_peer_is_not_path_loss_and_a_lossy_path_is() {
        let small_recent = |r: &PeerResults| {
            r.ports
                .first()
                .and_then(|(_, s)| s.peers.values().next().map(|p| p.recent_small))
                .unwrap_or_default()
        };
        // Must fire: every fourth small probe to node-b lost, same QPN.
        let fabric = Fabric::default();
        fabric.live_qpn.store(11, Ordering::SeqCst);
        fabric.lose_every.store(4, Ordering::SeqCst);
        let runner = PeerRunner::spawn(
            fabric.clone(),
            documents(
                &["node-b:9879"],
                PeerExporter(fabric.clone(), AtomicU32::new(0)),
            ),
            settings(false, Duration::from_secs(3600)),
        )
        .unwrap();
        runner.set_targets(vec![rx0()]);
        wait_for("16 outcomes with losses", || {
            small_recent(&runner.results().0).len() == 16
        });
        assert_eq!(rule_findings(&runner), ["peer_probe_path_loss"]);
        drop(runner);

        // Must not: node-b restarts (new QPN); probes to the old one are
        // lost until the re-fetch, then all answered.
        let fabric = Fabric::default();
        fabric.live_qpn.store(11, Ordering::SeqCst);
        let runner = PeerRunner::spawn(
            fabric.clone(),
            documents(
                &["node-b:9879"],
                PeerExporter(fabric.clone(), AtomicU32::new(0)),
            ),
            settings(false, Duration::from_secs(3600)),
        )
        .unwrap();
        runner.set_targets(vec![rx0()]);
        wait_for("16 answers from the first QPN", || {
            small_recent(&runner.results().0).answered() == 16
        });
        fabric.live_qpn.store(99, Ordering::SeqCst);
        wait_for("a probe to the old QPN lost", || {
            small_recent(&runner.results().0).lost() > 0
        });
        // The old QPN never answers again: the next answer is the new
        // one's. The pair's outcomes then hold no loss (without the fresh
        // start they would for the next 16 probes).
        let after_loss = answered(&runner.results().0);
        wait_for("an answer from the new QPN", || {
            answered(&runner.results().0) > after_loss
        });
        let r = small_recent(&runner.results().0);
        assert_eq!(r.lost(), 0, "{r:?}");
        assert!(
            rule_findings(&runner).is_empty(),
            "{:?}",
            rule_findings(&runner)
        );
    }

    /// A peer file that cannot be read is the collector's error (counted
    /// and exposed every sample, as a file error is), not only a log line;
    /// a refresh that reads it again clears it.
    #[test]
    fn an_unreadable_peer_file_is_a_collector_error_until_it_reads_again() {
        let dir = std::env::temp_dir().join(format!("roce-peer-file-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("peers.txt");
        std::fs::write(&file, [0xff_u8, 0xfe, b'\n']).unwrap();
        let fabric = Fabric::default();
        let config = PeerProbeConfig {
            enabled: true,
            file: Some(file.clone()),
            ..PeerProbeConfig::default()
        };
        let runner = PeerRunner::spawn(
            fabric.clone(),
            EndpointSource::Documents {
                list: Box::new(PeerList::new(&config, false)),
                fetcher: Arc::new(PeerExporter(fabric.clone(), AtomicU32::new(0))),
            },
            settings(false, Duration::from_secs(1)),
        )
        .unwrap();
        wait_for("the file's error", || {
            runner.list_errors().iter().any(|e| e.contains("peers.txt"))
        });
        std::fs::write(&file, "node-b:9879\n").unwrap();
        wait_for("the error cleared", || runner.list_errors().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Prometheus mode: one query brings the fleet; its series are
    /// admitted as documents are; no document is fetched.
    #[test]
    fn the_fleet_comes_from_one_prometheus_query_admitted_like_documents() {
        struct Fleet(AtomicU32);
        impl Query for Fleet {
            fn query(&self) -> Result<Vec<FleetSeries>, FetchError> {
                self.0.fetch_add(1, Ordering::SeqCst);
                let mut bad = ep("node-c", Ipv4Addr::new(10, 0, 2, 17).to_ipv6_mapped(), 0);
                bad.device = "mlx5_0".into();
                Ok(vec![
                    FleetSeries {
                        instance: "10.1.0.2:9879".into(),
                        endpoint: Ok(ep("node-b", b_gid(), 11)),
                    },
                    FleetSeries {
                        instance: "node-c:9879".into(),
                        endpoint: Ok(bad),
                    },
                    FleetSeries {
                        instance: "node-d:9879".into(),
                        endpoint: Err(Refusal::Malformed),
                    },
                    // Another instance claiming node-b: refused.
                    FleetSeries {
                        instance: "10.1.0.9:9879".into(),
                        endpoint: Ok(ep(
                            "node-b",
                            Ipv4Addr::new(10, 0, 2, 66).to_ipv6_mapped(),
                            12,
                        )),
                    },
                ])
            }
        }
        let fabric = Fabric::default();
        fabric.live_qpn.store(11, Ordering::SeqCst);
        let runner = PeerRunner::spawn(
            fabric.clone(),
            EndpointSource::Prometheus(Arc::new(Fleet(AtomicU32::new(0)))),
            settings(false, Duration::from_secs(3600)),
        )
        .unwrap();
        runner.set_targets(vec![rx0()]);
        wait_for("node-b probed", || answered(&runner.results().0) > 2);
        let (_, d) = runner.results();
        assert_eq!(d.mode, DiscoveryMode::Prometheus);
        assert_eq!(d.requests.get(&RequestKind::Prometheus), Some(&1));
        assert_eq!(d.requests.get(&RequestKind::Document), None);
        let refused: Vec<(&str, u64)> = d.refused.iter().map(|(r, n)| (r.as_str(), *n)).collect();
        assert_eq!(refused, [("node_claimed", 1), ("qpn", 1), ("malformed", 1)]);
        assert_eq!((d.peers_configured, d.peers_known, d.endpoints), (4, 1, 1));
        assert_eq!(*lock(&fabric.aimed), BTreeSet::from([(b_gid(), 11)]));
    }

    #[test]
    fn the_time_a_probe_took_comes_off_the_wait_after_it() {
        let spacing = Duration::from_millis(20);
        assert_eq!(
            gap_after(spacing, Duration::from_millis(3)),
            Duration::from_millis(17)
        );
        assert_eq!(
            gap_after(spacing, Duration::from_millis(500)),
            Duration::ZERO
        );
    }

    /// Requests of one node over simulated time with the catalog's own
    /// planning: every job answered at once with the peer's document.
    /// `dead` peers fail every fetch; `failing` peer ports fail probes.
    pub(crate) fn simulate(
        peers: usize,
        refresh: Duration,
        horizon: Duration,
        dead: usize,
        failing_ports: usize,
        count_after: Duration,
    ) -> (u64, u64) {
        let admission = Admission {
            rails: Rails::new(&RailConfig::default()).unwrap(),
            allow_link_local: false,
        };
        let addrs: Vec<PeerAddress> = (0..peers)
            .map(|i| {
                PeerAddress(format!(
                    "http://10.{}.{}.{}:9879",
                    i >> 16,
                    (i >> 8) & 255,
                    i & 255
                ))
            })
            .collect();
        let mut c = Catalog::new(DiscoveryMode::Documents, refresh, FETCH_RATE, 12345);
        let mut d = PeerDiscovery::default();
        let t0 = Instant::now();
        let tick = Duration::from_millis(200);
        let (mut documents, mut lists) = (0u64, 0u64);
        // The peers whose probes fail are live ones (after the dead).
        let failing: BTreeSet<PeerKey> = (dead..dead + failing_ports)
            .map(|i| PeerKey {
                node: format!("n{i}"),
                device: "mlx5_0".into(),
                port: 1,
            })
            .collect();
        let mut t = Duration::ZERO;
        while t < horizon {
            let now = t0 + t;
            for job in c.plan(now, FETCH_WORKERS.saturating_sub(c.in_flight), &failing) {
                let counted = t >= count_after;
                let done = match job {
                    Job::List => {
                        lists += u64::from(counted);
                        Done::List(addrs.clone(), Vec::new())
                    }
                    Job::Document(a) => {
                        documents += u64::from(counted);
                        let i = addrs.iter().position(|x| *x == a).unwrap_or(0);
                        if i < dead {
                            Done::Document(
                                a,
                                Err(FetchError {
                                    reason: FetchReason::Connect,
                                    message: "refused".into(),
                                }),
                            )
                        } else {
                            let gid = Ipv4Addr::new(10, 0, (i >> 8) as u8, (i & 255) as u8)
                                .to_ipv6_mapped();
                            let mut e = ep(&format!("n{i}"), gid, 17);
                            e.device = "mlx5_0".into();
                            Done::Document(a, Ok(vec![e]))
                        }
                    }
                    Job::Query => Done::Query(Ok(Vec::new())),
                };
                c.apply(done, now, &admission, &mut d);
            }
            t += tick;
        }
        (documents, lists)
    }

    #[test]
    fn documents_are_fetched_once_per_peer_at_a_bounded_pace_not_every_refresh() {
        // 1,000 peers, refresh 60 s, one hour: the walk fetches each peer
        // once (16 at once, then 50/s); every refresh re-fetching all
        // would be 60,000.
        let (docs, lists) = simulate(
            1000,
            Duration::from_secs(60),
            Duration::from_secs(3600),
            0,
            0,
            Duration::ZERO,
        );
        assert_eq!(docs, 1000);
        assert_eq!(lists, 60);
        // 10 s in, the walk has reached 16 + 50/s × 10 s of them.
        let (early, _) = simulate(
            1000,
            Duration::from_secs(60),
            Duration::from_secs(10),
            0,
            0,
            Duration::ZERO,
        );
        assert!((490..=520).contains(&early), "{early}");
        // A dead peer is asked again at 5, 10, 20, 40 s, then every minute.
        let (docs, _) = simulate(
            10,
            Duration::from_secs(60),
            Duration::from_secs(3600),
            1,
            0,
            Duration::ZERO,
        );
        assert!((10 + 58..10 + 64).contains(&docs), "{docs}");
        // A live peer whose probes keep failing: asked again at 5, 10, 20,
        // … s, then every 5 minutes at most.
        let (docs, _) = simulate(
            1,
            Duration::from_secs(60),
            Duration::from_secs(3600),
            0,
            1,
            Duration::ZERO,
        );
        assert!((12..=20).contains(&docs), "{docs}");
    }
}

/// The figures of `bench/peer_discovery.py`: requests one node makes for
/// endpoints over simulated time, with the coordinator's own planning, per
/// discovery mode, at fleet sizes of 1,000 and 10,000; and the size and
/// parse cost of a Prometheus answer for the whole fleet. Ignored: run by
/// the script (release build).
#[cfg(test)]
mod bench {
    use super::tests::simulate;
    use super::*;

    /// A Prometheus answer for `nodes` nodes of 8 ports, as Prometheus
    /// writes it.
    fn prometheus_answer(nodes: usize) -> String {
        let mut out =
            String::from(r#"{"status":"success","data":{"resultType":"vector","result":["#);
        for n in 0..nodes {
            for rail in 0..8 {
                if n + rail > 0 {
                    out.push(',');
                }
                out.push_str(&format!(
                    r#"{{"metric":{{"__name__":"roce_peer_probe_endpoint_info","device":"mlx5_{rail}","device_index":"{rail}","gid":"::ffff:10.{rail}.{}.{}","gid_index":"3","instance":"10.250.{}.{}:9879","job":"roce_exporter","mtu":"4096","node":"gpu-node-{n:05}","port":"1","qpn":"{}","rail":"10.{rail}.0.0/16","subnet":"10.{rail}.0.0/16"}},"value":[1767225600.123,"1"]}}"#,
                    n / 250,
                    n % 250 + 1,
                    n / 250,
                    n % 250 + 1,
                    // QPNs as a real fleet has them: no two alike.
                    (xorshift((n * 8 + rail + 1) as u64) % 0xFF_FFF0) + 2
                ));
            }
        }
        out.push_str("]}}");
        out
    }

    #[test]
    #[ignore = "a benchmark: bench/peer_discovery.py runs it"]
    fn fleet_request_rates() {
        use std::io::Write as _;
        let refresh = Duration::from_secs(60);
        let hour = Duration::from_secs(3600);
        println!("BENCH mode nodes per_node_requests_per_hour fleet_requests_per_second baseline_fleet_requests_per_second");
        for nodes in [1000usize, 10_000] {
            // The per-peer documents every refresh (the baseline).
            let baseline = (nodes as u64 - 1) * (hour.as_secs() / refresh.as_secs());
            let fleet = |per_node: u64| per_node as f64 * nodes as f64 / 3600.0;
            println!(
                "BENCH every_refresh {nodes} {baseline} {:.1} {:.1}",
                fleet(baseline),
                fleet(baseline)
            );
            // The first hour (the whole fleet started at once: every node
            // walks every peer once), then a steady hour (hour 3 of 3: the
            // walk of 10,000 peers takes 67 minutes).
            let (three, two) = (hour * 3, hour * 2);
            let (docs, lists) = simulate(nodes - 1, refresh, hour, 0, 0, Duration::ZERO);
            println!(
                "BENCH documents_first_hour {nodes} {docs} {:.1} {:.1}",
                fleet(docs),
                fleet(baseline)
            );
            let (steady, _) = simulate(nodes - 1, refresh, three, 0, 0, two);
            println!(
                "BENCH documents_steady {nodes} {steady} {:.1} {:.1}",
                fleet(steady),
                fleet(baseline)
            );
            // SRV: the list is one DNS query per refresh, documents as above.
            println!(
                "BENCH srv_first_hour {nodes} {} {:.1} {:.1}",
                docs + lists,
                fleet(docs + lists),
                fleet(baseline)
            );
            println!(
                "BENCH srv_steady {nodes} {} {:.1} {:.1}",
                steady + lists,
                fleet(steady + lists),
                fleet(baseline)
            );
            // 1 % of the peers dead and 1 % whose probes keep failing: the
            // retries and refetches, in a steady hour.
            let (bad, _) = simulate(nodes - 1, refresh, three, nodes / 100, nodes / 100, two);
            println!(
                "BENCH documents_steady_1pct_failing {nodes} {bad} {:.1} {:.1}",
                fleet(bad),
                fleet(baseline)
            );
            let queries = hour.as_secs() / refresh.as_secs();
            let answer = prometheus_answer(nodes);
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(answer.as_bytes()).unwrap();
            let gz = gz.finish().unwrap();
            let started = Instant::now();
            let parsed = crate::peer_endpoints::parse_query_response(answer.as_bytes()).unwrap();
            let parse = started.elapsed();
            assert_eq!(parsed.len(), nodes * 8);
            println!(
                "BENCH prometheus {nodes} {queries} {:.1} {:.1} answer_bytes={} gzip_bytes={} parse_ms={:.1}",
                fleet(queries),
                fleet(baseline),
                answer.len(),
                gz.len(),
                parse.as_secs_f64() * 1e3
            );
        }
    }
}
