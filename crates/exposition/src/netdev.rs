//! Families of the netdev source: PFC and link pause, pause storms,
//! discards (port-wide and per priority, in separate families so that a sum
//! never adds a total to its own parts), packets the NIC ECN-marked,
//! physical symbol errors and link-down events (ethtool statistics mapped by
//! `roce_netdev::mapping::RULES`), raw ethtool counters chosen in the
//! config, and the configuration read back (MTU, speed, operstate, PFC and
//! ECN enable, trust, DSCP map, ETS, buffers, DCBX mode, what the switch
//! advertised through DCBX, DCQCN parameters, rdma_cm default ToS). QoS
//! tables that are configuration, not measurements, are one `*_info`
//! series per port with the table in labels, so a port costs a handful
//! of series and fleet drift is `count by (label)`. Every series carries `netdev`, and
//! `device`/`port` of the RDMA port the netdev backs (empty for
//! `netdevs.extra` ones).

use roce_netdev::mapping::{Kind as RuleKind, Scale, RULES};
use roce_netdev::Netdev;

use super::groups::Groups;
use super::labels::{
    label_set, NetdevDirectionLabels, NetdevLabels, NetdevPriorityDirectionLabels,
    NetdevPriorityLabels,
};
use super::{Fam, Family, FamilySamples, FamilyUnit, MetricKind, Row};
use crate::snapshot::Snapshot;

mod qos;
mod stats;

label_set! {
    /// Pause storms of a netdev of one severity.
    pub struct StormLabels { netdev, device, port, severity }
}

label_set! {
    /// Port-wide discards of a netdev for one reason.
    pub struct DiscardLabels { netdev, device, port, reason }
}

label_set! {
    /// Discards of a netdev on one priority for one reason.
    pub struct PriorityDiscardLabels { netdev, device, port, reason, priority }
}

label_set! {
    /// A netdev's physical layer errors of one kind (`lane` empty for the
    /// total).
    pub struct PhyErrorLabels { netdev, device, port, kind, lane }
}

label_set! {
    /// A NIC's PCIe trouble of one kind.
    pub struct PcieErrorLabels { netdev, device, port, kind }
}

label_set! {
    /// An ethtool counter of a netdev under its driver name.
    pub struct EthtoolStatLabels { netdev, device, port, stat }
}

label_set! {
    /// A netdev, its driver, operational state and DCB support.
    pub struct NetdevInfoLabels { netdev, device, port, driver, operstate, dcb }
}

label_set! {
    /// A netdev's RoCE ECN enable per role, as priority lists.
    pub struct EcnLabels { netdev, device, port, np, rp }
}

label_set! {
    /// A netdev's QoS configuration, each table as one value.
    pub struct QosLabels {
        netdev, device, port, trust, pfc, dscp_priority, prio_tc, tc_tsa, tc_bw, prio_buffer,
        buffer_size, buffer_total, dcbx, rdma_cm_tos,
    }
}

label_set! {
    /// What the switch port advertised through DCBX.
    pub struct QosPeerLabels { netdev, device, port, standard, pfc, prio_tc }
}

label_set! {
    /// A DSCP value on a netdev.
    pub struct DscpLabels { netdev, device, port, dscp }
}

label_set! {
    /// One DCQCN parameter of a netdev from one source.
    pub struct DcqcnParameterLabels { netdev, device, port, role, parameter, source }
}

label_set! {
    /// Every DCQCN parameter of a netdev from one source.
    pub struct DcqcnParametersLabels { netdev, device, port, source, parameters }
}

const ETHTOOL_SOURCE: &str = "ethtool statistics (SIOCETHTOOL ETHTOOL_GSTATS), mapped per driver";

pub const PFC_PAUSE_FRAMES: Fam<NetdevPriorityDirectionLabels> = Fam::new(Row {
    base: "roce_pfc_pause_frames",
    kind: MetricKind::Counter,
    unit: None,
    help: "PFC pause frames (XOFF and XON) of one priority, received (rx: the peer paused us) or sent (tx: we paused the peer).",
    source: ETHTOOL_SOURCE,
});
pub const PFC_PAUSE_DURATION: Fam<NetdevPriorityDirectionLabels> = Fam::new(Row {
    base: "roce_pfc_pause_duration",
    kind: MetricKind::Counter,
    unit: Some(FamilyUnit::Seconds),
    help:
        "Time one priority spent paused by PFC (drivers count microseconds; converted to seconds).",
    source: ETHTOOL_SOURCE,
});
pub const PFC_PAUSE_TRANSITIONS: Fam<NetdevPriorityDirectionLabels> = Fam::new(Row {
    base: "roce_pfc_pause_transitions",
    kind: MetricKind::Counter,
    unit: None,
    help: "Transitions of one priority between paused and not paused.",
    source: ETHTOOL_SOURCE,
});
pub const LINK_PAUSE_FRAMES: Fam<NetdevDirectionLabels> = Fam::new(Row {
    base: "roce_link_pause_frames",
    kind: MetricKind::Counter,
    unit: None,
    help: "IEEE 802.3x global pause frames (XOFF and XON). Standard pause statistics (ethtool netlink) where the driver has them, else the driver's ethtool counters.",
    source: "ethtool netlink ETHTOOL_MSG_PAUSE_GET with ETHTOOL_FLAG_STATS; ethtool statistics mapped per driver",
});
pub const PAUSE_STORM_EVENTS: Fam<StormLabels> = Fam::new(Row {
    base: "roce_pause_storm_events",
    kind: MetricKind::Counter,
    unit: None,
    help: "Pause storm detections: mlx5 warning/error (the NIC stalled sending pause), bnxt_en continuous/continuous_roce pause events.",
    source: ETHTOOL_SOURCE,
});
pub const DISCARDS: Fam<DiscardLabels> = Fam::new(Row {
    base: "roce_netdev_discards",
    kind: MetricKind::Counter,
    unit: None,
    help: "Packets the NIC dropped, port-wide counters only, by reason (rx_port, tx_port, rx_out_of_buffer, rx_ring, tx_ring, rx_missed, rx_no_buffer, tx_link_down). The per-priority counters are roce_netdev_priority_discards_total: never add the two.",
    source: ETHTOOL_SOURCE,
});
pub const PRIORITY_DISCARDS: Fam<PriorityDiscardLabels> = Fam::new(Row {
    base: "roce_netdev_priority_discards",
    kind: MetricKind::Counter,
    unit: None,
    help: "Packets the NIC dropped on one priority, by reason (rx_port, rx_no_buffer, rx_congestion). Parts of the port-wide roce_netdev_discards_total where the driver has both (mlx5 rx_prioN_discards and rx_discards_phy).",
    source: ETHTOOL_SOURCE,
});
pub const NIC_ECN_MARKED: Fam<NetdevPriorityLabels> = Fam::new(Row {
    base: "roce_netdev_nic_ecn_marked_packets",
    kind: MetricKind::Counter,
    unit: None,
    help: "Received packets of one priority that the NIC itself ECN-marked because its per-host receive buffers were congested (mlx5 rx_prioN_marked: \"packets ecn marked by device due to per host congestion\"). Marks set by switches on the path are roce_ecn_marked_packets_total.",
    source: ETHTOOL_SOURCE,
});
pub const PHY_SYMBOL_ERRORS: Fam<NetdevLabels> = Fam::new(Row {
    base: "roce_netdev_phy_symbol_errors",
    kind: MetricKind::Counter,
    unit: None,
    help: "Received packets dropped for physical coding (symbol) errors on the physical port: a 64-bit counter, unlike the 16-bit PMA symbol_error that sticks at 65535.",
    source: ETHTOOL_SOURCE,
});
pub const LINK_DOWN_EVENTS: Fam<NetdevLabels> = Fam::new(Row {
    base: "roce_netdev_link_down_events",
    kind: MetricKind::Counter,
    unit: None,
    help: "Times the physical link went down: a 64-bit counter, unlike the 8-bit PMA link_downed that sticks at 255.",
    source: ETHTOOL_SOURCE,
});
pub const PHY_ERRORS: Fam<PhyErrorLabels> = Fam::new(Row {
    base: "roce_phy_errors",
    kind: MetricKind::Counter,
    unit: None,
    help: "Physical layer errors below the MAC from the driver's counters: kind fec_corrected_bits (bits the FEC corrected; lane set for the per-lane counters, lanes group; empty for the total, which is left out without that group where FEC_GET reports the same register as roce_fec_corrected_bits_total) or pcs_symbol_errors (error bits FEC did not correct). On mlx5 both run since the link last came up (the firmware clears them at link-up). Absent where the driver has no such counter.",
    source: ETHTOOL_SOURCE,
});
pub const NIC_PCIE_ERRORS: Fam<PcieErrorLabels> = Fam::new(Row {
    base: "roce_nic_pcie_errors",
    kind: MetricKind::Counter,
    unit: None,
    help: "The NIC's own count of trouble on its PCIe link: rx_signal_integrity (link recoveries after framing or CRC errors it received), tx_signal_integrity (recoveries the other end started), outbound_buffer_overflow (packets dropped because the PCIe buffer overflowed). mlx5 only.",
    source: ETHTOOL_SOURCE,
});
pub const ETHTOOL_STAT: Fam<EthtoolStatLabels> = Fam::new(Row {
    base: "roce_netdev_ethtool_stat",
    kind: MetricKind::Counter,
    unit: None,
    help: "An ethtool counter without a mapped meaning, exported under its driver name because netdevs.export_raw_ethtool lists it.",
    source: "ethtool statistics (SIOCETHTOOL ETHTOOL_GSTATS)",
});
pub const MTU: Fam<NetdevLabels> = Fam::new(Row {
    base: "roce_netdev_mtu",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Bytes),
    help: "Netdev MTU.",
    source: "/sys/class/net/<netdev>/mtu",
});
pub const SPEED: Fam<NetdevLabels> = Fam::new(Row {
    base: "roce_netdev_speed",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::BytesPerSecond),
    help: "Netdev link speed in bytes per second (absent when the kernel does not know it).",
    source: "/sys/class/net/<netdev>/speed (Mb/s)",
});
pub const INFO: Fam<NetdevInfoLabels> = Fam::new(Row {
    base: "roce_netdev_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Netdev behind an RDMA port (value 1) with its driver and operational state; dcb: supported when the netdev answers DCB queries, unsupported when it has no DCB support (not an error), empty when DCB was not read (the qos collector off, or the query failed).",
    source: "/sys/class/net/<netdev>/{operstate,device/driver}; rtnetlink RTM_GETDCB (EOPNOTSUPP = unsupported)",
});
pub const PFC_ENABLED: Fam<NetdevPriorityLabels> = Fam::new(Row {
    base: "roce_pfc_enabled",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when PFC is enabled on the priority (IEEE DCB pfc_en), else 0; only priorities with PFC on or a DSCP mapped to them unless the idle_priorities group is on (the pfc label of roce_qos_info lists the whole set).",
    source: "rtnetlink RTM_GETDCB DCB_CMD_IEEE_GET, DCB_ATTR_IEEE_PFC",
});
pub const ECN_INFO: Fam<EcnLabels> = Fam::new(Row {
    base: "roce_ecn_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "RoCE ECN (DCQCN) enable of the port (value 1), one series per netdev that has the files: np the priorities on which the notification point is enabled (it marks CNPs back to the sender), rp those on which the reaction point is (it slows down on CNPs), each comma separated, none when no priority has it, empty when the role's files are missing. mlx5 only. The fleet rules compare both across nodes.",
    source: "/sys/class/net/<netdev>/ecn/roce_{np,rp}/enable/<priority>",
});
pub const QOS_INFO: Fam<QosLabels> = Fam::new(Row {
    base: "roce_qos_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The port's QoS configuration (value 1), one series per netdev whose DCB configuration or rdma_cm default ToS is known; a part the driver does not report, or a DCB part where DCB is unknown, is empty. trust: the packet field the port classifies priority by (from the DCB APP trust table where the kernel reports it, else dscp when DSCP APP entries exist, else pcp). pfc: the priorities with PFC enabled, comma separated, or none. dscp_priority: the DCB APP table's DSCP entries as dscp=priority pairs in DSCP order (26=3,48=6), or none. ETS as `dcb ets show` lists it: prio_tc the traffic class of priorities 0-7, tc_tsa the transmission selection of traffic classes 0-7 (strict, ets, cbs, vendor), tc_bw their transmit bandwidth share in percent. Receive buffers as `dcb buffer show` lists them (mlx5): prio_buffer the buffer of priorities 0-7, buffer_size the size of buffers 0-7 in bytes, buffer_total the port's total receive buffer in bytes (DCB buffer total_size). dcbx: the DCBX mode, off, static, host_ieee/host_cee (an LLDP agent on the host), firmware_ieee/firmware_cee (the NIC's firmware), firmware or host with both or no version bits (mlx5 reports firmware DCBX as firmware, host mode as host); without a DCBX peer view (never on mlx5) the host cannot see the switch's PFC and APP settings. rdma_cm_tos: rdma_cm's default IP ToS byte (DSCP << 2 | ECN) for connections on the RDMA port that set none of their own, empty until an administrator created the port's configfs folder. The fleet rules compare each part across nodes.",
    source: "rtnetlink RTM_GETDCB DCB_CMD_IEEE_GET: DCB_ATTR_DCB_APP_TRUST_TABLE / DCB_ATTR_IEEE_APP_TABLE, DCB_ATTR_IEEE_PFC, DCB_ATTR_IEEE_ETS, DCB_ATTR_DCB_BUFFER, DCB_ATTR_DCBX (DCB_CAP_DCBX_* bits); /sys/kernel/config/rdma_cm/<device>/ports/<port>/default_roce_tos",
});

pub const QOS_PEER: Fam<QosPeerLabels> = Fam::new(Row {
    base: "roce_qos_peer_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "What the switch port advertised through DCBX (value 1), one series when it advertised anything: standard ieee or cee, pfc its PFC-enabled priorities (comma separated, none, or empty when not advertised), prio_tc its traffic class (IEEE) or priority group (CEE) of priorities 0-7 (empty when not advertised). Compare pfc with roce_pfc_enabled.",
    source: "rtnetlink RTM_GETDCB DCB_CMD_IEEE_GET DCB_ATTR_IEEE_PEER_PFC / _PEER_ETS; DCB_CMD_CEE_GET DCB_ATTR_CEE_PEER_PFC / _PEER_PG",
});
pub const QOS_PEER_DSCP_PRIORITY: Fam<DscpLabels> = Fam::new(Row {
    base: "roce_qos_peer_dscp_priority",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Priority a DSCP value maps to on the switch port, from the APP table it advertised through DCBX (selector DSCP). Compare with the dscp_priority label of roce_qos_info.",
    source: "rtnetlink RTM_GETDCB DCB_CMD_IEEE_GET DCB_ATTR_IEEE_PEER_APP; DCB_CMD_CEE_GET DCB_ATTR_CEE_PEER_APP_TABLE",
});
pub const DCQCN_PARAMETER: Fam<DcqcnParameterLabels> = Fam::new(Row {
    base: "roce_dcqcn_parameter",
    kind: MetricKind::Gauge,
    unit: None,
    help: "A DCQCN parameter of the port for the notification point (role=np) or reaction point (role=rp), named and valued as the kernel's file (units as the driver documents them: microseconds, Mb/s, bytes). source=sysfs: MLNX_OFED's ecn/roce_{np,rp}/<name>; source=debugfs: upstream mlx5_ib's cc_params/<name> (root only). Absent where neither is there.",
    source: "/sys/class/net/<netdev>/ecn/roce_{np,rp}/<name>; /sys/kernel/debug/mlx5/<pci>/cc_params/<name>",
});
pub const DCQCN_PARAMETERS: Fam<DcqcnParametersLabels> = Fam::new(Row {
    base: "roce_dcqcn_parameters_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Every DCQCN parameter of the port read from one source (value 1): parameters lists role.name=value sorted by role and name (np.cnp_dscp=48,...,rp.rpg_ai_rate=5,...), the same pairs as roce_dcqcn_parameter (dcqcn_parameters group). One series per port and source, so two nodes configured alike carry the same label.",
    source: "/sys/class/net/<netdev>/ecn/roce_{np,rp}/<name>; /sys/kernel/debug/mlx5/<pci>/cc_params/<name>",
});

pub const QOS_AGE: Fam<NetdevLabels> = Fam::new(Row {
    base: "roce_qos_config_age",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Age of the QoS configuration served for the netdev (DCB, DCQCN parameters, CNP marking, rdma_cm ToS): 0 when read in this sample; it is read every netdevs.qos_interval and at once when the netdev appears, its link changes state or its driver changes.",
    source: "the netdev source's QoS reads (rtnetlink RTM_GETDCB, ecn/roce_rp|roce_np, configfs)",
});

pub const FAMILIES: &[Family] = &[
    PFC_PAUSE_FRAMES.family,
    PFC_PAUSE_DURATION.family,
    PFC_PAUSE_TRANSITIONS.family,
    LINK_PAUSE_FRAMES.family,
    PAUSE_STORM_EVENTS.family,
    DISCARDS.family,
    PRIORITY_DISCARDS.family,
    NIC_ECN_MARKED.family,
    PHY_SYMBOL_ERRORS.family,
    LINK_DOWN_EVENTS.family,
    PHY_ERRORS.family,
    NIC_PCIE_ERRORS.family,
    ETHTOOL_STAT.family,
    MTU.family,
    SPEED.family,
    INFO.family,
    PFC_ENABLED.family,
    ECN_INFO.family,
    QOS_INFO.family,
    QOS_PEER.family,
    QOS_PEER_DSCP_PRIORITY.family,
    DCQCN_PARAMETER.family,
    DCQCN_PARAMETERS.family,
    QOS_AGE.family,
];

/// A DSCP map as the `dscp_priority` labels carry it: `dscp=priority`
/// pairs in the order given (DSCP order), comma separated, or `none`.
pub fn dscp_priority_label<D: std::fmt::Display>(pairs: &[(D, u8)]) -> String {
    if pairs.is_empty() {
        return "none".into();
    }
    pairs
        .iter()
        .map(|(d, p)| format!("{d}={p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Eight values comma separated, as the `*_info` labels carry them.
pub fn joined<T: ToString>(values: &[T]) -> String {
    values
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Mapping of driver ethtool names to these families, for the metric
/// reference.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "Mapping of driver ethtool counter names to these families (`N` is the priority, 0-7, or the lane for `rx_err_lane_N_phy`; \
         counters with the same family and labels on one netdev are summed, e.g. XON + XOFF). \
         Names not listed are not exported unless `netdevs.export_raw_ethtool` names them. \
         A per-priority counter at zero on a priority with PFC off and no DSCP mapped to it is left out \
         (it appears with its first count), and so is `roce_pfc_enabled` of such a priority, unless the `idle_priorities` group is on, or the DCB configuration is unknown.\n\n\
         | driver | ethtool counter | family | labels | unit |\n|---|---|---|---|---|\n",
    );
    for rule in RULES {
        let (family, labels): (&Family, String) = match rule.kind {
            RuleKind::PfcPauseFrames(d) => (
                &PFC_PAUSE_FRAMES.family,
                format!("priority=N, direction={}", d.as_str()),
            ),
            RuleKind::PfcPauseDuration(d) => (
                &PFC_PAUSE_DURATION.family,
                format!("priority=N, direction={}", d.as_str()),
            ),
            RuleKind::PfcPauseTransitions(d) => (
                &PFC_PAUSE_TRANSITIONS.family,
                format!("priority=N, direction={}", d.as_str()),
            ),
            RuleKind::LinkPauseFrames(d) => (
                &LINK_PAUSE_FRAMES.family,
                format!("direction={}", d.as_str()),
            ),
            RuleKind::PauseStormEvents(s) => (&PAUSE_STORM_EVENTS.family, format!("severity={s}")),
            RuleKind::Discards(r) if rule.pattern.contains("{p}") => {
                (&PRIORITY_DISCARDS.family, format!("reason={r}, priority=N"))
            }
            RuleKind::Discards(r) => (&DISCARDS.family, format!("reason={r}")),
            RuleKind::EcnMarked => (&NIC_ECN_MARKED.family, "priority=N".to_string()),
            RuleKind::PhySymbolErrors => (&PHY_SYMBOL_ERRORS.family, String::new()),
            RuleKind::LinkDownEvents => (&LINK_DOWN_EVENTS.family, String::new()),
            RuleKind::PhyErrors(k) if rule.pattern.contains("{p}") => {
                (&PHY_ERRORS.family, format!("kind={k}, lane=N"))
            }
            RuleKind::PhyErrors(k) => (&PHY_ERRORS.family, format!("kind={k}")),
            RuleKind::PcieErrors(k) => (&NIC_PCIE_ERRORS.family, format!("kind={k}")),
        };
        let unit = match rule.scale {
            Scale::Count => "count",
            Scale::Micros => "µs → s",
        };
        out.push_str(&format!(
            "| {} | `{}` | `{}` | {} | {} |\n",
            rule.driver,
            rule.pattern.replace("{p}", "N"),
            family.exposed_name(),
            labels,
            unit
        ));
    }
    out
}

/// The series of one netdev: its ethtool statistics and link facts
/// ([`stats`]), then its QoS configuration ([`qos`]).
fn collect_netdev(
    netdev: &Netdev,
    fec_bits_read: bool,
    groups: &Groups,
    out: &mut [FamilySamples],
) {
    let port = netdev
        .rdma
        .as_ref()
        .map(|r| r.port.to_string())
        .unwrap_or_default();
    let device = netdev
        .rdma
        .as_ref()
        .map(|r| r.device.as_str())
        .unwrap_or("");
    let base = NetdevLabels {
        netdev: netdev.name.as_str(),
        device,
        port: &port,
    };
    let in_use = stats::collect(netdev, base, fec_bits_read, groups, out);
    qos::collect(netdev, base, in_use, groups, out);
}

pub fn collect(snapshot: &Snapshot, groups: &Groups, out: &mut Vec<FamilySamples>) {
    let Some(netdevs) = &snapshot.netdev else {
        return;
    };
    // The netdevs whose FEC corrected bits FEC_GET reported (the phys
    // source's roce_fec_corrected_bits_total).
    let fec_bits: Vec<&str> = snapshot
        .phys
        .iter()
        .flat_map(|p| &p.netdevs)
        .filter(|n| n.fec.as_ref().is_some_and(|f| f.corrected_bits.is_some()))
        .map(|n| n.name.as_str())
        .collect();
    let mut families: Vec<FamilySamples> = FAMILIES.iter().map(FamilySamples::new).collect();
    for netdev in &netdevs.netdevs {
        let fec_bits_read = fec_bits.contains(&netdev.name.as_str());
        collect_netdev(netdev, fec_bits_read, groups, &mut families);
    }
    out.extend(families);
}
