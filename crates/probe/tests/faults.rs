//! The probed device disappearing (hot-unplug, driver reload) with the fake
//! verbs layer (`verbs::fake`), which fails as libibverbs does once the kernel has
//! disassociated the device: a round in flight gets no completions (the
//! mlx5 CQ buffer is remapped to a zero page) and times out,
//! `ibv_query_port` fails with EIO, and the device is no longer listed, so
//! opening a session fails. Each failure is counted under its reason, the
//! session is released, nothing panics out of the engine or the runner,
//! and probing resumes when the device is back. (The real layer's
//! resource destructors, which panic when a destroy fails with EIO, are
//! covered by the unit test in src/ibverbs.rs.)

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use roce_probe::engine::{ProbeEngine, Settings};
use roce_probe::runner::Runner;
use roce_probe::verbs::fake::{FakeDevice, FakeVerbs};
use roce_probe::{ProbeState, ProbeTarget, Reason};

fn host() -> Arc<FakeDevice> {
    FakeDevice::new()
}

fn target() -> ProbeTarget {
    ProbeTarget::loopback("mlx5_0", 1, 3)
}

fn reasons(engine: &ProbeEngine<FakeVerbs>) -> Vec<(String, u64)> {
    let r = engine.results();
    r.targets[0]
        .1
        .failures
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect()
}

#[test]
fn the_device_vanishing_during_a_round_is_a_timeout_then_device_open_until_it_is_back() {
    let h = host();
    let mut engine = ProbeEngine::new(FakeVerbs(h.clone()), Settings::default());
    assert!(matches!(engine.round(&target()), Some(Ok(_))));

    h.vanish_mid_round.store(true, Ordering::SeqCst);
    let f = engine.round(&target()).unwrap().unwrap_err();
    assert_eq!(f.reason, Reason::Timeout);
    assert_eq!(engine.open_sessions(), 0, "the session is released");
    assert_eq!(h.log.lock().unwrap().closes, 1);

    // Gone: every later round fails to open, nothing is held.
    for _ in 0..3 {
        let f = engine.round(&target()).unwrap().unwrap_err();
        assert_eq!(f.reason, Reason::DeviceOpen);
        assert!(
            f.message.contains("not listed by libibverbs"),
            "{}",
            f.message
        );
        assert_eq!(engine.open_sessions(), 0);
    }
    assert_eq!(engine.results().state, ProbeState::Running);

    // The driver is loaded again: probing resumes on a new session.
    h.present.store(true, Ordering::SeqCst);
    assert!(matches!(engine.round(&target()), Some(Ok(_))));
    let s = engine.results().targets[0].1.clone();
    assert_eq!((s.requests, s.successes), (6, 2));
    assert_eq!(s.sessions_opened, 2);
    assert_eq!(s.last_ok, Some(true));
    assert_eq!(
        reasons(&engine),
        vec![("device_open".to_string(), 3), ("timeout".to_string(), 1)]
    );
}

#[test]
fn the_device_vanishing_between_rounds_fails_the_port_query() {
    let h = host();
    let mut engine = ProbeEngine::new(FakeVerbs(h.clone()), Settings::default());
    assert!(matches!(engine.round(&target()), Some(Ok(_))));
    h.present.store(false, Ordering::SeqCst);
    let f = engine.round(&target()).unwrap().unwrap_err();
    assert_eq!(f.reason, Reason::QueryPort);
    assert_eq!(f.errno, Some(libc::EIO));
    assert_eq!(engine.open_sessions(), 0);
    let f = engine.round(&target()).unwrap().unwrap_err();
    assert_eq!(f.reason, Reason::DeviceOpen);
    assert_eq!(
        reasons(&engine),
        vec![
            ("device_open".to_string(), 1),
            ("query_port".to_string(), 1)
        ]
    );
}

#[test]
fn the_runner_survives_a_session_release_that_panics_and_keeps_probing() {
    let h = host();
    h.panicking_release.store(true, Ordering::SeqCst);
    h.vanish_mid_round.store(false, Ordering::SeqCst);
    let runner = Runner::spawn(
        FakeVerbs(h.clone()),
        Duration::from_millis(50),
        Settings {
            timeout: Duration::from_millis(10),
        },
    )
    .unwrap();
    runner.set_targets(vec![target()]);
    // Bounded waits (not timing assertions): each condition is met within
    // a few rounds; the bound only stops a hang.
    let wait_for = |what: &str, cond: &dyn Fn(&roce_probe::TargetStats) -> bool| {
        for _ in 0..1000 {
            if let Some((_, s)) = runner.results().targets.first() {
                if cond(s) {
                    return s.clone();
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("never: {what}");
    };
    wait_for("a first success", &|s| s.successes >= 1);
    // Unplugged mid-round: the round times out and releasing its session
    // panics (the destroy fails). The runner catches it and goes on.
    h.vanish_mid_round.store(true, Ordering::SeqCst);
    let s = wait_for("device_open failures after the unplug", &|s| {
        s.failures.get("device_open").copied().unwrap_or(0) >= 2
    });
    assert!(s.failures.contains_key("timeout") || s.failures.contains_key("internal"));
    h.present.store(true, Ordering::SeqCst);
    let before = s.successes;
    let s = wait_for("successes again", &|s| s.successes > before);
    assert_eq!(s.last_ok, Some(true));
    assert_eq!(runner.results().state, ProbeState::Running);
    drop(runner);
    let log = h.log.lock().unwrap();
    assert_eq!(log.opens, log.closes, "every session released");
}
