//! What hardware counter names mean, per RDMA provider. The same meaning has
//! different names under different drivers (mlx5's `np_cnp_sent`, ...);
//! rules and exposition both ask this table, so a meaning is defined once.

use roce_rdma::{Device, Port};

/// A meaning shared by hardware counters of several drivers; one variant per
/// series of a port in the exposition (`exposition::hw_counters::target`):
/// a semantic family, or one of its `side` (requester, responder) or `op`
/// (read, write, atomic) where the vendor documents the counters as a pair
/// or a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HwMeaning {
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
    CompletionErrorsRequester,
    CompletionErrorsResponder,
    FlushErrorsRequester,
    FlushErrorsResponder,
    RemoteAccessErrorsRequester,
    RemoteAccessErrorsResponder,
    RemoteInvalidRequestErrors,
    LocalLengthErrors,
    ReadRequestsReceived,
    WriteRequestsReceived,
    AtomicRequestsReceived,
    DctConnectsReceived,
    AdaptiveRetransmissionTimeouts,
    SlowRestarts,
    SlowRestartCnps,
    SlowRestartTransitions,
}

impl HwMeaning {
    /// Every variant, in the exposition's order.
    pub const ALL: [HwMeaning; 32] = [
        HwMeaning::CnpSent,
        HwMeaning::CnpReceived,
        HwMeaning::CnpHandled,
        HwMeaning::CnpIgnored,
        HwMeaning::EcnMarked,
        HwMeaning::OutOfBuffer,
        HwMeaning::OutOfSequence,
        HwMeaning::PacketSeqErr,
        HwMeaning::ImpliedNakSeqErr,
        HwMeaning::LocalAckTimeout,
        HwMeaning::Retransmissions,
        HwMeaning::DuplicateRequests,
        HwMeaning::RnrNaksReceived,
        HwMeaning::RnrRetriesExceeded,
        HwMeaning::TransportRetriesExceeded,
        HwMeaning::IcrcErrors,
        HwMeaning::CompletionErrorsRequester,
        HwMeaning::CompletionErrorsResponder,
        HwMeaning::FlushErrorsRequester,
        HwMeaning::FlushErrorsResponder,
        HwMeaning::RemoteAccessErrorsRequester,
        HwMeaning::RemoteAccessErrorsResponder,
        HwMeaning::RemoteInvalidRequestErrors,
        HwMeaning::LocalLengthErrors,
        HwMeaning::ReadRequestsReceived,
        HwMeaning::WriteRequestsReceived,
        HwMeaning::AtomicRequestsReceived,
        HwMeaning::DctConnectsReceived,
        HwMeaning::AdaptiveRetransmissionTimeouts,
        HwMeaning::SlowRestarts,
        HwMeaning::SlowRestartCnps,
        HwMeaning::SlowRestartTransitions,
    ];

    /// Position in [`HwMeaning::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

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

/// One row of the mapping: this provider's counter `name` means `meaning`.
#[derive(Debug, Clone, Copy)]
pub struct HwMapping {
    pub provider: Provider,
    pub name: &'static str,
    pub meaning: HwMeaning,
    /// What the kernel source says, where the name alone does not.
    pub note: &'static str,
}

const fn m(
    provider: Provider,
    name: &'static str,
    meaning: HwMeaning,
    note: &'static str,
) -> HwMapping {
    HwMapping {
        provider,
        name,
        meaning,
        note,
    }
}

use HwMeaning::*;
use Provider::{BnxtRe, Efa, Irdma, Mlx5, Rxe};

/// The mapping table.
///
/// - mlx5 (`drivers/infiniband/hw/mlx5/counters.c`): `basic_q_cnts`,
///   `out_of_seq_q_cnts`, `retrans_q_cnts`, `extended_err_cnts`, `cong_cnts`,
///   `ext_ppcnt_cnts`, `roce_accl_cnts` (present with the `roce_accl`
///   capability) and the optional `rdmarx_cnp_op_cnts`. Every counter of
///   these groups has a meaning here; the descriptions are NVIDIA's
///   ("Understanding mlx5 Linux Counters and Status Parameters",
///   enterprise-support.nvidia.com/s/article/understanding-mlx5-linux-counters-and-status-parameters)
///   and the patches that exposed the groups ("IB/mlx5: Expose extended
///   error counters", "IB/mlx5: Expose RoCE accelerator counters").
///   `rnr_nak_retry_err` (`retrans_q_cnts`) counts received RNR NAKs whose QP
///   retry limit was not exceeded (exhausted ones are
///   `req_rnr_retries_exceeded`); `roce_adp_retrans` counts the adaptive
///   retransmissions of RoCE traffic, mlx5's count of retransmitted
///   requests, and `roce_adp_retrans_to` the times that traffic reached the
///   timeout of adaptive retransmission: its own family, not summed with
///   `local_ack_timeout_err`, which may count the same expiry. NVIDIA pairs
///   the `extended_err_cnts` as requester (`req_`, the side that posted the
///   work request) and responder (`resp_`, the side that received it): one
///   family with a `side` label per pair. A flushed completion
///   (`IB_WC_WR_FLUSH_ERR`: the QP was already in the error state, as at
///   teardown, when the receive WQEs an application posted and never used
///   are returned) is a completion in error, so `*_cqe_error` counts the
///   flushed ones too and `*_cqe_flush_error` says how many of them were.
///   The `roce_slow_restart*` counters are congestion-control state
///   changes, each its own family. Left unmapped: the optional
///   `cc_rx_ce_pkts`/`cc_tx_cnp_pkts` (they would give a second series of
///   families `np_ecn_marked_roce_packets` and `np_cnp_sent` already feed),
///   the per-QP `rdma_{tx,rx}_{packets,bytes}` optional counters, and the
///   `vport_` copies that switchdev representor ports carry.
/// - rxe (`drivers/infiniband/sw/rxe/rxe_hw_counters.c`; where each is
///   counted: `rxe_comp.c`, `rxe_resp.c`). It counts no completion
///   errors or received requests by operation.
/// - bnxt_re (`drivers/infiniband/hw/bnxt_re/hw_counters.c`,
///   `bnxt_re_stat_descs`). Its requester counters carry the names of the
///   work completion statuses (`remote_access_err` is
///   `IB_WC_REM_ACCESS_ERR`), its responder counters a `res_` prefix and a
///   finer split (`res_rx_invalid_rkey`, `res_rx_no_perm`, ...) that no
///   single meaning here covers; the extended statistics count received
///   requests by operation (`rx_read_req`, ...).
/// - irdma (`drivers/infiniband/hw/irdma/verbs.c`, `irdma_hw_stat_names`,
///   gen2 names). `InRdmaReads`/`InRdmaWrites` are not mapped: the source
///   does not say whether they count requests or the packets that carry
///   them.
/// - efa (`drivers/infiniband/hw/efa/efa_verbs.c`, `EFA_DEFINE_PORT_STATS`).
/// - ionic: none; its counter names come from the device firmware at run
///   time (`ionic_hw_stats.c`), not from the kernel, so none is certain.
pub static HW_MAPPINGS: &[HwMapping] = &[
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
    m(Mlx5, "rnr_nak_retry_err", RnrNaksReceived, "retrans_q_cnts: RNR NAKs received, QP retry limit not exceeded"),
    m(Mlx5, "roce_adp_retrans", Retransmissions, "roce_accl_cnts (roce_accl capability): adaptive retransmissions of RoCE traffic"),
    m(Mlx5, "req_rnr_retries_exceeded", RnrRetriesExceeded, "extended_err_cnts"),
    m(Mlx5, "req_transport_retries_exceeded", TransportRetriesExceeded, "extended_err_cnts"),
    m(Mlx5, "rx_icrc_encapsulated", IcrcErrors, "ext_ppcnt_cnts (PPCNT extended group)"),
    m(Mlx5, "req_cqe_error", CompletionErrorsRequester, "extended_err_cnts: completions in error of work requests this side posted, flushed ones included"),
    m(Mlx5, "resp_cqe_error", CompletionErrorsResponder, "extended_err_cnts: completions in error of receive work requests, flushed ones included"),
    m(Mlx5, "req_cqe_flush_error", FlushErrorsRequester, "extended_err_cnts: requester completions flushed (IB_WC_WR_FLUSH_ERR): the QP was already in the error state"),
    m(Mlx5, "resp_cqe_flush_error", FlushErrorsResponder, "extended_err_cnts: receive work requests flushed (IB_WC_WR_FLUSH_ERR), as at teardown"),
    m(Mlx5, "req_remote_access_errors", RemoteAccessErrorsRequester, "extended_err_cnts: remote access errors the requester detected (the peer refused its rkey, address range or access)"),
    m(Mlx5, "resp_remote_access_errors", RemoteAccessErrorsResponder, "extended_err_cnts: RDMA requests received with a wrong rkey, address range or access"),
    m(Mlx5, "req_remote_invalid_request", RemoteInvalidRequestErrors, "extended_err_cnts: remote invalid request errors the requester detected (a NAK: the peer found the request invalid)"),
    m(Mlx5, "resp_local_length_error", LocalLengthErrors, "extended_err_cnts: messages received longer than the receive work request posted for them"),
    m(Mlx5, "rx_read_requests", ReadRequestsReceived, "basic_q_cnts"),
    m(Mlx5, "rx_write_requests", WriteRequestsReceived, "basic_q_cnts"),
    m(Mlx5, "rx_atomic_requests", AtomicRequestsReceived, "basic_q_cnts"),
    m(Mlx5, "rx_dct_connect", DctConnectsReceived, "basic_q_cnts: connection requests received by the port's DC targets"),
    m(Mlx5, "roce_adp_retrans_to", AdaptiveRetransmissionTimeouts, "roce_accl_cnts: RoCE traffic reached the timeout of adaptive retransmission"),
    m(Mlx5, "roce_slow_restart", SlowRestarts, "roce_accl_cnts"),
    m(Mlx5, "roce_slow_restart_cnps", SlowRestartCnps, "roce_accl_cnts"),
    m(Mlx5, "roce_slow_restart_trans", SlowRestartTransitions, "roce_accl_cnts"),
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
    m(BnxtRe, "remote_access_err", RemoteAccessErrorsRequester, "BNXT_RE_REMOTE_ACCESS_ERR: requester completions with IB_WC_REM_ACCESS_ERR"),
    m(BnxtRe, "remote_invalid_req_err", RemoteInvalidRequestErrors, "BNXT_RE_REMOTE_INVALID_REQ_ERR: requester completions with IB_WC_REM_INV_REQ_ERR"),
    m(BnxtRe, "rx_read_req", ReadRequestsReceived, "BNXT_RE_RX_READ_REQ (extended stats)"),
    m(BnxtRe, "rx_write_req", WriteRequestsReceived, "BNXT_RE_RX_WRITE_REQ (extended stats)"),
    m(BnxtRe, "rx_atomic_req", AtomicRequestsReceived, "BNXT_RE_RX_ATOMIC_REQ (extended stats)"),
    // irdma
    m(Irdma, "cnpSent", CnpSent, "IRDMA_HW_STAT_INDEX_TXNPCNPSENT (gen2)"),
    m(Irdma, "cnpHandled", CnpHandled, "IRDMA_HW_STAT_INDEX_RXRPCNPHANDLED (gen2)"),
    m(Irdma, "cnpIgnored", CnpIgnored, "IRDMA_HW_STAT_INDEX_RXRPCNPIGNORED (gen2)"),
    m(Irdma, "RxECNMrkd", EcnMarked, "IRDMA_HW_STAT_INDEX_RXNPECNMARKEDPKTS (gen2)"),
    // efa (SRD transport)
    m(Efa, "retrans_pkts", Retransmissions, "EFA_RETRANS_PKTS: packets"),
    m(Efa, "retrans_timeout_events", LocalAckTimeout, "EFA_RETRANS_TIMEOUT_EVENS"),
];

/// The meaning of a provider's counter, if the table knows it.
pub fn hw_meaning(provider: Option<Provider>, name: &str) -> Option<HwMeaning> {
    let provider = provider?;
    HW_MAPPINGS
        .iter()
        .find(|m| m.provider == provider && m.name == name)
        .map(|m| m.meaning)
}

/// Sum of the port's hardware counters that carry `meaning`; `None` when the
/// port has none (the driver does not count it).
pub fn port_hw_value(device: &Device, port: &Port, meaning: HwMeaning) -> Option<u64> {
    // Rate rules call this for every port of every sample in their window:
    // walk the few table rows of this provider and meaning, not every
    // counter against the whole table.
    let provider = Provider::of(device)?;
    HW_MAPPINGS
        .iter()
        .filter(|m| m.provider == provider && m.meaning == meaning)
        .filter_map(|m| port.hw_counter(m.name))
        .reduce(u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernel_name_and_family_at_most_once_per_provider() {
        for (i, a) in HW_MAPPINGS.iter().enumerate() {
            for b in &HW_MAPPINGS[i + 1..] {
                if a.provider != b.provider {
                    continue;
                }
                assert_ne!(a.name, b.name, "{:?} maps {} twice", a.provider, a.name);
                assert_ne!(
                    a.meaning, b.meaning,
                    "{:?}: {} and {} both map to {:?}",
                    a.provider, a.name, b.name, a.meaning
                );
            }
        }
    }

    /// The counters of mlx5's per-port groups in
    /// `drivers/infiniband/hw/mlx5/counters.c` (`basic_q_cnts`,
    /// `out_of_seq_q_cnts`, `retrans_q_cnts`, `cong_cnts`,
    /// `extended_err_cnts`, `roce_accl_cnts`, `ext_ppcnt_cnts`) and the
    /// optional `cc_rx_cnp_pkts`: each has a meaning, so none is left to
    /// `roce_port_hw_stat_total` alone.
    #[test]
    fn every_documented_mlx5_counter_has_a_meaning() {
        const MLX5: [&str; 32] = [
            "rx_write_requests",
            "rx_read_requests",
            "rx_atomic_requests",
            "rx_dct_connect",
            "out_of_buffer",
            "out_of_sequence",
            "duplicate_request",
            "rnr_nak_retry_err",
            "packet_seq_err",
            "implied_nak_seq_err",
            "local_ack_timeout_err",
            "rp_cnp_ignored",
            "rp_cnp_handled",
            "np_ecn_marked_roce_packets",
            "np_cnp_sent",
            "resp_local_length_error",
            "resp_cqe_error",
            "req_cqe_error",
            "req_remote_invalid_request",
            "req_remote_access_errors",
            "resp_remote_access_errors",
            "resp_cqe_flush_error",
            "req_cqe_flush_error",
            "req_transport_retries_exceeded",
            "req_rnr_retries_exceeded",
            "roce_adp_retrans",
            "roce_adp_retrans_to",
            "roce_slow_restart",
            "roce_slow_restart_cnps",
            "roce_slow_restart_trans",
            "rx_icrc_encapsulated",
            "cc_rx_cnp_pkts",
        ];
        for name in MLX5 {
            assert!(
                hw_meaning(Some(Provider::Mlx5), name).is_some(),
                "mlx5 {name} has no meaning"
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
            hw_meaning(Some(Provider::Rxe), "duplicate_request"),
            Some(DuplicateRequests)
        );
        assert_eq!(
            hw_meaning(Some(Provider::BnxtRe), "duplicate_request"),
            None
        );
        assert_eq!(hw_meaning(None, "np_cnp_sent"), None);
        assert_eq!(
            hw_meaning(Some(Provider::Mlx5), "rnr_nak_retry_err"),
            Some(RnrNaksReceived)
        );
        assert_eq!(
            hw_meaning(Some(Provider::Mlx5), "roce_slow_restart"),
            Some(SlowRestarts)
        );
        assert_eq!(
            hw_meaning(Some(Provider::Mlx5), "vport_req_cqe_error"),
            None
        );
    }
}
