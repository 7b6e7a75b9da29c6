//! The NCCL rules (`nccl_socket_transport`, `nccl_gdr_not_used`,
//! `nccl_gid_not_rocev2`, `nccl_busbw_below_line_rate`,
//! `nccl_rails_unused`, `nccl_tests_wrong`) through the rule engine: each
//! fires on what NCCL (and nccl-tests) logs when the problem is there
//! (lines in their formats, see crates/nccl/tests) and stays silent on a
//! healthy job, on mlx5 ports at 400 Gb/s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::h100;
use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::rules::{self, Finding, Severity};
use roce_exporter::snapshot::Snapshot;
use roce_exporter::sources::nccl::NcclSnapshot;
use roce_nccl::aggregate::{Aggregator, AggregatorConfig};
use roce_nccl::inspector::{parse_record, Record};
use roce_nccl::log::parse_line;
use roce_rdma::{Port, PortState, RdmaSnapshot};
use roce_testkit::snapshot::{mlx5, roce_port, SnapshotBuilder};
use roce_topology::gpudirect::{GpuDirect, NvidiaModule};
use roce_topology::path::PathClass;
use roce_topology::{GpuNicPath, TopologySnapshot};

/// 400 Gb/s RoCE ports (50e9 bytes per second) with mlx5's GID table:
/// link-local RoCE v1 and v2 at 0 and 1, IPv4-mapped at 2 and 3.
fn port(state: PortState) -> Port {
    let phys = if state == PortState::Active {
        roce_rdma::PhysState::LinkUp
    } else {
        roce_rdma::PhysState::Polling
    };
    Port {
        state: Some(state),
        phys_state: Some(phys),
        ..roce_port(1)
    }
}

fn rdma(state: PortState) -> RdmaSnapshot {
    RdmaSnapshot {
        devices: vec![
            mlx5("mlx5_0", vec![port(state.clone())]),
            mlx5("mlx5_1", vec![port(state)]),
        ],
        errors: vec![],
    }
}

/// GPU 0 under the same PCIe switch as mlx5_0, GPUDirect drivers ready
/// (nvidia-peermem) or not.
fn topology(class: PathClass, peermem: bool) -> TopologySnapshot {
    TopologySnapshot {
        gpus: vec![h100(0, "0000:17:00.0")],
        paths: vec![GpuNicPath {
            gpu: 0,
            nic: "mlx5_0".into(),
            class,
            bridges: vec![],
        }],
        gpudirect: Some(GpuDirect {
            peermem_loaded: peermem,
            kernel: Some((5, 4)),
            nvidia_module: NvidiaModule::Proprietary,
            amdgpu_loaded: false,
            libibverbs: None,
        }),
        ..TopologySnapshot::default()
    }
}

const HEAD: &str = "\
gpu-a:100:101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-a:100:101 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
gpu-a:100:101 [0] NCCL INFO Using network IB
";

/// A healthy job: receive side via GDRDMA on both NICs.
const HEALTHY: &str = "\
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0
gpu-a:100:105 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA
gpu-a:100:105 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA
";

/// Large 2-node AllReduce records at `busbw` GB/s (inspector.cc format).
fn busbw_records(agg: &mut Aggregator, busbw: f64, now: Instant) {
    coll_records(agg, "AllReduce", busbw, now);
}

/// Large 2-node records of `coll` at `busbw` GB/s (inspector.cc format).
fn coll_records(agg: &mut Aggregator, coll: &str, busbw: f64, now: Instant) {
    for sn in 0..4 {
        let j = format!(
            r#"{{"header":{{"id":"0x7f8c496ae9f661","rank":0,"n_ranks":16,"nnodes":2}},"metadata":{{"inspector_output_format_version":"v4.0","hostname":"gpu-a","pid":100}},"coll_perf":{{"coll":"{coll}","coll_sn":{sn},"coll_msg_size_bytes":1073741824,"coll_exec_time_us":56000,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":1.0,"coll_busbw_gbs":{busbw}}}}}"#
        );
        match parse_record(j.as_bytes()) {
            Ok(Record::Coll(c)) => agg.inspector_record(&c, now),
            other => panic!("{other:?}"),
        }
    }
}

fn snapshot(
    log: &str,
    busbw: Option<f64>,
    state: PortState,
    topo: Option<TopologySnapshot>,
) -> Arc<Snapshot> {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    for l in log.lines() {
        agg.log_line("nccl.gpu-a.100.log", &parse_line(l), now);
    }
    if let Some(bw) = busbw {
        busbw_records(&mut agg, bw, now);
    }
    let mut s = SnapshotBuilder::new()
        .rdma(rdma(state))
        .nccl(nccl_part(&mut agg, now))
        .build();
    s.topology = topo;
    Arc::new(s)
}

/// What the nccl source makes of `agg`: a 15-minute window, collectives
/// from 256 MiB judged against 70% of the line rate.
fn nccl_part(agg: &mut Aggregator, now: Instant) -> NcclSnapshot {
    NcclSnapshot {
        summary: agg.summary(now),
        window: Duration::from_secs(900),
        busbw_min_bytes: 256 << 20,
        min_line_rate_fraction: 0.7,
        ..NcclSnapshot::default()
    }
}

fn findings(s: Arc<Snapshot>, rule: &str) -> Vec<Finding> {
    rules::evaluate(&[s], &RulesConfig::default(), &Expectations::default())
        .into_iter()
        .filter(|f| f.rule == rule)
        .collect()
}

#[test]
fn healthy_job_fires_no_nccl_rule() {
    // 90 GB/s on two 400G NICs, whose ring/tree target is 2 x 48 = 96
    // GB/s: 94%.
    let s = snapshot(
        &format!("{HEAD}{HEALTHY}"),
        Some(90.0),
        PortState::Active,
        Some(topology(PathClass::Pxb, true)),
    );
    for rule in [
        "nccl_socket_transport",
        "nccl_gdr_not_used",
        "nccl_busbw_below_line_rate",
    ] {
        assert_eq!(findings(s.clone(), rule), vec![], "{rule}");
    }
}

#[test]
fn no_nccl_data_is_silent() {
    let s = Arc::new(Snapshot {
        rdma: Some(rdma(PortState::Active)),
        ..Snapshot::default()
    });
    let all = rules::evaluate(&[s], &RulesConfig::default(), &Expectations::default());
    assert!(
        all.iter().all(|f| !f.rule.as_str().starts_with("nccl_")),
        "{all:?}"
    );
}

/// NCCL 2.27.3 that fell back to NET/Socket: its IB transport found no
/// device (src/transport/net_ib.cc, src/init.cc, src/transport/net.cc).
const SOCKET_JOB: &str = "\
gpu-a:200:201 [1] NCCL INFO NCCL version 2.27.3+cuda12.9
gpu-a:200:201 [1] NCCL INFO NET/IB : No device found.
gpu-a:200:201 [1] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
gpu-a:200:201 [1] NCCL INFO Using network Socket
gpu-a:200:209 [1] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/Socket/0
gpu-a:200:209 [1] NCCL INFO Channel 00/0 : 9[1] -> 1[1] [receive] via NET/Socket/0
";

#[test]
fn socket_transport_while_rdma_ports_are_up() {
    let f = findings(
        snapshot(SOCKET_JOB, None, PortState::Active, None),
        "nccl_socket_transport",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].subject.netdev.as_deref(), Some("eth0"));
    assert_eq!(
        f[0].finding,
        "An NCCL job on this host used NET/Socket (TCP) for its inter-node traffic, not RDMA: NCCL's IB transport found no device (NET/IB : No device found.) although 2 RDMA port(s) are ACTIVE here (mlx5_0:1, mlx5_1:1): the job does not see them"
    );
    assert!(
        f[0].evidence
            .contains("2 channel connection(s) via NET/Socket over eth0"),
        "{}",
        f[0].evidence
    );
    assert!(f[0].evidence.contains("2.27.3"), "{}", f[0].evidence);
    assert!(f[0].fix.contains("pass /dev/infiniband"), "{}", f[0].fix);
}

/// Socket is a failure on every host, with the reason the data gives.
#[test]
fn socket_transport_on_every_host_with_its_reason() {
    // Every port down: NCCL uses ACTIVE ports only.
    let f = findings(
        snapshot(SOCKET_JOB, None, PortState::Down, None),
        "nccl_socket_transport",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].finding.ends_with(
            "NCCL uses only ACTIVE ports, and every RDMA port here is down (mlx5_0:1, mlx5_1:1)"
        ),
        "{}",
        f[0].finding
    );
    // No RDMA device at all (a GPU VM with mlx5 loaded and no device, as
    // the H200 host of the issue).
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    for l in SOCKET_JOB.lines() {
        agg.log_line("nccl.gpu-a.200.log", &parse_line(l), now);
    }
    let bare = SnapshotBuilder::new()
        .rdma(RdmaSnapshot::default())
        .nccl(nccl_part(&mut agg, now))
        .arc();
    let f = findings(bare, "nccl_socket_transport");
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].finding
            .contains("this host has no RDMA device (/sys/class/infiniband is empty)"),
        "{}",
        f[0].finding
    );
    // NCCL_IB_HCA naming no device of this host.
    let log = format!("gpu-a:200:201 [1] NCCL INFO NCCL_IB_HCA set to mlx5_9\n{SOCKET_JOB}");
    let f = findings(
        snapshot(&log, None, PortState::Active, None),
        "nccl_socket_transport",
    );
    assert!(
        f[0].finding.ends_with(
            "the job's NCCL_IB_HCA=mlx5_9 matches none of the ACTIVE ports (mlx5_0:1, mlx5_1:1)"
        ),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].fix
            .contains("set NCCL_IB_HCA to this node's RDMA devices (mlx5_0,mlx5_1) or unset it"),
        "{}",
        f[0].fix
    );
    // NCCL_IB_DISABLE=1 (param.cc), before any connection line.
    let log = "\
gpu-a:300:301 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
gpu-a:300:301 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
gpu-a:300:312 [0] NCCL INFO Failed to initialize NET plugin IB
gpu-a:300:312 [0] NCCL INFO NET/Socket : Using [0]ens1np0:10.0.0.11<0>
";
    let f = findings(
        snapshot(log, None, PortState::Active, None),
        "nccl_socket_transport",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].finding
            .ends_with("the job set NCCL_IB_DISABLE=1 (NCCL_IB_DISABLE set by environment to 1)"),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].evidence.contains("no NET/Socket connection line yet"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].fix.starts_with("unset NCCL_IB_DISABLE"),
        "{}",
        f[0].fix
    );
    // NCCL_NET=Socket (init.cc 2.28: "Comm config netName reset to NCCL_NET=%s").
    let log = "\
gpu-a:300:301 [0] NCCL INFO Comm config netName reset to NCCL_NET=Socket
gpu-a:300:312 [0] NCCL INFO Using network Socket
";
    let f = findings(
        snapshot(log, None, PortState::Active, None),
        "nccl_socket_transport",
    );
    assert!(
        f[0].finding.ends_with(
            "the job set NCCL_NET=Socket (Comm config netName reset to NCCL_NET=Socket)"
        ),
        "{}",
        f[0].finding
    );
    // NCCL 2.28 told to use Socket initializes no IB at all (plugin/net.cc).
    let log = "\
gpu-a:300:301 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
gpu-a:300:312 [0] NCCL INFO NET/Socket : Using [0]ens1np0:10.0.0.11<0>
gpu-a:300:312 [0] NCCL INFO Initialized NET plugin Socket
gpu-a:300:312 [0] NCCL INFO Using network Socket
";
    let f = findings(
        snapshot(log, None, PortState::Active, None),
        "nccl_socket_transport",
    );
    assert!(
        f[0].finding.ends_with("NCCL 2.28.9 did not try its IB transport at all (no device table, no failure): NCCL_NET (or the communicator's netName) names Socket"),
        "{}",
        f[0].finding
    );
    // A net plugin that failed to load (plugin_open.cc).
    let log = format!(
        "gpu-a:200:201 [1] NCCL INFO NET/Plugin: libnccl-net.so: libibverbs.so.1: cannot open shared object file: No such file or directory\n{SOCKET_JOB}"
    );
    let f = findings(
        snapshot(&log, None, PortState::Active, None),
        "nccl_socket_transport",
    );
    assert!(
        f[0].evidence
            .contains("a net plugin failed to load: libnccl-net.so: libibverbs.so.1"),
        "{}",
        f[0].evidence
    );
    // NCCL_IB_DISABLE=0 and NCCL_NET=IB are no reason; a job on IB is healthy.
    let log = format!(
        "gpu-a:100:101 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.\ngpu-a:100:101 [0] NCCL INFO Comm config netName reset to NCCL_NET=IB\n{HEAD}{HEALTHY}"
    );
    assert_eq!(
        findings(
            snapshot(&log, None, PortState::Active, None),
            "nccl_socket_transport"
        ),
        vec![]
    );
}

#[test]
fn gdr_not_used_with_the_reason_from_nccl_and_the_driver() {
    let log = format!(
        "{HEAD}gpu-a:100:101 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0
gpu-a:100:105 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA
"
    );
    let f = findings(
        snapshot(
            &log,
            None,
            PortState::Active,
            Some(topology(PathClass::Pxb, false)),
        ),
        "nccl_gdr_not_used",
    );
    assert_eq!(f.len(), 1, "mlx5_1 had GDRDMA: {f:?}");
    assert_eq!(
        (f[0].subject.device.as_deref(), f[0].subject.port),
        (Some("mlx5_0"), Some(1))
    );
    // The NIC's netdev (the port's) and the GPU it is nearest to
    // (the topology's GPU-NIC path).
    assert_eq!(f[0].subject.netdev.as_deref(), Some("ens1np0"));
    assert_eq!(f[0].subject.gpu, Some(0));
    assert!(
        f[0].finding.starts_with(
            "NCCL jobs use mlx5_0 port 1 (ens1np0), nearest to GPU 0, without GPUDirect RDMA"
        ),
        "{}",
        f[0].finding
    );
    // The drivers keep GDR off: as critical as gpudirect_unavailable says.
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].evidence
            .starts_with("2 NET channel connection(s) on mlx5_0 port 1"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].evidence.contains(
            "NCCL: GPU Direct RDMA Disabled for HCA mlx5_0: neither nvidia-peermem nor dma-buf is usable, on this host nvidia_peermem is not loaded and dma-buf is not usable (gpudirect_unavailable)"
        ),
        "{}",
        f[0].evidence
    );
    // gpudirect_unavailable, the prediction of the same cause, is critical.
    assert_eq!(
        roce_exporter::rules::RuleId::GpudirectUnavailable
            .spec()
            .severities,
        &[f[0].severity],
        "seen and predicted agree"
    );
}

/// dma-buf ready on the host and the job's NCCL_DMABUF_ENABLE=0: the cause
/// is that setting, in words that agree with the GPUDirect section.
#[test]
fn gdr_not_used_because_the_job_turned_dmabuf_off() {
    let log = format!(
        "{HEAD}gpu-a:100:101 [0] NCCL INFO NCCL_DMABUF_ENABLE set by environment to 0.
gpu-a:100:101 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0
"
    );
    let mut topo = topology(PathClass::Pxb, false);
    topo.gpudirect = Some(GpuDirect {
        peermem_loaded: false,
        kernel: Some((6, 8)),
        nvidia_module: NvidiaModule::Open,
        amdgpu_loaded: false,
        libibverbs: crate::support::gpudirect_ready().libibverbs,
    });
    assert!(topo.gpudirect.as_ref().unwrap().dmabuf_ready());
    let f = findings(
        snapshot(&log, None, PortState::Active, Some(topo.clone())),
        "nccl_gdr_not_used",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].finding.ends_with("the job set NCCL_DMABUF_ENABLE=0 (NCCL: GPU Direct RDMA Disabled for HCA mlx5_0), and dma-buf is this host's only ready mechanism: nvidia_peermem is not loaded"),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].fix.starts_with("unset NCCL_DMABUF_ENABLE"),
        "{}",
        f[0].fix
    );
    assert!(
        !f[0].evidence.contains("neither"),
        "never contradicts the host: {}",
        f[0].evidence
    );
    // Without the setting, dma-buf ready on the host: the job's own check
    // failed, and the words still say the host is ready.
    let log = log.replace(
        "gpu-a:100:101 [0] NCCL INFO NCCL_DMABUF_ENABLE set by environment to 0.\n",
        "",
    );
    let f = findings(
        snapshot(&log, None, PortState::Active, Some(topo)),
        "nccl_gdr_not_used",
    );
    assert!(
        f[0].evidence.contains("dma-buf is ready"),
        "{}",
        f[0].evidence
    );
    assert!(!f[0].evidence.contains("neither"), "{}", f[0].evidence);
}

#[test]
fn gdr_not_used_with_the_path_beyond_pxb() {
    let log = format!(
        "{HEAD}gpu-a:100:101 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 8 > 5)
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0
"
    );
    let s = snapshot(
        &log,
        None,
        PortState::Active,
        Some(topology(PathClass::Phb, true)),
    );
    let f = findings(s.clone(), "nccl_gdr_not_used");
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].evidence.contains("GPU 0 / HCA 0 (distance 8 > 5"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].evidence
            .contains("the GPU-NIC path (PHB) is beyond NCCL's default NCCL_NET_GDR_LEVEL PXB"),
        "{}",
        f[0].evidence
    );
    // As gpudirect_not_used predicts for a PHB path: a warning.
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        findings(s, "gpudirect_not_used")[0].severity,
        Severity::Warning
    );
    // The job's own NCCL_NET_GDR_LEVEL on a PIX path: its setting, critical.
    let log = format!(
        "{HEAD}gpu-a:100:101 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to LOC
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0
"
    );
    let f = findings(
        snapshot(
            &log,
            None,
            PortState::Active,
            Some(topology(PathClass::Pix, true)),
        ),
        "nccl_gdr_not_used",
    );
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].finding.ends_with(
            "the job set NCCL_NET_GDR_LEVEL=LOC: NCCL uses GPUDirect RDMA only up to that distance"
        ),
        "{}",
        f[0].finding
    );
}

#[test]
fn gdr_not_used_although_path_and_driver_allow_it() {
    let log = format!(
        "{HEAD}gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0\n"
    );
    let f = findings(
        snapshot(
            &log,
            None,
            PortState::Active,
            Some(topology(PathClass::Pxb, true)),
        ),
        "nccl_gdr_not_used",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].finding
            .contains("nothing on the host explains it (on this host nvidia_peermem is loaded"),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].evidence
            .contains("NCCL_NET_GDR_LEVEL=LOC, NCCL_DMABUF_ENABLE=0"),
        "{}",
        f[0].evidence
    );
}

/// `NET/IB: ... GID %ld (%lX/%lX)` lines (net_ib.cc 2.20 to 2.28) with
/// the GID index used, judged by this host's GID table.
fn gid_lines(index: u32, prefix: &str, iid: &str) -> String {
    (0..2)
        .map(|d| {
            format!(
                "gpu-a:100:105 [0] NCCL INFO NET/IB: NCCL Dev {d} IbDev {d} Port 1 qpn 90{d} mtu 5 GID {index} ({prefix}/{iid}) fifoRkey=0x1 fifoLkey=0x1\n"
            )
        })
        .collect()
}

#[test]
fn gid_in_use_is_roce_v1_or_link_local() {
    // GID 0: fe80::1, RoCE v1 in mlx5's table: critical.
    let log = format!("{HEAD}{HEALTHY}{}", gid_lines(0, "80FE", "100000000000000"));
    let f = findings(
        snapshot(&log, None, PortState::Active, None),
        "nccl_gid_not_rocev2",
    );
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].finding,
        "NCCL runs RoCE on mlx5_0 port 1 (ens1np0) over RoCE v1: Ethernet frames without an IP header, which no router forwards, and a peer on RoCE v2 does not connect to"
    );
    assert!(f[0].evidence.starts_with("GID 0 (fe80::1) in NCCL's queue pair lines; this host's GID table: index 0 is IB/RoCE v1"), "{}", f[0].evidence);
    assert!(
        f[0].fix.starts_with(
            "Set NCCL_IB_GID_INDEX=3 for the jobs (the routable RoCE v2 GID ::ffff:10.0.0.1"
        ),
        "{}",
        f[0].fix
    );
    // GID 1: fe80::1 as RoCE v2: link-local, a warning.
    let log = format!("{HEAD}{HEALTHY}{}", gid_lines(1, "80FE", "100000000000000"));
    let f = findings(
        snapshot(&log, None, PortState::Active, None),
        "nccl_gid_not_rocev2",
    );
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].finding
            .ends_with("a link-local RoCE v2 GID (fe80::/10): its packets cannot leave the subnet"),
        "{}",
        f[0].finding
    );
    // NCCL 2.20.5 without NCCL_IB_GID_INDEX takes index 0 (no GID lines).
    let log = format!("{}{HEALTHY}", HEAD.replace("2.21.5", "2.20.5"));
    let f = findings(
        snapshot(&log, None, PortState::Active, None),
        "nccl_gid_not_rocev2",
    );
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(
        f[0].evidence.starts_with(
            "GID 0 (fe80::1): NCCL 2.20.5 uses GID index 0 unless NCCL_IB_GID_INDEX is set"
        ),
        "{}",
        f[0].evidence
    );
    // The same release with NCCL_IB_GID_INDEX=3, the IPv4 RoCE v2 GID: healthy.
    let log = format!(
        "{}gpu-a:100:101 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.\n{HEALTHY}",
        HEAD.replace("2.21.5", "2.20.5")
    );
    assert_eq!(
        findings(
            snapshot(&log, None, PortState::Active, None),
            "nccl_gid_not_rocev2"
        ),
        vec![]
    );
    // GID 3 (::ffff:10.0.0.1) logged: healthy; 2.21.5 unlogged: healthy.
    let log = format!("{HEAD}{HEALTHY}{}", gid_lines(3, "0", "100000AFFFF0000"));
    assert_eq!(
        findings(
            snapshot(&log, None, PortState::Active, None),
            "nccl_gid_not_rocev2"
        ),
        vec![]
    );
    let log = format!("{HEAD}{HEALTHY}");
    assert_eq!(
        findings(
            snapshot(&log, None, PortState::Active, None),
            "nccl_gid_not_rocev2"
        ),
        vec![]
    );
}

#[test]
fn busbw_below_the_line_rate_of_the_nics() {
    // 20 GB/s AllReduce busbw on two 400 Gb/s NICs (target 96 GB/s):
    // 21%, below 70%.
    let s = snapshot(
        &format!("{HEAD}{HEALTHY}"),
        Some(20.0),
        PortState::Active,
        None,
    );
    let f = findings(s, "nccl_busbw_below_line_rate");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        f[0].finding,
        "NCCL Inspector AllReduce bus bandwidth is 20.0 GB/s, below 70% of the 96.0 GB/s this node's NICs should give"
    );
    assert!(
        f[0].evidence.contains("expected at least 67.2 GB/s (0.7 x 96.0 GB/s: ring/tree across nodes: about 24 GB/s per 200 Gb/s NIC, summed over every ACTIVE RDMA port (no GPU-NIC topology) (2 x 400 Gb/s: mlx5_0, mlx5_1))"),
        "{}",
        f[0].evidence
    );
    // 70 GB/s is 73%: healthy
    let s = snapshot(
        &format!("{HEAD}{HEALTHY}"),
        Some(70.0),
        PortState::Active,
        None,
    );
    assert_eq!(findings(s, "nccl_busbw_below_line_rate"), vec![]);
}

fn check_text(s: Arc<Snapshot>) -> String {
    let history = vec![s];
    let findings = rules::evaluate(&history, &RulesConfig::default(), &Expectations::default());
    let report = roce_exporter::check::build_report(
        &history,
        findings,
        Duration::from_secs(10),
        &Expectations::default(),
    );
    roce_exporter::check::render_text(&report)
}

#[test]
fn check_prints_transport_gdr_and_measured_against_expected() {
    let s = snapshot(
        &format!("{HEAD}{HEALTHY}"),
        Some(20.0),
        PortState::Active,
        Some(topology(PathClass::Pxb, true)),
    );
    let text = check_text(s);
    assert!(
        text.contains(
            "[ok]   Transport seen: RoCEv2 GDR: on (mlx5_0 port 1, mlx5_1 port 1; GID 3: NCCL 2.21.5 picks it itself (RoCE v2, AF_INET; not logged); NCCL 2.21.5)"
        ),
        "{text}"
    );
    // mlx5_0's send side without GDRDMA: NCCL's default without GDR reads,
    // its receive side has it.
    assert!(
        text.contains("[ok]   Transport seen: RoCEv2 GDR: off (mlx5_0 port 1; GID 3: NCCL 2.21.5 picks it itself (RoCE v2, AF_INET; not logged); NCCL 2.21.5)"),
        "{text}"
    );
    assert!(
        text.contains("[warn] Measured: 20.0 GB/s vs expected 48.0 GB/s (NCCL Inspector AllReduce busbw: mean of 4 AllReduce collective(s) of at least 256 MiB over up to 2 nodes (min 20.0, max 20.0); expected: ring/tree across nodes: about 24 GB/s per 200 Gb/s NIC, summed over the NICs nearest the job's GPUs (1 x 400 Gb/s: mlx5_0))"),
        "{text}"
    );
}

#[test]
fn check_flags_socket_and_says_where_to_point_nccl_without_data() {
    let log = "\
gpu-a:200:201 [1] NCCL INFO Using network Socket
gpu-a:200:201 [1] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
gpu-a:200:209 [1] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/Socket/0
";
    let text = check_text(snapshot(log, None, PortState::Active, None));
    assert!(
        text.contains("[FAIL] Transport seen: Socket GDR: off (eth0)"),
        "{text}"
    );
    assert!(text.contains("[critical] nccl_socket_transport:"), "{text}");
    assert!(
        text.contains("Measured: no large multi-node collective in the window"),
        "{text}"
    );

    let none = Arc::new(Snapshot {
        rdma: Some(rdma(PortState::Active)),
        ..Snapshot::default()
    });
    let text = check_text(none);
    assert!(
        text.contains("no NCCL data (the nccl source is off): run jobs with NCCL_DEBUG=INFO NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log"),
        "{text}"
    );
    assert!(text.contains("NCCL_INSPECTOR_ENABLE=1"), "{text}");
}

/// An NGC job on an 8 x 400G RoCE node through HPC-X's net plugin
/// (nccl-rdma-sharp-plugins `src/p2p_plugin.c` prints the `NET/IB :
/// Using` table; NCCL `src/transport/net.cc` the `via NET/IBext_v8/...`
/// lines), with Inspector records of `coll` at `busbw` GB/s.
fn eight_nic_job(coll: &str, busbw: f64) -> Arc<Snapshot> {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    let table: String = (0..8).map(|i| format!(" [{i}]mlx5_{i}:1/RoCE")).collect();
    let mut log = format!(
        "gpu-a:100:101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n\
         gpu-a:100:101 [0] NCCL INFO Using network IBext_v8\n\
         gpu-a:100:101 [0] NCCL INFO NET/IB : Using{table} [RO]; OOB eth0:10.0.0.1<0>\n"
    );
    for i in 0..8 {
        log.push_str(&format!(
            "gpu-a:100:105 [{i}] NCCL INFO Channel 0{i}/0 : {}[{i}] -> {i}[{i}] [receive] via NET/IBext_v8/{i}/GDRDMA\n",
            8 + i
        ));
    }
    for l in log.lines() {
        agg.log_line("nccl.gpu-a.100.log", &parse_line(l), now);
    }
    coll_records(&mut agg, coll, busbw, now);
    let job = (0..8).fold(SnapshotBuilder::new(), |s, i| {
        s.with_port(&format!("mlx5_{i}"), port(PortState::Active))
    });
    job.nccl(nccl_part(&mut agg, now)).arc()
}

#[test]
fn busbw_target_depends_on_the_collective_and_sums_the_nics() {
    // AllReduce at 120 GB/s on 8 x 400G: a third of the 384 GB/s target.
    let f = findings(
        eight_nic_job("AllReduce", 120.0),
        "nccl_busbw_below_line_rate",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].finding
            .contains("below 70% of the 384.0 GB/s this node's NICs should give"),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].evidence.contains(
            "(8 x 400 Gb/s: mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7)"
        ),
        "{}",
        f[0].evidence
    );
    // The same job at full bandwidth: nothing, and check shows the basis.
    let s = eight_nic_job("AllReduce", 365.0);
    assert_eq!(findings(s.clone(), "nccl_busbw_below_line_rate"), vec![]);
    let text = check_text(s);
    assert!(
        text.contains("[ok]   Measured: 365.0 GB/s vs expected 384.0 GB/s (NCCL Inspector AllReduce busbw: mean of 4"),
        "{text}"
    );
    // AllToAll cannot aggregate NICs: one NIC's 48 GB/s; 40 is healthy,
    // 20 is not.
    assert_eq!(
        findings(
            eight_nic_job("AllToAll", 40.0),
            "nccl_busbw_below_line_rate"
        ),
        vec![]
    );
    let f = findings(
        eight_nic_job("AllToAll", 20.0),
        "nccl_busbw_below_line_rate",
    );
    assert_eq!(f.len(), 1);
    assert!(
        f[0].evidence.contains("AllToAll: one NIC's"),
        "{}",
        f[0].evidence
    );
    // NVLS / CollNet (SHARP) above the NIC sum: quiet.
    assert_eq!(
        findings(
            eight_nic_job("AllReduce", 480.0),
            "nccl_busbw_below_line_rate"
        ),
        vec![]
    );
}

#[test]
fn ngc_job_through_the_hpcx_plugin_at_full_bandwidth_raises_nothing_above_info() {
    let s = eight_nic_job("AllReduce", 370.0);
    let nccl = &s.nccl.as_ref().expect("nccl").summary;
    assert!(nccl
        .connections
        .iter()
        .all(|c| c.key.device.starts_with("mlx5_")
            && c.key.transport == roce_nccl::aggregate::Transport::Roce));
    for rule in [
        "nccl_socket_transport",
        "nccl_gdr_not_used",
        "nccl_gid_not_rocev2",
        "nccl_busbw_below_line_rate",
        "nccl_rails_unused",
        "nccl_tests_wrong",
    ] {
        let f = findings(s.clone(), rule);
        assert!(
            f.iter().all(|f| f.severity == Severity::Info),
            "{rule}: {f:?}"
        );
    }
}

/// The demo's layout: 8 H100 and 8 x 400G ConnectX-7, GPU i under the
/// same PCIe switch as mlx5_i.
fn eight_gpu_topology() -> TopologySnapshot {
    let buses = ["03", "05", "12", "14", "83", "85", "92", "94"];
    TopologySnapshot {
        gpus: (0..8)
            .map(|i| h100(i, &format!("0000:{}:00.0", buses[i])))
            .collect(),
        paths: (0..8)
            .map(|i| GpuNicPath {
                gpu: i,
                nic: format!("mlx5_{i}"),
                class: PathClass::Pix,
                bridges: vec![],
            })
            .collect(),
        gpudirect: Some(crate::support::gpudirect_ready()),
        ..TopologySnapshot::default()
    }
}

/// nccl-tests v2.19.6's stdout (src/util.cu) of a 16-rank all_reduce_perf
/// on NCCL 2.28.9 whose NCCL_IB_HCA is `hca`, at `busbw` GB/s for 8 GiB,
/// `wrong` wrong elements in its last row.
fn nccl_tests_job(hca: Option<&str>, busbw: f64, wrong: u32) -> Arc<Snapshot> {
    let buses = ["03", "05", "12", "14", "83", "85", "92", "94"];
    let devices: Vec<usize> = match hca {
        Some(_) => vec![0, 1],
        None => (0..8).collect(),
    };
    let mut out = String::from(
        "# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
         # Collective test starting: all_reduce_perf
         # nThread 1 nGpus 1 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
",
    );
    for r in 0..16 {
        out.push_str(&format!(
            "#  Rank {r:2} Group  0 Pid {:6} on {:>10} device {:2} [0000:{}:00] NVIDIA H100 80GB HBM3
",
            4100 + r,
            if r < 8 { "gpu-a" } else { "gpu-b" },
            r % 8,
            buses[r % 8]
        ));
    }
    if let Some(h) = hca {
        out.push_str(&format!(
            "gpu-a:4100:4112 [0] NCCL INFO NCCL_IB_HCA set to {h}
"
        ));
    }
    let table: String = devices
        .iter()
        .map(|i| format!(" [{i}]mlx5_{i}:1/RoCE"))
        .collect();
    out.push_str(&format!(
        "gpu-a:4100:4112 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
         gpu-a:4100:4112 [0] NCCL INFO NET/IB : Using{table} [RO]; OOB ens1np0:10.0.0.11<0>
         gpu-a:4100:4112 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 3000 commId 0x2 - Init START
"
    ));
    for d in &devices {
        out.push_str(&format!(
            "gpu-a:4100:4113 [0] NCCL INFO Channel 0{d}/0 : 8[0] -> 0[0] [receive] via NET/IB/{d}/GDRDMA
"
        ));
    }
    out.push_str("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
");
    let alg = busbw / 1.875;
    let time = 8589934592.0 / 1e9 / alg * 1e6;
    out.push_str(&format!(
        "  8589934592    2147483648     float     sum      -1  {time:7.1}  {alg:6.2}  {busbw:6.2}  {wrong:6}  {time:7.1}  {alg:6.2}  {busbw:6.2}       0
"
    ));
    out.push_str(&format!(
        "# Out of bounds values : {wrong} {}
# Avg bus bandwidth    : {busbw} 
#
# Collective test concluded: all_reduce_perf
",
        if wrong > 0 { "FAILED" } else { "OK" }
    ));
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    let mut tests = roce_nccl::nccl_tests::TestsParser::new("all_reduce_perf.out");
    for l in out.lines() {
        agg.log_line("all_reduce_perf.out", &parse_line(l), now);
        if tests.line(l) {
            agg.tests_run("all_reduce_perf.out", tests.finished, tests.current(), now);
        }
    }
    let job = (0..8).fold(SnapshotBuilder::new(), |s, i| {
        s.with_port(&format!("mlx5_{i}"), port(PortState::Active))
    });
    job.nccl(nccl_part(&mut agg, now))
        .topology(eight_gpu_topology())
        .arc()
}

/// The expected figure is the node's: a job held to 2 of 8 NICs by
/// NCCL_IB_HCA at 92 GB/s is far below 384 GB/s, and the rails it leaves
/// out are their own finding naming the setting.
#[test]
fn nccl_ib_hca_subset_is_judged_against_the_node() {
    let s = nccl_tests_job(Some("mlx5_0,mlx5_1"), 92.0, 0);
    let f = findings(s.clone(), "nccl_busbw_below_line_rate");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        f[0].finding,
        "nccl-tests AllReduce bus bandwidth is 92.0 GB/s, below 70% of the 384.0 GB/s this node's NICs should give"
    );
    assert!(
        f[0].evidence.starts_with(
            "all_reduce_perf at 8 GiB over 16 rank(s) on 2 node(s), all_reduce_perf.out: 92.0 GB/s"
        ),
        "{}",
        f[0].evidence
    );
    let r = findings(s.clone(), "nccl_rails_unused");
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].severity, Severity::Warning);
    assert_eq!(
        r[0].finding,
        "NCCL jobs use 2 of the 8 rails of their GPUs on this node: the job's NCCL_IB_HCA=mlx5_0,mlx5_1 leaves them out (NCCL_IB_HCA set to mlx5_0,mlx5_1), so their inter-node bandwidth is at most 2/8 of the node's"
    );
    assert!(
        r[0].fix.starts_with("Unset NCCL_IB_HCA=mlx5_0,mlx5_1"),
        "{}",
        r[0].fix
    );
    // The settings section stops saying the default is right.
    let text = check_text(s);
    assert!(
        text.contains(
            "  unset NCCL_IB_HCA    # jobs set NCCL_IB_HCA=mlx5_0,mlx5_1 (their NCCL logs)"
        ),
        "{text}"
    );
    assert!(!text.contains("NCCL_IB_HCA: default is right"), "{text}");
    assert!(text.contains("[warn] Rails in NCCL's device table: 2 of the 8 rails of the job's GPUs (mlx5_0, mlx5_1; NCCL_IB_HCA=mlx5_0,mlx5_1)"), "{text}");
    assert!(text.contains("[warn] Measured: 92.0 GB/s vs expected 384.0 GB/s (nccl-tests AllReduce busbw: all_reduce_perf at 8 GiB"), "{text}");
}

#[test]
fn healthy_nccl_tests_run_on_every_rail_raises_nothing() {
    let s = nccl_tests_job(None, 367.0, 0);
    let all = rules::evaluate(
        std::slice::from_ref(&s),
        &RulesConfig::default(),
        &Expectations::default(),
    );
    assert!(
        all.iter().all(|f| !f.rule.as_str().starts_with("nccl_")),
        "{all:#?}"
    );
    let text = check_text(s);
    assert!(
        text.contains(
            "[ok]   Measured: 367.0 GB/s vs expected 384.0 GB/s (nccl-tests AllReduce busbw"
        ),
        "{text}"
    );
    assert!(
        text.contains("[ok]   Rails in NCCL's device table: 8 of the 8 rails"),
        "{text}"
    );
    assert!(text.contains("[ok]   Results of all_reduce_perf (all_reduce_perf.out, run 1): #wrong 0 in 1 row(s), Out of bounds values 0"), "{text}");
}

#[test]
fn nccl_tests_wrong_elements_are_critical() {
    let s = nccl_tests_job(None, 367.0, 3);
    let f = findings(s.clone(), "nccl_tests_wrong");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].finding.starts_with(
            "nccl-tests all_reduce_perf computed wrong results: 3 wrong element(s) in 1 row(s)"
        ),
        "{}",
        f[0].finding
    );
    assert!(f[0].evidence.starts_with("all_reduce_perf.out run 1 over 16 rank(s) on 2 host(s) (gpu-a, gpu-b), NCCL 2.28.9: Out of bounds values 3; first at 8 GiB (float sum 2147483648): #wrong 3 out of place, 0 in place"), "{}", f[0].evidence);
    assert!(check_text(s).contains("[FAIL] Results of all_reduce_perf (all_reduce_perf.out, run 1): #wrong 3 in 1 row(s), Out of bounds values 3"));
}

/// A rail that is down is port_down's, not a job's setting.
#[test]
fn a_down_rail_left_out_is_not_the_jobs() {
    let s = nccl_tests_job(Some("mlx5_0,mlx5_1"), 92.0, 0);
    let mut s = (*s).clone();
    if let Some(r) = s.rdma.as_mut() {
        for d in r.devices.iter_mut().skip(2) {
            d.ports[0].state = Some(PortState::Down);
        }
    }
    assert_eq!(findings(Arc::new(s), "nccl_rails_unused"), vec![]);
}
