//! What hardware counter names mean, per RDMA provider. The same meaning has
//! different names under different drivers (mlx5's `np_cnp_sent`, ...);
//! rules and exposition both ask this table, so a meaning is defined once.

use roce_rdma::{Device, Port};

/// A meaning shared by hardware counters of several drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HwMeaning {
    CnpSent,
    CnpHandled,
    CnpIgnored,
    EcnMarked,
    OutOfBuffer,
    OutOfSequence,
    PacketSequenceErrors,
    LocalAckTimeout,
    Retransmissions,
    DuplicateRequests,
    RnrNakRetryErrors,
    ImpliedNakSequenceErrors,
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
    /// Provider of a device, from its driver or its name.
    pub fn of(device: &Device) -> Option<Provider> {
        let driver = device.driver.as_deref().unwrap_or("");
        let name = device.name.as_str();
        if driver.starts_with("mlx5") || name.starts_with("mlx5") {
            Some(Provider::Mlx5)
        } else if driver == "rxe" || name.starts_with("rxe") {
            Some(Provider::Rxe)
        } else if driver == "bnxt_en" || name.starts_with("bnxt_re") {
            Some(Provider::BnxtRe)
        } else if name.starts_with("irdma") || driver == "ice" || driver == "i40e" {
            Some(Provider::Irdma)
        } else if driver == "efa" || name.starts_with("efa") {
            Some(Provider::Efa)
        } else if driver.starts_with("ionic") || name.starts_with("ionic") {
            Some(Provider::Ionic)
        } else {
            None
        }
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
}

/// One row: this provider's counter `name` means `meaning`.
#[derive(Debug, Clone, Copy)]
pub struct HwMapping {
    pub provider: Provider,
    pub name: &'static str,
    pub meaning: HwMeaning,
}

const fn row(provider: Provider, name: &'static str, meaning: HwMeaning) -> HwMapping {
    HwMapping {
        provider,
        name,
        meaning,
    }
}

/// The table. Sources:
/// - mlx5: `drivers/infiniband/hw/mlx5/counters.c`.
/// - rxe: `drivers/infiniband/sw/rxe/rxe_hw_counters.c`.
pub const HW_MAPPINGS: &[HwMapping] = &[
    row(Provider::Mlx5, "np_cnp_sent", HwMeaning::CnpSent),
    row(Provider::Mlx5, "rp_cnp_handled", HwMeaning::CnpHandled),
    row(Provider::Mlx5, "rp_cnp_ignored", HwMeaning::CnpIgnored),
    row(
        Provider::Mlx5,
        "np_ecn_marked_roce_packets",
        HwMeaning::EcnMarked,
    ),
    row(Provider::Mlx5, "out_of_buffer", HwMeaning::OutOfBuffer),
    row(Provider::Mlx5, "out_of_sequence", HwMeaning::OutOfSequence),
    row(
        Provider::Mlx5,
        "packet_seq_err",
        HwMeaning::PacketSequenceErrors,
    ),
    row(
        Provider::Mlx5,
        "local_ack_timeout_err",
        HwMeaning::LocalAckTimeout,
    ),
    row(
        Provider::Mlx5,
        "duplicate_request",
        HwMeaning::DuplicateRequests,
    ),
    row(
        Provider::Mlx5,
        "rnr_nak_retry_err",
        HwMeaning::RnrNakRetryErrors,
    ),
    row(
        Provider::Mlx5,
        "implied_nak_seq_err",
        HwMeaning::ImpliedNakSequenceErrors,
    ),
    row(
        Provider::Rxe,
        "out_of_seq_request",
        HwMeaning::OutOfSequence,
    ),
    row(
        Provider::Rxe,
        "rcvd_seq_err",
        HwMeaning::PacketSequenceErrors,
    ),
    row(
        Provider::Rxe,
        "duplicate_request",
        HwMeaning::DuplicateRequests,
    ),
    row(
        Provider::Rxe,
        "completer_retry_err",
        HwMeaning::Retransmissions,
    ),
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
    let provider = Provider::of(device);
    port.hw_counters
        .iter()
        .filter(|c| hw_meaning(provider, &c.name) == Some(meaning))
        .map(|c| c.value)
        .reduce(u64::saturating_add)
}
