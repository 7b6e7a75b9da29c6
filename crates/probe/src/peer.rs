//! Probes between hosts ("peer probes"): each exporter keeps one UD
//! responder queue pair per active port and publishes its [`Endpoint`];
//! the prober sends small and MTU-sized UD datagrams (a nonce and a
//! sequence number only, no host data) to a bounded, rotating sample of
//! the configured peers' endpoints on the same rail, and waits for the
//! echo.
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
//! rail rule, the rotating sample, the traffic plan (rate bound, sizes,
//! flow labels) and the statistics. The device work sits behind
//! [`PeerVerbs`] / [`PeerPort`] so that all of it is tested with a fake.

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv6Addr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::verbs::OpenError;
use crate::{Failure, Histogram};

/// The Q_Key every responder and prober uses. A datagram whose Q_Key
/// differs is dropped by the receiving HCA, so traffic of other UD
/// applications never reaches the responder. (0x11111111 is the
/// well-known key of rdma-core's examples; this one is ours.)
pub const QKEY: u32 = 0x5250_4d31;

/// Probe payload sizes: the small one fits any MTU; the large one is the
/// port's active MTU minus the 40-byte GRH a UD receive carries (a UD
/// message cannot span packets, so "MTU-sized" is exactly this).
pub const SMALL_PAYLOAD: u32 = 64;
pub const GRH_LEN: u32 = 40;

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

pub const ENDPOINTS_VERSION: u32 = 1;

/// Parses a peer's endpoints document, bounded: at most 64 endpoints
/// (no node has more ports), malformed input an error, never a panic.
pub fn parse_endpoints(body: &[u8]) -> Result<Vec<Endpoint>, String> {
    let doc: Endpoints =
        serde_json::from_slice(body).map_err(|e| format!("endpoints document: {e}"))?;
    if doc.version != ENDPOINTS_VERSION {
        return Err(format!(
            "endpoints document version {} (expected {ENDPOINTS_VERSION})",
            doc.version
        ));
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
    /// Payload bytes (the datagram carries the nonce and seq, then zeros).
    pub size: u32,
    /// The GRH flow label: RoCE v2 derives the UDP source port from it,
    /// so each value may hash to another ECMP path.
    pub flow_label: u32,
    pub traffic_class: u8,
}

/// The payload of a probe: nonce, sequence, zero padding. No host data.
pub fn probe_payload(nonce: u32, seq: u32, size: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(size as usize);
    v.extend_from_slice(&nonce.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    v.resize((size as usize).max(8), 0);
    v
}

/// The (nonce, seq) of a received payload; `None` when too short.
pub fn parse_payload(b: &[u8]) -> Option<(u32, u32)> {
    let nonce = u32::from_be_bytes(b.get(0..4)?.try_into().ok()?);
    let seq = u32::from_be_bytes(b.get(4..8)?.try_into().ok()?);
    Some((nonce, seq))
}

/// What happened to one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered by the probed endpoint with the probe's nonce and seq.
    Answered(Duration),
    /// No answer within the timeout.
    Lost,
    /// The probe could not be sent (address handle, post, completion error).
    Failed(Failure),
}

/// What the responder did since it was last asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    pub answered: u64,
    /// Probes from senders that are no configured peer (GID, QPN): not
    /// answered.
    pub unknown_dropped: u64,
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
    /// Sends `probe` to `to` and waits for the echo at most `timeout`,
    /// answering (through `allowed`) the probes other nodes send meanwhile.
    /// Datagrams that are neither an allowed probe nor this probe's echo
    /// are dropped and counted in `Served::unknown_dropped`.
    fn ping(
        &mut self,
        to: &Endpoint,
        probe: &Probe,
        timeout: Duration,
        allowed: &dyn Fn(&Ipv6Addr, u32) -> bool,
        served: &mut Served,
    ) -> Outcome;
    /// Answers pending probes without sending one.
    fn serve(&mut self, allowed: &dyn Fn(&Ipv6Addr, u32) -> bool, served: &mut Served);
    /// Waits up to `timeout` for datagrams and answers them, returning
    /// early once some were handled (a port with a completion channel
    /// sleeps in the kernel meanwhile; this default polls every
    /// millisecond).
    fn idle(
        &mut self,
        timeout: Duration,
        allowed: &dyn Fn(&Ipv6Addr, u32) -> bool,
        served: &mut Served,
    ) {
        self.serve(allowed, served);
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
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

/// Rotating sample: round r probes `sample` matching peers starting at
/// offset r·sample, so that every peer is probed once every
/// ⌈n/sample⌉ rounds and the per-round cost is bounded.
pub fn rotate(peers: &[Endpoint], sample: usize, round: u64) -> Vec<&Endpoint> {
    let n = peers.len();
    if n == 0 || sample == 0 {
        return Vec::new();
    }
    let k = sample.min(n);
    let start = ((round as u128 * k as u128) % n as u128) as usize;
    (0..k).filter_map(|i| peers.get((start + i) % n)).collect()
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

/// The flow label of the n-th probe to a peer: cycles through 16 values
/// (20-bit labels, spread), so that ECMP hashing of the UDP source port
/// takes a pair over up to 16 paths.
pub fn flow_label(n: u64) -> u32 {
    const PATHS: u64 = 16;
    let i = (n % PATHS) as u32;
    // Spread over the 20-bit space, never 0 (0 means "no label": RoCE v2
    // would then use a source port of the QP's own choice).
    (i.wrapping_mul(0x9E37) & 0xF_FFFF) | 0x1_0000
}

/// Settings of the prober.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSettings {
    pub packets_per_second: f64,
    /// Peers per round and port.
    pub sample: usize,
    pub timeout: Duration,
    pub all_to_all: bool,
    pub traffic_class: u8,
}

impl Default for PeerSettings {
    fn default() -> Self {
        PeerSettings {
            packets_per_second: DEFAULT_PACKETS_PER_SECOND,
            sample: 8,
            timeout: Duration::from_millis(500),
            all_to_all: false,
            traffic_class: 0,
        }
    }
}

/// The peer prober of one local port: runs rounds over a verbs port and
/// keeps the statistics. No thread and no clock of its own: the caller
/// sleeps [`PeerSettings`]-spaced between probes (see [`spacing`]).
pub struct PortProber<P: PeerPort> {
    pub local: Endpoint,
    port: P,
    pub settings: PeerSettings,
    /// (GID, QPN) of the matching peers' responders as of the last round,
    /// sorted: who [`PortProber::idle`] answers.
    known: Vec<(Ipv6Addr, u32)>,
    nonce: u32,
    seq: u32,
    round: u64,
    pub stats: PortStats,
}

impl<P: PeerPort> PortProber<P> {
    pub fn new(local: Endpoint, port: P, settings: PeerSettings, nonce: u32) -> Self {
        PortProber {
            local,
            port,
            settings,
            known: Vec::new(),
            nonce,
            seq: 0,
            round: 0,
            stats: PortStats::default(),
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
        let sample = self.settings.sample.clamp(1, MAX_SAMPLE);
        let chosen: Vec<Endpoint> = rotate(&matching, sample, self.round)
            .into_iter()
            .cloned()
            .collect();
        self.round += 1;
        let mut allowed_set: Vec<(Ipv6Addr, u32)> =
            matching.iter().map(|p| (p.gid, p.qpn)).collect();
        allowed_set.sort();
        allowed_set.dedup();
        self.known = allowed_set.clone();
        let allowed =
            move |gid: &Ipv6Addr, qpn: u32| allowed_set.binary_search(&(*gid, qpn)).is_ok();
        for p in self.stats.peers.values_mut() {
            p.rounds_since_sampled += 1;
        }
        let large = self.local.mtu.saturating_sub(GRH_LEN).max(SMALL_PAYLOAD);
        // Small probes only: a large probe's RTT includes its
        // serialization, so mixing sizes would blur the baseline.
        let mut round_rtts: Vec<f64> = Vec::with_capacity(chosen.len());
        for peer in &chosen {
            let key = peer.key();
            // The large probe is sized by this port's MTU, not the peer's:
            // a peer (or a path) with a lower MTU is what it must reveal.
            for (size, is_large) in [(SMALL_PAYLOAD, false), (large, true)] {
                self.seq = self.seq.wrapping_add(1);
                let probe = Probe {
                    nonce: self.nonce,
                    seq: self.seq,
                    size,
                    flow_label: flow_label(u64::from(self.seq / 2)),
                    traffic_class: self.settings.traffic_class,
                };
                let mut served = Served::default();
                let outcome =
                    self.port
                        .ping(peer, &probe, self.settings.timeout, &allowed, &mut served);
                self.stats.served.answered += served.answered;
                self.stats.served.unknown_dropped += served.unknown_dropped;
                let pair = self.stats.peers.entry(key.clone()).or_default();
                pair.rounds_since_sampled = 0;
                let (port_sent, pair_sent, last, recent) = if is_large {
                    (
                        &mut self.stats.large,
                        &mut pair.large,
                        &mut pair.last_large_ok,
                        &mut pair.recent_large,
                    )
                } else {
                    (
                        &mut self.stats.small,
                        &mut pair.small,
                        &mut pair.last_small_ok,
                        &mut pair.recent_small,
                    )
                };
                match outcome {
                    Outcome::Answered(rtt) => {
                        port_sent.sent += 1;
                        port_sent.answered += 1;
                        pair_sent.sent += 1;
                        pair_sent.answered += 1;
                        *last = Some(true);
                        recent.push(true);
                        self.stats.rtt.observe(rtt);
                        if !is_large {
                            round_rtts.push(rtt.as_secs_f64());
                        }
                    }
                    Outcome::Lost => {
                        port_sent.sent += 1;
                        pair_sent.sent += 1;
                        *last = Some(false);
                        recent.push(false);
                    }
                    Outcome::Failed(f) => {
                        *pair.errors.entry(f.reason.as_str()).or_insert(0) += 1;
                    }
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
        self.port.serve(&allowed, &mut served);
        self.stats.served.answered += served.answered;
        self.stats.served.unknown_dropped += served.unknown_dropped;
        bound_pairs(&mut self.stats.peers, &chosen);
    }

    /// Waits `d`, answering the probes of the peers known at the last
    /// round meanwhile.
    pub fn idle(&mut self, d: Duration) {
        let until = std::time::Instant::now() + d;
        let known = &self.known;
        let allowed = |g: &Ipv6Addr, q: u32| known.binary_search(&(*g, q)).is_ok();
        let mut served = Served::default();
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                self.port.serve(&allowed, &mut served);
                break;
            }
            self.port.idle(left, &allowed, &mut served);
        }
        self.stats.served.answered += served.answered;
        self.stats.served.unknown_dropped += served.unknown_dropped;
    }

    /// Answers pending probes between rounds.
    pub fn serve(&mut self, peers: &[Endpoint]) {
        let mut set: Vec<(Ipv6Addr, u32)> = self
            .matching(peers)
            .iter()
            .map(|p| (p.gid, p.qpn))
            .collect();
        set.sort();
        set.dedup();
        self.known = set.clone();
        let mut served = Served::default();
        self.port
            .serve(&move |g: &Ipv6Addr, q| set.contains(&(*g, q)), &mut served);
        self.stats.served.answered += served.answered;
        self.stats.served.unknown_dropped += served.unknown_dropped;
    }
}

/// Keeps the pairs of the current sample and the [`TOP_FAILING`] others
/// with the most losses; the rest are forgotten (their losses stay in the
/// port's totals).
fn bound_pairs(pairs: &mut BTreeMap<PeerKey, PairStats>, chosen: &[Endpoint]) {
    let now: Vec<PeerKey> = chosen.iter().map(Endpoint::key).collect();
    let mut others: Vec<(u64, PeerKey)> = pairs
        .iter()
        .filter(|(k, _)| !now.contains(k))
        .map(|(k, s)| (s.small.lost() + s.large.lost(), k.clone()))
        .collect();
    others.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let keep: Vec<PeerKey> = others
        .into_iter()
        .filter(|(lost, _)| *lost > 0)
        .take(TOP_FAILING)
        .map(|(_, k)| k)
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
/// datagrams from strangers waiting at the responder.
pub mod fake {
    use std::collections::{BTreeMap, BTreeSet};
    use std::net::Ipv6Addr;
    use std::time::Duration;

    use super::{Endpoint, Outcome, PeerPort, Probe, Served};

    /// A fabric in memory: which (peer node, size class) answer, with what RTT.
    #[derive(Debug, Default)]
    pub struct FakePort {
        pub gid: Option<Ipv6Addr>,
        /// Nodes that answer nothing.
        pub dead: BTreeSet<String>,
        /// Nodes whose path drops datagrams larger than this payload.
        pub mtu_limit: BTreeMap<String, u32>,
        /// Every n-th probe to this node is lost.
        pub lossy: BTreeMap<String, u32>,
        pub rtt: Duration,
        /// When not empty, the n-th answer (by probe sequence) takes
        /// `rtt_series[n % len]` instead of `rtt` (jitter, outliers).
        pub rtt_series: Vec<Duration>,
        /// Unknown datagrams waiting at the responder.
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
            allowed: &dyn Fn(&Ipv6Addr, u32) -> bool,
            served: &mut Served,
        ) -> Outcome {
            self.sent.push((to.node.clone(), *probe));
            self.serve(allowed, served);
            if self.dead.contains(&to.node) {
                return Outcome::Lost;
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
            match self.rtt_series.len() {
                0 => Outcome::Answered(self.rtt),
                n => Outcome::Answered(self.rtt_series[probe.seq as usize % n]),
            }
        }
        fn serve(&mut self, allowed: &dyn Fn(&Ipv6Addr, u32) -> bool, served: &mut Served) {
            // One datagram from a stranger per call, one from a configured peer.
            if self.strangers > 0 {
                self.strangers -= 1;
                let stranger = std::net::Ipv4Addr::new(192, 168, 9, 9).to_ipv6_mapped();
                if allowed(&stranger, 99) {
                    served.answered += 1;
                } else {
                    served.unknown_dropped += 1;
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
        }
    }

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
    fn rotation_covers_every_peer_with_a_bounded_sample() {
        let peers: Vec<Endpoint> = (0..10)
            .map(|i| ep(&format!("n{i}"), 0, "10.0.1.0/24", i))
            .collect();
        let mut seen = BTreeSet::new();
        for r in 0..5 {
            let s = rotate(&peers, 3, r);
            assert_eq!(s.len(), 3);
            seen.extend(s.iter().map(|e| e.node.clone()));
        }
        assert_eq!(seen.len(), 10);
        assert!(rotate(&peers, 0, 1).is_empty());
        assert!(rotate(&[], 3, 1).is_empty());
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
        let labels: BTreeSet<u32> = (0..16).map(flow_label).collect();
        assert_eq!(labels.len(), 16);
        assert!(labels.iter().all(|l| *l != 0 && *l <= 0xF_FFFF));
    }

    #[test]
    fn payload_carries_only_nonce_and_sequence() {
        let p = probe_payload(0xdead_beef, 7, 64);
        assert_eq!(p.len(), 64);
        assert_eq!(parse_payload(&p), Some((0xdead_beef, 7)));
        assert!(p[8..].iter().all(|b| *b == 0));
        assert_eq!(parse_payload(&[1, 2, 3]), None);
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
        assert!(parse_endpoints(br#"{"version":2,"endpoints":[]}"#).is_err());
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
        let mut p = PortProber::new(local, port, settings(4), 1);
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
        assert_eq!(sizes, BTreeSet::from([64, 4056]));
        assert!(p.port.sent.iter().all(|(n, _)| n != "other-rail"));
        let labels: BTreeSet<u32> = p.port.sent.iter().map(|(_, pr)| pr.flow_label).collect();
        assert!(labels.len() >= 2, "flows vary: {labels:?}");
    }

    #[test]
    fn path_mtu_shows_as_large_lost_small_answered() {
        let local = ep("me", 0, "10.0.1.0/24", 7);
        let peers = vec![ep("b", 0, "10.0.1.0/24", 11)];
        let mut port = FakePort::default();
        port.mtu_limit.insert("b".into(), 1500 - 40);
        let mut p = PortProber::new(local, port, settings(4), 1);
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
        let mut p = PortProber::new(local, port, settings(4), 1);
        p.round(&[ep("b", 0, "10.0.1.0/24", 11)], &mut || {});
        p.serve(&[]);
        assert_eq!(p.stats.served.unknown_dropped, 3);
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
        let mut p = PortProber::new(local, port, settings(8), 1);
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
