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
//!   other drivers).
//!
//! A file that is absent (or configfs not mounted) is `None`, never 0: a
//! value the kernel did not give is not a value.

use std::io::{ErrorKind, Read};
use std::path::Path;

use crate::RdmaPortRef;

/// The QoS marking the host's own configuration gives RoCE traffic on one
/// netdev.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoceQos {
    /// rdma_cm's default ToS byte for the RDMA port behind the netdev.
    pub rdma_cm_tos: Option<u8>,
    /// DSCP of the CNPs the NIC sends as notification point (mlx5).
    pub cnp_dscp: Option<u8>,
    /// 802.1p priority of those CNPs (mlx5).
    pub cnp_prio: Option<u8>,
}

/// Reads the QoS files of `netdev` (whose RDMA port is `rdma`) below
/// `sysfs`. Problems with a file that exists go to `errors`; `reads`
/// counts the files read.
pub fn read(
    sysfs: &Path,
    netdev: &str,
    rdma: Option<&RdmaPortRef>,
    errors: &mut Vec<String>,
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
        }
    }
    if !netdev.contains('/') && !netdev.starts_with('.') {
        let np = sysfs.join("class/net").join(netdev).join("ecn/roce_np");
        out.cnp_dscp = number(&np.join("cnp_dscp"), 63, errors, reads);
        out.cnp_prio = number(&np.join("cnp_802p_prio"), 7, errors, reads);
    }
    out
}

/// One small decimal file: `None` when absent, an error when it holds
/// anything but a number up to `max`.
fn number(path: &Path, max: u8, errors: &mut Vec<String>, reads: &mut u64) -> Option<u8> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
            return None
        }
        Err(e) => {
            errors.push(format!("{}: {e}", path.display()));
            return None;
        }
    };
    *reads += 1;
    let mut text = String::new();
    if let Err(e) = file.by_ref().take(64).read_to_string(&mut text) {
        errors.push(format!("{}: {e}", path.display()));
        return None;
    }
    let t = text.trim();
    match t.parse::<u8>() {
        Ok(v) if v <= max => Some(v),
        _ => {
            errors.push(format!(
                "{}: expected a number from 0 to {max}, found {t:?}",
                path.display()
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
            read(&root, "ens1np0", Some(&port), &mut errors, &mut reads),
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
        let q = read(&root, "ens1np0", Some(&port), &mut errors, &mut reads);
        assert_eq!(
            q,
            RoceQos {
                rdma_cm_tos: Some(106),
                cnp_dscp: Some(48),
                cnp_prio: Some(6)
            }
        );
        assert_eq!(reads, 3);
        std::fs::write(np.join("cnp_dscp"), "64\n").unwrap();
        let q = read(&root, "ens1np0", Some(&port), &mut errors, &mut reads);
        assert_eq!(q.cnp_dscp, None);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let _ = std::fs::remove_dir_all(root);
    }
}
