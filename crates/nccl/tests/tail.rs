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

fn set_mtime(path: &Path, t: SystemTime) {
    File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(t))
        .expect("set mtime");
}

#[test]
fn a_live_log_beside_sixty_thousand_old_files_is_read() {
    let d = Scratch::new("sixty");
    let old = SystemTime::now() - Duration::from_secs(86_400);
    for i in 0..60_000 {
        let p = d.0.join(format!("nccl.old.{i}.log"));
        fs::write(&p, "done\n").expect("write");
        set_mtime(&p, old);
    }
    let live = d.0.join("nccl.live.7.log");
    append(&live, "h:7:7 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n");
    let mut t = Tailer::new(&d.0, TailConfig::default());
    let now = SystemTime::now();
    // 20,000 entries per pass: the whole listing in at most 4 passes.
    let mut found = None;
    for pass in 1..=4 {
        let (ev, st) = poll(&mut t, now);
        assert!(st.entries_seen <= 20_000, "{st:?}");
        assert_eq!(st.over_cap, 0, "idle files take no slot");
        if ev.contains(&line(
            "nccl.live.7.log",
            "h:7:7 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        )) {
            found = Some(pass);
            break;
        }
    }
    assert!(found.is_some(), "the live log was never read");
    assert_eq!(t.tracked(), 1);
    // Written again: read on the next pass, whatever the listing is doing.
    append(&live, "more\n");
    assert!(poll(&mut t, now)
        .0
        .contains(&line("nccl.live.7.log", "more")));
}

#[test]
fn a_finished_job_gives_its_slot_to_newer_files_and_takes_one_back_when_written() {
    let d = Scratch::new("noise");
    let now = SystemTime::now();
    let job = d.0.join("nccl.job.1.log");
    append(&job, "job line 1\n");
    set_mtime(&job, now - Duration::from_secs(600));
    let mut t = Tailer::new(
        &d.0,
        TailConfig {
            max_files: 100,
            ..TailConfig::default()
        },
    );
    assert!(poll(&mut t, now)
        .0
        .contains(&line("nccl.job.1.log", "job line 1")));
    // 300 fresher files arrive: the 100 written last take the slots, the
    // job's among them (parked, not forgotten); 200 find none, counted on
    // every listing that meets them.
    for i in 0..300 {
        fs::write(d.0.join(format!("noise.{i}")), "x\n").expect("write");
    }
    let (ev, st) = poll(&mut t, now);
    assert_eq!((st.files_tracked, st.over_cap), (100, 200));
    assert!(!ev.contains(&Ev::Gone("nccl.job.1.log".into())));
    assert_eq!(t.parked(), 1);
    // The job writes again: it takes a slot back and goes on from where
    // it was (no reset, no line read twice).
    append(&job, "job line 2\n");
    set_mtime(&job, now - Duration::from_secs(590));
    let (ev, st) = poll(&mut t, now);
    let job_events: Vec<&Ev> = ev
        .iter()
        .filter(|e| matches!(e, Ev::Line(f, _) | Ev::Reset(f) if f == "nccl.job.1.log"))
        .collect();
    assert_eq!(job_events, [&line("nccl.job.1.log", "job line 2")]);
    assert_eq!(st.over_cap, 200);

    // A job log older than all the noise, first seen with no free slot:
    // not read, and said.
    let d2 = Scratch::new("noise-first");
    for i in 0..300 {
        fs::write(d2.0.join(format!("noise.{i}")), "x\n").expect("write");
    }
    let job = d2.0.join("nccl.job.2.log");
    append(&job, "job\n");
    set_mtime(&job, now - Duration::from_secs(600));
    let mut t = Tailer::new(
        &d2.0,
        TailConfig {
            max_files: 100,
            ..TailConfig::default()
        },
    );
    let (ev, st) = poll(&mut t, now);
    assert!(!ev.contains(&line("nccl.job.2.log", "job")));
    assert_eq!(st.over_cap, 201);
}

#[test]
fn a_live_log_beside_1100_recent_finished_logs_is_read_in_the_pass_that_finds_it() {
    let d = Scratch::new("eleven-hundred");
    let now = SystemTime::now();
    let finished = now - Duration::from_secs(600);
    for i in 0..1_100 {
        let p = d.0.join(format!("nccl.node.{i}.log"));
        fs::write(
            &p,
            format!("node:{i}:{i} [0] NCCL INFO comm 0x1 rank 0 nranks 8 - Init COMPLETE\n"),
        )
        .expect("write");
        set_mtime(&p, finished);
    }
    let mut t = Tailer::new(&d.0, TailConfig::default());
    let (_, st) = poll(&mut t, now);
    assert_eq!((st.files_tracked, st.over_cap), (1024, 76));
    // Every finished log was written within the idle expiry: none goes
    // idle before an hour. A job starts.
    let live = d.0.join("nccl.node.99999.log");
    append(
        &live,
        "node:99999:99999 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n",
    );
    let (ev, st) = poll(&mut t, now);
    assert!(
        ev.contains(&line(
            "nccl.node.99999.log",
            "node:99999:99999 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"
        )),
        "the live log is read in the pass that finds it"
    );
    assert_eq!(st.files_tracked, 1024);
    assert_eq!(t.parked(), 1, "a finished log gave its slot");
    // It goes on being read as it grows.
    append(
        &live,
        "node:99999:99999 [0] NCCL INFO Connected all rings\n",
    );
    assert!(poll(&mut t, now).0.contains(&line(
        "nccl.node.99999.log",
        "node:99999:99999 [0] NCCL INFO Connected all rings"
    )));
}

#[test]
fn a_job_restarted_under_the_same_name_and_pid_is_read_from_its_start_as_new_content() {
    let d = Scratch::new("same-pid");
    let log = d.0.join("nccl.node1.4242.log");
    // NCCL's own lines (src/transport/net_ib.cc "NET/IB : Using"; the
    // bootstrap line first): the same first 64 bytes in both runs, as a
    // container restarting a job under the same hostname and pid writes.
    let boot = "node1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n";
    let old_table = "node1:4242:4242 [0] NCCL INFO NET/IB : Using [0]mlx5_3:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n";
    append(&log, &format!("{boot}{old_table}old connection\n"));
    let mut t = Tailer::new(&d.0, TailConfig::default());
    let now = SystemTime::now();
    poll(&mut t, now);
    // Truncated in place and rewritten, grown past the old offset before
    // the next pass.
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&log)
        .expect("truncate");
    let new_table =
        "node1:4242:4242 [0] NCCL INFO NET/IB : Using [0]mlx5_6:1/RoCE [RO]; OOB eth0:10.0.0.1<0>";
    let mut new = format!("{boot}{new_table}\n");
    for i in 0..40 {
        new.push_str(&format!("connection {i}\n"));
    }
    append(&log, &new);
    let (ev, st) = poll(&mut t, now);
    assert_eq!(ev[0], Ev::Reset("nccl.node1.4242.log".into()));
    assert!(
        ev.contains(&line("nccl.node1.4242.log", new_table)),
        "{ev:?}"
    );
    assert!(ev.contains(&line("nccl.node1.4242.log", boot.trim_end())));
    assert_eq!(st.truncations, 1);
    // Rewritten to exactly the old size: told by the time and the bytes.
    let size = fs::metadata(&log).unwrap().len() as usize;
    let same_size = format!("{boot}{}\n", "x".repeat(size - boot.len() - 1));
    fs::write(&log, &same_size).expect("write");
    set_mtime(&log, now + Duration::from_secs(5));
    let (ev, _) = poll(&mut t, now);
    assert_eq!(ev[0], Ev::Reset("nccl.node1.4242.log".into()), "{ev:?}");
    // Appends after that are appends.
    append(&log, "next\n");
    assert_eq!(
        poll(&mut t, now).0,
        vec![line("nccl.node1.4242.log", "next")]
    );
}

#[test]
fn a_copytruncated_log_grown_past_the_old_offset_is_read_from_its_start() {
    let d = Scratch::new("copytruncate");
    let log = d.0.join("nccl.h.1.log");
    append(
        &log,
        "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE\nold job\n",
    );
    let mut t = Tailer::new(&d.0, TailConfig::default());
    let now = SystemTime::now();
    poll(&mut t, now);
    // logrotate's copytruncate, then a new job writes more than the old
    // offset before the next pass.
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&log)
        .expect("truncate");
    let new_table = "h:2:2 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE [1]mlx5_2:1/RoCE";
    append(&log, &format!("{new_table}\nnew job line\n"));
    let (ev, st) = poll(&mut t, now);
    assert_eq!(
        ev,
        vec![
            Ev::Reset("nccl.h.1.log".into()),
            line("nccl.h.1.log", new_table),
            line("nccl.h.1.log", "new job line"),
        ]
    );
    assert_eq!(st.truncations, 1);
    // Appends after that are appends.
    append(&log, "next\n");
    assert_eq!(poll(&mut t, now).0, vec![line("nccl.h.1.log", "next")]);
}

#[test]
fn a_rewritten_file_is_read_to_its_end_across_passes_and_cuts_are_counted() {
    let d = Scratch::new("whole-big");
    let prom = d.0.join("inspector.prom");
    let body: String = (0..2000)
        .map(|i| format!("nccl_metric{{i=\"{i}\"}} {i}\n"))
        .collect();
    fs::write(&prom, &body).expect("write");
    let cfg = TailConfig {
        whole_file_suffix: Some(".prom".into()),
        max_bytes_per_file: 8 << 10,
        max_whole_file: 1 << 20,
        ..TailConfig::default()
    };
    let mut t = Tailer::new(&d.0, cfg);
    let now = SystemTime::now();
    let mut lines = 0;
    let mut resets = 0;
    for _ in 0..20 {
        let (ev, st) = poll(&mut t, now);
        assert_eq!(st.whole_file_cut, 0);
        lines += ev.iter().filter(|e| matches!(e, Ev::Line(..))).count();
        resets += ev.iter().filter(|e| matches!(e, Ev::Reset(..))).count();
    }
    assert_eq!((lines, resets), (2000, 1), "read whole, once");

    // Rewritten while half read: the restart is counted.
    fs::write(&prom, &body).expect("write");
    set_mtime(&prom, now - Duration::from_secs(5));
    poll(&mut t, now);
    fs::write(&prom, format!("{body}x 1\n")).expect("write");
    let (_, st) = poll(&mut t, now);
    assert_eq!(st.whole_file_cut, 1);

    // Over the whole-file cap: not read, counted once per change.
    let huge = d.0.join("huge.prom");
    fs::write(&huge, vec![b'#'; (1 << 20) + 1]).expect("write");
    let (ev, st) = poll(&mut t, now);
    assert_eq!(st.too_large, 1);
    assert!(!ev
        .iter()
        .any(|e| matches!(e, Ev::Line(f, _) if f == "huge.prom")));
    let (_, st) = poll(&mut t, now);
    assert_eq!(st.too_large, 0);
}

#[test]
fn a_missing_directory_and_an_unreadable_file_name_their_errno() {
    let d = Scratch::new("errs");
    let mut t = Tailer::new(d.0.join("absent"), TailConfig::default());
    let (_, st) = poll(&mut t, SystemTime::now());
    assert_eq!(st.dir_error, Some(libc::ENOENT));

    let log = d.0.join("nccl.h.1.log");
    append(&log, "secret\n");
    fs::set_permissions(&log, std::os::unix::fs::PermissionsExt::from_mode(0o000)).expect("chmod");
    let mut t = Tailer::new(&d.0, TailConfig::default());
    // Root reads any file: this thread gives up root's file access
    // (fsuid and the capabilities that go with it are per thread).
    let st = std::thread::spawn(move || {
        unsafe { libc::setfsuid(65534) };
        let mut sink = |_: TailEvent<'_>| {};
        t.poll(SystemTime::now(), &mut sink)
    })
    .join()
    .expect("thread");
    assert_eq!(st.unreadable_count, 1);
    assert_eq!(
        st.unreadable,
        vec![roce_nccl::tail::Unreadable {
            path: log,
            errno: libc::EACCES
        }]
    );
}
