//! The layout scan: what a device looks like when it appears (ports,
//! counter files, GID slot counts, the PCI function behind it), taken once
//! per device appearance and kept with the attribute handles.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::fs::SysFs;
use crate::parse;
use crate::types::{CounterNames, LinkLayer, PortState, ReadError};

use super::attr::Attr;
use super::errno::{is_absent, push_io};
use super::gid::GidTable;
use super::Ctx;

/// What a device looked like when it was scanned, with its handles.
pub(super) struct Layout {
    pub(super) fw_ver: Attr,
    pub(super) board_id: Attr,
    pub(super) hca_type: Attr,
    pub(super) node_guid: Attr,
    pub(super) node_type: Attr,
    /// Software devices (rxe) name their netdev here.
    pub(super) parent: Attr,
    /// The `parent` content the backing below was resolved for.
    pub(super) parent_seen: Option<String>,
    pub(super) backing: Backing,
    pub(super) ports: Vec<PortLayout>,
    /// The attributes that do not change while the device exists, as last
    /// read, and when; `None` until read, and again when one of them failed
    /// (so that its error keeps being reported) or the backing changed.
    pub(super) statics: Option<(Instant, DeviceStatics)>,
}

/// Device attributes read at the scan and every static refresh interval.
#[derive(Clone, Default)]
pub(super) struct DeviceStatics {
    pub(super) fw_version: Option<String>,
    pub(super) board_id: Option<String>,
    pub(super) hca_type: Option<String>,
    pub(super) node_guid: Option<String>,
    pub(super) node_type: Option<String>,
    pub(super) numa_node: Option<u32>,
}

/// Resolved once per scan: a PCI device's driver and function do not change
/// while the RDMA device exists (unbinding removes it).
#[derive(Default)]
pub(super) struct Backing {
    /// Whether the device has a `device` link (hardware).
    pub(super) hardware: bool,
    pub(super) driver: Option<String>,
    pub(super) pci_address: Option<String>,
    pub(super) numa: Option<Attr>,
}

pub(super) struct PortLayout {
    pub(super) number: u32,
    pub(super) state: Attr,
    pub(super) phys_state: Attr,
    pub(super) rate: Attr,
    pub(super) link_layer: Attr,
    pub(super) lid: Attr,
    /// (reported name, file), sorted by name. The name is shared with
    /// every `Counter` read from the file.
    pub(super) counters: Vec<(Arc<str>, Attr)>,
    pub(super) hw_counters: Vec<(Arc<str>, Attr)>,
    pub(super) gids: GidTable,
    /// When the whole GID table was last read; `None` before the first
    /// sample.
    pub(super) gids_scanned_at: Option<Instant>,
    /// The port state read in the previous sample (a change triggers a full
    /// GID scan).
    pub(super) state_seen: Option<Option<PortState>>,
    /// `link_layer` and `lid` as last read (on Ethernet ports both are
    /// read with the device's static attributes only).
    pub(super) link_layer_seen: Option<LinkLayer>,
    pub(super) lid_seen: Option<u32>,
    /// The device's `device/net` folder, kept open for the ports whose
    /// netdev no GID names (no populated slot): listed with a seek and a
    /// `getdents64` instead of an open, a stat, two listings and a close.
    pub(super) net_dir: roce_host::KeptDir,
    pub(super) net_names: Vec<OsString>,
    /// The netdev that listing gave, kept between refreshes of the static
    /// attributes: a rename shows at the next refresh, not in every
    /// sample's system calls. `None` before the first listing.
    pub(super) listed_netdev: Option<Option<String>>,
}

impl Layout {
    pub(super) fn open_files(&self) -> usize {
        let one = |a: &Attr| usize::from(a.is_open());
        let mut n = one(&self.fw_ver)
            + one(&self.board_id)
            + one(&self.hca_type)
            + one(&self.node_guid)
            + one(&self.node_type)
            + one(&self.parent)
            + self.backing.numa.as_ref().map_or(0, one);
        for p in &self.ports {
            n += one(&p.state) + one(&p.phys_state) + one(&p.rate) + one(&p.link_layer);
            n += one(&p.lid);
            n += p.counters.iter().map(|(_, a)| one(a)).sum::<usize>();
            n += p.hw_counters.iter().map(|(_, a)| one(a)).sum::<usize>();
            n += p
                .gids
                .kept
                .values()
                .map(|g| one(&g.gid) + one(&g.types) + one(&g.ndevs))
                .sum::<usize>();
        }
        n
    }
}

/// Takes the listings. `None` when the device vanished since it was listed.
pub(super) fn scan(dir: &Path, ctx: &mut Ctx<'_>) -> Option<Layout> {
    let fs = ctx.io.fs;
    // The device folder itself: gone means gone, not an error.
    if let Err(e) = fs.read_dir(dir) {
        if !is_absent(&e) {
            push_io(ctx.errors, dir, &e);
        }
        return None;
    }
    let backing = resolve_backing(dir, ctx);
    let ports_dir = dir.join("ports");
    let mut numbers: Vec<u32> = list(fs, &ports_dir, ctx.errors)
        .iter()
        .filter_map(|n| n.to_str()?.parse().ok())
        .collect();
    numbers.sort_unstable();
    let ports = numbers
        .into_iter()
        .map(|number| scan_port(fs, ports_dir.join(number.to_string()), number, ctx))
        .collect();
    Some(Layout {
        fw_ver: Attr::new(dir.join("fw_ver")),
        board_id: Attr::new(dir.join("board_id")),
        hca_type: Attr::new(dir.join("hca_type")),
        node_guid: Attr::new(dir.join("node_guid")),
        node_type: Attr::new(dir.join("node_type")),
        parent: Attr::new(dir.join("parent")),
        parent_seen: None,
        backing,
        ports,
        statics: None,
    })
}

/// Driver, PCI function and NUMA node of a device with a `device` link.
pub(super) fn resolve_backing(dir: &Path, ctx: &mut Ctx<'_>) -> Backing {
    let link = dir.join("device");
    let real = match ctx.io.fs.canonicalize(&link) {
        Ok(p) => p,
        Err(e) => {
            if !is_absent(&e) {
                push_io(ctx.errors, &link, &e);
            }
            return Backing::default();
        }
    };
    let driver_link = link.join("driver");
    let driver = match ctx.io.fs.read_link(&driver_link) {
        Ok(target) => base_name(&target),
        Err(e) => {
            if !is_absent(&e) {
                push_io(ctx.errors, &driver_link, &e);
            }
            None
        }
    };
    let (pci_address, pci_dir) = pci_function_of(&real);
    Backing {
        hardware: true,
        driver,
        pci_address,
        numa: pci_dir.map(|d| Attr::new(d.join("numa_node"))),
    }
}

/// The PCI function (and its NUMA node file) of a software device's parent
/// netdev: `<sysfs>/class/net/<parent>/device`.
pub(super) fn resolve_parent(parent: &str, ctx: &mut Ctx<'_>) -> Backing {
    let link = ctx.sysfs.join("class/net").join(parent).join("device");
    match ctx.io.fs.canonicalize(&link) {
        Ok(real) => {
            let (pci_address, pci_dir) = pci_function_of(&real);
            Backing {
                hardware: false,
                driver: None,
                pci_address,
                numa: pci_dir.map(|d| Attr::new(d.join("numa_node"))),
            }
        }
        Err(e) => {
            if !is_absent(&e) {
                push_io(ctx.errors, &link, &e);
            }
            Backing::default()
        }
    }
}

pub(super) fn scan_port(
    fs: &dyn SysFs,
    dir: PathBuf,
    number: u32,
    ctx: &mut Ctx<'_>,
) -> PortLayout {
    let mut counters = counter_files(fs, &dir.join("counters"), ctx.errors, ctx.names, |n| {
        Some(n.to_string())
    });
    // Old kernels (and some OFED builds) put the 64-bit PMA counters in
    // `counters_ext/` under other names; current kernels have them in
    // `counters/` (pma_attrs_ext in drivers/infiniband/core/sysfs.c). Use
    // them under the standard name where `counters/` lacks it.
    let ext = counter_files(
        fs,
        &dir.join("counters_ext"),
        ctx.errors,
        ctx.names,
        ext_standard_name,
    );
    for (name, attr) in ext {
        if !counters.iter().any(|(n, _)| *n == name) {
            counters.push((name, attr));
        }
    }
    counters.sort_by(|a, b| a.0.cmp(&b.0));
    // `lifespan` is the cache setting of the hw_counters group
    // (set_stats_lifespan in core/sysfs.c), not a counter.
    let hw_counters = counter_files(fs, &dir.join("hw_counters"), ctx.errors, ctx.names, |n| {
        (n != "lifespan").then(|| n.to_string())
    });
    let gid_slots = list(fs, &dir.join("gids"), ctx.errors)
        .iter()
        .filter_map(|n| n.to_str()?.parse::<u32>().ok())
        .map(|i| i.saturating_add(1))
        .max()
        .unwrap_or(0);
    let gids = GidTable::new(dir.clone(), gid_slots);
    PortLayout {
        number,
        state: Attr::new(dir.join("state")),
        phys_state: Attr::new(dir.join("phys_state")),
        rate: Attr::new(dir.join("rate")),
        link_layer: Attr::new(dir.join("link_layer")),
        lid: Attr::new(dir.join("lid")),
        counters,
        hw_counters,
        gids,
        gids_scanned_at: None,
        state_seen: None,
        link_layer_seen: None,
        lid_seen: None,
        net_dir: roce_host::KeptDir::default(),
        net_names: Vec::new(),
        listed_netdev: None,
    }
}

/// `counters_ext/` names to the `counters/` names of current kernels.
pub(super) fn ext_standard_name(name: &str) -> Option<String> {
    let n = name.strip_suffix("_64").unwrap_or(name);
    let n = match n.strip_prefix("port_") {
        Some(rest) if rest.starts_with("unicast_") || rest.starts_with("multicast_") => rest,
        _ => n,
    };
    Some(n.to_string())
}

pub(super) fn counter_files(
    fs: &dyn SysFs,
    dir: &Path,
    errors: &mut Vec<ReadError>,
    names: &mut CounterNames,
    rename: impl Fn(&str) -> Option<String>,
) -> Vec<(Arc<str>, Attr)> {
    let mut out: Vec<(Arc<str>, Attr)> = list(fs, dir, errors)
        .into_iter()
        .filter_map(|n| {
            let s = n.to_str()?;
            Some((names.get(&rename(s)?), Attr::new(dir.join(s))))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Entries of a folder; a missing folder (rxe and bnxt_re have no
/// `counters/`) is empty, not an error.
pub(super) fn list(fs: &dyn SysFs, dir: &Path, errors: &mut Vec<ReadError>) -> Vec<OsString> {
    match fs.read_dir(dir) {
        Ok(n) => n,
        Err(e) => {
            if !is_absent(&e) {
                push_io(errors, dir, &e);
            }
            Vec::new()
        }
    }
}

/// The last PCI-function component of a resolved device path, and the folder
/// it names. Walking up handles functions' children (`virtio0` under the
/// virtio PCI function, mlx5 sub-functions on the auxiliary bus).
pub(super) fn pci_function_of(real: &Path) -> (Option<String>, Option<PathBuf>) {
    let mut dir = real.to_path_buf();
    loop {
        if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
            if parse::is_pci_address(name) {
                return (Some(name.to_string()), Some(dir));
            }
        }
        if !dir.pop() || dir.components().next_back() == Some(Component::RootDir) {
            return (None, None);
        }
    }
}

pub(super) fn base_name(p: &Path) -> Option<String> {
    p.file_name().and_then(|n| n.to_str()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext_names() {
        for (ext, std) in [
            ("port_xmit_data_64", "port_xmit_data"),
            ("port_rcv_data_64", "port_rcv_data"),
            ("port_xmit_packets_64", "port_xmit_packets"),
            ("port_rcv_packets_64", "port_rcv_packets"),
            ("port_unicast_xmit_packets", "unicast_xmit_packets"),
            ("port_unicast_rcv_packets", "unicast_rcv_packets"),
            ("port_multicast_xmit_packets", "multicast_xmit_packets"),
            ("port_multicast_rcv_packets", "multicast_rcv_packets"),
        ] {
            assert_eq!(ext_standard_name(ext).as_deref(), Some(std));
        }
    }

    #[test]
    fn pci_function_walks_up() {
        let (a, d) = pci_function_of(Path::new("/sys/devices/pci0000:00/0000:00:01.0/virtio0"));
        assert_eq!(a.as_deref(), Some("0000:00:01.0"));
        assert_eq!(
            d,
            Some(PathBuf::from("/sys/devices/pci0000:00/0000:00:01.0"))
        );
        assert_eq!(
            pci_function_of(Path::new("/sys/devices/virtual/net/lo")),
            (None, None)
        );
    }
}
