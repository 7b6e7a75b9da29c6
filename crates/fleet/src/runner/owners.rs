//! Who holds a node name that several peer addresses claim. A node's
//! identity (its history, its findings, the series named after it) is
//! bound to what can prove it ([`Proof`]: the name the peer is addressed
//! by, with https its certificate; the Prometheus target's own `node`
//! label; DNS: the name resolves to the peer's address). The first claim
//! holds the node; a later claim takes it over only when it proves what
//! the holder's does not, so a claim from a second address never evicts
//! the real holder without proof, and an impostor that came first loses
//! the node to the real one as soon as DNS (or a name, or a target label)
//! says which is which. Every node claimed twice is reported with both
//! claims ([`NodeConflict`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use roce_model::peer::NodeConflict;

use crate::peer_endpoints::Proof;

/// A node name's DNS answer is used this long, and a node is looked up
/// again at most this often.
pub(super) const PROOF_INTERVAL: Duration = Duration::from_secs(300);
/// Conflicts reported at most (the series stay bounded whatever a fleet
/// of impostors does).
pub(super) const MAX_CONFLICTS: usize = 16;
/// Node names waiting for a lookup at most.
pub(super) const MAX_LOOKUPS: usize = 64;

#[derive(Debug, Clone, Default)]
struct Claims {
    /// In the order they came; each with its proof at the last decision.
    by: Vec<(String, Proof)>,
    holder: Option<String>,
}

/// The claims on each node name, its holder, and the DNS answers of names.
#[derive(Debug, Clone, Default)]
pub(super) struct Owners {
    nodes: BTreeMap<String, Claims>,
    dns: HashMap<String, (Vec<IpAddr>, Instant)>,
    asked: HashMap<String, Instant>,
}

impl Owners {
    /// The holders and DNS answers of `before`, without its claims: the
    /// claims of a new Prometheus answer are made afresh, and a node keeps
    /// its holder when that instance claims it again.
    pub(super) fn for_new_answer(before: &Owners) -> Owners {
        Owners {
            nodes: before
                .nodes
                .iter()
                .map(|(n, c)| {
                    (
                        n.clone(),
                        Claims {
                            by: Vec::new(),
                            holder: c.holder.clone(),
                        },
                    )
                })
                .collect(),
            dns: before.dns.clone(),
            asked: before.asked.clone(),
        }
    }

    /// `addr` claims `node` (kept in the order of the claims).
    pub(super) fn claim(&mut self, node: &str, addr: &str) {
        let c = self.nodes.entry(node.to_string()).or_default();
        if !c.by.iter().any(|(a, _)| a == addr) {
            c.by.push((addr.to_string(), Proof::None));
        }
    }

    /// `addr` no longer claims `node`.
    pub(super) fn unclaim(&mut self, node: &str, addr: &str) {
        if let Some(c) = self.nodes.get_mut(node) {
            c.by.retain(|(a, _)| a != addr);
            if c.holder.as_deref() == Some(addr) {
                c.holder = None;
            }
            if c.by.is_empty() {
                self.nodes.remove(node);
            }
        }
    }

    /// The addresses claiming `node`, first claim first.
    pub(super) fn claimants(&self, node: &str) -> Vec<String> {
        self.nodes
            .get(node)
            .map(|c| c.by.iter().map(|(a, _)| a.clone()).collect())
            .unwrap_or_default()
    }

    /// Decides who holds `node` given each claim's proof now: the holder
    /// stays unless another claim is proven and its own is not; without a
    /// holder, the first proven claim, else the first claim.
    pub(super) fn decide(&mut self, node: &str, proofs: &[(String, Proof)]) -> Option<String> {
        let c = self.nodes.get_mut(node)?;
        for (a, p) in c.by.iter_mut() {
            if let Some((_, q)) = proofs.iter().find(|(b, _)| b == a) {
                *p = *q;
            }
        }
        let proof_of = |a: &str| {
            c.by.iter()
                .find(|(b, _)| b == a)
                .map_or(Proof::None, |(_, p)| *p)
        };
        let first_proven =
            c.by.iter()
                .find(|(_, p)| p.proven())
                .map(|(a, _)| a.clone());
        let holder = match c
            .holder
            .clone()
            .filter(|h| c.by.iter().any(|(a, _)| a == h))
        {
            Some(h) if proof_of(&h).proven() => h,
            Some(h) => first_proven.unwrap_or(h),
            None => first_proven.or_else(|| c.by.first().map(|(a, _)| a.clone()))?,
        };
        c.holder = Some(holder.clone());
        Some(holder)
    }

    /// The address holding `node`.
    pub(super) fn holder(&self, node: &str) -> Option<&str> {
        self.nodes.get(node)?.holder.as_deref()
    }

    /// Nodes with a holder.
    pub(super) fn holders(&self) -> usize {
        self.nodes.values().filter(|c| c.holder.is_some()).count()
    }

    /// Whether `node` may be looked up now (not within
    /// [`PROOF_INTERVAL`] of the last time); marks it asked when so.
    pub(super) fn should_prove(&mut self, node: &str, now: Instant) -> bool {
        if self
            .asked
            .get(node)
            .is_some_and(|t| now.saturating_duration_since(*t) < PROOF_INTERVAL)
        {
            return false;
        }
        if self.asked.len() >= 4 * MAX_LOOKUPS {
            self.asked
                .retain(|_, t| now.saturating_duration_since(*t) < PROOF_INTERVAL);
        }
        self.asked.insert(node.to_string(), now);
        true
    }

    /// The addresses `node` resolved to (empty: it did not resolve).
    pub(super) fn proved(&mut self, node: &str, addresses: Vec<IpAddr>, now: Instant) {
        if self.dns.len() >= 4 * MAX_LOOKUPS {
            self.dns
                .retain(|_, (_, t)| now.saturating_duration_since(*t) < PROOF_INTERVAL);
        }
        self.dns.insert(node.to_string(), (addresses, now));
    }

    /// The current DNS answer of `node`.
    fn resolved(&self, node: &str, now: Instant) -> Option<&[IpAddr]> {
        self.dns
            .get(node)
            .filter(|(_, t)| now.saturating_duration_since(*t) < PROOF_INTERVAL)
            .map(|(a, _)| a.as_slice())
    }

    /// Every node claimed by two addresses or more: its holder and each
    /// other claim, with their proofs (at most [`MAX_CONFLICTS`]).
    pub(super) fn conflicts(&self) -> Vec<NodeConflict> {
        let mut out = Vec::new();
        for (node, c) in &self.nodes {
            if c.by.len() < 2 {
                continue;
            }
            let Some(holder) = &c.holder else { continue };
            let holder_proof =
                c.by.iter()
                    .find(|(a, _)| a == holder)
                    .map_or(Proof::None, |(_, p)| *p);
            for (a, p) in c.by.iter().filter(|(a, _)| a != holder) {
                if out.len() >= MAX_CONFLICTS {
                    return out;
                }
                out.push(NodeConflict {
                    node: node.clone(),
                    holder: holder.clone(),
                    holder_proof: holder_proof.as_str(),
                    claimant: a.clone(),
                    claimant_proof: p.as_str(),
                });
            }
        }
        out
    }
}

/// The address a peer's host names: an IP address, or the one a
/// Kubernetes pod name is made of (`10-0-0-5.svc…`).
pub(super) fn host_ip(host: &str) -> Option<IpAddr> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(ip);
    }
    let label = host.split('.').next().unwrap_or("");
    label
        .replace('-', ".")
        .parse::<std::net::Ipv4Addr>()
        .map(IpAddr::V4)
        .ok()
        .or_else(|| label.replace('-', ":").parse().ok().map(IpAddr::V6))
}

/// The proof of a claim on `node` from `host` now: its own (a name, a
/// target label), or DNS where the node's name resolves to the host's
/// address.
pub(super) fn effective_proof(
    owners: &Owners,
    node: &str,
    host: &str,
    own: Proof,
    now: Instant,
) -> Proof {
    if own.proven() {
        return own;
    }
    match (owners.resolved(node, now), host_ip(host)) {
        (Some(addrs), Some(ip)) if addrs.contains(&ip) => Proof::Dns,
        _ => Proof::None,
    }
}

/// The addresses `node` resolves to (system resolver: DNS, `/etc/hosts`),
/// given up at `deadline` (the lookup runs on a thread of its own, which
/// ends by itself when the resolver answers).
pub(super) fn resolve(node: &str, deadline: Duration) -> Vec<IpAddr> {
    use std::net::ToSocketAddrs;
    let (tx, rx) = std::sync::mpsc::channel();
    let name = node.to_string();
    let spawned = std::thread::Builder::new()
        .name("roce-peer-prove".into())
        .spawn(move || {
            let addrs: Vec<IpAddr> = (name.as_str(), 0)
                .to_socket_addrs()
                .map(|it| it.map(|a| a.ip()).take(64).collect())
                .unwrap_or_default();
            let _ = tx.send(addrs);
        });
    if spawned.is_err() {
        return Vec::new();
    }
    rx.recv_timeout(deadline).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claim_holds_until_a_proof_takes_the_node() {
        let mut o = Owners::default();
        o.claim("node-b", "10.0.0.2:9879");
        o.claim("node-b", "10.0.0.9:9879");
        let none = |a: &str| (a.to_string(), Proof::None);
        let dns = |a: &str| (a.to_string(), Proof::Dns);
        // Two unproven claims: the earlier holds, the later never evicts it.
        let h = o.decide("node-b", &[none("10.0.0.2:9879"), none("10.0.0.9:9879")]);
        assert_eq!(h.as_deref(), Some("10.0.0.2:9879"));
        let c = o.conflicts();
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].holder.as_str(), c[0].claimant.as_str()),
            ("10.0.0.2:9879", "10.0.0.9:9879")
        );
        // The later one proves the name (DNS): it takes the node over.
        let h = o.decide("node-b", &[none("10.0.0.2:9879"), dns("10.0.0.9:9879")]);
        assert_eq!(h.as_deref(), Some("10.0.0.9:9879"));
        assert_eq!(o.conflicts()[0].claimant_proof, "none");
        // A proven holder is never displaced, proven challenger or not.
        let h = o.decide("node-b", &[dns("10.0.0.2:9879"), dns("10.0.0.9:9879")]);
        assert_eq!(h.as_deref(), Some("10.0.0.9:9879"));
        // The holder gone, the other claim takes the node.
        o.unclaim("node-b", "10.0.0.9:9879");
        let h = o.decide("node-b", &[none("10.0.0.2:9879")]);
        assert_eq!(h.as_deref(), Some("10.0.0.2:9879"));
        assert!(o.conflicts().is_empty());
    }

    #[test]
    fn dns_proves_a_claim_from_the_address_the_name_resolves_to() {
        let mut o = Owners::default();
        let now = Instant::now();
        assert!(o.should_prove("node-b", now));
        assert!(!o.should_prove("node-b", now + Duration::from_secs(1)));
        o.proved("node-b", vec!["10.0.0.2".parse().unwrap()], now);
        assert_eq!(
            effective_proof(&o, "node-b", "10.0.0.2", Proof::None, now),
            Proof::Dns
        );
        assert_eq!(
            effective_proof(&o, "node-b", "10-0-0-2.svc.cluster.local", Proof::None, now),
            Proof::Dns
        );
        assert_eq!(
            effective_proof(&o, "node-b", "10.0.0.9", Proof::None, now),
            Proof::None
        );
        // Stale after the interval.
        assert_eq!(
            effective_proof(&o, "node-b", "10.0.0.2", Proof::None, now + PROOF_INTERVAL),
            Proof::None
        );
        // localhost resolves through the system resolver (/etc/hosts).
        let local = resolve("localhost", Duration::from_secs(5));
        assert!(local.iter().any(|a| a.is_loopback()), "{local:?}");
    }
}
