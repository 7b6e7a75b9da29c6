use super::*;
use crate::dcb::{PeerStandard, TSA_ETS, TSA_STRICT};

#[test]
fn upstream_debugfs_gives_dcqcn_parameters_and_the_cnp_dscp() {
    let root = std::env::temp_dir().join(format!("roce-reader-cc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let pci = root.join("devices/pci0000:00/0000:17:00.0");
    let dev = pci.join("net/ens1np0");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("mtu"), "9000\n").unwrap();
    std::os::unix::fs::symlink("../..", dev.join("device")).unwrap();
    std::fs::create_dir_all(root.join("class/net")).unwrap();
    std::os::unix::fs::symlink(&dev, root.join("class/net/ens1np0")).unwrap();
    let cc = root.join("kernel/debug/mlx5/0000:17:00.0/cc_params");
    std::fs::create_dir_all(&cc).unwrap();
    std::fs::write(cc.join("np_cnp_dscp"), "48\n").unwrap();
    std::fs::write(cc.join("rp_min_rate"), "1\n").unwrap();
    let mut reader = NetdevReader::new(ReaderOptions {
        sysfs: root.clone(),
        raw_ethtool: vec![],
        qos_interval: std::time::Duration::ZERO,
    });
    let mut errors = Vec::new();
    let target = NetdevToRead {
        name: "ens1np0".into(),
        rdma: None,
    };
    let snap = reader.read(&[target], &mut errors);
    let _ = std::fs::remove_dir_all(&root);
    assert!(errors.is_empty(), "{errors:?}");
    let n = &snap.netdevs[0];
    // No MLNX_OFED cnp_dscp file: upstream's debugfs value stands in.
    assert_eq!(n.qos.cnp_dscp, Some(48));
    let names: Vec<&str> = n.dcqcn.iter().map(|p| p.name).collect();
    assert_eq!(names, ["rp_min_rate", "np_cnp_dscp"]);
}

#[test]
fn replay_carries_ets_buffers_dcbx_and_peer() {
    let c = parse_dcb_replay(include_str!(
        "../../tests/fixtures/dcb/ets-buffers-peer.dcb"
    ))
    .unwrap();
    assert_eq!(c.tc_of(3), Some(3));
    let e = c.ets.unwrap();
    assert_eq!(
        (e.tc_tsa[3], e.tc_tsa[6], e.tc_tx_bw[3]),
        (TSA_ETS, TSA_STRICT, 50)
    );
    assert_eq!(c.buffers.unwrap().size_for(3), Some(130_944));
    assert_eq!(c.dcbx, Some(0x0a));
    assert_eq!(c.peer.standard, Some(PeerStandard::Ieee));
    assert_eq!(c.peer.pfc_enabled, Some(Priorities::one(4)));
    assert_eq!(c.peer.dscp_map(), Some(vec![(26, 4)]));
    // Without those keys the parts are absent, not zero.
    let c = parse_dcb_replay("pfc: 3\n").unwrap();
    assert!(c.ets.is_none() && c.buffers.is_none() && c.dcbx.is_none() && c.peer.is_empty());
    for bad in [
        "prio_tc: 0 0 0 8 0 0 0 0",
        "prio_tc: 0 0 0",
        "tc_tsa: ets ets ets ets ets ets wfq ets",
        "buffer_size: 1 2",
        "dcbx: maybe",
        "peer_app: dscp 64 3",
        "peer_pfc: 9",
    ] {
        assert!(parse_dcb_replay(bad).is_err(), "{bad}");
    }
}

/// Counts the DCB requests; answers a fixed configuration.
struct CountedDcb(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl DcbRead for CountedDcb {
    fn read_dcb(&mut self, _netdev: &str) -> Result<DcbConfig, DcbError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        parse_dcb_replay("pfc: 3\ntrust: dscp\napp: dscp 26 3\n").map_err(|_| DcbError::Unsupported)
    }
}

#[test]
fn qos_configuration_is_read_on_its_own_cadence_and_at_once_on_link_change() {
    use std::time::Duration;
    let root = std::env::temp_dir().join(format!("roce-reader-qosint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dev = root.join("class/net/ens1np0");
    // MLNX_OFED's ecn folder: each parameter file a firmware query.
    let rp = dev.join("ecn/roce_rp");
    let np = dev.join("ecn/roce_np");
    std::fs::create_dir_all(&rp).unwrap();
    std::fs::create_dir_all(&np).unwrap();
    std::fs::write(dev.join("mtu"), "9000\n").unwrap();
    std::fs::write(dev.join("operstate"), "up\n").unwrap();
    std::fs::write(rp.join("rpg_min_rate"), "1\n").unwrap();
    std::fs::write(np.join("cnp_dscp"), "48\n").unwrap();
    std::fs::write(np.join("cnp_802p_prio"), "6\n").unwrap();
    // The vendor driver's ECN enable files, one per priority and role.
    for role in [&np, &rp] {
        std::fs::create_dir_all(role.join("enable")).unwrap();
        for p in 0..8 {
            let on = if p == 3 { "1\n" } else { "0\n" };
            std::fs::write(role.join("enable").join(p.to_string()), on).unwrap();
        }
    }
    let dcb_calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut reader = NetdevReader::new(ReaderOptions {
        sysfs: root.clone(),
        raw_ethtool: vec![],
        qos_interval: Duration::from_secs(300),
    })
    .with_dcb(Box::new(CountedDcb(dcb_calls.clone())));
    let targets = [NetdevToRead {
        name: "ens1np0".into(),
        rdma: None,
    }];
    let mut errors = Vec::new();
    let mut sample = |reader: &mut NetdevReader, secs: u64| {
        let snap = reader.read_at(&targets, Duration::from_secs(secs), &mut errors);
        (snap, reader.last_calls())
    };
    let (first, calls0) = sample(&mut reader, 0);
    let qos_files = calls0.sysfs_reads;
    let (second, calls1) = sample(&mut reader, 5);
    let (_, calls2) = sample(&mut reader, 299);
    let (_, calls3) = sample(&mut reader, 300);
    // The link goes down: the DCBX peer is gone, read again at once.
    std::fs::write(dev.join("operstate"), "down\n").unwrap();
    let (_, calls4) = sample(&mut reader, 301);
    let _ = std::fs::remove_dir_all(&root);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(calls0.dcb, 1);
    // Between reads the last values are served, without a request.
    assert_eq!((calls1.dcb, calls2.dcb), (0, 0));
    assert_eq!(second.netdevs[0].dcb, first.netdevs[0].dcb);
    assert_eq!(second.netdevs[0].dcqcn, first.netdevs[0].dcqcn);
    assert_eq!(second.netdevs[0].qos.cnp_dscp, Some(48));
    assert_eq!(first.netdevs[0].qos_age, Some(Duration::ZERO));
    assert_eq!(second.netdevs[0].qos_age, Some(Duration::from_secs(5)));
    // rpg_min_rate, cnp_dscp and cnp_802p_prio as DCQCN parameters (the
    // CNP marking taken from the last two) and the 16 ECN enable files:
    // 19 firmware queries on the vendor driver, each file read once, made
    // only on the QoS cadence.
    assert_eq!(first.netdevs[0].dcqcn.len(), 3);
    let ecn = first.netdevs[0].ecn.clone().unwrap();
    assert_eq!((ecn.np.len(), ecn.rp.len()), (8, 8));
    assert!(ecn.np.contains(&(3, true)) && ecn.rp.contains(&(0, false)));
    assert_eq!(second.netdevs[0].ecn, Some(ecn));
    assert_eq!(calls1.sysfs_reads + 19, qos_files);
    assert_eq!(calls2.sysfs_reads, calls1.sysfs_reads);
    assert_eq!((calls3.dcb, calls3.sysfs_reads), (1, qos_files));
    assert_eq!((calls4.dcb, calls4.sysfs_reads), (1, qos_files));
    assert_eq!(dcb_calls.load(std::sync::atomic::Ordering::SeqCst), 3);
}
