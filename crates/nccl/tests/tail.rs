//! The tailer on real files: appends, rotation, truncation, idle expiry,
//! long lines, rewritten files, the byte budget, and 10,000 files.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use roce_nccl::tail::{PassStats, TailConfig, TailEvent, Tailer};

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("roce-nccl-tail-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug, PartialEq)]
enum Ev {
    Reset(String),
    Line(String, String),
    Gone(String),
}

fn name(p: &Path) -> String {
    p.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string()
}

fn poll(t: &mut Tailer, now: SystemTime) -> (Vec<Ev>, PassStats) {
    let mut out = Vec::new();
    let stats = t.poll(now, &mut |e| {
        out.push(match e {
            TailEvent::Reset { file } => Ev::Reset(name(file)),
            TailEvent::Line { file, line } => {
                Ev::Line(name(file), String::from_utf8_lossy(line).into_owned())
            }
            TailEvent::Gone { file } => Ev::Gone(name(file)),
        })
    });
    (out, stats)
}

fn append(path: &Path, s: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    f.write_all(s.as_bytes()).expect("write");
}

fn line(f: &str, l: &str) -> Ev {
    Ev::Line(f.into(), l.into())
}

#[test]
fn appends_partial_lines_rotation_and_truncation() {
    let d = Scratch::new("rotate");
    let log = d.0.join("nccl.h.1.log");
    append(&log, "one\ntw");
    let mut t = Tailer::new(&d.0, TailConfig::default());
    let now = SystemTime::now();
    assert_eq!(
        poll(&mut t, now).0,
        vec![
            Ev::Reset("nccl.h.1.log".into()),
            line("nccl.h.1.log", "one")
        ]
    );
    append(&log, "o\nthree\n");
    assert_eq!(
        poll(&mut t, now).0,
        vec![line("nccl.h.1.log", "two"), line("nccl.h.1.log", "three")]
    );
    assert_eq!(poll(&mut t, now).0, vec![], "nothing new, nothing read");

    // rotation: the old file moves away, a new one takes the name
    fs::rename(&log, d.0.join(".old")).expect("rename");
    append(&log, "fresh\n");
    let (ev, st) = poll(&mut t, now);
    assert_eq!(
        ev,
        vec![
            Ev::Reset("nccl.h.1.log".into()),
            line("nccl.h.1.log", "fresh")
        ]
    );
    assert_eq!(st.rotations, 1);

    // truncation in place (same inode, shorter)
    File::create(&log).expect("truncate");
    append(&log, "x\n");
    let (ev, st) = poll(&mut t, now);
    assert_eq!(
        ev,
        vec![Ev::Reset("nccl.h.1.log".into()), line("nccl.h.1.log", "x")]
    );
    assert_eq!(st.truncations, 1);

    fs::remove_file(&log).expect("rm");
    assert_eq!(poll(&mut t, now).0, vec![Ev::Gone("nccl.h.1.log".into())]);
}

#[test]
fn long_lines_are_dropped_without_being_held() {
    let d = Scratch::new("long");
    let log = d.0.join("a.log");
    let cfg = TailConfig {
        max_line: 16,
        ..TailConfig::default()
    };
    let mut t = Tailer::new(&d.0, cfg);
    let now = SystemTime::now();
    append(&log, &format!("ok\n{}", "y".repeat(40)));
    let (ev, _) = poll(&mut t, now);
    assert_eq!(ev, vec![Ev::Reset("a.log".into()), line("a.log", "ok")]);
    append(&log, &format!("{}\nafter\n", "y".repeat(100)));
    let (ev, st) = poll(&mut t, now);
    assert_eq!(ev, vec![line("a.log", "after")]);
    assert!(t.held_bytes() < 1 << 21, "held {}", t.held_bytes());
    assert_eq!(st.long_lines, 0, "counted once, when it started");
}

#[test]
fn idle_files_age_out_and_come_back_when_written() {
    let d = Scratch::new("idle");
    let log = d.0.join("job.log");
    append(&log, "a\n");
    let cfg = TailConfig {
        idle_expiry: Duration::from_secs(60),
        ..TailConfig::default()
    };
    let mut t = Tailer::new(&d.0, cfg);
    let now = SystemTime::now();
    assert_eq!(poll(&mut t, now).0.len(), 2);
    let later = now + Duration::from_secs(3600);
    let (ev, st) = poll(&mut t, later);
    assert_eq!(ev, vec![Ev::Gone("job.log".into())]);
    assert_eq!((st.aged_out, t.tracked()), (1, 0));
    // written again: tracked again from the start
    append(&log, "b\n");
    let f = File::options().append(true).open(&log).expect("open");
    f.set_modified(later).expect("mtime");
    assert_eq!(
        poll(&mut t, later).0,
        vec![
            Ev::Reset("job.log".into()),
            line("job.log", "a"),
            line("job.log", "b")
        ]
    );
}

#[test]
fn byte_budget_resumes_with_the_next_file() {
    let d = Scratch::new("budget");
    for f in ["a.log", "b.log", "c.log"] {
        append(&d.0.join(f), &format!("{}\n", f.repeat(10)));
    }
    let cfg = TailConfig {
        max_bytes_per_pass: 40,
        max_bytes_per_file: 40,
        ..TailConfig::default()
    };
    let mut t = Tailer::new(&d.0, cfg);
    let now = SystemTime::now();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (ev, _) = poll(&mut t, now);
        for e in ev {
            if let Ev::Line(f, _) = e {
                seen.push(f);
            }
        }
    }
    seen.sort();
    assert_eq!(seen, vec!["a.log", "b.log", "c.log"], "no file starves");
}

#[test]
fn rewritten_files_are_read_whole_when_they_change() {
    let d = Scratch::new("whole");
    let prom = d.0.join("nccl_inspector_metrics_GPU-1.prom");
    fs::write(&prom, "m{a=\"1\"} 1\nm{a=\"2\"} 2").expect("write");
    let cfg = TailConfig {
        whole_file_suffix: Some(".prom".into()),
        ..TailConfig::default()
    };
    let mut t = Tailer::new(&d.0, cfg);
    let now = SystemTime::now();
    let n = "nccl_inspector_metrics_GPU-1.prom";
    assert_eq!(
        poll(&mut t, now).0,
        vec![
            Ev::Reset(n.into()),
            line(n, "m{a=\"1\"} 1"),
            line(n, "m{a=\"2\"} 2")
        ]
    );
    assert_eq!(poll(&mut t, now).0, vec![]);
    fs::write(&prom, "m{a=\"3\"} 3\n").expect("rewrite");
    let f = File::options().append(true).open(&prom).expect("open");
    f.set_modified(now + Duration::from_secs(30))
        .expect("mtime");
    assert_eq!(
        poll(&mut t, now + Duration::from_secs(30)).0,
        vec![Ev::Reset(n.into()), line(n, "m{a=\"3\"} 3")]
    );
}

#[test]
fn catch_up_starts_large_files_near_their_end_at_a_line_boundary() {
    let d = Scratch::new("catchup");
    let f = d.0.join("big.log");
    append(&f, &format!("{}\nlast-but-one\nlast\n", "z".repeat(1000)));
    let cfg = TailConfig {
        catch_up: Some(20),
        ..TailConfig::default()
    };
    let mut t = Tailer::new(&d.0, cfg);
    // 20 bytes before the end falls inside the run of z: the rest of that
    // line is dropped, the two whole lines after it come out
    assert_eq!(
        poll(&mut t, SystemTime::now()).0,
        vec![
            Ev::Reset("big.log".into()),
            line("big.log", "last-but-one"),
            line("big.log", "last")
        ]
    );
}

#[test]
fn ten_thousand_files_stay_within_the_caps() {
    let d = Scratch::new("many");
    for i in 0..10_000 {
        fs::write(
            d.0.join(format!("nccl.host.{i}.log")),
            format!("line of {i}\n"),
        )
        .expect("write");
    }
    let cfg = TailConfig {
        max_files: 1000,
        max_bytes_per_pass: 64 << 10,
        ..TailConfig::default()
    };
    let mut t = Tailer::new(&d.0, cfg);
    let now = SystemTime::now();
    let (ev, st) = poll(&mut t, now);
    assert_eq!(st.entries_seen, 10_000);
    assert_eq!((st.files_tracked, st.over_cap), (1000, 9000));
    assert!(st.bytes_read <= 64 << 10);
    let lines = ev.iter().filter(|e| matches!(e, Ev::Line(..))).count();
    assert_eq!(lines as u64, st.lines);
    assert!(t.tracked() <= 1000);
    // the next passes finish the tracked files, and then read nothing
    let mut total = lines;
    for _ in 0..4 {
        total += poll(&mut t, now)
            .0
            .iter()
            .filter(|e| matches!(e, Ev::Line(..)))
            .count();
    }
    assert_eq!(total, 1000);
    let (_, st) = poll(&mut t, now);
    assert_eq!((st.bytes_read, st.files_read), (0, 0));
}

#[test]
fn links_fifos_and_hidden_files_are_not_read() {
    let d = Scratch::new("links");
    let outside = Scratch::new("links-outside");
    fs::write(outside.0.join("secret"), "not nccl's\n").expect("write");
    std::os::unix::fs::symlink(outside.0.join("secret"), d.0.join("nccl.link.log"))
        .expect("symlink");
    fs::write(d.0.join(".hidden.log"), "x\n").expect("write");
    fs::create_dir(d.0.join("subdir.log")).expect("mkdir");
    let status = std::process::Command::new("mkfifo")
        .arg(d.0.join("fifo.log"))
        .status();
    let mut t = Tailer::new(&d.0, TailConfig::default());
    let (ev, st) = poll(&mut t, SystemTime::now());
    assert_eq!(ev, vec![]);
    assert_eq!(st.files_tracked, 0);
    assert!(status.is_err() || st.entries_seen >= 3);
}
