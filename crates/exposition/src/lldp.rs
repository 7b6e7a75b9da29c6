//! Families of the LLDP source: the neighbour of each RDMA netdev (the
//! switch port it is cabled to), how recently it was heard, and the switch
//! port's IEEE 802.1Qaz DCBX view (PFC, APP, ETS) as its TLVs carry it.
//!
//! Label values from the wire are already sanitized by `roce-lldp`
//! (control characters replaced, 255 bytes at most); here they are cut to
//! [`MAX_LABEL`] bytes. Per port: one info series, the APP table (at most
//! 64 entries; switches advertise a few), one ETS series, and a handful of
//! gauges and counters.

use roce_netdev::dcb::tsa_name;

use super::netdev::joined;

use super::{Family, FamilySamples, FamilyUnit, Labeled, MetricKind, Samples};
use crate::snapshot::Snapshot;

const SOURCE: &str = "LLDP (IEEE 802.1AB) frames of the link partner: lldpd's `lldpcli -f json0 show neighbors details` or passive AF_PACKET capture of ethertype 0x88cc (lldp.mode)";
const DCBX: &str = "the link partner's IEEE 802.1Qaz DCBX TLVs in its LLDP frames (org TLVs 00-80-C2 subtypes 9-12), through lldpd or capture (lldp.mode)";
const PORT: &[&str] = &["device", "port", "netdev"];

/// The longest label value taken from a frame.
pub const MAX_LABEL: usize = 128;

pub const NEIGHBOR_INFO: Labeled<8> = Labeled::new(Family {
    base: "roce_lldp_neighbor_info",
    kind: MetricKind::Gauge,
    unit: None,
    labels: &[
        "device",
        "port",
        "netdev",
        "chassis_id",
        "port_id",
        "system_name",
        "port_description",
        "management_address",
    ],
    help: "1 for the link partner heard most recently on the RDMA netdev and still within its TTL: chassis ID and port ID (MAC as aa:bb:.., names as text), system name, port description and first management address (empty when the frame has none). Absent: no neighbour.",
    source: SOURCE,
});
pub const NEIGHBORS: Labeled<3> = Labeled::new(Family {
    base: "roce_lldp_neighbors",
    kind: MetricKind::Gauge,
    unit: None,
    labels: PORT,
    help: "Link partners heard on the netdev and still within their TTL (1 on a switch port; 0: none heard, see roce_lldp_last_frame_age_seconds).",
    source: SOURCE,
});
pub const LAST_FRAME_AGE: Labeled<3> = Labeled::new(Family {
    base: "roce_lldp_last_frame_age",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    labels: PORT,
    help: "Seconds since an LLDP frame was last heard on the netdev (capture), or since lldpd last listed a neighbour on it (lldpd). Absent: nothing heard since the exporter started.",
    source: SOURCE,
});
pub const NEIGHBOR_TTL: Labeled<3> = Labeled::new(Family {
    base: "roce_lldp_neighbor_ttl",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    labels: PORT,
    help: "The TTL the link partner's last LLDP frame carried: how long its information stays valid (it is aged out that long after it was last heard).",
    source: SOURCE,
});
pub const FRAMES: Labeled<3> = Labeled::new(Family {
    base: "roce_lldp_frames",
    kind: MetricKind::Counter,
    unit: None,
    labels: PORT,
    help: "LLDP frames accepted on the netdev since the exporter started (capture), or lldpd listings of its neighbour (lldpd).",
    source: SOURCE,
});
pub const FRAMES_REJECTED: Labeled<3> = Labeled::new(Family {
    base: "roce_lldp_frames_rejected",
    kind: MetricKind::Counter,
    unit: None,
    labels: PORT,
    help: "LLDP frames captured on the netdev and rejected as malformed (truncated or lying TLV lengths, mandatory TLVs missing or out of order) since the exporter started.",
    source: SOURCE,
});
pub const SWITCH_PFC: Labeled<3> = Labeled::new(Family {
    base: "roce_lldp_switch_pfc_enabled_bitmap",
    kind: MetricKind::Gauge,
    unit: None,
    labels: PORT,
    help: "The switch port's PFC enable bitmap from its PFC configuration TLV: bit n set = PFC on priority n (16 = priority 4 only). Absent: the switch sends no PFC TLV.",
    source: DCBX,
});
pub const SWITCH_PFC_WILLING: Labeled<3> = Labeled::new(Family {
    base: "roce_lldp_switch_pfc_willing",
    kind: MetricKind::Gauge,
    unit: None,
    labels: PORT,
    help: "1 when the switch port's PFC configuration TLV sets the willing bit (it would take the NIC's PFC settings), 0 when not.",
    source: DCBX,
});
pub const SWITCH_APP: Labeled<5> = Labeled::new(Family {
    base: "roce_lldp_switch_app_priority",
    kind: MetricKind::Gauge,
    unit: None,
    labels: &["device", "port", "netdev", "selector", "protocol"],
    help: "The priority the switch port's APP priority TLV maps a protocol to: selector dscp (protocol = DSCP), ethertype, tcp_sctp, udp_dccp, tcp_udp, or the number; at most 64 entries per port.",
    source: DCBX,
});
pub const SWITCH_ETS: Labeled<6> = Labeled::new(Family {
    base: "roce_lldp_switch_ets_info",
    kind: MetricKind::Gauge,
    unit: None,
    labels: &["device", "port", "netdev", "prio_tc", "tc_tsa", "tc_bw"],
    help: "The switch port's ETS configuration TLV (value 1), in the form of roce_qos_info's ETS labels so that the two compare as text: prio_tc the traffic class of priorities 0-7, tc_tsa the transmission selection of traffic classes 0-7 (strict, ets, cbs, vendor), tc_bw their bandwidth share in percent, each comma separated.",
    source: DCBX,
});

pub const FAMILIES: &[Family] = &[
    NEIGHBOR_INFO.family,
    NEIGHBORS.family,
    LAST_FRAME_AGE.family,
    NEIGHBOR_TTL.family,
    FRAMES.family,
    FRAMES_REJECTED.family,
    SWITCH_PFC.family,
    SWITCH_PFC_WILLING.family,
    SWITCH_APP.family,
    SWITCH_ETS.family,
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

/// The APP selector's label value.
pub fn selector_name(selector: u8) -> String {
    use roce_lldp::tlv::app_selector::*;
    match selector {
        ETHERTYPE => "ethertype".into(),
        STREAM => "tcp_sctp".into(),
        DGRAM => "udp_dccp".into(),
        ANY => "tcp_udp".into(),
        DSCP => "dscp".into(),
        n => n.to_string(),
    }
}

pub fn collect(snapshot: &Snapshot, out: &mut Vec<FamilySamples>) {
    let Some(lldp) = &snapshot.lldp else { return };
    let mut info = Samples::new(&NEIGHBOR_INFO);
    let mut count = Samples::new(&NEIGHBORS);
    let mut age = Samples::new(&LAST_FRAME_AGE);
    let mut ttl = Samples::new(&NEIGHBOR_TTL);
    let mut frames = Samples::new(&FRAMES);
    let mut rejected = Samples::new(&FRAMES_REJECTED);
    let mut pfc = Samples::new(&SWITCH_PFC);
    let mut willing = Samples::new(&SWITCH_PFC_WILLING);
    let mut app = Samples::new(&SWITCH_APP);
    let mut ets_info = Samples::new(&SWITCH_ETS);
    for p in &lldp.ports {
        let (device, port) = match &p.rdma {
            Some((d, n)) => (d.as_str(), n.to_string()),
            None => ("", String::new()),
        };
        let l = [device, port.as_str(), p.netdev.as_str()];
        count.push(l, p.neighbours as u64);
        frames.push(l, p.frames_total);
        rejected.push(l, p.rejected_total);
        if let Some(a) = p.heard_age {
            age.push(l, a.as_secs_f64());
        }
        let Some(n) = &p.neighbour else { continue };
        info.push(
            [
                device,
                &port,
                &p.netdev,
                bounded(&n.chassis_id.value),
                bounded(&n.port_id.value),
                bounded(n.system_name.as_deref().unwrap_or("")),
                bounded(n.port_description.as_deref().unwrap_or("")),
                bounded(
                    n.management_addresses
                        .first()
                        .map(String::as_str)
                        .unwrap_or(""),
                ),
            ],
            1u64,
        );
        ttl.push(l, u64::from(n.ttl));
        if let Some(f) = &n.pfc {
            pfc.push(l, u64::from(f.enable));
            willing.push(l, f.willing);
        }
        for e in n.app.iter().flatten() {
            app.push(
                [
                    device,
                    &port,
                    &p.netdev,
                    &selector_name(e.selector),
                    &e.protocol.to_string(),
                ],
                u64::from(e.priority),
            );
        }
        if let Some(ets) = &n.ets_configuration {
            let tsa: Vec<&str> = ets.tsa.iter().map(|t| tsa_name(*t)).collect();
            let (prio_tc, tc_bw) = (joined(&ets.prio_tc), joined(&ets.tc_bw));
            ets_info.push(
                [device, &port, &p.netdev, &prio_tc, &tsa.join(","), &tc_bw],
                1u64,
            );
        }
    }
    out.extend([
        info.into(),
        count.into(),
        age.into(),
        ttl.into(),
        frames.into(),
        rejected.into(),
        pfc.into(),
        willing.into(),
        app.into(),
        ets_info.into(),
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
