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

use super::labels::{PortLabels, PortStatLabels};
use super::{Fam, Family, FamilySamples, MetricKind, Row, Samples};
use crate::meaning::{hw_meaning, HwMeaning, Provider, HW_MAPPINGS};

const SOURCE: &str =
    "hardware counters (RDMA netlink or ports/<port>/hw_counters/), kernel names mapped per driver in docs/metrics.md";

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

/// The semantic families, in [`HwMeaning`] order (a fixed-size array, so
/// that indexing it by a meaning cannot go out of bounds).
pub static FAMILIES: [Fam<PortLabels>; 16] = [
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

/// The family of a meaning.
pub fn family(meaning: HwMeaning) -> &'static Family {
    &FAMILIES[meaning.index()].family
}

/// The mapping table as markdown, for the metric reference.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "Mapping of driver counter names to these families (every other hardware counter is \
         exported as `roce_port_hw_stat_total{stat=\"<kernel name>\"}`):\n\n\
         | driver | kernel counter | family | note |\n|---|---|---|---|\n",
    );
    for m in HW_MAPPINGS {
        out.push_str(&format!(
            "| {} | `{}` | `{}` | {} |\n",
            m.provider.as_str(),
            m.name,
            family(m.meaning).exposed_name(),
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
    semantic: Vec<Samples<PortLabels<'static>>>,
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
            semantic: FAMILIES.iter().map(Samples::new).collect(),
            other: Samples::new(&super::rdma::HW_STAT),
        }
    }

    /// Adds the hardware counters of one port; `labels` name it.
    pub fn add_port(&mut self, device: &Device, labels: PortLabels<'_>, port: &Port) {
        let provider = Provider::of(device);
        for counter in &port.hw_counters {
            let target =
                hw_meaning(provider, &counter.name).and_then(|m| self.semantic.get_mut(m.index()));
            match target {
                Some(samples) => samples.push(labels, counter.value),
                None => {
                    let labels = PortStatLabels {
                        device: labels.device,
                        port: labels.port,
                        stat: &counter.name,
                    };
                    self.other.push(labels, counter.value);
                }
            }
        }
    }

    pub fn finish(self, out: &mut Vec<FamilySamples>) {
        out.extend(self.semantic.into_iter().map(FamilySamples::from));
        out.push(self.other.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantic_order_matches_families() {
        for (i, m) in HwMeaning::ALL.iter().enumerate() {
            assert_eq!(m.index(), i);
            assert!(std::ptr::eq(family(*m), &FAMILIES[i].family));
        }
    }

    #[test]
    fn every_family_is_fed_by_some_mapping() {
        for meaning in HwMeaning::ALL {
            assert!(
                HW_MAPPINGS.iter().any(|m| m.meaning == meaning),
                "{} has no mapping",
                family(meaning).base
            );
        }
    }
}
