//! The aggregation over whole NCCL logs (lines as NCCL 2.20 writes them,
//! see log_formats.rs for the source of each format) and Inspector records.

use std::time::{Duration, Instant};

use roce_nccl::aggregate::{Aggregator, AggregatorConfig, ConnKey, GdrNote, Transport};
use roce_nccl::inspector::{parse_prom_line, parse_record, Record};
use roce_nccl::log::parse_line;

fn feed(agg: &mut Aggregator, source: &str, text: &str, now: Instant) {
    for l in text.lines() {
        agg.log_line(source, &parse_line(l), now);
    }
}

/// Rank 0 of a 2-node job on RoCE with GPUDirect RDMA on its receive side
/// and not on its send side (GDR read off), and a garbage line.
const ROCE_JOB: &str = "\
gpu-a:100:101 [0] NCCL INFO NCCL version 2.20.5+cuda12.4
gpu-a:100:101 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
gpu-a:100:101 [0] NCCL INFO Using network IB
gpu-a:100:101 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
\u{1}\u{2} not nccl at all
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a:100:105 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0
gpu-a:100:105 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA
";

/// The device and transport of each connection row.
fn devices_and_transports(agg: &mut Aggregator, now: Instant) -> Vec<(String, Transport)> {
    agg.summary(now)
        .connections
        .iter()
        .map(|r| (r.key.device.clone(), r.key.transport))
        .collect()
}

fn key(device: &str, net: &str, transport: Transport, gdr: bool) -> ConnKey {
    ConnKey {
        device: device.into(),
        port: 1,
        net: net.into(),
        transport,
        gdr,
        pid: None,
    }
}

#[test]
fn connections_by_nic_transport_and_gdr() {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    feed(&mut agg, "nccl.gpu-a.100.log", ROCE_JOB, now);
    let s = agg.summary(now);
    let rows: Vec<(ConnKey, u64)> = s
        .connections
        .iter()
        .map(|r| (r.key.clone(), r.lines))
        .collect();
    assert_eq!(
        rows,
        vec![
            (key("mlx5_0", "IB", Transport::Roce, false), 1),
            (key("mlx5_0", "IB", Transport::Roce, true), 1),
            (key("mlx5_1", "IB", Transport::Roce, true), 1),
        ]
    );
    assert_eq!(s.versions, vec!["2.20.5"]);
    assert_eq!(s.networks, vec!["IB"]);
    assert!(s.gdr_notes.is_empty());
    assert_eq!(s.log_lines, ROCE_JOB.lines().count() as u64);
}

#[test]
fn socket_fallback_second_version_and_gdr_reasons() {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig {
        job_labels: true,
        ..AggregatorConfig::default()
    });
    feed(&mut agg, "f1", ROCE_JOB, now);
    feed(
        &mut agg,
        "f2",
        "gpu-a:200:201 [1] NCCL INFO NCCL version 2.27.3+cuda12.9
gpu-a:200:201 [1] NCCL INFO NET/IB : No device found.
gpu-a:200:201 [1] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
gpu-a:200:201 [1] NCCL INFO Using network Socket
gpu-a:200:201 [1] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'
gpu-a:200:201 [1] NCCL INFO GPU Direct RDMA Disabled for GPU 1 / HCA 0 (distance 7 > 5)
gpu-a:200:209 [1] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/Socket/0
",
        now,
    );
    let s = agg.summary(now);
    assert_eq!(s.versions, vec!["2.20.5", "2.27.3"]);
    assert_eq!(s.networks, vec!["IB", "Socket"]);
    let socket = s
        .connections
        .iter()
        .find(|r| r.key.transport == Transport::Socket)
        .expect("socket row");
    assert_eq!(
        (socket.key.device.as_str(), socket.key.port, socket.key.pid),
        ("eth0", 0, Some(200))
    );
    assert!(s
        .connections
        .iter()
        .filter(|r| r.key.transport == Transport::Roce)
        .all(|r| r.key.pid == Some(100)));
    assert_eq!(
        s.gdr_notes,
        vec![
            GdrNote::HcaUnsupported {
                net: "IB".into(),
                hca: "mlx5_1".into()
            },
            GdrNote::PathTooFar {
                gpu: "1".into(),
                hca: "0".into(),
                distance: Some(7),
                threshold: Some(5)
            },
        ]
    );
}

#[test]
fn plugin_and_unknown_device_tables() {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    feed(
        &mut agg,
        "f",
        "h:1:1 [0] NCCL INFO NET/IBext_v8 : Using [0]mlx5_2:1/IB ; OOB ib0:10.1.0.1<0>
h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/0/GDRDMA
h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/3/GDRDMA
h:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/5
",
        now,
    );
    let keys = devices_and_transports(&mut agg, now);
    assert!(keys.contains(&("mlx5_2".into(), Transport::Ib)));
    assert!(
        keys.contains(&("unknown".into(), Transport::Other)),
        "{keys:?}"
    );
    assert_eq!(keys.len(), 3);
}

/// An NGC container's job on RoCE: HPC-X's net plugin
/// (nccl-rdma-sharp-plugins, `src/p2p_plugin.c`) prints its device table
/// as `NET/IB : Using ...` (`"NET/IB : Using%s %s; OOB %s:%s"`) while NCCL
/// (`src/transport/net.cc`) names the plugin's net on each connection:
/// `via NET/IBext_v8/<dev>/GDRDMA`.
#[test]
fn hpcx_plugin_connections_map_to_the_nic_of_the_ib_table() {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    feed(
        &mut agg,
        "f",
        "h:1:1 [0] NCCL INFO Using network IBext_v8
h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [2]mlx5_2:1/RoCE [3]mlx5_3:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/2/GDRDMA
h:1:1 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IBext_v8/3/GDRDMA
",
        now,
    );
    let keys = devices_and_transports(&mut agg, now);
    assert!(
        keys.contains(&("mlx5_2".into(), Transport::Roce)),
        "{keys:?}"
    );
    assert!(
        keys.contains(&("mlx5_3".into(), Transport::Roce)),
        "{keys:?}"
    );
    assert!(!keys.iter().any(|(d, _)| d == "unknown"), "{keys:?}");
}

#[test]
fn window_expiry_and_caps() {
    let now = Instant::now();
    let cfg = AggregatorConfig {
        window: Duration::from_secs(60),
        max_keys: 4,
        ..AggregatorConfig::default()
    };
    let mut agg = Aggregator::new(cfg);
    feed(&mut agg, "f", ROCE_JOB, now);
    for i in 0..100 {
        let l = format!("h:{i}:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/{i}");
        agg.log_line("f", &parse_line(&l), now);
    }
    assert!(agg.summary(now).connections.len() <= 4);
    let later = now + Duration::from_secs(61);
    let s = agg.summary(later);
    assert!(!s.has_data(), "{s:?}");
}

#[test]
fn busbw_of_large_multi_node_collectives_only() {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    let rec = |coll: &str, size: u64, nnodes: u32, bw: f64| {
        let j = format!(
            r#"{{"header":{{"id":"0x1","rank":0,"n_ranks":16,"nnodes":{nnodes}}},"metadata":{{"inspector_output_format_version":"v4.0","hostname":"h","pid":1}},"coll_perf":{{"coll":"{coll}","coll_sn":1,"coll_msg_size_bytes":{size},"coll_exec_time_us":100,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":1.0,"coll_busbw_gbs":{bw}}}}}"#
        );
        match parse_record(j.as_bytes()) {
            Ok(Record::Coll(c)) => c,
            other => panic!("{other:?}"),
        }
    };
    agg.inspector_record(&rec("AllReduce", 1 << 30, 2, 40.0), now);
    agg.inspector_record(&rec("AllReduce", 1 << 30, 2, 44.0), now);
    agg.inspector_record(&rec("AllReduce", 1 << 20, 2, 5.0), now); // below the floor
    agg.inspector_record(&rec("AllReduce", 1 << 30, 1, 300.0), now); // single node: NVLink
    agg.inspector_record(&rec("SomethingNew", 1 << 30, 4, 10.0), now);
    let prom = r#"nccl_bus_bandwidth_gbs{comm_id="0x2",hostname="h",rank="0",slurm_job="unknown",slurm_job_id="unknown",nranks="16",n_nodes="2",gpu_device_id="GPU0",collective="AllGather",coll_sn="7",timestamp="2025-10-17T03:31:47Z",message_size="512.00MB"} 38.5"#;
    let p = parse_prom_line(prom).expect("prom");
    agg.prom_sample(&p, now);
    agg.prom_sample(&p, now); // the same collective in a rewritten file
    let s = agg.summary(now);
    let bw: Vec<(&str, u64, f64, f64, f64)> = s
        .busbw
        .iter()
        .map(|b| {
            (
                b.collective.as_str(),
                b.samples,
                b.min_gbs,
                b.mean_gbs,
                b.max_gbs,
            )
        })
        .collect();
    assert_eq!(
        bw,
        vec![
            ("AllGather", 1, 38.5, 38.5, 38.5),
            ("AllReduce", 2, 40.0, 42.0, 44.0),
            ("other", 1, 10.0, 10.0, 10.0)
        ]
    );
}

#[test]
fn device_tables_outlive_the_window() {
    // A long job logs its device table at init; a communicator created an
    // hour later still resolves its NIC.
    let now = Instant::now();
    let cfg = AggregatorConfig {
        window: Duration::from_secs(60),
        ..AggregatorConfig::default()
    };
    let mut agg = Aggregator::new(cfg);
    feed(&mut agg, "f", ROCE_JOB, now);
    let later = now + Duration::from_secs(3600);
    assert!(!agg.summary(later).has_data());
    agg.log_line(
        "f",
        &parse_line(
            "gpu-a:100:105 [0] NCCL INFO Channel 02/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA",
        ),
        later,
    );
    let s = agg.summary(later);
    assert_eq!(s.connections.len(), 1);
    assert_eq!(s.connections[0].key.device, "mlx5_1");
}

/// A device-table line of 64 distinct indexes from `first` on, each a
/// distinct long device name: the hostile shape that grew the state
/// without bound.
fn flood_line(pid: u32, first: u32) -> String {
    let mut l = format!("gpu-a:{pid}:{pid} [0] NCCL INFO NET/IB : Using");
    for i in first..first + 64 {
        l.push_str(&format!(" [{i}]mlx5_{i:0>40}:1/RoCE"));
    }
    l.push_str(" [RO]; OOB eth0:10.0.0.1<0>");
    l
}

#[test]
fn distinct_device_entries_stay_within_the_caps_and_are_counted() {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    // 1,024 processes in 16 files, each naming 640 distinct indexes:
    // 655,360 entries offered.
    for file in 0..16u32 {
        let source = format!("nccl.{file}.log");
        for pid in 0..64u32 {
            for round in 0..10u32 {
                let line = flood_line(file * 1000 + pid, round * 64);
                agg.log_line(&source, &parse_line(&line), now);
            }
        }
    }
    let s = agg.summary(now);
    let cfg = AggregatorConfig::default();
    assert!(s.processes <= cfg.max_processes, "{}", s.processes);
    // At most 16,384 entries of at most ~200 bytes each.
    assert!(s.state_bytes <= 4 << 20, "{} bytes held", s.state_bytes);
    assert!(s.state_bytes > 0);
    // 64 indexes kept per process; the other 576 of each refused.
    assert_eq!(s.dropped.devices, 1024 * 576);
    // Processes evicted to keep 16,384 entries (256 processes of 64).
    assert_eq!(s.processes, 256);
    assert_eq!(s.dropped.processes, 1024 - 256);
    assert_eq!(s.dropped.nets, 0);
}

#[test]
fn nets_and_interfaces_beyond_their_caps_are_refused_and_counted() {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    for n in 0..20 {
        let line = format!(
            "h:1:1 [0] NCCL INFO NET/IBext_v{n} : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.1<0>"
        );
        agg.log_line("f.log", &parse_line(&line), now);
    }
    let mut socket = "h:1:1 [0] NCCL INFO NET/Socket : Using".to_string();
    for i in 0..100 {
        socket.push_str(&format!(" [{i}]eth{i}:10.0.0.{i}<0>"));
    }
    agg.log_line("f.log", &parse_line(&socket), now);
    let s = agg.summary(now);
    assert_eq!(s.dropped.nets, 12);
    assert_eq!(s.dropped.sockets, 68);
    assert_eq!(s.processes, 1);
}

#[test]
fn a_files_tables_go_with_it_and_a_silent_process_expires() {
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    // The same host:pid in two files (a pid reused by a later job on
    // another node's log): each file's tables are its own.
    feed(&mut agg, "a.log", ROCE_JOB, now);
    feed(&mut agg, "b.log", ROCE_JOB, now);
    assert_eq!(agg.summary(now).processes, 2);
    agg.forget_source("a.log");
    let s = agg.summary(now);
    assert_eq!(s.processes, 1);
    // b's connections still resolve to their NIC.
    agg.log_line(
        "b.log",
        &parse_line(
            "gpu-a:100:105 [0] NCCL INFO Channel 02/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA",
        ),
        now,
    );
    let s = agg.summary(now);
    assert!(
        s.connections.iter().all(|r| r.key.device != "unknown"),
        "{:?}",
        s.connections
    );
    agg.forget_source("b.log");
    let s = agg.summary(now);
    assert_eq!((s.processes, s.state_bytes), (0, 0));

    // Silent for longer than the expiry: dropped; a process still talking
    // is kept.
    let cfg = AggregatorConfig {
        process_expiry: Duration::from_secs(600),
        window: Duration::from_secs(3600),
        ..AggregatorConfig::default()
    };
    let mut agg = Aggregator::new(cfg);
    feed(&mut agg, "old.log", ROCE_JOB, now);
    let later = now + Duration::from_secs(601);
    feed(&mut agg, "new.log", ROCE_JOB, later);
    assert_eq!(agg.summary(later).processes, 1);
}

/// What the job asked for and what NCCL found: settings (only those judged
/// are held), the device table, a net without devices, plugins, the GPUs
/// of the communicators and each RoCE queue pair's GID (NCCL 2.28.9
/// formats, see log_formats.rs).
#[test]
fn job_settings_device_tables_gids_and_gpus() {
    use roce_nccl::aggregate::{GidUse, NetNote, SeenIbPort, Setting};
    use roce_nccl::log::NcclLinkLayer;
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    feed(
        &mut agg,
        "nccl.gpu-a.7.log",
        "\
gpu-a:7:8 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1
gpu-a:7:8 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /tmp/g.xml
gpu-a:7:8 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 0.
gpu-a:7:8 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.
gpu-a:7:8 [0] NCCL INFO NET/Plugin: libnccl-net.so: undefined symbol: ncclNetPlugin_v10
gpu-a:7:8 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB ens1np0:10.0.0.11<0>
gpu-a:7:8 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 3000 commId 0x2 - Init START
gpu-a:7:9 [0] NCCL INFO NET/IB: NCCL Dev 1 IbDev 1 Port 1 qpn 7 mtu 5 GID 3 (0/B01000AFFFF0000) fifoRkey=0x1 fifoLkey=0x1
gpu-b:9:9 [0] NCCL INFO NET/IB : No device found.
",
        now,
    );
    let job = agg.summary(now).job;
    assert_eq!(
        job.settings,
        vec![
            Setting {
                name: "NCCL_IB_GID_INDEX".into(),
                value: "3".into()
            },
            Setting {
                name: "NCCL_IB_HCA".into(),
                value: "mlx5_0,mlx5_1".into()
            },
        ]
    );
    assert_eq!(job.setting("NCCL_IB_HCA"), Some("mlx5_0,mlx5_1"));
    assert_eq!(
        job.ib_ports,
        ["mlx5_0", "mlx5_1"]
            .map(|d| SeenIbPort {
                net: "IB".into(),
                device: d.into(),
                port: 1,
                link: NcclLinkLayer::Roce
            })
            .to_vec()
    );
    assert_eq!(
        job.net_notes,
        vec![
            NetNote::NoDevice { net: "IB".into() },
            NetNote::PluginLoadFailed {
                detail: "libnccl-net.so: undefined symbol: ncclNetPlugin_v10".into()
            },
        ]
    );
    assert_eq!(job.gpus, vec!["0000:03:00.0"]);
    assert_eq!(job.max_ranks, 16);
    assert_eq!(
        job.gids,
        vec![GidUse {
            device: "mlx5_1".into(),
            port: 1,
            gid_index: 3,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 1, 11],
            mtu: 5,
        }]
    );
    // the window ends it all
    let later = now + Duration::from_secs(3600);
    assert_eq!(agg.summary(later).job, Default::default());
}

/// nccl-tests' stdout saved into the log directory: the reader hands its
/// lines to the NCCL line parser and to the nccl-tests parser both.
#[test]
fn reader_reads_nccl_tests_output_in_the_log_dir() {
    use roce_nccl::reader::{NcclReader, NcclReaderConfig};
    let dir = std::env::temp_dir().join(format!("roce-nccl-tests-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/nccl/demo/ib-hca-subset/all_reduce_perf.gpu-a.out");
    std::fs::copy(&fixture, dir.join("all_reduce_perf.gpu-a.out")).unwrap();
    let mut reader = NcclReader::new(&NcclReaderConfig {
        log_dir: Some(dir.clone()),
        inspector_dir: None,
        interval: Duration::from_secs(30),
        window: Duration::from_secs(900),
        idle_expiry: Duration::from_secs(3600),
        max_files: 16,
        max_bytes_per_read: 1 << 20,
        busbw_min_bytes: 256 << 20,
        min_line_rate_fraction: 0.7,
        job_labels: false,
    });
    let mut errors = Vec::new();
    let (part, failed) = reader.sample(&mut errors);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((failed, errors.len()), (None, 0));
    let job = &part.summary.job;
    assert_eq!(job.setting("NCCL_IB_HCA"), Some("mlx5_0,mlx5_1"));
    assert_eq!(job.tests.len(), 1);
    let t = &job.tests[0];
    assert_eq!(t.file, "all_reduce_perf.gpu-a.out");
    assert_eq!(t.run.collective, Some("AllReduce"));
    assert_eq!(t.run.nnodes(), Some(2));
    assert_eq!(t.run.largest_size(), Some(8 << 30));
    assert!(t.run.complete);
    // NCCL's own lines of the same file
    assert_eq!(part.summary.versions, vec!["2.28.9"]);
    assert_eq!(part.summary.connections.len(), 2);
}

/// Attack: a log that floods the job-side state (invented settings, GID
/// lines of ever new GIDs, nccl-tests headers with thousands of hosts and
/// runs) stays within each cap, and the judged settings are not pushed
/// out by invented names.
#[test]
fn hostile_job_lines_stay_within_their_caps() {
    use roce_nccl::aggregate::{JUDGED_SETTINGS, MAX_TESTS_RUNS};
    use roce_nccl::nccl_tests::{TestsParser, MAX_DEVICES, MAX_HOSTS};
    let now = Instant::now();
    let mut agg = Aggregator::new(AggregatorConfig::default());
    let p = "evil:1:1 [0] NCCL INFO ";
    agg.log_line(
        "f",
        &parse_line(&format!("{p}NCCL_IB_HCA set to mlx5_0")),
        now,
    );
    for i in 0..20_000u32 {
        for l in [
            format!("{p}NCCL_FAKE_{i} set by environment to {i}."),
            format!("{p}NET/IB: NCCL Dev 0 IbDev {i} Port 1 qpn 1 mtu 5 GID {i} ({i:X}/{i:X}) fifoRkey=0x1 fifoLkey=0x1"),
            format!("{p}NET/Plugin: libnccl-net-{i}.so: undefined symbol: x"),
            format!("{p}ncclCommInitRank comm 0x1 rank 0 nranks {i} cudaDev 0 nvmlDev 0 busId {i:x}000 commId 0x1 - Init START"),
            format!("{p}NCCL_IB_GID_INDEX set by environment to {}.", "9".repeat(300)),
        ] {
            agg.log_line("f", &parse_line(&l), now);
        }
    }
    let mut tests = TestsParser::new("all_reduce_perf.out");
    for run in 0..200u32 {
        let mut lines = vec![format!("# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 1 iters: 1 agg iters: 1 validation: 1 graph: 0")];
        for r in 0..500u32 {
            lines.push(format!(
                "#  Rank {r} Group 0 Pid 1 on host-{run}-{r} device 0 [0000:{:02x}:00] GPU",
                r % 256
            ));
        }
        lines.push("           8             2     float     sum      -1    26.51    0.00    0.00      1    25.98    0.00    0.00      0".into());
        for l in lines {
            if tests.line(&l) {
                let r = tests.current();
                assert!(r.hosts.len() <= MAX_HOSTS && r.devices.len() <= MAX_DEVICES);
                agg.tests_run("all_reduce_perf.out", tests.finished, r, now);
            }
        }
    }
    let job = agg.summary(now).job;
    assert!(
        job.settings.len() <= JUDGED_SETTINGS.len(),
        "{:?}",
        job.settings
    );
    assert_eq!(
        job.setting("NCCL_IB_HCA"),
        Some("mlx5_0"),
        "invented names push out nothing"
    );
    assert!(job
        .settings
        .iter()
        .all(|s| s.value.len() <= roce_nccl::log::MAX_SETTING_VALUE));
    assert!(job.gids.len() <= 256);
    assert!(job.gpus.len() <= 64);
    assert!(job.net_notes.len() <= 32);
    assert!(job.tests.len() <= MAX_TESTS_RUNS);
    assert!(job.tests.iter().all(|t| t.run.hosts.len() <= MAX_HOSTS));
}
