//! What the host itself marks its RoCE packets with, where the kernel says:
//! the rdma_cm default ToS of the RDMA port behind a netdev and the DSCP and
//! 802.1p priority mlx5 puts on the CNPs it sends.
//!
//! - `<sysfs>/kernel/config/rdma_cm/<dev>/ports/<port>/default_roce_tos`:
//!   configfs (`drivers/infiniband/core/cma_configfs.c`). The `<dev>` folder
//!   exists only once an administrator created it (`mkdir`), and configfs
//!   is mounted under `/sys/kernel/config`; the value is the whole IP ToS
//!   byte (DSCP << 2 | ECN) printed as `%u`, used by rdma_cm connections
//!   that set no ToS of their own.
//! - `<sysfs>/class/net/<if>/ecn/roce_np/cnp_dscp` and `cnp_802p_prio`:
//!   the mlx5 driver's ECN folder (NVIDIA's driver; absent upstream and on
//!   other drivers), read once with the DCQCN parameters and taken from
//!   them ([`cnp_marking`]); upstream's debugfs `np_cnp_dscp` where they
//!   are not there.
//! - `<sysfs>/class/infiniband/<dev>/tc/<port>/traffic_class`: MLNX_OFED's
//!   mlx5_ib (`traffic_class_show`) prints `Global tclass=%d` on its first
//!   line once an administrator set a port-wide traffic class (it then
//!   overrides the one each QP asks for, NCCL's included), followed by any
//!   per-destination rules; the file is empty when none is set and absent
//!   on the upstream driver.
//!
//! - DCQCN parameters ([`read_dcqcn`]): NVIDIA's driver (MLNX_OFED
//!   `en_sysfs.c`) puts them next to the enable files, as
//!   `ecn/roce_rp/<name>` and `ecn/roce_np/<name>` ([`SYSFS_RP`],
//!   [`SYSFS_NP`]); upstream mlx5_ib (`drivers/infiniband/hw/mlx5/cong.c`,
//!   `mlx5_ib_dbg_cc_name`) has them only in debugfs,
//!   `<debugfs>/mlx5/<pci>/cc_params/<name>` ([`DEBUGFS_CC_PARAMS`]), files of
//!   mode 0600 below a debugfs that is 0700: readable by root only, so an
//!   unprivileged exporter sees none of them (not an error). Each file
//!   holds one decimal number (`%d\n`); reading it queries the firmware
//!   (`QUERY_CONG_PARAMS`).
//!
//! A file that is absent (or configfs not mounted) is `None`, never 0: a
//! value the kernel did not give is not a value.

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use roce_host::errno::is_absent;
use roce_host::ReadError;

use crate::RdmaPortRef;

/// The QoS marking the host's own configuration gives RoCE traffic on one
/// netdev.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoceQos {
    /// rdma_cm's default ToS byte for the RDMA port behind the netdev.
    pub rdma_cm_tos: Option<u8>,
    /// MLNX_OFED's port-wide traffic class (`tc/<port>/traffic_class`,
    /// `Global tclass=`), the ToS byte every RoCE QP of the port sends.
    pub ofed_tclass: Option<u8>,
    /// DSCP of the CNPs the NIC sends as notification point (mlx5).
    pub cnp_dscp: Option<u8>,
    /// 802.1p priority of those CNPs (mlx5).
    pub cnp_prio: Option<u8>,
}

/// The DCQCN role a parameter belongs to: the notification point (the
/// receiver that sends CNPs) or the reaction point (the sender that slows
/// down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcRole {
    Np,
    Rp,
}

impl CcRole {
    pub fn as_str(self) -> &'static str {
        match self {
            CcRole::Np => "np",
            CcRole::Rp => "rp",
        }
    }
}

/// Where a DCQCN parameter was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcSource {
    /// `/sys/class/net/<if>/ecn/roce_{np,rp}/<name>` (MLNX_OFED).
    Sysfs,
    /// `<debugfs>/mlx5/<pci>/cc_params/<name>` (upstream mlx5_ib).
    Debugfs,
}

impl CcSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CcSource::Sysfs => "sysfs",
            CcSource::Debugfs => "debugfs",
        }
    }
}

/// One DCQCN parameter, under the name the kernel gives its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcqcnParam {
    pub role: CcRole,
    pub name: &'static str,
    pub value: u32,
    pub source: CcSource,
}

/// MLNX_OFED's reaction point files (`mlx5e_fill_rp_attributes`).
pub const SYSFS_RP: &[&str] = &[
    "clamp_tgt_rate",
    "clamp_tgt_rate_after_time_inc",
    "rpg_time_reset",
    "rpg_byte_reset",
    "rpg_threshold",
    "rpg_max_rate",
    "rpg_ai_rate",
    "rpg_hai_rate",
    "rpg_gd",
    "rpg_min_dec_fac",
    "rpg_min_rate",
    "rate_to_set_on_first_cnp",
    "dce_tcp_g",
    "dce_tcp_rtt",
    "rate_reduce_monitor_period",
    "initial_alpha_value",
];

/// MLNX_OFED's notification point files (`mlx5e_fill_np_attributes`).
pub const SYSFS_NP: &[&str] = &["min_time_between_cnps", "cnp_dscp", "cnp_802p_prio"];

/// Upstream mlx5_ib's debugfs `cc_params` files (`mlx5_ib_dbg_cc_name`);
/// the role is the name's prefix. Older kernels lack `rp_max_rate` and
/// `np_min_time_between_cnps` (absent, not an error).
pub const DEBUGFS_CC_PARAMS: &[&str] = &[
    "rp_clamp_tgt_rate",
    "rp_clamp_tgt_rate_ati",
    "rp_time_reset",
    "rp_byte_reset",
    "rp_threshold",
    "rp_ai_rate",
    "rp_max_rate",
    "rp_hai_rate",
    "rp_min_dec_fac",
    "rp_min_rate",
    "rp_rate_to_set_on_first_cnp",
    "rp_dce_tcp_g",
    "rp_dce_tcp_rtt",
    "rp_rate_reduce_monitor_period",
    "rp_initial_alpha_value",
    "rp_gd",
    "np_min_time_between_cnps",
    "np_cnp_dscp",
    "np_cnp_prio_mode",
    "np_cnp_prio",
];

/// Reads the DCQCN parameters of `netdev` below `sysfs`: MLNX_OFED's sysfs
/// files where the driver has them, else upstream's debugfs `cc_params`
/// of the netdev's PCI function when readable (root). Absent files are
/// left out; a file that exists but does not hold a number goes to
/// `errors`.
pub fn read_dcqcn(
    sysfs: &Path,
    netdev: &str,
    errors: &mut Vec<ReadError>,
    reads: &mut u64,
) -> Vec<DcqcnParam> {
    let mut out = Vec::new();
    if netdev.contains('/') || netdev.starts_with('.') {
        return out;
    }
    let dev = sysfs.join("class/net").join(netdev);
    for (role, dir, names) in [
        (CcRole::Rp, "ecn/roce_rp", SYSFS_RP),
        (CcRole::Np, "ecn/roce_np", SYSFS_NP),
    ] {
        let dir = dev.join(dir);
        if !dir.is_dir() {
            continue;
        }
        for &name in names {
            if let Some(value) = number_u32(&dir.join(name), errors, reads, false) {
                out.push(DcqcnParam {
                    role,
                    name,
                    value,
                    source: CcSource::Sysfs,
                });
            }
        }
    }
    if !out.is_empty() {
        return out;
    }
    let Some(dir) = debugfs_cc_params(sysfs, netdev) else {
        return out;
    };
    // Unprivileged: debugfs itself refuses (0700), one failed stat.
    if !dir.is_dir() {
        return out;
    }
    for &name in DEBUGFS_CC_PARAMS {
        let role = if name.starts_with("np_") {
            CcRole::Np
        } else {
            CcRole::Rp
        };
        if let Some(value) = number_u32(&dir.join(name), errors, reads, true) {
            out.push(DcqcnParam {
                role,
                name,
                value,
                source: CcSource::Debugfs,
            });
        }
    }
    out
}

/// One decimal file holding a `u32` (printed `%d`, so a value above
/// `i32::MAX` shows negative): `None` when absent, or when `quiet_denied`
/// and the kernel refuses (debugfs without privileges).
fn number_u32(
    path: &Path,
    errors: &mut Vec<ReadError>,
    reads: &mut u64,
    quiet_denied: bool,
) -> Option<u32> {
    let text = small_file(path, errors, reads, quiet_denied)?;
    let t = text.trim();
    match t.parse::<i64>() {
        Ok(v) if (0..=i64::from(u32::MAX)).contains(&v) => u32::try_from(v).ok(),
        Ok(v) if v < 0 && v >= i64::from(i32::MIN) => Some(v as i32 as u32),
        _ => {
            errors.push(ReadError::parse(
                path,
                format!("expected a number, found {t:?}"),
            ));
            None
        }
    }
}

/// Reads the QoS files of the RDMA port `rdma` below `sysfs` (the CNP
/// marking comes from the DCQCN parameters, [`cnp_marking`]). Problems
/// with a file that exists go to `errors`; `reads` counts the files read.
pub fn read(
    sysfs: &Path,
    rdma: Option<&RdmaPortRef>,
    errors: &mut Vec<ReadError>,
    reads: &mut u64,
) -> RoceQos {
    let mut out = RoceQos::default();
    if let Some(r) = rdma {
        if !r.device.contains('/') && !r.device.starts_with('.') {
            let path = sysfs
                .join("kernel/config/rdma_cm")
                .join(&r.device)
                .join("ports")
                .join(r.port.to_string())
                .join("default_roce_tos");
            out.rdma_cm_tos = number(&path, 255, errors, reads);
            let path = sysfs
                .join("class/infiniband")
                .join(&r.device)
                .join("tc")
                .join(r.port.to_string())
                .join("traffic_class");
            out.ofed_tclass = global_tclass(&path, errors, reads);
        }
    }
    out
}

/// Upstream mlx5_ib's DCQCN folder for `netdev`: the PCI function behind
/// the netdev names it.
fn debugfs_cc_params(sysfs: &Path, netdev: &str) -> Option<PathBuf> {
    let dev = sysfs.join("class/net").join(netdev);
    let pci = std::fs::canonicalize(dev.join("device")).ok()?;
    let pci = pci.file_name()?.to_string_lossy().into_owned();
    Some(sysfs.join("kernel/debug/mlx5").join(pci).join("cc_params"))
}

/// The DSCP and 802.1p priority mlx5 marks its CNPs with, from the DCQCN
/// parameters [`read_dcqcn`] read (each file read once, as each read is a
/// firmware query): NVIDIA's `ecn/roce_np/cnp_dscp` and `cnp_802p_prio`,
/// else upstream's debugfs `np_cnp_dscp`. A value out of its range is an
/// error on its file and no value.
pub fn cnp_marking(
    sysfs: &Path,
    netdev: &str,
    dcqcn: &[DcqcnParam],
    errors: &mut Vec<ReadError>,
) -> (Option<u8>, Option<u8>) {
    let np = sysfs.join("class/net").join(netdev).join("ecn/roce_np");
    let mut marking = |name: &str, max: u8| {
        let p = dcqcn
            .iter()
            .find(|p| p.name == name && p.role == CcRole::Np)?;
        match u8::try_from(p.value).ok().filter(|v| *v <= max) {
            Some(v) => Some(v),
            None => {
                let file = match p.source {
                    CcSource::Sysfs => np.join(name),
                    CcSource::Debugfs => debugfs_cc_params(sysfs, netdev)
                        .unwrap_or_default()
                        .join(name),
                };
                errors.push(ReadError::parse(
                    &file,
                    format!(
                        "expected a number from 0 to {max}, found \"{}\"",
                        p.value as i32
                    ),
                ));
                None
            }
        }
    };
    let dscp = marking("cnp_dscp", 63).or_else(|| marking("np_cnp_dscp", 63));
    let prio = marking("cnp_802p_prio", 7);
    (dscp, prio)
}

/// MLNX_OFED's `traffic_class`: the value of its `Global tclass=<n>` line;
/// `None` when the file is absent, empty (no global class set) or holds
/// only per-destination rules.
fn global_tclass(path: &Path, errors: &mut Vec<ReadError>, reads: &mut u64) -> Option<u8> {
    let mut file = match roce_host::fs::open_regular(path) {
        Ok(f) => f,
        Err(e) if is_absent(&e) => return None,
        Err(e) => {
            errors.push(crate::io_error(path, &e));
            return None;
        }
    };
    *reads += 1;
    let mut text = String::new();
    if let Err(e) = file.by_ref().take(4096).read_to_string(&mut text) {
        errors.push(crate::io_error(path, &e));
        return None;
    }
    let value = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Global tclass="))?;
    match value.trim().parse::<u8>() {
        Ok(v) => Some(v),
        Err(_) => {
            errors.push(ReadError::parse(
                path,
                format!("expected Global tclass=<0..255>, found {value:?}"),
            ));
            None
        }
    }
}

/// The first 64 bytes of a small file: `None` when absent, or when
/// `quiet_denied` and the kernel refuses (debugfs without privileges), or
/// with an error when it cannot be opened or read (the firmware query
/// behind a file can fail: EOPNOTSUPP on a function without congestion
/// control).
fn small_file(
    path: &Path,
    errors: &mut Vec<ReadError>,
    reads: &mut u64,
    quiet_denied: bool,
) -> Option<String> {
    let mut file = match roce_host::fs::open_regular(path) {
        Ok(f) => f,
        Err(e) if is_absent(&e) => return None,
        Err(e) if quiet_denied && e.kind() == ErrorKind::PermissionDenied => return None,
        Err(e) => {
            errors.push(crate::io_error(path, &e));
            return None;
        }
    };
    *reads += 1;
    // One read(): each read() of a debugfs cc_params file is a firmware
    // query, the one that would only return end of file included.
    let mut buf = [0u8; 64];
    let n = match file.read(&mut buf) {
        Ok(n) => n,
        Err(e) => {
            errors.push(crate::io_error(path, &e));
            return None;
        }
    };
    match std::str::from_utf8(&buf[..n]) {
        Ok(text) => Some(text.to_string()),
        Err(_) => {
            errors.push(ReadError::parse(path, "not UTF-8 text".to_string()));
            None
        }
    }
}

/// One small decimal file: `None` when absent, an error when it holds
/// anything but a number up to `max`.
fn number(path: &Path, max: u8, errors: &mut Vec<ReadError>, reads: &mut u64) -> Option<u8> {
    let text = small_file(path, errors, reads, false)?;
    let t = text.trim();
    match t.parse::<u8>() {
        Ok(v) if v <= max => Some(v),
        _ => {
            errors.push(ReadError::parse(
                path,
                format!("expected a number from 0 to {max}, found {t:?}"),
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "roce-qos-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn reads_configfs_tos_and_mlx5_cnp_files_absent_is_none() {
        let root = tree();
        let port = RdmaPortRef {
            device: "mlx5_0".into(),
            port: 1,
        };
        let mut errors = Vec::new();
        let mut reads = 0;
        // Nothing mounted, no ecn folder: all absent, no error, no read.
        assert_eq!(
            read(&root, Some(&port), &mut errors, &mut reads),
            RoceQos::default()
        );
        assert!(errors.is_empty() && reads == 0);
        let cm = root.join("kernel/config/rdma_cm/mlx5_0/ports/1");
        std::fs::create_dir_all(&cm).unwrap();
        std::fs::write(cm.join("default_roce_tos"), "106\n").unwrap();
        let np = root.join("class/net/ens1np0/ecn/roce_np");
        std::fs::create_dir_all(&np).unwrap();
        std::fs::write(np.join("cnp_dscp"), "48\n").unwrap();
        std::fs::write(np.join("cnp_802p_prio"), "6\n").unwrap();
        let q = read(&root, Some(&port), &mut errors, &mut reads);
        assert_eq!(
            q,
            RoceQos {
                rdma_cm_tos: Some(106),
                ..RoceQos::default()
            }
        );
        assert_eq!(reads, 1);
        // The CNP marking from the DCQCN parameters: each file read once.
        let params = read_dcqcn(&root, "ens1np0", &mut errors, &mut reads);
        assert_eq!(reads, 3);
        assert_eq!(
            cnp_marking(&root, "ens1np0", &params, &mut errors),
            (Some(48), Some(6))
        );
        assert!(errors.is_empty(), "{errors:?}");
        std::fs::write(np.join("cnp_dscp"), "64\n").unwrap();
        let params = read_dcqcn(&root, "ens1np0", &mut errors, &mut reads);
        assert_eq!(
            cnp_marking(&root, "ens1np0", &params, &mut errors),
            (None, Some(6))
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        // The file's path and what it held, as a content error.
        assert_eq!(errors[0].path, np.join("cnp_dscp"));
        assert_eq!(
            errors[0].to_string(),
            format!(
                "{}: expected a number from 0 to 63, found \"64\"",
                np.join("cnp_dscp").display()
            )
        );
        // A file where a folder should be (ENOTDIR): absent, not an error.
        errors.clear();
        let below_file = np.join("cnp_dscp").join("x");
        assert_eq!(number(&below_file, 63, &mut errors, &mut reads), None);
        assert!(errors.is_empty(), "{errors:?}");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn mlnx_ofed_global_traffic_class() {
        // MLNX_OFED mlx5_ib `traffic_class_show`: empty until set, then
        // "Global tclass=%d\n" (after `echo 106 > .../tc/1/traffic_class`).
        let root = tree().with_extension("tclass");
        let port = RdmaPortRef {
            device: "mlx5_0".into(),
            port: 1,
        };
        let mut errors = Vec::new();
        let mut reads = 0;
        let tc = root.join("class/infiniband/mlx5_0/tc/1");
        std::fs::create_dir_all(&tc).unwrap();
        std::fs::write(tc.join("traffic_class"), "").unwrap();
        let q = read(&root, Some(&port), &mut errors, &mut reads);
        assert_eq!((q.ofed_tclass, reads), (None, 1));
        std::fs::write(tc.join("traffic_class"), "Global tclass=106\n").unwrap();
        let q = read(&root, Some(&port), &mut errors, &mut reads);
        assert_eq!(q.ofed_tclass, Some(106));
        assert!(errors.is_empty(), "{errors:?}");
        std::fs::write(tc.join("traffic_class"), "Global tclass=300\n").unwrap();
        let q = read(&root, Some(&port), &mut errors, &mut reads);
        assert_eq!(q.ofed_tclass, None);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn dcqcn_from_mlnx_sysfs_else_debugfs_absent_is_empty() {
        let root = tree().with_extension("dcqcn");
        let _ = std::fs::remove_dir_all(&root);
        let mut errors = Vec::new();
        let mut reads = 0;
        // Neither folder: nothing, no error.
        assert!(read_dcqcn(&root, "ens1np0", &mut errors, &mut reads).is_empty());
        // Upstream: the netdev's device is the PCI function whose debugfs
        // folder holds cc_params.
        let pci = root.join("devices/pci0000:00/0000:17:00.0");
        std::fs::create_dir_all(pci.join("net/ens1np0")).unwrap();
        std::fs::create_dir_all(root.join("class/net")).unwrap();
        std::os::unix::fs::symlink(pci.join("net/ens1np0"), root.join("class/net/ens1np0"))
            .unwrap();
        std::os::unix::fs::symlink("../..", pci.join("net/ens1np0/device")).unwrap();
        let cc = root.join("kernel/debug/mlx5/0000:17:00.0/cc_params");
        std::fs::create_dir_all(&cc).unwrap();
        std::fs::write(cc.join("rp_time_reset"), "300\n").unwrap();
        std::fs::write(cc.join("np_cnp_dscp"), "48\n").unwrap();
        std::fs::write(cc.join("rp_ai_rate"), "garbage\n").unwrap();
        let got = read_dcqcn(&root, "ens1np0", &mut errors, &mut reads);
        assert_eq!(
            got,
            vec![
                DcqcnParam {
                    role: CcRole::Rp,
                    name: "rp_time_reset",
                    value: 300,
                    source: CcSource::Debugfs
                },
                DcqcnParam {
                    role: CcRole::Np,
                    name: "np_cnp_dscp",
                    value: 48,
                    source: CcSource::Debugfs
                },
            ]
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        // MLNX_OFED's sysfs files win: debugfs is not read then.
        let rp = pci.join("net/ens1np0/ecn/roce_rp");
        let np = pci.join("net/ens1np0/ecn/roce_np");
        std::fs::create_dir_all(&rp).unwrap();
        std::fs::create_dir_all(&np).unwrap();
        std::fs::write(rp.join("rpg_min_rate"), "1\n").unwrap();
        std::fs::write(np.join("min_time_between_cnps"), "4\n").unwrap();
        errors.clear();
        let got = read_dcqcn(&root, "ens1np0", &mut errors, &mut reads);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.iter().all(|p| p.source == CcSource::Sysfs));
        assert_eq!(
            (got[1].role, got[1].name, got[1].value),
            (CcRole::Np, "min_time_between_cnps", 4)
        );
        assert!(errors.is_empty(), "{errors:?}");
        let _ = std::fs::remove_dir_all(root);
    }
}
