//! The peer-probe source (`peer_probes:`): chooses the local ports (every
//! active port, with the probe's GID index choice and the port's RoCE
//! traffic class, as the loopback probe source does), starts the peer-probe
//! runtime (`roce_fleet::runner`: its threads, discovery and scheduling),
//! and copies the runtime's latest results into the snapshot, whose
//! endpoints the `/peer-probe/endpoints` route serves. Dropping the source
//! stops and joins the runtime's threads.

pub use roce_fleet::runner::*;
use std::sync::Arc;

use roce_probe::peer::{PeerResults, PeerSettings};
use roce_probe::ProbeState;

use super::probe::TargetChooser;
use super::{HostError, Input, Part, Sampled, Source};
use crate::config::{Config, PeerProbeConfig};
use crate::host::HostPaths;
use crate::snapshot::{Snapshot, SourceState};
use roce_fleet::peer_endpoints::Admission;
use roce_fleet::peer_list::PeerList;
use roce_fleet::FleetError;

#[cfg(feature = "probes")]
fn host_subnet(gid: &std::net::Ipv6Addr) -> Option<roce_fleet::peer_address::PortSubnet> {
    use roce_fleet::peer_address::{gid_address, PortSubnet};
    let addr = gid_address(gid);
    let len = roce_probe::peer_ibverbs::ip_prefix_len(addr)?;
    Some(PortSubnet::of(addr, len, true))
}

/// Why the peer prober is not running.
#[derive(Debug, thiserror::Error)]
pub enum PeerProbeOff {
    #[error("peer probes are off (peer_probes.enabled)")]
    Disabled,
    #[error("peer probes need this host's /sys (--path.sysfs is another)")]
    NotLive,
    /// A setting that the configuration's check let through and the
    /// runtime cannot use (a CA or secret file unreadable at start).
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error("cannot start the peer-probe thread: {0}")]
    Thread(std::io::Error),
    #[error("built without verbs probes (feature `probes`)")]
    NoVerbs,
}

/// The source of the peer prober's results.
pub struct PeerProbeSource {
    runner: Result<PeerRunner, PeerProbeOff>,
    chooser: TargetChooser,
    nccl_ib_tc: Option<u8>,
    targets: Vec<LocalTarget>,
}

impl PeerProbeSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let runner = if !config.peer_probes.enabled {
            Err(PeerProbeOff::Disabled)
        } else if !paths.is_live() {
            Err(PeerProbeOff::NotLive)
        } else {
            spawn(&config.peer_probes)
        };
        PeerProbeSource {
            runner,
            chooser: TargetChooser::new(config.probes.gid_index),
            nccl_ib_tc: config.expect.nccl_ib_tc,
            targets: Vec::new(),
        }
    }
}

/// The settings of the prober from `peer_probes:`.
pub fn probe_settings(c: &PeerProbeConfig) -> PeerSettings {
    PeerSettings {
        packets_per_second: f64::from(c.packets_per_second),
        sample: c.sample,
        timeout: c.timeout,
        all_to_all: c.all_to_all,
        traffic_class: 0,
        flow_labels: c.flow_labels,
    }
}

/// The admission rule of `peer_probes:` (rails checked by the
/// configuration's validation already).
pub fn admission(c: &PeerProbeConfig) -> Result<Admission, FleetError> {
    Admission::from_config(c)
}

/// Where the endpoints come from, from `peer_probes:`.
pub fn endpoint_source(c: &PeerProbeConfig) -> Result<EndpointSource, FleetError> {
    if let Some(p) = &c.prometheus {
        let q = super::peer_endpoints::PrometheusQuery::new(p)?;
        return Ok(EndpointSource::Prometheus(Arc::new(q)));
    }
    let fetcher = super::peer_endpoints::DocumentFetcher::new(c)?;
    let tls = fetcher.default_tls();
    Ok(EndpointSource::Documents {
        list: Box::new(PeerList::new(c, tls)),
        fetcher: Arc::new(fetcher),
    })
}

fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(feature = "probes")]
fn spawn(c: &PeerProbeConfig) -> Result<PeerRunner, PeerProbeOff> {
    PeerRunner::spawn(
        roce_probe::peer_ibverbs::IbPeerVerbs::new(),
        endpoint_source(c)?,
        RunnerSettings {
            node: node_name(),
            probe: probe_settings(c),
            refresh: c.refresh,
            fetch_timeout: c.fetch_timeout,
            resolve: system_resolve,
            pace: FetchPace::default(),
            subnet_of: host_subnet,
            admission: admission(c)?,
        },
    )
    .map_err(PeerProbeOff::Thread)
}

#[cfg(not(feature = "probes"))]
fn spawn(_c: &PeerProbeConfig) -> Result<PeerRunner, PeerProbeOff> {
    let _ = node_name;
    Err(PeerProbeOff::NoVerbs)
}

/// The local ports to probe from: the loopback probe's choice (every
/// active port, the configured or `auto` GID index) with each port's
/// RoCE traffic class, its device's index in the sorted device list and
/// its netdev.
pub fn local_targets(
    chooser: &mut TargetChooser,
    rdma: &roce_rdma::RdmaSnapshot,
    previous: &Snapshot,
    nccl_ib_tc: Option<u8>,
) -> Vec<LocalTarget> {
    let mut names: Vec<&str> = rdma.devices.iter().map(|d| d.name.as_str()).collect();
    names.sort_unstable();
    chooser
        .choose(rdma)
        .into_iter()
        .map(|t| LocalTarget {
            traffic_class: crate::rules::fabric::port_traffic_class(
                previous,
                &t.device,
                u32::from(t.port),
                nccl_ib_tc,
            ),
            device_index: names
                .iter()
                .position(|n| *n == t.device)
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(0),
            netdev: rdma
                .devices
                .iter()
                .find(|d| d.name == t.device)
                .and_then(|d| d.ports.iter().find(|p| p.number == u32::from(t.port)))
                .and_then(|p| p.netdev.clone()),
            device: t.device,
            port: t.port,
            gid_index: t.gid_index,
        })
        .collect()
}

/// The peer-probe source's part of a snapshot.
#[derive(Debug, Clone)]
pub struct PeerProbePart {
    pub results: PeerResults,
    pub discovery: PeerDiscovery,
}

impl Source for PeerProbeSource {
    fn name(&self) -> &'static str {
        "peer_probe"
    }

    fn needs_rdma(&self) -> bool {
        true
    }

    fn disabled(&self) -> Option<String> {
        self.runner.as_ref().err().map(ToString::to_string)
    }

    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        let runner = match &self.runner {
            Ok(r) => r,
            Err(why) => return Sampled::bare(SourceState::Disabled(why.to_string())),
        };
        if let Some(rdma) = &input.rdma {
            let empty = Snapshot::default();
            let last = input.previous.as_deref().unwrap_or(&empty);
            self.targets = local_targets(&mut self.chooser, rdma, last, self.nccl_ib_tc);
            runner.set_targets(self.targets.clone());
        }
        // reported every sample while they last; the sampler logs changes
        for (port, why) in runner.failures() {
            errors.push(HostError::request(
                format!("peer-probe responder on {port}"),
                &why,
            ));
        }
        errors.extend(runner.list_errors());
        let (results, discovery) = runner.results();
        let state = match &results.state {
            ProbeState::Unavailable(why) => SourceState::Unavailable(why.clone()),
            _ if self.targets.is_empty() => {
                SourceState::Unavailable("no active RDMA port to probe from".into())
            }
            _ => SourceState::Ok,
        };
        Sampled::new(
            state,
            Part::PeerProbes(Box::new(PeerProbePart { results, discovery })),
        )
    }
}
