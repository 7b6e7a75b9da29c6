//! Rules on what NCCL jobs really did on this host (the NCCL source's part:
//! their debug logs, nccl-tests' output, the Inspector's records), judged
//! against the RDMA ports and the GPU-NIC topology the exporter reads
//! itself. Each submodule's header names the NCCL lines its rules read.
//! - `nccl_socket_transport` in [`transport`];
//! - `nccl_gdr_not_used` in [`gdr`];
//! - `nccl_gid_not_rocev2` in [`gid`], with the GID each RoCE NIC used;
//! - `nccl_busbw_below_line_rate`, `nccl_rails_unused` and
//!   `nccl_tests_wrong` in [`busbw`];
//! - the job's GPUs on this node and their NICs in [`rails`].
//!
//! All are silent without NCCL data (the source is off by default).

use roce_model::nccl::NcclSnapshot;

use super::table::RuleId;
use super::{Context, Rule};

pub mod busbw;
pub mod gdr;
pub mod gid;
pub mod rails;
pub mod transport;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::NcclSocketTransport,
        checks: "no NCCL job used NET/Socket in the window (its connections, its choice of network, NCCL_IB_DISABLE=1 or NCCL_NET=Socket), whatever the state of the host's RDMA ports",
        evaluate: |ctx: &Context| ctx.latest().map(transport::socket_transport).unwrap_or_default(),
    },
    Rule {
        id: RuleId::NcclGdrNotUsed,
        checks: "every NIC NCCL ran NET over verbs on in the window had a connection via GPUDirect RDMA",
        evaluate: |ctx: &Context| ctx.latest().map(gdr::gdr_not_used).unwrap_or_default(),
    },
    Rule {
        id: RuleId::NcclGidNotRocev2,
        checks: "the GID NCCL uses on each RoCE NIC (logged, NCCL_IB_GID_INDEX, or NCCL's default for its version) is RoCE v2 with a routable address",
        evaluate: |ctx: &Context| ctx.latest().map(gid::gid_not_rocev2).unwrap_or_default(),
    },
    Rule {
        id: RuleId::NcclBusbwBelowLineRate,
        checks: "bus bandwidth of large multi-node collectives (NCCL Inspector, nccl-tests at its largest size) is at least nccl.min_line_rate_fraction of what the NICs nearest the job's GPUs give",
        evaluate: |ctx: &Context| ctx.latest().map(busbw::busbw_below_line_rate).unwrap_or_default(),
    },
    Rule {
        id: RuleId::NcclRailsUnused,
        checks: "NCCL's device table lists every ACTIVE rail (NIC nearest to one of the job's GPUs) of this node",
        evaluate: |ctx: &Context| ctx.latest().map(busbw::rails_unused).unwrap_or_default(),
    },
    Rule {
        id: RuleId::NcclTestsWrong,
        checks: "nccl-tests found no wrong element (#wrong 0 in every row, Out of bounds values 0)",
        evaluate: |ctx: &Context| ctx.latest().map(busbw::tests_wrong).unwrap_or_default(),
    },
];

/// `15m`: the NCCL part's window, for texts.
fn window_text(n: &NcclSnapshot) -> String {
    humantime::format_duration(n.window).to_string()
}

fn opt(v: &Option<u32>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

fn list_or_unknown(v: &[String]) -> String {
    if v.is_empty() {
        "not logged".into()
    } else {
        v.join(", ")
    }
}
