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
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::peer_admit::{Refusal, Responder, Served};
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

/// The version this exporter serves: 2 adds `incarnation`.
pub const ENDPOINTS_VERSION: u32 = 2;
/// The oldest version read (its endpoints have incarnation 0, unknown).
pub const ENDPOINTS_MIN_VERSION: u32 = 1;

/// Why an endpoints document was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("endpoints document: {0}")]
    Malformed(String),
    #[error("endpoints document version {0} (this exporter reads {ENDPOINTS_MIN_VERSION} to {ENDPOINTS_VERSION})")]
    Version(u32),
}

/// Parses a peer's endpoints document, bounded: at most 64 endpoints
/// (no node has more ports), malformed input an error, never a panic.
pub fn parse_endpoints(body: &[u8]) -> Result<Vec<Endpoint>, DocumentError> {
    let doc: Endpoints =
        serde_json::from_slice(body).map_err(|e| DocumentError::Malformed(e.to_string()))?;
    if !(ENDPOINTS_MIN_VERSION..=ENDPOINTS_VERSION).contains(&doc.version) {
        return Err(DocumentError::Version(doc.version));
    }
    Ok(doc.endpoints.into_iter().take(64).collect())
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
pub enum Outcome {
    /// Answered by the probed endpoint with the probe's nonce and seq:
    /// the round trip less the responder's hold time, and the responder's
    /// incarnation.
    Answered { rtt: Duration, incarnation: u64 },
    /// No answer within the timeout.
    Lost,
    /// The responder answered that it does not admit this port (its peer
    /// list or documents do not name it yet): pending, not lost.
    NotAdmitted { incarnation: u64 },
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
}

impl RttClock {
    pub fn as_str(&self) -> &'static str {
        match self {
            RttClock::Host => "host",
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
    ) -> Outcome;
    /// Answers pending probes without sending one.
    fn serve(&mut self, responder: &mut Responder, served: &mut Served);
    /// Waits up to `timeout` for datagrams and answers them, returning
    /// early once some were handled (a port with a completion channel
    /// sleeps in the kernel meanwhile; this default polls every
    /// millisecond).
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
    /// Probes the responder answered "not admitted" (pending, not sent
    /// or lost in the counts above).
    pub pending: u64,
    /// Whether the latest answer was "not admitted".
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
    /// Probes answered "not admitted", all pairs.
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
    let mut chosen: Vec<Endpoint> = peers
        .iter()
        .filter(|p| stats.get(&p.key()).is_some_and(|s| s.suspect_rounds > 0))
        .take(k.div_ceil(2))
        .cloned()
        .collect();
    let mut cursor = cursor % n;
    let mut looked = 0;
    let mut wrapped = false;
    while chosen.len() < k && looked < n {
        if let Some(p) = peers.get(cursor) {
            if !chosen.iter().any(|c| c.key() == p.key()) {
                chosen.push(p.clone());
            }
        }
        cursor = (cursor + 1) % n;
        wrapped |= cursor == 0;
        looked += 1;
    }
    (chosen, cursor, wrapped)
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

/// The peer prober of one local port: runs rounds over a verbs port and
/// keeps the statistics. No thread of its own: the caller says how long
/// to wait between probes (see [`spacing`]).
pub struct PortProber<P: PeerPort> {
    pub local: Endpoint,
    port: P,
    pub settings: PeerSettings,
    /// Whom the port answers (the matching peers' responders as of the
    /// last round) and how often.
    responder: Responder,
    id: ProberId,
    seq: u32,
    /// Where the walk over the matching peers goes on next round.
    cursor: usize,
    /// Walks over the whole list so far: with a pair's own visits, picks
    /// its flow label (a pair's state is forgotten between visits).
    laps: u64,
    pub stats: PortStats,
}

impl<P: PeerPort> PortProber<P> {
    pub fn new(local: Endpoint, port: P, settings: PeerSettings, id: ProberId) -> Self {
        let stats = PortStats {
            clock: port.clock(),
            ..PortStats::default()
        };
        PortProber {
            local,
            port,
            settings,
            responder: Responder::new(id.incarnation, Instant::now()),
            id,
            seq: 0,
            // Each node starts its walk at a place of its own: the nonce is
            // random per start.
            cursor: id.nonce as usize,
            laps: 0,
            stats,
        }
    }

    /// The peers on this port's rail, in a stable order.
    pub fn matching(&self, peers: &[Endpoint]) -> Vec<Endpoint> {
        let mut m: Vec<Endpoint> = peers
            .iter()
            .filter(|p| same_rail(&self.local, p, self.settings.all_to_all))
            .filter(|p| !(p.gid == self.local.gid && p.qpn == self.local.qpn))
            .cloned()
            .collect();
        m.sort();
        m.dedup();
        m
    }

    /// Admits the responders of the matching peers.
    fn admit(&mut self, matching: &[Endpoint]) {
        self.responder
            .set_admitted(matching.iter().map(|p| (p.gid, p.qpn)).collect());
    }

    /// One round: a small and a large probe to each peer of this round's
    /// sample. `pause` is called between probes (the runner sleeps there;
    /// tests pass a no-op).
    pub fn round(&mut self, peers: &[Endpoint], pause: &mut dyn FnMut()) {
        self.round_with(peers, &mut || {
            pause();
            Some(Duration::ZERO)
        });
    }

    /// One round, answering peers between probes: after each probe `gap`
    /// says how long to wait (answering probes meanwhile, see
    /// [`PortProber::idle`]); `None` ends the round at once (the runner
    /// is stopping).
    pub fn round_with(&mut self, peers: &[Endpoint], gap: &mut dyn FnMut() -> Option<Duration>) {
        let matching = self.matching(peers);
        self.stats.peers_known = matching.len();
        self.admit(&matching);
        let sample = self.settings.sample.clamp(1, MAX_SAMPLE);
        let (chosen, cursor, wrapped) = choose(&matching, sample, self.cursor, &self.stats.peers);
        self.cursor = cursor;
        // The lap of this round's peers (a wrap ends the lap after them).
        let lap = self.laps;
        self.laps += u64::from(wrapped);
        for p in self.stats.peers.values_mut() {
            p.rounds_since_sampled += 1;
        }
        let large = self.local.mtu.max(SMALL_PAYLOAD);
        // Small probes only: a large probe's RTT includes its
        // serialization, so mixing sizes would blur the baseline.
        let mut round_rtts: Vec<f64> = Vec::with_capacity(chosen.len());
        for peer in &chosen {
            let key = peer.key();
            let pair = self.stats.peers.entry(key.clone()).or_default();
            pair.rounds_since_sampled = 0;
            pair.suspect_rounds = pair.suspect_rounds.saturating_sub(1);
            let label = flow_label(
                pair_number(&key),
                lap.wrapping_add(pair.visits),
                self.settings.flow_labels,
            );
            pair.visits += 1;
            // The large probe is sized by this port's MTU, not the peer's:
            // a peer (or a path) with a lower MTU is what it must reveal.
            for (size, is_large) in [(SMALL_PAYLOAD, false), (large, true)] {
                self.seq = self.seq.wrapping_add(1);
                let probe = Probe {
                    nonce: self.id.nonce,
                    seq: self.seq,
                    incarnation: self.id.incarnation,
                    size,
                    flow_label: label,
                    traffic_class: self.settings.traffic_class,
                };
                let mut served = Served::default();
                let outcome = self.port.ping(
                    peer,
                    &probe,
                    self.settings.timeout,
                    &mut self.responder,
                    &mut served,
                );
                self.stats.served.add(&served);
                if let Some(rtt) = self.record(&key, is_large, outcome) {
                    round_rtts.push(rtt);
                }
                match gap() {
                    Some(d) => self.idle(d),
                    None => {
                        bound_pairs(&mut self.stats.peers, &chosen);
                        return;
                    }
                }
            }
        }
        end_round(&mut self.stats, &mut round_rtts);
        let mut served = Served::default();
        self.port.serve(&mut self.responder, &mut served);
        self.stats.served.add(&served);
        bound_pairs(&mut self.stats.peers, &chosen);
    }

    /// Counts one probe's outcome; the RTT of an answered small probe.
    fn record(&mut self, key: &PeerKey, is_large: bool, outcome: Outcome) -> Option<f64> {
        let stats = &mut self.stats;
        let pair = stats.peers.entry(key.clone()).or_default();
        let (port_sent, pair_sent, last, recent) = if is_large {
            (
                &mut stats.large,
                &mut pair.large,
                &mut pair.last_large_ok,
                &mut pair.recent_large,
            )
        } else {
            (
                &mut stats.small,
                &mut pair.small,
                &mut pair.last_small_ok,
                &mut pair.recent_small,
            )
        };
        let answered = match outcome {
            Outcome::Answered { rtt, incarnation } => {
                pair.answered_by = Some(incarnation);
                pair.last_pending = false;
                stats.rtt.observe(rtt);
                Some(rtt)
            }
            Outcome::Lost | Outcome::Unresolved => {
                if outcome == Outcome::Unresolved {
                    pair.unresolved += 1;
                }
                pair.last_pending = false;
                None
            }
            Outcome::NotAdmitted { incarnation } => {
                pair.answered_by = Some(incarnation);
                pair.pending += 1;
                pair.last_pending = true;
                stats.pending += 1;
                return None;
            }
            Outcome::Failed(f) => {
                *pair.errors.entry(f.reason.as_str()).or_insert(0) += 1;
                return None;
            }
        };
        port_sent.sent += 1;
        pair_sent.sent += 1;
        if answered.is_some() {
            port_sent.answered += 1;
            pair_sent.answered += 1;
        }
        *last = Some(answered.is_some());
        recent.push(answered.is_some());
        match answered {
            Some(rtt) => {
                if !is_large {
                    pair.suspect_rounds = 0;
                    return Some(rtt.as_secs_f64());
                }
                None
            }
            None => {
                // A first loss makes the pair a suspect for the next rounds;
                // one whose last probes were all lost is judged, and goes
                // back to the walk.
                if !is_large
                    && pair.suspect_rounds == 0
                    && !pair.recent_small.last_all_lost(u32::from(SUSPECT_PROBES))
                {
                    pair.suspect_rounds = SUSPECT_PROBES - 1;
                }
                None
            }
        }
    }

    /// Waits `d`, answering the probes of the peers known at the last
    /// round meanwhile.
    pub fn idle(&mut self, d: Duration) {
        let until = Instant::now() + d;
        let mut served = Served::default();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.port.serve(&mut self.responder, &mut served);
                break;
            }
            self.port.idle(left, &mut self.responder, &mut served);
        }
        self.stats.served.add(&served);
    }

    /// Answers pending probes between rounds, admitting `peers`' matching
    /// responders.
    pub fn serve(&mut self, peers: &[Endpoint]) {
        let matching = self.matching(peers);
        self.admit(&matching);
        let mut served = Served::default();
        self.port.serve(&mut self.responder, &mut served);
        self.stats.served.add(&served);
    }
}

/// Keeps the pairs of the current sample and the [`TOP_FAILING`] others
/// with the most losses (then those still pending); the rest are forgotten
/// (their losses stay in the port's totals).
fn bound_pairs(pairs: &mut BTreeMap<PeerKey, PairStats>, chosen: &[Endpoint]) {
    let now: Vec<PeerKey> = chosen.iter().map(Endpoint::key).collect();
    let mut others: Vec<(u64, bool, PeerKey)> = pairs
        .iter()
        .filter(|(k, _)| !now.contains(k))
        .map(|(k, s)| (s.small.lost() + s.large.lost(), s.last_pending, k.clone()))
        .collect();
    others.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.cmp(&a.1))
            .then_with(|| a.2.cmp(&b.2))
    });
    let keep: Vec<PeerKey> = others
        .into_iter()
        .filter(|(lost, pending, _)| *lost > 0 || *pending)
        .take(TOP_FAILING)
        .map(|(_, _, k)| k)
        .collect();
    pairs.retain(|k, _| now.contains(k) || keep.contains(k));
}

/// Ends a round's RTT bookkeeping: the median of its small-probe RTTs
/// joins the port's history, and the baseline (a low percentile of the
/// history) and the recent RTT (the median of the last rounds' medians)
/// are computed again. Single answers move neither: a round median needs
/// half of the round's answers, recent needs most of its rounds, and
/// congestion moves the baseline only once it fills 75 % of the history
/// (then it is the new normal of that port).
pub fn end_round(stats: &mut PortStats, rtts: &mut [f64]) {
    let Some(m) = median(rtts) else {
        return;
    };
    stats.round_medians.push_back(m);
    while stats.round_medians.len() > BASELINE_ROUNDS {
        stats.round_medians.pop_front();
    }
    let mut all: Vec<f64> = stats.round_medians.iter().copied().collect();
    all.sort_by(f64::total_cmp);
    let i = ((all.len() - 1) as f64 * BASELINE_PERCENTILE).round() as usize;
    stats.baseline_seconds = all.get(i).copied();
    let skip = stats.round_medians.len().saturating_sub(RECENT_ROUNDS);
    let mut recent: Vec<f64> = stats.round_medians.iter().skip(skip).copied().collect();
    stats.recent_seconds = median(&mut recent);
}

/// The median of `v` (the upper middle for an even count: of a round's
/// four answers two fast outliers must not make it); `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// A fabric in memory for tests of the prober and the rules: which peer
/// nodes answer, which paths drop large datagrams or every n-th one, and
/// datagrams from strangers waiting at the responder. Built only for
/// tests (`cfg(test)` here, the `fake` feature for other crates' tests).
#[cfg(any(test, feature = "fake"))]
pub mod fake {
    use std::collections::{BTreeMap, BTreeSet};
    use std::net::Ipv6Addr;
    use std::time::{Duration, Instant};

    use super::{Endpoint, Outcome, PeerPort, Probe, Responder, Served};
    use crate::peer_admit::{handle, Datagram, Handled};
    use crate::peer_wire::Message;

    /// A fabric in memory: which (peer node, size class) answer, with what RTT.
    #[derive(Debug, Default)]
    pub struct FakePort {
        pub gid: Option<Ipv6Addr>,
        /// Nodes that answer nothing.
        pub dead: BTreeSet<String>,
        /// Nodes that answer "not admitted" (their lists lack this node).
        pub not_admitting: BTreeSet<String>,
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
        /// Probes from unknown senders waiting at the responder.
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
        ) -> Outcome {
            self.serve(responder, served);
            if self.unresolved.contains(&to.node) {
                return Outcome::Unresolved;
            }
            self.sent.push((to.node.clone(), *probe));
            if self.dead.contains(&to.node) {
                return Outcome::Lost;
            }
            if self.not_admitting.contains(&to.node) {
                return Outcome::NotAdmitted {
                    incarnation: to.incarnation,
                };
            }
            if self
                .mtu_limit
                .get(&to.node)
                .is_some_and(|l| probe.size > *l)
            {
                return Outcome::Lost;
            }
            if let Some(n) = self.lossy.get(&to.node) {
                if probe.seq.is_multiple_of(*n) {
                    return Outcome::Lost;
                }
            }
            let rtt = match self.rtt_series.len() {
                0 => self.rtt,
                n => self.rtt_series[probe.seq as usize % n],
            };
            Outcome::Answered {
                rtt,
                incarnation: to.incarnation,
            }
        }
        fn serve(&mut self, responder: &mut Responder, served: &mut Served) {
            // One probe from a stranger per call.
            if self.strangers > 0 {
                self.strangers -= 1;
                let probe = Message::probe(1, 1, 1).encode(64);
                let d = Datagram {
                    payload: &probe,
                    gid: std::net::Ipv4Addr::new(192, 168, 9, 9).to_ipv6_mapped(),
                    qpn: 99,
                    traffic_class: 0,
                };
                match handle(&d, None, responder, Instant::now(), served) {
                    Handled::Answer(m, _) if m.kind == crate::peer_wire::Kind::Echo => {
                        served.answered += 1
                    }
                    Handled::Answer(..) => served.not_admitted += 1,
                    Handled::Reply(_) | Handled::Dropped => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakePort;
    use super::*;
    use std::collections::BTreeSet;

    fn ep(node: &str, dev_index: u32, subnet: &str, qpn: u32) -> Endpoint {
        let octet = subnet
            .split('.')
            .nth(2)
            .and_then(|s| s.parse::<u8>().ok())
            .unwrap_or(0);
        let host = node.bytes().last().unwrap_or(1);
        Endpoint {
            node: node.into(),
            device: format!("mlx5_{dev_index}"),
            device_index: dev_index,
            port: 1,
            gid: std::net::Ipv4Addr::new(10, 0, octet, host).to_ipv6_mapped(),
            gid_index: 3,
            qpn,
            qkey: QKEY,
            mtu: 4096,
            subnet: Some(subnet.into()),
            rail: None,
            incarnation: 77,
        }
    }

    const ID: ProberId = ProberId {
        nonce: 1,
        incarnation: 5,
    };

    fn settings(sample: usize) -> PeerSettings {
        PeerSettings {
            sample,
            ..PeerSettings::default()
        }
    }

    #[test]
    fn rail_rule_prefers_the_subnet_and_falls_back_to_the_device_index() {
        let a = ep("a", 0, "10.0.1.0/24", 1);
        assert!(same_rail(&a, &ep("b", 3, "10.0.1.0/24", 1), false));
        assert!(!same_rail(&a, &ep("b", 0, "10.0.2.0/24", 1), false));
        assert!(same_rail(&a, &ep("b", 0, "10.0.2.0/24", 1), true));
        let mut ib = ep("b", 0, "x", 1);
        ib.subnet = None;
        assert!(same_rail(&a, &ib, false));
        ib.device_index = 1;
        assert!(!same_rail(&a, &ib, false));
    }

    #[test]
    fn subnet_of_a_roce_v2_gid() {
        let gid: Ipv6Addr = "::ffff:10.0.1.17".parse().unwrap();
        assert_eq!(ipv4_subnet(&gid, 24).as_deref(), Some("10.0.1.0/24"));
        let link_local: Ipv6Addr = "fe80::1".parse().unwrap();
        assert_eq!(ipv4_subnet(&link_local, 64), None);
    }

    #[test]
    fn the_walk_covers_every_peer_with_a_bounded_sample() {
        let peers: Vec<Endpoint> = (0..10)
            .map(|i| ep(&format!("n{i}"), 0, "10.0.1.0/24", i))
            .collect();
        let none = BTreeMap::new();
        let mut seen = BTreeSet::new();
        let mut cursor = 7;
        for _ in 0..4 {
            let (s, next, _) = choose(&peers, 3, cursor, &none);
            assert_eq!(s.len(), 3);
            seen.extend(s.iter().map(|e| e.node.clone()));
            cursor = next;
        }
        assert_eq!(seen.len(), 10);
        assert!(choose(&peers, 0, 1, &none).0.is_empty());
        assert!(choose(&[], 3, 1, &none).0.is_empty());
        // Fewer peers than the sample: each once.
        assert_eq!(choose(&peers[..2], 8, 5, &none).0.len(), 2);
    }

    #[test]
    fn spacing_bounds_the_rate_and_jitters() {
        assert_eq!(spacing(5.0, 0.5), Duration::from_millis(200));
        assert!(spacing(1e9, 0.5) >= Duration::from_millis(20));
        assert!(spacing(f64::NAN, 0.5) == Duration::from_millis(200));
        assert!(spacing(5.0, 0.0) < spacing(5.0, 0.99));
    }

    #[test]
    fn flow_labels_vary_and_are_never_zero() {
        let labels: BTreeSet<u32> = (0..16).map(|n| flow_label(3, n, 16)).collect();
        assert_eq!(labels.len(), 16);
        assert!(labels.iter().all(|l| *l != 0 && *l <= 0xF_FFFF));
        let four: BTreeSet<u32> = (0..64).map(|n| flow_label(3, n, 4)).collect();
        assert_eq!(four.len(), 4);
    }

    #[test]
    fn each_pair_walks_its_own_flow_labels_whatever_the_number_of_peers() {
        // 1,000 peers, a sample of 8: each pair is visited once every 125
        // rounds. After 16 visits of every pair, each has used 16 distinct
        // labels (a global sequence would hand each pair whatever label
        // the port's counter stood at).
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers: Vec<Endpoint> = (0..1000u32)
            .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i + 10))
            .collect();
        let mut p = PortProber::new(local, FakePort::default(), settings(8), ID);
        for _ in 0..(125 * 16) {
            p.round(&peers, &mut || {});
        }
        let mut per_pair: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for (node, probe) in &p.port.sent {
            per_pair
                .entry(node.clone())
                .or_default()
                .insert(probe.flow_label);
        }
        assert_eq!(per_pair.len(), 1000);
        assert!(per_pair.values().all(|l| l.len() == 16));
        // Pairs start their walks at different labels.
        let firsts: BTreeSet<u32> = p
            .port
            .sent
            .iter()
            .take(200)
            .map(|(_, pr)| pr.flow_label)
            .collect();
        assert!(firsts.len() > 8, "{firsts:?}");
    }

    #[test]
    fn endpoints_document_round_trips_and_rejects_garbage() {
        let doc = Endpoints {
            version: ENDPOINTS_VERSION,
            endpoints: vec![ep("a", 0, "10.0.1.0/24", 17)],
        };
        let json = serde_json::to_vec(&doc).unwrap();
        assert_eq!(parse_endpoints(&json).unwrap(), doc.endpoints);
        assert!(parse_endpoints(b"{").is_err());
        assert_eq!(
            parse_endpoints(br#"{"version":3,"endpoints":[]}"#),
            Err(DocumentError::Version(3))
        );
        // A version 1 document (no incarnation) is read with incarnation 0.
        let v1 = br#"{"version":1,"endpoints":[{"node":"a","device":"mlx5_0","device_index":0,"port":1,"gid":"::ffff:10.0.1.2","gid_index":3,"qpn":17,"qkey":1380994353,"mtu":4096}]}"#;
        assert_eq!(parse_endpoints(v1).unwrap()[0].incarnation, 0);
    }

    #[test]
    fn healthy_peers_answer_small_and_large_probes() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers = vec![
            ep("b", 0, "10.0.1.0/24", 11),
            ep("c", 0, "10.0.1.0/24", 12),
            ep("other-rail", 1, "10.0.2.0/24", 13),
        ];
        let port = FakePort {
            rtt: Duration::from_micros(20),
            ..FakePort::default()
        };
        let mut p = PortProber::new(local, port, settings(4), ID);
        p.round(&peers, &mut || {});
        assert_eq!(p.stats.peers_known, 2, "the other rail is not probed");
        assert_eq!(
            p.stats.small,
            Sent {
                sent: 2,
                answered: 2
            }
        );
        assert_eq!(
            p.stats.large,
            Sent {
                sent: 2,
                answered: 2
            }
        );
        assert_eq!(p.stats.rtt.count, 4);
        let sizes: BTreeSet<u32> = p.port.sent.iter().map(|(_, pr)| pr.size).collect();
        assert_eq!(
            sizes,
            BTreeSet::from([64, 4096]),
            "the large probe fills the MTU"
        );
        assert!(p.port.sent.iter().all(|(n, _)| n != "other-rail"));
        let labels: BTreeSet<u32> = p.port.sent.iter().map(|(_, pr)| pr.flow_label).collect();
        assert!(labels.len() >= 2, "flows vary: {labels:?}");
    }

    #[test]
    fn path_mtu_shows_as_large_lost_small_answered() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers = vec![ep("b", 0, "10.0.1.0/24", 11)];
        let mut port = FakePort::default();
        port.mtu_limit.insert("b".into(), 1024);
        let mut p = PortProber::new(local, port, settings(4), ID);
        for _ in 0..3 {
            p.round(&peers, &mut || {});
        }
        let pair = &p.stats.peers[&peers[0].key()];
        assert_eq!(pair.small.lost(), 0);
        assert_eq!(pair.large.lost(), 3);
        assert_eq!(pair.last_large_ok, Some(false));
        assert_eq!(pair.last_small_ok, Some(true));
    }

    #[test]
    fn strangers_are_dropped_and_counted_not_answered() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let port = FakePort {
            strangers: 3,
            ..FakePort::default()
        };
        let mut p = PortProber::new(local, port, settings(4), ID);
        p.round(&[ep("b", 0, "10.0.1.0/24", 11)], &mut || {});
        p.serve(&[]);
        // Told "not admitted" (a few per second in all), never echoed.
        assert_eq!(p.stats.served.not_admitted, 3);
        assert_eq!(p.stats.served.answered, 0);
    }

    #[test]
    fn per_peer_state_stays_bounded_with_a_thousand_peers() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers: Vec<Endpoint> = (0..1000u32)
            .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i))
            .collect();
        let mut port = FakePort::default();
        for i in (0..1000).step_by(50) {
            port.dead.insert(format!("n{i:04}"));
        }
        let mut p = PortProber::new(local, port, settings(8), ID);
        for _ in 0..200 {
            p.round(&peers, &mut || {});
            assert!(p.stats.peers.len() <= 8 + TOP_FAILING);
        }
        assert_eq!(p.stats.peers_known, 1000);
        // The kept non-sampled peers are failing ones.
        assert!(p
            .stats
            .peers
            .values()
            .filter(|s| s.rounds_since_sampled > 0)
            .all(|s| s.small.lost() > 0));
    }

    #[test]
    fn a_lost_peer_is_probed_again_ahead_of_the_walk_until_judged() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers: Vec<Endpoint> = (0..1000u32)
            .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i + 10))
            .collect();
        let mut port = FakePort::default();
        port.dead.insert("n0003".into());
        let id = ProberId {
            nonce: 0,
            incarnation: 5,
        };
        let mut p = PortProber::new(local, port, settings(8), id);
        p.round(&peers, &mut || {});
        let key = peers[3].key();
        assert_eq!(p.stats.peers[&key].recent_small.len(), 1);
        // The next rounds visit it first, until its last probes were all
        // lost: judged in SUSPECT_PROBES rounds, not after a walk of 125.
        for _ in 1..SUSPECT_PROBES {
            p.round(&peers, &mut || {});
        }
        let pair = &p.stats.peers[&key];
        assert_eq!(pair.recent_small.len(), u32::from(SUSPECT_PROBES));
        assert!(pair.recent_small.last_all_lost(u32::from(SUSPECT_PROBES)));
        assert_eq!(pair.suspect_rounds, 0, "judged: back to the walk");
        p.round(&peers, &mut || {});
        assert_eq!(
            p.stats.peers[&key].recent_small.len(),
            4,
            "not probed again at once"
        );
        // The walk went on meanwhile: 5 rounds of 8, less the re-probes.
        let distinct: BTreeSet<&String> = p.port.sent.iter().map(|(n, _)| n).collect();
        assert!(distinct.len() >= 5 * 8 - 4, "{}", distinct.len());
    }

    #[test]
    fn each_node_starts_its_walk_at_its_own_place() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers: Vec<Endpoint> = (0..1000u32)
            .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i + 10))
            .collect();
        let first = |nonce: u32| {
            let id = ProberId {
                nonce,
                incarnation: 1,
            };
            let mut p = PortProber::new(local.clone(), FakePort::default(), settings(8), id);
            p.round(&peers, &mut || {});
            p.port.sent[0].0.clone()
        };
        let starts: BTreeSet<String> = [0x1234_5678, 0x9abc_def0, 17, 400_001]
            .into_iter()
            .map(first)
            .collect();
        assert_eq!(starts.len(), 4, "{starts:?}");
    }

    #[test]
    fn a_peer_that_does_not_admit_this_node_yet_is_pending_not_lost() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers = vec![ep("b", 0, "10.0.1.0/24", 11)];
        let mut port = FakePort::default();
        port.not_admitting.insert("b".into());
        let mut p = PortProber::new(local, port, settings(4), ID);
        for _ in 0..5 {
            p.round(&peers, &mut || {});
        }
        let pair = &p.stats.peers[&peers[0].key()];
        assert_eq!(
            (pair.pending, pair.small.sent, pair.small.lost()),
            (10, 0, 0)
        );
        assert!(pair.recent_small.is_empty() && pair.last_pending);
        assert_eq!(pair.suspect_rounds, 0);
        assert_eq!(p.stats.pending, 10);
        // Once admitted, it is answered.
        p.port.not_admitting.clear();
        p.round(&peers, &mut || {});
        let pair = &p.stats.peers[&peers[0].key()];
        assert_eq!(pair.small.answered, 1);
        assert!(!pair.last_pending);
        assert_eq!(pair.answered_by, Some(77));
    }

    #[test]
    fn a_neighbour_that_never_resolves_is_lost_and_said_so() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers = vec![ep("b", 0, "10.0.1.0/24", 11)];
        let mut port = FakePort::default();
        port.unresolved.insert("b".into());
        let mut p = PortProber::new(local, port, settings(4), ID);
        p.round(&peers, &mut || {});
        let pair = &p.stats.peers[&peers[0].key()];
        assert_eq!(
            (pair.small.lost(), pair.large.lost(), pair.unresolved),
            (1, 1, 2)
        );
        assert!(pair.errors.is_empty(), "a loss, not a send failure");
    }

    #[test]
    fn a_restarted_peer_with_a_new_qpn_keeps_its_identity() {
        let a = ep("b", 0, "10.0.1.0/24", 11);
        let b = ep("b", 0, "10.0.1.0/24", 99);
        assert_eq!(a.key(), b.key());
    }

    #[test]
    fn baseline_is_a_low_percentile_of_round_medians_not_the_fastest_answer() {
        let mut s = PortStats::default();
        // Rounds of answers between 10 and 50 ms with one 0.5 ms answer
        // each (a loaded VM): the old low-RTT tracker settled near 0.5 ms.
        for _ in 0..40 {
            end_round(&mut s, &mut [0.5e-3, 10e-3, 20e-3, 30e-3, 40e-3, 50e-3]);
        }
        let (b, r) = (s.baseline_seconds.unwrap(), s.recent_seconds.unwrap());
        assert_eq!(b, 30e-3);
        assert_eq!(r, 30e-3);
        // A round without answers changes nothing.
        end_round(&mut s, &mut []);
        assert_eq!(s.round_medians.len(), 40);
        // The history is bounded.
        for _ in 0..BASELINE_ROUNDS {
            end_round(&mut s, &mut [1e-3]);
        }
        assert_eq!(s.round_medians.len(), BASELINE_ROUNDS);
    }
}

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
