//! The NCCL source over directories laid out like the ones NCCL jobs write
//! (tests/fixtures/nccl: lines and records built from NCCL's format strings;
//! no GPU here, so no real job), and what the exposition makes of it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use roce_exporter::config::Config;
use roce_exporter::exposition::{self, BuildInfo, Format};
use roce_exporter::snapshot::{Snapshot, SourceState};
use roce_exporter::sources::nccl::NcclSource;
use roce_exporter::sources::{Input, Part, Source};
use roce_nccl::aggregate::Transport;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Copies the fixtures into fresh files: their modification time is now,
/// so the source does not take them for the logs of long-finished jobs.
fn scratch(name: &str) -> Scratch {
    let root = std::env::temp_dir().join(format!("roce-nccl-source-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl");
    for sub in ["logs", "inspector"] {
        fs::create_dir_all(root.join(sub)).expect("mkdir");
        for e in fs::read_dir(fixtures.join(sub)).expect("fixtures") {
            let e = e.expect("entry");
            fs::write(
                root.join(sub).join(e.file_name()),
                fs::read(e.path()).expect("read"),
            )
            .expect("write");
        }
    }
    Scratch(root)
}

fn config(dir: &Path, extra: &str) -> Config {
    let yaml = format!(
        "nccl:\n  enabled: true\n  log_dir: {}\n  inspector_dir: {}\n{extra}",
        dir.join("logs").display(),
        dir.join("inspector").display()
    );
    Config::parse(&yaml, "test").expect("config")
}

fn sample(source: &mut NcclSource) -> (SourceState, roce_exporter::sources::nccl::NcclSnapshot) {
    let mut errors = Vec::new();
    let r = source.sample(&Input::default(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    match r.part {
        Some(Part::Nccl(n)) => (r.state, *n),
        other => panic!("no NCCL part: {other:?}"),
    }
}

#[test]
fn off_by_default() {
    let mut s = NcclSource::new(&Config::default());
    let r = s.sample(&Input::default(), &mut Vec::new());
    assert!(matches!(r.state, SourceState::Disabled(_)));
    assert!(r.part.is_none());
}

#[test]
fn reads_logs_and_inspector_output_into_the_exposition() {
    let d = scratch("expo");
    let mut source = NcclSource::new(&config(&d.0, ""));
    let (state, part) = sample(&mut source);
    assert_eq!(state, SourceState::Ok);
    let s = &part.summary;
    assert_eq!(s.versions, vec!["2.20.5", "2.27.3"]);
    assert_eq!(s.networks, vec!["IB", "Socket"]);
    assert!(s
        .connections
        .iter()
        .any(|r| r.key.transport == Transport::Socket && r.key.device == "eth0"));
    assert!(s
        .connections
        .iter()
        .any(|r| r.key.transport == Transport::Roce && r.key.device == "mlx5_0" && r.key.gdr));
    let bw: Vec<(&str, u64)> = s
        .busbw
        .iter()
        .map(|b| (b.collective.as_str(), b.samples))
        .collect();
    assert_eq!(
        bw,
        vec![("AllGather", 1), ("AllReduce", 2)],
        "the 64 KiB AllReduce is below the floor"
    );
    assert_eq!((part.log_files, part.inspector_files), (2, 2));

    let snapshot = Arc::new(Snapshot {
        nccl: Some(part),
        ..Snapshot::default()
    });
    let build = BuildInfo::current(Duration::from_secs(5));
    let text = exposition::encode(snapshot, &build, Format::Text);
    for want in [
        "roce_nccl_connections{device=\"mlx5_0\",port=\"1\",net=\"IB\",transport=\"roce\",gdr=\"on\"} 1",
        "roce_nccl_connections{device=\"mlx5_0\",port=\"1\",net=\"IB\",transport=\"roce\",gdr=\"off\"} 1",
        "roce_nccl_connections{device=\"eth0\",port=\"0\",net=\"Socket\",transport=\"socket\",gdr=\"off\"} 2",
        "roce_nccl_gdr_active{device=\"mlx5_0\",port=\"1\"} 1",
        "roce_nccl_version_info{version=\"2.27.3\"} 1",
        "roce_nccl_gdr_disabled_info{reason=\"path_too_far\",gpu=\"1\",hca=\"0\"} 1",
        "roce_nccl_busbw_samples{collective=\"AllReduce\"} 2",
        "roce_nccl_files{dir=\"logs\"} 2",
        "roce_nccl_files_skipped_total{dir=\"logs\",reason=\"over_cap\"} 0",
        "roce_nccl_files_skipped_total{dir=\"inspector\",reason=\"unreadable\"} 0",
        "roce_nccl_read_budget_exhausted_total{dir=\"logs\"} 0",
        "roce_nccl_processes 2",
        "roce_nccl_state_dropped_total{what=\"device\"} 0",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    assert!(
        !text.contains("roce_nccl_job_connections"),
        "no pid labels unless opted in"
    );
    let mean = text
        .lines()
        .find(|l| l.starts_with("roce_nccl_busbw_mean_bytes_per_second{collective=\"AllReduce\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .expect("mean");
    assert!((mean - 36.6169375e9).abs() < 1e3, "{mean}");
}

#[test]
fn job_labels_are_opt_in() {
    let d = scratch("jobs");
    let mut source = NcclSource::new(&config(&d.0, "  job_labels: true\n"));
    let (_, part) = sample(&mut source);
    let snapshot = Arc::new(Snapshot {
        nccl: Some(part),
        ..Snapshot::default()
    });
    let text = exposition::encode(
        snapshot,
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    );
    assert!(text.contains("roce_nccl_job_connections{device=\"eth0\",port=\"0\",transport=\"socket\",gdr=\"off\",pid=\"200\"} 2"), "{text}");
}

#[test]
fn reads_on_its_own_cadence_and_sees_appends() {
    let d = scratch("cadence");
    let mut source = NcclSource::new(&config(&d.0, "  interval: 1h\n"));
    let (_, first) = sample(&mut source);
    let log = d.0.join("logs/nccl.gpu-a.200.txt");
    let mut text = fs::read_to_string(&log).expect("read");
    text.push_str(
        "gpu-a:200:209 [1] NCCL INFO Channel 01/0 : 1[1] -> 9[1] [send] via NET/Socket/0\n",
    );
    fs::write(&log, text).expect("append");
    let (_, second) = sample(&mut source);
    assert_eq!(
        first.bytes_read_total, second.bytes_read_total,
        "not due yet: nothing read"
    );
    assert_eq!(first.last_read, second.last_read);
}

#[test]
fn a_missing_directory_fails_the_source_and_says_which() {
    let cfg = Config::parse(
        "nccl: {enabled: true, log_dir: /nonexistent/nccl-logs}\n",
        "test",
    )
    .expect("config");
    let mut source = NcclSource::new(&cfg);
    // The same error on every sample while the directory is missing (also
    // between reads), so the sampler sees one lasting error, not one that
    // comes and goes with the source's cadence.
    for _ in 0..3 {
        let mut errors = Vec::new();
        let r = source.sample(&Input::default(), &mut errors);
        assert!(matches!(r.state, SourceState::Failed(_)), "{:?}", r.state);
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            text,
            vec!["nccl.log_dir /nonexistent/nccl-logs: cannot be listed: No such file or directory (os error 2)"]
        );
    }
}

#[test]
fn an_unreadable_log_is_an_error_naming_it_and_the_rest_is_read() {
    let d = scratch("unreadable");
    let locked = d.0.join("logs/nccl.gpu-z.9.log");
    fs::write(
        &locked,
        "gpu-z:9:9 [0] NCCL INFO NCCL version 2.99.0+cuda12.4\n",
    )
    .expect("write");
    fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o000))
        .expect("chmod");
    let cfg = config(&d.0, "");
    // Root reads any file: the sampling thread gives up root's file access
    // (fsuid and the capabilities that go with it are per thread).
    let (state, part, errors) = std::thread::spawn(move || {
        unsafe { libc::setfsuid(65534) };
        let mut source = NcclSource::new(&cfg);
        let mut errors = Vec::new();
        let r = source.sample(&Input::default(), &mut errors);
        let Some(Part::Nccl(n)) = r.part else {
            panic!("no NCCL part")
        };
        (r.state, *n, errors)
    })
    .join()
    .expect("thread");
    assert_eq!(state, SourceState::Ok);
    let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        text,
        vec![format!(
            "{}: Permission denied (os error 13)",
            locked.display()
        )]
    );
    assert_eq!(part.log_skipped.unreadable, 1);
    // The readable logs are read.
    assert!(part.summary.versions.contains(&"2.20.5".to_string()));
    assert!(!part.summary.versions.contains(&"2.99.0".to_string()));
}
