//! The load test's part of a snapshot: the last test's results (what
//! `check --load` measured, per run and port; the file it writes is this
//! type in JSON) and this node's responder (its sessions and refusals).
//! Plain data: the rules judge it, the exposition exports it, `check`
//! prints it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The results' format version.
pub const RESULTS_VERSION: u32 = 1;

/// What this node's load-test responder did since the exporter started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResponderView {
    pub enabled: bool,
    /// Requests refused, by reason ([`LoadRefusal::as_str`]).
    pub refused: BTreeMap<LoadRefusal, u64>,
    /// Sessions ended, by why (`stopped`, `idle`, `deadline`, `byte_cap`,
    /// `failed`).
    pub sessions: BTreeMap<&'static str, u64>,
    /// Bytes received over all sessions.
    pub bytes: u64,
    /// Ports with a session running.
    pub active: Vec<(String, u8)>,
}

/// The whole part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadTestSnapshot {
    /// The last test's results (`None`: none recorded).
    pub results: Option<std::sync::Arc<LoadTestResults>>,
    /// Why the results could not be read, when they could not.
    pub results_error: Option<String>,
    pub responder: Option<ResponderView>,
}

/// One `check --load`: its runs in the order they ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadTestResults {
    pub version: u32,
    /// When the test ended, seconds since the epoch.
    pub finished_at: f64,
    pub runs: Vec<LoadRun>,
}

/// One run: every port at once, or one port alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadRun {
    /// `all` (every port at once: the node's aggregate) or `alone`.
    pub scope: RunScope,
    /// When the streams started, seconds since the epoch.
    pub started_at: f64,
    /// From the first stream's start to the last one's end.
    pub seconds: f64,
    pub ports: Vec<PortLoad>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunScope {
    All,
    Alone,
}

impl RunScope {
    /// The label value and the text.
    pub fn as_str(self) -> &'static str {
        match self {
            RunScope::All => "all",
            RunScope::Alone => "alone",
        }
    }
}

/// One port's stream in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortLoad {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// The peer asked (its address as given).
    pub peer: Option<String>,
    /// The responder's node, device and port, from its grant.
    pub peer_node: Option<String>,
    pub peer_device: Option<String>,
    pub peer_port: Option<u8>,
    /// The port's line rate after encoding, bytes per second.
    pub expected_bytes_per_second: Option<f64>,
    pub sizes: Vec<SizeLoad>,
    /// Bytes the requester wrote (completed).
    pub bytes: u64,
    /// Bytes the responder counted, from its end answer.
    pub responder_bytes: Option<u64>,
    /// What the port's own counters moved over the run.
    pub counters: Option<RunCounters>,
    pub outcome: Outcome,
    /// `host` or `gpu`.
    pub memory: String,
    /// Why host memory, when GPU memory was asked for.
    pub memory_note: Option<String>,
}

/// A port's counters over a run (the increase from the sample before the
/// streams started to the one after they ended); absent where the port or
/// its netdev has no such counter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCounters {
    /// Between the two samples.
    pub seconds: f64,
    /// `port_xmit_data` / `port_rcv_data` × 4 (the RDMA port counters).
    pub tx_bytes: Option<u64>,
    pub rx_bytes: Option<u64>,
    /// Packets, where the port counts packets but not bytes (Soft-RoCE's
    /// `sent_pkts` / `rcvd_pkts`) or besides the bytes.
    pub tx_packets: Option<u64>,
    pub rx_packets: Option<u64>,
    /// Time the port was paused by its link partner (rx) and paused it
    /// (tx), over every priority, seconds.
    pub pause_rx_seconds: Option<f64>,
    pub pause_tx_seconds: Option<f64>,
    /// Pause frames received and sent, every priority.
    pub pause_rx_frames: Option<u64>,
    pub pause_tx_frames: Option<u64>,
    /// ECN-marked RoCE packets received, CNPs sent and handled.
    pub ecn_marked: Option<u64>,
    pub cnp_sent: Option<u64>,
    pub cnp_handled: Option<u64>,
    /// Retransmissions, sequence errors and ACK timeouts of the port's QPs.
    pub retransmissions: Option<u64>,
    pub sequence_errors: Option<u64>,
    pub ack_timeouts: Option<u64>,
    /// Discards of the netdev (every reason) and link downs.
    pub discards: Option<u64>,
    pub link_downed: Option<u64>,
}

/// One message size of a port's stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeLoad {
    pub size: u64,
    /// Over the sample window; `None` when no window was reached.
    pub bytes_per_second: Option<f64>,
    pub sample_seconds: f64,
    pub bytes: u64,
}

/// How a port's stream went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Every size ran its time.
    Completed,
    /// The stream stopped early: an error completion, a stall, a failed post.
    Aborted { reason: String, message: String },
    /// The stream never started: no responder granted a session, or the
    /// port could not be opened.
    NotRun { message: String },
}

impl Outcome {
    /// The `outcome` label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Aborted { .. } => "aborted",
            Outcome::NotRun { .. } => "not_run",
        }
    }
}

impl PortLoad {
    /// The figure at the largest message size that has one: (size, bytes
    /// per second).
    pub fn at_largest(&self) -> Option<(u64, f64)> {
        self.sizes
            .iter()
            .filter_map(|s| s.bytes_per_second.map(|b| (s.size, b)))
            .max_by_key(|(size, _)| *size)
    }

    /// The best figure over the sizes: (size, bytes per second).
    pub fn best(&self) -> Option<(u64, f64)> {
        self.sizes
            .iter()
            .filter_map(|s| s.bytes_per_second.map(|b| (s.size, b)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// GPU memory was registered and the stream moved bytes through it.
    pub fn gdr_exercised(&self) -> bool {
        self.memory == "gpu" && self.outcome == Outcome::Completed && self.bytes > 0
    }
}

impl LoadRun {
    /// The node's figure: the sum over the ports at their largest size
    /// (ports without one count nothing).
    pub fn node_bytes_per_second(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .ports
            .iter()
            .filter_map(|p| p.at_largest().map(|(_, b)| b))
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }

    /// The node's line rate: the sum over the ports that have one.
    pub fn node_expected(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .ports
            .iter()
            .filter_map(|p| p.expected_bytes_per_second)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }
}

/// Why the responder refused a request: the `reason` label of
/// `roce_load_test_responder_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LoadRefusal {
    /// The responder is off (`load_test.responder`).
    Disabled,
    /// Not over TLS, or the server authenticates nobody.
    Unauthenticated,
    /// A query that does not parse or is out of its bounds.
    Malformed,
    /// The requester's GID is no unicast host address.
    Gid,
    /// No port of this node has the requester's GID in its subnet.
    OffRail,
    /// A session already runs on the port.
    Busy,
    /// The port carries more than `max_busy_share` of its line rate, or
    /// what it carries is not measured yet.
    PortLoaded,
    /// More time or bytes than the caps allow.
    OverCap,
    /// The queue pairs or memory could not be set up.
    SetupFailed,
    /// An end request for no running session.
    UnknownSession,
}

impl LoadRefusal {
    pub const ALL: [LoadRefusal; 10] = [
        LoadRefusal::Disabled,
        LoadRefusal::Unauthenticated,
        LoadRefusal::Malformed,
        LoadRefusal::Gid,
        LoadRefusal::OffRail,
        LoadRefusal::Busy,
        LoadRefusal::PortLoaded,
        LoadRefusal::OverCap,
        LoadRefusal::SetupFailed,
        LoadRefusal::UnknownSession,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LoadRefusal::Disabled => "disabled",
            LoadRefusal::Unauthenticated => "unauthenticated",
            LoadRefusal::Malformed => "malformed",
            LoadRefusal::Gid => "gid",
            LoadRefusal::OffRail => "off_rail",
            LoadRefusal::Busy => "busy",
            LoadRefusal::PortLoaded => "port_loaded",
            LoadRefusal::OverCap => "over_cap",
            LoadRefusal::SetupFailed => "setup_failed",
            LoadRefusal::UnknownSession => "unknown_session",
        }
    }

    pub fn parse(s: &str) -> Option<LoadRefusal> {
        LoadRefusal::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The HTTP status of the refusal.
    pub fn status(self) -> u16 {
        match self {
            LoadRefusal::Disabled | LoadRefusal::UnknownSession => 404,
            LoadRefusal::Unauthenticated => 403,
            LoadRefusal::Malformed => 400,
            LoadRefusal::Gid | LoadRefusal::OffRail | LoadRefusal::OverCap => 422,
            LoadRefusal::Busy | LoadRefusal::PortLoaded => 409,
            LoadRefusal::SetupFailed => 500,
        }
    }
}

/// Session end reasons, in label order.
pub const SESSION_ENDS: [&str; 5] = ["stopped", "idle", "deadline", "byte_cap", "failed"];
