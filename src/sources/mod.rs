//! The sources: each reads one part of the host and hands it back as its
//! [`Part`]. They know nothing of Prometheus. The sampler calls each in
//! turn on its reader thread under a deadline, times it, records its
//! [`SourceState`] and assembles the [`Snapshot`](crate::snapshot::Snapshot)
//! from the parts; a source that fails, panics or hangs never stops the
//! others.
//!
//! The contract is explicit: a source reads only what it is handed in
//! [`Input`] (the RDMA source's part, for the sources that say
//! [`Source::needs_rdma`]) and writes only its own [`Part`]. Nothing is
//! shared between sources while they run.

use std::sync::Arc;

pub use roce_host::HostError;

use crate::snapshot::{KernelRequests, SourceState};

pub mod lldp;
pub mod load_test;
pub mod nccl;
pub mod netdev;
pub mod peer_probe;
/// Peer discovery and the peer-probe runtime (crates/fleet), under the
/// names the tests and the fuzz targets use.
pub use roce_fleet::{peer_address, peer_dns, peer_endpoints, peer_http, peer_list, peer_rails};
pub mod phys;
pub mod probe;
pub mod rdma;
pub use roce_rdma::netlink as rdma_netlink;
pub mod topology;

/// What the sampler hands a source for one sample.
#[derive(Debug, Clone, Default)]
pub struct Input {
    /// The RDMA source's part: this sample's when it returned in time,
    /// else the last one it returned (`None` before any). Given only to
    /// sources that [`Source::needs_rdma`].
    pub rdma: Option<Arc<roce_rdma::RdmaSnapshot>>,
    /// The snapshot published by the previous sample (`None` before the
    /// first): for sources that judge by what other sources read last time
    /// (the probe takes the RoCE DSCP of each port from the netdev part).
    pub previous: Option<Arc<crate::snapshot::Snapshot>>,
}

/// One source's part of a snapshot.
#[derive(Debug, Clone)]
pub enum Part {
    Rdma(roce_rdma::RdmaSnapshot),
    Netdev(roce_netdev::NetdevSnapshot),
    /// Boxed: by far the largest part.
    Topology(Box<roce_topology::TopologySnapshot>),
    Probes(roce_probe::ProbeResults),
    /// The probes between hosts (boxed: per-port statistics).
    PeerProbes(Box<peer_probe::PeerProbePart>),
    /// What NCCL jobs used, from their logs and Inspector output.
    Nccl(Box<nccl::NcclSnapshot>),
    Phys(roce_netdev::phys::PhysSnapshot),
    /// LLDP neighbours of the RDMA netdevs (boxed: per-port TLVs).
    Lldp(Box<lldp::LldpSnapshot>),
    /// The last load test's results and the responder's counts.
    LoadTest(Box<roce_model::load::LoadTestSnapshot>),
}

/// What one call of [`Source::sample`] returns.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// Whether the source as a whole worked.
    pub state: SourceState,
    /// What it read; `None` when it had nothing to hand over.
    pub part: Option<Part>,
}

impl Sampled {
    pub fn new(state: SourceState, part: Part) -> Self {
        Sampled {
            state,
            part: Some(part),
        }
    }

    /// A state and no part (disabled, or nothing read).
    pub fn bare(state: SourceState) -> Self {
        Sampled { state, part: None }
    }
}

/// Builds a sibling of a source (see [`Source::respawner`]).
pub type Respawn = Box<dyn Fn() -> Box<dyn Source> + Send + Sync>;

/// One part of the host, read once per sample, on the sampler's reader
/// thread under the source's own lock: a call may block (a firmware read
/// that stalls), the sampler then leaves the thread to it, reports it timed
/// out and does not call it again until the call has returned.
pub trait Source: Send {
    /// The `collector` label value.
    fn name(&self) -> &'static str;

    /// Whether this source reads the RDMA source's part ([`Input::rdma`]):
    /// such sources run after the RDMA source has returned or missed its
    /// deadline.
    fn needs_rdma(&self) -> bool {
        false
    }

    /// Reads the host. Problems that did not stop it (a file, a request)
    /// go into `errors`; the returned state says whether the source as a
    /// whole worked.
    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Sampled;

    /// What the last sample asked of the kernel; `None` for sources that
    /// do not count it.
    fn kernel_requests(&self) -> Option<KernelRequests> {
        None
    }

    /// The watch over this source's file calls, when it reads through a
    /// [`roce_host::stall::WatchedFs`]: the sampler then gives every call a
    /// per-item deadline ([`roce_host::stall::item_deadline`]).
    fn stall_watch(&self) -> Option<Arc<roce_host::stall::StallWatch>> {
        None
    }

    /// Makes siblings of this source over the same watch, each reading what
    /// this one reads from scratch: when a file read sticks, the sampler
    /// leaves this instance to it and goes on with a sibling, which skips
    /// the stuck file. `None`: the source keeps state a sibling could not
    /// rebuild, and a stuck call holds it until its deadline.
    fn respawner(&self) -> Option<Respawn> {
        None
    }

    /// Why the source is off for as long as it lives (its collector switch,
    /// its configuration, paths that are not the running kernel's), or
    /// `None` when it reads. The sampler starts no thread for a source that
    /// is off and calls it never: it makes no system call.
    fn disabled(&self) -> Option<String> {
        None
    }
}

/// The collectors that `--collector.<name>` / `--no-collector.<name>`
/// start and stop: each is a source (QoS is the netdev source's QoS part).
/// A switched-off collector reads nothing, makes no system call and is
/// reported `disabled` in `roce_collector_state`. Qos, phys and topology
/// are also metric groups (`metrics:`): the switch turns off the group of
/// the same name with the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    Rdma,
    Netdev,
    Qos,
    Phys,
    Topology,
    Probe,
    PeerProbe,
    Nccl,
    Lldp,
}

impl Switch {
    pub const ALL: [Switch; 9] = [
        Switch::Rdma,
        Switch::Netdev,
        Switch::Qos,
        Switch::Phys,
        Switch::Topology,
        Switch::Probe,
        Switch::PeerProbe,
        Switch::Nccl,
        Switch::Lldp,
    ];

    /// The `collector` label value and the flag's suffix.
    pub fn name(self) -> &'static str {
        match self {
            Switch::Rdma => "rdma",
            Switch::Netdev => "netdev",
            Switch::Qos => "qos",
            Switch::Phys => "phys",
            Switch::Topology => "topology",
            Switch::Probe => "probe",
            Switch::PeerProbe => "peer_probe",
            Switch::Nccl => "nccl",
            Switch::Lldp => "lldp",
        }
    }

    /// `--collector.<name>` without the dashes (clap wants a `'static`
    /// name; a test checks it against [`Switch::name`]).
    pub fn on_flag(self) -> &'static str {
        match self {
            Switch::Rdma => "collector.rdma",
            Switch::Netdev => "collector.netdev",
            Switch::Qos => "collector.qos",
            Switch::Phys => "collector.phys",
            Switch::Topology => "collector.topology",
            Switch::Probe => "collector.probe",
            Switch::PeerProbe => "collector.peer_probe",
            Switch::Nccl => "collector.nccl",
            Switch::Lldp => "collector.lldp",
        }
    }

    /// `--no-collector.<name>` without the dashes.
    pub fn off_flag(self) -> &'static str {
        match self {
            Switch::Rdma => "no-collector.rdma",
            Switch::Netdev => "no-collector.netdev",
            Switch::Qos => "no-collector.qos",
            Switch::Phys => "no-collector.phys",
            Switch::Topology => "no-collector.topology",
            Switch::Probe => "no-collector.probe",
            Switch::PeerProbe => "no-collector.peer_probe",
            Switch::Nccl => "no-collector.nccl",
            Switch::Lldp => "no-collector.lldp",
        }
    }

    /// The configuration key the switch stands for (the flag overrides it).
    pub fn config_key(self) -> &'static str {
        match self {
            Switch::Rdma => "collectors.rdma",
            Switch::Netdev => "collectors.netdev",
            Switch::Qos => "collectors.qos",
            Switch::Phys => "collectors.phys",
            Switch::Topology => "collectors.topology",
            Switch::Probe => "probes.enabled",
            Switch::PeerProbe => "peer_probes.enabled",
            Switch::Nccl => "nccl.enabled",
            Switch::Lldp => "lldp.mode",
        }
    }

    /// The metric group of the same name, turned off with the source.
    pub fn group(self) -> Option<crate::exposition::groups::Group> {
        use crate::exposition::groups::Group;
        match self {
            Switch::Qos => Some(Group::Qos),
            Switch::Phys => Some(Group::Phys),
            Switch::Topology => Some(Group::Topology),
            _ => None,
        }
    }

    pub fn help(self) -> &'static str {
        match self {
            Switch::Rdma => "the RDMA source: devices, ports, counters, GIDs (the netdev, phys, topology, probe and LLDP sources read the netdevs and devices it finds)",
            Switch::Netdev => "the netdev source: MTU, link state, carrier counts, ECN, ethtool statistics, pause statistics",
            Switch::Qos => "the netdev source's QoS reads: DCB (PFC, APP, ETS, buffers, DCBX), DCQCN, CNP marking, rdma_cm ToS; with the qos metric group",
            Switch::Phys => "the physical-layer source: FEC, modules, PCIe AER, devlink health; with the phys metric group",
            Switch::Topology => "the topology source: GPUs, GPU-NIC PCIe paths, links, ACS, GPUDirect; with the topology metric group",
            Switch::Probe => "active verbs probes (probes.enabled)",
            Switch::PeerProbe => "probes between hosts (peer_probes.enabled; needs peers configured)",
            Switch::Nccl => "what NCCL jobs used, from their logs (nccl.enabled; needs nccl.log_dir or nccl.inspector_dir)",
            Switch::Lldp => "LLDP neighbours (lldp.mode; on: auto unless a mode is set)",
        }
    }

    /// Whether the configuration has the collector on.
    pub fn is_on(self, config: &crate::config::Config) -> bool {
        use crate::config::Toggle;
        match self {
            Switch::Rdma => config.collectors.rdma,
            Switch::Netdev => config.collectors.netdev,
            Switch::Qos => config.collectors.qos,
            Switch::Phys => config.collectors.phys,
            Switch::Topology => config.collectors.topology,
            Switch::Probe => config.probes.enabled != Toggle::Off,
            Switch::PeerProbe => config.peer_probes.enabled,
            Switch::Nccl => config.nccl.enabled,
            Switch::Lldp => config.lldp.mode != lldp::LldpMode::Off,
        }
    }

    /// Turns the collector on or off in the configuration, and with it the
    /// metric group of the same name.
    pub fn set(self, config: &mut crate::config::Config, on: bool) {
        use crate::config::Toggle;
        match self {
            Switch::Rdma => config.collectors.rdma = on,
            Switch::Netdev => config.collectors.netdev = on,
            Switch::Qos => config.collectors.qos = on,
            Switch::Phys => config.collectors.phys = on,
            Switch::Topology => config.collectors.topology = on,
            Switch::Probe => config.probes.enabled = if on { Toggle::On } else { Toggle::Off },
            Switch::PeerProbe => config.peer_probes.enabled = on,
            Switch::Nccl => config.nccl.enabled = on,
            Switch::Lldp => {
                if !on {
                    config.lldp.mode = lldp::LldpMode::Off;
                } else if config.lldp.mode == lldp::LldpMode::Off {
                    config.lldp.mode = lldp::LldpMode::Auto;
                }
            }
        }
        if let Some(group) = self.group() {
            config.metrics.set(group, on);
        }
    }
}

/// A source whose collector is switched off: read never (the sampler
/// starts no thread for it).
pub struct Off {
    pub name: &'static str,
    pub why: String,
}

impl Source for Off {
    fn name(&self) -> &'static str {
        self.name
    }

    fn sample(&mut self, _input: &Input, _errors: &mut Vec<HostError>) -> Sampled {
        Sampled::bare(SourceState::Disabled(self.why.clone()))
    }

    fn disabled(&self) -> Option<String> {
        Some(self.why.clone())
    }
}

fn switched_off(switch: Switch) -> Box<dyn Source> {
    Box::new(Off {
        name: switch.name(),
        why: format!("{} is off", switch.config_key()),
    })
}

/// Every source, in the order they are listed (the RDMA source first: the
/// others read which netdevs and devices it found).
/// A collector switched off becomes [`Off`]; the QoS switch is listed
/// (after the netdev source, whose part it is) only when off.
pub fn all(config: &crate::config::Config, paths: &crate::host::HostPaths) -> Vec<Box<dyn Source>> {
    with_responder(config, paths, None)
}

/// [`all`], with the server's load-test responder counted by the
/// load-test source (listed only when there are results to read or a
/// responder to count).
pub fn with_responder(
    config: &crate::config::Config,
    paths: &crate::host::HostPaths,
    responder: Option<load_test::ResponderHandle>,
) -> Vec<Box<dyn Source>> {
    let on = |s: Switch| s.is_on(config);
    let pick = |s: Switch, make: &dyn Fn() -> Box<dyn Source>| {
        if on(s) {
            make()
        } else {
            switched_off(s)
        }
    };
    let mut out = vec![
        pick(Switch::Rdma, &|| {
            Box::new(rdma::RdmaSource::new(config, paths))
        }),
        pick(Switch::Netdev, &|| {
            Box::new(netdev::NetdevSource::new(config, paths))
        }),
    ];
    if !on(Switch::Qos) {
        out.push(switched_off(Switch::Qos));
    }
    out.extend([
        pick(Switch::Topology, &|| {
            Box::new(topology::TopologySource::new(config, paths))
        }),
        Box::new(probe::ProbeSource::new(config, paths)) as Box<dyn Source>,
        Box::new(peer_probe::PeerProbeSource::new(config, paths)),
        Box::new(nccl::NcclSource::new(config)),
        pick(Switch::Phys, &|| {
            Box::new(phys::PhysSource::new(config, paths))
        }),
        Box::new(lldp::LldpSource::new(config, paths)),
    ]);
    if config.load_test.results_file.is_some() || responder.is_some() {
        out.push(Box::new(load_test::LoadTestSource::new(config, responder)));
    }
    out
}
