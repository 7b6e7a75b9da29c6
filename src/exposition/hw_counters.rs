//! Hardware counters with a known meaning: one table maps (provider, kernel
//! counter name) to a semantic family, e.g. mlx5's `np_cnp_sent`, bnxt_re's
//! `tx_cnp_pkts` and irdma's `cnpSent` all to `roce_cnp_sent_total`.
//! Counters not in the table are exported under their kernel name by
//! `roce_port_hw_stat_total{stat}` (see [`super::rdma::HW_STAT`]).
//!
//! A name is mapped only where the kernel source makes its meaning certain;
//! the table cites the kernel file per provider and is rendered into the
//! metric reference. A provider maps each kernel name at most once and each
//! family at most once, so a port never carries two series of one family.

use roce_rdma::{Device, Port};

use super::{Family, FamilySamples, Kind};

const PORT: &[&str] = &["device", "port"];

const SOURCE: &str =
    "hardware counters (RDMA netlink or ports/<port>/hw_counters/), kernel names mapped per driver in docs/metrics.md";

macro_rules! semantic {
    ($base:literal, $help:literal) => {
        Family {
            base: $base,
            kind: Kind::Counter,
            unit: None,
            labels: PORT,
            help: $help,
            source: SOURCE,
        }
    };
}

/// The semantic families, one variant per row of [`FAMILIES`] (same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Semantic {
    CnpSent,
    CnpReceived,
    CnpHandled,
    CnpIgnored,
    EcnMarked,
    OutOfBuffer,
    OutOfSequence,
    PacketSeqErr,
    ImpliedNakSeqErr,
    LocalAckTimeout,
    Retransmissions,
    DuplicateRequests,
    RnrNaksReceived,
    RnrRetriesExceeded,
    TransportRetriesExceeded,
    IcrcErrors,
}

impl Semantic {
    /// Every variant, in [`FAMILIES`] order.
    pub const ALL: [Semantic; 16] = [
        Semantic::CnpSent,
        Semantic::CnpReceived,
        Semantic::CnpHandled,
        Semantic::CnpIgnored,
        Semantic::EcnMarked,
        Semantic::OutOfBuffer,
        Semantic::OutOfSequence,
        Semantic::PacketSeqErr,
        Semantic::ImpliedNakSeqErr,
        Semantic::LocalAckTimeout,
        Semantic::Retransmissions,
        Semantic::DuplicateRequests,
        Semantic::RnrNaksReceived,
        Semantic::RnrRetriesExceeded,
        Semantic::TransportRetriesExceeded,
        Semantic::IcrcErrors,
    ];

    /// Position in [`FAMILIES`] and in [`Semantic::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn family(self) -> &'static Family {
        &FAMILIES[self.index()]
    }
}

/// The semantic families, in [`Semantic`] order (a fixed-size array, so that
/// indexing it by a `Semantic` cannot go out of bounds).
pub static FAMILIES: [Family; 16] = [
    semantic!(
        "roce_cnp_sent",
        "Congestion notification packets (CNPs) sent by this port as notification point, in answer to ECN-marked arrivals."
    ),
    semantic!(
        "roce_cnp_received",
        "Congestion notification packets (CNPs) received by this port as reaction point."
    ),
    semantic!(
        "roce_cnp_handled",
        "CNPs received and handled: the reaction point lowered its rate (DCQCN)."
    ),
    semantic!(
        "roce_cnp_ignored",
        "CNPs received and ignored by the reaction point."
    ),
    semantic!(
        "roce_ecn_marked_packets",
        "RoCE packets received with the ECN congestion-experienced mark."
    ),
    semantic!(
        "roce_out_of_buffer_drops",
        "Packets dropped because no receive WQE or buffer was available."
    ),
    semantic!(
        "roce_out_of_sequence_packets",
        "Packets the responder received with a PSN beyond the expected one (a sign of loss on the path)."
    ),
    semantic!(
        "roce_packet_sequence_errors",
        "NAKs with a PSN sequence error received by the requester (the responder saw a PSN gap)."
    ),
    semantic!(
        "roce_implied_nak_sequence_errors",
        "Implied NAK sequence errors: an ACK or read response for a later PSN arrived first."
    ),
    semantic!(
        "roce_local_ack_timeout_errors",
        "Times the requester's ACK timer expired and it retransmitted."
    ),
    semantic!(
        "roce_retransmissions",
        "Requester retransmissions; packets or retry sequences depending on the driver (see the mapping table)."
    ),
    semantic!(
        "roce_duplicate_requests",
        "Duplicate requests received by the responder (a request it had already executed, retransmitted by the requester)."
    ),
    semantic!(
        "roce_rnr_naks_received",
        "Receiver-not-ready NAKs received by the requester: the remote side had no receive WQE posted."
    ),
    semantic!(
        "roce_rnr_retries_exceeded_errors",
        "Work requests failed because the RNR NAK retry count was exceeded (completion with IB_WC_RNR_RETRY_EXC_ERR)."
    ),
    semantic!(
        "roce_transport_retries_exceeded_errors",
        "Work requests failed because the transport retry count was exceeded (completion with IB_WC_RETRY_EXC_ERR)."
    ),
    semantic!(
        "roce_icrc_errors",
        "RoCE packets received with an invalid ICRC."
    ),
];

/// RDMA provider families whose counter names the table knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Mlx5,
    Rxe,
    BnxtRe,
    Irdma,
    Efa,
    Ionic,
}

impl Provider {
    pub const ALL: [Provider; 6] = [
        Provider::Mlx5,
        Provider::Rxe,
        Provider::BnxtRe,
        Provider::Irdma,
        Provider::Efa,
        Provider::Ionic,
    ];

    /// Provider of a device, from the driver of its PCI function (stable
    /// whatever udev named the device, e.g. `rocep23s0f0`) or, failing that,
    /// from the kernel's default device name.
    pub fn of(device: &Device) -> Option<Provider> {
        let driver = device.driver.as_deref().unwrap_or("");
        match driver {
            "mlx5_core" => return Some(Provider::Mlx5),
            "rxe" | "rdma_rxe" => return Some(Provider::Rxe),
            "bnxt_en" => return Some(Provider::BnxtRe),
            "ice" | "i40e" | "idpf" => return Some(Provider::Irdma),
            "efa" => return Some(Provider::Efa),
            "ionic" => return Some(Provider::Ionic),
            _ => {}
        }
        let name = device.name.as_str();
        [
            ("mlx5_", Provider::Mlx5),
            ("rxe", Provider::Rxe),
            ("bnxt_re", Provider::BnxtRe),
            ("irdma", Provider::Irdma),
            ("efa_", Provider::Efa),
            ("ionic_", Provider::Ionic),
        ]
        .into_iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, p)| p)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Mlx5 => "mlx5",
            Provider::Rxe => "rxe",
            Provider::BnxtRe => "bnxt_re",
            Provider::Irdma => "irdma",
            Provider::Efa => "efa",
            Provider::Ionic => "ionic",
        }
    }

    /// Where the provider's counter names come from (cited in the reference).
    pub fn kernel_source(self) -> &'static str {
        match self {
            Provider::Mlx5 => "drivers/infiniband/hw/mlx5/counters.c",
            Provider::Rxe => "drivers/infiniband/sw/rxe/rxe_hw_counters.c",
            Provider::BnxtRe => "drivers/infiniband/hw/bnxt_re/hw_counters.c",
            Provider::Irdma => "drivers/infiniband/hw/irdma/verbs.c",
            Provider::Efa => "drivers/infiniband/hw/efa/efa_verbs.c",
            Provider::Ionic => "drivers/infiniband/hw/ionic/ionic_hw_stats.c",
        }
    }
}

/// One row of the mapping: this provider's counter `name` means `family`.
#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    pub provider: Provider,
    pub name: &'static str,
    pub family: Semantic,
    /// What the kernel source says, where the name alone does not.
    pub note: &'static str,
}

const fn m(
    provider: Provider,
    name: &'static str,
    family: Semantic,
    note: &'static str,
) -> Mapping {
    Mapping {
        provider,
        name,
        family,
        note,
    }
}

use Provider::{BnxtRe, Efa, Irdma, Mlx5, Rxe};
use Semantic::*;

/// The mapping table.
///
/// - mlx5 (`drivers/infiniband/hw/mlx5/counters.c`): `basic_q_cnts`,
///   `out_of_seq_q_cnts`, `retrans_q_cnts`, `extended_err_cnts`, `cong_cnts`,
///   `ext_ppcnt_cnts`, and the optional `rdmarx_cnp_op_cnts`. Left unmapped:
///   `rnr_nak_retry_err` (the source does not say whether it counts RNR NAKs
///   or exhausted retries), `roce_adp_retrans*`/`roce_slow_restart*` (adaptive
///   retransmission internals), the optional `cc_rx_ce_pkts`/`cc_tx_cnp_pkts`
///   (they would give a second series of families `np_ecn_marked_roce_packets`
///   and `np_cnp_sent` already feed), and the `vport_` copies that switchdev
///   representor ports carry.
/// - rxe (`drivers/infiniband/sw/rxe/rxe_hw_counters.c`; where each is
///   counted: `rxe_comp.c`, `rxe_resp.c`).
/// - bnxt_re (`drivers/infiniband/hw/bnxt_re/hw_counters.c`,
///   `bnxt_re_stat_descs`).
/// - irdma (`drivers/infiniband/hw/irdma/verbs.c`, `irdma_hw_stat_names`,
///   gen2 names).
/// - efa (`drivers/infiniband/hw/efa/efa_verbs.c`, `EFA_DEFINE_PORT_STATS`).
/// - ionic: none; its counter names come from the device firmware at run
///   time (`ionic_hw_stats.c`), not from the kernel, so none is certain.
pub static MAPPINGS: &[Mapping] = &[
    // mlx5
    m(Mlx5, "np_cnp_sent", CnpSent, "cong_cnts"),
    m(Mlx5, "cc_rx_cnp_pkts", CnpReceived, "optional (IB_STAT_FLAG_OPTIONAL): present once enabled, via netlink only"),
    m(Mlx5, "rp_cnp_handled", CnpHandled, "cong_cnts"),
    m(Mlx5, "rp_cnp_ignored", CnpIgnored, "cong_cnts"),
    m(Mlx5, "np_ecn_marked_roce_packets", EcnMarked, "cong_cnts"),
    m(Mlx5, "out_of_buffer", OutOfBuffer, "basic_q_cnts"),
    m(Mlx5, "out_of_sequence", OutOfSequence, "out_of_seq_q_cnts"),
    m(Mlx5, "packet_seq_err", PacketSeqErr, "retrans_q_cnts"),
    m(Mlx5, "implied_nak_seq_err", ImpliedNakSeqErr, "retrans_q_cnts"),
    m(Mlx5, "local_ack_timeout_err", LocalAckTimeout, "retrans_q_cnts"),
    m(Mlx5, "duplicate_request", DuplicateRequests, "retrans_q_cnts"),
    m(Mlx5, "req_rnr_retries_exceeded", RnrRetriesExceeded, "extended_err_cnts"),
    m(Mlx5, "req_transport_retries_exceeded", TransportRetriesExceeded, "extended_err_cnts"),
    m(Mlx5, "rx_icrc_encapsulated", IcrcErrors, "ext_ppcnt_cnts (PPCNT extended group)"),
    // rxe
    m(Rxe, "out_of_seq_request", OutOfSequence, "RXE_CNT_OUT_OF_SEQ_REQ"),
    m(Rxe, "rcvd_seq_err", PacketSeqErr, "RXE_CNT_RCV_SEQ_ERR: NAK with AETH_NAK_PSN_SEQ_ERROR received (rxe_comp.c)"),
    m(Rxe, "completer_retry_err", Retransmissions, "RXE_CNT_COMP_RETRY: one per retry sequence the completer starts, not per packet (rxe_comp.c)"),
    m(Rxe, "duplicate_request", DuplicateRequests, "RXE_CNT_DUP_REQ"),
    m(Rxe, "rcvd_rnr_err", RnrNaksReceived, "RXE_CNT_RCV_RNR: AETH_RNR_NAK received"),
    m(Rxe, "retry_rnr_exceeded_err", RnrRetriesExceeded, "RXE_CNT_RNR_RETRY_EXCEEDED"),
    m(Rxe, "retry_exceeded_err", TransportRetriesExceeded, "RXE_CNT_RETRY_EXCEEDED"),
    // bnxt_re
    m(BnxtRe, "tx_cnp_pkts", CnpSent, "BNXT_RE_TX_CNP (extended stats)"),
    m(BnxtRe, "rx_cnp_pkts", CnpReceived, "BNXT_RE_RX_CNP (extended stats)"),
    m(BnxtRe, "rx_ecn_marked_pkts", EcnMarked, "BNXT_RE_RX_ECN (extended stats)"),
    m(BnxtRe, "rx_out_of_buffer", OutOfBuffer, "BNXT_RE_OOB (extended stats)"),
    m(BnxtRe, "oos_drop_count", OutOfSequence, "BNXT_RE_OUT_OF_SEQ_ERR: out-of-sequence packets received and dropped"),
    m(BnxtRe, "seq_err_naks_rcvd", PacketSeqErr, "BNXT_RE_SEQ_ERR_NAKS_RCVD"),
    m(BnxtRe, "to_retransmits", LocalAckTimeout, "BNXT_RE_TO_RETRANSMITS: retransmissions on timeout"),
    m(BnxtRe, "dup_req", DuplicateRequests, "BNXT_RE_DUP_REQ"),
    m(BnxtRe, "rnr_naks_rcvd", RnrNaksReceived, "BNXT_RE_RNR_NAKS_RCVD"),
    m(BnxtRe, "max_retry_exceeded", TransportRetriesExceeded, "BNXT_RE_MAX_RETRY_EXCEEDED"),
    // irdma
    m(Irdma, "cnpSent", CnpSent, "IRDMA_HW_STAT_INDEX_TXNPCNPSENT (gen2)"),
    m(Irdma, "cnpHandled", CnpHandled, "IRDMA_HW_STAT_INDEX_RXRPCNPHANDLED (gen2)"),
    m(Irdma, "cnpIgnored", CnpIgnored, "IRDMA_HW_STAT_INDEX_RXRPCNPIGNORED (gen2)"),
    m(Irdma, "RxECNMrkd", EcnMarked, "IRDMA_HW_STAT_INDEX_RXNPECNMARKEDPKTS (gen2)"),
    // efa (SRD transport)
    m(Efa, "retrans_pkts", Retransmissions, "EFA_RETRANS_PKTS: packets"),
    m(Efa, "retrans_timeout_events", LocalAckTimeout, "EFA_RETRANS_TIMEOUT_EVENS"),
];

/// The family a provider's counter maps to, if any.
pub fn lookup(provider: Option<Provider>, name: &str) -> Option<Semantic> {
    let provider = provider?;
    MAPPINGS
        .iter()
        .find(|m| m.provider == provider && m.name == name)
        .map(|m| m.family)
}

/// The mapping table as markdown, for the metric reference.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "Mapping of driver counter names to these families (every other hardware counter is \
         exported as `roce_port_hw_stat_total{stat=\"<kernel name>\"}`):\n\n\
         | driver | kernel counter | family | note |\n|---|---|---|---|\n",
    );
    for m in MAPPINGS {
        out.push_str(&format!(
            "| {} | `{}` | `{}` | {} |\n",
            m.provider.as_str(),
            m.name,
            m.family.family().exposed_name(),
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
    other: FamilySamples,
}

impl Default for Collector {
    fn default() -> Self {
        Self::new()
    }
}

impl Collector {
    pub fn new() -> Self {
        Collector {
            semantic: FAMILIES.iter().map(FamilySamples::new).collect(),
            other: FamilySamples::new(&super::rdma::HW_STAT),
        }
    }

    /// Adds the hardware counters of one port; `port` is the port number as
    /// text (the `port` label).
    pub fn add_port(&mut self, device: &Device, port_label: &str, port: &Port) {
        let provider = Provider::of(device);
        for counter in &port.hw_counters {
            let target =
                lookup(provider, &counter.name).and_then(|s| self.semantic.get_mut(s.index()));
            match target {
                Some(samples) => samples.push(&[&device.name, port_label], counter.value),
                None => self
                    .other
                    .push(&[&device.name, port_label, &counter.name], counter.value),
            }
        }
    }

    pub fn finish(self, out: &mut Vec<FamilySamples>) {
        out.extend(self.semantic);
        out.push(self.other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantic_order_matches_families() {
        for (i, s) in Semantic::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
            assert!(std::ptr::eq(s.family(), &FAMILIES[i]));
        }
    }

    #[test]
    fn each_kernel_name_and_family_at_most_once_per_provider() {
        for (i, a) in MAPPINGS.iter().enumerate() {
            for b in &MAPPINGS[i + 1..] {
                if a.provider != b.provider {
                    continue;
                }
                assert_ne!(a.name, b.name, "{:?} maps {} twice", a.provider, a.name);
                assert_ne!(
                    a.family, b.family,
                    "{:?}: {} and {} both map to {:?}",
                    a.provider, a.name, b.name, a.family
                );
            }
        }
    }

    #[test]
    fn every_family_is_fed_by_some_mapping() {
        for s in Semantic::ALL {
            assert!(
                MAPPINGS.iter().any(|m| m.family == s),
                "{} has no mapping",
                s.family().base
            );
        }
    }

    #[test]
    fn provider_from_driver_beats_name() {
        let dev = |name: &str, driver: Option<&str>| Device {
            name: name.into(),
            driver: driver.map(Into::into),
            ..Device::default()
        };
        assert_eq!(
            Provider::of(&dev("rocep23s0f0", Some("mlx5_core"))),
            Some(Provider::Mlx5)
        );
        assert_eq!(
            Provider::of(&dev("rocep1s0", Some("bnxt_en"))),
            Some(Provider::BnxtRe)
        );
        assert_eq!(Provider::of(&dev("rxe0", None)), Some(Provider::Rxe));
        assert_eq!(Provider::of(&dev("mlx5_0", None)), Some(Provider::Mlx5));
        assert_eq!(Provider::of(&dev("mlx4_0", Some("mlx4_core"))), None);
        assert_eq!(Provider::of(&dev("siw0", Some("siw"))), None);
    }

    #[test]
    fn lookup_is_per_provider() {
        assert_eq!(
            lookup(Some(Provider::Rxe), "duplicate_request"),
            Some(DuplicateRequests)
        );
        assert_eq!(lookup(Some(Provider::BnxtRe), "duplicate_request"), None);
        assert_eq!(lookup(None, "np_cnp_sent"), None);
        assert_eq!(lookup(Some(Provider::Mlx5), "rnr_nak_retry_err"), None);
    }
}
