//! Hardware counters with a known meaning: one table maps (provider, kernel
//! counter name) to a semantic family, e.g. mlx5's `np_cnp_sent` and the
//! same meaning under other drivers' names to `roce_cnp_sent_total`.
//! Counters not in the table are exported under their kernel name by
//! `roce_port_hw_stat_total{stat}`.
//!
//! Names come from the kernel sources, cited per provider below.

use roce_rdma::{Device, Port};

use super::{Family, FamilySamples, Kind};

const PORT: &[&str] = &["device", "port"];

macro_rules! semantic {
    ($name:ident, $base:literal, $help:literal) => {
        pub const $name: Family = Family {
            base: $base,
            kind: Kind::Counter,
            unit: None,
            labels: PORT,
            help: $help,
            source: "hardware counters (RDMA netlink or hw_counters/), mapped per driver",
        };
    };
}

semantic!(
    CNP_SENT,
    "roce_cnp_sent",
    "Congestion notification packets sent (by the notification point, on ECN-marked arrivals)."
);
semantic!(
    CNP_HANDLED,
    "roce_cnp_handled",
    "Congestion notification packets received and handled (the reaction point slowed down)."
);
semantic!(
    CNP_IGNORED,
    "roce_cnp_ignored",
    "Congestion notification packets received and ignored."
);
semantic!(
    ECN_MARKED,
    "roce_ecn_marked_packets",
    "RoCE packets received with the ECN congestion-experienced mark."
);
semantic!(
    OUT_OF_BUFFER,
    "roce_out_of_buffer_drops",
    "Packets dropped because no receive WQE or buffer was available."
);
semantic!(
    OUT_OF_SEQUENCE,
    "roce_out_of_sequence_packets",
    "Packets received out of sequence (a sign of loss on the path)."
);
semantic!(
    PACKET_SEQ_ERR,
    "roce_packet_sequence_errors",
    "NAK sequence errors received (the responder saw a PSN gap)."
);
semantic!(
    LOCAL_ACK_TIMEOUT,
    "roce_local_ack_timeout_errors",
    "Local ACK timeouts: the requester retransmitted because no ACK came."
);
semantic!(
    RETRANSMISSIONS,
    "roce_retransmissions",
    "Requester retransmissions (go-back-N or selective)."
);
semantic!(
    DUPLICATE_REQUESTS,
    "roce_duplicate_requests",
    "Duplicate requests received by the responder (the requester retransmitted)."
);
semantic!(
    RNR_NAK_RETRY_ERR,
    "roce_rnr_nak_retry_errors",
    "RNR NAK retries exceeded: the receiver had no receive WQE posted."
);
semantic!(
    IMPLIED_NAK_SEQ_ERR,
    "roce_implied_nak_sequence_errors",
    "Implied NAK sequence errors (an ACK for a later PSN arrived first)."
);

pub const FAMILIES: &[Family] = &[
    CNP_SENT,
    CNP_HANDLED,
    CNP_IGNORED,
    ECN_MARKED,
    OUT_OF_BUFFER,
    OUT_OF_SEQUENCE,
    PACKET_SEQ_ERR,
    LOCAL_ACK_TIMEOUT,
    RETRANSMISSIONS,
    DUPLICATE_REQUESTS,
    RNR_NAK_RETRY_ERR,
    IMPLIED_NAK_SEQ_ERR,
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

/// One row of the mapping: this provider's counter `name` means `family`.
pub struct Mapping {
    pub provider: Provider,
    pub name: &'static str,
    pub family: &'static Family,
}

/// The mapping table. Sources:
/// - mlx5: `drivers/infiniband/hw/mlx5/counters.c` (`retrans_q_cnts`,
///   `out_of_seq_q_cnts`, `cong_cnts`, `ext_ppcnt_cnts`, `basic_q_cnts`).
/// - rxe: `drivers/infiniband/sw/rxe/rxe_hw_counters.c` (`rxe_counter_descs`).
pub const MAPPINGS: &[Mapping] = &[
    Mapping {
        provider: Provider::Mlx5,
        name: "np_cnp_sent",
        family: &CNP_SENT,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "rp_cnp_handled",
        family: &CNP_HANDLED,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "rp_cnp_ignored",
        family: &CNP_IGNORED,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "np_ecn_marked_roce_packets",
        family: &ECN_MARKED,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "out_of_buffer",
        family: &OUT_OF_BUFFER,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "out_of_sequence",
        family: &OUT_OF_SEQUENCE,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "packet_seq_err",
        family: &PACKET_SEQ_ERR,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "local_ack_timeout_err",
        family: &LOCAL_ACK_TIMEOUT,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "duplicate_request",
        family: &DUPLICATE_REQUESTS,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "rnr_nak_retry_err",
        family: &RNR_NAK_RETRY_ERR,
    },
    Mapping {
        provider: Provider::Mlx5,
        name: "implied_nak_seq_err",
        family: &IMPLIED_NAK_SEQ_ERR,
    },
    Mapping {
        provider: Provider::Rxe,
        name: "out_of_seq_request",
        family: &OUT_OF_SEQUENCE,
    },
    Mapping {
        provider: Provider::Rxe,
        name: "rcvd_seq_err",
        family: &PACKET_SEQ_ERR,
    },
    Mapping {
        provider: Provider::Rxe,
        name: "duplicate_request",
        family: &DUPLICATE_REQUESTS,
    },
    Mapping {
        provider: Provider::Rxe,
        name: "completer_retry_err",
        family: &RETRANSMISSIONS,
    },
];

/// The family a provider's counter maps to, if any.
pub fn lookup(provider: Option<Provider>, name: &str) -> Option<&'static Family> {
    let provider = provider?;
    MAPPINGS
        .iter()
        .find(|m| m.provider == provider && m.name == name)
        .map(|m| m.family)
}

/// The mapping table as markdown, for the metric reference.
pub fn reference_markdown() -> String {
    let mut out = String::from("Mapping of driver counter names to these families:\n\n| driver | kernel counter | family |\n|---|---|---|\n");
    for m in MAPPINGS {
        out.push_str(&format!(
            "| {} | `{}` | `{}` |\n",
            m.provider.as_str(),
            m.name,
            m.family.exposed_name()
        ));
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

    pub fn add_port(&mut self, device: &Device, port: &Port) {
        let provider = Provider::of(device);
        let p = port.number.to_string();
        for counter in &port.hw_counters {
            match lookup(provider, &counter.name)
                .and_then(|f| FAMILIES.iter().position(|g| g.base == f.base))
            {
                Some(i) => self.semantic[i].push(&[&device.name, &p], counter.value),
                None => self
                    .other
                    .push(&[&device.name, &p, &counter.name], counter.value),
            }
        }
    }

    pub fn finish(self, out: &mut Vec<FamilySamples>) {
        out.extend(self.semantic);
        out.push(self.other);
    }
}
