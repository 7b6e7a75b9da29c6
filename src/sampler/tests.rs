use super::*;
use crate::snapshot::SourceState;
use crate::sources::{HostError, Input, Sampled};

struct Fake {
    name: &'static str,
    script: Vec<Result<usize, &'static str>>,
    step: usize,
}

impl Source for Fake {
    fn name(&self) -> &'static str {
        self.name
    }
    fn sample(&mut self, _i: &Input, errors: &mut Vec<HostError>) -> Sampled {
        let step = self.script[self.step.min(self.script.len() - 1)];
        self.step += 1;
        Sampled::bare(match step {
            Ok(n) => {
                errors.extend((0..n).map(|i| {
                    roce_host::ReadError::io(
                        std::path::Path::new(&format!("file {i}")),
                        &std::io::Error::from_raw_os_error(libc::EIO),
                    )
                    .into()
                }));
                SourceState::Ok
            }
            Err("panic") => panic!("boom"),
            Err(msg) => SourceState::Failed(msg.into()),
        })
    }
}

#[test]
fn failing_and_panicking_sources_do_not_stop_the_others() {
    let sources: Vec<Box<dyn Source>> = vec![
        Box::new(Fake {
            name: "a",
            script: vec![Err("panic")],
            step: 0,
        }),
        Box::new(Fake {
            name: "b",
            script: vec![Err("no socket")],
            step: 0,
        }),
        Box::new(Fake {
            name: "c",
            script: vec![Ok(2), Ok(1)],
            step: 0,
        }),
    ];
    let mut sampler = Sampler::new(sources, &Config::default());
    let s1 = sampler.sample();
    assert_eq!(s1.sources.len(), 3);
    assert!(matches!(&s1.sources[0].state, SourceState::Failed(m) if m.contains("boom")));
    assert_eq!(s1.sources[1].state, SourceState::Failed("no socket".into()));
    assert_eq!(s1.sources[2].state, SourceState::Ok);
    assert_eq!(s1.sources[2].errors_total, 2);
    let s2 = sampler.sample();
    assert_eq!(s2.sources[2].errors_total, 3, "errors accumulate");
    assert_eq!(s2.sequence, 2);
}

#[test]
fn the_engine_follows_counters_across_samples() {
    struct Counting(u64);
    impl Source for Counting {
        fn name(&self) -> &'static str {
            "rdma"
        }
        fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
            use roce_rdma::{Counter, Device, Port, RdmaSnapshot};
            self.0 += 2;
            let port = Port {
                number: 1,
                counters: vec![Counter::new("link_downed", self.0)],
                ..Port::default()
            };
            let rdma = RdmaSnapshot {
                devices: vec![Device {
                    name: "x".into(),
                    ports: vec![port],
                    ..Device::default()
                }],
                errors: vec![],
            };
            Sampled::new(SourceState::Ok, Part::Rdma(rdma))
        }
    }
    let mut sampler = Sampler::new(vec![Box::new(Counting(0))], &Config::default());
    for _ in 0..3 {
        sampler.sample();
    }
    assert_eq!(sampler.history().len(), 3);
    let inc = sampler
        .history()
        .port("x", 1)
        .increase(rules::history::FollowedCounter::LinkDowned, Duration::MAX)
        .map(|i| i.amount);
    assert_eq!(inc, Some(4));
}

#[test]
fn ticks_passed_counts_whole_intervals() {
    let t0 = Instant::now();
    let i = Duration::from_millis(100);
    let at = |ms| t0 + Duration::from_millis(ms);
    assert_eq!(ticks_passed(at(100), at(100), i), 0, "on time");
    assert_eq!(ticks_passed(at(100), at(50), i), 0, "early");
    assert_eq!(ticks_passed(at(100), at(101), i), 1);
    assert_eq!(ticks_passed(at(100), at(199), i), 1);
    // A sample started at 0 that ends at 350: ticks 100, 200, 300 passed.
    assert_eq!(ticks_passed(at(100), at(350), i), 3);
    assert_eq!(ticks_passed(at(100), at(101), Duration::ZERO), 1);
}

#[test]
fn run_counts_samples_and_the_ticks_a_slow_sample_skips() {
    const INTERVAL: Duration = Duration::from_millis(20);
    struct Slow;
    impl Source for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }
        fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
            std::thread::sleep(INTERVAL * 3);
            Sampled::bare(SourceState::Ok)
        }
    }
    let sampler = Sampler::new(vec![Box::new(Slow)], &Config::default());
    let (control, control_rx) = mpsc::channel();
    let (published, snapshots) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        sampler.run(INTERVAL, control_rx, |_, s| {
            let _ = published.send(s);
        })
    });
    let got: Vec<Arc<Snapshot>> = snapshots.iter().take(3).collect();
    drop(control);
    thread.join().unwrap();
    assert_eq!(
        got.iter().map(|s| s.sequence).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    // Counted after a sample, so the first snapshot cannot carry a miss.
    // A sample sleeps at least three intervals, so at least three ticks
    // pass during each (the one it started on is not one of them); more
    // on a loaded machine, never fewer.
    assert_eq!(got[0].ticks_missed_total, 0);
    assert!(
        got[1].ticks_missed_total >= 3,
        "{}",
        got[1].ticks_missed_total
    );
    assert!(
        got[2].ticks_missed_total >= 6,
        "{}",
        got[2].ticks_missed_total
    );
}

/// A source whose calls block until the test lets them go, counting
/// the calls started.
struct Gate {
    name: &'static str,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    release: Arc<std::sync::Mutex<mpsc::Receiver<()>>>,
}

impl Source for Gate {
    fn name(&self) -> &'static str {
        self.name
    }
    fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _ = self.release.lock().unwrap().recv();
        Sampled::bare(SourceState::Ok)
    }
}

fn short_interval() -> Config {
    Config::parse("sample_interval: 100ms\n", "test").unwrap()
}

#[test]
fn a_stuck_source_times_out_once_and_is_not_called_on_top_of_itself() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (release, gate) = mpsc::channel();
    let gate = Gate {
        name: "gate",
        calls: calls.clone(),
        release: Arc::new(std::sync::Mutex::new(gate)),
    };
    let sources: Vec<Box<dyn Source>> = vec![
        Box::new(gate),
        Box::new(Fake {
            name: "c",
            script: vec![Ok(0)],
            step: 0,
        }),
    ];
    let mut sampler = Sampler::new(sources, &short_interval());
    for n in 1..=4u64 {
        let s = sampler.sample();
        assert_eq!(s.sequence, n);
        let gate = s.source("gate").unwrap();
        assert!(
            matches!(&gate.state, SourceState::Failed(m) if m.starts_with("timed out")),
            "{:?}",
            gate.state
        );
        assert!(!gate.state.success());
        assert!(gate.duration >= sampler.deadline(), "{:?}", gate.duration);
        assert_eq!(s.source("c").unwrap().state, SourceState::Ok);
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Once the call returns, the source is called again.
    release.send(()).unwrap();
    release.send(()).unwrap();
    let mut recovered = false;
    for _ in 0..200 {
        if sampler.sample().source("gate").unwrap().state == SourceState::Ok {
            recovered = true;
            break;
        }
    }
    assert!(recovered);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn a_reload_while_a_call_is_stuck_does_not_start_another() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (release, gate_rx) = mpsc::channel();
    let gate_rx = Arc::new(std::sync::Mutex::new(gate_rx));
    let gate = |calls: &Arc<std::sync::atomic::AtomicUsize>| -> Box<dyn Source> {
        Box::new(Gate {
            name: "gate",
            calls: calls.clone(),
            release: gate_rx.clone(),
        })
    };
    let config = short_interval();
    let mut sampler = Sampler::new(vec![gate(&calls)], &config);
    sampler.sample();
    sampler.reconfigure(vec![gate(&calls)], &config);
    let s = sampler.sample();
    assert!(!s.source("gate").unwrap().state.success());
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    drop(release);
}

#[test]
fn dependent_sources_get_this_samples_rdma_part_or_the_last_one() {
    use roce_rdma::{Device, RdmaSnapshot};
    struct Rdma(Vec<Option<&'static str>>);
    impl Source for Rdma {
        fn name(&self) -> &'static str {
            "rdma"
        }
        fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
            match self.0.remove(0) {
                Some(name) => Sampled::new(
                    SourceState::Ok,
                    Part::Rdma(RdmaSnapshot {
                        devices: vec![Device {
                            name: name.into(),
                            ..Device::default()
                        }],
                        errors: vec![],
                    }),
                ),
                None => Sampled::bare(SourceState::Failed("no".into())),
            }
        }
    }
    struct Seen(mpsc::Sender<Option<String>>);
    impl Source for Seen {
        fn name(&self) -> &'static str {
            "seen"
        }
        fn needs_rdma(&self) -> bool {
            true
        }
        fn sample(&mut self, i: &Input, _e: &mut Vec<HostError>) -> Sampled {
            let name = i.rdma.as_ref().map(|r| r.devices[0].name.clone());
            let _ = self.0.send(name);
            Sampled::bare(SourceState::Ok)
        }
    }
    let (tx, seen) = mpsc::channel();
    let sources: Vec<Box<dyn Source>> = vec![
        Box::new(Seen(tx)),
        Box::new(Rdma(vec![Some("a"), None, None, Some("b")])),
    ];
    let mut sampler = Sampler::new(sources, &Config::default());
    let mut rdma_parts = Vec::new();
    for _ in 0..4 {
        let s = sampler.sample();
        rdma_parts.push(s.rdma.as_ref().map(|r| r.devices[0].name.clone()));
        // Listed in the order given, whatever the order they ran in.
        assert_eq!(
            s.sources.iter().map(|st| st.name).collect::<Vec<_>>(),
            ["seen", "rdma"]
        );
    }
    let seen: Vec<Option<String>> = seen.try_iter().collect();
    let some = |s: &str| Some(s.to_string());
    assert_eq!(seen, [some("a"), some("a"), some("a"), some("b")]);
    // The snapshot carries only what the RDMA source read this sample.
    assert_eq!(rdma_parts, [some("a"), None, None, some("b")]);
}

#[test]
fn two_calls_stuck_in_one_sample_leave_the_rest_to_the_next() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (release, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Arc::new(std::sync::Mutex::new(gate_rx));
    let gate = |name: &'static str| -> Box<dyn Source> {
        Box::new(Gate {
            name,
            calls: calls.clone(),
            release: gate_rx.clone(),
        })
    };
    let healthy = || -> Box<dyn Source> {
        Box::new(Fake {
            name: "c",
            script: vec![Ok(0); 3],
            step: 0,
        })
    };
    let sources = vec![gate("g1"), gate("g2"), gate("g3"), healthy()];
    let mut sampler = Sampler::new(sources, &short_interval());
    let state = |s: &Snapshot, name: &str| s.source(name).unwrap().state.clone();
    let not_called = |st: SourceState| matches!(st, SourceState::Failed(m) if m.starts_with("not called in this sample"));
    let timed_out =
        |st: SourceState| matches!(st, SourceState::Failed(m) if m.starts_with("timed out"));

    // g1 and g2 stick: the sample stops waiting after two deadlines.
    let s = sampler.sample();
    assert!(timed_out(state(&s, "g1")) && timed_out(state(&s, "g2")));
    assert!(not_called(state(&s, "g3")) && not_called(state(&s, "c")));
    // g1 and g2 are still stuck and not called; g3 sticks; c runs.
    let s = sampler.sample();
    assert!(timed_out(state(&s, "g1")) && timed_out(state(&s, "g2")));
    assert!(timed_out(state(&s, "g3")));
    assert_eq!(state(&s, "c"), SourceState::Ok);
    let s = sampler.sample();
    assert_eq!(state(&s, "c"), SourceState::Ok);
    // One call per stuck source, one thread each.
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    drop(release);
}

/// Files every read of which blocks until the test opens the gate (a lock
/// the driver holds, as rtnl_lock can be: every file of the source sticks
/// in turn), counting the reads blocked at once.
#[derive(Clone, Default)]
struct Walled {
    open: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    blocked: Arc<std::sync::atomic::AtomicUsize>,
    most_blocked: Arc<std::sync::atomic::AtomicUsize>,
}

struct WalledFile(Walled);

impl roce_host::SysFile for WalledFile {
    fn read_at(&self, buf: &mut [u8], _offset: u64) -> std::io::Result<usize> {
        use std::sync::atomic::Ordering::SeqCst;
        let w = &self.0;
        let now = w.blocked.fetch_add(1, SeqCst) + 1;
        w.most_blocked.fetch_max(now, SeqCst);
        let (m, c) = &*w.open;
        let mut open = m.lock().unwrap();
        while !*open {
            open = c.wait(open).unwrap();
        }
        w.blocked.fetch_sub(1, SeqCst);
        buf[0] = b'1';
        Ok(1)
    }
}

impl roce_host::SysFs for Walled {
    fn open(&self, _p: &std::path::Path) -> std::io::Result<Box<dyn roce_host::SysFile>> {
        Ok(Box::new(WalledFile(self.clone())))
    }
    fn read_dir(&self, _p: &std::path::Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        Ok(Vec::new())
    }
    fn read_link(&self, p: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
        Ok(p.to_path_buf())
    }
    fn canonicalize(&self, p: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
        Ok(p.to_path_buf())
    }
}

/// A watched source reading eight files through [`Walled`].
struct Sticky {
    watch: Arc<roce_host::stall::StallWatch>,
    walls: Walled,
    fs: roce_host::stall::WatchedFs,
}

impl Sticky {
    fn new(watch: Arc<roce_host::stall::StallWatch>, walls: Walled) -> Sticky {
        let fs = roce_host::stall::WatchedFs::new(Box::new(walls.clone()), watch.clone());
        Sticky { watch, walls, fs }
    }
}

impl Source for Sticky {
    fn name(&self) -> &'static str {
        "rdma"
    }
    fn sample(&mut self, _i: &Input, _e: &mut Vec<HostError>) -> Sampled {
        use roce_host::SysFs;
        for i in 0..8 {
            let path = std::path::PathBuf::from(format!("/sys/x/{i}"));
            if let Ok(f) = self.fs.open(&path) {
                let _ = f.read_at(&mut [0u8; 8], 0);
            }
        }
        Sampled::bare(SourceState::Ok)
    }
    fn stall_watch(&self) -> Option<Arc<roce_host::stall::StallWatch>> {
        Some(self.watch.clone())
    }
    fn respawner(&self) -> Option<crate::sources::Respawn> {
        let (watch, walls) = (self.watch.clone(), self.walls.clone());
        Some(Box::new(move || {
            Box::new(Sticky::new(watch.clone(), walls.clone()))
        }))
    }
}

#[test]
fn a_source_whose_every_file_sticks_holds_a_bounded_number_of_threads_and_samples_end() {
    let walls = Walled::default();
    let sources: Vec<Box<dyn Source>> = vec![
        Box::new(Sticky::new(
            roce_host::stall::StallWatch::new(),
            walls.clone(),
        )),
        Box::new(Fake {
            name: "c",
            script: vec![Ok(0)],
            step: 0,
        }),
    ];
    let mut sampler = Sampler::new(sources, &short_interval());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let states: Vec<(SourceState, usize)> = (0..6)
            .map(|_| {
                let s = sampler.sample();
                let rdma = s.source("rdma").unwrap();
                (rdma.state.clone(), rdma.errors.len())
            })
            .collect();
        let _ = tx.send((sampler, states));
    });
    let (mut sampler, states) = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("samples end while every file sticks");
    // Siblings were started (the stuck files reported) until the cap, then
    // the source's deadline applies: timed out, not called on top.
    assert!(
        states
            .iter()
            .any(|(s, _)| matches!(s, SourceState::Failed(m) if m.starts_with("timed out"))),
        "{states:?}"
    );
    let reported: usize = states.iter().map(|(_, n)| n).sum();
    assert!(
        (1..=reader::MAX_ABANDONED + 1).contains(&reported),
        "{states:?}"
    );
    let most = walls.most_blocked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        most <= reader::MAX_ABANDONED + 1,
        "{most} reads blocked at once"
    );
    // The wall comes down: the stuck reads return, and the source reads
    // again.
    *walls.open.0.lock().unwrap() = true;
    walls.open.1.notify_all();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..200 {
            if sampler.sample().source("rdma").unwrap().state == SourceState::Ok {
                let _ = tx.send(());
                return;
            }
            std::thread::yield_now();
        }
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the source reads again once the stuck reads returned");
}
