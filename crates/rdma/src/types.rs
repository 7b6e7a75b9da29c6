//! The snapshot types produced by the RDMA sysfs reader. Plain data, no I/O.

use std::net::Ipv6Addr;
use std::sync::Arc;

/// Everything read from `/sys/class/infiniband` in one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RdmaSnapshot {
    /// Devices in name order. Devices excluded by the filter never appear.
    pub devices: Vec<Device>,
    /// Files that should have been readable and were not (EACCES, EIO,
    /// garbage, ...). Absent values (ENOENT, "N/A (no PMA)", empty GID slot)
    /// are not errors and are not listed here.
    pub errors: Vec<ReadError>,
}

/// One RDMA device (`/sys/class/infiniband/<name>`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Device {
    pub name: String,
    /// Kernel driver bound to the backing PCI function (`mlx5_core`,
    /// `bnxt_en`, ...), or `rxe`/`siw` for software devices.
    pub driver: Option<String>,
    /// `fw_ver`; `None` when the file is absent or empty (rxe prints "").
    pub fw_version: Option<String>,
    /// `board_id` (mlx5: e.g. `MT_0000000838`).
    pub board_id: Option<String>,
    /// `hca_type` (mlx5: e.g. `MT4129`).
    pub hca_type: Option<String>,
    /// `node_guid` as the kernel prints it (`b8ce:f603:00a1:b2c4`).
    pub node_guid: Option<String>,
    /// `node_type` without its numeric prefix ("1: CA" → "CA").
    pub node_type: Option<String>,
    /// PCI address of the backing function (`0000:17:00.0`). For software
    /// devices, the PCI function of the parent netdev, when it has one.
    pub pci_address: Option<String>,
    /// NUMA node of the backing PCI function; `None` when unknown (-1).
    pub numa_node: Option<u32>,
    /// Netdev named by rxe's `parent` file (software devices only).
    pub parent_netdev: Option<String>,
    pub ports: Vec<Port>,
}

/// Which kernel interface the hardware counters of a port came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum HwCounterPath {
    /// RDMA netlink `RDMA_NLDEV_CMD_STAT_GET`: one query per port.
    Netlink,
    /// `ports/N/hw_counters/*`, one file per counter.
    Sysfs,
    /// The port has no hardware counters (or they were not read).
    #[default]
    None,
}

impl HwCounterPath {
    pub fn as_str(self) -> &'static str {
        match self {
            HwCounterPath::Netlink => "netlink",
            HwCounterPath::Sysfs => "sysfs",
            HwCounterPath::None => "none",
        }
    }
}

/// One port of an RDMA device (`ports/<n>`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Port {
    pub number: u32,
    /// `state`, e.g. "4: ACTIVE".
    pub state: Option<PortState>,
    /// `phys_state`, e.g. "5: LinkUp".
    pub phys_state: Option<PhysState>,
    /// `rate` parsed to bytes per second ("100 Gb/sec (4X EDR)" → 12.5e9).
    pub rate_bytes_per_second: Option<u64>,
    /// `link_layer`: "InfiniBand" or "Ethernet".
    pub link_layer: Option<LinkLayer>,
    /// `lid` (hex in sysfs); 0 on Ethernet ports.
    pub lid: Option<u32>,
    /// Netdev behind the port (`gid_attrs/ndevs`, the device's `net/`
    /// folder, or rxe's `parent`).
    pub netdev: Option<String>,
    /// Every readable file of `counters/` (and `counters_ext/` on old
    /// kernels), raw as the kernel prints it: `port_rcv_data` and
    /// `port_xmit_data` are still in units of 4 octets here.
    pub counters: Vec<Counter>,
    /// Every hardware counter of the port, by kernel name (`lifespan`, a
    /// setting, excluded).
    pub hw_counters: Vec<Counter>,
    /// Where `hw_counters` came from.
    pub hw_counter_path: HwCounterPath,
    /// Populated GID slots only, in index order.
    pub gids: Vec<Gid>,
}

/// A named counter value as read from the kernel.
///
/// The name is shared: the reader interns it once per counter file, so a
/// sample (and every snapshot the history keeps) carries a reference count
/// instead of a fresh allocation per counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub name: Arc<str>,
    pub value: u64,
}

impl Counter {
    pub fn new(name: impl Into<Arc<str>>, value: u64) -> Self {
        Counter {
            name: name.into(),
            value,
        }
    }
}

/// Counter names shared by every port that has them: mlx5 ports all count
/// under the same ~50 names, and one `Arc` per name (not per port and name)
/// keeps a sample's reference counting on a few hot cache lines instead of
/// one line per counter of every port.
#[derive(Debug, Default)]
pub struct CounterNames {
    names: std::collections::HashSet<Arc<str>>,
}

impl CounterNames {
    pub fn new() -> Self {
        CounterNames::default()
    }

    /// The shared name equal to `name`, added on first sight.
    pub fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.names.get(name) {
            return Arc::clone(known);
        }
        let new: Arc<str> = Arc::from(name);
        self.names.insert(Arc::clone(&new));
        new
    }

    /// Forgets names no counter holds any more (devices that went away with
    /// counters of their own).
    pub fn prune(&mut self) {
        self.names.retain(|n| Arc::strong_count(n) > 1);
    }
}

impl Port {
    /// Value of a `counters/` entry by its kernel name.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|c| &*c.name == name)
            .map(|c| c.value)
    }
    /// Value of a hardware counter by its kernel name.
    pub fn hw_counter(&self, name: &str) -> Option<u64> {
        self.hw_counters
            .iter()
            .find(|c| &*c.name == name)
            .map(|c| c.value)
    }
    /// `port_rcv_data` × 4: the kernel counts octets divided by 4.
    pub fn data_received_bytes(&self) -> Option<u64> {
        self.counter("port_rcv_data").map(|v| v.saturating_mul(4))
    }
    /// `port_xmit_data` × 4.
    pub fn data_transmitted_bytes(&self) -> Option<u64> {
        self.counter("port_xmit_data").map(|v| v.saturating_mul(4))
    }
    /// The RoCE v2 GID NCCL picks by default and the probes use: the
    /// IPv4-mapped one first, then a global IPv6 one (never link-local,
    /// which cannot be routed).
    pub fn routable_roce_v2_gid(&self) -> Option<&Gid> {
        let v2 = || self.gids.iter().filter(|g| g.gid_type == GidType::RoceV2);
        v2().find(|g| g.family() == GidFamily::Ipv4Mapped)
            .or_else(|| v2().find(|g| g.family() == GidFamily::Ipv6Global))
    }

    /// ACTIVE and LinkUp.
    pub fn is_up(&self) -> bool {
        matches!(self.state, Some(PortState::Active))
            && matches!(self.phys_state, Some(PhysState::LinkUp))
    }
}

/// Logical port state (`enum ib_port_state` in `include/rdma/ib_verbs.h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    /// A value this reader does not know, kept with its id.
    Other(u32, String),
}

impl PortState {
    pub fn id(&self) -> u32 {
        match self {
            PortState::Nop => 0,
            PortState::Down => 1,
            PortState::Init => 2,
            PortState::Armed => 3,
            PortState::Active => 4,
            PortState::ActiveDefer => 5,
            PortState::Other(id, _) => *id,
        }
    }
    pub fn name(&self) -> &str {
        match self {
            PortState::Nop => "NOP",
            PortState::Down => "DOWN",
            PortState::Init => "INIT",
            PortState::Armed => "ARMED",
            PortState::Active => "ACTIVE",
            PortState::ActiveDefer => "ACTIVE_DEFER",
            PortState::Other(_, name) => name,
        }
    }
}

/// Physical port state (`phys_state_to_str` in `drivers/infiniband/core/sysfs.c`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PhysState {
    Sleep,
    Polling,
    Disabled,
    PortConfigurationTraining,
    LinkUp,
    LinkErrorRecovery,
    PhyTest,
    Other(u32, String),
}

impl PhysState {
    pub fn id(&self) -> u32 {
        match self {
            PhysState::Sleep => 1,
            PhysState::Polling => 2,
            PhysState::Disabled => 3,
            PhysState::PortConfigurationTraining => 4,
            PhysState::LinkUp => 5,
            PhysState::LinkErrorRecovery => 6,
            PhysState::PhyTest => 7,
            PhysState::Other(id, _) => *id,
        }
    }
    pub fn name(&self) -> &str {
        match self {
            PhysState::Sleep => "Sleep",
            PhysState::Polling => "Polling",
            PhysState::Disabled => "Disabled",
            PhysState::PortConfigurationTraining => "PortConfigurationTraining",
            PhysState::LinkUp => "LinkUp",
            PhysState::LinkErrorRecovery => "LinkErrorRecovery",
            PhysState::PhyTest => "Phy Test",
            PhysState::Other(_, name) => name,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
    Other(String),
}

impl LinkLayer {
    pub fn as_str(&self) -> &str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Other(s) => s,
        }
    }
}

/// One populated GID table slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gid {
    pub index: u32,
    pub gid: Ipv6Addr,
    /// `gid_attrs/types/N`: "IB/RoCE v1" or "RoCE v2".
    pub gid_type: GidType,
    /// `gid_attrs/ndevs/N`; absent on InfiniBand ports.
    pub netdev: Option<String>,
}

impl Gid {
    pub fn family(&self) -> GidFamily {
        GidFamily::of(&self.gid)
    }
    /// Canonical text as the kernel prints it in `gids/N`
    /// (`0000:0000:0000:0000:0000:ffff:0a00:020f`).
    pub fn kernel_text(&self) -> String {
        let s = self.gid.segments();
        format!(
            "{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}",
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidType {
    /// "IB/RoCE v1"
    IbRoceV1,
    /// "RoCE v2"
    RoceV2,
    Other(String),
}

impl GidType {
    pub fn as_str(&self) -> &str {
        match self {
            GidType::IbRoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
            GidType::Other(s) => s,
        }
    }
}

/// Address family of a GID, as NCCL's GID selection cares about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidFamily {
    /// `::ffff:a.b.c.d`
    Ipv4Mapped,
    /// `fe80::/10`
    Ipv6LinkLocal,
    /// Any other IPv6 address (global or ULA), incl. InfiniBand GIDs with a
    /// subnet prefix other than fe80.
    Ipv6Global,
}

impl GidFamily {
    pub fn of(gid: &Ipv6Addr) -> GidFamily {
        let s = gid.segments();
        if s[0..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff {
            GidFamily::Ipv4Mapped
        } else if s[0] & 0xffc0 == 0xfe80 {
            GidFamily::Ipv6LinkLocal
        } else {
            GidFamily::Ipv6Global
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            GidFamily::Ipv4Mapped => "ipv4_mapped",
            GidFamily::Ipv6LinkLocal => "ipv6_link_local",
            GidFamily::Ipv6Global => "ipv6_global",
        }
    }
}

// A file that should have been readable and was not: the type every
// reader shares.
pub use roce_host::{ReadError, ReadErrorKind};
