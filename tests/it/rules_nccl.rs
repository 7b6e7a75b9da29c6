//! The NCCL rules (`nccl_socket_transport`, `nccl_gdr_not_used`,
//! `nccl_busbw_below_line_rate`) through the rule engine: each fires on what
//! NCCL logs when the problem is there (lines in NCCL's formats, see
//! crates/nccl/tests) and stays silent on a healthy job.

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
use roce_testkit::snapshot::{active_port, mlx5, SnapshotBuilder};
use roce_topology::gpudirect::{GpuDirect, NvidiaModule};
use roce_topology::path::PathClass;
use roce_topology::{GpuNicPath, TopologySnapshot};

/// 400 Gb/s RoCE ports: 50e9 bytes per second.
fn port(state: PortState) -> Port {
    Port {
        state: Some(state),
        rate_bytes_per_second: Some(50_000_000_000),
        ..active_port(1)
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
gpu-a:100:101 [0] NCCL INFO NCCL version 2.20.5+cuda12.4
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

#[test]
fn socket_transport_while_rdma_ports_are_up() {
    let log = "\
gpu-a:200:201 [1] NCCL INFO NCCL version 2.27.3+cuda12.9
gpu-a:200:201 [1] NCCL INFO NET/IB : No device found.
gpu-a:200:201 [1] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
gpu-a:200:201 [1] NCCL INFO Using network Socket
gpu-a:200:209 [1] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/Socket/0
gpu-a:200:209 [1] NCCL INFO Channel 00/0 : 9[1] -> 1[1] [receive] via NET/Socket/0
";
    let f = findings(
        snapshot(log, None, PortState::Active, None),
        "nccl_socket_transport",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].subject.netdev.as_deref(), Some("eth0"));
    assert!(
        f[0].evidence
            .contains("2 channel connection(s) via NET/Socket over eth0"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].evidence.contains("mlx5_0 port 1, mlx5_1 port 1"),
        "{}",
        f[0].evidence
    );
    assert!(f[0].evidence.contains("2.27.3"), "{}", f[0].evidence);
    // the same job on a host whose RDMA ports are down: Socket is all there is
    assert_eq!(
        findings(
            snapshot(log, None, PortState::Down, None),
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
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].evidence
            .starts_with("2 NET channel connection(s) on mlx5_0 port 1"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].evidence
            .contains("GPU Direct RDMA Disabled for HCA mlx5_0"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].evidence
            .contains("GPUDirect RDMA not ready on this host"),
        "{}",
        f[0].evidence
    );
    assert!(!f[0].finding.contains("although"));
}

#[test]
fn gdr_not_used_with_the_path_beyond_pxb() {
    let log = format!(
        "{HEAD}gpu-a:100:101 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 8 > 5)
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0
"
    );
    let f = findings(
        snapshot(
            &log,
            None,
            PortState::Active,
            Some(topology(PathClass::Phb, true)),
        ),
        "nccl_gdr_not_used",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].evidence.contains("GPU 0 / HCA 0 (distance 8 > 5"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].evidence.contains("GPU 0 -> mlx5_0: PHB"),
        "{}",
        f[0].evidence
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
    assert!(
        f[0].finding
            .contains("although the driver is ready and the GPU-NIC path allows it"),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].evidence.contains("NCCL_NET_GDR_LEVEL"),
        "{}",
        f[0].evidence
    );
}

#[test]
fn busbw_below_the_line_rate_of_the_nics_used() {
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
        "NCCL AllReduce bus bandwidth of large multi-node collectives is 20.0 GB/s, below 70% of the 96.0 GB/s expected of AllReduce on these NICs"
    );
    assert!(
        f[0].evidence.contains("expected at least 67.2 GB/s (0.7 x 96.0 GB/s: ring/tree across nodes: about 24 GB/s per 200 Gb/s NIC, summed over the NICs NCCL used"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].evidence
            .contains("NICs NCCL used: mlx5_0 port 1 50.0 GB/s, mlx5_1 port 1 50.0 GB/s"),
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
            "[ok]   Transport seen: RoCEv2 GDR: on (mlx5_0 port 1, mlx5_1 port 1; NCCL 2.20.5)"
        ),
        "{text}"
    );
    assert!(
        text.contains("[ok]   Transport seen: RoCEv2 GDR: off (mlx5_0 port 1; NCCL 2.20.5)"),
        "{text}"
    );
    assert!(
        text.contains("[warn] Measured: 20.0 GB/s vs expected 96.0 GB/s (ring/tree across nodes: about 24 GB/s per 200 Gb/s NIC, summed over the NICs NCCL used: mlx5_0 port 1 50.0 GB/s, mlx5_1 port 1 50.0 GB/s); AllReduce busbw, mean of 4 collective(s) of at least 256 MiB over up to 2 nodes"),
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
            .contains("below 70% of the 384.0 GB/s expected of AllReduce"),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].evidence.contains("mlx5_7 port 1 50.0 GB/s"),
        "{}",
        f[0].evidence
    );
    // The same job at full bandwidth: nothing, and check shows the basis.
    let s = eight_nic_job("AllReduce", 365.0);
    assert_eq!(findings(s.clone(), "nccl_busbw_below_line_rate"), vec![]);
    let text = check_text(s);
    assert!(
        text.contains("[ok]   Measured: 365.0 GB/s vs expected 384.0 GB/s (ring/tree across nodes"),
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
        "nccl_busbw_below_line_rate",
    ] {
        let f = findings(s.clone(), rule);
        assert!(
            f.iter().all(|f| f.severity == Severity::Info),
            "{rule}: {f:?}"
        );
    }
}
