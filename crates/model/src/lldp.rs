//! The LLDP part of a snapshot: each RDMA netdev's link partner as its LLDP
//! frames (or lldpd) describe it, with the switch port's DCBX view.

use std::time::Duration;

use roce_lldp::{Identity, Lldpdu};

/// What the source hands over.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LldpSnapshot {
    /// `lldpd` or `capture`.
    pub via: &'static str,
    pub ports: Vec<LldpPort>,
}

/// One RDMA netdev's view of its link partner.
#[derive(Debug, Clone, PartialEq)]
pub struct LldpPort {
    pub netdev: String,
    /// The RDMA device and port behind the netdev.
    pub rdma: Option<(String, u32)>,
    /// The neighbour heard most recently and still within its TTL.
    pub neighbour: Option<Lldpdu>,
    /// Live neighbours (more than one: a hub, or a second agent).
    pub neighbours: usize,
    /// Since the last LLDPDU was heard (capture) or lldpd last listed a
    /// neighbour (lldpd), even if it expired since.
    pub heard_age: Option<Duration>,
    /// The TTL of the last LLDPDU heard.
    pub last_ttl: Option<u16>,
    /// How long the source has watched this port.
    pub watched_for: Duration,
    /// `(first, current)` when the port's neighbour is another remote
    /// port than the first heard since start (recabled).
    pub changed: Option<(Identity, Identity)>,
    /// LLDPDUs accepted and rejected on the port since start.
    pub frames_total: u64,
    pub rejected_total: u64,
    /// Why the last rejected frame was rejected.
    pub last_rejection: Option<String>,
}
