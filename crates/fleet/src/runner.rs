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
//! node's walk over the list reaches it (in an order of this node's own),
//! kept while probes to it pass, and fetched again only when probes to it
//! fail (a restarted peer has new QPNs), with a growing interval while
//! that brings nothing new. The walk's pace bounds what a fleet starting
//! at once asks of itself: [`FETCH_RATE_START`] new documents a second
//! per node while the peers it reads are themselves still learning
//! theirs (3,000 requests/s fleet-wide at 1,000 nodes, each exporter
//! serving 3/s), [`FETCH_RATE`] once most of them are not (a node joining
//! or restarting in a running fleet learns its peers in seconds). Until a
//! node has tried every listed peer once its endpoints say `learning`: a
//! responder answers only the peers whose endpoints it holds, so the
//! probers it does not know yet call their unanswered probes pending
//! (`roce_probe::peer::Endpoint::learning`), not lost.
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

use crate::peer_address::PortSubnet;
use crate::peer_endpoints::{instance_host, Admission, Fetch, FleetSeries, Query, Refusal};
use crate::peer_http::{FetchError, FetchReason};
use crate::peer_list::{PeerAddress, PeerList};
use crate::peer_rails::LocalPort;

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
/// New peers' documents fetched a second while the peers read so far are
/// themselves still learning theirs (a fleet starting at once): 1,000
/// nodes make 3,000 requests a second together, each exporter serving
/// about 3 a second, and a node knows its 999 peers after 5.5 minutes
/// (the first walk of its probes over them takes ≈6.7 minutes at the
/// default rate).
pub const FETCH_RATE_START: f64 = 3.0;
/// New peers' documents fetched a second once most peers read know theirs
/// (this node joined or restarted in a running fleet): 1,000 peers in 20
/// s, 10,000 in 200 s.
pub const FETCH_RATE: f64 = 50.0;
/// The pace of new documents: at once, and per second while the fleet is
/// starting and once it runs (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FetchPace {
    pub burst: f64,
    pub starting: f64,
    pub running: f64,
}

impl Default for FetchPace {
    fn default() -> Self {
        FetchPace {
            burst: FETCH_BURST,
            starting: FETCH_RATE_START,
            running: FETCH_RATE,
        }
    }
}

/// A changed set of admitted endpoints is handed to the port threads at
/// most this often: each hand-over costs them a pass over the peers on
/// their rail (and the coordinator one over all), which a first walk
/// would otherwise pay for every few documents.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);
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

/// The subnet of a GID's address on this host's interface (the rail key
/// for IPv4, the fabric the admission checks peers against).
pub type SubnetOf = fn(&std::net::Ipv6Addr) -> Option<PortSubnet>;

/// The addresses a node name resolves to, given up at the deadline (the
/// system resolver in the exporter, a table in tests).
pub type Resolve = fn(&str, Duration) -> Vec<std::net::IpAddr>;

/// The system resolver (DNS, `/etc/hosts`), on a thread of its own.
pub fn system_resolve(node: &str, deadline: Duration) -> Vec<std::net::IpAddr> {
    owners::resolve(node, deadline)
}

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
struct PublishedPort {
    endpoint: Option<Endpoint>,
    stats: roce_probe::peer::PortStats,
    /// The rail this port computed (`None`: none could be).
    rail: Option<String>,
    /// The subnet of its GID on this host (the fabric it admits peers in).
    subnet: Option<PortSubnet>,
    /// The publication of the peers its responder admits now.
    applied: u64,
    /// Why the port is not probing (open failed), for the log.
    failure: Option<String>,
    unavailable: Option<String>,
}

#[derive(Default)]
struct Shared {
    targets: Mutex<Vec<LocalTarget>>,
    /// Every admitted peer endpoint, with the number of its publication.
    peers: Mutex<(u64, Arc<Vec<Arc<Endpoint>>>)>,
    ports: Mutex<BTreeMap<(String, u8), PublishedPort>>,
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
    /// The deadline of a DNS lookup proving a node name.
    pub fetch_timeout: Duration,
    /// How node names are resolved (a DNS proof of one of two claims).
    pub resolve: Resolve,
    /// The pace of new documents (the default in the exporter).
    pub pace: FetchPace,
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
    pub fn list_errors(&self) -> Vec<roce_host::HostError> {
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
        let learning = lock(&self.shared.discovery).learning;
        for e in &mut out.endpoints {
            e.learning = learning;
        }
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

mod catalog;
mod coordinator;
mod owners;
mod pool;
mod port;

use coordinator::coordinate;
pub use port::gap_after;

#[cfg(test)]
mod tests;

/// The figures of `bench/peer_discovery.py`: requests one node makes for
/// endpoints over simulated time, with the coordinator's own planning, per
/// discovery mode, at fleet sizes of 1,000 and 10,000; and the size and
/// parse cost of a Prometheus answer for the whole fleet. Ignored: run by
/// the script (release build).
#[cfg(test)]
mod bench;
