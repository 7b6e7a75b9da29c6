//! Families of the LLDP source: the neighbour of each RDMA netdev (the
//! switch port it is cabled to), how recently it was heard, and the switch
//! port's IEEE 802.1Qaz DCBX view (PFC, APP, ETS) as its TLVs carry it.
//!
//! Label values from the wire are already sanitized by `roce-lldp`
//! (control characters replaced, 255 bytes at most); here they are cut to
//! [`MAX_LABEL`] bytes. Per port: one neighbour info series, one series of
//! the switch's DCBX view, and a handful of gauges and counters.

use roce_netdev::dcb::tsa_name;

use super::netdev::{dscp_priority_label, joined};

use super::labels::label_set;
use super::{Fam, Family, FamilySamples, FamilyUnit, MetricKind, Row, Samples};
use crate::snapshot::Snapshot;

const SOURCE: &str = "LLDP (IEEE 802.1AB) frames of the link partner: lldpd's `lldpcli -f json0 show neighbors details` or passive AF_PACKET capture of ethertype 0x88cc (lldp.mode)";
const DCBX: &str = "the link partner's IEEE 802.1Qaz DCBX TLVs in its LLDP frames (org TLVs 00-80-C2 subtypes 9-12), through lldpd or capture (lldp.mode)";

label_set! {
    /// A netdev that LLDP is read on and the RDMA port it backs.
    pub struct LldpPortLabels { device, port, netdev }
}

label_set! {
    /// A netdev's neighbour as its frames name it.
    pub struct NeighborLabels {
        device, port, netdev, chassis_id, port_id, system_name, port_description,
        management_address, ttl_seconds,
    }
}

label_set! {
    /// The switch port's DCBX view, in roce_qos_info's form.
    pub struct SwitchQosLabels {
        device, port, netdev, pfc, pfc_willing, dscp_priority, prio_tc, tc_tsa, tc_bw,
    }
}

/// The longest label value taken from a frame.
pub const MAX_LABEL: usize = 128;

pub const NEIGHBOR_INFO: Fam<NeighborLabels> = Fam::new(Row {
    base: "roce_lldp_neighbor_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 for the link partner heard most recently on the RDMA netdev and still within its TTL: chassis ID and port ID (MAC as aa:bb:.., names as text), system name, port description and first management address (empty when the frame has none); ttl_seconds the TTL its last frame carried: how long its information stays valid (it is aged out that long after it was last heard). Absent: no neighbour.",
    source: SOURCE,
});
pub const NEIGHBORS: Fam<LldpPortLabels> = Fam::new(Row {
    base: "roce_lldp_neighbors",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Link partners heard on the netdev and still within their TTL (1 on a switch port; 0: none heard, see roce_lldp_last_frame_age_seconds).",
    source: SOURCE,
});
pub const LAST_FRAME_AGE: Fam<LldpPortLabels> = Fam::new(Row {
    base: "roce_lldp_last_frame_age",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Seconds since an LLDP frame was last heard on the netdev (capture), or since lldpd last listed a neighbour on it (lldpd). Absent: nothing heard since the exporter started.",
    source: SOURCE,
});
pub const FRAMES: Fam<LldpPortLabels> = Fam::new(Row {
    base: "roce_lldp_frames",
    kind: MetricKind::Counter,
    unit: None,
    help: "LLDP frames accepted on the netdev since the exporter started (capture), or lldpd listings of its neighbour (lldpd).",
    source: SOURCE,
});
pub const FRAMES_REJECTED: Fam<LldpPortLabels> = Fam::new(Row {
    base: "roce_lldp_frames_rejected",
    kind: MetricKind::Counter,
    unit: None,
    help: "LLDP frames captured on the netdev and rejected as malformed (truncated or lying TLV lengths, mandatory TLVs missing or out of order) since the exporter started.",
    source: SOURCE,
});
pub const SWITCH_QOS: Fam<SwitchQosLabels> = Fam::new(Row {
    base: "roce_lldp_switch_qos_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The switch port's DCBX view (value 1), one series per port whose neighbour sends a PFC, APP or ETS TLV, in the form of roce_qos_info's labels so that the two compare as text; a part whose TLV the switch does not send is empty. pfc: the priorities with PFC on (PFC configuration TLV), comma separated, or none; pfc_willing: 1 when that TLV sets the willing bit (the switch would take the NIC's settings), else 0; dscp_priority: the APP priority TLV's DSCP entries as dscp=priority pairs in DSCP order (26=4), or none; prio_tc, tc_tsa, tc_bw: the ETS configuration TLV, the traffic class of priorities 0-7, the transmission selection of traffic classes 0-7 (strict, ets, cbs, vendor) and their bandwidth share in percent, each comma separated.",
    source: DCBX,
});

pub const FAMILIES: &[Family] = &[
    NEIGHBOR_INFO.family,
    NEIGHBORS.family,
    LAST_FRAME_AGE.family,
    FRAMES.family,
    FRAMES_REJECTED.family,
    SWITCH_QOS.family,
];

/// A label value cut to [`MAX_LABEL`] bytes on a character boundary.
fn bounded(s: &str) -> &str {
    if s.len() <= MAX_LABEL {
        return s;
    }
    let mut cut = MAX_LABEL;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

pub fn collect(snapshot: &Snapshot, out: &mut Vec<FamilySamples>) {
    let Some(lldp) = &snapshot.lldp else { return };
    let mut info = Samples::new(&NEIGHBOR_INFO);
    let mut count = Samples::new(&NEIGHBORS);
    let mut age = Samples::new(&LAST_FRAME_AGE);
    let mut frames = Samples::new(&FRAMES);
    let mut rejected = Samples::new(&FRAMES_REJECTED);
    let mut qos = Samples::new(&SWITCH_QOS);
    for p in &lldp.ports {
        let (device, port) = match &p.rdma {
            Some((d, n)) => (d.as_str(), n.to_string()),
            None => ("", String::new()),
        };
        let l = LldpPortLabels {
            device,
            port: &port,
            netdev: &p.netdev,
        };
        count.push(l, p.neighbours as u64);
        frames.push(l, p.frames_total);
        rejected.push(l, p.rejected_total);
        if let Some(a) = p.heard_age {
            age.push(l, a.as_secs_f64());
        }
        let Some(n) = &p.neighbour else { continue };
        let ttl = n.ttl.to_string();
        let labels = NeighborLabels {
            device,
            port: &port,
            netdev: &p.netdev,
            chassis_id: bounded(&n.chassis_id.value),
            port_id: bounded(&n.port_id.value),
            system_name: bounded(n.system_name.as_deref().unwrap_or("")),
            port_description: bounded(n.port_description.as_deref().unwrap_or("")),
            management_address: bounded(
                n.management_addresses
                    .first()
                    .map(String::as_str)
                    .unwrap_or(""),
            ),
            ttl_seconds: &ttl,
        };
        info.push(labels, 1u64);
        if n.pfc.is_none() && n.app.is_none() && n.ets_configuration.is_none() {
            continue;
        }
        let (pfc, pfc_willing) = match &n.pfc {
            Some(f) => (f.enable.to_string(), u8::from(f.willing).to_string()),
            None => Default::default(),
        };
        let dscp_priority = match &n.app {
            Some(entries) => {
                let mut dscp: Vec<(u16, u8)> = entries
                    .iter()
                    .filter(|e| e.selector == roce_lldp::tlv::app_selector::DSCP)
                    .map(|e| (e.protocol, e.priority))
                    .collect();
                dscp.sort_unstable();
                dscp.dedup();
                dscp_priority_label(&dscp)
            }
            None => String::new(),
        };
        let (prio_tc, tc_tsa, tc_bw) = match &n.ets_configuration {
            Some(ets) => {
                let tsa: Vec<&str> = ets.tsa.iter().map(|t| tsa_name(*t)).collect();
                (joined(&ets.prio_tc), tsa.join(","), joined(&ets.tc_bw))
            }
            None => Default::default(),
        };
        let labels = SwitchQosLabels {
            device,
            port: &port,
            netdev: &p.netdev,
            pfc: &pfc,
            pfc_willing: &pfc_willing,
            dscp_priority: &dscp_priority,
            prio_tc: &prio_tc,
            tc_tsa: &tc_tsa,
            tc_bw: &tc_bw,
        };
        qos.push(labels, 1u64);
    }
    out.extend([
        info.into(),
        count.into(),
        age.into(),
        frames.into(),
        rejected.into(),
        qos.into(),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_cut_on_a_character_boundary() {
        let s = "ü".repeat(100);
        let b = bounded(&s);
        assert!(b.len() <= MAX_LABEL);
        assert!(b.chars().all(|c| c == 'ü'));
        assert_eq!(bounded("leaf1"), "leaf1");
    }
}
