//! Families of the physical layer and device health: carrier transitions
//! (netdev source, sysfs), FEC mode and counts, the pluggable module's
//! identity, readings and own thresholds, PCIe AER of NICs and GPUs and of
//! the bridge ports on their paths, and devlink health reporters (phys
//! source). A driver that does not offer one of them leaves its series
//! out; nothing is exported as 0 in its place. Netdev series carry `netdev`, and `device`/`port` of the RDMA
//! port the netdev backs (empty for `netdevs.extra` ones).

use roce_netdev::aer::{AerCounts, PciAer};
use roce_netdev::fec::FecCounter;
use roce_netdev::module::Thresholds;
use roce_netdev::phys::{BridgeHealth, PhysNetdev};
use roce_netdev::RdmaPortRef;

use super::groups::{Group, Groups};
use super::labels::{label_set, NetdevDirectionLabels, NetdevLabels, NetdevLaneLabels};
use super::{push_into, Fam, Family, FamilySamples, FamilyUnit, MetricKind, Row};
use crate::snapshot::Snapshot;

label_set! {
    /// A netdev's active FEC mode.
    pub struct FecModeLabels { netdev, device, port, mode }
}

label_set! {
    /// The module in a netdev's cage (`type` its form: SFP, QSFP, OSFP...).
    pub struct ModuleLabels {
        netdev, device, port, r#type = "type", standard, vendor, part, revision, serial,
    }
}

label_set! {
    /// One of a module's own thresholds of one monitor.
    pub struct ThresholdLabels { netdev, device, port, monitor, level }
}

label_set! {
    /// A PCI function's AER errors of one severity.
    pub struct AerLabels { pci, role, netdev, severity }
}

label_set! {
    /// A PCI function's AER errors of one severity and kind.
    pub struct AerKindLabels { pci, role, netdev, severity, kind }
}

label_set! {
    /// A bridge port's AER errors of one severity, with what it serves.
    pub struct BridgeAerLabels { pci, link, netdevs, gpus, severity }
}

label_set! {
    /// A devlink health reporter of a netdev's PCI function.
    pub struct ReporterLabels { netdev, pci, reporter, devlink_port }
}

const FEC_SOURCE: &str =
    "ethtool netlink ETHTOOL_MSG_FEC_GET with ETHTOOL_FLAG_STATS (ETHTOOL_A_FEC_STAT_*)";
const MODULE_SOURCE: &str = "ethtool netlink ETHTOOL_MSG_MODULE_EEPROM_GET (SFF-8636, CMIS, SFF-8472), every netdevs.module_interval";
const AER_SOURCE: &str = "/sys/bus/pci/devices/<pci>/aer_dev_{correctable,nonfatal,fatal}";
const DEVLINK_SOURCE: &str = "devlink generic netlink DEVLINK_CMD_HEALTH_REPORTER_GET (dump)";

pub const CARRIER_CHANGES: Fam<NetdevLabels> = Fam::new(Row {
    base: "roce_netdev_carrier_changes",
    kind: MetricKind::Counter,
    unit: None,
    help: "Carrier (link) up and down transitions of the netdev since it was created; only on kernels without carrier_{up,down}_count (before 4.16), whose sum it is (roce_netdev_carrier_transitions_total).",
    source: "/sys/class/net/<netdev>/carrier_changes",
});
pub const CARRIER_TRANSITIONS: Fam<NetdevDirectionLabels> = Fam::new(Row {
    base: "roce_netdev_carrier_transitions",
    kind: MetricKind::Counter,
    unit: None,
    help: "Carrier transitions by direction (up, down) since the netdev was created; 32-bit kernel counts, unlike the 8-bit PMA link_downed.",
    source: "/sys/class/net/<netdev>/carrier_{up,down}_count (Linux 4.16+)",
});
pub const FEC_MODE: Fam<FecModeLabels> = Fam::new(Row {
    base: "roce_fec_mode_info",
    kind: MetricKind::Gauge,
    unit: None,
    help:
        "The FEC encoding in use (value 1): off, rs (Reed-Solomon), baser (Firecode), llrs, other.",
    source: FEC_SOURCE,
});
pub const FEC_CORRECTED_BLOCKS: Fam<NetdevLaneLabels> = Fam::new(Row {
    base: "roce_fec_corrected_blocks",
    kind: MetricKind::Counter,
    unit: None,
    help: "FEC codewords with errors that FEC corrected; lane empty for the total, set per lane where the driver counts lanes.",
    source: FEC_SOURCE,
});
pub const FEC_UNCORRECTABLE_BLOCKS: Fam<NetdevLaneLabels> = Fam::new(Row {
    base: "roce_fec_uncorrectable_blocks",
    kind: MetricKind::Counter,
    unit: None,
    help: "FEC codewords FEC could not correct (frames lost on the link); lane as for roce_fec_corrected_blocks_total. Post-FEC BER is at least rate(this) / link bits per second.",
    source: FEC_SOURCE,
});
pub const FEC_CORRECTED_BITS: Fam<NetdevLaneLabels> = Fam::new(Row {
    base: "roce_fec_corrected_bits",
    kind: MetricKind::Counter,
    unit: None,
    help: "Bits FEC corrected; pre-FEC BER = rate(this) / link bits per second (per lane: / lane bits per second).",
    source: FEC_SOURCE,
});
pub const MODULE_INFO: Fam<ModuleLabels> = Fam::new(Row {
    base: "roce_module_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The pluggable module (optic or cable) in the netdev's cage (value 1), from its EEPROM.",
    source: MODULE_SOURCE,
});
pub const MODULE_TEMPERATURE: Fam<NetdevLabels> = Fam::new(Row {
    base: "roce_module_temperature",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Celsius),
    help: "Module case temperature.",
    source: MODULE_SOURCE,
});
pub const MODULE_SUPPLY: Fam<NetdevLabels> = Fam::new(Row {
    base: "roce_module_supply",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Volts),
    help: "Module supply voltage (Vcc).",
    source: MODULE_SOURCE,
});
pub const MODULE_TX_BIAS: Fam<NetdevLaneLabels> = Fam::new(Row {
    base: "roce_module_tx_bias",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Amperes),
    help: "Laser bias current of one lane (lane 0 is the module's lane 1).",
    source: MODULE_SOURCE,
});
pub const MODULE_TX_POWER: Fam<NetdevLaneLabels> = Fam::new(Row {
    base: "roce_module_tx_power",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Watts),
    help: "Optical power the module transmits on one lane.",
    source: MODULE_SOURCE,
});
pub const MODULE_RX_POWER: Fam<NetdevLaneLabels> = Fam::new(Row {
    base: "roce_module_rx_power",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Watts),
    help: "Optical power the module receives on one lane (average or OMA, as the module measures).",
    source: MODULE_SOURCE,
});
pub const MODULE_THRESHOLD: Fam<ThresholdLabels> = Fam::new(Row {
    base: "roce_module_threshold",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The module's own alarm and warning thresholds (level high_alarm, low_alarm, high_warning, low_warning) for each monitor, in the monitor's unit: temperature_celsius, supply_volts, tx_bias_amperes, tx_power_watts, rx_power_watts.",
    source: MODULE_SOURCE,
});
pub const PCIE_AER_ERRORS: Fam<AerLabels> = Fam::new(Row {
    base: "roce_pcie_aer_errors",
    kind: MetricKind::Counter,
    unit: None,
    help: "PCIe AER errors the kernel counted for a NIC (role nic, with its netdev) or GPU (role gpu) function, by severity: correctable (replayed by the link layer, a sign of a marginal link), nonfatal, fatal (TOTAL_ERR_* lines).",
    source: AER_SOURCE,
});
pub const PCIE_AER_ERROR_KINDS: Fam<AerKindLabels> = Fam::new(Row {
    base: "roce_pcie_aer_error_kinds",
    kind: MetricKind::Counter,
    unit: None,
    help: "PCIe AER errors by kind as the kernel names them (RxErr, BadTLP, BadDLLP, Rollover, Timeout, ... for correctable; DLP, TLP, CmpltTO, MalfTLP, ... for uncorrectable), of NICs and GPUs (role nic, gpu) and, with the pcie_aer_kinds group, of the bridge ports on their paths (role bridge).",
    source: AER_SOURCE,
});
pub const PCIE_BRIDGE_AER_ERRORS: Fam<BridgeAerLabels> = Fam::new(Row {
    base: "roce_pcie_bridge_aer_errors",
    kind: MetricKind::Counter,
    unit: None,
    help: "PCIe AER errors the kernel counted on a bridge port (root port or switch port) of a NIC's or GPU's path, by severity (TOTAL_ERR_* lines). A port counts the errors its receiver saw: those of what the device below it sends (a NIC's DMA writes, GPUDirect RDMA into GPU memory among them) land here, not on the NIC. link: nic or gpu where the port's own link leads to that NIC or GPU (their upstream port), bridge where it leads to another bridge; netdevs and gpus (PCI addresses): the NICs and GPUs below the port, comma-separated. A port shared by several paths is one series. A severity appears with its first count (zeros too, and the kinds as roce_pcie_aer_error_kinds_total{role=\"bridge\"}, with the pcie_aer_kinds group); the rules judge every port either way.",
    source: "/sys/bus/pci/devices/<bridge>/aer_dev_{correctable,nonfatal,fatal} of the bridges above the NICs and GPUs in /sys/devices",
});
pub const DEVLINK_HEALTHY: Fam<ReporterLabels> = Fam::new(Row {
    base: "roce_devlink_reporter_healthy",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when the NIC's devlink health reporter (fw, fw_fatal, tx, rx, ...) is healthy, 0 when it is in error.",
    source: DEVLINK_SOURCE,
});
pub const DEVLINK_ERRORS: Fam<ReporterLabels> = Fam::new(Row {
    base: "roce_devlink_reporter_errors",
    kind: MetricKind::Counter,
    unit: None,
    help: "Errors a devlink health reporter saw.",
    source: DEVLINK_SOURCE,
});
pub const DEVLINK_RECOVERIES: Fam<ReporterLabels> = Fam::new(Row {
    base: "roce_devlink_reporter_recoveries",
    kind: MetricKind::Counter,
    unit: None,
    help: "Recoveries the driver ran for a devlink health reporter.",
    source: DEVLINK_SOURCE,
});

pub const FAMILIES: &[Family] = &[
    CARRIER_CHANGES.family,
    CARRIER_TRANSITIONS.family,
    FEC_MODE.family,
    FEC_CORRECTED_BLOCKS.family,
    FEC_UNCORRECTABLE_BLOCKS.family,
    FEC_CORRECTED_BITS.family,
    MODULE_INFO.family,
    MODULE_TEMPERATURE.family,
    MODULE_SUPPLY.family,
    MODULE_TX_BIAS.family,
    MODULE_TX_POWER.family,
    MODULE_RX_POWER.family,
    MODULE_THRESHOLD.family,
    PCIE_AER_ERRORS.family,
    PCIE_AER_ERROR_KINDS.family,
    PCIE_BRIDGE_AER_ERRORS.family,
    DEVLINK_HEALTHY.family,
    DEVLINK_ERRORS.family,
    DEVLINK_RECOVERIES.family,
];

/// The port number of the RDMA port a netdev backs, empty for none.
fn port_label(rdma: Option<&RdmaPortRef>) -> String {
    rdma.map(|r| r.port.to_string()).unwrap_or_default()
}

/// A netdev's set, `port` its RDMA port's number as text.
fn netdev_labels<'a>(
    netdev: &'a str,
    rdma: Option<&'a RdmaPortRef>,
    port: &'a str,
) -> NetdevLabels<'a> {
    NetdevLabels {
        netdev,
        device: rdma.map(|r| r.device.as_str()).unwrap_or(""),
        port,
    }
}

pub fn collect(snapshot: &Snapshot, groups: &Groups, out: &mut Vec<FamilySamples>) {
    let mut f: Vec<FamilySamples> = FAMILIES.iter().map(FamilySamples::new).collect();
    if let Some(netdevs) = &snapshot.netdev {
        for n in &netdevs.netdevs {
            let port = port_label(n.rdma.as_ref());
            let base = netdev_labels(&n.name, n.rdma.as_ref(), &port);
            // carrier_changes is the sum of the two directions: exported only
            // where the kernel counts no directions (before Linux 4.16)
            if n.carrier.up.is_none() && n.carrier.down.is_none() {
                if let Some(v) = n.carrier.changes {
                    push_into(&mut f, &CARRIER_CHANGES, base, v);
                }
            }
            for (dir, v) in [("up", n.carrier.up), ("down", n.carrier.down)] {
                if let Some(v) = v {
                    push_into(&mut f, &CARRIER_TRANSITIONS, base.direction(dir), v);
                }
            }
        }
    }
    if let Some(phys) = &snapshot.phys {
        for n in &phys.netdevs {
            collect_netdev(n, groups, &mut f);
        }
        for g in &phys.gpus {
            collect_aer(&g.pci, "gpu", "", &g.aer, groups, &mut f);
        }
        for b in &phys.bridges {
            collect_bridge(b, groups, &mut f);
        }
        for r in phys.reporters.iter().flatten() {
            let port = r.reporter.port.map(|p| p.to_string()).unwrap_or_default();
            let labels = ReporterLabels {
                netdev: &r.netdev,
                pci: &r.reporter.device,
                reporter: &r.reporter.name,
                devlink_port: &port,
            };
            let healthy = r.reporter.state == roce_netdev::devlink::ReporterState::Healthy;
            push_into(&mut f, &DEVLINK_HEALTHY, labels, healthy);
            push_into(&mut f, &DEVLINK_ERRORS, labels, r.reporter.errors);
            push_into(&mut f, &DEVLINK_RECOVERIES, labels, r.reporter.recoveries);
        }
    }
    out.extend(f);
}

/// The total (`lane=""`) and, with the `lanes` group, each lane.
fn push_lanes(
    f: &mut [FamilySamples],
    family: &Fam<NetdevLaneLabels>,
    base: NetdevLabels<'_>,
    c: &FecCounter,
    groups: &Groups,
) {
    push_into(f, family, base.lane(""), c.total);
    if !groups.is_on(Group::Lanes) {
        return;
    }
    for (i, v) in c.lanes.iter().enumerate() {
        let lane = i.to_string();
        push_into(f, family, base.lane(&lane), *v);
    }
}

fn push_thresholds(
    f: &mut [FamilySamples],
    base: NetdevLabels<'_>,
    monitor: &str,
    t: Option<&Thresholds>,
) {
    let Some(t) = t else { return };
    for (level, v) in [
        ("high_alarm", t.high_alarm),
        ("low_alarm", t.low_alarm),
        ("high_warning", t.high_warning),
        ("low_warning", t.low_warning),
    ] {
        let labels = ThresholdLabels {
            netdev: base.netdev,
            device: base.device,
            port: base.port,
            monitor,
            level,
        };
        push_into(f, &MODULE_THRESHOLD, labels, v);
    }
}

fn collect_netdev(n: &PhysNetdev, groups: &Groups, f: &mut [FamilySamples]) {
    let port = port_label(n.rdma.as_ref());
    let base = netdev_labels(&n.name, n.rdma.as_ref(), &port);
    if let Some(fec) = &n.fec {
        if let Some(mode) = fec.active {
            let labels = FecModeLabels {
                netdev: base.netdev,
                device: base.device,
                port: base.port,
                mode: mode.as_str(),
            };
            push_into(f, &FEC_MODE, labels, 1u64);
        }
        if let Some(c) = &fec.corrected_blocks {
            push_lanes(f, &FEC_CORRECTED_BLOCKS, base, c, groups);
        }
        if let Some(c) = &fec.uncorrectable_blocks {
            push_lanes(f, &FEC_UNCORRECTABLE_BLOCKS, base, c, groups);
        }
        if let Some(c) = &fec.corrected_bits {
            push_lanes(f, &FEC_CORRECTED_BITS, base, c, groups);
        }
    }
    if let Some(m) = &n.module {
        let labels = ModuleLabels {
            netdev: base.netdev,
            device: base.device,
            port: base.port,
            r#type: m.kind,
            standard: m.standard.as_str(),
            vendor: &m.vendor,
            part: &m.part,
            revision: &m.revision,
            serial: &m.serial,
        };
        push_into(f, &MODULE_INFO, labels, 1u64);
        if let Some(v) = m.temperature_celsius {
            push_into(f, &MODULE_TEMPERATURE, base, v);
        }
        if let Some(v) = m.supply_volts {
            push_into(f, &MODULE_SUPPLY, base, v);
        }
        for (i, lane) in m.lanes.iter().enumerate() {
            let l = i.to_string();
            let labels = base.lane(&l);
            for (family, v) in [
                (&MODULE_TX_BIAS, lane.tx_bias_amperes),
                (&MODULE_TX_POWER, lane.tx_power_watts),
                (&MODULE_RX_POWER, lane.rx_power_watts),
            ] {
                if !groups.exports(&family.family) {
                    continue;
                }
                if let Some(v) = v {
                    push_into(f, family, labels, v);
                }
            }
        }
        let t = &m.thresholds;
        let th = &mut *f;
        if groups.is_on(Group::ModuleThresholds) {
            push_thresholds(
                th,
                base,
                "temperature_celsius",
                t.temperature_celsius.as_ref(),
            );
            push_thresholds(th, base, "supply_volts", t.supply_volts.as_ref());
            push_thresholds(th, base, "tx_bias_amperes", t.tx_bias_amperes.as_ref());
            push_thresholds(th, base, "tx_power_watts", t.tx_power_watts.as_ref());
        }
        push_thresholds(th, base, "rx_power_watts", t.rx_power_watts.as_ref());
    }
    if let Some(pci) = &n.pci {
        collect_aer(pci, "nic", &n.name, &n.aer, groups, f);
    }
}

/// A bridge port's totals by severity with what it serves, one series per
/// port and severity that counted (every one, zeros too, and the kinds
/// with the `pcie_aer_kinds` group): a healthy node has a few dozen bridge
/// ports whose zeros say nothing, and the rules judge them from the
/// samples either way.
fn collect_bridge(b: &BridgeHealth, groups: &Groups, f: &mut [FamilySamples]) {
    let every = groups.is_on(Group::PcieAerKinds);
    let link = match (b.endpoint_link, b.netdevs.is_empty(), b.gpus.is_empty()) {
        (true, false, _) => "nic",
        (true, true, false) => "gpu",
        _ => "bridge",
    };
    let netdevs = b.netdevs.join(",");
    let gpus = b.gpus.join(",");
    let files: [(&str, Option<&AerCounts>); 3] = [
        ("correctable", b.aer.correctable.as_ref()),
        ("nonfatal", b.aer.nonfatal.as_ref()),
        ("fatal", b.aer.fatal.as_ref()),
    ];
    for (severity, counts) in files {
        let Some(c) = counts else { continue };
        if let Some(total) = c.total.filter(|t| every || *t > 0) {
            let labels = BridgeAerLabels {
                pci: &b.pci,
                link,
                netdevs: &netdevs,
                gpus: &gpus,
                severity,
            };
            push_into(f, &PCIE_BRIDGE_AER_ERRORS, labels, total);
        }
        if every {
            for (kind, v) in &c.kinds {
                let labels = AerKindLabels {
                    pci: &b.pci,
                    role: "bridge",
                    netdev: "",
                    severity,
                    kind,
                };
                push_into(f, &PCIE_AER_ERROR_KINDS, labels, *v);
            }
        }
    }
}

/// The totals by severity; the kinds that counted, or every kind with the
/// `pcie_aer_kinds` group (a zero kind says nothing the zero total does not).
fn collect_aer(
    pci: &str,
    role: &str,
    netdev: &str,
    aer: &PciAer,
    groups: &Groups,
    f: &mut [FamilySamples],
) {
    let every_kind = groups.is_on(Group::PcieAerKinds);
    let files: [(&str, Option<&AerCounts>); 3] = [
        ("correctable", aer.correctable.as_ref()),
        ("nonfatal", aer.nonfatal.as_ref()),
        ("fatal", aer.fatal.as_ref()),
    ];
    for (severity, counts) in files {
        let Some(c) = counts else { continue };
        if let Some(total) = c.total {
            let labels = AerLabels {
                pci,
                role,
                netdev,
                severity,
            };
            push_into(f, &PCIE_AER_ERRORS, labels, total);
        }
        for (kind, v) in c.kinds.iter().filter(|(_, v)| every_kind || *v > 0) {
            let labels = AerKindLabels {
                pci,
                role,
                netdev,
                severity,
                kind,
            };
            push_into(f, &PCIE_AER_ERROR_KINDS, labels, *v);
        }
    }
}
