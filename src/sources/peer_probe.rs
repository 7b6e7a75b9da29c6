//! The peer-probe source (`peer_probes:`): chooses the local ports (every
//! active port, with the probe's GID index choice and the port's RoCE
//! traffic class, as the loopback probe source does) and copies the peer
//! prober's latest results into the snapshot, whose endpoints the
//! `/peer-probe/endpoints` route serves.
//!
//! The work runs on threads of its own, never in a sample: one thread per
//! local port keeps the UD responder and runs the paced rounds (a port is
//! answered between its own probes, and no port waits on another's lost
//! probe), and one coordinator thread starts and stops the port threads
//! and fetches the peers' endpoint documents, every `refresh` and again
//! (at most every [`REFETCH_AFTER_FAILURE`]) when probes to a peer fail,
//! so that a restarted peer's new QPNs are picked up without a restart.
//! The sampler hands targets in and copies results out (the ownership of
//! the loopback probe's runner: shared state behind the runner, no
//! globals); dropping the source stops and joins every thread.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce_probe::peer::{
    spacing, Endpoint, PeerKey, PeerResults, PeerSettings, PeerVerbs, PortProber, PortStats, QKEY,
};
use roce_probe::verbs::OpenError;
use roce_probe::ProbeState;

use super::peer_list::{FetchError, PeerAddress, PeerList};
use super::probe::TargetChooser;
use super::{HostError, Input, Part, Reading, Source};
use crate::config::{Config, PeerProbeConfig};
use crate::host::HostPaths;
use crate::snapshot::{Snapshot, SourceState};

/// Failures of probes to a peer ask for its endpoints again, at most this often.
pub const REFETCH_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// Endpoint documents fetched at once: a dead peer costs a fetch its
/// timeouts (2–3 s for a refused or silent address, at most 4 × the step
/// bound of [`super::peer_list::Fetcher`]) on one worker, not the pass.
pub const FETCH_WORKERS: usize = 16;
/// A fetch pass starts no fetch after this long; the peers it did not
/// reach keep their endpoints and are tried at the next retry pass (every
/// [`REFETCH_AFTER_FAILURE`]), so a pass never holds the coordinator
/// (port threads started and stopped, retries) longer than this plus one
/// fetch's bound.
pub const FETCH_BUDGET: Duration = Duration::from_secs(30);
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
    /// Position of the device in the sorted device list (the rail when
    /// subnets do not say).
    pub device_index: u32,
}

/// Fetches a peer's endpoint document (the real one is
/// [`super::peer_list::Fetcher`]; tests hand in their own).
pub trait Fetch: Send + Sync + 'static {
    fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError>;
}

/// The subnet of a GID's IPv4 address on this host (the rail key).
pub type SubnetOf = fn(&std::net::Ipv6Addr) -> Option<String>;

/// What one port thread publishes.
#[derive(Debug, Clone, Default)]
struct PortState {
    endpoint: Option<Endpoint>,
    stats: PortStats,
    /// Why the port is not probing (open failed), for the log.
    failure: Option<String>,
    unavailable: Option<String>,
}

#[derive(Debug, Default)]
struct FetchStatus {
    configured: usize,
    fetched: usize,
    errors: BTreeMap<&'static str, u64>,
    /// Last error text per peer, logged on change.
    last: BTreeMap<PeerAddress, String>,
    /// Errors of the peer list at the latest refresh (a file that cannot
    /// be read, a name that does not resolve): the collector reports them
    /// every sample until a refresh without them, as it does file errors.
    list_errors: Vec<String>,
}

#[derive(Default)]
struct Shared {
    targets: Mutex<Vec<LocalTarget>>,
    /// Every fetched peer endpoint (all addresses together).
    peers: Mutex<Arc<Vec<Endpoint>>>,
    ports: Mutex<BTreeMap<(String, u8), PortState>>,
    fetch: Mutex<FetchStatus>,
    /// Peer ports whose latest probe was lost: their exporters' endpoints
    /// are fetched again soon (a restarted peer has new QPNs).
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

/// What the runner needs besides the verbs and the fetcher.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    pub node: String,
    pub probe: PeerSettings,
    pub refresh: Duration,
    pub subnet_of: SubnetOf,
}

impl PeerRunner {
    pub fn spawn<V, F>(
        verbs: V,
        fetcher: F,
        peers: PeerList,
        settings: RunnerSettings,
    ) -> std::io::Result<PeerRunner>
    where
        V: PeerVerbs + Clone + 'static,
        F: Fetch,
    {
        let shared = Arc::new(Shared::default());
        let inner = shared.clone();
        let thread = std::thread::Builder::new()
            .name("roce-peer-probe".into())
            .spawn(move || coordinate(verbs, Arc::new(fetcher), peers, settings, &inner))?;
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
        lock(&self.shared.fetch).list_errors.clone()
    }

    /// The latest results: every port's endpoint and statistics, the
    /// fetch counters.
    pub fn results(&self) -> PeerResults {
        let ports = lock(&self.shared.ports);
        let mut out = PeerResults::default();
        let mut unavailable = None;
        for state in ports.values() {
            if let Some(e) = &state.endpoint {
                out.endpoints.push(e.clone());
                out.ports.push((e.clone(), state.stats.clone()));
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
        let f = lock(&self.shared.fetch);
        out.peers_configured = f.configured;
        out.peers_fetched = f.fetched;
        out.fetch_errors = f.errors.clone();
        out
    }

    /// Why ports are not probing, by port (for the log).
    fn failures(&self) -> Vec<(String, String)> {
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
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

fn coordinate<V, F>(
    verbs: V,
    fetcher: Arc<F>,
    mut list: PeerList,
    settings: RunnerSettings,
    shared: &Arc<Shared>,
) where
    V: PeerVerbs + Clone + 'static,
    F: Fetch,
{
    let mut threads: Vec<PortThread> = Vec::new();
    let mut by_address: BTreeMap<PeerAddress, Vec<Endpoint>> = BTreeMap::new();
    let mut next_fetch = Instant::now();
    let mut last_retry: Option<Instant> = None;
    // Peers whose last fetch failed: tried again every REFETCH_AFTER_FAILURE
    // (a peer that starts after this exporter is found in seconds, not at
    // the next refresh).
    let mut retry: BTreeSet<PeerAddress> = BTreeSet::new();
    let mut configured: Vec<PeerAddress> = Vec::new();
    let mut seed = seed();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let targets = lock(&shared.targets).clone();
        // Stop the threads of removed or changed ports.
        let (keep, gone): (Vec<PortThread>, Vec<PortThread>) = threads
            .into_iter()
            .partition(|t| targets.contains(&t.target));
        threads = keep;
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
            let (s, sh, v, st, t) = (
                stop.clone(),
                shared.clone(),
                verbs.clone(),
                settings.clone(),
                target.clone(),
            );
            seed = xorshift(seed);
            let nonce = (seed >> 16) as u32;
            let spawned = std::thread::Builder::new()
                .name(format!("roce-peer-{}", target.device))
                .spawn(move || run_port(v, t, st, nonce, &sh, &s));
            match spawned {
                Ok(handle) => threads.push(PortThread {
                    target: target.clone(),
                    stop,
                    handle,
                }),
                Err(e) => tracing::warn!(error = %e, "cannot start a peer-probe port thread"),
            }
        }
        let now = Instant::now();
        if now >= next_fetch {
            configured = list.current();
            // logged by the sampler when the set changes
            lock(&shared.fetch).list_errors = list.errors.iter().map(|e| e.to_string()).collect();
            by_address.retain(|a, _| configured.contains(a));
            retry = fetch(&configured, fetcher.as_ref(), &mut by_address, shared);
            set_status(shared, &configured, &retry, &by_address);
            lock(&shared.failing).clear();
            last_retry = Some(Instant::now());
            next_fetch = Instant::now() + settings.refresh.max(Duration::from_secs(1));
        } else if last_retry.is_none_or(|at| now.duration_since(at) >= REFETCH_AFTER_FAILURE) {
            let failing = std::mem::take(&mut *lock(&shared.failing));
            let mut again: Vec<PeerAddress> = retry.iter().cloned().collect();
            again.extend(
                by_address
                    .iter()
                    .filter(|(_, eps)| eps.iter().any(|e| failing.contains(&e.key())))
                    .map(|(a, _)| a.clone()),
            );
            again.sort();
            again.dedup();
            if !again.is_empty() {
                let still = fetch(&again, fetcher.as_ref(), &mut by_address, shared);
                retry.retain(|a| still.contains(a));
                retry.extend(still);
                set_status(shared, &configured, &retry, &by_address);
                last_retry = Some(Instant::now());
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

/// Fetches the endpoints of `peers` ([`FETCH_WORKERS`] at once, starting
/// none after [`FETCH_BUDGET`]); returns those to ask again (the fetch
/// failed, was not started within the budget, or the document listed no
/// endpoint yet). Such a peer keeps the endpoints fetched before (a
/// stopped peer must show as unreachable, not vanish).
fn fetch(
    peers: &[PeerAddress],
    fetcher: &dyn Fetch,
    by_address: &mut BTreeMap<PeerAddress, Vec<Endpoint>>,
    shared: &Shared,
) -> BTreeSet<PeerAddress> {
    fetch_bounded(
        peers,
        fetcher,
        by_address,
        shared,
        FETCH_WORKERS,
        FETCH_BUDGET,
    )
}

type Fetched = Option<Result<Vec<Endpoint>, FetchError>>;

fn fetch_bounded(
    peers: &[PeerAddress],
    fetcher: &dyn Fetch,
    by_address: &mut BTreeMap<PeerAddress, Vec<Endpoint>>,
    shared: &Shared,
    workers: usize,
    budget: Duration,
) -> BTreeSet<PeerAddress> {
    let deadline = Instant::now() + budget;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Fetched>> = Mutex::new((0..peers.len()).map(|_| None).collect());
    let work = || loop {
        if shared.stop.load(Ordering::SeqCst) || Instant::now() >= deadline {
            break;
        }
        let i = next.fetch_add(1, Ordering::SeqCst);
        let Some(peer) = peers.get(i) else {
            break;
        };
        let r = fetcher.fetch(peer);
        if let Some(slot) = lock(&results).get_mut(i) {
            *slot = Some(r);
        }
    };
    std::thread::scope(|s| {
        // This thread is one of the workers: the pass goes on (slower)
        // when no thread can be started.
        for _ in 1..workers.min(peers.len()) {
            if let Err(e) = std::thread::Builder::new()
                .name("roce-peer-fetch".into())
                .spawn_scoped(s, work)
            {
                tracing::warn!(error = %e, "cannot start a peer fetch thread");
                break;
            }
        }
        work();
    });
    let results = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    let mut failed = BTreeSet::new();
    let mut not_started = 0usize;
    let mut status = lock(&shared.fetch);
    for (peer, result) in peers.iter().zip(results) {
        match result {
            None => {
                not_started += 1;
                failed.insert(peer.clone());
            }
            // A peer that publishes no endpoint yet (started a moment ago,
            // its responders still opening) keeps the endpoints it had and
            // is asked again with the failed ones: taking the empty list
            // would leave nothing to probe, so no loss would ever ask again.
            Some(Ok(endpoints)) if endpoints.is_empty() => {
                failed.insert(peer.clone());
            }
            Some(Ok(endpoints)) => {
                if status.last.remove(peer).is_some() {
                    tracing::info!(peer = %peer.0, "peer endpoints fetched again");
                }
                by_address.insert(peer.clone(), endpoints);
            }
            Some(Err(e)) => {
                *status.errors.entry(e.reason).or_insert(0) += 1;
                if status.last.get(peer) != Some(&e.message) {
                    tracing::warn!(peer = %peer.0, reason = e.reason, "cannot fetch peer endpoints: {}", e.message);
                    status.last.insert(peer.clone(), e.message);
                }
                failed.insert(peer.clone());
            }
        }
    }
    if not_started > 0 && !shared.stop.load(Ordering::SeqCst) {
        tracing::warn!(
            not_started,
            budget_s = budget.as_secs(),
            "peer endpoint fetches not started within this pass's budget; tried again at the next retry"
        );
    }
    failed
}

/// Publishes the peers' endpoints and the fetch counts.
fn set_status(
    shared: &Shared,
    configured: &[PeerAddress],
    failed: &BTreeSet<PeerAddress>,
    by_address: &BTreeMap<PeerAddress, Vec<Endpoint>>,
) {
    {
        let mut status = lock(&shared.fetch);
        status.configured = configured.len();
        status.fetched = configured.iter().filter(|a| !failed.contains(*a)).count();
        status.last.retain(|a, _| configured.contains(a));
    }
    let all: Vec<Endpoint> = by_address.values().flatten().cloned().collect();
    *lock(&shared.peers) = Arc::new(all);
}

fn run_port<V: PeerVerbs>(
    mut verbs: V,
    target: LocalTarget,
    settings: RunnerSettings,
    nonce: u32,
    shared: &Shared,
    stop: &AtomicBool,
) {
    let key = (target.device.clone(), target.port);
    let publish = |f: &dyn Fn(&mut PortState)| {
        let mut ports = lock(&shared.ports);
        f(ports.entry(key.clone()).or_default());
    };
    let halt = || stop.load(Ordering::SeqCst) || shared.stop.load(Ordering::SeqCst);
    let mut seed = u64::from(nonce) | 1;
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
            subnet: (settings.subnet_of)(&gid),
        };
        let probe_settings = PeerSettings {
            traffic_class: target.traffic_class,
            ..settings.probe.clone()
        };
        let mut prober = PortProber::new(endpoint.clone(), port, probe_settings, nonce);
        publish(&|s| {
            s.endpoint = Some(endpoint.clone());
            s.failure = None;
            s.unavailable = None;
        });
        let pps = prober.settings.packets_per_second;
        while !halt() {
            let peers = lock(&shared.peers).clone();
            if prober.matching(&peers).is_empty() {
                prober.serve(&peers);
                prober.idle(TICK);
                prober.stats.peers_known = 0;
            } else {
                let mut mark = Instant::now();
                prober.round_with(&peers, &mut || {
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
                let failing: Vec<PeerKey> = prober
                    .stats
                    .peers
                    .iter()
                    .filter(|(_, p)| p.rounds_since_sampled == 0 && p.last_small_ok == Some(false))
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
#[cfg(feature = "probes")]
fn host_subnet(gid: &std::net::Ipv6Addr) -> Option<String> {
    let v4 = gid.to_ipv4_mapped()?;
    let len = roce_probe::peer_ibverbs::ipv4_prefix_len(v4)?;
    roce_probe::peer::ipv4_subnet(gid, len)
}

/// The source of the peer prober's results.
pub struct PeerProbeSource {
    runner: Result<PeerRunner, String>,
    chooser: TargetChooser,
    nccl_ib_tc: Option<u8>,
    targets: Vec<LocalTarget>,
}

impl PeerProbeSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let runner = if !config.peer_probes.enabled {
            Err("peer probes are off (peer_probes.enabled)".into())
        } else if !paths.is_live() {
            Err("peer probes need this host's /sys (--path.sysfs is another)".into())
        } else {
            spawn(&config.peer_probes)
        };
        PeerProbeSource {
            runner,
            chooser: TargetChooser::new(config.probes.gid_index),
            nccl_ib_tc: config.expect.nccl_ib_tc,
            targets: Vec::new(),
        }
    }
}

/// The settings of the prober from `peer_probes:`.
pub fn probe_settings(c: &PeerProbeConfig) -> PeerSettings {
    PeerSettings {
        packets_per_second: f64::from(c.packets_per_second),
        sample: c.sample,
        timeout: c.timeout,
        all_to_all: c.all_to_all,
        traffic_class: 0,
    }
}

fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(feature = "probes")]
fn spawn(c: &PeerProbeConfig) -> Result<PeerRunner, String> {
    let fetcher = super::peer_list::Fetcher::new(c)?;
    let tls = fetcher.default_tls();
    PeerRunner::spawn(
        roce_probe::peer_ibverbs::IbPeerVerbs::new(),
        fetcher,
        PeerList::new(c, tls),
        RunnerSettings {
            node: node_name(),
            probe: probe_settings(c),
            refresh: c.refresh,
            subnet_of: host_subnet,
        },
    )
    .map_err(|e| format!("cannot start the peer-probe thread: {e}"))
}

#[cfg(not(feature = "probes"))]
fn spawn(_c: &PeerProbeConfig) -> Result<PeerRunner, String> {
    let _ = node_name;
    Err("built without verbs probes (feature `probes`)".into())
}

/// The local ports to probe from: the loopback probe's choice (every
/// active port, the configured or `auto` GID index) with each port's
/// RoCE traffic class and its device's index in the sorted device list.
pub fn local_targets(
    chooser: &mut TargetChooser,
    rdma: &roce_rdma::RdmaSnapshot,
    previous: &Snapshot,
    nccl_ib_tc: Option<u8>,
) -> Vec<LocalTarget> {
    let mut names: Vec<&str> = rdma.devices.iter().map(|d| d.name.as_str()).collect();
    names.sort_unstable();
    chooser
        .choose(rdma)
        .into_iter()
        .map(|t| LocalTarget {
            traffic_class: crate::rules::fabric::port_traffic_class(
                previous,
                &t.device,
                u32::from(t.port),
                nccl_ib_tc,
            ),
            device_index: names
                .iter()
                .position(|n| *n == t.device)
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(0),
            device: t.device,
            port: t.port,
            gid_index: t.gid_index,
        })
        .collect()
}

impl Source for PeerProbeSource {
    fn name(&self) -> &'static str {
        "peer_probe"
    }

    fn needs_rdma(&self) -> bool {
        true
    }

    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Reading {
        let runner = match &self.runner {
            Ok(r) => r,
            Err(why) => return Reading::bare(SourceState::Disabled(why.clone())),
        };
        if let Some(rdma) = &input.rdma {
            let empty = Snapshot::default();
            let last = input.previous.as_deref().unwrap_or(&empty);
            self.targets = local_targets(&mut self.chooser, rdma, last, self.nccl_ib_tc);
            runner.set_targets(self.targets.clone());
        }
        // reported every sample while they last; the sampler logs changes
        for (port, why) in runner.failures() {
            errors.push(HostError::request(
                format!("peer-probe responder on {port}"),
                &why,
            ));
        }
        for e in runner.list_errors() {
            errors.push(HostError::request("peer_probes peer list", e));
        }
        let results = runner.results();
        let state = match &results.state {
            ProbeState::Unavailable(why) => SourceState::Unavailable(why.clone()),
            _ if self.targets.is_empty() => {
                SourceState::Unavailable("no active RDMA port to probe from".into())
            }
            _ => SourceState::Ok,
        };
        Reading::new(state, Part::PeerProbes(Box::new(results)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_probe::peer::{Outcome, PeerPort, Probe, Served};
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::atomic::AtomicU32;

    /// A fabric where exactly one responder QPN per node answers: the
    /// one its exporter publishes now (a restarted peer's old QPN is gone).
    #[derive(Clone, Default)]
    struct Fabric {
        live_qpn: Arc<AtomicU32>,
        /// Fetches still to answer with an empty document (the peer's
        /// responder not open yet).
        empty_docs: Arc<AtomicU32>,
    }

    struct FabricPort(Fabric);

    impl PeerPort for FabricPort {
        fn local(&self) -> (Ipv6Addr, u32, u32) {
            (Ipv4Addr::new(10, 0, 2, 15).to_ipv6_mapped(), 7, 1024)
        }
        fn ping(
            &mut self,
            to: &Endpoint,
            _probe: &Probe,
            _timeout: Duration,
            _allowed: &dyn Fn(&Ipv6Addr, u32) -> bool,
            _served: &mut Served,
        ) -> Outcome {
            if to.qpn == self.0.live_qpn.load(Ordering::SeqCst) {
                Outcome::Answered(Duration::from_micros(30))
            } else {
                Outcome::Lost
            }
        }
        fn serve(&mut self, _: &dyn Fn(&Ipv6Addr, u32) -> bool, _: &mut Served) {}
    }

    impl PeerVerbs for Fabric {
        type Port = FabricPort;
        fn open_port(&mut self, _: &str, _: u8, _: u32) -> Result<FabricPort, OpenError> {
            Ok(FabricPort(self.clone()))
        }
    }

    /// The peer's exporter: publishes the responder QPN it has now; not
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
                    reason: "connect",
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
            Ok(vec![Endpoint {
                node: "node-b".into(),
                device: "rxe0".into(),
                device_index: 0,
                port: 1,
                gid: Ipv4Addr::new(10, 0, 2, 16).to_ipv6_mapped(),
                gid_index: 1,
                qpn: self.0.live_qpn.load(Ordering::SeqCst),
                qkey: QKEY,
                mtu: 1024,
                subnet: None,
            }])
        }
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
                    reason: "timeout",
                    message: "no answer".into(),
                });
            }
            Ok(vec![Endpoint {
                node: peer.0.clone(),
                device: "mlx5_0".into(),
                device_index: 0,
                port: 1,
                gid: Ipv4Addr::new(10, 0, 1, 2).to_ipv6_mapped(),
                gid_index: 3,
                qpn: 5,
                qkey: QKEY,
                mtu: 4096,
                subnet: None,
            }])
        }
    }

    #[test]
    fn endpoint_fetches_run_concurrently_so_dead_peers_do_not_serialize_the_pass() {
        let fetcher = Concurrency {
            in_flight: Mutex::new(0),
            max: AtomicU32::new(0),
            want: 8,
            cv: std::sync::Condvar::new(),
        };
        let peers: Vec<PeerAddress> = (0..32)
            .map(|i| {
                PeerAddress(if i % 4 == 0 {
                    format!("http://dead{i}:9879")
                } else {
                    format!("http://n{i}:9879")
                })
            })
            .collect();
        let shared = Shared::default();
        let mut by_address = BTreeMap::new();
        let failed = fetch(&peers, &fetcher, &mut by_address, &shared);
        assert!(
            fetcher.max.load(Ordering::SeqCst) >= 8,
            "fetches in flight at once: {}",
            fetcher.max.load(Ordering::SeqCst)
        );
        assert!(fetcher.max.load(Ordering::SeqCst) as usize <= FETCH_WORKERS);
        assert_eq!(failed.len(), 8, "the dead ones: {failed:?}");
        assert!(failed.iter().all(|a| a.0.contains("dead")));
        assert_eq!(by_address.len(), 24);
        assert_eq!(lock(&shared.fetch).errors.get("timeout"), Some(&8));
    }

    #[test]
    fn the_time_a_probe_took_comes_off_the_wait_after_it() {
        // 50 packets/s: 20 ms apart. An answer after 3 ms leaves 17 ms;
        // the wait used to be the whole 20 ms on top of the RTT.
        let spacing = Duration::from_millis(20);
        assert_eq!(
            gap_after(spacing, Duration::from_millis(3)),
            Duration::from_millis(17)
        );
        // A lost probe (500 ms timeout) already overran its slot.
        assert_eq!(
            gap_after(spacing, Duration::from_millis(500)),
            Duration::ZERO
        );
    }

    #[test]
    fn a_pass_past_its_budget_starts_no_more_fetches_and_keeps_what_peers_had() {
        let fetcher = PeerExporter(Fabric::default(), AtomicU32::new(0));
        let peers = vec![PeerAddress("http://a:9879".into())];
        let shared = Shared::default();
        let mut by_address = BTreeMap::new();
        fetch_bounded(
            &peers,
            &fetcher,
            &mut by_address,
            &shared,
            4,
            Duration::from_secs(60),
        );
        let had = by_address.clone();
        assert_eq!(had.len(), 1);
        // A budget already spent: nothing is fetched, the peer is asked
        // again at the next retry and keeps its endpoints meanwhile.
        let failed = fetch_bounded(
            &peers,
            &fetcher,
            &mut by_address,
            &shared,
            4,
            Duration::ZERO,
        );
        assert_eq!(failed, peers.iter().cloned().collect());
        assert_eq!(by_address, had);
        assert!(lock(&shared.fetch).errors.is_empty());
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        // A bound against a hang, not a timing assertion.
        let until = Instant::now() + Duration::from_secs(60);
        while !cond() {
            assert!(Instant::now() < until, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
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
            PeerExporter(fabric.clone(), AtomicU32::new(0)),
            PeerList::new(&config, false),
            RunnerSettings {
                node: "node-a".into(),
                probe: PeerSettings::default(),
                refresh: Duration::from_secs(1),
                subnet_of: |_| None,
            },
        )
        .unwrap();
        wait_for("the file's error", || {
            runner.list_errors().iter().any(|e| e.contains("peers.txt"))
        });
        std::fs::write(&file, "node-b:9879\n").unwrap();
        wait_for("the error cleared", || runner.list_errors().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_peer_started_late_or_restarted_with_a_new_qpn_is_fetched_again_without_a_restart() {
        let fabric = Fabric::default();
        fabric.live_qpn.store(11, Ordering::SeqCst);
        fabric.empty_docs.store(1, Ordering::SeqCst);
        let config = PeerProbeConfig {
            enabled: true,
            peers: vec!["node-b:9879".into()],
            ..PeerProbeConfig::default()
        };
        let runner = PeerRunner::spawn(
            fabric.clone(),
            // The peer starts after this exporter: its first fetch fails,
            // the second finds its responder not open yet.
            PeerExporter(fabric.clone(), AtomicU32::new(1)),
            PeerList::new(&config, false),
            RunnerSettings {
                node: "node-a".into(),
                probe: PeerSettings {
                    packets_per_second: 50.0,
                    ..PeerSettings::default()
                },
                // Far beyond the test: only a failure can trigger the re-fetch.
                refresh: Duration::from_secs(3600),
                subnet_of: |_| None,
            },
        )
        .unwrap();
        runner.set_targets(vec![LocalTarget {
            device: "rxe0".into(),
            port: 1,
            gid_index: 1,
            traffic_class: 104,
            device_index: 0,
        }]);
        let answered = |r: &PeerResults| r.ports.first().map_or(0, |(_, s)| s.small.answered);
        let sent = |r: &PeerResults| r.ports.first().map_or(0, |(_, s)| s.small.sent);
        wait_for("answers from the first QPN", || {
            answered(&runner.results()) > 0
        });
        let r = runner.results();
        assert_eq!(r.endpoints.len(), 1);
        assert_eq!(r.endpoints[0].node, "node-a");
        assert_eq!((r.peers_configured, r.peers_fetched), (1, 1));
        // The peer restarts: its old QPN is gone; its document is empty
        // at first (responder opening), then names the new QPN.
        fabric.empty_docs.store(2, Ordering::SeqCst);
        fabric.live_qpn.store(99, Ordering::SeqCst);
        let before = runner.results();
        wait_for("a probe to the old QPN lost", || {
            let r = runner.results();
            sent(&r) - answered(&r) > sent(&before) - answered(&before)
        });
        // The old QPN never answers again: any answer now is the new one's,
        // which only a re-fetch (not due for an hour) can have brought.
        let after_loss = answered(&runner.results());
        wait_for("answers from the new QPN", || {
            answered(&runner.results()) > after_loss
        });
        let r = runner.results();
        assert_eq!(r.fetch_errors.get("connect"), Some(&1));
        assert_eq!((r.peers_configured, r.peers_fetched), (1, 1));
    }
}
