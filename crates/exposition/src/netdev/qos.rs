//! The netdev's QoS configuration read back: PFC enable per priority, ECN
//! (DCQCN) enable, the DCQCN parameters, rdma_cm's default ToS, the age of
//! what was read, the DCB tables as one `roce_qos_info` series, and what
//! the switch advertised through DCBX.

use roce_host::Priorities;
use roce_netdev::dcb::{dcbx_mode_name, tsa_name};
use roce_netdev::{DcbOutcome, Netdev};

use super::super::groups::{Group, Groups};
use super::super::labels::NetdevLabels;
use super::super::{push_into, FamilySamples};
use super::stats::exported;
use super::*;

/// A port's DCQCN parameters as one label value per source:
/// `role.name=value` pairs, sorted, comma separated.
fn dcqcn_lists(params: &[roce_netdev::qos::DcqcnParam]) -> Vec<(&'static str, String)> {
    let mut by_source: std::collections::BTreeMap<&'static str, Vec<String>> =
        std::collections::BTreeMap::new();
    for p in params {
        let pair = format!("{}.{}={}", p.role.as_str(), p.name, p.value);
        by_source.entry(p.source.as_str()).or_default().push(pair);
    }
    by_source
        .into_iter()
        .map(|(source, mut pairs)| {
            pairs.sort();
            (source, pairs.join(","))
        })
        .collect()
}

/// Adds the netdev's QoS series; `in_use` are the priorities whose
/// per-priority series are exported (`None`: every priority).
pub(super) fn collect(
    netdev: &Netdev,
    base: NetdevLabels<'_>,
    in_use: Option<Priorities>,
    groups: &Groups,
    out: &mut [FamilySamples],
) {
    if let Some(ecn) = &netdev.ecn {
        let enabled = |list: &[(u8, bool)]| {
            if list.is_empty() {
                return String::new();
            }
            let on: Priorities = list.iter().filter(|(_, on)| *on).map(|(p, _)| *p).collect();
            on.to_string()
        };
        let (np, rp) = (enabled(&ecn.np), enabled(&ecn.rp));
        let labels = EcnLabels {
            netdev: base.netdev,
            device: base.device,
            port: base.port,
            np: &np,
            rp: &rp,
        };
        push_into(out, &ECN_INFO, labels, 1u64);
    }
    if groups.is_on(Group::DcqcnParameters) {
        for p in &netdev.dcqcn {
            let labels = DcqcnParameterLabels {
                netdev: base.netdev,
                device: base.device,
                port: base.port,
                role: p.role.as_str(),
                parameter: p.name,
                source: p.source.as_str(),
            };
            push_into(out, &DCQCN_PARAMETER, labels, u64::from(p.value));
        }
    }
    for (source, parameters) in dcqcn_lists(&netdev.dcqcn) {
        let labels = DcqcnParametersLabels {
            netdev: base.netdev,
            device: base.device,
            port: base.port,
            source,
            parameters: &parameters,
        };
        push_into(out, &DCQCN_PARAMETERS, labels, 1u64);
    }
    let rdma_cm_tos = netdev
        .qos
        .rdma_cm_tos
        .map(|t| t.to_string())
        .unwrap_or_default();
    if let Some(age) = netdev.qos_age {
        push_into(out, &QOS_AGE, base, age.as_secs_f64());
    }
    match &netdev.dcb {
        DcbOutcome::Ok(config) => {
            if let Some(pfc) = config.pfc_enabled {
                for priority in (0u8..8).filter(|p| exported(in_use, *p)) {
                    let pr = priority.to_string();
                    let on = pfc.contains(priority);
                    push_into(out, &PFC_ENABLED, base.priority(&pr), on);
                }
            }
            let dscp_priority = dscp_priority_label(&config.dscp_map());
            let pfc = config
                .pfc_enabled
                .map(|p| p.to_string())
                .unwrap_or_default();
            let (prio_tc, tc_tsa, tc_bw) = match &config.ets {
                Some(ets) => {
                    let tsa: Vec<&str> = ets.tc_tsa.iter().map(|t| tsa_name(*t)).collect();
                    (joined(&ets.prio_tc), tsa.join(","), joined(&ets.tc_tx_bw))
                }
                None => Default::default(),
            };
            let (prio_buffer, buffer_size, buffer_total) = match &config.buffers {
                Some(b) => (
                    joined(&b.prio2buffer),
                    joined(&b.buffer_size),
                    b.total_size.to_string(),
                ),
                None => Default::default(),
            };
            let dcbx = config.dcbx.map(dcbx_mode_name).unwrap_or("");
            let labels = QosLabels {
                netdev: base.netdev,
                device: base.device,
                port: base.port,
                trust: config.trust().as_str(),
                pfc: &pfc,
                dscp_priority: &dscp_priority,
                prio_tc: &prio_tc,
                tc_tsa: &tc_tsa,
                tc_bw: &tc_bw,
                prio_buffer: &prio_buffer,
                buffer_size: &buffer_size,
                buffer_total: &buffer_total,
                dcbx,
                rdma_cm_tos: &rdma_cm_tos,
            };
            push_into(out, &QOS_INFO, labels, 1u64);
            let peer = &config.peer;
            if !peer.is_empty() {
                let standard = peer.standard.map(|s| s.as_str()).unwrap_or("");
                let pfc = peer.pfc_enabled.map(|p| p.to_string()).unwrap_or_default();
                let prio_tc = peer.prio_tc.map(|t| joined(&t)).unwrap_or_default();
                let labels = QosPeerLabels {
                    netdev: base.netdev,
                    device: base.device,
                    port: base.port,
                    standard,
                    pfc: &pfc,
                    prio_tc: &prio_tc,
                };
                push_into(out, &QOS_PEER, labels, 1u64);
                for (dscp, priority) in peer.dscp_map().into_iter().flatten() {
                    let ds = dscp.to_string();
                    let labels = DscpLabels {
                        netdev: base.netdev,
                        device: base.device,
                        port: base.port,
                        dscp: &ds,
                    };
                    push_into(out, &QOS_PEER_DSCP_PRIORITY, labels, u64::from(priority));
                }
            }
        }
        // rdma_cm's ToS is read apart from DCB: the port's one QoS series
        // carries it, the DCB parts empty.
        DcbOutcome::Unsupported | DcbOutcome::Disabled | DcbOutcome::Failed(_) => {
            if !rdma_cm_tos.is_empty() {
                let labels = QosLabels {
                    netdev: base.netdev,
                    device: base.device,
                    port: base.port,
                    trust: "",
                    pfc: "",
                    dscp_priority: "",
                    prio_tc: "",
                    tc_tsa: "",
                    tc_bw: "",
                    prio_buffer: "",
                    buffer_size: "",
                    buffer_total: "",
                    dcbx: "",
                    rdma_cm_tos: &rdma_cm_tos,
                };
                push_into(out, &QOS_INFO, labels, 1u64);
            }
        }
    }
}
