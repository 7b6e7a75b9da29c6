//! A fabric in memory for tests of the prober and the rules: which peer
//! nodes answer, which paths drop large datagrams or every n-th one, and
//! datagrams from strangers waiting at the responder. Built only for
//! tests (`cfg(test)` here, the `fake` feature for other crates' tests).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use super::{Endpoint, PeerPort, Probe, ProbeOutcome, Responder, Served};
use crate::peer_admit::{handle, Datagram, Handled};
use crate::peer_wire::Message;

/// A fabric in memory: which (peer node, size class) answer, with what RTT.
#[derive(Debug, Default)]
pub struct FakePort {
    pub gid: Option<Ipv6Addr>,
    /// Nodes that answer nothing.
    pub dead: BTreeSet<String>,
    /// Nodes whose address never resolves.
    pub unresolved: BTreeSet<String>,
    /// Nodes whose path drops datagrams larger than this payload.
    pub mtu_limit: BTreeMap<String, u32>,
    /// Every n-th probe to this node is lost.
    pub lossy: BTreeMap<String, u32>,
    pub rtt: Duration,
    /// When not empty, the n-th answer (by probe sequence) takes
    /// `rtt_series[n % len]` instead of `rtt` (jitter, outliers).
    pub rtt_series: Vec<Duration>,
    /// Probes from senders no peer list names waiting at the responder.
    pub strangers: u64,
    pub sent: Vec<(String, Probe)>,
}

impl PeerPort for FakePort {
    fn local(&self) -> (Ipv6Addr, u32, u32) {
        (self.gid.unwrap_or(Ipv6Addr::LOCALHOST), 7, 4096)
    }
    fn ping(
        &mut self,
        to: &Endpoint,
        probe: &Probe,
        _timeout: Duration,
        responder: &mut Responder,
        served: &mut Served,
    ) -> ProbeOutcome {
        self.serve(responder, served);
        if self.unresolved.contains(&to.node) {
            return ProbeOutcome::Unresolved;
        }
        self.sent.push((to.node.clone(), *probe));
        if self.dead.contains(&to.node) {
            return ProbeOutcome::Lost;
        }
        if self
            .mtu_limit
            .get(&to.node)
            .is_some_and(|l| probe.size > *l)
        {
            return ProbeOutcome::Lost;
        }
        if let Some(n) = self.lossy.get(&to.node) {
            if probe.seq.is_multiple_of(*n) {
                return ProbeOutcome::Lost;
            }
        }
        let rtt = match self.rtt_series.len() {
            0 => self.rtt,
            n => self.rtt_series[probe.seq as usize % n],
        };
        ProbeOutcome::Answered {
            rtt,
            incarnation: to.incarnation,
        }
    }
    fn serve(&mut self, responder: &mut Responder, served: &mut Served) {
        // One probe from a stranger per call.
        if self.strangers > 0 {
            self.strangers -= 1;
            let probe = Message::probe(1, 1, 1, 0).encode(64);
            let d = Datagram {
                payload: &probe,
                gid: std::net::Ipv4Addr::new(192, 168, 9, 9).to_ipv6_mapped(),
                qpn: 99,
                traffic_class: 0,
            };
            match handle(&d, None, responder, Instant::now(), served) {
                Handled::Answer(m, _) if m.kind == crate::peer_wire::MessageKind::Echo => {
                    served.answered += 1
                }
                Handled::Answer(..) => served.challenged += 1,
                Handled::Reply(_) | Handled::Dropped => {}
            }
        }
    }
}
