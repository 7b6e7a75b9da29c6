//! What the placed functions say together: the path class and bridges of
//! every GPU-NIC pair, the PCIe links with what both ends support, and the
//! ACS of the bridges between each GPU and its nearest NICs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use roce_host::errno::is_absent;

use super::files::io_error;
use crate::acs::{acs_state, AcsState, PortType};
use crate::path::{classify, Placement};
use crate::pci::PciAddress;
use crate::types::*;

/// The path class and bridges between every GPU and every NIC.
pub(super) fn gpu_nic_paths(
    gpus: &[Gpu],
    nics: &[Nic],
    functions: &BTreeMap<PciAddress, PciFunction>,
) -> Vec<GpuNicPath> {
    let mut paths = Vec::new();
    for gpu in gpus {
        let Some(gf) = functions.get(&gpu.address) else {
            continue;
        };
        for nic in nics {
            let Some(nf) = functions.get(&nic.address) else {
                continue;
            };
            let (gp, np) = (ports(gf, functions), ports(nf, functions));
            let (class, bridges) = classify(&placement(gf, &gp), &placement(nf, &np));
            paths.push(GpuNicPath {
                gpu: gpu.index,
                nic: nic.name.clone(),
                class,
                bridges,
            });
        }
    }
    paths
}

/// The PCIe links: each endpoint and each switch upstream port is the lower
/// end of one physical link, whose capability is the lesser of its two ends.
pub(super) fn links(functions: &BTreeMap<PciAddress, PciFunction>) -> Vec<Link> {
    let mut links = Vec::new();
    for f in functions.values() {
        let lower_end = match (f.role, f.port_type) {
            (FunctionRole::Gpu | FunctionRole::Nic, _) => true,
            (_, Some(PortType::RootPort | PortType::SwitchDownstream)) => false,
            (_, Some(_)) => true,
            (_, None) => f.parents.len() % 2 == 1,
        };
        if !lower_end {
            continue;
        }
        let upstream = f.parents.last().and_then(|p| functions.get(p));
        let capable_speed = match upstream {
            Some(u) => min_opt(f.max_speed, u.max_speed),
            None => f.max_speed,
        };
        let capable_width = match upstream {
            Some(u) => min_opt(f.max_width, u.max_width),
            None => f.max_width,
        };
        links.push(Link {
            downstream: f.address,
            upstream: upstream.map(|u| u.address),
            rdma_device: f.rdma_device.clone(),
            current_speed: f.current_speed,
            current_width: f.current_width,
            capable_speed,
            capable_width,
        });
    }
    links
}

/// ACS on the bridges between each GPU and its nearest NIC(s), each bridge
/// read once.
pub(super) fn bridge_acs(
    snap: &TopologySnapshot,
    dirs: &BTreeMap<PciAddress, PathBuf>,
    errors: &mut Vec<ReadError>,
) -> Vec<BridgeAcs> {
    let mut acs: BTreeMap<PciAddress, AcsState> = BTreeMap::new();
    for gpu in &snap.gpus {
        for path in snap.nearest_nics(gpu.index) {
            for bridge in &path.bridges {
                if acs.contains_key(bridge) {
                    continue;
                }
                let state = match dirs.get(bridge) {
                    Some(dir) => read_acs(&dir.join("config"), errors),
                    None => AcsState::Unknown,
                };
                acs.insert(*bridge, state);
            }
        }
    }
    acs.into_iter()
        .map(|(address, state)| BridgeAcs { address, state })
        .collect()
}

fn placement<'a>(f: &'a PciFunction, ports: &'a [Option<PortType>]) -> Placement<'a> {
    Placement {
        host_bridge: &f.host_bridge,
        parents: &f.parents,
        ports,
        numa_node: f.numa_node,
    }
}

/// Port types of a function's parents, in chain order.
fn ports(f: &PciFunction, functions: &BTreeMap<PciAddress, PciFunction>) -> Vec<Option<PortType>> {
    f.parents
        .iter()
        .map(|p| functions.get(p).and_then(|b| b.port_type))
        .collect()
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Reads at most 4 KiB of config space. EACCES/EPERM (a locked-down
/// kernel) is "unknown", like the 64-byte read of an unprivileged reader.
fn read_acs(path: &Path, errors: &mut Vec<ReadError>) -> AcsState {
    match roce_host::fs::read_capped(path, 4096) {
        Ok(bytes) => acs_state(&bytes),
        Err(e) if is_absent(&e) || e.kind() == std::io::ErrorKind::PermissionDenied => {
            AcsState::Unknown
        }
        Err(e) => {
            errors.push(io_error(path, &e));
            AcsState::Unknown
        }
    }
}
