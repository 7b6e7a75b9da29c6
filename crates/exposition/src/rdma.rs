//! Families of the RDMA sysfs source: devices, ports, `counters/`, GIDs and
//! the hardware counters without a semantic mapping (those with one are in
//! [`super::hw_counters`]).

use roce_netdev::{Meaning, Netdev};
use roce_rdma::{Device, LinkLayer, Port};

use super::groups::{Group, Groups};
use super::labels::{label_set, PortLabels, PortStatLabels};
use super::{hw_counters, Fam, Family, FamilySamples, FamilyUnit, MetricKind, Row, Samples};
use crate::snapshot::Snapshot;

label_set! {
    /// An RDMA device and what identifies it.
    pub struct DeviceInfoLabels {
        device, driver, fw_version, board_id, hca_type, node_guid, pci_address, numa_node,
    }
}

label_set! {
    /// An RDMA port, its link layer, what backs it, its states and where
    /// its hardware counters were read.
    pub struct PortInfoLabels {
        device, port, link_layer, netdev, pci_address, state, phys_state, hw_counters,
    }
}

label_set! {
    /// A populated GID table slot (`type` as the kernel prints it).
    pub struct GidLabels { device, port, index, gid, r#type = "type", netdev, family }
}

pub const DEVICE_INFO: Fam<DeviceInfoLabels> = Fam::new(Row {
    base: "roce_device_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "RDMA device (value 1). driver is the kernel driver of the backing PCI function, or rxe/siw for software devices.",
    source: "/sys/class/infiniband/<device>/{fw_ver,board_id,hca_type,node_guid}, device/driver, device/numa_node",
});
pub const PORT_INFO: Fam<PortInfoLabels> = Fam::new(Row {
    base: "roce_port_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "RDMA port (value 1) with its link layer and the netdev behind it; state, its logical state as ports/<port>/state names it (DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER), phys_state its physical state as phys_state names it (Sleep, Polling, Disabled, PortConfigurationTraining, LinkUp, LinkErrorRecovery, Phy Test), each empty when unread (roce_port_up is 1 when ACTIVE and LinkUp); hw_counters where its hardware counters were read: netlink (one RDMA_NLDEV_CMD_STAT_GET per port) or sysfs (one file per counter), empty when it has none.",
    source: "ports/<port>/{link_layer,state,phys_state}, gid_attrs/ndevs, device/net, rxe parent; the RDMA reader's hardware counter path",
});
pub const PORT_UP: Fam<PortLabels> = Fam::new(Row {
    base: "roce_port_up",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when the port is ACTIVE and LinkUp, else 0.",
    source: "ports/<port>/{state,phys_state}",
});
pub const PORT_RATE: Fam<PortLabels> = Fam::new(Row {
    base: "roce_port_rate",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::BytesPerSecond),
    help: "Port data rate as the kernel reports it, in bytes per second (100 Gb/sec (4X EDR) is 12.5e9).",
    source: "ports/<port>/rate",
});
pub const PORT_LID: Fam<PortLabels> = Fam::new(Row {
    base: "roce_port_lid",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Local identifier of an InfiniBand port (absent on Ethernet, where the kernel reports 0 and RoCE addresses by GID).",
    source: "ports/<port>/lid",
});
/// `family` is a label DESIGN §4 does not name. It is kept: it is a pure
/// function of `gid` (no extra cardinality), and it lets PromQL tell an
/// IPv4-mapped RoCE v2 GID (what NCCL and most RoCE stacks select) from a
/// link-local one without a regular expression over the GID text, which the
/// fleet-wide GID rules need.
pub const GID_INFO: Fam<GidLabels> = Fam::new(Row {
    base: "roce_gid_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Populated GID table slot (value 1): type is IB/RoCE v1 or RoCE v2 as the kernel prints it; family (derived from gid) is ipv4_mapped, ipv6_link_local or ipv6_global, the distinction NCCL-style GID selection needs.",
    source: "ports/<port>/gids/<index>, gid_attrs/{types,ndevs}/<index>",
});
pub const HW_STAT: Fam<PortStatLabels> = Fam::new(Row {
    base: "roce_port_hw_stat",
    kind: MetricKind::Counter,
    unit: None,
    help: "Hardware counter without a semantic mapping, under its kernel name.",
    source: "RDMA netlink RDMA_NLDEV_CMD_STAT_GET, or ports/<port>/hw_counters/<stat>",
});
pub const PORT_STAT: Fam<PortStatLabels> = Fam::new(Row {
    base: "roce_port_stat",
    kind: MetricKind::Counter,
    unit: None,
    help: "counters/ entry without a semantic mapping, under its kernel name.",
    source: "ports/<port>/counters/<stat>",
});

/// Whether an Ethernet (RoCE) port exports a `counters/` file without the
/// `ethernet_pma` group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnEthernet {
    /// Always.
    Kept,
    /// Never: an InfiniBand link-layer counter, or a split of traffic
    /// another family counts whole.
    Hidden,
    /// Not where the port's netdev has this wider counter of the same
    /// events.
    HiddenBeside(Meaning),
}

/// `counters/` file → family, with the multiplier to base units.
pub struct PortCounter {
    pub file: &'static str,
    pub family: Fam<PortLabels<'static>>,
    pub scale: u64,
    pub on_ethernet: OnEthernet,
}

macro_rules! port_counter {
    ($file:literal, $base:literal, $unit:expr, $scale:literal, $on_ethernet:expr, $help:literal) => {
        PortCounter {
            file: $file,
            scale: $scale,
            on_ethernet: $on_ethernet,
            family: Fam::new(Row {
                base: $base,
                kind: MetricKind::Counter,
                unit: $unit,
                help: $help,
                source: concat!("ports/<port>/counters/", $file),
            }),
        }
    };
}

/// The IB PMA counters of `counters/` (`drivers/infiniband/core/sysfs.c`,
/// `pma_counter` attributes) under node_exporter-style names. On an
/// Ethernet port the InfiniBand link-layer counters (IBTA PortCounters:
/// VL15 drops, switch relay, remote physical, constraint, local link
/// integrity and buffer overrun errors, link error recovery) say nothing
/// of RoCE, the unicast and multicast counts split the traffic
/// `port_{rcv,xmit}_packets` count whole, and where the netdev has the
/// 64-bit counts of symbol errors and link-down events the 16- and 8-bit
/// PMA ones, which stick at their maximum, add nothing: those are exported
/// with the `ethernet_pma` group only ([`OnEthernet`]).
pub const PORT_COUNTERS: &[PortCounter] = &[
    port_counter!(
        "port_rcv_data",
        "roce_port_data_received",
        Some(FamilyUnit::Bytes),
        4,
        OnEthernet::Kept,
        "Data octets received (the kernel counts octets / 4; multiplied back here)."
    ),
    port_counter!(
        "port_xmit_data",
        "roce_port_data_transmitted",
        Some(FamilyUnit::Bytes),
        4,
        OnEthernet::Kept,
        "Data octets transmitted (the kernel counts octets / 4; multiplied back here)."
    ),
    port_counter!(
        "port_rcv_packets",
        "roce_port_packets_received",
        None,
        1,
        OnEthernet::Kept,
        "Packets received."
    ),
    port_counter!(
        "port_xmit_packets",
        "roce_port_packets_transmitted",
        None,
        1,
        OnEthernet::Kept,
        "Packets transmitted."
    ),
    port_counter!(
        "unicast_rcv_packets",
        "roce_port_unicast_packets_received",
        None,
        1,
        OnEthernet::Hidden,
        "Unicast packets received."
    ),
    port_counter!(
        "unicast_xmit_packets",
        "roce_port_unicast_packets_transmitted",
        None,
        1,
        OnEthernet::Hidden,
        "Unicast packets transmitted."
    ),
    port_counter!(
        "multicast_rcv_packets",
        "roce_port_multicast_packets_received",
        None,
        1,
        OnEthernet::Hidden,
        "Multicast packets received."
    ),
    port_counter!(
        "multicast_xmit_packets",
        "roce_port_multicast_packets_transmitted",
        None,
        1,
        OnEthernet::Hidden,
        "Multicast packets transmitted."
    ),
    port_counter!(
        "symbol_error",
        "roce_port_symbol_errors",
        None,
        1,
        OnEthernet::HiddenBeside(Meaning::PhySymbolErrors),
        "Minor link errors detected on one or more physical lanes."
    ),
    port_counter!(
        "link_error_recovery",
        "roce_port_link_error_recovery",
        None,
        1,
        OnEthernet::Hidden,
        "Successful link error recovery processes."
    ),
    port_counter!(
        "link_downed",
        "roce_port_link_downed",
        None,
        1,
        OnEthernet::HiddenBeside(Meaning::LinkDownEvents),
        "Times the link failed to recover and went down (link flaps)."
    ),
    port_counter!(
        "port_rcv_errors",
        "roce_port_receive_errors",
        None,
        1,
        OnEthernet::Kept,
        "Received packets with errors."
    ),
    port_counter!(
        "port_rcv_remote_physical_errors",
        "roce_port_receive_remote_physical_errors",
        None,
        1,
        OnEthernet::Hidden,
        "Received packets marked with the EBP delimiter."
    ),
    port_counter!(
        "port_rcv_switch_relay_errors",
        "roce_port_receive_switch_relay_errors",
        None,
        1,
        OnEthernet::Hidden,
        "Received packets discarded because they could not be forwarded."
    ),
    port_counter!(
        "port_xmit_discards",
        "roce_port_transmit_discards",
        None,
        1,
        OnEthernet::Kept,
        "Outbound packets discarded because the port was down or congested."
    ),
    port_counter!(
        "port_xmit_constraint_errors",
        "roce_port_transmit_constraint_errors",
        None,
        1,
        OnEthernet::Hidden,
        "Packets not transmitted because of outbound raw filtering."
    ),
    port_counter!(
        "port_rcv_constraint_errors",
        "roce_port_receive_constraint_errors",
        None,
        1,
        OnEthernet::Hidden,
        "Packets discarded because of inbound raw filtering."
    ),
    port_counter!(
        "local_link_integrity_errors",
        "roce_port_local_link_integrity_errors",
        None,
        1,
        OnEthernet::Hidden,
        "Times local physical errors exceeded the threshold."
    ),
    port_counter!(
        "excessive_buffer_overrun_errors",
        "roce_port_excessive_buffer_overrun_errors",
        None,
        1,
        OnEthernet::Hidden,
        "Times consecutive flow-control update periods had buffer overrun."
    ),
    port_counter!(
        "VL15_dropped",
        "roce_port_vl15_dropped",
        None,
        1,
        OnEthernet::Hidden,
        "Incoming VL15 (subnet management) packets dropped."
    ),
    port_counter!(
        "port_xmit_wait",
        "roce_port_transmit_wait",
        None,
        1,
        OnEthernet::Kept,
        "Ticks during which the port had data to send but no flow-control credits."
    ),
];

pub const FAMILIES: &[Family] = &[
    DEVICE_INFO.family,
    PORT_INFO.family,
    PORT_UP.family,
    PORT_RATE.family,
    PORT_LID.family,
    GID_INFO.family,
    HW_STAT.family,
    PORT_STAT.family,
];

/// Families of `counters/` in table order (for the reference).
pub fn port_counter_families() -> impl Iterator<Item = &'static Family> {
    PORT_COUNTERS.iter().map(|c| &c.family.family)
}

fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("")
}

/// Whether a port exports a `counters/` file (see [`OnEthernet`]).
fn exported(
    on_ethernet: OnEthernet,
    port: &Port,
    netdev: Option<&Netdev>,
    groups: &Groups,
) -> bool {
    if groups.is_on(Group::EthernetPma) || port.link_layer != Some(LinkLayer::Ethernet) {
        return true;
    }
    match on_ethernet {
        OnEthernet::Kept => true,
        OnEthernet::Hidden => false,
        OnEthernet::HiddenBeside(wide) => {
            !netdev.is_some_and(|n| n.stats.iter().any(|s| s.meaning == wide))
        }
    }
}

pub fn collect(snapshot: &Snapshot, groups: &Groups, out: &mut Vec<FamilySamples>) {
    let Some(rdma) = &snapshot.rdma else { return };
    let netdev_of = |port: &Port| {
        let name = port.netdev.as_deref()?;
        let netdevs = snapshot.netdev.as_ref()?;
        netdevs.netdevs.iter().find(|n| n.name == name)
    };

    let mut device_info = Samples::new(&DEVICE_INFO);
    let mut port_info = Samples::new(&PORT_INFO);
    let mut up = Samples::new(&PORT_UP);
    let mut rate = Samples::new(&PORT_RATE);
    let mut lid = Samples::new(&PORT_LID);
    let mut gids = Samples::new(&GID_INFO);
    let mut port_counters: Vec<Samples<PortLabels>> = PORT_COUNTERS
        .iter()
        .map(|c| Samples::new(&c.family))
        .collect();
    let mut port_stat = Samples::new(&PORT_STAT);
    let mut hw = hw_counters::Collector::new();

    for device in &rdma.devices {
        let numa = device.numa_node.map(|n| n.to_string()).unwrap_or_default();
        let labels = DeviceInfoLabels {
            device: &device.name,
            driver: opt(&device.driver),
            fw_version: opt(&device.fw_version),
            board_id: opt(&device.board_id),
            hca_type: opt(&device.hca_type),
            node_guid: opt(&device.node_guid),
            pci_address: opt(&device.pci_address),
            numa_node: &numa,
        };
        device_info.push(labels, 1u64);
        for port in &device.ports {
            let p = port.number.to_string();
            let labels = PortLabels {
                device: &device.name,
                port: &p,
            };
            collect_port(
                device,
                port,
                labels,
                &mut port_info,
                &mut up,
                &mut rate,
                &mut lid,
            );
            for gid in &port.gids {
                let index = gid.index.to_string();
                let labels = GidLabels {
                    device: &device.name,
                    port: &p,
                    index: &index,
                    gid: &gid.kernel_text(),
                    r#type: gid.gid_type.as_str(),
                    netdev: opt(&gid.netdev),
                    family: gid.family().as_str(),
                };
                gids.push(labels, 1u64);
            }
            let netdev = netdev_of(port);
            for counter in &port.counters {
                match PORT_COUNTERS.iter().position(|c| c.file == &*counter.name) {
                    Some(i) => {
                        let c = &PORT_COUNTERS[i];
                        if exported(c.on_ethernet, port, netdev, groups) {
                            port_counters[i].push(labels, counter.value.saturating_mul(c.scale));
                        }
                    }
                    None => {
                        let labels = PortStatLabels {
                            device: &device.name,
                            port: &p,
                            stat: &counter.name,
                        };
                        port_stat.push(labels, counter.value);
                    }
                }
            }
            hw.add_port(device, labels, port);
        }
    }
    out.extend([
        device_info.into(),
        port_info.into(),
        up.into(),
        rate.into(),
        lid.into(),
        gids.into(),
    ]);
    out.extend(port_counters.into_iter().map(FamilySamples::from));
    out.push(port_stat.into());
    hw.finish(out);
}

fn collect_port(
    device: &Device,
    port: &Port,
    labels: PortLabels<'_>,
    port_info: &mut Samples<PortInfoLabels>,
    up: &mut Samples<PortLabels>,
    rate: &mut Samples<PortLabels>,
    lid: &mut Samples<PortLabels>,
) {
    let link_layer = port.link_layer.as_ref().map(|l| l.as_str()).unwrap_or("");
    let hw_counters = match port.hw_counter_path {
        roce_rdma::HwCounterPath::None => "",
        path => path.as_str(),
    };
    // The states as labels: they change with the link only, and
    // roce_port_up carries the verdict as a value.
    let info = PortInfoLabels {
        device: labels.device,
        port: labels.port,
        link_layer,
        netdev: opt(&port.netdev),
        pci_address: opt(&device.pci_address),
        state: port.state.as_ref().map(|s| s.name()).unwrap_or(""),
        phys_state: port.phys_state.as_ref().map(|s| s.name()).unwrap_or(""),
        hw_counters,
    };
    port_info.push(info, 1u64);
    if port.state.is_some() || port.phys_state.is_some() {
        up.push(labels, port.is_up());
    }
    if let Some(r) = port.rate_bytes_per_second {
        rate.push(labels, r);
    }
    let ethernet = matches!(port.link_layer, Some(roce_rdma::LinkLayer::Ethernet));
    if let (Some(l), false) = (port.lid, ethernet) {
        lid.push(labels, u64::from(l));
    }
}
