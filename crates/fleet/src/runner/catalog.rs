//! The coordinator's plan and state: which peers are known, which
//! requests to start and when, what each finished request admits, and who
//! holds a node two addresses claim.
//!
//! Its cost per tick does not grow with peers that do not change: the
//! retries and refetches wait in a queue ordered by time, the failing
//! peer ports are looked up by key, the walk over new peers keeps its
//! cursor, and the counts are kept as they change. Only a new peer list
//! (once per refresh, and only when it differs), a change of this node's
//! port subnets and publishing a changed endpoint set (at most once per
//! tick) walk every peer.

use super::owners::{effective_proof, Owners, MAX_LOOKUPS};
use super::pool::{FetchJob, Finished};
use super::*;
use crate::peer_address::PortSubnet;
use crate::peer_endpoints::{Claim, Proof};
use roce_host::HostError;
use std::collections::HashMap;

mod identity;

/// One peer address as the coordinator knows it.
#[derive(Debug, Clone, Default)]
pub(super) struct PeerEntry {
    /// Its admitted endpoints (kept when a later fetch fails: a stopped
    /// peer shows as unreachable, not gone), shared with the publication.
    pub(super) endpoints: Vec<Arc<Endpoint>>,
    /// Whether it holds the node they name: its endpoints are probed. A
    /// refused claim keeps its endpoints should a proof give it the node.
    pub(super) held: bool,
    /// The node its endpoints name.
    pub(super) node: Option<String>,
    /// What proves that node (before DNS).
    pub(super) proof: Proof,
    /// Whether a fetch was started at all.
    pub(super) tried: bool,
    pub(super) in_flight: bool,
    /// Consecutive fetches that failed or found no endpoint.
    pub(super) failures: u32,
    /// When to try again after such a fetch (also in the due queue).
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
    pub(super) entries: HashMap<PeerAddress, PeerEntry>,
    /// This node's walk: the listed peers in an order of its own.
    pub(super) order: Vec<PeerAddress>,
    /// Where the walk over peers not tried yet goes on.
    next_new: usize,
    /// Listed peers never tried: this node is still learning its peers.
    untried: usize,
    /// Where this node's walk starts (random per start: the fleet does
    /// not fetch, nor probe, the same peers first).
    pub(super) offset: u64,
    /// The pace of new documents ([`FetchPace`]).
    pub(super) pace: FetchPace,
    pub(super) tokens: f64,
    pub(super) tokens_at: Option<Instant>,
    /// First documents fetched, and how many of them said their node was
    /// still learning: the fetch pace (see [`Catalog::rate`]).
    first_documents: (u64, u64),
    /// Retries after failed or empty fetches, by time.
    due: BTreeSet<(Instant, PeerAddress)>,
    /// Who holds each node, and the refused claims.
    pub(super) owners: Owners,
    /// Entries with endpoints.
    known: usize,
    pub(super) list_due: Option<Instant>,
    pub(super) query_due: Option<Instant>,
    pub(super) query_failures: u32,
    /// List or query in flight.
    pub(super) pass_in_flight: bool,
    pub(super) in_flight: usize,
    /// Prometheus mode: the admitted fleet.
    pub(super) fleet: Vec<Arc<Endpoint>>,
    pub(super) fleet_peers: (usize, usize),
    /// This node's port subnets (`None` until a port is open: documents
    /// wait for them, their endpoints are checked against them).
    pub(super) subnets: Option<Vec<PortSubnet>>,
    /// Node names to resolve (a DNS proof for two claims).
    pub(super) to_prove: BTreeSet<String>,
    /// The admitted endpoints changed since the last publication.
    pub(super) changed: bool,
}

/// The interval after `n` unfruitful tries: 5 s, 10 s, 20 s, … up to `max`.
pub(super) fn backoff(n: u32, max: Duration) -> Duration {
    let f = 1u32 << n.saturating_sub(1).min(12);
    (REFETCH_AFTER_FAILURE * f).min(max.max(REFETCH_AFTER_FAILURE))
}

impl Catalog {
    pub(super) fn new(
        mode: DiscoveryMode,
        refresh: Duration,
        offset: u64,
        pace: FetchPace,
    ) -> Catalog {
        Catalog {
            mode,
            refresh: refresh.max(Duration::from_secs(1)),
            entries: HashMap::new(),
            order: Vec::new(),
            next_new: 0,
            untried: 0,
            offset,
            pace,
            tokens: pace.burst,
            tokens_at: None,
            first_documents: (0, 0),
            due: BTreeSet::new(),
            owners: Owners::default(),
            known: 0,
            list_due: None,
            query_due: None,
            query_failures: 0,
            pass_in_flight: false,
            in_flight: 0,
            fleet: Vec::new(),
            fleet_peers: (0, 0),
            subnets: None,
            to_prove: BTreeSet::new(),
            changed: false,
        }
    }

    /// New documents per second: the starting pace ([`FETCH_RATE_START`])
    /// while the peers fetched so far are themselves still learning theirs
    /// (the fleet is starting: every node fetches, and the fleet's rate is
    /// bounded by this pace), the running one ([`FETCH_RATE`]) once most of
    /// them know their peers (this node joined or restarted in a running
    /// fleet: its peers are probing it already and it should learn them
    /// soon).
    pub(super) fn rate(&self) -> f64 {
        let (seen, learning) = self.first_documents;
        if seen >= 8 && 2 * learning < seen {
            self.pace.running
        } else {
            self.pace.starting
        }
    }

    /// Whether some listed peer was never tried yet (this node's
    /// documents say `learning`).
    pub(super) fn learning(&self) -> bool {
        self.mode == DiscoveryMode::Documents && (self.untried > 0 || self.list_due.is_none())
    }

    /// Whether `addr`'s endpoints are probed (held: it holds their node).
    fn hold(&mut self, addr: &PeerAddress, held: bool) {
        let Some(e) = self.entries.get_mut(addr) else {
            return;
        };
        let held = held && !e.endpoints.is_empty();
        if e.held != held {
            self.changed = true;
            if held {
                self.known += 1;
            } else {
                self.known -= 1;
            }
        }
        e.held = held;
    }

    fn set_retry(&mut self, addr: &PeerAddress, at: Option<Instant>) {
        let Some(e) = self.entries.get_mut(addr) else {
            return;
        };
        if let Some(old) = e.retry_at.take() {
            self.due.remove(&(old, addr.clone()));
        }
        e.retry_at = at;
        if let Some(t) = at {
            self.due.insert((t, addr.clone()));
        }
    }

    /// A new peer list: entries of peers no longer listed are dropped (and
    /// the nodes they held freed for the claims waiting on them).
    pub(super) fn set_list(&mut self, mut peers: Vec<PeerAddress>) {
        peers.sort();
        peers.dedup();
        let listed: BTreeSet<&PeerAddress> = peers.iter().collect();
        let gone: Vec<PeerAddress> = self
            .entries
            .iter()
            .filter(|(a, e)| !listed.contains(a) && !e.in_flight)
            .map(|(a, _)| a.clone())
            .collect();
        for a in gone {
            self.hold(&a, false);
            self.set_retry(&a, None);
            if let Some(e) = self.entries.remove(&a) {
                self.untried -= usize::from(!e.tried);
                if let Some(node) = e.node {
                    self.release(&node, &a);
                }
            }
        }
        let mut added = false;
        for p in &peers {
            if !self.entries.contains_key(p) {
                self.entries.insert(p.clone(), PeerEntry::default());
                self.untried += 1;
                added = true;
            }
        }
        let n = peers.len().max(1);
        let start = (self.offset % n as u64) as usize;
        let order: Vec<PeerAddress> = peers
            .iter()
            .cycle()
            .skip(start)
            .take(peers.len())
            .cloned()
            .collect();
        if order != self.order || added {
            self.order = order;
            self.next_new = 0;
        }
    }

    /// This node's port subnets. A change once documents were admitted
    /// against other ones asks for every document again (a port's address
    /// changed: what was admitted may not be, and the reverse).
    pub(super) fn set_subnets(&mut self, subnets: Vec<PortSubnet>) {
        match &self.subnets {
            Some(s) if *s == subnets => return,
            Some(_) => {
                let addrs: Vec<PeerAddress> = self.entries.keys().cloned().collect();
                for a in &addrs {
                    self.hold(a, false);
                    self.set_retry(a, None);
                    if let Some(e) = self.entries.get_mut(a) {
                        self.untried += usize::from(e.tried);
                        e.tried = false;
                        e.endpoints.clear();
                        e.node = None;
                    }
                }
                self.owners = Owners::default();
                self.next_new = 0;
                // The fleet's answer is asked for again.
                self.query_due = None;
            }
            None => {}
        }
        self.subnets = Some(subnets);
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
            // Admitted against this node's port subnets: not before a
            // port is open.
            DiscoveryMode::Prometheus if self.subnets.is_some() => {
                if !self.pass_in_flight && self.query_due.is_none_or(|t| now >= t) {
                    self.pass_in_flight = true;
                    jobs.push(FetchJob::Query);
                }
            }
            DiscoveryMode::Prometheus => {}
            DiscoveryMode::Documents => self.plan_documents(now, free, failing, &mut jobs),
        }
        while jobs.len() < free {
            let Some(node) = self.to_prove.pop_first() else {
                break;
            };
            jobs.push(FetchJob::Prove(node));
        }
        self.in_flight += jobs.len();
        jobs
    }

    fn plan_documents(
        &mut self,
        now: Instant,
        free: usize,
        failing: &BTreeSet<PeerKey>,
        jobs: &mut Vec<FetchJob>,
    ) {
        if !self.pass_in_flight && self.list_due.is_none_or(|t| now >= t) {
            self.pass_in_flight = true;
            jobs.push(FetchJob::List);
        }
        // Documents are checked against this node's port subnets: none
        // before a port is open.
        if self.subnets.is_none() {
            return;
        }
        if let Some(at) = self.tokens_at {
            let add = now.saturating_duration_since(at).as_secs_f64() * self.rate();
            self.tokens = (self.tokens + add).min(self.pace.burst);
        }
        self.tokens_at = Some(now);
        // Peers whose probes fail, then peers to try again, then new ones
        // in this node's order, at the pace of [`Catalog::rate`].
        let mut pick: Vec<PeerAddress> = Vec::new();
        for key in failing {
            let Some(addr) = self
                .owners
                .holder(&key.node)
                .map(|h| PeerAddress(h.to_string()))
            else {
                continue;
            };
            let Some(e) = self.entries.get(&addr) else {
                continue;
            };
            if !e.in_flight && e.refetch_at.is_none_or(|t| now >= t) && !pick.contains(&addr) {
                pick.push(addr);
            }
        }
        while pick.len() + jobs.len() < free {
            let Some((t, addr)) = self.due.first().cloned() else {
                break;
            };
            if t > now {
                break;
            }
            self.due.pop_first();
            if let Some(e) = self.entries.get_mut(&addr) {
                e.retry_at = None;
                if !e.in_flight && !pick.contains(&addr) {
                    pick.push(addr);
                }
            }
        }
        while self.tokens >= 1.0 && pick.len() + jobs.len() < free {
            let Some(addr) = self.order.get(self.next_new) else {
                break;
            };
            self.next_new += 1;
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
            if !e.tried {
                e.tried = true;
                self.untried -= 1;
            }
            e.in_flight = true;
            self.set_retry(&addr, None);
            jobs.push(FetchJob::Document(addr));
        }
    }

    /// Every admitted endpoint now (rebuilt when published; the endpoints
    /// themselves are shared, not copied).
    pub(super) fn endpoints(&self) -> Vec<Arc<Endpoint>> {
        match self.mode {
            DiscoveryMode::Prometheus => self.fleet.clone(),
            // In no order: each port sorts the ones on its rail.
            DiscoveryMode::Documents => self
                .entries
                .values()
                .filter(|e| e.held)
                .flat_map(|e| e.endpoints.iter().cloned())
                .collect(),
        }
    }

    /// (listed, known) peers.
    pub(super) fn peer_counts(&self) -> (usize, usize) {
        match self.mode {
            DiscoveryMode::Prometheus => self.fleet_peers,
            DiscoveryMode::Documents => (self.entries.len(), self.known),
        }
    }

    /// Takes a finished job in (the endpoints to publish are marked
    /// [`Catalog::changed`]).
    pub(super) fn apply(
        &mut self,
        done: Finished,
        now: Instant,
        admission: &Admission,
        d: &mut PeerDiscovery,
    ) {
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
                self.set_list(peers);
            }
            Finished::Document(addr, result) => self.document(addr, result, now, admission, d),
            Finished::Query(result) => {
                self.pass_in_flight = false;
                d.passes += 1;
                match result {
                    Ok(series) => {
                        self.query_failures = 0;
                        self.query_due = Some(now + self.refresh);
                        self.admit_fleet(series, now, admission, &mut d.refused);
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
                    }
                }
            }
            Finished::Proved(node, addresses) => {
                self.owners.proved(&node, addresses, now);
                match self.mode {
                    // The fleet's answer is not kept: it is asked for
                    // again when the proof gives the node to another
                    // instance than its holder.
                    DiscoveryMode::Prometheus => {
                        if self.proof_moves(&node, now) {
                            self.query_due = None;
                        }
                    }
                    DiscoveryMode::Documents => {
                        self.settle(&node, now);
                    }
                }
            }
        }
        d.conflicts = self.owners.conflicts();
    }

    fn document(
        &mut self,
        addr: PeerAddress,
        result: Result<Vec<Endpoint>, FetchError>,
        now: Instant,
        admission: &Admission,
        d: &mut PeerDiscovery,
    ) {
        let refresh = self.refresh;
        let first = self.entries.get(&addr).is_some_and(|e| e.node.is_none());
        let Some(entry) = self.entries.get_mut(&addr) else {
            return;
        };
        entry.in_flight = false;
        let eps = match result {
            Ok(eps) if eps.is_empty() => {
                // Its responders still opening: asked again soon; what it
                // had is kept.
                entry.failures += 1;
                let next = now + backoff(entry.failures, MAX_RETRY_INTERVAL);
                entry.refetch_at = Some(next);
                self.set_retry(&addr, Some(next));
                return;
            }
            Ok(eps) => eps,
            Err(e) => {
                *d.fetch_errors.entry(e.reason).or_insert(0) += 1;
                if entry.last_error.as_ref() != Some(&e.message) {
                    tracing::warn!(peer = %addr.0, reason = e.reason.as_str(), "cannot fetch peer endpoints: {}", e.message);
                    entry.last_error = Some(e.message);
                }
                entry.failures += 1;
                let next = now + backoff(entry.failures, MAX_RETRY_INTERVAL);
                entry.refetch_at = Some(next);
                self.set_retry(&addr, Some(next));
                return;
            }
        };
        if first {
            self.first_documents.0 += 1;
            self.first_documents.1 += u64::from(eps.iter().any(|e| e.learning));
        }
        let ports = self.subnets.clone().unwrap_or_default();
        let claim = Claim {
            host: addr.host(),
            target_node: None,
        };
        let admitted = admission.admit(claim, eps, &ports);
        for (r, n) in &admitted.refused {
            *d.refused.entry(*r).or_insert(0) += n;
        }
        let Some(entry) = self.entries.get_mut(&addr) else {
            return;
        };
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
        let same = admitted.endpoints.len() == entry.endpoints.len()
            && admitted
                .endpoints
                .iter()
                .zip(&entry.endpoints)
                .all(|(a, b)| a == b.as_ref());
        if !same && entry.held {
            self.changed = true;
        }
        if same {
            // The same document while probes fail (a black-holed path,
            // not a restart): asked again less and less often.
            entry.refetches += 1;
            entry.refetch_at = Some(now + backoff(entry.refetches, MAX_REFETCH_INTERVAL));
        } else {
            // New QPNs or a new incarnation: probes resume, and failures
            // ask again soon.
            entry.refetches = 0;
            entry.refetch_at = None;
        }
        let old_node = entry.node.clone();
        entry.proof = admitted.proof;
        entry.node = admitted.node.clone();
        entry.endpoints = admitted.endpoints.into_iter().map(Arc::new).collect();
        // A document with nothing admissible is asked for again at the
        // refresh, not sooner.
        let nothing = entry.endpoints.is_empty();
        self.set_retry(&addr, nothing.then(|| now + refresh));
        if let Some(old) = old_node.filter(|o| Some(o) != admitted.node.as_ref()) {
            self.release(&old, &addr);
        }
        match admitted.node {
            Some(node) => {
                self.owners.claim(&node, &addr.0);
                let holder = self.settle(&node, now);
                let refused = self.entries.get(&addr).map_or(0, |e| e.endpoints.len());
                if holder.as_deref() != Some(addr.0.as_str()) && refused > 0 {
                    *d.refused.entry(Refusal::NodeClaimed).or_insert(0) += refused as u64;
                    tracing::warn!(peer = %addr.0, node = %node, holder = holder.as_deref().unwrap_or(""), "peer endpoints name a node another peer address holds: refused (both claims reported in roce_peer_probe_node_conflict_info)");
                }
            }
            None => self.hold(&addr, false),
        }
    }

    /// Admits the endpoints of a Prometheus answer, grouped by the
    /// instance each was scraped from (the peer), exactly as documents
    /// are; a node claimed by two instances goes to the one holding it
    /// before, else the proven one, else the first in sorted order, both
    /// reported.
    fn admit_fleet(
        &mut self,
        series: Vec<FleetSeries>,
        now: Instant,
        admission: &Admission,
        refused: &mut BTreeMap<Refusal, u64>,
    ) {
        let mut by_instance: BTreeMap<String, (Vec<Endpoint>, Option<String>)> = BTreeMap::new();
        for s in series {
            let slot = by_instance.entry(s.instance).or_default();
            if slot.1.is_none() {
                slot.1 = s.target_node;
            }
            match s.endpoint {
                Ok(e) => slot.0.push(e),
                Err(r) => *refused.entry(r).or_insert(0) += 1,
            }
        }
        let ports = self.subnets.clone().unwrap_or_default();
        let listed = by_instance.len();
        let mut claims: BTreeMap<String, Vec<(String, Proof, Vec<Endpoint>)>> = BTreeMap::new();
        for (instance, (eps, target_node)) in &mut by_instance {
            let host = instance_host(instance);
            let claim = Claim {
                host,
                target_node: target_node.as_deref(),
            };
            let admitted = admission.admit(claim, std::mem::take(eps), &ports);
            for (r, n) in &admitted.refused {
                *refused.entry(*r).or_insert(0) += n;
            }
            if let Some(node) = admitted.node.filter(|_| !admitted.endpoints.is_empty()) {
                let proof = effective_proof(&self.owners, &node, host, admitted.proof, now);
                claims.entry(node).or_default().push((
                    instance.to_string(),
                    proof,
                    admitted.endpoints,
                ));
            }
        }
        let mut owners = Owners::for_new_answer(&self.owners);
        let mut fleet = Vec::new();
        for (node, mut list) in claims {
            for (instance, _, _) in &list {
                owners.claim(&node, instance);
            }
            let proofs: Vec<(String, Proof)> =
                list.iter().map(|(i, p, _)| (i.clone(), *p)).collect();
            let holder = owners.decide(&node, &proofs);
            for (instance, proof, eps) in list.drain(..) {
                if Some(&instance) == holder.as_ref() {
                    fleet.extend(eps.into_iter().map(Arc::new));
                } else {
                    *refused.entry(Refusal::NodeClaimed).or_insert(0) += eps.len() as u64;
                    let host = instance_host(&instance);
                    if !proof.proven()
                        && host_is_ip(host)
                        && self.to_prove.len() < MAX_LOOKUPS
                        && owners.should_prove(&node, now)
                    {
                        self.to_prove.insert(node.clone());
                    }
                }
            }
        }
        fleet.sort();
        let known = owners.holders();
        if fleet != self.fleet {
            self.changed = true;
        }
        self.owners = owners;
        self.fleet = fleet;
        self.fleet_peers = (listed, known);
    }
}

/// Whether a peer's host is an address (a DNS proof can bind a node name
/// to it).
fn host_is_ip(host: &str) -> bool {
    crate::peer_endpoints::host_is_address(host)
}
