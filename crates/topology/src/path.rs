//! The path class of two PCI functions, with the meanings `nvidia-smi topo
//! -m` prints in its legend, derived from the sysfs tree alone:
//!
//! - PIX: at most a single PCIe bridge (one switch: its upstream port and
//!   downstream ports count as one bridge, as NVML's
//!   `NVML_TOPOLOGY_SINGLE`, "a single PCIe switch", does);
//! - PXB: several bridges, without the host bridge;
//! - PHB: through a PCIe host bridge (different root ports of one root bus,
//!   or both functions directly on the root bus, as in cloud VMs);
//! - NODE: across host bridges within one NUMA node;
//! - SYS: across the interconnect between NUMA nodes (QPI/UPI, xGMI).
//!
//! Switch ports are told apart by their PCI Express port type when config
//! space was readable (root), else by their place in the chain: below a
//! root port, a PCIe hierarchy alternates switch upstream port, switch
//! downstream port (PCIe Base Specification, switch model), so the bridge at
//! an odd depth is an upstream port and its child bridge belongs to the same
//! switch.

use crate::acs::PortType;
use crate::pci::PciAddress;

/// Path class, best first (the order is the ranking used for "nearest").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathClass {
    Pix,
    Pxb,
    Phb,
    Node,
    Sys,
}

impl PathClass {
    pub fn as_str(self) -> &'static str {
        match self {
            PathClass::Pix => "PIX",
            PathClass::Pxb => "PXB",
            PathClass::Phb => "PHB",
            PathClass::Node => "NODE",
            PathClass::Sys => "SYS",
        }
    }
}

/// Where a function sits in the PCI tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement<'a> {
    /// The root bus directory (`pci0000:00`): one per host bridge.
    pub host_bridge: &'a str,
    /// Bridges from the root port down to (not including) the function.
    pub parents: &'a [PciAddress],
    /// Port type of each parent, where known (same order; may be shorter).
    pub ports: &'a [Option<PortType>],
    pub numa_node: Option<u32>,
}

/// The class of the path between `a` and `b`, and the bridges it crosses
/// (empty when it crosses a host bridge).
pub fn classify(a: &Placement<'_>, b: &Placement<'_>) -> (PathClass, Vec<PciAddress>) {
    if a.host_bridge != b.host_bridge {
        // Unknown NUMA on both sides (-1: a one-node machine or firmware
        // without proximity data) counts as one node.
        let class = if a.numa_node == b.numa_node {
            PathClass::Node
        } else {
            PathClass::Sys
        };
        return (class, Vec::new());
    }
    let common = a
        .parents
        .iter()
        .zip(b.parents)
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        return (PathClass::Phb, Vec::new());
    }
    // The lowest common bridge, then each side's bridges below it.
    let lca = common - 1;
    let mut switches = Vec::new();
    let mut note = |p: &Placement<'_>, i: usize| {
        let unit = switch_of(p.parents, p.ports, i);
        if !switches.contains(&unit) {
            switches.push(unit);
        }
    };
    // From the GPU side up to the common bridge, then down the NIC side.
    let mut bridges = Vec::new();
    for i in (lca..a.parents.len()).rev() {
        if let Some(addr) = a.parents.get(i) {
            bridges.push(*addr);
            note(a, i);
        }
    }
    for i in common..b.parents.len() {
        if let Some(addr) = b.parents.get(i) {
            bridges.push(*addr);
            note(b, i);
        }
    }
    let class = if switches.len() <= 1 {
        PathClass::Pix
    } else {
        PathClass::Pxb
    };
    (class, bridges)
}

/// The bridge that stands for the switch (or root port) of `chain[i]`: a
/// switch downstream port belongs to the upstream port above it. Without a
/// known port type, a bridge at even depth ≥ 2 is taken for a downstream
/// port.
fn switch_of(chain: &[PciAddress], ports: &[Option<PortType>], i: usize) -> Option<PciAddress> {
    let downstream = match ports.get(i).copied().flatten() {
        Some(t) => t == PortType::SwitchDownstream,
        None => i >= 2 && i.is_multiple_of(2),
    };
    if downstream && i >= 1 {
        chain.get(i - 1).copied()
    } else {
        chain.get(i).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    #[test]
    fn same_switch_is_pix_two_switches_pxb() {
        let rp = a("0000:00:01.0");
        let usp = a("0000:01:00.0");
        let (d1, d2) = (a("0000:02:00.0"), a("0000:02:01.0"));
        let gpu = [rp, usp, d1];
        let nic = [rp, usp, d2];
        let p = |parents| Placement {
            host_bridge: "pci0000:00",
            parents,
            ports: &[],
            numa_node: Some(0),
        };
        let (class, bridges) = classify(&p(&gpu), &p(&nic));
        assert_eq!(class, PathClass::Pix);
        assert_eq!(bridges, vec![d1, usp, d2]);
        // A second switch below d2.
        let (usp2, d3) = (a("0000:03:00.0"), a("0000:04:00.0"));
        let deep = [rp, usp, d2, usp2, d3];
        assert_eq!(classify(&p(&gpu), &p(&deep)).0, PathClass::Pxb);
        // Different root ports of one host bridge.
        let other = [a("0000:00:02.0")];
        assert_eq!(classify(&p(&gpu), &p(&other)).0, PathClass::Phb);
        // Both on the root bus.
        assert_eq!(classify(&p(&[]), &p(&[])).0, PathClass::Phb);
    }

    #[test]
    fn port_types_override_depth() {
        // A root port with a PCIe-to-PCI bridge, then a switch: the depth
        // rule would pair the wrong bridges.
        let rp = a("0000:00:01.0");
        let pci_bridge = a("0000:01:00.0");
        let usp = a("0000:02:00.0");
        let (d1, d2) = (a("0000:03:00.0"), a("0000:03:01.0"));
        let ports = [
            Some(PortType::RootPort),
            Some(PortType::Other(7)),
            Some(PortType::SwitchUpstream),
            Some(PortType::SwitchDownstream),
        ];
        let gpu = [rp, pci_bridge, usp, d1];
        let nic = [rp, pci_bridge, usp, d2];
        let p = |parents| Placement {
            host_bridge: "pci0000:00",
            parents,
            ports: &ports,
            numa_node: Some(0),
        };
        assert_eq!(classify(&p(&gpu), &p(&nic)).0, PathClass::Pix);
        let no_types = |parents| Placement {
            host_bridge: "pci0000:00",
            parents,
            ports: &[],
            numa_node: Some(0),
        };
        assert_eq!(classify(&no_types(&gpu), &no_types(&nic)).0, PathClass::Pxb);
    }

    #[test]
    fn host_bridges_and_numa() {
        let x = Placement {
            host_bridge: "pci0000:00",
            parents: &[],
            ports: &[],
            numa_node: Some(0),
        };
        let mut y = Placement {
            host_bridge: "pci0000:15",
            parents: &[],
            ports: &[],
            numa_node: Some(0),
        };
        assert_eq!(classify(&x, &y).0, PathClass::Node);
        y.numa_node = Some(1);
        assert_eq!(classify(&x, &y).0, PathClass::Sys);
    }
}
