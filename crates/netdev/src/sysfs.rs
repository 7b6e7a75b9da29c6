//! Netdev configuration from sysfs (`<sysfs>/class/net/<if>/`): `mtu`,
//! `operstate`, `speed`, the bound driver, and mlx5's per-priority ECN
//! enable files `ecn/roce_np/enable/N` and `ecn/roce_rp/enable/N`
//! (`drivers/net/ethernet/mellanox/mlx5/core/en_sysfs.c` in the vendor
//! driver; absent on every other driver, which is not an error).

use std::io::ErrorKind;
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
}

/// Reads a small text file: `Ok(None)` when absent (ENOENT) or when the
/// kernel refuses the value for the link's state (EINVAL: `speed` of a
/// down link).
fn read_text(path: &Path) -> Result<Option<String>, SysfsError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(SysfsError {
            path: path.to_path_buf(),
            msg: e.to_string(),
        }),
    }
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

/// Reads one netdev; single-file problems go to `errors`, the rest is kept.
pub fn read_netdev(sysfs: &Path, netdev: &str, errors: &mut Vec<SysfsError>) -> NetdevSysfs {
    let dir = sysfs.join("class/net").join(netdev);
    let mut out = NetdevSysfs {
        exists: dir.exists(),
        ..NetdevSysfs::default()
    };
    if !out.exists || netdev.contains('/') {
        out.exists = false;
        return out;
    }
    let mtu_path = dir.join("mtu");
    match read_text(&mtu_path).and_then(|t| parse_u64(&mtu_path, t)) {
        Ok(v) => out.mtu = v,
        Err(e) => errors.push(e),
    }
    match read_text(&dir.join("operstate")) {
        Ok(v) => out.operstate = v,
        Err(e) => errors.push(e),
    }
    // `speed` is -1 (SPEED_UNKNOWN) on virtual links and EINVAL when down.
    let speed_path = dir.join("speed");
    match read_text(&speed_path) {
        Ok(Some(t)) => match t.parse::<i64>() {
            Ok(v) if v > 0 => out.speed_mbps = Some(v as u64),
            Ok(_) => {}
            Err(_) => errors.push(SysfsError {
                path: speed_path,
                msg: format!("not a number: {t:?}"),
            }),
        },
        Ok(None) => {}
        Err(e) => errors.push(e),
    }
    out.driver = std::fs::read_link(dir.join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    out.ecn = read_ecn(&dir.join("ecn"), errors);
    out
}

/// Reads `ecn/roce_{np,rp}/enable/0..7`; `None` when there is no `ecn`
/// folder.
pub fn read_ecn(ecn_dir: &Path, errors: &mut Vec<SysfsError>) -> Option<crate::EcnConfig> {
    if !ecn_dir.is_dir() {
        return None;
    }
    let mut config = crate::EcnConfig::default();
    for (role, list) in [("roce_np", &mut config.np), ("roce_rp", &mut config.rp)] {
        for priority in 0u8..8 {
            let path = ecn_dir.join(role).join("enable").join(priority.to_string());
            match read_text(&path) {
                Ok(Some(t)) => match t.as_str() {
                    "0" => list.push((priority, false)),
                    "1" => list.push((priority, true)),
                    _ => errors.push(SysfsError {
                        path,
                        msg: format!("expected 0 or 1, found {t:?}"),
                    }),
                },
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
    }
    Some(config)
}
