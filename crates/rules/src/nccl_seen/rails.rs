//! The node's side of a job: the GPUs of this node its logs name (NCCL's
//! communicator lines give each rank's GPU by PCI address, nccl-tests'
//! header each rank's GPU by domain:bus:device), and the rails of those
//! GPUs (their nearest RDMA NICs) with their line rates: what the node
//! offers the job, whatever subset the job happened to use.

use roce_nccl::aggregate::NcclSummary;
use roce_rdma::{LinkLayer, PortState};

use crate::ports::ports;
use crate::snapshot::Snapshot;

/// One RDMA port of a rail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailPort {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// Bytes per second, from sysfs `rate`.
    pub rate: Option<u64>,
    pub active: bool,
    pub ethernet: bool,
}

impl RailPort {
    /// `mlx5_0 port 1 (ens1np0)`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} port {}", self.device, self.port);
        if let Some(n) = &self.netdev {
            s.push_str(&format!(" ({n})"));
        }
        s
    }
}

/// The rails of the job's GPUs on this node.
#[derive(Debug, Clone, PartialEq)]
pub struct Rails {
    /// The job's GPUs on this node, by index (empty without topology).
    pub gpus: Vec<usize>,
    /// How the GPUs were found.
    pub gpus_basis: &'static str,
    /// Their nearest NICs' ports, in device order.
    pub ports: Vec<RailPort>,
    /// How the ports were chosen.
    pub basis: &'static str,
    /// The ports are the GPUs' nearest NICs (not every ACTIVE port).
    pub from_topology: bool,
}

impl Rails {
    /// The sum of the rails' line rates (bytes per second), over the
    /// ports whose rate is known.
    pub fn total_rate(&self) -> u64 {
        self.ports.iter().filter_map(|p| p.rate).sum()
    }

    /// The slowest rail's rate.
    pub fn min_rate(&self) -> Option<u64> {
        self.ports.iter().filter_map(|p| p.rate).min()
    }

    pub fn devices(&self) -> Vec<&str> {
        let mut d: Vec<&str> = self.ports.iter().map(|p| p.device.as_str()).collect();
        d.dedup();
        d
    }
}

/// Whether the topology GPU at `address` (`0000:03:00.0`) is one the logs
/// name: NCCL's bus id, or nccl-tests' `0000:03:00` (`03` before v2.14).
fn named(address: &str, sum: &NcclSummary) -> bool {
    let short = address.get(..10).unwrap_or(address);
    let bus = address.get(5..7).unwrap_or("");
    sum.job.gpus.iter().any(|g| g == address)
        || sum.job.tests.iter().any(|t| {
            t.run
                .devices
                .iter()
                .any(|d| d.pci == short || (d.pci.len() == 2 && d.pci == bus))
        })
}

/// The job's GPUs on this node and the rails behind them; `None` without
/// RDMA ports.
pub fn rails(s: &Snapshot, sum: &NcclSummary) -> Option<Rails> {
    let topo = s.topology.as_ref().filter(|t| !t.gpus.is_empty());
    let (gpus, gpus_basis) = match topo {
        Some(t) => {
            let named: Vec<usize> = t
                .gpus
                .iter()
                .filter(|g| named(&g.address.to_string(), sum))
                .map(|g| g.index)
                .collect();
            if named.is_empty() {
                (
                    t.gpus.iter().map(|g| g.index).collect(),
                    "every GPU of this node (the logs name none of its GPUs)",
                )
            } else {
                (named, "the job's GPUs on this node (NCCL's communicator lines, nccl-tests' rank list)")
            }
        }
        None => (Vec::new(), "no GPU read on this node"),
    };
    let mut nics: Vec<String> = Vec::new();
    if let Some(t) = topo {
        for g in &gpus {
            for p in t.nearest_nics(*g) {
                if !nics.contains(&p.nic) {
                    nics.push(p.nic.clone());
                }
            }
        }
    }
    nics.sort();
    let port_of = |d: &roce_rdma::Device, p: &roce_rdma::Port| RailPort {
        device: d.name.clone(),
        port: p.number,
        netdev: p.netdev.clone(),
        rate: p.rate_bytes_per_second,
        active: p.state == Some(PortState::Active),
        ethernet: matches!(p.link_layer, Some(LinkLayer::Ethernet)),
    };
    let (ports, basis): (Vec<RailPort>, &'static str) = if nics.is_empty() {
        (
            ports(s)
                .filter(|(_, p)| p.state == Some(PortState::Active))
                .map(|(d, p)| port_of(d, p))
                .collect(),
            "every ACTIVE RDMA port (no GPU-NIC topology)",
        )
    } else {
        (
            ports(s)
                .filter(|(d, _)| nics.contains(&d.name))
                .map(|(d, p)| port_of(d, p))
                .collect(),
            "the NICs nearest the job's GPUs",
        )
    };
    if ports.is_empty() {
        return None;
    }
    Some(Rails {
        gpus,
        gpus_basis,
        ports,
        basis,
        from_topology: !nics.is_empty(),
    })
}
