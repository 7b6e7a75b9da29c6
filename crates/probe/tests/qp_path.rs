//! The queue pairs of a probe carry the port's active MTU and the target's
//! traffic class: a fake verbs layer that connects its queue pairs the way
//! the libibverbs one does (`qp_path` over the port's active MTU) reports
//! the path each session was opened with, and the engine says it.

use roce_probe::engine::{ProbeEngine, Settings};
use roce_probe::verbs::fake::{FakeDevice, FakeVerbs};
use roce_probe::verbs::QpPath;
use roce_probe::ProbeTarget;

/// The fake layer on a port whose active MTU (what `ibv_query_port`
/// reports) is `mtu` bytes.
fn port(mtu: u32) -> FakeVerbs {
    FakeVerbs(FakeDevice::with_active_mtu(Some(mtu)))
}

#[test]
fn rounds_run_at_the_roce_dscp_and_the_active_mtu() {
    let mut engine = ProbeEngine::new(port(4096), Settings::default());
    // DSCP 26, as `roce_dscp` gives for NCCL_IB_TC=106: traffic class 104.
    let target = ProbeTarget::loopback("mlx5_0", 1, 3).with_traffic_class(26 << 2);
    assert!(matches!(engine.round(&target), Some(Ok(_))));
    assert_eq!(
        engine.path(&target),
        Some(QpPath {
            mtu: 4096,
            traffic_class: 104
        }),
        "not traffic class 0 and path MTU 1024 any more"
    );
}

#[test]
fn a_new_traffic_class_is_a_new_session() {
    let mut engine = ProbeEngine::new(port(2048), Settings::default());
    let before = ProbeTarget::loopback("mlx5_0", 1, 3);
    let after = before.clone().with_traffic_class(104);
    assert!(matches!(engine.round(&before), Some(Ok(_))));
    engine.retain(std::slice::from_ref(&after));
    assert!(matches!(engine.round(&after), Some(Ok(_))));
    assert_eq!(engine.open_sessions(), 1);
    assert_eq!(engine.path(&before), None);
    assert_eq!(
        engine.path(&after),
        Some(QpPath {
            mtu: 2048,
            traffic_class: 104
        })
    );
}
