//! Probes between hosts ("peer probes"): each exporter keeps one UD
//! responder queue pair per active port and publishes its [`Endpoint`];
//! the prober sends small and MTU-sized UD datagrams (the header of
//! [`crate::peer_wire`] only, no host data) to a bounded sample of the
//! configured peers' endpoints on the same rail, and waits for the echo.
//!
//! Why UD and not RC: one responder QP per port answers every peer, so a
//! node holds no per-peer connection state (a fleet of N nodes would need
//! N RC QP pairs per port on every node, and a connection handshake per
//! pair); a lost datagram is lost (no RC retransmission hiding loss behind
//! a longer RTT), which is what a loss measurement wants; and each probe
//! carries its own address handle, so the flow label (the RoCE v2 UDP
//! source port) and the traffic class vary per probe to cover ECMP paths.
//! R-Pingmesh makes the same choice for the same reasons.
//!
//! This module holds the verbs-independent part: the endpoint format, the
//! rail rule, the walk over the peers (a random start per node, suspects
//! first), the traffic plan (rate bound, sizes, flow labels per pair) and
//! the statistics. Whom the responder answers is [`crate::peer_admit`];
//! the device work sits behind [`PeerVerbs`] / [`PeerPort`] so that all of
//! it is tested with a fake.

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv6Addr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::peer_admit::{DatagramRefusal, Responder, Served};
use crate::verbs::OpenError;
use crate::{Failure, Histogram};

/// The Q_Key every responder and prober uses. A datagram whose Q_Key
/// differs is dropped by the receiving HCA, so traffic of other UD
/// applications never reaches the responder. (0x11111111 is the
/// well-known key of rdma-core's examples; this one is ours.)
pub const QKEY: u32 = 0x5250_4d31;

/// Probe payload sizes: the small one fits any MTU; the large one is the
/// port's active MTU, the largest payload a UD message may carry (it
/// cannot span packets; the 40 bytes of GRH a UD receive starts with are
/// headers, not payload).
pub const SMALL_PAYLOAD: u32 = 64;
/// The GRH area ahead of every UD receive buffer.
pub const GRH_LEN: u32 = 40;
/// Flow labels one pair walks by default (each may hash to another ECMP
/// path), whatever the number of peers.
pub const DEFAULT_FLOW_LABELS: u32 = 16;
/// The most flow labels a pair walks.
pub const MAX_FLOW_LABELS: u32 = 256;
/// A pair whose small probe was lost is probed again in each of the next
/// rounds, ahead of the walk, until it has this many outcomes since the
/// loss (what the rules need to judge it) or answers.
pub const SUSPECT_PROBES: u8 = 4;

/// The most probe packets per second one local port sends, whatever the
/// configuration asks (each probe is answered by one packet from the peer).
pub const MAX_PACKETS_PER_SECOND: f64 = 50.0;
/// Default: 5 probes/s per port (one small and one large probe to each of
/// the sampled peers, spread over the round with jitter).
pub const DEFAULT_PACKETS_PER_SECOND: f64 = 5.0;
/// Peers probed per round and port at most (the per-peer series bound).
pub const MAX_SAMPLE: usize = 16;
/// Failing peers kept per port beyond the current sample (top-N by loss).
pub const TOP_FAILING: usize = 8;
/// RTT history of a port: the median small-probe RTT of each of its last
/// this many rounds (at the default 5 packets/s and 8 peers a round is
/// about 3.2 s: 600 rounds ≈ 32 minutes; at 50 packets/s ≈ 3 minutes).
pub const BASELINE_ROUNDS: usize = 600;
/// The baseline is this percentile of the round medians held: a robust
/// low value of the port's own history that neither the fastest single
/// answers (a round median needs half of its round's answers) nor
/// congestion lasting less than 75 % of the history move.
pub const BASELINE_PERCENTILE: f64 = 0.25;
/// "Recent" is the median of the last this many round medians, so one or
/// two slow rounds (jitter, a scheduler hiccup) do not make it: the
/// elevation must hold over most of them (≈32 s at the default rate).
pub const RECENT_ROUNDS: usize = 10;

/// What a node publishes for one of its ports (the JSON of the endpoints
/// route): enough for another node to build an address handle and send a
/// datagram to the responder, and to decide whether the port is on its
/// rail.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// The node's name (its hostname), for labels and logs.
    pub node: String,
    /// RDMA device name (`mlx5_0`, `rxe0`).
    pub device: String,
    /// Position of the device in the node's sorted device list: the rail
    /// when subnets do not say.
    pub device_index: u32,
    pub port: u8,
    /// The GID (IPv6 notation; a RoCE v2 IPv4 GID is `::ffff:a.b.c.d`).
    pub gid: Ipv6Addr,
    pub gid_index: u32,
    /// The responder's UD queue pair number.
    pub qpn: u32,
    pub qkey: u32,
    /// Active MTU of the port in bytes (IB MTU: 256 … 4096).
    pub mtu: u32,
    /// The IP subnet of the GID's address (`10.0.1.0/24`), when known: the
    /// rail key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// The rail the publishing node computed for this port (its
    /// `peer_probes.rails` rule); pairs ports when rails are named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<String>,
    /// Random per exporter start: another value is a restarted peer,
    /// whose history starts afresh. 0 in version 1 documents (unknown).
    #[serde(default)]
    pub incarnation: u64,
    /// The peer-probe wire version the responder speaks
    /// ([`crate::peer_wire::WIRE_VERSION`]); absent in the documents of
    /// exporters before it (version 1, answered by nobody of this one).
    #[serde(default = "wire_version_1")]
    pub wire: u8,
    /// The publishing node has not yet read the endpoints of every peer on
    /// its list (its first walk over them): it may not know this node yet,
    /// so its silence is pending, not loss, until it has answered once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learning: bool,
}

fn wire_version_1() -> u8 {
    1
}

impl Endpoint {
    /// Identity of a peer port across restarts (the QPN changes, this not).
    pub fn key(&self) -> PeerKey {
        PeerKey {
            node: self.node.clone(),
            device: self.device.clone(),
            port: self.port,
        }
    }
}

/// The endpoints document a node serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    /// Format version: a prober ignores documents of another version.
    pub version: u32,
    pub endpoints: Vec<Endpoint>,
}

/// The version this exporter serves: 2 adds `incarnation`, 3 `wire` (the
/// responders speak wire version 2, with cookies) and `learning`.
/// Exporters before 3 refuse a version 3 document (and say so in their
/// fetch errors): they would probe in wire version 1, which no responder
/// of this version answers.
pub const ENDPOINTS_VERSION: u32 = 3;
/// The oldest version read (its endpoints have incarnation 0, unknown, and
/// wire version 1: admission refuses them as `wire_version`).
pub const ENDPOINTS_MIN_VERSION: u32 = 1;

/// Why an endpoints document was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("endpoints document: {0}")]
    Malformed(String),
    #[error("endpoints document version {0} (this exporter reads {ENDPOINTS_MIN_VERSION} to {ENDPOINTS_VERSION})")]
    Version(u32),
}

/// Parses a peer's endpoints document; malformed input is an error, never
/// a panic. Every endpoint is returned (the body is bounded by its
/// reader), so that admission sees a document with more endpoints than a
/// node has ports and refuses it whole (`too_many`) instead of taking
/// its first ones.
pub fn parse_endpoints(body: &[u8]) -> Result<Vec<Endpoint>, DocumentError> {
    let doc: Endpoints =
        serde_json::from_slice(body).map_err(|e| DocumentError::Malformed(e.to_string()))?;
    if !(ENDPOINTS_MIN_VERSION..=ENDPOINTS_VERSION).contains(&doc.version) {
        return Err(DocumentError::Version(doc.version));
    }
    Ok(doc.endpoints)
}

/// A peer port, stable across the peer's restarts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerKey {
    pub node: String,
    pub device: String,
    pub port: u8,
}

/// The rail rule. `all_to_all` pairs every local port with every peer
/// port. Otherwise two ports are on the same rail when both GIDs have a
/// known subnet and the subnets are equal; when either subnet is unknown
/// (InfiniBand, a GID without an address), when the device indexes are
/// equal.
pub fn same_rail(local: &Endpoint, remote: &Endpoint, all_to_all: bool) -> bool {
    if all_to_all {
        return true;
    }
    match (&local.subnet, &remote.subnet) {
        (Some(a), Some(b)) => a == b,
        _ => local.device_index == remote.device_index,
    }
}

/// `a.b.c.d/len` for the IPv4 address of a RoCE v2 GID (`::ffff:a.b.c.d`)
/// and a prefix length; `None` for other GIDs.
pub fn ipv4_subnet(gid: &Ipv6Addr, prefix_len: u8) -> Option<String> {
    let v4 = gid.to_ipv4_mapped()?;
    let len = prefix_len.min(32);
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    };
    let net = std::net::Ipv4Addr::from(u32::from(v4) & mask);
    Some(format!("{net}/{len}"))
}

/// One probe as the verbs layer sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Random per prober start, echoed: an answer with another nonce is not ours.
    pub nonce: u32,
    pub seq: u32,
    /// This exporter's incarnation (in the probe's header).
    pub incarnation: u64,
    /// Payload bytes (the [`crate::peer_wire`] header, then zeros).
    pub size: u32,
    /// The GRH flow label: RoCE v2 derives the UDP source port from it,
    /// so each value may hash to another ECMP path.
    pub flow_label: u32,
    /// The IP traffic class (ToS byte) exactly as configured.
    pub traffic_class: u8,
}

/// What happened to one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Answered by the probed endpoint with the probe's nonce and seq:
    /// the round trip less the responder's hold time, and the responder's
    /// incarnation.
    Answered { rtt: Duration, incarnation: u64 },
    /// No answer within the timeout (the prober calls it pending instead
    /// while the peer says it is still learning its peers and has not
    /// answered yet: see [`Endpoint::learning`]).
    Lost,
    /// No address handle within the timeout (the neighbour did not
    /// resolve): the peer is unreachable from here, counted as lost.
    Unresolved,
    /// The probe could not be sent (post, completion error).
    Failed(Failure),
}

/// The clock a port's round trips are measured with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RttClock {
    /// The host's monotonic clock around the send and the echo's receive
    /// completion: includes this host's completion handling.
    #[default]
    Host,
    /// The device's completion timestamps of the probe's send and the
    /// echo's receive (extended CQs with
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, ticks of `hca_core_clock`):
    /// this host's scheduling is out of it. mlx5 offers them; rxe does not.
    Device,
}

impl RttClock {
    pub fn as_str(&self) -> &'static str {
        match self {
            RttClock::Host => "host",
            RttClock::Device => "device",
        }
    }
}

/// Opens the per-port UD resources.
pub trait PeerVerbs: Send {
    type Port: PeerPort;
    fn open_port(
        &mut self,
        device: &str,
        port: u8,
        gid_index: u32,
    ) -> Result<Self::Port, OpenError>;
}

/// One port's UD queue pair: the responder and the prober at once.
pub trait PeerPort: Send {
    /// (GID, QPN, active MTU) of the open queue pair.
    fn local(&self) -> (Ipv6Addr, u32, u32);
    /// Sends `probe` to `to` and waits for its answer at most `timeout`
    /// (the wait for the address handle included; the round trip starts
    /// at the post), answering the probes other nodes send meanwhile as
    /// `responder` decides. Datagrams that are neither a probe nor this
    /// probe's answer are dropped and counted in `served`.
    fn ping(
        &mut self,
        to: &Endpoint,
        probe: &Probe,
        timeout: Duration,
        responder: &mut Responder,
        served: &mut Served,
    ) -> ProbeOutcome;
    /// Answers pending probes without sending one.
    fn serve(&mut self, responder: &mut Responder, served: &mut Served);
    /// Waits up to `timeout` for datagrams and answers them, returning
    /// early once some were handled (the verbs port sleeps in `poll(2)` on
    /// its completion channel meanwhile; this default, for the fabrics in
    /// memory of the tests, answers what is there and waits a millisecond
    /// at most).
    fn idle(&mut self, timeout: Duration, responder: &mut Responder, served: &mut Served) {
        self.serve(responder, served);
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
    }
    /// The clock round trips are measured with.
    fn clock(&self) -> RttClock {
        RttClock::Host
    }
}

/// Counters of one size class (small or large) on one pair or port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    pub sent: u64,
    pub answered: u64,
}

impl Sent {
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.answered)
    }
}

/// Per peer port, as seen from one local port (bounded: see [`MAX_SAMPLE`]
/// and [`TOP_FAILING`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PairStats {
    pub small: Sent,
    pub large: Sent,
    /// Failures to send (not losses), by reason label.
    pub errors: BTreeMap<&'static str, u64>,
    /// Whether the most recent small probe was answered.
    pub last_small_ok: Option<bool>,
    pub last_large_ok: Option<bool>,
    /// Rounds since the pair was last in the sample (0: sampled now).
    pub rounds_since_sampled: u64,
    /// The last [`Recent::LEN`] outcomes per size class: what the rules
    /// judge (cumulative counters say nothing about now).
    pub recent_small: Recent,
    pub recent_large: Recent,
    /// Probes left unanswered while the peer said it was still learning
    /// its peers and had not answered this port yet (pending: not sent or
    /// lost in the counts above).
    pub pending: u64,
    /// Whether the latest small probe was pending.
    pub last_pending: bool,
    /// Probes lost because no address handle resolved in time (counted in
    /// `small`/`large` as lost too).
    pub unresolved: u64,
    /// Visits of this pair while it was kept: with the walk's laps, picks
    /// its next flow label.
    pub visits: u64,
    /// Rounds in which this pair is probed ahead of the walk (a loss made
    /// it a suspect; an answer clears it).
    pub suspect_rounds: u8,
    /// The incarnation the responder's answers carry.
    pub answered_by: Option<u64>,
}

/// The last up to 16 outcomes of a pair and size class (bit set: answered).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recent {
    bits: u16,
    len: u8,
}

impl Recent {
    pub const LEN: u8 = 16;

    pub fn push(&mut self, answered: bool) {
        self.bits = (self.bits << 1) | u16::from(answered);
        self.len = (self.len + 1).min(Self::LEN);
    }

    /// Outcomes held (at most [`Recent::LEN`]).
    pub fn len(&self) -> u32 {
        u32::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn answered(&self) -> u32 {
        let mask = if self.len >= 16 {
            u16::MAX
        } else {
            (1u16 << self.len) - 1
        };
        (self.bits & mask).count_ones()
    }

    pub fn lost(&self) -> u32 {
        self.len().saturating_sub(self.answered())
    }

    /// Whether the newest `n` outcomes are held and all lost.
    pub fn last_all_lost(&self, n: u32) -> bool {
        let n = n.min(u32::from(Self::LEN));
        n > 0 && self.len() >= n && self.bits & (u16::MAX >> (16 - n)) == 0
    }
}

/// Per local port.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortStats {
    pub small: Sent,
    pub large: Sent,
    pub rtt: Histogram,
    /// The median small-probe RTT (seconds) of each of the last
    /// [`BASELINE_ROUNDS`] rounds that had an answer, oldest first.
    pub round_medians: VecDeque<f64>,
    /// The port's own baseline: the [`BASELINE_PERCENTILE`] of
    /// `round_medians`, seconds.
    pub baseline_seconds: Option<f64>,
    /// Recent RTT: the median of the last [`RECENT_ROUNDS`] round
    /// medians, seconds.
    pub recent_seconds: Option<f64>,
    pub served: Served,
    /// Per peer port: the current sample and the top failing others.
    pub peers: BTreeMap<PeerKey, PairStats>,
    /// Matching peers (on the rail) known now.
    pub peers_known: usize,
    /// Probes pending (see [`PairStats::pending`]), all pairs.
    pub pending: u64,
    /// The clock of the round trips.
    pub clock: RttClock,
}

/// What the peer prober publishes for the sampler.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerResults {
    pub state: crate::ProbeState,
    /// This node's responders (the endpoints route serves these).
    pub endpoints: Vec<Endpoint>,
    /// Per local port: its endpoint and statistics.
    pub ports: Vec<(Endpoint, PortStats)>,
}

/// The traffic plan of one round on one port: which peers and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub peers: Vec<Endpoint>,
    /// Delay before each probe (two per peer: small then large).
    pub spacing: Duration,
}

/// The peers of one round: first the suspects (pairs whose small probe
/// was lost lately, at most half the sample, so the walk goes on), then
/// the next peers of the walk from `cursor`, which each node starts at a
/// random place so that a fleet's probers spread over the responders
/// instead of converging on the same ones. Returns the chosen peers, the
/// cursor for the next round and whether the walk came round to its start
/// of the list.
pub fn choose(
    peers: &[Endpoint],
    sample: usize,
    cursor: usize,
    stats: &BTreeMap<PeerKey, PairStats>,
) -> (Vec<Endpoint>, usize, bool) {
    let n = peers.len();
    if n == 0 || sample == 0 {
        return (Vec::new(), cursor, false);
    }
    let k = sample.min(n);
    let mut chosen = suspects(peers, k.div_ceil(2), stats);
    let mut cursor = cursor % n;
    let mut looked = 0;
    let mut wrapped = false;
    while chosen.len() < k && looked < n {
        if let Some(p) = peers.get(cursor) {
            if !chosen.iter().any(|c| same_port(c, p)) {
                chosen.push(p.clone());
            }
        }
        cursor = (cursor + 1) % n;
        wrapped |= cursor == 0;
        looked += 1;
    }
    (chosen, cursor, wrapped)
}

/// At most `n` of `peers` whose pairs are suspects, in the peers' order.
/// Looks up the (few) suspect keys without building a key per peer: a
/// round over 10,000 peers allocates nothing here.
pub fn suspects(
    peers: &[Endpoint],
    n: usize,
    stats: &BTreeMap<PeerKey, PairStats>,
) -> Vec<Endpoint> {
    let wanted: std::collections::BTreeSet<(&str, &str, u8)> = stats
        .iter()
        .filter(|(_, s)| s.suspect_rounds > 0)
        .map(|(k, _)| (k.node.as_str(), k.device.as_str(), k.port))
        .collect();
    if wanted.is_empty() || n == 0 {
        return Vec::new();
    }
    peers
        .iter()
        .filter(|p| wanted.contains(&(p.node.as_str(), p.device.as_str(), p.port)))
        .take(n)
        .cloned()
        .collect()
}

/// Whether two endpoints are the same peer port ([`Endpoint::key`]).
fn same_port(a: &Endpoint, b: &Endpoint) -> bool {
    a.node == b.node && a.device == b.device && a.port == b.port
}

/// Spacing between probes of one port so that `packets_per_second` (capped
/// at [`MAX_PACKETS_PER_SECOND`]) holds; `unit` in [0, 1) jitters it ±20 %.
pub fn spacing(packets_per_second: f64, unit: f64) -> Duration {
    let pps = if packets_per_second.is_finite() && packets_per_second > 0.0 {
        packets_per_second.min(MAX_PACKETS_PER_SECOND)
    } else {
        DEFAULT_PACKETS_PER_SECOND
    };
    let jitter = 1.0 + 0.2 * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
    Duration::from_secs_f64(jitter / pps)
}

/// The flow label of a pair's `n`-th visit: the pair walks `labels`
/// distinct values (20-bit, spread, never 0: 0 means "no label", and RoCE
/// v2 would then take a source port of the QP's own choice), from a start
/// of its own (`pair`), so that ECMP hashing of the UDP source port takes
/// each pair over up to `labels` paths whatever the number of peers.
pub fn flow_label(pair: u64, n: u64, labels: u32) -> u32 {
    let labels = u64::from(labels.clamp(1, MAX_FLOW_LABELS));
    let i = ((pair % labels + n % labels) % labels) as u32;
    (i.wrapping_mul(0x9E37) & 0xF_FFFF) | 0x1_0000
}

/// A stable number for a pair (FNV-1a of its key): where its flow-label
/// walk starts.
fn pair_number(k: &PeerKey) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in k
        .node
        .bytes()
        .chain(k.device.bytes())
        .chain(std::iter::once(k.port))
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Settings of the prober.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSettings {
    pub packets_per_second: f64,
    /// Peers per round and port.
    pub sample: usize,
    pub timeout: Duration,
    pub all_to_all: bool,
    /// The IP traffic class (ToS byte) of the probes, unchanged on the wire.
    pub traffic_class: u8,
    /// Distinct flow labels each pair walks.
    pub flow_labels: u32,
}

impl Default for PeerSettings {
    fn default() -> Self {
        PeerSettings {
            packets_per_second: DEFAULT_PACKETS_PER_SECOND,
            sample: 8,
            timeout: Duration::from_millis(500),
            all_to_all: false,
            traffic_class: 0,
            flow_labels: DEFAULT_FLOW_LABELS,
        }
    }
}

/// Who a prober is: its nonce (random per port start) and its exporter's
/// incarnation (random per process start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProberId {
    pub nonce: u32,
    pub incarnation: u64,
}

mod prober;
pub use prober::{end_round, PortProber};

#[cfg(any(test, feature = "fake"))]
pub mod fake;

#[cfg(test)]
mod recent_tests {
    use super::Recent;

    #[test]
    fn recent_keeps_the_last_sixteen() {
        let mut r = Recent::default();
        assert!(r.is_empty());
        for _ in 0..20 {
            r.push(false);
        }
        r.push(true);
        assert_eq!((r.len(), r.answered(), r.lost()), (16, 1, 15));
        for _ in 0..16 {
            r.push(true);
        }
        assert_eq!(r.lost(), 0);
    }
}
