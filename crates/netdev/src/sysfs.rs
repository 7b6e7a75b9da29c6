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
//! them with `pread` (one system call a value instead of open, read and
//! close); the folder listings (the `ecn` files, the driver link) are taken
//! when the netdev is first read. A kept handle follows a renamed netdev,
//! so only the name tells that the netdev asked for is still the one read:
//! the folder is looked up by name every sample, unless the caller read the
//! name from the kernel in the same sample (the netdev behind an RDMA port,
//! from its GID attributes or the device's `net/` folder), which saves a
//! path walk per netdev. A handle that
//! fails with ENODEV or ENOENT (the netdev was removed and created again
//! under the same name) is reopened once, and the netdev listed afresh.

use std::collections::HashMap;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A file that exists but could not be read or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {msg}")]
pub struct SysfsError {
    pub path: PathBuf,
    pub msg: String,
}

/// What sysfs says about one netdev.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetdevSysfs {
    pub exists: bool,
    pub mtu: Option<u64>,
    pub operstate: Option<String>,
    pub speed_mbps: Option<u64>,
    pub driver: Option<String>,
    pub ecn: Option<crate::EcnConfig>,
    pub carrier: crate::CarrierCounts,
}

/// What a read of one file gave: its trimmed text, nothing (absent: ENOENT,
/// or EINVAL, the kernel refusing the value for the link's state, `speed`
/// of a down link), or an error.
type Read = Result<Option<String>, SysfsError>;

fn error(path: &Path, e: &std::io::Error) -> SysfsError {
    SysfsError {
        path: path.to_path_buf(),
        msg: e.to_string(),
    }
}

fn absent(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::EINVAL)
}

/// The handle went with its kernel object (netdev removed).
fn stale(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::NotFound || matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ENOENT))
}

/// One attribute file and, once opened, its handle.
#[derive(Debug)]
struct Kept {
    path: PathBuf,
    file: Option<File>,
}

impl Kept {
    fn new(path: PathBuf) -> Self {
        Kept { path, file: None }
    }

    /// Reads the value; `stale` is set when a kept handle had gone stale.
    /// `reads` counts the `pread` calls.
    fn read(&mut self, stale_seen: &mut bool, reads: &mut u64) -> Read {
        if let Some(file) = &self.file {
            *reads += 1;
            match pread_text(file) {
                Ok(text) => return Ok(Some(text)),
                Err(e) if stale(&e) => {
                    self.file = None;
                    *stale_seen = true;
                }
                Err(e) if absent(&e) => return Ok(None),
                Err(e) => return Err(error(&self.path, &e)),
            }
        }
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if absent(&e) => return Ok(None),
            Err(e) => return Err(error(&self.path, &e)),
        };
        *reads += 1;
        let result = pread_text(&file);
        self.file = Some(file);
        match result {
            Ok(text) => Ok(Some(text)),
            Err(e) if absent(&e) => Ok(None),
            Err(e) => Err(error(&self.path, &e)),
        }
    }
}

/// sysfs attributes are at most a page (`sysfs_emit`).
const PAGE: usize = 4096;

/// One `pread` at offset 0: sysfs hands out the whole value at once.
fn pread_text(file: &File) -> std::io::Result<String> {
    let mut buf = [0u8; PAGE];
    let n = file.read_at(&mut buf, 0)?;
    let text = String::from_utf8_lossy(buf.get(..n).unwrap_or(&buf));
    Ok(text.trim().to_string())
}

fn parse_u64(path: &Path, text: Option<String>) -> Result<Option<u64>, SysfsError> {
    match text {
        None => Ok(None),
        Some(t) => t.parse::<u64>().map(Some).map_err(|_| SysfsError {
            path: path.to_path_buf(),
            msg: format!("not a number: {t:?}"),
        }),
    }
}

/// The files of one netdev, as listed when it was first read.
#[derive(Debug)]
struct NetdevFiles {
    mtu: Kept,
    operstate: Kept,
    speed: Kept,
    carrier_changes: Kept,
    carrier_up: Kept,
    carrier_down: Kept,
    driver: Option<String>,
    /// `None`: no `ecn` folder (not mlx5).
    ecn: Option<Vec<(Role, u8, Kept)>>,
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
                    files.push((role, priority, Kept::new(path)));
                }
            }
            files
        });
        NetdevFiles {
            mtu: Kept::new(dir.join("mtu")),
            operstate: Kept::new(dir.join("operstate")),
            speed: Kept::new(dir.join("speed")),
            carrier_changes: Kept::new(dir.join("carrier_changes")),
            carrier_up: Kept::new(dir.join("carrier_up_count")),
            carrier_down: Kept::new(dir.join("carrier_down_count")),
            driver,
            ecn,
        }
    }

    fn read(
        &mut self,
        errors: &mut Vec<SysfsError>,
        stale: &mut bool,
        reads: &mut u64,
    ) -> NetdevSysfs {
        let mut out = NetdevSysfs {
            exists: true,
            driver: self.driver.clone(),
            ..NetdevSysfs::default()
        };
        match self
            .mtu
            .read(stale, reads)
            .and_then(|t| parse_u64(&self.mtu.path, t))
        {
            Ok(v) => out.mtu = v,
            Err(e) => errors.push(e),
        }
        match self.operstate.read(stale, reads) {
            Ok(v) => out.operstate = v,
            Err(e) => errors.push(e),
        }
        // `speed` is -1 (SPEED_UNKNOWN) on virtual links and EINVAL when down.
        match self.speed.read(stale, reads) {
            Ok(Some(t)) => match t.parse::<i64>() {
                Ok(v) if v > 0 => out.speed_mbps = Some(v as u64),
                Ok(_) => {}
                Err(_) => errors.push(SysfsError {
                    path: self.speed.path.clone(),
                    msg: format!("not a number: {t:?}"),
                }),
            },
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
        for (file, slot) in [
            (&mut self.carrier_changes, &mut out.carrier.changes),
            (&mut self.carrier_up, &mut out.carrier.up),
            (&mut self.carrier_down, &mut out.carrier.down),
        ] {
            match file
                .read(stale, reads)
                .and_then(|t| parse_u64(&file.path, t))
            {
                Ok(v) => *slot = v,
                Err(e) => errors.push(e),
            }
        }
        if let Some(files) = &mut self.ecn {
            let mut config = crate::EcnConfig::default();
            for (role, priority, file) in files.iter_mut() {
                let list = match role {
                    Role::Np => &mut config.np,
                    Role::Rp => &mut config.rp,
                };
                match file.read(stale, reads) {
                    Ok(Some(t)) => match t.as_str() {
                        "0" => list.push((*priority, false)),
                        "1" => list.push((*priority, true)),
                        _ => errors.push(SysfsError {
                            path: file.path.clone(),
                            msg: format!("expected 0 or 1, found {t:?}"),
                        }),
                    },
                    Ok(None) => {}
                    Err(e) => errors.push(e),
                }
            }
            out.ecn = Some(config);
        }
        out
    }
}

/// Reads netdevs below a sysfs root, keeping their files open between
/// samples (see the module doc).
#[derive(Debug)]
pub struct SysfsFiles {
    sysfs: PathBuf,
    netdevs: HashMap<String, NetdevFiles>,
    /// `pread` calls since [`SysfsFiles::take_reads`] last ran.
    reads: u64,
}

impl SysfsFiles {
    pub fn new(sysfs: PathBuf) -> Self {
        SysfsFiles {
            sysfs,
            netdevs: HashMap::new(),
            reads: 0,
        }
    }

    /// `pread` calls made since the last call, which resets the count.
    pub fn take_reads(&mut self) -> u64 {
        std::mem::take(&mut self.reads)
    }

    /// Reads one netdev; single-file problems go to `errors`, the rest is
    /// kept. `name_current`: the name was read from the kernel this sample,
    /// so a netdev already open under it is the one it names.
    pub fn read(
        &mut self,
        netdev: &str,
        name_current: bool,
        errors: &mut Vec<SysfsError>,
    ) -> NetdevSysfs {
        let dir = self.sysfs.join("class/net").join(netdev);
        let known = name_current && self.netdevs.contains_key(netdev);
        if netdev.contains('/') || netdev.is_empty() || !(known || dir.exists()) {
            self.netdevs.remove(netdev);
            return NetdevSysfs::default();
        }
        let files = self
            .netdevs
            .entry(netdev.to_string())
            .or_insert_with(|| NetdevFiles::list(&dir));
        let mut stale = false;
        let mut errs = Vec::new();
        let out = files.read(&mut errs, &mut stale, &mut self.reads);
        if !stale {
            errors.extend(errs);
            return out;
        }
        // Removed (and maybe created again): list it afresh and read once
        // more, if it is there.
        if !dir.exists() {
            self.netdevs.remove(netdev);
            return NetdevSysfs::default();
        }
        let mut files = NetdevFiles::list(&dir);
        let out = files.read(errors, &mut stale, &mut self.reads);
        self.netdevs.insert(netdev.to_string(), files);
        out
    }

    /// Closes the files of netdevs not in `names`.
    pub fn retain(&mut self, names: &[&str]) {
        self.netdevs.retain(|n, _| names.contains(&n.as_str()));
    }
}
