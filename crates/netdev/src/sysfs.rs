//! Netdev configuration from sysfs (`<sysfs>/class/net/<if>/`): `mtu`,
//! `operstate`, `speed`, the carrier transition counters
//! (`carrier_changes`, `carrier_up_count`, `carrier_down_count`:
//! `net/core/net-sysfs.c`, from the netdev's `atomic_t` counts, so 32 bits
//! wide, against the 8 bits of the PMA `link_downed`), the bound driver, and
//! mlx5's per-priority ECN
//! enable files `ecn/roce_np/enable/N` and `ecn/roce_rp/enable/N`
//! (`drivers/net/ethernet/mellanox/mlx5/core/en_sysfs.c` in the vendor
//! driver; absent on every other driver, which is not an error).
//!
//! [`SysfsFiles`] keeps each netdev's files open between samples and reads
//! them with `pread` ([`roce_host::KeptAttr`]: one system call a value
//! instead of open, read and close); the folder listings (the `ecn` files,
//! the driver link) are taken when the netdev is first read. A kept handle
//! follows a renamed netdev, so only the name tells that the netdev asked
//! for is still the one read: the folder is looked up by name every sample,
//! unless the caller read the name from the kernel in the same sample (the
//! netdev behind an RDMA port, from its GID attributes or the device's
//! `net/` folder), which saves a path walk per netdev. A handle that fails
//! with ENODEV, ENOENT or ESTALE (the netdev was removed and created again
//! under the same name) is reopened once, and the netdev listed afresh.
//!
//! Files a driver may not have (the carrier counts, the `ecn` files) are
//! remembered absent once an open finds them missing
//! ([`KeptAttr::optional`]); every netdev is listed afresh every
//! [`crate::LAYOUT_REFRESH`], which probes them again, so a steady sample
//! makes no failing open.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use roce_host::{Einval, Io, KeptAttr, ReadBuf, ReadError, Reading, StdFs};

/// What sysfs says about one netdev.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetdevSysfs {
    pub exists: bool,
    pub mtu: Option<u64>,
    pub operstate: Option<String>,
    pub speed_mbps: Option<u64>,
    pub driver: Option<String>,
    pub carrier: crate::CarrierCounts,
}

/// Reads one file through its kept handle: its trimmed text, absent
/// (ENOENT; EINVAL, the kernel refusing the value for the link's state:
/// `speed` of a down link), or an error. `stale` is set when a kept handle
/// had gone stale.
fn read_text(file: &mut KeptAttr, io: &mut Io<'_>, stale: &mut bool) -> Reading<String> {
    file.read(io, Einval::Absent, stale)
        .map(|n| io.buf.text(n).trim().to_string())
}

fn parse_u64(path: &Path, text: Reading<String>) -> Reading<u64> {
    match text {
        Reading::Value(t) => match t.parse::<u64>() {
            Ok(v) => Reading::Value(v),
            Err(_) => Reading::Error(ReadError::parse(path, format!("not a number: {t:?}"))),
        },
        Reading::Absent => Reading::Absent,
        Reading::Error(e) => Reading::Error(e),
    }
}

/// The files of one netdev, as listed when it was first read.
#[derive(Debug)]
struct NetdevFiles {
    mtu: KeptAttr,
    operstate: KeptAttr,
    speed: KeptAttr,
    carrier_changes: KeptAttr,
    carrier_up: KeptAttr,
    carrier_down: KeptAttr,
    driver: Option<String>,
    /// `None`: no `ecn` folder (not mlx5).
    ecn: Option<Vec<(Role, u8, KeptAttr)>>,
    /// When the folder was listed.
    listed: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Np,
    Rp,
}

impl NetdevFiles {
    fn list(dir: &Path) -> Self {
        let driver = std::fs::read_link(dir.join("device/driver"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let ecn_dir = dir.join("ecn");
        let ecn = ecn_dir.is_dir().then(|| {
            let mut files = Vec::new();
            for (role, name) in [(Role::Np, "roce_np"), (Role::Rp, "roce_rp")] {
                for priority in 0u8..8 {
                    let path = ecn_dir.join(name).join("enable").join(priority.to_string());
                    files.push((role, priority, KeptAttr::optional(path)));
                }
            }
            files
        });
        NetdevFiles {
            mtu: KeptAttr::new(dir.join("mtu")),
            operstate: KeptAttr::new(dir.join("operstate")),
            speed: KeptAttr::new(dir.join("speed")),
            carrier_changes: KeptAttr::optional(dir.join("carrier_changes")),
            carrier_up: KeptAttr::optional(dir.join("carrier_up_count")),
            carrier_down: KeptAttr::optional(dir.join("carrier_down_count")),
            driver,
            ecn,
            listed: Instant::now(),
        }
    }

    fn read(
        &mut self,
        io: &mut Io<'_>,
        errors: &mut Vec<ReadError>,
        stale: &mut bool,
    ) -> NetdevSysfs {
        let mut out = NetdevSysfs {
            exists: true,
            driver: self.driver.clone(),
            ..NetdevSysfs::default()
        };
        let mtu = read_text(&mut self.mtu, io, stale);
        out.mtu = parse_u64(&self.mtu.path, mtu).value_or_record(errors);
        out.operstate = read_text(&mut self.operstate, io, stale).value_or_record(errors);
        // `speed` is -1 (SPEED_UNKNOWN) on virtual links and EINVAL when down.
        if let Some(t) = read_text(&mut self.speed, io, stale).value_or_record(errors) {
            match t.parse::<i64>() {
                Ok(v) if v > 0 => out.speed_mbps = Some(v as u64),
                Ok(_) => {}
                Err(_) => errors.push(ReadError::parse(
                    &self.speed.path,
                    format!("not a number: {t:?}"),
                )),
            }
        }
        for (file, slot) in [
            (&mut self.carrier_up, &mut out.carrier.up),
            (&mut self.carrier_down, &mut out.carrier.down),
        ] {
            let text = read_text(file, io, stale);
            *slot = parse_u64(&file.path, text).value_or_record(errors);
        }
        // carrier_changes is the sum of the two: read only where the kernel
        // counts no directions (before Linux 4.16)
        if out.carrier.up.is_none() && out.carrier.down.is_none() {
            let text = read_text(&mut self.carrier_changes, io, stale);
            out.carrier.changes =
                parse_u64(&self.carrier_changes.path, text).value_or_record(errors);
        }
        out
    }

    /// The ECN enable files, `None` where the driver has none. They are
    /// QoS configuration, read with it every `netdevs.qos_interval`, not
    /// every sample: on the NVIDIA driver each file is a firmware command
    /// (`mlx5_query_port_cong_status`), 16 a netdev.
    fn read_ecn(
        &mut self,
        io: &mut Io<'_>,
        errors: &mut Vec<ReadError>,
    ) -> Option<crate::EcnConfig> {
        let files = self.ecn.as_mut()?;
        let mut stale = false;
        let mut config = crate::EcnConfig::default();
        for (role, priority, file) in files.iter_mut() {
            let list = match role {
                Role::Np => &mut config.np,
                Role::Rp => &mut config.rp,
            };
            if let Some(t) = read_text(file, io, &mut stale).value_or_record(errors) {
                match t.as_str() {
                    "0" => list.push((*priority, false)),
                    "1" => list.push((*priority, true)),
                    _ => errors.push(ReadError::parse(
                        &file.path,
                        format!("expected 0 or 1, found {t:?}"),
                    )),
                }
            }
        }
        Some(config)
    }
}

/// Reads netdevs below a sysfs root, keeping their files open between
/// samples (see the module doc).
#[derive(Debug)]
pub struct SysfsFiles {
    sysfs: PathBuf,
    netdevs: HashMap<String, NetdevFiles>,
    buf: ReadBuf,
    /// `pread` calls since [`SysfsFiles::take_reads`] last ran.
    reads: usize,
}

impl SysfsFiles {
    pub fn new(sysfs: PathBuf) -> Self {
        SysfsFiles {
            sysfs,
            netdevs: HashMap::new(),
            buf: ReadBuf::new(),
            reads: 0,
        }
    }

    /// `pread` calls made since the last call, which resets the count.
    pub fn take_reads(&mut self) -> u64 {
        std::mem::take(&mut self.reads) as u64
    }

    /// Reads one netdev; single-file problems go to `errors`, the rest is
    /// kept. `name_current`: the name was read from the kernel this sample,
    /// so a netdev already open under it is the one it names.
    pub fn read(
        &mut self,
        netdev: &str,
        name_current: bool,
        errors: &mut Vec<ReadError>,
    ) -> NetdevSysfs {
        let dir = self.sysfs.join("class/net").join(netdev);
        let known = name_current && self.netdevs.contains_key(netdev);
        if netdev.contains('/') || netdev.is_empty() || !(known || dir.exists()) {
            self.netdevs.remove(netdev);
            return NetdevSysfs::default();
        }
        // Every file of a netdev is kept (a dozen per netdev): no budget.
        let mut io = Io::new(&StdFs, &mut self.buf, usize::MAX);
        let files = self
            .netdevs
            .entry(netdev.to_string())
            .or_insert_with(|| NetdevFiles::list(&dir));
        if files.listed.elapsed() >= crate::LAYOUT_REFRESH {
            *files = NetdevFiles::list(&dir);
        }
        let mut stale = false;
        let mut errs = Vec::new();
        let out = files.read(&mut io, &mut errs, &mut stale);
        if !stale {
            errors.extend(errs);
            self.reads += io.reads;
            return out;
        }
        // Removed (and maybe created again): list it afresh and read once
        // more, if it is there.
        if !dir.exists() {
            self.reads += io.reads;
            self.netdevs.remove(netdev);
            return NetdevSysfs::default();
        }
        let mut files = NetdevFiles::list(&dir);
        let out = files.read(&mut io, errors, &mut stale);
        self.reads += io.reads;
        self.netdevs.insert(netdev.to_string(), files);
        out
    }

    /// The ECN enable files of a netdev [`SysfsFiles::read`] read this
    /// sample (see [`NetdevFiles::read_ecn`]); `None` where it has none.
    pub fn read_ecn(
        &mut self,
        netdev: &str,
        errors: &mut Vec<ReadError>,
    ) -> Option<crate::EcnConfig> {
        let files = self.netdevs.get_mut(netdev)?;
        let mut io = Io::new(&StdFs, &mut self.buf, usize::MAX);
        let ecn = files.read_ecn(&mut io, errors);
        self.reads += io.reads;
        ecn
    }

    /// Closes the files of netdevs not in `names`.
    pub fn retain(&mut self, names: &[&str]) {
        self.netdevs.retain(|n, _| names.contains(&n.as_str()));
    }
}
