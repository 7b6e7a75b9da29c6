//! The engine, the schedule and the runner with a fake verbs layer: failure
//! classification per step, resource reuse and recreation, caps, the
//! "unavailable once" rule, jitter bounds. No device, no timing assertions.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_probe::engine::{classify, payload, ProbeEngine, Settings, MAX_TARGETS};
use roce_probe::runner::Runner;
use roce_probe::schedule::{Schedule, JITTER};
use roce_probe::verbs::fake::{FakeDevice, FakeVerbs, Step};
use roce_probe::verbs::OpenError;
use roce_probe::{Failure, ProbeState, ProbeTarget, Reason, RTT_BUCKETS};

struct Rig {
    engine: ProbeEngine<FakeVerbs>,
    dev: Arc<FakeDevice>,
}

fn rig(opens: Vec<Result<(), OpenError>>) -> Rig {
    let dev = FakeDevice::new();
    dev.opens.lock().unwrap().extend(opens);
    Rig {
        engine: ProbeEngine::new(
            FakeVerbs(dev.clone()),
            Settings {
                timeout: Duration::from_millis(1500),
            },
        ),
        dev,
    }
}

fn t() -> ProbeTarget {
    ProbeTarget::loopback("rxe0", 1, 1)
}

fn stats(r: &Rig) -> roce_probe::TargetStats {
    let res = r.engine.results();
    assert_eq!(res.targets.len(), 1);
    res.targets[0].1.clone()
}

#[test]
fn success_keeps_the_session_and_records_the_rtt() {
    let mut r = rig(vec![]);
    r.dev.rounds.lock().unwrap().extend([
        Step::Ok(Duration::from_micros(3)),
        Step::Ok(Duration::from_micros(40)),
        Step::Ok(Duration::from_millis(200)),
    ]);
    for _ in 0..3 {
        assert!(matches!(r.engine.round(&t()), Some(Ok(_))));
    }
    let s = stats(&r);
    assert_eq!((s.requests, s.successes), (3, 3));
    assert!(s.failures.is_empty());
    assert_eq!(s.sessions_opened, 1);
    assert_eq!(r.dev.log.lock().unwrap().opens, 1);
    assert_eq!(s.last_rtt, Some(Duration::from_millis(200)));
    assert_eq!(s.last_ok, Some(true));
    assert!(s.last_success.is_some());
    // 3 µs in the 5 µs bucket, 40 µs in 50 µs, 200 ms only in +Inf
    let cum = s.rtt.cumulative();
    assert_eq!(cum.len(), RTT_BUCKETS.len() + 1);
    let at = |bound: f64| cum.iter().find(|(b, _)| *b == bound).unwrap().1;
    assert_eq!(at(2.5e-6), 0);
    assert_eq!(at(5e-6), 1);
    assert_eq!(at(2.5e-5), 1);
    assert_eq!(at(5e-5), 2);
    assert_eq!(at(1e-1), 2);
    assert_eq!(cum.last().unwrap(), &(f64::INFINITY, 3));
    assert_eq!(s.rtt.count, 3);
    assert!((s.rtt.sum_seconds - 0.200043).abs() < 1e-9);
    // the configured timeout reaches the verbs layer
    assert!(r
        .dev
        .log
        .lock()
        .unwrap()
        .timeouts_seen
        .iter()
        .all(|d| *d == Duration::from_millis(1500)));
}

#[test]
fn a_failure_drops_the_session_and_the_next_round_recreates_it() {
    let mut r = rig(vec![]);
    r.dev.rounds.lock().unwrap().extend([
        Step::Ok(Duration::from_micros(5)),
        Step::Fail(Failure::new(Reason::Timeout, "3 of 3 completions missing")),
        Step::Ok(Duration::from_micros(5)),
    ]);
    r.engine.round(&t());
    let f = r.engine.round(&t()).unwrap().unwrap_err();
    assert_eq!(f.reason, Reason::Timeout);
    assert_eq!(r.engine.open_sessions(), 0);
    assert_eq!(r.dev.log.lock().unwrap().closes, 1);
    r.engine.round(&t());
    let s = stats(&r);
    assert_eq!((s.requests, s.successes), (3, 2));
    assert_eq!(s.failures.get("timeout"), Some(&1));
    assert_eq!(s.sessions_opened, 2);
    assert_eq!(s.last_failure, None, "a success clears the last failure");
}

#[test]
fn every_open_step_is_counted_under_its_own_reason() {
    let cases = [
        (Reason::DeviceOpen, None, "device_open"),
        (Reason::GidIndex, Some(libc::EINVAL), "gid_index"),
        (Reason::AllocPd, Some(libc::ENOMEM), "alloc_pd"),
        (Reason::RegMr, Some(libc::EFAULT), "reg_mr"),
        (Reason::RegMr, Some(libc::ENOMEM), "memlock"),
        (Reason::RegMr, Some(libc::EPERM), "memlock"),
        (Reason::CreateCq, Some(libc::ENOMEM), "create_cq"),
        (Reason::CreateQp, Some(libc::ENOMEM), "create_qp"),
        (Reason::QpInit, Some(libc::EINVAL), "qp_init"),
        (Reason::QpRtr, Some(libc::EINVAL), "qp_rtr"),
        (Reason::QpRts, Some(libc::EINVAL), "qp_rts"),
    ];
    for (reason, errno, label) in cases {
        let f = Failure::with_errno(reason, errno, "step");
        let mut r = rig(vec![Err(OpenError::Failed(f))]);
        let got = r.engine.round(&t()).unwrap().unwrap_err();
        assert_eq!(got.reason.as_str(), label);
        assert_eq!(got.errno, errno);
        let s = stats(&r);
        assert_eq!(s.failures.get(label), Some(&1), "{label}");
        assert_eq!(s.sessions_opened, 0);
        assert_eq!(r.engine.results().state, ProbeState::Running);
    }
}

#[test]
fn memlock_failures_say_how_to_fix_them() {
    let f = classify(Failure::with_errno(
        Reason::RegMr,
        Some(libc::ENOMEM),
        "ibv_reg_mr(4096 bytes)",
    ));
    assert_eq!(f.reason, Reason::Memlock);
    assert!(f.message.starts_with("ibv_reg_mr(4096 bytes): Cannot allocate memory (os error 12); the locked-memory limit (RLIMIT_MEMLOCK)"), "{}", f.message);
    assert!(f.message.contains("LimitMEMLOCK=infinity"));
    assert!(f.message.contains("ulimit -l unlimited"));
    // other steps with ENOMEM are not about memlock
    let f = classify(Failure::with_errno(
        Reason::CreateQp,
        Some(libc::ENOMEM),
        "x",
    ));
    assert_eq!(f.reason, Reason::CreateQp);
}

#[test]
fn completion_errors_are_named_by_status() {
    let mut r = rig(vec![]);
    r.dev.rounds.lock().unwrap().extend([
        Step::Fail(Failure::new(Reason::Completion(12), "retry")),
        Step::Fail(Failure::new(Reason::Completion(5), "flush")),
        Step::Fail(Failure::new(Reason::Completion(999), "odd driver")),
    ]);
    for _ in 0..3 {
        r.engine.round(&t());
    }
    let s = stats(&r);
    assert_eq!(s.failures.get("wc_retry_exc_err"), Some(&1));
    assert_eq!(s.failures.get("wc_wr_flush_err"), Some(&1));
    assert_eq!(s.failures.get("wc_unknown"), Some(&1));
    assert_eq!(roce_probe::wc_status_name(12), "IBV_WC_RETRY_EXC_ERR");
    assert_eq!(roce_probe::wc_status_name(13), "IBV_WC_RNR_RETRY_EXC_ERR");
    assert_eq!(roce_probe::wc_status_name(0), "IBV_WC_SUCCESS");
    assert_eq!(roce_probe::wc_status_name(99), "unknown status 99");
    assert_eq!(s.sessions_opened, 3);
}

#[test]
fn payload_and_tag_are_verified() {
    let mut r = rig(vec![]);
    r.dev
        .rounds
        .lock()
        .unwrap()
        .extend([Step::Garbage, Step::WrongTag]);
    let f = r.engine.round(&t()).unwrap().unwrap_err();
    assert_eq!(f.reason, Reason::PayloadMismatch);
    assert!(f.message.contains("written bytes differ"), "{}", f.message);
    let f = r.engine.round(&t()).unwrap().unwrap_err();
    assert_eq!(f.reason, Reason::PayloadMismatch);
    assert_eq!(stats(&r).failures.get("payload_mismatch"), Some(&2));
    // payloads differ from round to round and are not all zeros
    assert_ne!(payload(1), payload(2));
    assert!(payload(0).iter().any(|b| *b != 0));
}

#[test]
fn a_down_port_is_reported_before_any_request() {
    let mut r = rig(vec![]);
    r.dev.port_up.store(false, Ordering::SeqCst);
    let f = r.engine.round(&t()).unwrap().unwrap_err();
    assert_eq!(f.reason, Reason::PortDown);
    assert_eq!(f.message, "rxe0/1 is not ACTIVE");
    assert_eq!(r.dev.log.lock().unwrap().rounds, 0);
    r.dev.port_up.store(true, Ordering::SeqCst);
    assert!(r.engine.round(&t()).unwrap().is_ok());
    let s = stats(&r);
    assert_eq!(s.failures.get("port_down"), Some(&1));
    assert_eq!(s.successes, 1);
}

#[test]
fn unavailable_is_a_state_not_a_failure_per_round() {
    let why = "libibverbs cannot list RDMA devices";
    let mut r = rig(vec![
        Err(OpenError::Unavailable(why.into())),
        Err(OpenError::Unavailable(why.into())),
    ]);
    assert!(r.engine.round(&t()).is_none());
    assert!(r.engine.round(&t()).is_none());
    let res = r.engine.results();
    assert_eq!(res.state, ProbeState::Unavailable(why.into()));
    assert!(res.targets.is_empty(), "no requests counted");
    // the device appears later: rounds start
    assert!(r.engine.round(&t()).unwrap().is_ok());
    assert_eq!(r.engine.results().state, ProbeState::Running);
}

#[test]
fn targets_are_capped_and_removed_ones_freed() {
    let mut r = rig(vec![]);
    let many: Vec<ProbeTarget> = (0..MAX_TARGETS + 5)
        .map(|i| ProbeTarget::loopback(format!("mlx5_{i}"), 1, 3))
        .collect();
    for target in &many {
        r.engine.round(target);
    }
    assert_eq!(r.engine.open_sessions(), MAX_TARGETS);
    assert_eq!(r.engine.results().targets.len(), MAX_TARGETS);
    r.engine.retain(&many[..2]);
    assert_eq!(r.engine.open_sessions(), 2);
    assert_eq!(r.dev.log.lock().unwrap().closes, MAX_TARGETS - 2);
    assert_eq!(r.engine.results().targets.len(), 2);
}

#[test]
fn a_panicking_verbs_layer_is_counted_as_internal() {
    let mut r = rig(vec![]);
    r.engine.round(&t());
    r.engine.record_panic(&t(), "destroy failed");
    let s = stats(&r);
    assert_eq!(s.failures.get("internal"), Some(&1));
    assert_eq!(r.engine.open_sessions(), 0);
}

#[test]
fn jitter_stays_within_ten_percent_and_spreads() {
    let interval = Duration::from_secs(10);
    let mut s = Schedule::new(interval, 42);
    let draws: Vec<Duration> = (0..1000).map(|_| s.jittered()).collect();
    let lo = interval.mul_f64(1.0 - JITTER);
    let hi = interval.mul_f64(1.0 + JITTER);
    assert!(draws.iter().all(|d| *d >= lo && *d <= hi));
    let min = draws.iter().min().unwrap();
    let max = draws.iter().max().unwrap();
    assert!(
        *max - *min > Duration::from_millis(1500),
        "{min:?}..{max:?}"
    );
}

#[test]
fn schedule_runs_new_targets_early_then_every_interval() {
    let interval = Duration::from_secs(10);
    let mut s = Schedule::new(interval, 7);
    let now = Instant::now();
    let a = ProbeTarget::loopback("mlx5_0", 1, 3);
    let b = ProbeTarget::loopback("mlx5_1", 1, 3);
    s.retain(&[a.clone(), b.clone()], now);
    let first = now + interval.mul_f64(JITTER);
    let due = s.due(first);
    assert_eq!(due.len(), 2, "both due within the first tenth");
    assert!(due.contains(&a) && due.contains(&b));
    s.done(&a, first);
    s.done(&b, first);
    assert!(s.due(first).is_empty());
    assert!(s
        .due(first + interval.mul_f64(1.0 - JITTER) - Duration::from_millis(1))
        .is_empty());
    assert_eq!(s.due(first + interval.mul_f64(1.0 + JITTER)).len(), 2);
    // a removed target is no longer scheduled; an added one is
    let c = ProbeTarget::loopback("mlx5_2", 1, 3);
    s.retain(&[b.clone(), c.clone()], first);
    let later = first + interval * 2;
    assert_eq!(s.due(later).len(), 2);
    assert!(!s.due(later).contains(&a));
    assert!(s.next_due().is_some());
}

#[test]
fn the_runner_publishes_results_and_stops_on_drop() {
    let dev = FakeDevice::new();
    let fake = FakeVerbs(dev.clone());
    // a long interval: only the first round (within its first tenth) runs
    let runner = Runner::spawn(fake, Duration::from_millis(200), Settings::default()).unwrap();
    assert_eq!(runner.results().state, ProbeState::Starting);
    runner.set_targets(vec![t()]);
    let mut results = runner.results();
    for _ in 0..500 {
        if results
            .targets
            .first()
            .is_some_and(|(_, s)| s.successes > 0)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        results = runner.results();
    }
    assert_eq!(results.state, ProbeState::Running);
    assert_eq!(results.targets[0].0, t());
    assert!(results.targets[0].1.successes >= 1);
    runner.set_targets(vec![]);
    let mut n = 1;
    for _ in 0..500 {
        n = runner.results().targets.len();
        if n == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(n, 0, "a removed target leaves the results");
    drop(runner);
    let log = dev.log.lock().unwrap();
    assert_eq!(log.opens, log.closes, "every session closed");
}

#[test]
fn memlock_failures_give_the_limit_in_force() {
    let f = classify(Failure::with_errno(
        Reason::RegMr,
        Some(libc::EAGAIN),
        "ibv_reg_mr(4096 bytes)",
    ));
    assert_eq!(f.reason, Reason::Memlock);
    // this process's own soft limit, as /proc/self/limits gives it
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap();
    let want = match soft.parse::<u64>() {
        Ok(b) => format!("(it is {} KiB for this process)", b / 1024),
        Err(_) => format!("(it is {soft} for this process)"),
    };
    assert!(f.message.contains(&want), "{}", f.message);
}

#[test]
fn refused_device_opens_name_the_permission() {
    let f = classify(Failure::with_errno(
        Reason::DeviceOpen,
        Some(libc::EACCES),
        "ibv_open_device(rxe0, /dev/infiniband/uverbs0)",
    ));
    assert_eq!(f.reason, Reason::DeviceOpen);
    assert!(
        f.message.starts_with(
            "ibv_open_device(rxe0, /dev/infiniband/uverbs0): Permission denied (os error 13); \
             the probes need read-write access to the device's /dev/infiniband/uverbs* node: \
             the node's owner, group or mode"
        ),
        "{}",
        f.message
    );
    assert!(f.message.contains("DeviceAllow=char-infiniband_verbs rw"));

    // a device cgroup (systemd DevicePolicy, a container runtime) says EPERM
    let f = classify(Failure::with_errno(
        Reason::DeviceOpen,
        Some(libc::EPERM),
        "ibv_open_device(mlx5_0)",
    ));
    assert!(
        f.message.contains("refused by a device cgroup or seccomp"),
        "{}",
        f.message
    );

    let f = classify(Failure::with_errno(
        Reason::DeviceOpen,
        Some(libc::ENOENT),
        "ibv_open_device(mlx5_0)",
    ));
    assert!(
        f.message
            .contains("node is missing here (containers: mount /dev/infiniband"),
        "{}",
        f.message
    );

    // other errors are left as the verbs layer said them
    let f = classify(Failure::with_errno(
        Reason::DeviceOpen,
        Some(libc::EIO),
        "ibv_open_device(mlx5_0)",
    ));
    assert_eq!(
        f.message,
        "ibv_open_device(mlx5_0): Input/output error (os error 5)"
    );
}
