//! Active RDMA probes: for each target (a local port, a GID index, a
//! traffic class and a peer: loopback here, other hosts in [`peer`]) a long-lived pair of RC
//! queue pairs carries one RDMA WRITE and one SEND per round, and the round
//! trip, the outcome and a precise failure reason are kept per target.
//! The queue pairs run at the port's active MTU and the target's traffic
//! class ([`verbs::qp_path`]). A loopback round never leaves the NIC: it
//! exercises the device, its firmware, the GID and the QP path settings,
//! not the cable, the switch or its PFC and ECN configuration.
//!
//! Layers, each replaceable:
//! - [`verbs`]: the [`verbs::Verbs`] / [`verbs::Session`] traits, the only
//!   place that touches the device; [`ibverbs`] implements them on
//!   libibverbs (loaded at run time, so the binary starts everywhere).
//! - [`engine`]: one round per call, failure classification, statistics,
//!   resources kept between rounds and recreated only after a failure.
//! - [`schedule`]: when each target is due (interval with jitter).
//! - [`runner`]: the probe's own thread, fed with targets and read for
//!   results by the sampler, never blocking it.
//!
//! This crate knows nothing of Prometheus: it hands out [`ProbeResults`].

#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

pub mod engine;
#[cfg(feature = "ibverbs")]
pub mod ibverbs;
pub mod load;
pub mod peer;
pub mod peer_admit;
pub mod peer_ah;
#[cfg(feature = "ibverbs")]
pub mod peer_ibverbs;
pub mod peer_wire;
pub mod runner;
pub mod schedule;
pub mod verbs;

/// What one probe round exercises: a local port, the GID index its packets
/// use, and the peer that answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeTarget {
    /// RDMA device name (`mlx5_0`, `rxe0`).
    pub device: String,
    /// Port number, from 1.
    pub port: u8,
    /// Source GID index (and, in loopback, the destination GID too).
    pub gid_index: u32,
    /// IP traffic class of the packets (DSCP << 2 on RoCE), so that a round
    /// runs on the priority RoCE traffic uses, not priority 0.
    pub traffic_class: u8,
    pub peer: Peer,
}

/// Who answers a probe. Loopback connects two queue pairs of the same port
/// through the port's own GID. A remote peer (another node's GID, QPN, rkey
/// and buffer address, exchanged over a rendezvous) is a later variant:
/// the engine and the statistics do not depend on which one it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Peer {
    Loopback,
}

impl ProbeTarget {
    pub fn loopback(device: impl Into<String>, port: u8, gid_index: u32) -> ProbeTarget {
        ProbeTarget {
            device: device.into(),
            port,
            gid_index,
            traffic_class: 0,
            peer: Peer::Loopback,
        }
    }

    /// The same target with its packets marked with `traffic_class`.
    pub fn with_traffic_class(mut self, traffic_class: u8) -> ProbeTarget {
        self.traffic_class = traffic_class;
        self
    }

    /// The operation a round measures (the `op` label).
    pub fn op(&self) -> &'static str {
        OP_WRITE_SEND
    }
}

impl fmt::Display for ProbeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} gid {} tc {} (loopback)",
            self.device, self.port, self.gid_index, self.traffic_class
        )
    }
}

/// A round: RDMA WRITE of the payload, then a SEND carrying the round's tag;
/// the RTT runs from the post to the SEND's completion on the requester
/// (acknowledged by the responder, so both requests made the round trip).
pub const OP_WRITE_SEND: &str = "write_send";

/// Why a round failed: a bounded set, the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The device is not listed by libibverbs or `ibv_open_device` failed.
    DeviceOpen,
    /// `ibv_query_port` failed.
    QueryPort,
    /// The port is not ACTIVE.
    PortDown,
    /// The configured GID index is empty or cannot be read.
    GidIndex,
    AllocPd,
    /// `ibv_reg_mr` failed for another reason than the memlock limit.
    RegMr,
    /// `ibv_reg_mr` failed with ENOMEM/EPERM/EAGAIN: the locked-memory limit.
    Memlock,
    CreateCq,
    CreateQp,
    /// RESET → INIT.
    QpInit,
    /// INIT → RTR (where a bad GID or path shows up).
    QpRtr,
    /// RTR → RTS.
    QpRts,
    PostRecv,
    PostSend,
    PollCq,
    /// A work completion with an error status (`ibv_wc_status`).
    Completion(u32),
    /// No completion within the timeout.
    Timeout,
    /// The completion came but the bytes that landed are not the ones sent.
    PayloadMismatch,
    /// The verbs layer panicked (a bug; the session is dropped).
    Internal,
}

impl Reason {
    /// The `reason` label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::DeviceOpen => "device_open",
            Reason::QueryPort => "query_port",
            Reason::PortDown => "port_down",
            Reason::GidIndex => "gid_index",
            Reason::AllocPd => "alloc_pd",
            Reason::RegMr => "reg_mr",
            Reason::Memlock => "memlock",
            Reason::CreateCq => "create_cq",
            Reason::CreateQp => "create_qp",
            Reason::QpInit => "qp_init",
            Reason::QpRtr => "qp_rtr",
            Reason::QpRts => "qp_rts",
            Reason::PostRecv => "post_recv",
            Reason::PostSend => "post_send",
            Reason::PollCq => "poll_cq",
            Reason::Completion(status) => wc_reason(*status),
            Reason::Timeout => "timeout",
            Reason::PayloadMismatch => "payload_mismatch",
            Reason::Internal => "internal",
        }
    }
}

/// `wc_` + the status names of `enum ibv_wc_status`, in value order
/// (rdma-core `libibverbs/verbs.h`; the kernel's `enum ib_wc_status` in
/// `include/rdma/ib_verbs.h` has the same order).
const WC_LABELS: &[&str] = &[
    "wc_success",
    "wc_loc_len_err",
    "wc_loc_qp_op_err",
    "wc_loc_eec_op_err",
    "wc_loc_prot_err",
    "wc_wr_flush_err",
    "wc_mw_bind_err",
    "wc_bad_resp_err",
    "wc_loc_access_err",
    "wc_rem_inv_req_err",
    "wc_rem_access_err",
    "wc_rem_op_err",
    "wc_retry_exc_err",
    "wc_rnr_retry_exc_err",
    "wc_loc_rdd_viol_err",
    "wc_rem_inv_rd_req_err",
    "wc_rem_abort_err",
    "wc_inv_eecn_err",
    "wc_inv_eec_state_err",
    "wc_fatal_err",
    "wc_resp_timeout_err",
    "wc_general_err",
    "wc_tm_err",
    "wc_tm_rndv_incomplete",
];

/// `wc_<status>` for a work completion status; unknown values share one
/// label so that a driver cannot grow the label set.
fn wc_reason(status: u32) -> &'static str {
    usize::try_from(status)
        .ok()
        .and_then(|i| WC_LABELS.get(i))
        .copied()
        .unwrap_or("wc_unknown")
}

/// The upper-case name rdma-core prints (`IBV_WC_RETRY_EXC_ERR`).
pub fn wc_status_name(status: u32) -> String {
    usize::try_from(status)
        .ok()
        .and_then(|i| WC_LABELS.get(i))
        .map(|n| {
            format!(
                "IBV_WC_{}",
                n.trim_start_matches("wc_").to_ascii_uppercase()
            )
        })
        .unwrap_or_else(|| format!("unknown status {status}"))
}

/// One failed round: the step, the errno where the step returned one, and a
/// sentence for the log and the findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    pub errno: Option<i32>,
    pub message: String,
}

impl Failure {
    pub fn new(reason: Reason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            errno: None,
            message: message.into(),
        }
    }

    pub fn with_errno(reason: Reason, errno: Option<i32>, message: impl Into<String>) -> Failure {
        let mut message = message.into();
        if let Some(e) = errno {
            message = format!("{message}: {}", std::io::Error::from_raw_os_error(e));
        }
        Failure {
            reason,
            errno,
            message,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.message)
    }
}

/// Upper bounds of the RTT histogram, in seconds: 1 µs to 100 ms in 1-2.5-5
/// steps (a local HCA loopback is a few µs, Soft-RoCE under emulation ms).
pub const RTT_BUCKETS: &[f64] = &[
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 1e-1,
];

/// A fixed-bucket histogram of round-trip times.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last entry is the +Inf bucket.
    pub counts: Vec<u64>,
    pub sum_seconds: f64,
    pub count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; RTT_BUCKETS.len() + 1],
            sum_seconds: 0.0,
            count: 0,
        }
    }
}

impl Histogram {
    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let i = RTT_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(RTT_BUCKETS.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum_seconds += s;
        self.count += 1;
    }

    /// (upper bound, count in that bucket only), the last bound being +Inf.
    pub fn per_bucket(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, c)| (RTT_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY), *c))
            .collect()
    }

    /// (upper bound, cumulative count), the last bound being +Inf.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        self.counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                acc += c;
                (RTT_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY), acc)
            })
            .collect()
    }
}

/// Everything known about one target since the probe started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetStats {
    /// Rounds attempted (successful or not).
    pub requests: u64,
    pub successes: u64,
    /// Failed rounds by reason label.
    pub failures: BTreeMap<&'static str, u64>,
    pub rtt: Histogram,
    pub last_rtt: Option<Duration>,
    pub last_success: Option<SystemTime>,
    /// The last failure, kept until a later round succeeds.
    pub last_failure: Option<Failure>,
    /// Whether the last round succeeded (`None` before the first round).
    pub last_ok: Option<bool>,
    /// How many times resources were (re)created: 1 in a healthy steady
    /// state, growing only after failures.
    pub sessions_opened: u64,
}

/// Whether probing can work on this host at all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ProbeState {
    /// No round has run yet.
    #[default]
    Starting,
    /// Rounds run (each target's own outcome is in its stats).
    Running,
    /// libibverbs or the device cannot be used on this host; said once.
    Unavailable(String),
}

/// What the probe thread publishes for the sampler.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeResults {
    pub state: ProbeState,
    /// One entry per current target, in target order.
    pub targets: Vec<(ProbeTarget, TargetStats)>,
}
