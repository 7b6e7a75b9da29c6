//! RDMA devices, their ports and net devices as sysfs shows them
//! (drivers/infiniband/core/sysfs.c, net/core/net-sysfs.c):
//! class/infiniband/<dev> links to devices/.../<function>/infiniband/<dev>,
//! whose `device` links back to the PCI function; class/net/<if> likewise.

use std::io;

use crate::kernel::ZERO_GID;
use crate::tree::Tree;

/// `(file, value)` pairs, written as `value\n`.
pub type Attrs = Vec<(String, String)>;

/// The attributes of an active RoCE port (Ethernet link layer, no LID, the
/// capability mask mlx5 and bnxt_re report) at `rate`
/// (`400 Gb/sec (4X NDR)`).
pub fn active_roce_port(rate: &str) -> Attrs {
    attrs(&[
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
        ("rate", rate),
        ("link_layer", "Ethernet"),
        ("lid", "0x0"),
        ("sm_lid", "0x0"),
        ("lid_mask_count", "0"),
        ("sm_sl", "0"),
        ("cap_mask", "0x04010000"),
    ])
}

/// Pairs from string slices.
pub fn attrs(pairs: &[(&str, &str)]) -> Attrs {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Counter files: `names[i]` holds `base + i`, then `overrides` replace
/// values or add files.
pub fn numbered(names: &[&str], base: u64, overrides: &[(&str, &str)]) -> Attrs {
    let mut out: Attrs = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), (base + i as u64).to_string()))
        .collect();
    for (k, v) in overrides {
        match out.iter_mut().find(|(n, _)| n == k) {
            Some(slot) => slot.1 = v.to_string(),
            None => out.push((k.to_string(), v.to_string())),
        }
    }
    out
}

/// An RDMA device below `parent` (a PCI function, or devices/virtual for
/// software devices, which have no `device` link); returns its path.
pub fn ib_device(
    t: &Tree,
    parent: &str,
    name: &str,
    attrs: &Attrs,
    device_link: bool,
) -> io::Result<String> {
    let rel = format!("{parent}/infiniband/{name}");
    for (k, v) in attrs {
        t.attr(&format!("{rel}/{k}"), v)?;
    }
    if device_link {
        t.link(&format!("{rel}/device"), parent)?;
    }
    t.link(&format!("{rel}/subsystem"), "class/infiniband")?;
    t.link(&format!("class/infiniband/{name}"), &rel)?;
    Ok(rel)
}

/// The files of one populated GID table slot.
pub struct GidFiles {
    pub index: usize,
    pub gid: String,
    pub gid_type: &'static str,
    /// `gid_attrs/ndevs/N`; `None` on InfiniBand ports, where reading it
    /// fails with EINVAL.
    pub ndev: Option<String>,
}

impl GidFiles {
    pub fn new(index: usize, gid: &str, gid_type: &'static str, ndev: Option<&str>) -> GidFiles {
        GidFiles {
            index,
            gid: gid.to_string(),
            gid_type,
            ndev: ndev.map(str::to_string),
        }
    }
}

/// How the attributes of empty GID slots appear.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum EmptySlots {
    /// Empty files whose reads fail with EINVAL, as on a kernel (recorded
    /// as faults when the tree keeps a `faults.txt`).
    Einval,
    /// Not there (ENOENT): a tree for tools that cannot fail a read.
    Absent,
}

/// The files of a port of an RDMA device, as written into a tree.
pub struct PortFiles {
    pub num: u32,
    pub attrs: Attrs,
    /// `counters/`; `None`: no such folder (rxe).
    pub counters: Option<Attrs>,
    /// `hw_counters/`; `None`: no such folder.
    pub hw: Option<Attrs>,
    pub gids: Vec<GidFiles>,
    /// GID table length (`gids/0` .. `gids/slots-1`).
    pub slots: usize,
    pub empty: EmptySlots,
}

impl PortFiles {
    pub fn new(num: u32, attrs: Attrs) -> PortFiles {
        PortFiles {
            num,
            attrs,
            counters: None,
            hw: None,
            gids: Vec::new(),
            slots: 0,
            empty: EmptySlots::Einval,
        }
    }

    /// Writes the port under the device at `dev`; faults go to `t` with
    /// their class/infiniband path. Returns the port's path.
    pub fn write(&self, t: &mut Tree, dev: &str) -> io::Result<String> {
        let rel = format!("{dev}/ports/{}", self.num);
        for (k, v) in &self.attrs {
            t.attr(&format!("{rel}/{k}"), v)?;
        }
        for (dir, set) in [("counters", &self.counters), ("hw_counters", &self.hw)] {
            for (k, v) in set.iter().flatten() {
                t.attr(&format!("{rel}/{dir}/{k}"), v)?;
            }
        }
        let name = dev.rsplit('/').next().unwrap_or(dev);
        let cls = format!("class/infiniband/{name}/ports/{}", self.num);
        for i in 0..self.slots {
            match self.gids.iter().find(|g| g.index == i) {
                Some(g) => {
                    t.attr(&format!("{rel}/gids/{i}"), &g.gid)?;
                    t.attr(&format!("{rel}/gid_attrs/types/{i}"), g.gid_type)?;
                    match &g.ndev {
                        Some(ndev) => t.attr(&format!("{rel}/gid_attrs/ndevs/{i}"), ndev)?,
                        None => {
                            t.write(&format!("{rel}/gid_attrs/ndevs/{i}"), "")?;
                            t.fault(&format!("{cls}/gid_attrs/ndevs/{i}"), "EINVAL");
                        }
                    }
                }
                None => {
                    t.attr(&format!("{rel}/gids/{i}"), ZERO_GID)?;
                    if self.empty == EmptySlots::Einval {
                        t.write(&format!("{rel}/gid_attrs/types/{i}"), "")?;
                        t.write(&format!("{rel}/gid_attrs/ndevs/{i}"), "")?;
                        t.fault(&format!("{cls}/gid_attrs/types/{i}"), "EINVAL");
                        t.fault(&format!("{cls}/gid_attrs/ndevs/{i}"), "EINVAL");
                    }
                }
            }
        }
        Ok(rel)
    }
}

/// A net device below `parent` with `attrs` (mtu, operstate, ...), its
/// `device` link and class/net/<ifname>; returns its path.
pub fn netdev(t: &Tree, parent: &str, ifname: &str, attrs: &Attrs) -> io::Result<String> {
    let rel = format!("{parent}/net/{ifname}");
    for (k, v) in attrs {
        t.attr(&format!("{rel}/{k}"), v)?;
    }
    t.link(&format!("{rel}/device"), parent)?;
    t.link(&format!("class/net/{ifname}"), &rel)?;
    Ok(rel)
}

/// The attributes of an up Ethernet net device.
pub fn netdev_attrs(mac: &str, mtu: u32, speed: i64) -> Attrs {
    attrs(&[
        ("mtu", &mtu.to_string()),
        ("operstate", "up"),
        ("speed", &speed.to_string()),
        ("address", mac),
    ])
}
