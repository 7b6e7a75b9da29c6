//! Snapshots for the rule and exposition tests, built so that a test reads
//! like the finding it checks:
//!
//! ```
//! use roce_testkit::snapshot::{NetdevBuilder, SnapshotBuilder};
//!
//! let s = SnapshotBuilder::new()
//!     .rdma_ok()
//!     .port("mlx5_0", 1)
//!     .rate_gbps(400)
//!     .counter("link_downed", 3)
//!     .netdev(NetdevBuilder::mlx5("ens1np0", "mlx5_0", 1).pfc(&[3]).ecn(&[3]).build())
//!     .build();
//! assert_eq!(s.rdma.unwrap().devices[0].ports[0].netdev.as_deref(), Some("ens1np0"));
//! ```
//!
//! The values are a ConnectX (mlx5) RoCE host's: `mlx5_N` devices bound to
//! `mlx5_core`, port 1 behind `ens{N+1}np0`, priority 3 lossless, samples
//! 10 s apart from a fixed wall-clock time.

use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use roce_host::Priorities;
use roce_model::lldp::LldpSnapshot;
use roce_model::nccl::NcclSnapshot;
use roce_model::snapshot::{Snapshot, SourceState, SourceStatus};
use roce_netdev::dcb::{
    DcbApp, DcbPeer, PeerStandard, DCB_CAP_DCBX_LLD_MANAGED, DCB_CAP_DCBX_VER_IEEE,
    IEEE_8021QAZ_APP_SEL_DSCP,
};
use roce_netdev::phys::PhysSnapshot;
use roce_netdev::qos::RoceQos;
use roce_netdev::{
    DcbConfig, DcbOutcome, EcnConfig, MappedStat, Meaning, Netdev, NetdevSnapshot, RdmaPortRef,
    StatValue,
};
use roce_rdma::{
    Counter, Device, Gid, GidType, LinkLayer, PhysState, Port, PortState, RdmaSnapshot,
};
use roce_topology::TopologySnapshot;

/// The wall-clock time of the first sample, in seconds since the epoch
/// (2027-01-15).
pub const FIRST_SAMPLE_SECS: u64 = 1_800_000_000;

/// The time between two samples of a history.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// The wall-clock time of sample `i` (from 0) of a history.
pub fn at(i: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(FIRST_SAMPLE_SECS) + INTERVAL * i as u32
}

/// How source `name` fared: `state`, no read error, no time spent.
pub fn source(name: &'static str, state: SourceState) -> SourceStatus {
    SourceStatus {
        name,
        state,
        duration: Duration::ZERO,
        errors: vec![],
        errors_total: 0,
        errors_by_kind: Default::default(),
        kernel_requests: None,
    }
}

/// The set of `priorities`, as PFC enable is read.
pub fn priorities(priorities: &[u8]) -> Priorities {
    priorities.iter().copied().collect()
}

/// A DSCP entry of the DCB APP table: packets with `dscp` go to `priority`.
pub fn dscp_app(dscp: u16, priority: u8) -> DcbApp {
    DcbApp {
        selector: IEEE_8021QAZ_APP_SEL_DSCP,
        priority,
        protocol: dscp,
    }
}

/// PFC on `on` of the 8 priorities, DCBX in the NIC's firmware (IEEE), and
/// a switch port that advertises the same PFC: a lossless setup as
/// ConnectX ships it.
pub fn lossless(on: &[u8]) -> DcbConfig {
    DcbConfig {
        pfc_cap: Some(8),
        pfc_enabled: Some(priorities(on)),
        dcbx: Some(DCB_CAP_DCBX_LLD_MANAGED | DCB_CAP_DCBX_VER_IEEE),
        peer: DcbPeer {
            standard: Some(PeerStandard::Ieee),
            pfc_enabled: Some(priorities(on)),
            ..DcbPeer::default()
        },
        ..DcbConfig::default()
    }
}

/// The netdev behind port 1 of `device` as mlx5 names it: `ens{N+1}np0`
/// for `mlx5_N`, `ens1np0` for a name without an index.
pub fn netdev_of(device: &str) -> String {
    let index = device
        .rsplit('_')
        .next()
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    format!("ens{}np0", index + 1)
}

/// GID slot `index` of a port behind `ens1np0`.
pub fn gid(index: u32, text: &str, gid_type: GidType) -> Gid {
    Gid {
        index,
        gid: text.parse::<Ipv6Addr>().expect("a GID in IPv6 notation"),
        gid_type,
        netdev: Some("ens1np0".into()),
    }
}

/// The four GIDs a RoCE port with IPv4 address 10.0.0.1 has: the link-local
/// and the IPv4-mapped address, each as RoCE v1 and v2.
pub fn roce_gids() -> Vec<Gid> {
    vec![
        gid(0, "fe80::1", GidType::IbRoceV1),
        gid(1, "fe80::1", GidType::RoceV2),
        gid(2, "::ffff:10.0.0.1", GidType::IbRoceV1),
        gid(3, "::ffff:10.0.0.1", GidType::RoceV2),
    ]
}

/// Port `number` ACTIVE and LinkUp on Ethernet behind `ens1np0`; rate, LID,
/// GIDs and counters unset.
pub fn active_port(number: u32) -> Port {
    Port {
        number,
        state: Some(PortState::Active),
        phys_state: Some(PhysState::LinkUp),
        link_layer: Some(LinkLayer::Ethernet),
        netdev: Some("ens1np0".into()),
        ..Port::default()
    }
}

/// A healthy 400 GbE RoCE port `number` behind `ens1np0`: ACTIVE, LinkUp,
/// LID 0 and the four [`roce_gids`].
pub fn roce_port(number: u32) -> Port {
    Port {
        rate_bytes_per_second: Some(gbps(400)),
        lid: Some(0),
        gids: roce_gids(),
        ..active_port(number)
    }
}

/// ConnectX device `name` (`mlx5_core`) with `ports`.
pub fn mlx5(name: &str, ports: Vec<Port>) -> Device {
    Device {
        name: name.into(),
        driver: Some("mlx5_core".into()),
        ports,
        ..Device::default()
    }
}

/// A link rate in Gb/s as the port's bytes per second.
fn gbps(rate: u64) -> u64 {
    rate * 1_000_000_000 / 8
}

/// One snapshot, built part by part; the port methods (`rate_gbps`,
/// `counter`, ...) change the port added last.
#[derive(Debug, Clone)]
pub struct SnapshotBuilder {
    snapshot: Snapshot,
}

impl Default for SnapshotBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotBuilder {
    /// The first sample of a history (sequence 1 at [`at`]`(0)`), with no
    /// source and no part.
    pub fn new() -> Self {
        SnapshotBuilder {
            snapshot: Snapshot {
                sequence: 1,
                taken_at: Some(at(0)),
                ..Snapshot::default()
            },
        }
    }

    /// Sample `i` (from 0) of a history: sequence `i + 1`, taken at
    /// [`at`]`(i)`.
    pub fn sample(mut self, i: u64) -> Self {
        self.snapshot.sequence = i + 1;
        self.snapshot.taken_at = Some(at(i));
        self
    }

    /// The wall-clock time the sample started, `None`: unknown.
    pub fn taken_at(mut self, t: Option<SystemTime>) -> Self {
        self.snapshot.taken_at = t;
        self
    }

    /// Source `name` ran with `state`.
    pub fn source(mut self, name: &'static str, state: SourceState) -> Self {
        self.snapshot.sources.push(source(name, state));
        self
    }

    /// The RDMA source ran and read everything.
    pub fn rdma_ok(self) -> Self {
        self.source("rdma", SourceState::Ok)
    }

    /// The RDMA part, whole (an empty one: the source found no device).
    pub fn rdma(mut self, rdma: RdmaSnapshot) -> Self {
        self.snapshot.rdma = Some(rdma);
        self
    }

    /// Adds `device` to the RDMA part.
    pub fn device(mut self, device: Device) -> Self {
        self.rdma_part().devices.push(device);
        self
    }

    /// Adds port `number` of ConnectX `device` (added when new): ACTIVE,
    /// LinkUp, Ethernet, behind [`netdev_of`] the device.
    pub fn port(self, device: &str, number: u32) -> Self {
        let port = Port {
            netdev: Some(netdev_of(device)),
            ..active_port(number)
        };
        self.with_port(device, port)
    }

    /// Adds `port` to ConnectX `device` (added when new).
    pub fn with_port(mut self, device: &str, port: Port) -> Self {
        let rdma = self.rdma_part();
        match rdma.devices.iter_mut().find(|d| d.name == device) {
            Some(d) => d.ports.push(port),
            None => rdma.devices.push(mlx5(device, vec![port])),
        }
        self
    }

    /// The port's link rate in Gb/s (`rate`).
    pub fn rate_gbps(self, rate: u64) -> Self {
        self.edit_port(|p| p.rate_bytes_per_second = Some(gbps(rate)))
    }

    /// The port's `state`.
    pub fn state(self, state: PortState) -> Self {
        self.edit_port(|p| p.state = Some(state))
    }

    /// The netdev behind the port.
    pub fn port_netdev(self, name: &str) -> Self {
        self.edit_port(|p| p.netdev = Some(name.into()))
    }

    /// A file of the port's `counters/`.
    pub fn counter(self, name: &str, value: u64) -> Self {
        self.edit_port(|p| p.counters.push(Counter::new(name, value)))
    }

    /// A file of the port's `hw_counters/`.
    pub fn hw_counter(self, name: &str, value: u64) -> Self {
        self.edit_port(|p| p.hw_counters.push(Counter::new(name, value)))
    }

    /// Any other change to the port added last.
    pub fn edit_port(mut self, edit: impl FnOnce(&mut Port)) -> Self {
        let port = self
            .snapshot
            .rdma
            .as_mut()
            .and_then(|r| r.devices.last_mut())
            .and_then(|d| d.ports.last_mut())
            .expect("a port added before its attributes");
        edit(port);
        self
    }

    /// Adds `netdev` to the netdev part.
    pub fn netdev(mut self, netdev: Netdev) -> Self {
        self.snapshot
            .netdev
            .get_or_insert_with(NetdevSnapshot::default)
            .netdevs
            .push(netdev);
        self
    }

    /// The GPU-NIC topology part.
    pub fn topology(mut self, topology: TopologySnapshot) -> Self {
        self.snapshot.topology = Some(topology);
        self
    }

    /// The physical-layer part.
    pub fn phys(mut self, phys: PhysSnapshot) -> Self {
        self.snapshot.phys = Some(phys);
        self
    }

    /// The NCCL part.
    pub fn nccl(mut self, nccl: NcclSnapshot) -> Self {
        self.snapshot.nccl = Some(nccl);
        self
    }

    /// The LLDP part.
    pub fn lldp(mut self, lldp: LldpSnapshot) -> Self {
        self.snapshot.lldp = Some(lldp);
        self
    }

    /// Any other change to the snapshot.
    pub fn edit(mut self, edit: impl FnOnce(&mut Snapshot)) -> Self {
        edit(&mut self.snapshot);
        self
    }

    pub fn build(self) -> Snapshot {
        self.snapshot
    }

    /// The snapshot as the sampler publishes it.
    pub fn arc(self) -> Arc<Snapshot> {
        Arc::new(self.snapshot)
    }

    fn rdma_part(&mut self) -> &mut RdmaSnapshot {
        self.snapshot.rdma.get_or_insert_with(RdmaSnapshot::default)
    }
}

/// A history of samples 10 s apart: sample `i` of `samples` gets sequence
/// `i + 1` and time [`at`]`(i)`.
pub fn history(samples: impl IntoIterator<Item = SnapshotBuilder>) -> Vec<Arc<Snapshot>> {
    samples
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.sample(i as u64).arc())
        .collect()
}

/// One netdev, built setting by setting.
#[derive(Debug, Clone)]
pub struct NetdevBuilder {
    netdev: Netdev,
}

impl NetdevBuilder {
    /// Netdev `name` with nothing read.
    pub fn new(name: &str) -> Self {
        NetdevBuilder {
            netdev: Netdev {
                name: name.into(),
                ..Netdev::default()
            },
        }
    }

    /// The ConnectX netdev `name` behind `port` of `device`: `mlx5_core`, MTU
    /// 9000; DCB, ECN and statistics unset.
    pub fn mlx5(name: &str, device: &str, port: u32) -> Self {
        Self::new(name)
            .rdma(device, port)
            .mtu(9000)
            .driver("mlx5_core")
    }

    /// The RDMA port it backs.
    pub fn rdma(mut self, device: &str, port: u32) -> Self {
        self.netdev.rdma = Some(RdmaPortRef {
            device: device.into(),
            port,
        });
        self
    }

    pub fn mtu(mut self, mtu: u64) -> Self {
        self.netdev.mtu = Some(mtu);
        self
    }

    /// `operstate` "up".
    pub fn up(mut self) -> Self {
        self.netdev.operstate = Some("up".into());
        self
    }

    pub fn driver(mut self, driver: &str) -> Self {
        self.netdev.driver = Some(driver.into());
        self
    }

    /// mlx5's ECN switches: on for `priorities` in both roles (notification
    /// point and reaction point), off for the other of the eight.
    pub fn ecn(mut self, priorities: &[u8]) -> Self {
        let enabled: Vec<(u8, bool)> = (0..8).map(|p| (p, priorities.contains(&p))).collect();
        self.netdev.ecn = Some(EcnConfig {
            np: enabled.clone(),
            rp: enabled,
        });
        self
    }

    /// PFC on `priorities` of the 8 the port supports.
    pub fn pfc(self, on: &[u8]) -> Self {
        self.edit_dcb(|c| {
            c.pfc_cap = Some(8);
            c.pfc_enabled = Some(priorities(on));
        })
    }

    /// DCBX in the NIC's firmware (IEEE) with a switch port that advertises
    /// PFC on `peer_pfc`.
    pub fn firmware_dcbx(self, peer_pfc: &[u8]) -> Self {
        self.edit_dcb(|c| {
            c.dcbx = Some(DCB_CAP_DCBX_LLD_MANAGED | DCB_CAP_DCBX_VER_IEEE);
            c.peer = DcbPeer {
                standard: Some(PeerStandard::Ieee),
                pfc_enabled: Some(priorities(peer_pfc)),
                ..DcbPeer::default()
            };
        })
    }

    /// DSCP trust (the trust table lists DSCP only).
    pub fn trust_dscp(self) -> Self {
        self.edit_dcb(|c| c.trust_order = Some(vec![IEEE_8021QAZ_APP_SEL_DSCP]))
    }

    /// An APP table entry mapping `dscp` to `priority`.
    pub fn dscp(self, dscp: u16, priority: u8) -> Self {
        self.edit_dcb(|c| c.apps.push(dscp_app(dscp, priority)))
    }

    /// The DCBX mode bits (`DCB_ATTR_DCBX`).
    pub fn dcbx(self, bits: u8) -> Self {
        self.edit_dcb(|c| c.dcbx = Some(bits))
    }

    /// What the host marks RoCE packets and CNPs with.
    pub fn qos(mut self, qos: RoceQos) -> Self {
        self.netdev.qos = qos;
        self
    }

    /// The DCB configuration, whole.
    pub fn dcb(mut self, dcb: DcbConfig) -> Self {
        self.netdev.dcb = DcbOutcome::Ok(dcb);
        self
    }

    /// An ethtool statistic with a meaning, as a count.
    pub fn stat(self, meaning: Meaning, value: u64) -> Self {
        self.stat_value(meaning, StatValue::Count(value))
    }

    /// An ethtool statistic with a meaning.
    pub fn stat_value(mut self, meaning: Meaning, value: StatValue) -> Self {
        self.netdev.stats.push(MappedStat { meaning, value });
        self
    }

    /// Any other change to the netdev.
    pub fn edit(mut self, edit: impl FnOnce(&mut Netdev)) -> Self {
        edit(&mut self.netdev);
        self
    }

    pub fn build(self) -> Netdev {
        self.netdev
    }

    /// Any other change to the DCB configuration (a default one when none
    /// was read).
    pub fn edit_dcb(mut self, edit: impl FnOnce(&mut DcbConfig)) -> Self {
        if !matches!(self.netdev.dcb, DcbOutcome::Ok(_)) {
            self.netdev.dcb = DcbOutcome::Ok(DcbConfig::default());
        }
        if let DcbOutcome::Ok(c) = &mut self.netdev.dcb {
            edit(c);
        }
        self
    }
}
