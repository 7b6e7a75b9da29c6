//! The rule on failed work requests (`completion_errors`) over mlx5's
//! `extended_err_cnts` and bnxt_re's requester completion statuses: it
//! fires, with exact texts, on completions in error beyond the flushes and
//! on remote access, invalid request and length errors; and a healthy
//! 400 GbE port (writes and reads at line rate, a job ending with
//! thousands of flushed receive work requests, a driver reload) raises
//! nothing above info.
//!
//! Counter names and groups: drivers/infiniband/hw/mlx5/counters.c
//! (`extended_err_cnts`, `basic_q_cnts`), drivers/infiniband/hw/bnxt_re/hw_counters.c.

use std::sync::Arc;

use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::rules::{self, Finding, Severity};
use roce_exporter::snapshot::Snapshot;
use roce_rdma::{Counter, Port};
use roce_testkit::snapshot::{self as testkit, roce_port, SnapshotBuilder};

/// RDMA writes of 128 KiB per 10 s sample at 400 GbE line rate (50 GB/s).
const WRITES_PER_10S: u64 = 3_800_000;

/// The healthy 400 GbE port with these hardware counters.
fn port(hw: &[(&str, u64)]) -> Port {
    Port {
        hw_counters: hw.iter().map(|(n, v)| Counter::new(*n, *v)).collect(),
        ..roce_port(1)
    }
}

/// Snapshots 10 s apart of one mlx5 port, sample `i` holding `hw(i)`.
fn mlx5(n: u64, hw: impl Fn(u64) -> Vec<(&'static str, u64)>) -> Vec<Arc<Snapshot>> {
    testkit::history((0..n).map(|i| SnapshotBuilder::new().with_port("mlx5_0", port(&hw(i)))))
}

fn run(h: &[Arc<Snapshot>]) -> Vec<Finding> {
    rules::evaluate(h, &RulesConfig::default(), &Expectations::default())
}

fn only(h: &[Arc<Snapshot>]) -> Vec<Finding> {
    run(h)
        .into_iter()
        .filter(|f| f.rule == "completion_errors")
        .collect()
}

/// Every mlx5 counter the rule reads, at `errors` (and as many flushes),
/// with `extra` set on top.
fn counters(flushes: u64, extra: &[(&'static str, u64)]) -> Vec<(&'static str, u64)> {
    let mut hw = vec![
        ("req_cqe_error", flushes),
        ("req_cqe_flush_error", flushes),
        ("resp_cqe_error", flushes),
        ("resp_cqe_flush_error", flushes),
        ("req_remote_access_errors", 0),
        ("resp_remote_access_errors", 0),
        ("req_remote_invalid_request", 0),
        ("resp_local_length_error", 0),
    ];
    for (name, v) in extra {
        match hw.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = *v,
            None => hw.push((name, *v)),
        }
    }
    hw
}

#[test]
fn a_remote_access_error_is_a_warning_naming_the_port() {
    // A peer refused an RDMA write's rkey: the write completed with
    // IB_WC_REM_ACCESS_ERR, the QP went to the error state and flushed the
    // next one.
    let h = mlx5(2, |i| match i {
        0 => counters(0, &[]),
        _ => counters(
            0,
            &[
                ("req_cqe_error", 3),
                ("req_cqe_flush_error", 1),
                ("req_remote_access_errors", 2),
            ],
        ),
    });
    let f = only(&h);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_0"));
    assert_eq!(f[0].subject.port, Some(1));
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): work requests failed in the last 10s: 2 requester work request(s) completed in error; \
         2 remote access error(s): the peer refused this side's rkey, address or access"
    );
    assert_eq!(
        f[0].evidence,
        "req_cqe_error +3 (of which req_cqe_flush_error +1), req_remote_access_errors +2 over 10s; expected no completion \
         in error but flushes, and no access, invalid request or length error (rules.completion_errors.window)"
    );
    assert!(
        f[0].fix.contains("NET/IB: Got completion from peer"),
        "{}",
        f[0].fix
    );
    assert_eq!(
        f[0].verify,
        "rdma statistic show link mlx5_0/1 | tr ' ' '\\n' | grep -A1 -E 'cqe|remote|length'  # twice, a minute apart: \
         no error counter may grow faster than its flush counter"
    );
}

#[test]
fn responder_length_and_access_errors_fire_without_completion_counters_moving() {
    let h = mlx5(2, |i| {
        counters(
            0,
            &[
                ("resp_local_length_error", i),
                ("resp_remote_access_errors", 4 * i),
            ],
        )
    });
    let f = only(&h);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): work requests failed in the last 10s: 4 RDMA request(s) from a peer refused for a wrong \
         rkey, address or access; 1 message(s) received longer than the receive buffer posted for them"
    );
}

#[test]
fn bnxt_re_requester_statuses_feed_the_rule() {
    let device = |v: u64| roce_rdma::Device {
        name: "bnxt_re0".into(),
        driver: Some("bnxt_en".into()),
        ports: vec![port(&[
            ("remote_access_err", v),
            ("remote_invalid_req_err", v),
        ])],
        ..roce_rdma::Device::default()
    };
    let h = testkit::history([0, 1].map(|v| SnapshotBuilder::new().device(device(v))));
    let f = only(&h);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        f[0].evidence,
        "remote_access_err +1, remote_invalid_req_err +1 over 10s; expected no completion in error but flushes, and no \
         access, invalid request or length error (rules.completion_errors.window)"
    );
}

#[test]
fn a_healthy_port_at_line_rate_with_a_job_ending_raises_nothing() {
    // Five minutes of RDMA writes and reads at 400 GbE; at sample 20 a job
    // ends and its QPs are destroyed: the 4096 receive work requests it
    // left posted, and 32 sends queued behind its last error-free one, come
    // back flushed, counted as completions in error and as flushes alike.
    let h = mlx5(31, |i| {
        let flushes = if i >= 20 { 4096 } else { 0 };
        let mut hw = counters(
            0,
            &[
                ("resp_cqe_error", flushes),
                ("resp_cqe_flush_error", flushes),
                ("req_cqe_error", flushes / 128),
                ("req_cqe_flush_error", flushes / 128),
            ],
        );
        hw.extend([
            ("rx_write_requests", i * WRITES_PER_10S),
            ("rx_read_requests", i * WRITES_PER_10S / 8),
            ("rx_atomic_requests", 0),
            ("rx_dct_connect", 0),
            ("roce_adp_retrans", 0),
            ("roce_adp_retrans_to", 0),
            ("roce_slow_restart", 0),
            ("roce_slow_restart_cnps", 0),
            ("roce_slow_restart_trans", 0),
        ]);
        hw
    });
    let alarms: Vec<Finding> = run(&h)
        .into_iter()
        .filter(|f| f.severity != Severity::Info)
        .collect();
    assert_eq!(alarms, vec![]);
}

#[test]
fn silent_on_the_first_sample_and_across_a_driver_reload() {
    let errors = |v| counters(0, &[("req_cqe_error", v), ("req_remote_access_errors", v)]);
    assert_eq!(only(&mlx5(1, |_| errors(50))), vec![]);
    // The driver reloaded: every counter restarted from zero.
    assert_eq!(
        only(&mlx5(2, |i| errors(if i == 0 { 50 } else { 0 }))),
        vec![]
    );
}

#[test]
fn more_flushes_than_errors_count_as_no_failure() {
    // A firmware that counted flushes apart from errors would make the
    // difference negative: never below zero, so no finding.
    let h = mlx5(2, |i| counters(0, &[("resp_cqe_flush_error", 100 * i)]));
    assert_eq!(only(&h), vec![]);
}
