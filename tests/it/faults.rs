//! Host faults through the whole pipeline: the real sources run by the real
//! `Sampler` (rules and history included), the snapshot it publishes and
//! the exposition of that snapshot. Each fault is injected where the host
//! would produce it: errnos through the RDMA reader's file layer
//! (`FaultFs`, shared with crates/rdma/tests), counters rewritten in a copy
//! of a fixture tree, a netlink socket whose kernel end never answers, an
//! NVML that fails. In each: no panic, the affected source says what went
//! wrong in its `SourceStatus` and in `roce_collector_*`, and the other
//! sources and devices keep exporting.
//!
//! A FIFO in place of a counter file is refused by its type at open. A read
//! that never returns (on mlx5 a counter read is a firmware command and can
//! stall) is the sampler's to bound: the file misses its per-item deadline,
//! its value is absent and reported once, and the rest of the source and
//! the other sources are read in that sample and the next.
//!
//! Reader-level cases (the same faults without the pipeline) are in
//! crates/rdma/tests/faults.rs; the netlink socket's own timeout in
//! crates/netlink/tests/faults.rs.

use crate::rdma_common;

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::support::skip_unless_ci;
use crate::support::texts;
use rdma_common::{fixture, FaultFs, TempTree};
use roce_exporter::config::Config;
use roce_exporter::exposition::{self, BuildInfo, Format};
use roce_exporter::host::HostPaths;
use roce_exporter::rules::history::FollowedCounter;
use roce_exporter::sampler::Sampler;
use roce_exporter::snapshot::{Snapshot, SourceState};
use roce_exporter::sources::netdev::NetdevSource;
use roce_exporter::sources::rdma::RdmaSource;
use roce_exporter::sources::rdma_netlink::{KernelNldev, NetlinkHwCounters, Nldev};
use roce_exporter::sources::topology::TopologySource;
use roce_exporter::sources::{self, Source};
use roce_netlink::rdma::{HwCounter, RdmaDevice};
use roce_netlink::{NlError, Protocol, Socket};
use roce_rdma::{DeviceFilter, HwCounterPath, RdmaReader};
use roce_topology::nvml::{FakeNvml, GpuLibrary, NvmlError, NvmlGpu, NvmlState};
use roce_topology::TopologyReader;

/// The rules whose evidence is a counter's growth: the ones a counter reset
/// could fool.
const RATE_RULES: &[&str] = &[
    "link_flap",
    "symbol_errors",
    "retransmissions",
    "ack_timeouts",
    "sequence_errors",
    "completion_errors",
    "out_of_buffer",
    "receiver_congested",
    "sender_throttled",
    "cnp_not_sent",
    "cnp_ignored",
    "pfc_storm",
    "pfc_pause_received",
    "pfc_pause_sent",
    "lossless_discards",
    "discards_growing",
    "host_ring_drops",
];

fn paths(root: &Path) -> HostPaths {
    HostPaths {
        sysfs: root.to_path_buf(),
        procfs: root.join("proc"),
    }
}

fn config(yaml: &str) -> Config {
    Config::parse(yaml, "test").expect("valid test config")
}

/// The RDMA source over `FaultFs` on `root`, sysfs only.
fn rdma_over(root: &Path) -> (Box<dyn Source>, FaultFs) {
    let fs = FaultFs::for_tree(root);
    let handle = fs.share();
    let reader = RdmaReader::with_fs(root.to_path_buf(), DeviceFilter::default(), Box::new(fs));
    let source = RdmaSource::<KernelNldev>::with_parts(reader, None);
    (Box::new(source), handle)
}

/// A sampler of the default configuration over `root`: the RDMA source
/// over `FaultFs` and the other sources as `roce_exporter` builds them.
fn sampler_over(root: &Path) -> (Sampler, FaultFs) {
    let config = Config::default();
    let (rdma, fs) = rdma_over(root);
    let mut all = vec![rdma];
    all.extend(others(&config, root));
    (Sampler::new(all, &config), fs)
}

/// The other sources as `roce_exporter` builds them for this tree.
fn others(config: &Config, root: &Path) -> Vec<Box<dyn Source>> {
    let p = paths(root);
    vec![
        Box::new(NetdevSource::new(config, &p)),
        Box::new(TopologySource::new(config, &p)),
    ]
}

fn text(snapshot: &Arc<Snapshot>) -> String {
    exposition::encode(
        snapshot.clone(),
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    )
}

/// The value of the RDMA collector's `family` with the labels `extra`
/// after its own, if present.
fn rdma_collector(text: &str, family: &str, extra: &str) -> Option<f64> {
    let labels = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    value(text, &format!(r#"{family}{{collector="rdma"{labels}}}"#))
}

/// The value of `family` of port 1 of `device`, if present.
fn port_value(text: &str, family: &str, device: &str) -> Option<f64> {
    value(text, &format!(r#"{family}{{device="{device}",port="1"}}"#))
}

/// The value of the one sample line `name{labels}` (labels exactly as
/// exposed, in order), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn lines_starting(text: &str, prefix: &str) -> usize {
    text.lines().filter(|l| l.starts_with(prefix)).count()
}

fn rate_findings(s: &Snapshot) -> Vec<String> {
    s.findings
        .iter()
        .filter(|f| RATE_RULES.contains(&f.rule.as_str()))
        .map(|f| format!("{}: {}", f.rule, f.finding))
        .collect()
}

fn device_names(s: &Snapshot) -> Vec<&str> {
    s.rdma
        .iter()
        .flat_map(|r| r.devices.iter())
        .map(|d| d.name.as_str())
        .collect()
}

/// Every sample value of a counter family (`*_total`) in the exposition.
fn counter_values(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            if !name.ends_with("_total") {
                return None;
            }
            Some((series.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The paths of a device as the reader names them (through its class link).
fn device_paths(root: &Path, dev: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        out.push(dir.to_path_buf());
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            } else {
                out.push(e.path());
            }
        }
    }
    let class = root.join("class/infiniband").join(dev);
    let real = std::fs::canonicalize(&class).unwrap();
    let mut all = Vec::new();
    walk(&real, &mut all);
    all.into_iter()
        .map(|p| class.join(p.strip_prefix(&real).unwrap()))
        .collect()
}

// ---------------------------------------------------------------------------

#[test]
fn a_device_removed_during_a_sample_leaves_the_exposition_and_the_rest_exports() {
    let root = fixture("sys-mlx5-roce");
    let (mut sampler, fs) = sampler_over(&root);
    let first = sampler.sample();
    assert_eq!(device_names(&first), ["mlx5_0", "mlx5_1"]);
    let t = text(&first);
    assert_eq!(port_value(&t, "roce_port_up", "mlx5_1"), Some(1.0));

    // Hot-unplug while the sample runs: listed, then every file of the
    // device fails (ENODEV on a kept handle, ENOENT on a reopen).
    {
        let mut faults = fs.faults.lock().unwrap();
        for p in device_paths(&root, "mlx5_1") {
            faults.insert(p, libc::ENODEV);
        }
        faults.insert(root.join("class/infiniband/mlx5_1"), libc::ENOENT);
    }
    for _ in 0..2 {
        let s = sampler.sample();
        assert_eq!(device_names(&s), ["mlx5_0"]);
        let rdma = s.source("rdma").unwrap();
        assert_eq!(rdma.state, SourceState::Ok);
        assert_eq!(
            texts(&rdma.errors),
            Vec::<String>::new(),
            "gone is not an error"
        );
        let netdevs: Vec<&str> = s
            .netdev
            .iter()
            .flat_map(|n| n.netdevs.iter())
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(netdevs, ["ens1f0np0"], "mlx5_0's netdev is still read");
        assert!(s.sources.iter().all(|st| st.state.success()));
        let t = text(&s);
        assert_eq!(port_value(&t, "roce_port_up", "mlx5_0"), Some(1.0));
        // No stale mlx5_1 series: only the finding that says it is gone.
        let stale: Vec<&str> = t
            .lines()
            .filter(|l| l.contains(r#"device="mlx5_1""#))
            .filter(|l| {
                !(l.starts_with("roce_finding{") && l.contains(r#"rule="rdma_device_gone""#))
            })
            .collect();
        assert_eq!(stale, Vec::<&str>::new(), "no stale mlx5_1 series");
        assert!(
            t.lines().any(|l| l.starts_with("roce_finding{")
                && l.contains(r#"rule="rdma_device_gone""#)
                && l.contains(r#"device="mlx5_1""#)
                && l.contains(r#"severity="critical""#)),
            "the device that went away is a critical finding:\n{t}"
        );
        assert_eq!(rdma_collector(&t, "roce_collector_success", ""), Some(1.0));
        assert_eq!(
            rdma_collector(&t, "roce_collector_errors_total", r#"kind="absent""#),
            None,
            "a device that went away between listing and reading is not a read error \
             (a kind appears with its first failed read)"
        );
    }
}

/// Writes `name value` pairs into counter files of `port` (a folder).
fn set(port: &Path, values: &[(&str, u64)]) {
    for (file, v) in values {
        std::fs::write(port.join(file), format!("{v}\n")).unwrap();
    }
}

/// An `ethtool -S` listing: the mlx5 ConnectX-7 fixture (names in
/// en_stats.c order) with the given counters set.
fn ethtool_listing(values: &[(&str, u64)]) -> String {
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates/netdev/tests/fixtures/ethtool/mlx5-cx7.txt"),
    )
    .unwrap();
    base.lines()
        .map(|l| {
            let name = l.trim().split(':').next().unwrap_or("");
            match values.iter().find(|(n, _)| *n == name) {
                Some((n, v)) => format!("     {n}: {v}"),
                None => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn a_driver_reload_resetting_counters_raises_no_rate_finding_and_exports_the_new_values() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let replay = tree.root.join("netdev-replay");
    std::fs::create_dir(&replay).unwrap();
    let config = config(&format!(
        "sample_interval: 1s\nnetdevs: {{replay: {}}}\n",
        replay.display()
    ));
    let port = tree.root.join("class/infiniband/mlx5_0/ports/1");
    let high: &[(&str, u64)] = &[
        ("counters/link_downed", 7),
        ("counters/symbol_error", 5_000_000),
        ("hw_counters/np_cnp_sent", 1_000_000_000),
        ("hw_counters/rp_cnp_handled", 1_000_000_000),
        ("hw_counters/np_ecn_marked_roce_packets", 1_000_000_000),
        ("hw_counters/out_of_buffer", 900_000_000),
        ("hw_counters/out_of_sequence", 800_000_000),
        ("hw_counters/packet_seq_err", 700_000_000),
        ("hw_counters/local_ack_timeout_err", 600_000_000),
        ("hw_counters/roce_adp_retrans", 500_000_000),
    ];
    let ethtool_high: &[(&str, u64)] = &[
        ("rx_prio3_pause", 90_000_000),
        ("rx_prio3_pause_duration", 4_000_000_000_000),
        ("tx_prio3_pause_duration", 4_000_000_000_000),
        ("tx_pause_storm_warning_events", 400),
        ("tx_pause_storm_error_events", 300),
        ("rx_discards_phy", 200_000_000),
        ("rx_prio3_discards", 100_000),
        ("link_down_events_phy", 7),
        ("rx_symbol_err_phy", 5_000_000),
    ];
    set(&port, high);
    std::fs::write(replay.join("ens1f0np0.txt"), ethtool_listing(ethtool_high)).unwrap();

    let paths = paths(&tree.root);
    let mut sampler = Sampler::new(sources::all(&config, &paths), &config);
    let first = sampler.sample();
    assert_eq!(rate_findings(&first), Vec::<String>::new(), "first sample");

    // The driver reloads: every counter starts again from (nearly) zero.
    let low: Vec<(&str, u64)> = high.iter().map(|(n, _)| (*n, 1)).collect();
    let ethtool_low: Vec<(&str, u64)> = ethtool_high.iter().map(|(n, _)| (*n, 0)).collect();
    set(&port, &low);
    std::fs::write(replay.join("ens1f0np0.txt"), ethtool_listing(&ethtool_low)).unwrap();
    for round in 0..2 {
        let s = sampler.sample();
        assert_eq!(
            rate_findings(&s),
            Vec::<String>::new(),
            "after the reset ({round})"
        );
        assert!(
            s.sources.iter().all(|st| st.errors.is_empty()),
            "{:?}",
            s.sources
        );
        let t = text(&s);
        // The exported counters are the new values, not carried over.
        // (The PMA's link_downed and symbol_error are not exported on this
        // Ethernet port: the netdev's 64-bit counts stand for them.)
        let port_series = r#"{device="mlx5_0",port="1"}"#;
        for family in ["roce_cnp_sent_total", "roce_out_of_buffer_drops_total"] {
            assert_eq!(
                value(&t, &format!("{family}{port_series}")),
                Some(1.0),
                "{family}"
            );
        }
        let netdev_series = r#"{netdev="ens1f0np0",device="mlx5_0",port="1"}"#;
        for family in [
            "roce_netdev_link_down_events_total",
            "roce_netdev_phy_symbol_errors_total",
        ] {
            assert_eq!(
                value(&t, &format!("{family}{netdev_series}")),
                Some(0.0),
                "{family}"
            );
        }
        assert_eq!(
            value(
                &t,
                r#"roce_pfc_pause_duration_seconds_total{netdev="ens1f0np0",device="mlx5_0",port="1",priority="3",direction="rx"}"#
            ),
            Some(0.0)
        );
        // No counter goes negative anywhere.
        let negative: Vec<_> = counter_values(&t)
            .into_iter()
            .filter(|(_, v)| *v < 0.0)
            .collect();
        assert_eq!(negative, vec![]);
        // What the rules saw: no increase, one reset.
        let inc = sampler
            .history()
            .port("mlx5_0", 1)
            .increase(FollowedCounter::LinkDowned, Duration::MAX)
            .unwrap();
        assert_eq!((inc.amount, inc.resets), (0, 1));
    }

    // Not vacuous: growth after the reset is seen (link_flap reads the
    // 64-bit link_down_events_phy where the netdev has it).
    set(&port, &[("counters/link_downed", 3)]);
    let grown: Vec<(&str, u64)> = ethtool_low
        .iter()
        .map(|&(n, v)| (n, if n == "link_down_events_phy" { 2 } else { v }))
        .collect();
    std::fs::write(replay.join("ens1f0np0.txt"), ethtool_listing(&grown)).unwrap();
    let s = sampler.sample();
    let flaps: Vec<String> = rate_findings(&s)
        .into_iter()
        .filter(|f| f.starts_with("link_flap"))
        .collect();
    assert_eq!(flaps.len(), 1, "{flaps:?}");
    assert!(flaps[0].contains("2 time(s)"), "{flaps:?}");
}

#[test]
fn a_counter_returning_eio_forever_is_reported_every_sample_and_the_rest_exports() {
    let root = fixture("sys-mlx5-roce");
    let (mut sampler, fs) = sampler_over(&root);
    let failing = root.join("class/infiniband/mlx5_0/ports/1/counters/symbol_error");
    fs.faults.lock().unwrap().insert(failing.clone(), libc::EIO);
    let line = format!("{}: Input/output error (os error 5)", failing.display());
    for n in 1..=5u64 {
        let s = sampler.sample();
        let rdma = s.source("rdma").unwrap();
        assert_eq!(rdma.state, SourceState::Ok);
        assert_eq!(texts(&rdma.errors), vec![line.clone()], "sample {n}");
        assert_eq!(rdma.errors_total, n);
        assert!(s.sources.iter().all(|st| st.state.success()));
        let t = text(&s);
        assert_eq!(
            rdma_collector(&t, "roce_collector_errors_total", r#"kind="failed""#),
            Some(n as f64),
            "EIO is a failed read"
        );
        assert_eq!(rdma_collector(&t, "roce_collector_success", ""), Some(1.0));
        assert_eq!(
            port_value(&t, "roce_port_symbol_errors_total", "mlx5_0"),
            None,
            "the failing value is absent, not zero"
        );
        assert!(port_value(&t, "roce_port_symbol_errors_total", "mlx5_1").is_some());
        assert!(port_value(&t, "roce_port_link_downed_total", "mlx5_0").is_some());
        assert_eq!(
            value(
                &t,
                r#"roce_collector_errors_total{collector="netdev",kind="failed"}"#
            ),
            None,
            "the netdev collector failed no read: no kind of it is exported"
        );
    }
}

#[test]
fn a_summed_counter_failing_for_one_sample_raises_no_false_spike() {
    // mlx5's sequence_errors evidence is out_of_sequence + packet_seq_err,
    // cnp_ignored's rp_cnp_ignored against rp_cnp_handled. One of them
    // failing (EIO) for a sample and coming back must not count its whole
    // value as growth.
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let port = tree.root.join("class/infiniband/mlx5_0/ports/1");
    set(
        &port,
        &[
            ("hw_counters/np_cnp_sent", 1_000_000_000),
            ("hw_counters/rp_cnp_handled", 1_000_000_000),
            ("hw_counters/out_of_sequence", 1_000_000_000),
            ("hw_counters/packet_seq_err", 1_000_000_000),
        ],
    );
    let config = Config::default();
    let (rdma, fs) = rdma_over(&tree.root);
    let mut sampler = Sampler::new(vec![rdma], &config);
    assert_eq!(rate_findings(&sampler.sample()), Vec::<String>::new());
    let failing = [
        port.join("hw_counters/rp_cnp_handled"),
        port.join("hw_counters/packet_seq_err"),
    ];
    for f in &failing {
        fs.faults.lock().unwrap().insert(f.clone(), libc::EIO);
    }
    let s = sampler.sample();
    assert_eq!(s.source("rdma").unwrap().errors.len(), 2);
    assert_eq!(rate_findings(&s), Vec::<String>::new());
    fs.faults.lock().unwrap().clear();
    for _ in 0..2 {
        let s = sampler.sample();
        assert_eq!(rate_findings(&s), Vec::<String>::new(), "back from EIO");
    }
}

#[test]
fn a_thousand_ports_export_through_every_source() {
    let tree = TempTree::generated_mlx5(1000, 16);
    // A source's deadline is one interval: a debug build reading 1,000
    // devices on a loaded machine takes seconds, which is not what this
    // test is about.
    let config = config("sample_interval: 1m\n");
    let paths = paths(&tree.root);
    let mut sampler = Sampler::new(sources::all(&config, &paths), &config);
    for round in 0..2 {
        let s = sampler.sample();
        assert_eq!(device_names(&s).len(), 1000);
        for st in &s.sources {
            // For the record, not asserted.
            eprintln!("{} ({round}) took {:?}", st.name, st.duration);
            assert!(st.state.success(), "{}: {:?}", st.name, st.state);
            assert_eq!(
                texts(&st.errors),
                Vec::<String>::new(),
                "{} ({round})",
                st.name
            );
        }
        assert_eq!(s.netdev.as_ref().map(|n| n.netdevs.len()), Some(1000));
        let t = text(&s);
        assert_eq!(lines_starting(&t, "roce_port_up{"), 1000);
        assert_eq!(lines_starting(&t, "roce_out_of_buffer_drops_total{"), 1000);
        assert_eq!(lines_starting(&t, "roce_netdev_mtu_bytes{"), 1000);
        assert_eq!(
            value(
                &t,
                r#"roce_out_of_buffer_drops_total{device="mlx5_999",port="1"}"#
            ),
            Some(999.0)
        );
        assert_eq!(
            value(
                &t,
                r#"roce_port_data_received_bytes_total{device="mlx5_500",port="1"}"#
            ),
            Some(4.0 * 1500.0)
        );
    }
}

/// The kernel's RDMA netlink, hung: the exporter's real requests on a real
/// netlink socket whose kernel end takes them and never answers
/// (`NETLINK_CONNECTOR`, see crates/netlink/tests/faults.rs).
struct HungKernel {
    socket: Socket,
}

impl Nldev for HungKernel {
    fn list_devices(&mut self) -> Result<Vec<RdmaDevice>, NlError> {
        roce_netlink::rdma::list_devices(&mut self.socket)
    }
    fn port_hw_counters(&mut self, dev_index: u32, port: u32) -> Result<Vec<HwCounter>, NlError> {
        roce_netlink::rdma::port_hw_counters(&mut self.socket, dev_index, port)
    }
}

#[test]
fn a_hung_rdma_netlink_costs_one_timeout_per_sample_and_sysfs_answers() {
    let config = config("sources: {netlink_timeout: 200ms}\n");
    let timeout = config.sources.netlink_timeout;
    let Ok(socket) = Socket::open(Protocol::Connector, timeout) else {
        skip_unless_ci("no NETLINK_CONNECTOR on this kernel");
        return;
    };
    let root = fixture("sys-mlx5-roce");
    let reader = RdmaReader::new(root.clone(), DeviceFilter::default());
    let netlink = NetlinkHwCounters::with_nldev(HungKernel { socket });
    let mut all: Vec<Box<dyn Source>> =
        vec![Box::new(RdmaSource::with_parts(reader, Some(netlink)))];
    all.extend(others(&config, &root));
    let mut sampler = Sampler::new(all, &config);

    // On a helper thread, waited for a bounded time: a hang fails the test.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let samples: Vec<Arc<Snapshot>> = (0..2).map(|_| sampler.sample()).collect();
        let _ = tx.send(samples);
    });
    let samples = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the samples finish");
    for (n, s) in samples.iter().enumerate() {
        let rdma = s.source("rdma").unwrap();
        assert_eq!(rdma.state, SourceState::Ok);
        assert_eq!(
            texts(&rdma.errors),
            vec!["rdma netlink RDMA_NLDEV_CMD_GET: netlink request timed out".to_string()],
            "one timeout per sample, not one per port"
        );
        assert_eq!(rdma.errors_total, n as u64 + 1);
        assert_eq!(rdma.kernel_requests.map(|k| k.netlink), Some(1));
        for d in &s.rdma.as_ref().unwrap().devices {
            assert_eq!(
                d.ports[0].hw_counter_path,
                HwCounterPath::Sysfs,
                "{}",
                d.name
            );
            assert_eq!(d.ports[0].hw_counters.len(), 31);
        }
        assert!(s.sources.iter().all(|st| st.state.success()));
        let t = text(s);
        let info: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with(r#"roce_port_info{device="mlx5_1",port="1","#))
            .collect();
        assert_eq!(info.len(), 1, "{info:?}");
        assert!(info[0].contains(r#"hw_counters="sysfs""#), "{info:?}");
        assert_eq!(
            rdma_collector(&t, "roce_collector_errors_total", r#"kind="failed""#),
            Some(n as f64 + 1.0)
        );
        // For the record, not asserted (no timing assertions): the sample
        // took about the timeout once.
        eprintln!(
            "timeout {timeout:?}: rdma sample {n} took {:?}",
            rdma.duration
        );
    }
}

/// An NVML whose every query panics (a binding bug).
struct PanickingNvml;

impl GpuLibrary for PanickingNvml {
    fn gpus(&mut self) -> Result<Vec<NvmlGpu>, NvmlError> {
        panic!("nvmlDeviceGetCount_v2 returned garbage")
    }
}

fn dgx_sampler(nvml: Box<dyn GpuLibrary>) -> Sampler {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/topology/tests/fixtures/pci-dgx-h100/sys");
    let config = Config::default();
    let p = paths(&root);
    let topology = TopologyReader::new(root.clone(), root.join("proc"), vec![], nvml);
    let all: Vec<Box<dyn Source>> = vec![
        Box::new(RdmaSource::new(&config, &p)),
        Box::new(NetdevSource::new(&config, &p)),
        Box::new(TopologySource::with_reader(topology)),
    ];
    Sampler::new(all, &config)
}

#[test]
fn nvml_present_but_failing_is_reported_and_gpus_export_from_sysfs() {
    // What nvml-wrapper says for NVML_ERROR_GPU_IS_LOST, as the reader
    // words a failed device count.
    let why = "device count: device fell off the bus or has otherwise become inacessible";
    let mut sampler = dgx_sampler(Box::new(FakeNvml(Err(NvmlError::Query(why.into())))));
    for n in 1..=3u64 {
        let s = sampler.sample();
        let topo = s.topology.as_ref().unwrap();
        assert_eq!(topo.nvml, NvmlState::Failed(why.into()));
        assert_eq!(topo.gpus.len(), 8, "GPUs from the PCI tree");
        assert!(topo.gpus.iter().all(|g| g.name.is_none()));
        let st = s.source("topology").unwrap();
        assert_eq!(st.state, SourceState::Ok);
        assert_eq!(texts(&st.errors), vec![format!("NVML: {why}")]);
        assert_eq!(st.errors_total, n);
        let t = text(&s);
        assert_eq!(value(&t, "roce_gpu_nvml_available"), Some(0.0));
        assert_eq!(lines_starting(&t, "roce_gpu_info{"), 8);
        // Every pair but those across the CPU interconnect (SYS) that are
        // not a GPU's nearest.
        let listed = topo.paths.iter().filter(|p| {
            p.class.as_str() != "SYS" || topo.nearest_nics(p.gpu).iter().any(|n| n.nic == p.nic)
        });
        assert_eq!(topo.paths.len(), 8 * 8);
        assert_eq!(
            lines_starting(&t, "roce_gpu_nic_path_info{"),
            listed.count()
        );
        assert_eq!(
            value(
                &t,
                r#"roce_collector_errors_total{collector="topology",kind="failed"}"#
            ),
            Some(n as f64)
        );
        assert_eq!(rdma_collector(&t, "roce_collector_success", ""), Some(1.0));
        assert!(lines_starting(&t, "roce_port_up{") >= 8);
    }
}

#[test]
fn an_nvml_that_panics_fails_the_topology_collector_only() {
    let mut sampler = dgx_sampler(Box::new(PanickingNvml));
    for _ in 0..2 {
        let s = sampler.sample();
        let st = s.source("topology").unwrap();
        assert!(
            matches!(&st.state, SourceState::Failed(m) if m.contains("nvmlDeviceGetCount_v2")),
            "{:?}",
            st.state
        );
        assert_eq!(s.source("rdma").unwrap().state, SourceState::Ok);
        let t = text(&s);
        assert_eq!(
            value(&t, r#"roce_collector_success{collector="topology"}"#),
            Some(0.0)
        );
        assert_eq!(rdma_collector(&t, "roce_collector_success", ""), Some(1.0));
        assert!(lines_starting(&t, "roce_port_up{") >= 8);
    }
}

#[test]
fn a_fifo_in_place_of_a_counter_is_refused_by_its_type_and_the_rest_is_read() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let counter = tree
        .root
        .join("class/infiniband/mlx5_0/ports/1/counters/port_rcv_data");
    std::fs::remove_file(&counter).unwrap();
    let c = std::ffi::CString::new(counter.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");

    let config = config("sample_interval: 1s\n");
    let (rdma, _fs) = rdma_over(&tree.root);
    let mut all = vec![rdma];
    all.extend(others(&config, &tree.root));
    let mut sampler = Sampler::new(all, &config);
    // On a helper thread, waited for a bounded time: a hang fails the test
    // (a blocking open of a FIFO with no writer never returns).
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let samples: Vec<Arc<Snapshot>> = (0..2).map(|_| sampler.sample()).collect();
        let _ = tx.send(samples);
    });
    let samples = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("a FIFO never holds a sample");
    for (n, s) in samples.iter().enumerate() {
        let rdma = s.source("rdma").unwrap();
        assert_eq!(rdma.state, SourceState::Ok, "sample {}", n + 1);
        let refused: Vec<String> = rdma.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            refused,
            [format!(
                "{}: not a regular file (a FIFO): refused, never read",
                counter.display()
            )]
        );
        let t = text(s);
        assert_eq!(
            port_value(&t, "roce_port_data_received_bytes_total", "mlx5_0"),
            None
        );
        assert!(port_value(&t, "roce_port_data_received_bytes_total", "mlx5_1").is_some());
        assert!(port_value(&t, "roce_port_data_transmitted_bytes_total", "mlx5_0").is_some());
        assert_eq!(
            rdma_collector(&t, "roce_collector_errors_total", r#"kind="refused""#),
            Some(n as f64 + 1.0)
        );
        for other in ["netdev", "topology"] {
            assert!(s.source(other).unwrap().state.success(), "{other}");
        }
    }
}

/// The RDMA source as `roce_exporter` builds it (a watched file layer per
/// item, siblings made when a read sticks), over `FaultFs` on `root`.
fn watched_rdma_over(root: &Path, config: &Config) -> (Box<dyn Source>, FaultFs) {
    let fs = FaultFs::for_tree(root);
    let handle = fs.share();
    let maker: sources::rdma::FsMaker = Arc::new(move || Box::new(fs.share()));
    (
        Box::new(RdmaSource::over(config, &paths(root), maker)),
        handle,
    )
}

#[test]
fn a_read_stuck_in_the_driver_costs_its_own_value_in_that_sample_and_the_next() {
    let tree = TempTree::generated_mlx5(8, 8);
    let stuck = tree
        .root
        .join("class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer");
    let config = config("sample_interval: 1s\n");
    let (rdma, fs) = watched_rdma_over(&tree.root, &config);
    let mut all = vec![rdma];
    all.extend(others(&config, &tree.root));
    let mut sampler = Sampler::new(all, &config);
    let first = sampler.sample();
    assert_eq!(device_names(&first).len(), 8);
    fs.stall(&stuck);

    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let samples: Vec<Arc<Snapshot>> = (0..2).map(|_| sampler.sample()).collect();
        let _ = tx.send((sampler, samples));
    });
    let (mut sampler, samples) = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("samples go on while a read is stuck");
    for (n, s) in samples.iter().enumerate() {
        let rdma = s.source("rdma").unwrap();
        assert_eq!(rdma.state, SourceState::Ok, "sample {}: {:?}", n + 2, rdma);
        assert_eq!(device_names(s).len(), 8, "every device, the stuck one too");
        let t = text(s);
        assert_eq!(
            port_value(&t, "roce_out_of_buffer_drops_total", "mlx5_0"),
            None,
            "the stuck value is absent"
        );
        for k in 1..8 {
            assert_eq!(
                port_value(&t, "roce_out_of_buffer_drops_total", &format!("mlx5_{k}")),
                Some(k as f64)
            );
        }
        assert!(port_value(&t, "roce_port_data_received_bytes_total", "mlx5_0").is_some());
        // Reported once, in the sample that found it.
        let errors: Vec<String> = rdma.errors.iter().map(ToString::to_string).collect();
        if n == 0 {
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(
                errors[0].starts_with(&format!("{}: read did not return within", stuck.display())),
                "{errors:?}"
            );
        } else {
            assert!(errors.is_empty(), "{errors:?}");
        }
        assert_eq!(
            rdma_collector(&t, "roce_collector_errors_total", r#"kind="timeout""#),
            Some(1.0)
        );
        for other in ["netdev", "topology"] {
            assert!(s.source(other).unwrap().state.success(), "{other}");
        }
        assert!(
            lines_starting(&t, "roce_netdev_mtu_bytes{") >= 8,
            "the netdev source had this sample's RDMA part"
        );
    }

    // The stuck read returns: the value is read again.
    fs.release(&stuck);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..200 {
            let s = sampler.sample();
            if port_value(&text(&s), "roce_out_of_buffer_drops_total", "mlx5_0").is_some() {
                let _ = tx.send(s);
                return;
            }
            std::thread::yield_now();
        }
    });
    let back = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the file is read again once its read returned");
    assert_eq!(back.source("rdma").unwrap().state, SourceState::Ok);
}

/// Log lines written through `tracing` on this thread, formatted as the
/// `fmt` subscriber writes them (no colours).
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    pub(crate) fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub(crate) fn capture<T>(&self, f: impl FnOnce() -> T) -> T {
        let me = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || me.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f)
    }
}

#[test]
fn read_errors_that_start_after_startup_are_logged_once_at_warn_and_once_when_they_end() {
    let root = fixture("sys-mlx5-roce");
    let (rdma, fs) = rdma_over(&root);
    let mut sampler = Sampler::new(vec![rdma], &Config::default());
    let failing = root.join("class/infiniband/mlx5_0/ports/1/counters/symbol_error");
    let other = root.join("class/infiniband/mlx5_1/ports/1/counters/link_downed");
    let log = Captured::default();
    let states = log.capture(|| {
        let mut states = Vec::new();
        let mut sample = |sampler: &mut Sampler| {
            let s = sampler.sample();
            let rdma = s.source("rdma").unwrap();
            states.push((rdma.state.clone(), rdma.errors.len()));
        };
        sample(&mut sampler);
        fs.faults.lock().unwrap().insert(failing.clone(), libc::EIO);
        for _ in 0..3 {
            sample(&mut sampler);
        }
        // A different set: one more file fails.
        fs.faults.lock().unwrap().insert(other.clone(), libc::EIO);
        for _ in 0..3 {
            sample(&mut sampler);
        }
        fs.faults.lock().unwrap().clear();
        for _ in 0..3 {
            sample(&mut sampler);
        }
        states
    });
    let errors: Vec<usize> = states.iter().map(|(_, n)| *n).collect();
    assert_eq!(errors, [0, 1, 1, 1, 2, 2, 2, 0, 0, 0]);
    assert!(states.iter().all(|(st, _)| *st == SourceState::Ok));

    let lines = log.lines();
    let warn: Vec<&String> = lines.iter().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warn.len(), 3, "one per change of the error set: {lines:#?}");
    let eio = |p: &Path| format!("{}: Input/output error (os error 5)", p.display());
    assert!(
        warn[0].contains("collector read errors changed"),
        "{}",
        warn[0]
    );
    assert!(warn[0].contains(r#"collector="rdma""#), "{}", warn[0]);
    assert!(warn[0].contains(&eio(&failing)), "{}", warn[0]);
    assert!(
        warn[1].contains("collector read errors changed"),
        "{}",
        warn[1]
    );
    assert!(warn[1].contains(&eio(&other)), "{}", warn[1]);
    assert!(
        warn[2].contains("collector read errors cleared"),
        "{}",
        warn[2]
    );
    assert!(warn[2].contains(&eio(&failing)), "{}", warn[2]);
    // The samples in between say it at debug only. Changes are logged at
    // most once per 10 s of sampling (2 samples at 5 s): the errors that
    // start in sample 2 are logged with sample 3, after the first line.
    let debug = lines
        .iter()
        .filter(|l| l.contains(" DEBUG ") && l.contains("read errors"))
        .count();
    assert_eq!(debug, 3, "{lines:#?}");
}
