//! Switches that turn groups of series on and off, node_exporter-style:
//! `metrics:` in the configuration file and `--collector.<group>` /
//! `--no-collector.<group>` on the command line (the flag wins). They choose
//! what is exported, not what is read: the rules still see everything their
//! sources read. Where a group and a source share a name (qos, phys,
//! topology) the flag is the source's: it stops the reads and so the group's
//! series; `metrics:` alone hides the series of a source that still reads.
//!
//! Also the series budget: how many series each group exposes on the demo
//! tree (`examples/demo-gpu-node`, 8 ports), by default and with every group
//! on. `docs/metrics.md` renders it and a test keeps the exposition of the
//! demo tree within it.

use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde::Deserialize;

use super::Family;

/// A group of series that can be turned on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    PortCounters,
    HwCounters,
    HwStat,
    Gids,
    Qos,
    Phys,
    Topology,
    PcieHops,
    IdlePriorities,
    PcieAerKinds,
    Lanes,
    ModuleThresholds,
    DcqcnParameters,
    SysPaths,
    EthernetPma,
    CollectorErrorKinds,
}

impl Group {
    pub const ALL: [Group; 16] = [
        Group::PortCounters,
        Group::HwCounters,
        Group::HwStat,
        Group::Gids,
        Group::Qos,
        Group::Phys,
        Group::Topology,
        Group::PcieHops,
        Group::IdlePriorities,
        Group::PcieAerKinds,
        Group::Lanes,
        Group::ModuleThresholds,
        Group::DcqcnParameters,
        Group::SysPaths,
        Group::EthernetPma,
        Group::CollectorErrorKinds,
    ];

    /// The name in `metrics:` and in the flags.
    pub fn name(self) -> &'static str {
        match self {
            Group::PortCounters => "port_counters",
            Group::HwCounters => "hw_counters",
            Group::HwStat => "hw_stat",
            Group::Gids => "gids",
            Group::Qos => "qos",
            Group::Phys => "phys",
            Group::Topology => "topology",
            Group::PcieHops => "pcie_hops",
            Group::IdlePriorities => "idle_priorities",
            Group::PcieAerKinds => "pcie_aer_kinds",
            Group::Lanes => "lanes",
            Group::ModuleThresholds => "module_thresholds",
            Group::DcqcnParameters => "dcqcn_parameters",
            Group::SysPaths => "sys_paths",
            Group::EthernetPma => "ethernet_pma",
            Group::CollectorErrorKinds => "collector_error_kinds",
        }
    }

    /// `--collector.<name>` without the dashes (clap wants a `'static`
    /// name; a test checks it against [`Group::name`]).
    pub fn on_flag(self) -> &'static str {
        match self {
            Group::PortCounters => "collector.port_counters",
            Group::HwCounters => "collector.hw_counters",
            Group::HwStat => "collector.hw_stat",
            Group::Gids => "collector.gids",
            Group::Qos => "collector.qos",
            Group::Phys => "collector.phys",
            Group::Topology => "collector.topology",
            Group::PcieHops => "collector.pcie_hops",
            Group::IdlePriorities => "collector.idle_priorities",
            Group::PcieAerKinds => "collector.pcie_aer_kinds",
            Group::Lanes => "collector.lanes",
            Group::ModuleThresholds => "collector.module_thresholds",
            Group::DcqcnParameters => "collector.dcqcn_parameters",
            Group::SysPaths => "collector.sys_paths",
            Group::EthernetPma => "collector.ethernet_pma",
            Group::CollectorErrorKinds => "collector.collector_error_kinds",
        }
    }

    /// `--no-collector.<name>` without the dashes.
    pub fn off_flag(self) -> &'static str {
        match self {
            Group::PortCounters => "no-collector.port_counters",
            Group::HwCounters => "no-collector.hw_counters",
            Group::HwStat => "no-collector.hw_stat",
            Group::Gids => "no-collector.gids",
            Group::Qos => "no-collector.qos",
            Group::Phys => "no-collector.phys",
            Group::Topology => "no-collector.topology",
            Group::PcieHops => "no-collector.pcie_hops",
            Group::IdlePriorities => "no-collector.idle_priorities",
            Group::PcieAerKinds => "no-collector.pcie_aer_kinds",
            Group::Lanes => "no-collector.lanes",
            Group::ModuleThresholds => "no-collector.module_thresholds",
            Group::DcqcnParameters => "no-collector.dcqcn_parameters",
            Group::SysPaths => "no-collector.sys_paths",
            Group::EthernetPma => "no-collector.ethernet_pma",
            Group::CollectorErrorKinds => "no-collector.collector_error_kinds",
        }
    }

    pub fn default_on(self) -> bool {
        !matches!(
            self,
            Group::HwStat
                | Group::PcieHops
                | Group::IdlePriorities
                | Group::PcieAerKinds
                | Group::Lanes
                | Group::ModuleThresholds
                | Group::DcqcnParameters
                | Group::SysPaths
                | Group::EthernetPma
                | Group::CollectorErrorKinds
        )
    }

    pub fn help(self) -> &'static str {
        match self {
            Group::PortCounters => "the PMA counters of counters/ (roce_port_*_total, roce_port_stat_total)",
            Group::HwCounters => "hardware counters with a known meaning (roce_cnp_*, roce_out_of_sequence_packets_total, ...)",
            Group::HwStat => "hardware counters without a known meaning, under their kernel name (roce_port_hw_stat_total)",
            Group::Gids => "the populated GID table slots (roce_gid_info; the fleet rule RoceGidTypeInconsistent uses it)",
            Group::Qos => "PFC enable per priority, ECN enable (roce_ecn_info), the QoS configuration (trust, PFC set, DSCP map, ETS, buffers, DCBX mode: roce_qos_info), the switch's DCBX view, DCQCN parameters, rdma_cm default ToS (the recording rule roce_lossless_discards:rate uses roce_pfc_enabled, the fleet rules roce_qos_info and roce_ecn_info)",
            Group::Phys => "FEC, pluggable modules, carrier changes, PCIe AER, devlink health",
            Group::Topology => "GPUs, GPU-NIC paths, PCIe links, ACS, GPUDirect RDMA",
            Group::PcieHops => "the PCIe links of every bridge between a GPU or NIC and its root port in roce_pcie_link_info, not only of the GPUs and NICs; every link of those paths in roce_pcie_link_downtrained, 0 where it trained to its bound (without it only the links trained below their bound are listed, and the rule judges every hop either way); and every bridge's ACS state in roce_pcie_acs_request_redirect (without it only where redirect is enabled or unknown)",
            Group::IdlePriorities => "per-priority counters (PFC pauses, discards, ECN marks) still at zero, and ECN enable, of priorities with PFC off and no DSCP mapped to them; without it such a counter appears with its first count (every priority is exported where the DCB configuration is unknown)",
            Group::PcieAerKinds => "PCIe AER errors of every kind the kernel names (roce_pcie_aer_error_kinds_total), zeros included, and the kinds of the bridge ports on the NICs' and GPUs' paths; without it a NIC's or GPU's kind and a bridge port's total of a severity appear with their first count, a bridge port's kinds not at all, and the NICs' and GPUs' totals by severity (roce_pcie_aer_errors_total) are always there",
            Group::Lanes => "per-lane detail: each module lane's Tx bias and Tx power (roce_module_tx_bias_amperes, roce_module_tx_power_watts), and the per-lane series of the FEC and PHY error counters, with the driver's own total of FEC corrected bits (roce_phy_errors_total{kind=\"fec_corrected_bits\",lane=\"\"}, mlx5 rx_corrected_bits_phy) where FEC_GET reports the same count as roce_fec_corrected_bits_total; the totals (lane=\"\") and each lane's Rx power, which the rules and dashboards judge, are always there",
            Group::DcqcnParameters => "each DCQCN parameter as its own gauge (roce_dcqcn_parameter); without it the parameters are there as one list per port (roce_dcqcn_parameters_info), which the fleet rules compare",
            Group::SysPaths => "the GPU-NIC pairs whose path crosses the CPU interconnect (SYS) in roce_gpu_nic_path_info; without it a pair not listed there is SYS (GPUDirect RDMA across it is slow and NCCL does not use it by default), and every GPU's nearest NIC is listed (nearest=\"true\") either way",
            Group::EthernetPma => "the PMA counters of counters/ that say nothing of their own on an Ethernet (RoCE) port: the unicast and multicast packet counts (the same traffic as roce_port_packets_*), the InfiniBand link-layer counters (VL15 drops, switch relay, remote physical, constraint, local link integrity, buffer overrun errors, link error recovery), and symbol_error and link_downed where the netdev has the 64-bit counts (roce_netdev_phy_symbol_errors_total, roce_netdev_link_down_events_total; the PMA ones are 16 and 8 bits wide and stick at their maximum); InfiniBand ports export every PMA counter either way, and the rules read them all",
            Group::CollectorErrorKinds => "every kind of roce_collector_errors_total of every collector, zeros included; without it a kind appears with its first failed read, and roce_collector_success and roce_collector_state_info say how every collector fared",
            Group::ModuleThresholds => "the module's own alarm and warning thresholds of temperature, supply voltage, Tx bias and Tx power (roce_module_threshold); the Rx power thresholds, which the dashboards draw beside each lane's Rx power, are always there",
        }
    }

    /// The families the group turns off whole; empty for the groups that
    /// add detail inside families.
    pub fn families(self) -> Vec<&'static Family> {
        use super::{hw_counters, netdev, phys, rdma, topology};
        match self {
            Group::PortCounters => rdma::port_counter_families()
                .chain([&rdma::PORT_STAT.family])
                .collect(),
            Group::HwCounters => hw_counters::families(),
            Group::HwStat => vec![&rdma::HW_STAT.family],
            Group::Gids => vec![&rdma::GID_INFO.family],
            Group::Qos => vec![
                &netdev::PFC_ENABLED.family,
                &netdev::ECN_INFO.family,
                &netdev::QOS_INFO.family,
                &netdev::QOS_PEER.family,
                &netdev::QOS_PEER_DSCP_PRIORITY.family,
                &netdev::DCQCN_PARAMETER.family,
                &netdev::DCQCN_PARAMETERS.family,
                &netdev::QOS_AGE.family,
            ],
            Group::Phys => phys::FAMILIES.iter().collect(),
            Group::Topology => topology::FAMILIES.iter().collect(),
            Group::Lanes => vec![&phys::MODULE_TX_BIAS.family, &phys::MODULE_TX_POWER.family],
            Group::DcqcnParameters => vec![&netdev::DCQCN_PARAMETER.family],
            Group::PcieHops
            | Group::IdlePriorities
            | Group::PcieAerKinds
            | Group::ModuleThresholds
            | Group::SysPaths
            | Group::EthernetPma
            | Group::CollectorErrorKinds => Vec::new(),
        }
    }

    fn from_name(name: &str) -> Option<Group> {
        Group::ALL.into_iter().find(|g| g.name() == name)
    }
}

/// Which groups are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Groups {
    on: [bool; Group::ALL.len()],
}

impl Default for Groups {
    fn default() -> Self {
        Groups {
            on: Group::ALL.map(Group::default_on),
        }
    }
}

impl Groups {
    /// Every group on.
    pub fn all() -> Groups {
        Groups {
            on: [true; Group::ALL.len()],
        }
    }

    pub fn is_on(&self, group: Group) -> bool {
        self.on[group as usize]
    }

    pub fn set(&mut self, group: Group, on: bool) {
        self.on[group as usize] = on;
    }

    /// Whether a family is exported: off when a group that holds it is off.
    pub fn exports(&self, family: &Family) -> bool {
        Group::ALL
            .into_iter()
            .all(|g| self.is_on(g) || !g.families().iter().any(|f| f.base == family.base))
    }
}

/// Every group's name, for the error on an unknown one (a test checks it
/// against [`Group::name`]).
const NAMES: [&str; Group::ALL.len()] = [
    "port_counters",
    "hw_counters",
    "hw_stat",
    "gids",
    "qos",
    "phys",
    "topology",
    "pcie_hops",
    "idle_priorities",
    "pcie_aer_kinds",
    "lanes",
    "module_thresholds",
    "dcqcn_parameters",
    "sys_paths",
    "ethernet_pma",
    "collector_error_kinds",
];

/// `metrics:` in the configuration: group name to on/off; unknown names
/// are errors.
impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct GroupsVisitor;
        impl<'de> Visitor<'de> for GroupsVisitor {
            type Value = Groups;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of metric group names to true or false")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Groups, A::Error> {
                let mut groups = Groups::default();
                while let Some(key) = map.next_key::<String>()? {
                    let Some(group) = Group::from_name(&key) else {
                        return Err(A::Error::unknown_field(&key, &NAMES));
                    };
                    groups.set(group, map.next_value::<bool>()?);
                }
                Ok(groups)
            }
        }
        deserializer.deserialize_map(GroupsVisitor)
    }
}

/// One row of the series budget: series on the demo tree (8 RDMA ports).
#[derive(Debug, Clone, Copy)]
pub struct BudgetRow {
    /// A [`Group`] name, or a section of families no group switches.
    pub row: &'static str,
    /// Series by default.
    pub default: usize,
    /// Series with every group on.
    pub all: usize,
}

/// RDMA ports of the demo tree, the divisor of the per-port figures.
pub const DEMO_PORTS: usize = 8;

/// Series of the demo tree by default, at most: what a full 8-NIC node
/// costs a Prometheus server.
pub const DEMO_SERIES_CEILING: usize = 1000;

/// A series the default exposition leaves out because another carries
/// what it says, and how to get it back.
#[derive(Debug, Clone, Copy)]
pub struct BudgetCut {
    /// What is left out.
    pub removes: &'static str,
    /// Where its information is instead.
    pub instead: &'static str,
    /// The group that brings it back, or "none" (a label carries it).
    pub restored_by: &'static str,
}

/// The budget's decisions, rendered in docs/metrics.md.
pub const CUTS: &[BudgetCut] = &[
    BudgetCut {
        removes: "roce_port_state_id, roce_port_physical_state_id, roce_port_hw_counters_path_info",
        instead: "roce_port_info{state,phys_state,hw_counters} (the states by the kernel's names); roce_port_up stays the numeric verdict",
        restored_by: "none",
    },
    BudgetCut {
        removes: "Ethernet ports' PMA counters that say nothing of RoCE: unicast/multicast packets, InfiniBand link-layer errors (VL15, switch relay, remote physical, constraint, local link integrity, buffer overrun, link error recovery), and symbol_error/link_downed where the netdev has the 64-bit counts",
        instead: "roce_port_packets_*; roce_netdev_phy_symbol_errors_total, roce_netdev_link_down_events_total (the rules, the errors dashboard and the fleet bit error rate read them first); InfiniBand ports keep every PMA counter",
        restored_by: "ethernet_pma",
    },
    BudgetCut {
        removes: "roce_collector_errors_total kinds still at zero",
        instead: "a kind appears with its first failed read; roce_collector_success and roce_collector_state_info for every collector",
        restored_by: "collector_error_kinds",
    },
    BudgetCut {
        removes: "roce_pcie_link_speed_transfers_per_second, roce_pcie_link_width_lanes (current and max bound)",
        instead: "one roce_pcie_link_info{speed,width,max_speed,max_width} per GPU and NIC function (none where no link file is readable); roce_pcie_link_downtrained lists a link below its bound",
        restored_by: "pcie_hops (the bridges' links, and every link's downtrained 0)",
    },
    BudgetCut {
        removes: "roce_gpu_nearest_nic_info",
        instead: "roce_gpu_nic_path_info{nearest=\"true\"}, listed even when SYS",
        restored_by: "none",
    },
    BudgetCut {
        removes: "roce_pcie_acs_request_redirect of bridges with redirect disabled or no ACS",
        instead: "listed where redirect is enabled or unknown, which acs_on_gpu_nic_path judges",
        restored_by: "pcie_hops",
    },
    BudgetCut {
        removes: "roce_lldp_neighbor_ttl_seconds",
        instead: "roce_lldp_neighbor_info{ttl_seconds} (the TTL the frame carried, constant per switch)",
        restored_by: "none",
    },
    BudgetCut {
        removes: "roce_qos_buffer_port_size_bytes, roce_qos_rdma_cm_default_tos",
        instead: "roce_qos_info{buffer_total,rdma_cm_tos}",
        restored_by: "none",
    },
    BudgetCut {
        removes: "roce_phy_errors_total{kind=\"fec_corrected_bits\",lane=\"\"} where FEC_GET reports corrected bits (mlx5 rx_corrected_bits_phy: the same PPCNT field, en_stats.c fec_set_corrected_bits_total)",
        instead: "roce_fec_corrected_bits_total{lane=\"\"}, which fec_ber_high and the pre-FEC BER panel read",
        restored_by: "lanes (with the per-lane split)",
    },
];

/// The series budget on the demo tree; `tests/exposition.rs` fails when the
/// exposition exceeds a row (and prints the measured table).
pub const BUDGET: &[BudgetRow] = &[
    BudgetRow {
        row: "exporter",
        default: 43,
        all: 78,
    },
    BudgetRow {
        row: "ports",
        default: 32,
        all: 32,
    },
    BudgetRow {
        row: "port_counters",
        default: 56,
        all: 168,
    },
    BudgetRow {
        row: "hw_counters",
        default: 248,
        all: 248,
    },
    BudgetRow {
        row: "hw_stat",
        default: 0,
        all: 0,
    },
    BudgetRow {
        row: "gids",
        default: 32,
        all: 32,
    },
    BudgetRow {
        row: "congestion",
        default: 243,
        all: 464,
    },
    BudgetRow {
        row: "qos",
        default: 49,
        all: 96,
    },
    BudgetRow {
        row: "dcqcn_parameters",
        default: 0,
        all: 72,
    },
    BudgetRow {
        row: "sys_paths",
        default: 0,
        all: 0,
    },
    BudgetRow {
        row: "phys",
        default: 166,
        all: 2092,
    },
    BudgetRow {
        row: "lanes",
        default: 0,
        all: 48,
    },
    BudgetRow {
        row: "topology",
        default: 71,
        all: 187,
    },
    BudgetRow {
        row: "lldp",
        default: 48,
        all: 48,
    },
    BudgetRow {
        row: "probes",
        default: 0,
        all: 0,
    },
    BudgetRow {
        row: "findings",
        default: 7,
        all: 7,
    },
];

/// The budget row of a family: the group that switches it (the narrowest,
/// listed last, where two do), else its section.
pub fn budget_row(family: &Family) -> &'static str {
    use super::{exporter, findings, lldp, nccl, netdev, peer_probes, probes, process, rdma};
    for g in Group::ALL.into_iter().rev() {
        if g.families().iter().any(|f| f.base == family.base) {
            return g.name();
        }
    }
    let is_in = |table: &[Family]| table.iter().any(|f| f.base == family.base);
    if is_in(exporter::FAMILIES) || is_in(process::FAMILIES) {
        "exporter"
    } else if is_in(rdma::FAMILIES) {
        "ports"
    } else if is_in(netdev::FAMILIES) {
        "congestion"
    } else if is_in(lldp::FAMILIES) {
        "lldp"
    } else if is_in(probes::FAMILIES) || is_in(peer_probes::FAMILIES) || is_in(nccl::FAMILIES) {
        "probes"
    } else if is_in(findings::FAMILIES) {
        "findings"
    } else {
        "other"
    }
}

/// The budget as markdown, for the metric reference.
pub fn budget_markdown() -> String {
    let mut out = String::from(
        "## Series budget\n\n\
         Series of the demo tree (`examples/demo-gpu-node`, 8 RDMA ports, `roce_exporter once`), \
         by default and with every group on, in total and per port; `tests/exposition.rs` keeps \
         the exposition within these figures. A row is a group (switched by `metrics:` in the \
         configuration, or `--collector.<group>` / `--no-collector.<group>`, the flag winning; \
         for qos, phys and topology that flag stops the source itself) or a section no group \
         switches.\n\n\
         | row | default | per port | every group on | per port |\n|---|---|---|---|---|\n",
    );
    let per_port = |n: usize| format!("{:.1}", n as f64 / DEMO_PORTS as f64);
    let (mut d, mut a) = (0, 0);
    for r in BUDGET {
        d += r.default;
        a += r.all;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r.row,
            r.default,
            per_port(r.default),
            r.all,
            per_port(r.all)
        ));
    }
    out.push_str(&format!(
        "| **total** | **{d}** | **{}** | **{a}** | **{}** |\n\n",
        per_port(d),
        per_port(a)
    ));
    // Rows of node-wide series (GPUs, PCIe, the exporter itself, findings):
    // the rest is per RDMA port.
    let node_rows = ["exporter", "topology", "findings", "probes"];
    let node: usize = BUDGET
        .iter()
        .filter(|r| node_rows.contains(&r.row))
        .map(|r| r.default)
        .sum();
    out.push_str(&format!(
        "Beside node_exporter: its infiniband collector exports about 30 series per port \
         and its ethtool collector one per `ethtool -S` statistic (113 global statistics on a \
         ConnectX 100 GbE port, hundreds more per queue), so about 143 per port or more. Ours, \
         by default on the demo tree: **{} per RDMA port** (every counter with its meaning, the \
         QoS configuration, FEC, the module and AER) plus {node} for the node (GPUs, PCIe \
         paths, the exporter, findings).\n\n",
        per_port(d - node),
    ));
    out.push_str(&format!(
        "The default stays at or below {DEMO_SERIES_CEILING} series on the demo tree, every \
         reader's data present, with every shipped rule, alert and panel fed. What the default \
         leaves out for that, and how to get it back:\n\n\
         | left out | its information instead | brought back by |\n|---|---|---|\n"
    ));
    for c in CUTS {
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            c.removes, c.instead, c.restored_by
        ));
    }
    out.push('\n');
    out.push_str("Groups (default in parentheses):\n\n");
    for g in Group::ALL {
        out.push_str(&format!(
            "- `{}` ({}): {}\n",
            g.name(),
            if g.default_on() { "on" } else { "off" },
            g.help()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_names_agree() {
        for g in Group::ALL {
            assert_eq!(g.on_flag(), format!("collector.{}", g.name()));
            assert_eq!(g.off_flag(), format!("no-collector.{}", g.name()));
            assert_eq!(Group::from_name(g.name()), Some(g));
            assert_eq!(Group::ALL[g as usize], g);
            assert_eq!(NAMES[g as usize], g.name());
        }
    }

    #[test]
    fn a_group_switches_its_families() {
        let mut groups = Groups::default();
        assert!(!groups.exports(&super::super::rdma::HW_STAT));
        groups.set(Group::HwStat, true);
        assert!(groups.exports(&super::super::rdma::HW_STAT));
        assert!(groups.exports(&super::super::rdma::GID_INFO));
    }

    #[test]
    fn every_budget_row_is_a_group_or_section() {
        let rows: Vec<&str> = BUDGET.iter().map(|r| r.row).collect();
        for g in Group::ALL.into_iter().filter(|g| !g.families().is_empty()) {
            assert!(rows.contains(&g.name()), "{} has no budget row", g.name());
        }
    }
}
