//! Hardware counters with a known meaning: one table maps (provider, kernel
//! counter name) to a semantic family, e.g. mlx5's `np_cnp_sent`, bnxt_re's
//! `tx_cnp_pkts` and irdma's `cnpSent` all to `roce_cnp_sent_total`.
//! Counters not in the table are exported under their kernel name by
//! `roce_port_hw_stat_total{stat}` (see [`super::rdma::HW_STAT`]).
//!
//! A name is mapped only where the kernel source (and, for mlx5, NVIDIA's
//! counter documentation) makes its meaning certain; the table cites the
//! kernel file per provider and is rendered into the metric reference. A
//! provider maps each kernel name at most once and each meaning at most
//! once, and the meanings that share a family differ in its `side` or `op`
//! label ([`target`]), so a port never carries two series of one family
//! with the same labels.

use roce_rdma::{Device, Port};

use super::labels::{label_set, PortLabels, PortStatLabels};
use super::{push_into, Fam, Family, FamilySamples, MetricKind, Row, Samples};
use crate::meaning::{hw_meaning, HwMeaning, Provider, HW_MAPPINGS};

const SOURCE: &str =
    "hardware counters (RDMA netlink or ports/<port>/hw_counters/), kernel names mapped per driver in docs/metrics.md";

label_set! {
    /// An RDMA port and the side of a transfer: requester (the QP that
    /// posted the work request) or responder (the QP that received it).
    pub struct PortSideLabels { device, port, side }
}

label_set! {
    /// An RDMA port and an RDMA operation (read, write, atomic).
    pub struct PortOpLabels { device, port, op }
}

macro_rules! semantic {
    ($base:literal, $help:literal) => {
        Fam::new(Row {
            base: $base,
            kind: MetricKind::Counter,
            unit: None,
            help: $help,
            source: SOURCE,
        })
    };
}

pub static CNP_SENT: Fam<PortLabels> = semantic!(
    "roce_cnp_sent",
    "Congestion notification packets (CNPs) sent by this port as notification point, in answer to ECN-marked arrivals."
);
pub static CNP_RECEIVED: Fam<PortLabels> = semantic!(
    "roce_cnp_received",
    "Congestion notification packets (CNPs) received by this port as reaction point."
);
pub static CNP_HANDLED: Fam<PortLabels> = semantic!(
    "roce_cnp_handled",
    "CNPs received and handled: the reaction point lowered its rate (DCQCN)."
);
pub static CNP_IGNORED: Fam<PortLabels> = semantic!(
    "roce_cnp_ignored",
    "CNPs received and ignored by the reaction point."
);
pub static ECN_MARKED: Fam<PortLabels> = semantic!(
    "roce_ecn_marked_packets",
    "RoCE packets received with the ECN congestion-experienced mark."
);
pub static OUT_OF_BUFFER: Fam<PortLabels> = semantic!(
    "roce_out_of_buffer_drops",
    "Packets dropped because no receive WQE or buffer was available."
);
pub static OUT_OF_SEQUENCE: Fam<PortLabels> = semantic!(
    "roce_out_of_sequence_packets",
    "Packets the responder received with a PSN beyond the expected one (a sign of loss on the path)."
);
pub static PACKET_SEQ_ERR: Fam<PortLabels> = semantic!(
    "roce_packet_sequence_errors",
    "NAKs with a PSN sequence error received by the requester (the responder saw a PSN gap)."
);
pub static IMPLIED_NAK_SEQ_ERR: Fam<PortLabels> = semantic!(
    "roce_implied_nak_sequence_errors",
    "Implied NAK sequence errors: an ACK or read response for a later PSN arrived first."
);
pub static LOCAL_ACK_TIMEOUT: Fam<PortLabels> = semantic!(
    "roce_local_ack_timeout_errors",
    "Times the requester's ACK timer expired and it retransmitted."
);
pub static RETRANSMISSIONS: Fam<PortLabels> = semantic!(
    "roce_retransmissions",
    "Requester retransmissions; packets or retry sequences depending on the driver (see the mapping table)."
);
pub static DUPLICATE_REQUESTS: Fam<PortLabels> = semantic!(
    "roce_duplicate_requests",
    "Duplicate requests received by the responder (a request it had already executed, retransmitted by the requester)."
);
pub static RNR_NAKS_RECEIVED: Fam<PortLabels> = semantic!(
    "roce_rnr_naks_received",
    "Receiver-not-ready NAKs received by the requester: the remote side had no receive WQE posted."
);
pub static RNR_RETRIES_EXCEEDED: Fam<PortLabels> = semantic!(
    "roce_rnr_retries_exceeded_errors",
    "Work requests failed because the RNR NAK retry count was exceeded (completion with IB_WC_RNR_RETRY_EXC_ERR)."
);
pub static TRANSPORT_RETRIES_EXCEEDED: Fam<PortLabels> = semantic!(
    "roce_transport_retries_exceeded_errors",
    "Work requests failed because the transport retry count was exceeded (completion with IB_WC_RETRY_EXC_ERR)."
);
pub static ICRC_ERRORS: Fam<PortLabels> = semantic!(
    "roce_icrc_errors",
    "RoCE packets received with an invalid ICRC."
);
pub static COMPLETION_ERRORS: Fam<PortSideLabels> = semantic!(
    "roce_completion_errors",
    "Work requests that completed in error (a work completion with an error status), by the side that posted them: requester (sends, RDMA writes, reads and atomics) or responder (receive work requests). Flushed completions are counted too; how many is roce_completion_flush_errors_total, and the difference is what failed."
);
pub static COMPLETION_FLUSH_ERRORS: Fam<PortSideLabels> = semantic!(
    "roce_completion_flush_errors",
    "Completions in error that were flushes (IB_WC_WR_FLUSH_ERR): work requests returned unexecuted because their QP was already in the error state, as at every application's teardown (the receive work requests it posted and never used). Part of roce_completion_errors_total."
);
pub static REMOTE_ACCESS_ERRORS: Fam<PortSideLabels> = semantic!(
    "roce_remote_access_errors",
    "Remote access errors: side=requester, the peer refused an RDMA read, write or atomic of this port's QPs (wrong rkey, address range or access rights); side=responder, this port refused one of a peer's."
);
pub static REMOTE_INVALID_REQUEST_ERRORS: Fam<PortLabels> = semantic!(
    "roce_remote_invalid_request_errors",
    "Invalid request errors the requester detected: the peer NAKed the request as invalid (NVIDIA: it detected an invalid opcode request)."
);
pub static LOCAL_LENGTH_ERRORS: Fam<PortLabels> = semantic!(
    "roce_local_length_errors",
    "Messages the responder received longer than the receive work request posted for them."
);
pub static REQUESTS_RECEIVED: Fam<PortOpLabels> = semantic!(
    "roce_requests_received",
    "RDMA requests received from peers, by operation (read, write, atomic): the work the port's QPs did as responder, in requests, not bytes."
);
pub static DCT_CONNECT_REQUESTS: Fam<PortLabels> = semantic!(
    "roce_dct_connect_requests_received",
    "Connection requests received by the port's dynamically connected targets (DCT, the DC transport of mlx5)."
);
pub static ADAPTIVE_RETRANSMISSION_TIMEOUTS: Fam<PortLabels> = semantic!(
    "roce_adaptive_retransmission_timeouts",
    "Times RoCE traffic reached the timeout of adaptive retransmission (mlx5; its adaptive retransmissions are roce_retransmissions_total)."
);
pub static SLOW_RESTARTS: Fam<PortLabels> = semantic!(
    "roce_slow_restarts",
    "Times RoCE slow restart was used (mlx5 congestion control)."
);
pub static SLOW_RESTART_CNPS: Fam<PortLabels> = semantic!(
    "roce_slow_restart_cnps",
    "Times RoCE slow restart generated CNP packets (mlx5)."
);
pub static SLOW_RESTART_TRANSITIONS: Fam<PortLabels> = semantic!(
    "roce_slow_restart_transitions",
    "Times RoCE slow restart changed state to slow restart (mlx5)."
);

/// Where a meaning's counter goes: a family of its own, or one series of a
/// family shared by a pair (`side`) or a set (`op`).
#[derive(Debug, Clone, Copy)]
pub enum Target {
    Port(&'static Fam<PortLabels<'static>>),
    Side(&'static Fam<PortSideLabels<'static>>, &'static str),
    Op(&'static Fam<PortOpLabels<'static>>, &'static str),
}

impl Target {
    pub fn family(self) -> &'static Family {
        match self {
            Target::Port(f) => &f.family,
            Target::Side(f, _) => &f.family,
            Target::Op(f, _) => &f.family,
        }
    }

    /// The label that tells the series apart within its family, as the
    /// reference writes it (`side="requester"`), or empty.
    pub fn label(self) -> String {
        match self {
            Target::Port(_) => String::new(),
            Target::Side(_, v) => format!("side=\"{v}\""),
            Target::Op(_, v) => format!("op=\"{v}\""),
        }
    }
}

/// The series a meaning's counter is exported as.
pub fn target(meaning: HwMeaning) -> Target {
    use HwMeaning::*;
    use Target::{Op, Port, Side};
    match meaning {
        CnpSent => Port(&CNP_SENT),
        CnpReceived => Port(&CNP_RECEIVED),
        CnpHandled => Port(&CNP_HANDLED),
        CnpIgnored => Port(&CNP_IGNORED),
        EcnMarked => Port(&ECN_MARKED),
        OutOfBuffer => Port(&OUT_OF_BUFFER),
        OutOfSequence => Port(&OUT_OF_SEQUENCE),
        PacketSeqErr => Port(&PACKET_SEQ_ERR),
        ImpliedNakSeqErr => Port(&IMPLIED_NAK_SEQ_ERR),
        LocalAckTimeout => Port(&LOCAL_ACK_TIMEOUT),
        Retransmissions => Port(&RETRANSMISSIONS),
        DuplicateRequests => Port(&DUPLICATE_REQUESTS),
        RnrNaksReceived => Port(&RNR_NAKS_RECEIVED),
        RnrRetriesExceeded => Port(&RNR_RETRIES_EXCEEDED),
        TransportRetriesExceeded => Port(&TRANSPORT_RETRIES_EXCEEDED),
        IcrcErrors => Port(&ICRC_ERRORS),
        CompletionErrorsRequester => Side(&COMPLETION_ERRORS, "requester"),
        CompletionErrorsResponder => Side(&COMPLETION_ERRORS, "responder"),
        FlushErrorsRequester => Side(&COMPLETION_FLUSH_ERRORS, "requester"),
        FlushErrorsResponder => Side(&COMPLETION_FLUSH_ERRORS, "responder"),
        RemoteAccessErrorsRequester => Side(&REMOTE_ACCESS_ERRORS, "requester"),
        RemoteAccessErrorsResponder => Side(&REMOTE_ACCESS_ERRORS, "responder"),
        RemoteInvalidRequestErrors => Port(&REMOTE_INVALID_REQUEST_ERRORS),
        LocalLengthErrors => Port(&LOCAL_LENGTH_ERRORS),
        ReadRequestsReceived => Op(&REQUESTS_RECEIVED, "read"),
        WriteRequestsReceived => Op(&REQUESTS_RECEIVED, "write"),
        AtomicRequestsReceived => Op(&REQUESTS_RECEIVED, "atomic"),
        DctConnectsReceived => Port(&DCT_CONNECT_REQUESTS),
        AdaptiveRetransmissionTimeouts => Port(&ADAPTIVE_RETRANSMISSION_TIMEOUTS),
        SlowRestarts => Port(&SLOW_RESTARTS),
        SlowRestartCnps => Port(&SLOW_RESTART_CNPS),
        SlowRestartTransitions => Port(&SLOW_RESTART_TRANSITIONS),
    }
}

/// The family of a meaning.
pub fn family(meaning: HwMeaning) -> &'static Family {
    target(meaning).family()
}

/// The semantic families, each once, in [`HwMeaning::ALL`]'s order.
pub fn families() -> Vec<&'static Family> {
    let mut out: Vec<&'static Family> = Vec::new();
    for m in HwMeaning::ALL {
        let f = family(m);
        if !out.iter().any(|o| o.base == f.base) {
            out.push(f);
        }
    }
    out
}

/// The mapping table as markdown, for the metric reference.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "Mapping of driver counter names to these families (every other hardware counter is \
         exported as `roce_port_hw_stat_total{stat=\"<kernel name>\"}`):\n\n\
         | driver | kernel counter | family | note |\n|---|---|---|---|\n",
    );
    for m in HW_MAPPINGS {
        let t = target(m.meaning);
        let label = t.label();
        let series = match label.is_empty() {
            true => t.family().exposed_name(),
            false => format!("{}{{{label}}}", t.family().exposed_name()),
        };
        out.push_str(&format!(
            "| {} | `{}` | `{}` | {} |\n",
            m.provider.as_str(),
            m.name,
            series,
            m.note.replace('|', "\\|")
        ));
    }
    out.push_str("\nKernel sources of the names:\n\n");
    for p in Provider::ALL {
        out.push_str(&format!("- {}: `{}`", p.as_str(), p.kernel_source()));
        if p == Provider::Ionic {
            out.push_str(" (names come from the device firmware at run time: none mapped)");
        }
        out.push('\n');
    }
    out
}

/// Gathers the hardware counters of every port into semantic families and
/// `roce_port_hw_stat_total`.
pub struct Collector {
    semantic: Vec<FamilySamples>,
    other: Samples<PortStatLabels<'static>>,
}

impl Default for Collector {
    fn default() -> Self {
        Self::new()
    }
}

impl Collector {
    pub fn new() -> Self {
        Collector {
            semantic: families().into_iter().map(FamilySamples::new).collect(),
            other: Samples::new(&super::rdma::HW_STAT),
        }
    }

    /// Adds the hardware counters of one port; `labels` name it.
    pub fn add_port(&mut self, device: &Device, labels: PortLabels<'_>, port: &Port) {
        let provider = Provider::of(device);
        let PortLabels {
            device: dev,
            port: p,
        } = labels;
        for counter in &port.hw_counters {
            let value = counter.value;
            match hw_meaning(provider, &counter.name).map(target) {
                Some(Target::Port(f)) => push_into(&mut self.semantic, f, labels, value),
                Some(Target::Side(f, side)) => {
                    let labels = PortSideLabels {
                        device: dev,
                        port: p,
                        side,
                    };
                    push_into(&mut self.semantic, f, labels, value);
                }
                Some(Target::Op(f, op)) => {
                    let labels = PortOpLabels {
                        device: dev,
                        port: p,
                        op,
                    };
                    push_into(&mut self.semantic, f, labels, value);
                }
                None => {
                    let labels = PortStatLabels {
                        device: dev,
                        port: p,
                        stat: &counter.name,
                    };
                    self.other.push(labels, value);
                }
            }
        }
    }

    pub fn finish(self, out: &mut Vec<FamilySamples>) {
        out.extend(self.semantic);
        out.push(self.other.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_fed_by_some_mapping() {
        for f in families() {
            assert!(
                HW_MAPPINGS.iter().any(|m| family(m.meaning).base == f.base),
                "{} has no mapping",
                f.base
            );
        }
    }

    #[test]
    fn meanings_of_one_family_differ_in_their_label() {
        for (i, a) in HwMeaning::ALL.iter().enumerate() {
            for b in &HwMeaning::ALL[i + 1..] {
                let (ta, tb) = (target(*a), target(*b));
                if ta.family().base == tb.family().base {
                    assert!(
                        !ta.label().is_empty() && ta.label() != tb.label(),
                        "{a:?} and {b:?} would give one series"
                    );
                }
            }
        }
    }
}
