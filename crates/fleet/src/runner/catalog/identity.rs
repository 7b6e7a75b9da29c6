//! The catalog's side of node identity: which of the addresses claiming a
//! node holds it, by the proofs each has (its own name, a Prometheus
//! target's label, DNS), and when DNS is asked to settle a claim.

use super::super::owners::{effective_proof, MAX_LOOKUPS};
use super::{host_is_ip, instance_host, Catalog};
use crate::peer_endpoints::Proof;
use crate::peer_list::PeerAddress;
use std::time::Instant;

impl Catalog {
    /// Whether DNS now proves a claim on `node` other than its holder's,
    /// and not the holder's (Prometheus mode: the claims are instances).
    pub(super) fn proof_moves(&self, node: &str, now: Instant) -> bool {
        let Some(holder) = self.owners.holder(node) else {
            return false;
        };
        let dns = |instance: &str| {
            effective_proof(
                &self.owners,
                node,
                instance_host(instance),
                Proof::None,
                now,
            ) == Proof::Dns
        };
        !dns(holder)
            && self
                .owners
                .claimants(node)
                .iter()
                .any(|c| c != holder && dns(c))
    }

    /// The proof of `addr`'s claim now (its own, or DNS).
    pub(super) fn proof_of(&self, addr: &str, now: Instant) -> Proof {
        let Some(e) = self.entries.get(&PeerAddress(addr.to_string())) else {
            return Proof::None;
        };
        let host = PeerAddress(addr.to_string());
        match &e.node {
            Some(node) => effective_proof(&self.owners, node, host.host(), e.proof, now),
            None => e.proof,
        }
    }

    /// Gives `node` to the claim that should hold it and refuses the
    /// others (counted once per claim refused, as `node_claimed`): the
    /// holder keeps it unless a claim proves what the holder's does not.
    pub(super) fn settle(&mut self, node: &str, now: Instant) -> Option<String> {
        let claimants = self.owners.claimants(node);
        let proofs: Vec<(String, Proof)> = claimants
            .iter()
            .map(|a| (a.clone(), self.proof_of(a, now)))
            .collect();
        let holder = self.owners.decide(node, &proofs);
        for (a, proof) in &proofs {
            let addr = PeerAddress(a.clone());
            if Some(a) == holder.as_ref() {
                self.hold(&addr, true);
            } else {
                self.hold(&addr, false);
                if !proof.proven() && host_is_ip(addr.host()) {
                    self.ask_proof(node, now);
                }
            }
        }
        holder
    }

    /// Asks DNS for `node` (bounded, not again within the proof interval).
    pub(super) fn ask_proof(&mut self, node: &str, now: Instant) {
        if self.to_prove.len() < MAX_LOOKUPS && self.owners.should_prove(node, now) {
            self.to_prove.insert(node.to_string());
        }
    }

    /// `addr` no longer claims `node`: another claim may take it.
    pub(super) fn release(&mut self, node: &str, addr: &PeerAddress) {
        self.owners.unclaim(node, &addr.0);
        self.settle(node, Instant::now());
    }
}
