//! One sample of the physical layer and device health of the netdevs
//! behind RDMA ports and of the GPUs: FEC ([`crate::fec`]), the pluggable
//! module ([`crate::module`], on its own slow cadence), PCIe AER of the
//! NIC's and each GPU's PCI function and of the bridge ports on their way
//! to the root ([`crate::aer`]), and the devlink health reporters of the
//! NICs ([`crate::devlink`]). Each kernel part is
//! optional (off, or replayed on fixture trees), each netdev is read on its
//! own, and what a driver does not offer is absent, never 0.
//!
//! What a netdev's or GPU's PCI function is, the bridge ports above it,
//! and which of their AER files exist, is learned once (a `realpath` of
//! the netdev's `device` link or of the GPU's `bus/pci/devices` entry: a
//! `readlink` per path component; the bridges are the PCI functions on
//! that path, as the kernel nests a device's folder in its bridge's) and
//! kept, with the AER files open: a steady sample is one `pread` per AER
//! file that exists and nothing for those that do not.
//!
//! A PCIe error is counted by the device whose receiver saw it: errors on
//! the TLPs a NIC sends (its DMA writes, GPUDirect RDMA into GPU memory
//! among them) land on the bridge port above it, not on the NIC. So the
//! bridge ports of every NIC's and GPU's path are read too, each once
//! however many paths share it, with the netdevs and GPUs it serves. It is learned again when the RDMA port behind the
//! netdev changes, when a kept file goes stale (the function was removed),
//! and every [`crate::LAYOUT_REFRESH`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::aer::{AerFiles, PciAer};
use crate::devlink::{HealthRead, HealthReporter};
use crate::fec::{FecInfo, FecRead};
use crate::module::{read_module, EepromRead, ModuleInfo};
use crate::reader::NetdevToRead;
use crate::RdmaPortRef;
use roce_host::{HostError, Io, ReadBuf, StdFs};

/// Everything the physical-layer reader read in one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhysSnapshot {
    pub netdevs: Vec<PhysNetdev>,
    /// PCIe AER of each GPU given to the reader, in the order given.
    pub gpus: Vec<PciHealth>,
    /// PCIe AER of the bridge ports (root ports, switch ports) on the
    /// NICs' and GPUs' paths, each once, by address.
    pub bridges: Vec<BridgeHealth>,
    /// Health reporters of the NICs' PCI functions; `None` when devlink was
    /// not read (off, or the kernel has none).
    pub reporters: Option<Vec<NicReporter>>,
}

/// One netdev's physical layer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhysNetdev {
    pub name: String,
    pub rdma: Option<RdmaPortRef>,
    /// PCI address of the netdev's device (`device` link), if PCI.
    pub pci: Option<String>,
    /// `None`: not read, or the driver has no FEC (`FEC_GET` EOPNOTSUPP).
    pub fec: Option<FecInfo>,
    /// The module as last read (modules are read every
    /// [`PhysOptions::module_interval`]); `None`: not read or no module.
    pub module: Option<ModuleInfo>,
    /// PCIe AER of the NIC's PCI function.
    pub aer: PciAer,
}

/// One GPU's PCIe health.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciHealth {
    /// PCI address ("0000:18:00.0").
    pub pci: String,
    pub aer: PciAer,
}

/// A bridge port on the PCIe path of NICs or GPUs: what it serves and its
/// AER counters (absent where the port has no AER capability).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeHealth {
    /// PCI address ("0000:16:02.0").
    pub pci: String,
    /// The netdevs whose NIC sits below the port, in the order read.
    pub netdevs: Vec<String>,
    /// The GPUs below the port (PCI addresses), in the order given.
    pub gpus: Vec<String>,
    /// The port's own link leads to those NICs or GPUs themselves (it is
    /// their upstream port, which counts the errors of what they send),
    /// not to another bridge.
    pub endpoint_link: bool,
    pub aer: PciAer,
}

/// A health reporter of a NIC function, with the netdevs it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicReporter {
    /// The first target netdev on the reporter's PCI function.
    pub netdev: String,
    pub reporter: HealthReporter,
}

/// Reader settings that do not change between samples.
#[derive(Debug, Clone)]
pub struct PhysOptions {
    /// `--path.sysfs`.
    pub sysfs: PathBuf,
    /// How often a module's EEPROM is read (slow I²C devices).
    pub module_interval: Duration,
}

/// Kernel requests one [`PhysReader::read`] made, per part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhysCalls {
    pub fec: u64,
    /// Half pages of module EEPROM read.
    pub eeprom: u64,
    pub devlink: u64,
    /// `pread`s of AER files.
    pub aer_files: u64,
}

/// What was learned of one netdev's PCI function.
struct NetdevLayout {
    learned_at: Duration,
    /// The RDMA port the netdev backed when it was learned: another one
    /// (the netdev name moved to another device) is learned again.
    rdma: Option<RdmaPortRef>,
    /// The PCI address of the function, if PCI.
    pci: Option<String>,
    aer: Option<AerFiles>,
    /// The bridge ports above the function, root port first.
    bridges: Vec<Bridge>,
}

/// What was learned of one GPU's PCI function.
struct GpuLayout {
    learned_at: Duration,
    aer: AerFiles,
    /// The bridge ports above the function, root port first.
    bridges: Vec<Bridge>,
}

/// A bridge port on a learned path: its address and sysfs folder.
#[derive(Clone)]
struct Bridge {
    pci: String,
    dir: PathBuf,
}

/// What was learned of one bridge port: its AER files, kept open.
struct BridgeLayout {
    learned_at: Duration,
    aer: AerFiles,
}

struct Module {
    read_at: Duration,
    info: Option<ModuleInfo>,
}

/// Counts the half pages read through it.
struct CountedEeprom<'a> {
    io: &'a mut dyn EepromRead,
    calls: &'a mut u64,
}

impl EepromRead for CountedEeprom<'_> {
    fn read_half(
        &mut self,
        netdev: &str,
        page: crate::module::HalfPage,
    ) -> Result<Option<Vec<u8>>, crate::NetdevError> {
        *self.calls += 1;
        self.io.read_half(netdev, page)
    }
}

pub struct PhysReader {
    options: PhysOptions,
    fec: Option<Box<dyn FecRead>>,
    eeprom: Option<Box<dyn EepromRead>>,
    health: Option<Box<dyn HealthRead>>,
    modules: HashMap<String, Module>,
    calls: PhysCalls,
    netdev_layouts: HashMap<String, NetdevLayout>,
    gpu_layouts: HashMap<String, GpuLayout>,
    bridge_layouts: HashMap<String, BridgeLayout>,
    buf: ReadBuf,
}

fn is_pci_address(name: &str) -> bool {
    // dddd:bb:dd.f
    let b = name.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// The PCI function behind a netdev's `device` link, with its address: the
/// device itself (mlx5, bnxt_en, ice), or its parent for drivers whose
/// netdev hangs off a bus device of their own (virtio-net: `virtio0` under
/// the PCI function).
fn pci_function(device_link: &Path) -> Option<(String, PathBuf)> {
    let dev = std::fs::canonicalize(device_link).ok()?;
    let found = [Some(dev.as_path()), dev.parent()]
        .into_iter()
        .flatten()
        .find_map(|p| {
            let name = p.file_name()?.to_str()?;
            is_pci_address(name).then(|| (name.to_string(), p.to_path_buf()))
        });
    found
}

/// The bridge ports above the PCI function whose canonical sysfs folder is
/// `function`, root port first: the PCI functions among its ancestors
/// (`/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/<fn>`).
fn bridges_above(function: &Path) -> Vec<Bridge> {
    let mut out: Vec<Bridge> = function
        .ancestors()
        .skip(1)
        .map_while(|p| {
            let name = p.file_name()?.to_str()?;
            is_pci_address(name).then(|| Bridge {
                pci: name.to_string(),
                dir: p.to_path_buf(),
            })
        })
        .collect();
    out.reverse();
    out
}

impl PhysReader {
    /// A reader with only the sysfs parts (AER); add the kernel parts with
    /// the `with_*` methods.
    pub fn new(options: PhysOptions) -> Self {
        PhysReader {
            options,
            fec: None,
            eeprom: None,
            health: None,
            modules: HashMap::new(),
            calls: PhysCalls::default(),
            netdev_layouts: HashMap::new(),
            gpu_layouts: HashMap::new(),
            bridge_layouts: HashMap::new(),
            buf: ReadBuf::new(),
        }
    }

    pub fn with_fec(mut self, fec: Box<dyn FecRead>) -> Self {
        self.fec = Some(fec);
        self
    }

    pub fn with_eeprom(mut self, eeprom: Box<dyn EepromRead>) -> Self {
        self.eeprom = Some(eeprom);
        self
    }

    pub fn with_health(mut self, health: Box<dyn HealthRead>) -> Self {
        self.health = Some(health);
        self
    }

    /// What the last [`PhysReader::read`] asked.
    pub fn last_calls(&self) -> PhysCalls {
        self.calls
    }

    /// The bridge ports on the learned paths of `targets` and `gpus`, each
    /// read once, with what it serves; their AER files are kept like the
    /// functions' and learned again on the same occasions.
    fn read_bridges(
        layouts: (&HashMap<String, NetdevLayout>, &HashMap<String, GpuLayout>),
        bridge_layouts: &mut HashMap<String, BridgeLayout>,
        targets: &[NetdevToRead],
        gpus: &[String],
        now: Duration,
        io: &mut Io<'_>,
        errors: &mut Vec<HostError>,
    ) -> Vec<BridgeHealth> {
        let mut files = Vec::new();
        let mut served: BTreeMap<String, (PathBuf, BridgeHealth)> = BTreeMap::new();
        let mut serve = |path: &[Bridge], netdev: Option<&str>, gpu: Option<&str>| {
            for (i, b) in path.iter().enumerate() {
                let (_, h) = served.entry(b.pci.clone()).or_insert_with(|| {
                    (
                        b.dir.clone(),
                        BridgeHealth {
                            pci: b.pci.clone(),
                            ..BridgeHealth::default()
                        },
                    )
                });
                if let Some(n) = netdev.filter(|n| !h.netdevs.iter().any(|x| x == n)) {
                    h.netdevs.push(n.to_string());
                }
                if let Some(g) = gpu.filter(|g| !h.gpus.iter().any(|x| x == g)) {
                    h.gpus.push(g.to_string());
                }
                h.endpoint_link |= i + 1 == path.len();
            }
        };
        for t in targets {
            if let Some(l) = layouts.0.get(&t.name) {
                serve(&l.bridges, Some(&t.name), None);
            }
        }
        for g in gpus {
            if let Some(l) = layouts.1.get(g) {
                serve(&l.bridges, None, Some(g));
            }
        }
        let due = |learned_at: Duration| now.saturating_sub(learned_at) >= crate::LAYOUT_REFRESH;
        let mut out = Vec::with_capacity(served.len());
        for (pci, (dir, mut health)) in served {
            let learn = || BridgeLayout {
                learned_at: now,
                aer: AerFiles::new(&dir),
            };
            let layout = bridge_layouts.entry(pci.clone()).or_insert_with(learn);
            if due(layout.learned_at) {
                *layout = learn();
            }
            let mut stale = false;
            health.aer = layout.aer.read(io, &mut files, &mut stale);
            errors.extend(files.drain(..).map(HostError::File));
            if stale {
                bridge_layouts.remove(&pci);
            }
            out.push(health);
        }
        bridge_layouts.retain(|pci, _| out.iter().any(|b| &b.pci == pci));
        out
    }

    /// Reads every target netdev and every GPU (PCI addresses). `now` is
    /// the sample's monotonic time: a module is read again once
    /// `module_interval` has passed since its last read.
    pub fn read(
        &mut self,
        targets: &[NetdevToRead],
        gpus: &[String],
        now: Duration,
        errors: &mut Vec<HostError>,
    ) -> PhysSnapshot {
        let mut files = Vec::new();
        self.calls = PhysCalls::default();
        let mut out = PhysSnapshot::default();
        let net = self.options.sysfs.join("class/net");
        // AER files are few and kept for as long as their netdev or GPU is
        // read: no open-file budget.
        let mut io = Io::new(&StdFs, &mut self.buf, usize::MAX);
        let due = |learned_at: Duration| now.saturating_sub(learned_at) >= crate::LAYOUT_REFRESH;
        for target in targets {
            if target.name.is_empty() || target.name.contains('/') || target.name.starts_with('.') {
                continue;
            }
            let known = self
                .netdev_layouts
                .get(&target.name)
                .is_some_and(|l| l.rdma == target.rdma && !due(l.learned_at));
            if !known {
                let function = pci_function(&net.join(&target.name).join("device"));
                self.netdev_layouts.insert(
                    target.name.clone(),
                    NetdevLayout {
                        learned_at: now,
                        rdma: target.rdma.clone(),
                        pci: function.as_ref().map(|(a, _)| a.clone()),
                        aer: function.as_ref().map(|(_, dir)| AerFiles::new(dir)),
                        bridges: function
                            .as_ref()
                            .map(|(_, dir)| bridges_above(dir))
                            .unwrap_or_default(),
                    },
                );
            }
            let mut n = PhysNetdev {
                name: target.name.clone(),
                rdma: target.rdma.clone(),
                ..PhysNetdev::default()
            };
            if let Some(layout) = self.netdev_layouts.get_mut(&target.name) {
                n.pci = layout.pci.clone();
                if let Some(aer) = &mut layout.aer {
                    let mut stale = false;
                    n.aer = aer.read(&mut io, &mut files, &mut stale);
                    errors.extend(files.drain(..).map(HostError::File));
                    if stale {
                        self.netdev_layouts.remove(&target.name);
                    }
                }
            }
            if let Some(fec) = self.fec.as_deref_mut() {
                self.calls.fec += 1;
                match fec.read_fec(&target.name) {
                    Ok(f) => n.fec = f,
                    Err(e) => errors.push(HostError::request(format!("{}: FEC", target.name), e)),
                }
            }
            if let Some(io) = self.eeprom.as_deref_mut() {
                let due = self
                    .modules
                    .get(&target.name)
                    .is_none_or(|m| now.saturating_sub(m.read_at) >= self.options.module_interval);
                if due {
                    let mut counted = CountedEeprom {
                        io,
                        calls: &mut self.calls.eeprom,
                    };
                    let info = match read_module(&mut counted, &target.name) {
                        Ok(m) => m,
                        Err(e) => {
                            errors.push(HostError::request(
                                format!("{}: module EEPROM", target.name),
                                e,
                            ));
                            None
                        }
                    };
                    self.modules
                        .insert(target.name.clone(), Module { read_at: now, info });
                }
                n.module = self.modules.get(&target.name).and_then(|m| m.info.clone());
            }
            out.netdevs.push(n);
        }
        self.modules
            .retain(|name, _| targets.iter().any(|t| &t.name == name));
        self.netdev_layouts
            .retain(|name, _| targets.iter().any(|t| &t.name == name));
        let devices = self.options.sysfs.join("bus/pci/devices");
        for gpu in gpus {
            if gpu.is_empty() || gpu.contains('/') || gpu.starts_with('.') {
                continue;
            }
            let learn = || {
                let entry = devices.join(gpu);
                // The GPU's folder under devices/, nested in its bridges'.
                let bridges = std::fs::canonicalize(&entry)
                    .map(|dir| bridges_above(&dir))
                    .unwrap_or_default();
                GpuLayout {
                    learned_at: now,
                    aer: AerFiles::new(&entry),
                    bridges,
                }
            };
            let layout = self.gpu_layouts.entry(gpu.clone()).or_insert_with(learn);
            if due(layout.learned_at) {
                *layout = learn();
            }
            let mut stale = false;
            out.gpus.push(PciHealth {
                pci: gpu.clone(),
                aer: layout.aer.read(&mut io, &mut files, &mut stale),
            });
            errors.extend(files.drain(..).map(HostError::File));
            if stale {
                self.gpu_layouts.remove(gpu);
            }
        }
        self.gpu_layouts.retain(|g, _| gpus.contains(g));
        out.bridges = Self::read_bridges(
            (&self.netdev_layouts, &self.gpu_layouts),
            &mut self.bridge_layouts,
            targets,
            gpus,
            now,
            &mut io,
            errors,
        );
        self.calls.aer_files = io.reads as u64;
        if let Some(health) = self.health.as_deref_mut() {
            self.calls.devlink += 1;
            match health.read_reporters(errors) {
                Ok(Some(all)) => {
                    let mut mine = Vec::new();
                    for r in all {
                        let owner = out.netdevs.iter().find(|n| {
                            r.bus == "pci" && n.pci.as_deref() == Some(r.device.as_str())
                        });
                        if let Some(owner) = owner {
                            mine.push(NicReporter {
                                netdev: owner.name.clone(),
                                reporter: r,
                            });
                        }
                    }
                    out.reporters = Some(mine);
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        out
    }
}
