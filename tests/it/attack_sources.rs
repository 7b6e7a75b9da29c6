//! The standing attack suite, host side: hostile trees fed to the sources
//! as `roce_exporter` builds them (`sources::all` over the demo node's tree
//! and configuration, run by the real `Sampler`), each checked in the
//! sample it starts in and the next. Listed in the table of
//! tests/it/attack.rs.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::rdma_common::TempTree;
use roce_exporter::config::Config;
use roce_exporter::exposition::{self, BuildInfo, Format};
use roce_exporter::host::HostPaths;
use roce_exporter::sampler::Sampler;
use roce_exporter::snapshot::{Snapshot, SourceState};
use roce_exporter::sources;

/// The demo node's configuration (examples/demo-gpu-node/demo.yml: the
/// recorded ethtool and DCB replies, lldpd's JSON) with a 1 s interval.
fn demo_config() -> Config {
    let text = std::fs::read_to_string("examples/demo-gpu-node/demo.yml").unwrap();
    let mut config = Config::parse(&text, "demo.yml").unwrap();
    config.sample_interval = Duration::from_secs(1);
    config
}

/// A sampler over `root` with every source as `roce_exporter` builds it.
fn sampler_over(root: &Path, config: &Config) -> Sampler {
    let paths = HostPaths {
        sysfs: root.to_path_buf(),
        procfs: root.join("proc"),
    };
    Sampler::new(sources::all(config, &paths), config)
}

/// `n` samples on a helper thread, waited for a bounded time: a hang
/// fails the test (the bound is far above any sample's).
fn samples(mut sampler: Sampler, n: usize) -> (Sampler, Vec<Arc<Snapshot>>) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let taken: Vec<Arc<Snapshot>> = (0..n).map(|_| sampler.sample()).collect();
        let _ = tx.send((sampler, taken));
    });
    rx.recv_timeout(Duration::from_secs(240))
        .expect("the samples end")
}

fn text(s: &Arc<Snapshot>) -> String {
    exposition::encode(
        s.clone(),
        &BuildInfo::current(Duration::from_secs(1)),
        Format::Text,
    )
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn errors_of(text: &str, collector: &str, kind: &str) -> f64 {
    value(
        text,
        &format!(r#"roce_collector_errors_total{{collector="{collector}",kind="{kind}"}}"#),
    )
    .unwrap_or(f64::NAN)
}

fn device_count(s: &Snapshot) -> usize {
    s.rdma.as_ref().map_or(0, |r| r.devices.len())
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// Every source of the demo that reads: ok in `s`.
fn every_source_ok(s: &Snapshot) {
    for name in ["rdma", "netdev", "phys", "topology", "lldp"] {
        let st = s.source(name).unwrap_or_else(|| panic!("no {name}"));
        assert_eq!(st.state, SourceState::Ok, "{name}: {:?}", st);
    }
}

#[test]
fn a_fifo_at_one_hw_counters_file_costs_that_value_only_in_that_sample_and_the_next() {
    let tree = TempTree::demo();
    let config = demo_config();
    let sampler = sampler_over(&tree.root, &config);
    let fifo = tree
        .root
        .join("class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer");
    mkfifo(&fifo);
    let (_sampler, taken) = samples(sampler, 2);
    for (n, s) in taken.iter().enumerate() {
        every_source_ok(s);
        assert_eq!(device_count(s), 8, "sample {}", n + 1);
        let t = text(s);
        assert_eq!(
            value(
                &t,
                r#"roce_out_of_buffer_drops_total{device="mlx5_0",port="1"}"#
            ),
            None
        );
        for k in 1..8 {
            let series = format!(r#"roce_out_of_buffer_drops_total{{device="mlx5_{k}",port="1"}}"#);
            assert!(value(&t, &series).is_some(), "{series}");
        }
        // The rest of mlx5_0 is there, and the other sources' series.
        assert!(value(&t, r#"roce_port_up{device="mlx5_0",port="1"}"#).is_some());
        assert!(t.contains(r#"roce_netdev_info{netdev="ens1np0""#));
        assert!(t.contains("roce_lldp_neighbor_info{"));
        let rdma = s.source("rdma").unwrap();
        let why: Vec<String> = rdma.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            why,
            [format!(
                "{}: not a regular file (a FIFO): refused, never read",
                fifo.display()
            )]
        );
        assert_eq!(errors_of(&t, "rdma", "refused"), n as f64 + 1.0);
    }
}

/// Renames `old` to the name `new` (raw bytes) everywhere the kernel shows
/// a netdev's name: its folder under the PCI function, the `class/net`
/// link, and the GID table's `ndevs` files of the port it backs.
fn rename_netdev(root: &Path, old: &str, new: &[u8]) {
    let new = OsStr::from_bytes(new);
    let link = root.join("class/net").join(old);
    let target = std::fs::read_link(&link).unwrap();
    let real = link.parent().unwrap().join(&target);
    std::fs::rename(&real, real.with_file_name(new)).unwrap();
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(target.with_file_name(new), root.join("class/net").join(new))
        .unwrap();
    for dev in std::fs::read_dir(root.join("class/infiniband")).unwrap() {
        let ndevs = dev.unwrap().path().join("ports/1/gid_attrs/ndevs");
        for slot in std::fs::read_dir(&ndevs).into_iter().flatten() {
            let slot = slot.unwrap().path();
            if std::fs::read(&slot).unwrap_or_default().trim_ascii() == old.as_bytes() {
                let mut bytes = new.as_bytes().to_vec();
                bytes.push(b'\n');
                std::fs::write(&slot, bytes).unwrap();
            }
        }
    }
}

#[test]
fn a_netdev_or_device_name_that_is_not_utf8_is_refused_counted_and_never_mangled() {
    let tree = TempTree::demo();
    // The kernel takes any byte but '/' and NUL in a netdev name
    // (dev_valid_name in net/core/dev.c).
    rename_netdev(&tree.root, "ens1np0", b"ens1\xffnp0");
    let class = tree.root.join("class/infiniband");
    std::fs::rename(
        class.join("mlx5_7"),
        class.join(OsStr::from_bytes(b"mlx5_\xff7")),
    )
    .unwrap();
    let config = demo_config();
    let (_sampler, taken) = samples(sampler_over(&tree.root, &config), 2);
    for (n, s) in taken.iter().enumerate() {
        let t = text(s);
        // Nothing exported under a mangled name, and no verdict on a
        // netdev that was not read: no dcb="unsupported" anywhere.
        assert!(!t.contains('\u{FFFD}'), "a mangled name in the exposition");
        assert!(!t.contains(r#"dcb="unsupported""#));
        assert!(!s
            .findings
            .iter()
            .any(|f| format!("{f:?}").contains('\u{FFFD}')));
        // The other seven devices and netdevs are there; mlx5_0 too, its
        // netdev unknown.
        assert_eq!(device_count(s), 7, "sample {}", n + 1);
        assert!(value(&t, r#"roce_port_up{device="mlx5_0",port="1"}"#).is_some());
        assert!(t.contains(r#"roce_netdev_info{netdev="ens2np0""#));
        // Refused with the bytes escaped, counted, every sample.
        let rdma = s.source("rdma").unwrap();
        let why: Vec<String> = rdma.errors.iter().map(ToString::to_string).collect();
        assert!(
            why.iter()
                .any(|e| e
                    .ends_with(r"device name mlx5_\xff7 is not UTF-8 (bytes escaped): not read")),
            "{why:#?}"
        );
        assert!(
            why.iter()
                .any(|e| e
                    .ends_with(r"netdev name ens1\xffnp0 is not UTF-8 (bytes escaped): not read")),
            "{why:#?}"
        );
        assert!(errors_of(&t, "rdma", "refused") >= 2.0 * (n as f64 + 1.0));
    }
}

#[test]
fn a_ten_thousand_slot_gid_table_is_read_to_the_cap_and_the_sample_keeps_its_time() {
    let tree = TempTree::demo();
    let port: PathBuf = tree.root.join("class/infiniband/mlx5_0/ports/1");
    for i in 0..10_000u32 {
        let text = format!(
            "fe80:0000:0000:0000:0000:0000:{:04x}:{:04x}\n",
            i >> 16,
            i & 0xffff
        );
        std::fs::write(port.join(format!("gids/{i}")), text).unwrap();
        std::fs::write(port.join(format!("gid_attrs/types/{i}")), "RoCE v2\n").unwrap();
        std::fs::write(port.join(format!("gid_attrs/ndevs/{i}")), "ens1np0\n").unwrap();
    }
    let config = demo_config();
    let (_sampler, taken) = samples(sampler_over(&tree.root, &config), 2);
    for s in &taken {
        every_source_ok(s);
        assert_eq!(device_count(s), 8);
        let t = text(s);
        let gids = t
            .lines()
            .filter(|l| l.starts_with(r#"roce_gid_info{device="mlx5_0""#))
            .count();
        assert_eq!(gids, roce_rdma::MAX_GID_SLOTS as usize);
        assert!(errors_of(&t, "rdma", "refused") >= 1.0);
    }
}

/// `name{labels}`'s value, 0 when absent.
fn value_or_zero(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or(0.0)
}

#[test]
fn a_job_restarted_with_the_same_host_and_pid_lands_on_its_own_nic_not_the_old_one() {
    use roce_exporter::sources::nccl::NcclSource;
    use roce_exporter::sources::{Input, Part, Source};
    let dir = std::env::temp_dir().join(format!("roce-attack-samepid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("nccl.node1.4242.log");
    // NCCL's lines (bootstrap, src/transport/net_ib.cc "NET/IB : Using",
    // src/transport.cc "Channel %02d/%d : %d[%d] -> %d[%d] [send] via"),
    // as tests/fixtures/nccl holds them: the first 64 bytes are the same
    // in both runs, as in a container restarting a job under the same
    // hostname and pid.
    let boot = "node1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n";
    let table = |nic: &str| {
        format!("node1:4242:4242 [0] NCCL INFO NET/IB : Using [0]{nic}:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n")
    };
    let channels = |n: usize| {
        (0..n)
            .map(|c| format!("node1:4242:4250 [0] NCCL INFO Channel {c:02}/0 : 0[0] -> 8[0] [send] via NET/IB/0\n"))
            .collect::<String>()
    };
    std::fs::write(&log, format!("{boot}{}{}", table("mlx5_3"), channels(2))).unwrap();
    let yaml = format!(
        "nccl:\n  enabled: true\n  log_dir: {}\n  interval: 100ms\n",
        dir.display()
    );
    let config = Config::parse(&yaml, "t").unwrap();
    let mut source = NcclSource::new(&config);
    let read = |source: &mut NcclSource| {
        // The source reads the directory once per nccl.interval.
        std::thread::sleep(Duration::from_millis(150));
        let r = source.sample(&Input::default(), &mut Vec::new());
        let Some(Part::Nccl(part)) = r.part else {
            panic!("no NCCL part: {:?}", r.state)
        };
        let s = Arc::new(Snapshot {
            nccl: Some(*part),
            ..Snapshot::default()
        });
        text(&s)
    };
    let before = read(&mut source);
    let conn = |t: &str, nic: &str| {
        value_or_zero(
            t,
            &format!(
                r#"roce_nccl_connections{{device="{nic}",port="1",net="IB",transport="roce",gdr="off"}}"#
            ),
        )
    };
    let old = conn(&before, "mlx5_3");
    assert!(old > 0.0, "{before}");
    // Truncated in place and rewritten by the restarted job, past the old
    // offset before the next read, with its own device table.
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&log)
        .unwrap();
    std::fs::write(&log, format!("{boot}{}{}", table("mlx5_6"), channels(40))).unwrap();
    let after = read(&mut source);
    assert!(conn(&after, "mlx5_6") > 0.0, "{after}");
    assert_eq!(
        conn(&after, "mlx5_3"),
        old,
        "the new job's connections counted on the old job's NIC"
    );
    assert_eq!(
        value(&after, "roce_nccl_processes"),
        Some(1.0),
        "ended, not merged"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A source whose one file reads badly in `bad(sample)` samples, with a
/// content that changes every sample.
struct Flaky {
    sample: u64,
    bad: fn(u64) -> bool,
}

impl sources::Source for Flaky {
    fn name(&self) -> &'static str {
        "rdma"
    }
    fn sample(
        &mut self,
        _i: &sources::Input,
        errors: &mut Vec<sources::HostError>,
    ) -> sources::Sampled {
        self.sample += 1;
        if (self.bad)(self.sample) {
            let e = roce_host::ReadError::parse(
                Path::new("/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"),
                format!("not a number: \"{:x}\"", self.sample * 0x9e37_79b9),
            );
            errors.push(e.into());
        }
        sources::Sampled::bare(SourceState::Ok)
    }
}

#[test]
fn a_minute_of_a_bad_file_whose_content_varies_or_that_comes_and_goes_logs_a_few_lines() {
    // A minute of samples at 1 s, taken back to back: the bound is counted
    // in samples (the sampler's schedule), not on the clock.
    let config = Config::parse("sample_interval: 1s\n", "t").unwrap();
    for (what, bad, most) in [
        // Bad every sample, its content different each time: one line
        // when it starts.
        ("varying content", (|_| true) as fn(u64) -> bool, 1),
        // Bad every other sample: at most one line per 10 s of sampling.
        ("coming and going", |n| n % 2 == 0, 6),
        // Bad for 5 samples in the middle: a start and an end.
        ("once", |n| (20..25).contains(&n), 2),
    ] {
        let mut sampler = Sampler::new(vec![Box::new(Flaky { sample: 0, bad })], &config);
        let log = crate::faults::Captured::default();
        log.capture(|| {
            for _ in 0..60 {
                sampler.sample();
            }
        });
        let lines = log.lines();
        let about_errors: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("collector read errors") || l.contains("with read errors"))
            .collect();
        eprintln!("{what}: {} lines", about_errors.len());
        assert!(
            !about_errors.is_empty() && about_errors.len() <= most,
            "{what}: {about_errors:#?}"
        );
    }
}

#[test]
fn a_live_nccl_log_beside_1100_recent_finished_ones_is_read_within_two_intervals() {
    use roce_exporter::sources::nccl::NcclSource;
    use roce_exporter::sources::{Input, Part, Source};
    let dir = std::env::temp_dir().join(format!("roce-attack-1100-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // 1,100 jobs that finished ten minutes ago, within nccl.idle_expiry.
    let finished = std::time::SystemTime::now() - Duration::from_secs(600);
    for i in 0..1_100 {
        let p = dir.join(format!("nccl.node.{i}.log"));
        std::fs::write(
            &p,
            format!("node:{i}:{i} [0] NCCL INFO NCCL version 2.20.5+cuda12.4\n"),
        )
        .unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(finished))
            .unwrap();
    }
    let yaml = format!(
        "nccl:\n  enabled: true\n  log_dir: {}\n  interval: 100ms\n",
        dir.display()
    );
    let mut source = NcclSource::new(&Config::parse(&yaml, "t").unwrap());
    let read = |source: &mut NcclSource| {
        // One read per nccl.interval.
        std::thread::sleep(Duration::from_millis(150));
        let r = source.sample(&Input::default(), &mut Vec::new());
        let Some(Part::Nccl(part)) = r.part else {
            panic!("no NCCL part: {:?}", r.state)
        };
        part.summary.versions.clone()
    };
    assert_eq!(read(&mut source), ["2.20.5"]);
    // A job starts beside them.
    std::fs::write(
        dir.join("nccl.node.99999.log"),
        "node:99999:99999 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\n",
    )
    .unwrap();
    let seen = (0..2).any(|_| read(&mut source).iter().any(|v| v == "2.27.3"));
    assert!(seen, "the live log was not read within two intervals");
    let _ = std::fs::remove_dir_all(&dir);
}
