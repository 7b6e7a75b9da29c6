//! The debug-log parser against lines built from NCCL's own format strings
//! (file and release named at each sample), plus lines it must ignore.

use roce_nccl::log::{
    parse_line, ChannelDirection, Event, IbPort, Level, NcclLinkLayer, NetDevice, SocketIface, Via,
};

/// `src/debug.cc`: `"%s:%d:%d [%d] NCCL INFO "` (hostname, pid, tid, cudaDev).
const P: &str = "gpu-node-07:41235:41301 [3] NCCL INFO ";

fn info(body: &str) -> String {
    format!("{P}{body}")
}

#[test]
fn prefix_hostname_pid_tid_and_device() {
    let line = info("Using network IB");
    let parsed = parse_line(&line);
    let p = parsed.prefix.expect("prefix");
    assert_eq!(
        (p.host, p.pid, p.tid, p.cuda_dev, p.level),
        ("gpu-node-07", 41235, 41301, 3, Level::Info)
    );
    assert_eq!(parsed.event, Event::Network { name: "IB".into() });
}

#[test]
fn prefix_with_the_default_timestamp_of_newer_releases() {
    // debug.cc with NCCL_DEBUG_TIMESTAMP_FORMAT (default "[%F %T] ") in
    // front of "%s:%d:%d " (NVIDIA/nccl debug.cc at 0456df20).
    let line = format!("[2026-12-03 09:12:44] {}", info("Using network Socket"));
    let parsed = parse_line(&line);
    assert_eq!(parsed.prefix.as_ref().map(|p| p.pid), Some(41235));
    assert_eq!(
        parsed.event,
        Event::Network {
            name: "Socket".into()
        }
    );
}

#[test]
fn warn_lines_are_not_events() {
    // debug.cc: "\n%s:%d:%d [%d] %s:%d NCCL WARN " (file, line).
    let parsed =
        parse_line("gpu-node-07:41235:41301 [3] net_ib.cc:1234 NCCL WARN NET/IB : Using [0]x:1/IB");
    assert_eq!(parsed.prefix.map(|p| p.level), Some(Level::Warn));
    assert_eq!(parsed.event, Event::Other);
}

#[test]
fn version_lines_of_two_releases() {
    // init.cc VERSION_STRING: "NCCL version " MAJOR.MINOR.PATCH SUFFIX "+cuda" CUDA_MAJOR.CUDA_MINOR
    assert_eq!(
        parse_line(&info("NCCL version 2.20.5+cuda12.4")).event,
        Event::Version {
            version: "2.20.5".into(),
            cuda: Some("12.4".into())
        }
    );
    assert_eq!(
        parse_line(&info("NCCL version 2.27.3+cuda12.9")).event,
        Event::Version {
            version: "2.27.3".into(),
            cuda: Some("12.9".into())
        }
    );
    // printed bare on stdout at NCCL_DEBUG=VERSION
    assert_eq!(
        parse_line("NCCL version 2.18.1+cuda12.1").event,
        Event::Version {
            version: "2.18.1".into(),
            cuda: Some("12.1".into())
        }
    );
}

#[test]
fn ib_device_table_roce_ib_merged_and_relaxed_ordering() {
    // net_ib.cc (2.20.5): "NET/IB : Using%s %s; OOB %s:%s", " [%d]%s:%d/%s"
    // per device, NCCL_IB_LLSTR, merged " [%d]={" "[%d] %s:%d/%s%s" "}".
    let line = info("NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_3:1/IB [2]={[4] mlx5_4:1/RoCE, [5] mlx5_5:1/RoCE} [RO]; OOB eth0:10.1.2.3<0>");
    let Event::IbDevices { net, devices } = parse_line(&line).event else {
        panic!("not a device table")
    };
    assert_eq!(net, "IB");
    let port = |d: &str, l| IbPort {
        device: d.into(),
        port: 1,
        link: l,
    };
    assert_eq!(
        devices,
        vec![
            NetDevice {
                index: 0,
                members: vec![port("mlx5_0", NcclLinkLayer::Roce)]
            },
            NetDevice {
                index: 1,
                members: vec![port("mlx5_3", NcclLinkLayer::Ib)]
            },
            NetDevice {
                index: 2,
                members: vec![
                    port("mlx5_4", NcclLinkLayer::Roce),
                    port("mlx5_5", NcclLinkLayer::Roce)
                ]
            },
        ]
    );
}

#[test]
fn plugin_device_tables() {
    // nccl-rdma-sharp-plugins (p2p_plugin.c): " [%d]%s:%d/%s%s" with "/SHARP"
    // on SHARP-capable devices, under the plugin's own net name.
    let line =
        info("NET/IBext_v8 : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/IB ; OOB ib0:10.1.0.1<0>");
    let Event::IbDevices { net, devices } = parse_line(&line).event else {
        panic!("not a device table")
    };
    assert_eq!(net, "IBext_v8");
    let names: Vec<(&str, NcclLinkLayer)> = devices
        .iter()
        .map(|d| (d.members[0].device.as_str(), d.members[0].link))
        .collect();
    assert_eq!(
        names,
        vec![("mlx5_0", NcclLinkLayer::Ib), ("mlx5_1", NcclLinkLayer::Ib)]
    );
}

#[test]
fn socket_interfaces() {
    // net_socket.cc: "NET/Socket : Using%s", " [%d]%s:%s" (ncclSocketToString "%s<%s>").
    let line = info("NET/Socket : Using [0]eth0:10.1.2.3<0> [1]ens1f0:fe80::1%ens1f0<0>");
    assert_eq!(
        parse_line(&line).event,
        Event::SocketDevices {
            ifaces: vec![
                SocketIface {
                    index: 0,
                    name: "eth0".into()
                },
                SocketIface {
                    index: 1,
                    name: "ens1f0".into()
                }
            ]
        }
    );
}

fn via(line: &str) -> (u32, ChannelDirection, Via) {
    match parse_line(line).event {
        Event::Connection {
            channel,
            direction,
            via,
        } => (channel, direction, via),
        other => panic!("not a connection: {other:?}"),
    }
}

fn net(name: &str, dev: u32, proxy: Option<u32>, gdr: bool, shared: bool) -> Via {
    Via::Net {
        net: name.into(),
        dev,
        proxy_rank: proxy,
        gdr,
        shared,
    }
}

#[test]
fn connection_lines_ib_with_and_without_gdrdma() {
    // net.cc (2.20.3, NVIDIA/nccl b6475625): "Channel %02d/%d : %d[%d] -> %d[%d] [receive] via NET/%s/%d%s%s"
    assert_eq!(
        via(&info(
            "Channel 02/0 : 9[1] -> 1[1] [receive] via NET/IB/1/GDRDMA"
        )),
        (
            2,
            ChannelDirection::Receive,
            net("IB", 1, None, true, false)
        )
    );
    assert_eq!(
        via(&info("Channel 00/0 : 1[1] -> 9[1] [send] via NET/IB/1")),
        (0, ChannelDirection::Send, net("IB", 1, None, false, false))
    );
    // later net.cc: "%d%s%s%s" with "(PCI)" (ncclTopoGdrModePci) and the
    // proxied "%d(%d)" (PXN), "/Shared" on connIndex 1.
    assert_eq!(
        via(&info(
            "Channel 03/1 : 1[1] -> 9[1] [send] via NET/IB/2(0)/GDRDMA(PCI)/Shared"
        )),
        (3, ChannelDirection::Send, net("IB", 2, Some(0), true, true))
    );
    // the 2.7-era form with bus ids: "Channel %02d : %d[%lx] -> %d[%lx] [send] via NET/%s/%d%s%s"
    assert_eq!(
        via(&info(
            "Channel 00 : 0[1b000] -> 8[1b000] [send] via NET/IB/0/GDRDMA"
        )),
        (0, ChannelDirection::Send, net("IB", 0, None, true, false))
    );
}

#[test]
fn connection_lines_socket_and_plugins() {
    assert_eq!(
        via(&info("Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0")).2,
        net("Socket", 0, None, false, false)
    );
    // net plugins print their own ncclNet->name
    assert_eq!(
        via(&info(
            "Channel 01/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/3/GDRDMA"
        ))
        .2,
        net("IBext_v8", 3, None, true, false)
    );
    assert_eq!(
        via(&info(
            "Channel 01/0 : 8[0] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA"
        ))
        .2,
        net("AWS Libfabric", 0, None, true, false)
    );
    // intra-node transports are not NET (p2p.cc: "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s", CUMEM + "/read")
    assert_eq!(
        via(&info("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read")).2,
        Via::Local("P2P".into())
    );
}

#[test]
fn gdr_decisions_from_topo_and_paths() {
    // graph/topo.cc: "NET/%s : GPU Direct RDMA %s for HCA %d '%s'"
    assert_eq!(
        parse_line(&info(
            "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"
        ))
        .event,
        Event::GdrHcaSupport {
            net: "IB".into(),
            hca_index: 0,
            hca_name: "mlx5_0".into(),
            enabled: false
        }
    );
    // graph/paths.cc (2.20): "GPU Direct RDMA Disabled for GPU %d / HCA %lx (distance %d > %d)"
    assert_eq!(
        parse_line(&info(
            "GPU Direct RDMA Disabled for GPU 3 / HCA 1 (distance 7 > 5)"
        ))
        .event,
        Event::GdrPath {
            enabled: false,
            gpu: "3".into(),
            hca: "1".into(),
            distance: Some(7),
            threshold: Some(5)
        }
    );
    // "... Enabled for GPU %d / HCA %lx (distance %d <= %d), read %d mode %s"
    assert_eq!(
        parse_line(&info(
            "GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 4 <= 5), read 1 mode Default"
        ))
        .event,
        Event::GdrPath {
            enabled: true,
            gpu: "0".into(),
            hca: "0".into(),
            distance: Some(4),
            threshold: Some(5)
        }
    );
    // older: "NET/%s : GPU Direct RDMA Disabled for GPU %d[%d] / HCA %d (distance %d >= %d)"
    assert_eq!(
        parse_line(&info(
            "NET/IB : GPU Direct RDMA Disabled for GPU 1[1] / HCA 0 (distance 4 >= 4)"
        ))
        .event,
        Event::GdrPath {
            enabled: false,
            gpu: "1[1]".into(),
            hca: "0".into(),
            distance: Some(4),
            threshold: Some(4)
        }
    );
}

#[test]
fn garbage_and_unknown_lines_are_other() {
    for line in [
        "",
        "\u{0}\u{1}garbage",
        "NCCL INFO",
        &info("Channel 00/0 : 0[0] -> 8[0] [send] via NET/"),
        &info("Channel 00/0 : 0[0] -> 8[0] [send] via NET//x"),
        &info("NET/IB : Using"),
        &info("NET/IB : Using [x]mlx5_0:1/RoCE"),
        &info("NCCL version banana"),
        &info("GPU Direct RDMA Maybe for HCA 0 'x'"),
        &info("comm 0x5573 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0"),
        &"x".repeat(10_000),
        "host:notapid:1 [0] NCCL INFO Using network IB",
    ] {
        let parsed = parse_line(line);
        if line.ends_with("Using network IB") {
            // an unparsable prefix still leaves the body
            assert!(parsed.prefix.is_none());
            continue;
        }
        assert_eq!(parsed.event, Event::Other, "{line:?}");
    }
}

#[test]
fn environment_settings_as_nccl_reports_them() {
    use roce_nccl::log::Event::Env;
    let env = |name: &str, value: &str| Env {
        name: name.into(),
        value: value.into(),
    };
    // src/misc/param.cc (2.18 to 2.28): "%s set by environment to %lld."
    assert_eq!(
        parse_line(&info("NCCL_IB_GID_INDEX set by environment to 3.")).event,
        env("NCCL_IB_GID_INDEX", "3")
    );
    assert_eq!(
        parse_line(&info("NCCL_IB_DISABLE set by environment to 1.")).event,
        env("NCCL_IB_DISABLE", "1")
    );
    assert_eq!(
        parse_line(&info("NCCL_DMABUF_ENABLE set by environment to 0.")).event,
        env("NCCL_DMABUF_ENABLE", "0")
    );
    // src/graph/paths.cc ncclGetLevel: "%s set by environment to %s"
    assert_eq!(
        parse_line(&info("NCCL_NET_GDR_LEVEL set by environment to LOC")).event,
        env("NCCL_NET_GDR_LEVEL", "LOC")
    );
    // net_ib.cc ncclIbInitDevices: "NCCL_IB_HCA set to %s"
    assert_eq!(
        parse_line(&info("NCCL_IB_HCA set to mlx5_0,mlx5_1")).event,
        env("NCCL_IB_HCA", "mlx5_0,mlx5_1")
    );
    assert_eq!(
        parse_line(&info("NCCL_IB_HCA set to =mlx5_0:1")).event,
        env("NCCL_IB_HCA", "=mlx5_0:1")
    );
    // src/misc/socket.cc: both forms
    assert_eq!(
        parse_line(&info("NCCL_SOCKET_IFNAME set by environment to eth0")).event,
        env("NCCL_SOCKET_IFNAME", "eth0")
    );
    // src/init.cc (2.2x): "Comm config netName reset to NCCL_NET=%s"
    assert_eq!(
        parse_line(&info("Comm config netName reset to NCCL_NET=Socket")).event,
        env("NCCL_NET", "Socket")
    );
    // not settings
    assert_eq!(
        parse_line(&info("nccl_ib_hca set to x")).event,
        Event::Other
    );
}

#[test]
fn nets_without_device_and_plugins() {
    use roce_nccl::log::PluginEvent;
    // net_ib.cc: "NET/IB : No device found."
    assert_eq!(
        parse_line(&info("NET/IB : No device found.")).event,
        Event::NetNoDevice { net: "IB".into() }
    );
    // 2.28.9 net_ib.cc prints the table even when empty:
    // "NET/IB : Using%s %s; OOB %s:%s" with no device
    assert_eq!(
        parse_line(&info("NET/IB : Using ; OOB eth0:10.0.0.11<0>")).event,
        Event::NetNoDevice { net: "IB".into() }
    );
    assert_eq!(
        parse_line(&info("NET/IB : Using [RO]; OOB eth0:10.0.0.11<0>")).event,
        Event::NetNoDevice { net: "IB".into() }
    );
    let plugin = |line: &str| parse_line(&info(line)).event;
    // src/plugin/net/net_v10.cc (2.28): "NET/Plugin: Loaded net plugin %s (v10)"
    assert_eq!(
        plugin("NET/Plugin: Loaded net plugin NCCL RDMA Plugin v10 (v10)"),
        Event::NetPlugin(PluginEvent::Loaded {
            name: "NCCL RDMA Plugin v10".into()
        })
    );
    // src/plugin/plugin_open.cc (2.23+): "%s/Plugin: Could not find:%s%s%s"
    assert_eq!(
        plugin("NET/Plugin: Could not find: libnccl-net.so"),
        Event::NetPlugin(PluginEvent::Internal)
    );
    // plugin_open.cc: "%s/Plugin: %s: %s" (dlopen's error, the plugin exists)
    assert_eq!(
        plugin("NET/Plugin: libnccl-net.so: libibverbs.so.1: cannot open shared object file: No such file or directory"),
        Event::NetPlugin(PluginEvent::LoadFailed {
            detail: "libnccl-net.so: libibverbs.so.1: cannot open shared object file: No such file or directory".into()
        })
    );
    // src/net.cc (2.18): "NET/Plugin : Plugin load (%s) returned %d : %s"
    assert_eq!(
        plugin("NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory"),
        Event::NetPlugin(PluginEvent::Internal)
    );
    assert_eq!(
        plugin("NET/Plugin : No plugin found, using internal implementation"),
        Event::NetPlugin(PluginEvent::Internal)
    );
    // src/plugin/net.cc (2.27+): "Failed to initialize NET plugin %s"
    assert_eq!(
        plugin("Failed to initialize NET plugin IB"),
        Event::NetPlugin(PluginEvent::InitFailed { name: "IB".into() })
    );
    assert_eq!(plugin("Initialized NET plugin Socket"), Event::Other);
    assert_eq!(
        plugin("NET/Plugin: Failed to find ncclNetPlugin_v10 symbol."),
        Event::Other
    );
}

#[test]
fn communicator_gpu_by_bus_id() {
    // src/init.cc (2.28.9): "%s comm %p rank %d nranks %d cudaDev %d nvmlDev
    // %d busId %lx commId 0x%llx - Init START"; int64ToBusId decodes busId.
    let line = info("ncclCommInitRank comm 0x55d1c8e0a0b0 rank 9 nranks 16 cudaDev 1 nvmlDev 1 busId 5000 commId 0x4b1c2e8f9a7d6e53 - Init START");
    assert_eq!(
        parse_line(&line).event,
        Event::CommInit {
            rank: 9,
            nranks: 16,
            cuda_dev: 1,
            bus_id: "0000:05:00.0".into()
        }
    );
    // 2.18.3: "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE"
    let line = info(
        "comm 0x7f3e rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9a - Init COMPLETE",
    );
    assert_eq!(
        parse_line(&line).event,
        Event::CommInit {
            rank: 0,
            nranks: 2,
            cuda_dev: 0,
            bus_id: "0000:1b:00.0".into()
        }
    );
}

#[test]
fn roce_queue_pair_gid_of_three_releases() {
    use roce_nccl::log::QueuePair;
    // ::ffff:10.0.0.11 (an IPv4-mapped RoCE v2 GID): prefix 8 zero bytes,
    // interface id 00 00 ff ff 0a 00 00 0b, printed as little-endian %lX.
    let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 11];
    let qp = |ib_dev, gid_index, gid| {
        Event::QueuePair(QueuePair {
            net: "IB".into(),
            ib_dev,
            port: 1,
            mtu: 5,
            gid_index,
            gid,
        })
    };
    // net_ib.cc 2.18.3: "NET/IB: Dev %d Port %d qpn %d mtu %d GID %ld (%lX/%lX)"
    assert_eq!(
        parse_line(&info(
            "NET/IB: Dev 2 Port 1 qpn 4711 mtu 5 GID 3 (0/B00000AFFFF0000)"
        ))
        .event,
        qp(2, 3, v4)
    );
    // 2.19.3: query_ece before GID
    assert_eq!(
        parse_line(&info("NET/IB: Dev 2 Port 1 qpn 4711 mtu 5 query_ece={supported=1, vendor_id=0x2c9, options=0x30000002, comp_mask=0x0} GID 3 (0/B00000AFFFF0000)")).event,
        qp(2, 3, v4)
    );
    // 2.28.9: "NET/IB: %s %d IbDev %d Port %d qpn %d mtu %d GID %ld (%lX/%lX) fifoRkey=0x%x fifoLkey=0x%x"
    // with GID 0: fe80::ba3f:d2ff:fe5a:1c00, the link-local default GID.
    let ll = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0xba, 0x3f, 0xd2, 0xff, 0xfe, 0x5a, 0x1c, 0x00,
    ];
    assert_eq!(
        parse_line(&info("NET/IB: NCCL Dev 0 IbDev 4 Port 1 qpn 905 mtu 5 GID 0 (80FE/1C5AFEFFD23FBA) fifoRkey=0x1d0e fifoLkey=0x1d0e")).event,
        qp(4, 0, ll)
    );
    // IB links print a LID, not a GID: not a RoCE queue pair
    assert_eq!(
        parse_line(&info("NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 905 mtu 5 LID 12 subnet-prefix 65152  FLID 0 fifoRkey=0x1 fifoLkey=0x1")).event,
        Event::Other
    );
}
