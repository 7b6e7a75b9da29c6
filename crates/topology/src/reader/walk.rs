//! The PCI walk: the GPUs among the functions of `bus/pci/devices`, and
//! the placement of every GPU and NIC (and the bridges above them) by its
//! path under `devices/`, with the attributes read on the way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use roce_host::errno::is_absent;

use super::files::{io_error, read_hex, read_parsed, read_speed};
use super::TopologyReader;
use crate::acs::{port_type, PortType};
use crate::pci::{self, PciAddress};
use crate::types::*;

/// Where a function sits, read from its sysfs path.
struct Located {
    dir: PathBuf,
    host_bridge: String,
    parents: Vec<PciAddress>,
}

impl TopologyReader {
    /// Locates each GPU found (index order is address order) and adds it,
    /// and the bridges above it, to `functions` and `dirs`.
    pub(super) fn place_gpus(
        &mut self,
        gpus: &[(PciAddress, GpuVendor, Option<u16>)],
        devices_root: Option<&Path>,
        functions: &mut BTreeMap<PciAddress, PciFunction>,
        dirs: &mut BTreeMap<PciAddress, PathBuf>,
        errors: &mut Vec<ReadError>,
    ) -> Vec<Gpu> {
        let mut placed = Vec::new();
        for (index, (address, vendor, device_id)) in gpus.iter().enumerate() {
            let Some(loc) = self.locate(*address, devices_root, errors) else {
                continue;
            };
            let f = self.function(*address, &loc, FunctionRole::Gpu, errors);
            placed.push(Gpu {
                index,
                address: *address,
                vendor: *vendor,
                device_id: *device_id,
                numa_node: f.numa_node,
                name: None,
                uuid: None,
            });
            self.add_parents(&loc, functions, dirs, errors);
            functions.insert(
                *address,
                PciFunction {
                    gpu: Some(index),
                    ..f
                },
            );
            dirs.insert(*address, loc.dir);
        }
        placed
    }

    /// Locates the PCI function of each RDMA device and adds it, and the
    /// bridges above it, to `functions` and `dirs`.
    pub(super) fn place_nics(
        &mut self,
        nics: &[NicRef],
        devices_root: Option<&Path>,
        functions: &mut BTreeMap<PciAddress, PciFunction>,
        dirs: &mut BTreeMap<PciAddress, PathBuf>,
        errors: &mut Vec<ReadError>,
    ) -> Vec<Nic> {
        let mut placed = Vec::new();
        for nic in nics {
            let Some(address) = PciAddress::parse(&nic.pci_address) else {
                continue;
            };
            // An RDMA device whose PCI function is gone (hot unplug between
            // the two sources) is left out, not an error.
            let Some(loc) = self.locate(address, devices_root, errors) else {
                continue;
            };
            let f = self.function(address, &loc, FunctionRole::Nic, errors);
            placed.push(Nic {
                name: nic.name.clone(),
                address,
                numa_node: f.numa_node,
            });
            self.add_parents(&loc, functions, dirs, errors);
            let entry = functions.entry(address).or_insert(PciFunction {
                rdma_device: None,
                ..f
            });
            entry.role = FunctionRole::Nic;
            // Two RDMA devices on one function (rare): name the first.
            if entry.rdma_device.is_none() {
                entry.rdma_device = Some(nic.name.clone());
            }
            dirs.insert(address, loc.dir);
        }
        placed
    }

    /// The function's directory under `devices/`, its host bridge and the
    /// bridges above it.
    fn locate(
        &self,
        address: PciAddress,
        devices_root: Option<&Path>,
        errors: &mut Vec<ReadError>,
    ) -> Option<Located> {
        let link = self.sysfs.join("bus/pci/devices").join(address.to_string());
        let dir = match std::fs::canonicalize(&link) {
            Ok(d) => d,
            Err(e) if is_absent(&e) => return None,
            Err(e) => {
                errors.push(io_error(&link, &e));
                return None;
            }
        };
        let rel = devices_root.and_then(|root| dir.strip_prefix(root).ok());
        let Some(rel) = rel else {
            errors.push(ReadError {
                path: link,
                kind: ReadErrorKind::Parse(format!("{} is not under devices/", dir.display())),
            });
            return None;
        };
        let mut components = rel
            .components()
            .filter_map(|c| c.as_os_str().to_str().map(str::to_string));
        let host_bridge = components.next()?;
        // Every PCI address between the root bus and the function; other
        // directories on the way (a VMD domain's `pci10000:e0`) are not
        // bridges of this hierarchy.
        let mut parents: Vec<PciAddress> =
            components.filter_map(|c| PciAddress::parse(&c)).collect();
        if parents.pop() != Some(address) {
            errors.push(ReadError {
                path: link,
                kind: ReadErrorKind::Parse(format!("{} does not end in {address}", dir.display())),
            });
            return None;
        }
        Some(Located {
            dir,
            host_bridge,
            parents,
        })
    }

    fn function(
        &self,
        address: PciAddress,
        loc: &Located,
        role: FunctionRole,
        errors: &mut Vec<ReadError>,
    ) -> PciFunction {
        let d = &loc.dir;
        PciFunction {
            address,
            role,
            rdma_device: None,
            gpu: None,
            host_bridge: loc.host_bridge.clone(),
            parents: loc.parents.clone(),
            numa_node: read_parsed(&d.join("numa_node"), pci::parse_numa_node, errors).flatten(),
            port_type: None,
            current_speed: read_speed(&d.join("current_link_speed"), errors),
            max_speed: read_speed(&d.join("max_link_speed"), errors),
            current_width: read_parsed(
                &d.join("current_link_width"),
                pci::parse_link_width,
                errors,
            )
            .flatten(),
            max_width: read_parsed(&d.join("max_link_width"), pci::parse_link_width, errors)
                .flatten(),
        }
    }

    /// Adds the bridges above a located function (each at most once).
    fn add_parents(
        &mut self,
        loc: &Located,
        functions: &mut BTreeMap<PciAddress, PciFunction>,
        dirs: &mut BTreeMap<PciAddress, PathBuf>,
        errors: &mut Vec<ReadError>,
    ) {
        let mut dir = loc.dir.clone();
        // Walk up from the function: each parent directory is the bridge
        // above, deepest first.
        for (depth, bridge) in loc.parents.iter().enumerate().rev() {
            loop {
                if !dir.pop() {
                    return;
                }
                if dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(PciAddress::parse)
                    == Some(*bridge)
                {
                    break;
                }
            }
            if functions.contains_key(bridge) {
                continue;
            }
            let bloc = Located {
                dir: dir.clone(),
                host_bridge: loc.host_bridge.clone(),
                parents: loc.parents.get(..depth).unwrap_or_default().to_vec(),
            };
            let mut f = self.function(*bridge, &bloc, FunctionRole::Bridge, errors);
            f.port_type = match self.port_types.get(bridge) {
                Some(t) => *t,
                None => {
                    let t = read_port_type(&bloc.dir.join("config"), errors);
                    self.port_types.insert(*bridge, t);
                    t
                }
            };
            functions.insert(*bridge, f);
            dirs.insert(*bridge, bloc.dir);
        }
    }
}

/// The PCI addresses of the GPUs under `sysfs`/bus/pci/devices, as the
/// topology reader finds them (NVIDIA's and AMD's display and 3D
/// controllers), for a reader that needs them before the topology has been
/// read once. A bus that cannot be listed has no GPUs; absent is not an
/// error.
pub fn list_gpus(sysfs: &Path, errors: &mut Vec<ReadError>) -> Vec<PciAddress> {
    let bus = sysfs.join("bus/pci/devices");
    match std::fs::read_dir(&bus) {
        Ok(entries) => gpu_functions(entries, errors)
            .into_iter()
            .map(|(address, _, _)| address)
            .collect(),
        Err(e) if is_absent(&e) => Vec::new(),
        Err(e) => {
            errors.push(io_error(&bus, &e));
            Vec::new()
        }
    }
}

/// The GPUs among the PCI functions listed: vendor and class of every
/// function, sorted by address.
pub(super) fn gpu_functions(
    entries: std::fs::ReadDir,
    errors: &mut Vec<ReadError>,
) -> Vec<(PciAddress, GpuVendor, Option<u16>)> {
    let mut gpus = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(address) = name.to_str().and_then(PciAddress::parse) else {
            continue;
        };
        let dir = entry.path();
        // Vendor first: most functions are not a GPU maker's, and their
        // class need not be read.
        let vendor = match read_hex(&dir.join("vendor"), errors) {
            Some(pci::VENDOR_NVIDIA) => GpuVendor::Nvidia,
            Some(pci::VENDOR_AMD) => GpuVendor::Amd,
            _ => continue,
        };
        if read_hex(&dir.join("class"), errors).is_some_and(pci::is_gpu_class) {
            let device_id =
                read_hex(&dir.join("device"), errors).and_then(|d| u16::try_from(d).ok());
            gpus.push((address, vendor, device_id));
        }
    }
    gpus.sort_by_key(|g| g.0);
    gpus
}

/// The port type from the first 256 bytes of config space; unreadable or
/// short (64 bytes without root) is `None`, and only EACCES/ENOENT are
/// quiet.
fn read_port_type(path: &Path, errors: &mut Vec<ReadError>) -> Option<PortType> {
    match roce_host::fs::read_capped(path, 256) {
        Ok(bytes) => port_type(&bytes),
        Err(e) if is_absent(&e) || e.kind() == std::io::ErrorKind::PermissionDenied => None,
        Err(e) => {
            errors.push(io_error(path, &e));
            None
        }
    }
}
