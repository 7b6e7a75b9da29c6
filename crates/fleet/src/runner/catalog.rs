//! The coordinator's plan and state: which peers are known, which
//! requests to start and when, and what each finished request admits.

use super::pool::{FetchJob, Finished};
use super::*;
use roce_host::HostError;

/// One peer address as the coordinator knows it.
#[derive(Debug, Clone, Default)]
pub(super) struct PeerEntry {
    /// Its admitted endpoints (kept when a later fetch fails: a stopped
    /// peer shows as unreachable, not gone).
    pub(super) endpoints: Vec<Endpoint>,
    /// The node its endpoints name.
    pub(super) node: Option<String>,
    /// Whether a fetch was started at all.
    pub(super) tried: bool,
    pub(super) in_flight: bool,
    /// Consecutive fetches that failed or found no endpoint.
    pub(super) failures: u32,
    /// When to try again after such a fetch.
    pub(super) retry_at: Option<Instant>,
    /// Fetches for failing probes since the endpoints last changed.
    pub(super) refetches: u32,
    /// The soonest next fetch for failing probes.
    pub(super) refetch_at: Option<Instant>,
    /// Last error text, logged on change.
    pub(super) last_error: Option<String>,
    /// The reasons its last document's endpoints were refused for (the
    /// counts aside: a document refused the same way is logged once).
    pub(super) last_refused: Vec<crate::peer_endpoints::Refusal>,
}

/// The coordinator's plan: which requests to start and when (no clock
/// and no I/O of its own: `now` is handed in, so tests drive it).
pub(super) struct Catalog {
    pub(super) mode: DiscoveryMode,
    pub(super) refresh: Duration,
    pub(super) entries: BTreeMap<PeerAddress, PeerEntry>,
    /// This node's walk: the listed peers in an order of its own.
    pub(super) order: Vec<PeerAddress>,
    /// Where this node's walk starts (random per start: the fleet does
    /// not fetch, nor probe, the same peers first).
    pub(super) offset: u64,
    /// New documents fetched at most at this pace (tokens per second), up
    /// to [`FETCH_BURST`] at once.
    pub(super) rate: f64,
    pub(super) tokens: f64,
    pub(super) tokens_at: Option<Instant>,
    pub(super) list_due: Option<Instant>,
    pub(super) query_due: Option<Instant>,
    pub(super) query_failures: u32,
    /// List or query in flight.
    pub(super) pass_in_flight: bool,
    pub(super) in_flight: usize,
    /// Prometheus mode: the admitted fleet.
    pub(super) fleet: Vec<Endpoint>,
    pub(super) fleet_peers: (usize, usize),
}

/// The interval after `n` unfruitful tries: 5 s, 10 s, 20 s, … up to `max`.
pub(super) fn backoff(n: u32, max: Duration) -> Duration {
    let f = 1u32 << n.saturating_sub(1).min(12);
    (REFETCH_AFTER_FAILURE * f).min(max.max(REFETCH_AFTER_FAILURE))
}

impl Catalog {
    pub(super) fn new(mode: DiscoveryMode, refresh: Duration, rate: f64, offset: u64) -> Catalog {
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
    pub(super) fn set_list(&mut self, peers: Vec<PeerAddress>) {
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
    pub(super) fn plan(
        &mut self,
        now: Instant,
        free: usize,
        failing: &BTreeSet<PeerKey>,
    ) -> Vec<FetchJob> {
        let mut jobs = Vec::new();
        if free == 0 {
            return jobs;
        }
        match self.mode {
            DiscoveryMode::Prometheus => {
                if !self.pass_in_flight && self.query_due.is_none_or(|t| now >= t) {
                    self.pass_in_flight = true;
                    jobs.push(FetchJob::Query);
                }
                self.in_flight += jobs.len();
                return jobs;
            }
            DiscoveryMode::Documents => {}
        }
        if !self.pass_in_flight && self.list_due.is_none_or(|t| now >= t) {
            self.pass_in_flight = true;
            jobs.push(FetchJob::List);
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
            jobs.push(FetchJob::Document(addr));
        }
        self.in_flight += jobs.len();
        jobs
    }

    /// Whether a node is claimed by a listed address other than `addr`.
    pub(super) fn claimed_by_other(&self, node: &str, addr: &PeerAddress) -> bool {
        self.entries
            .iter()
            .any(|(a, e)| a != addr && e.node.as_deref() == Some(node) && !e.endpoints.is_empty())
    }

    /// Every admitted endpoint now.
    pub(super) fn endpoints(&self) -> Vec<Endpoint> {
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
    pub(super) fn peer_counts(&self) -> (usize, usize) {
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
    pub(super) fn apply(
        &mut self,
        done: Finished,
        now: Instant,
        admission: &Admission,
        d: &mut PeerDiscovery,
    ) -> bool {
        self.in_flight = self.in_flight.saturating_sub(1);
        match done {
            Finished::List(peers, errors) => {
                self.pass_in_flight = false;
                self.list_due = Some(now + self.refresh);
                d.passes += 1;
                d.list_errors = errors
                    .iter()
                    .map(|e| HostError::request_of("peer_probes peer list", e, e.kind()))
                    .collect();
                let before = self.endpoints().len();
                self.set_list(peers);
                before != self.endpoints().len()
            }
            Finished::Document(addr, result) => {
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
                        // Logged when the reasons change, not every fetch.
                        let reasons: Vec<_> = admitted.refused.keys().copied().collect();
                        if reasons != entry.last_refused {
                            if reasons.is_empty() {
                                tracing::info!(peer = %addr.0, "peer endpoints no longer refused");
                            } else {
                                tracing::warn!(peer = %addr.0, refused = ?admitted.refused.iter().map(|(r, n)| (r.as_str(), *n)).collect::<Vec<_>>(), "peer endpoints refused");
                            }
                            entry.last_refused = reasons;
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
            Finished::Query(result) => {
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
pub(super) fn admit_fleet(
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
