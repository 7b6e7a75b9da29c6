//! PFC against the rest of the lossless configuration: PFC without ECN on
//! its priorities, and PFC on another priority than the host's RoCE
//! traffic uses.

use super::*;

pub(super) fn pfc_without_ecn(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let (Some(pfc), Some(ecn)) = (pfc_of(n), &n.ecn) else {
            continue;
        };
        let mut gaps = Vec::new();
        let mut evidence = Vec::new();
        let mut bad = Vec::new();
        for p in pfc {
            let mut missing = Vec::new();
            for (role, entries) in [("np", &ecn.np), ("rp", &ecn.rp)] {
                // A role without any file says nothing; a role whose folder
                // lists other priorities but not this one is knowably off.
                if entries.is_empty() {
                    continue;
                }
                let state = entries.iter().find(|(q, _)| *q == p).map(|(_, on)| *on);
                let shown = match state {
                    Some(true) => continue,
                    Some(false) => "0",
                    None => "absent",
                };
                missing.push(format!("roce_{role} off"));
                evidence.push(format!("ecn/roce_{role}/enable/{p} {shown}"));
            }
            if !missing.is_empty() {
                gaps.push(format!("priority {p}: {}", missing.join(", ")));
                bad.push(p);
            }
        }
        if bad.is_empty() {
            continue;
        }
        let name = &n.name;
        let enable = bad
            .iter()
            .flat_map(|p| {
                ["np", "rp"]
                    .map(|r| format!("echo 1 > /sys/class/net/{name}/ecn/roce_{r}/enable/{p}"))
            })
            .collect::<Vec<_>>()
            .join("; ");
        let files = bad
            .iter()
            .flat_map(|p| {
                ["np", "rp"].map(|r| format!("/sys/class/net/{name}/ecn/roce_{r}/enable/{p}"))
            })
            .collect::<Vec<_>>()
            .join(" ");
        out.push(Finding {
            rule: RuleId::PfcWithoutEcn,
            severity: Severity::Warning,
            finding: format!(
                "{}: PFC is on without ECN ({}): congestion is handled by pausing alone, which spreads it (head-of-line blocking, pause storms)",
                subject.describe(),
                gaps.join("; ")
            ),
            evidence: format!(
                "PFC on priority {}; {}; expected 1 for roce_np and roce_rp on every PFC priority",
                list(pfc),
                evidence.join(", ")
            ),
            fix: format!(
                "Turn DCQCN on for the PFC priority, both roles: {enable}; and ECN marking on the switches' RoCE queue, so that senders slow down before PFC has to pause the link"
            ),
            verify: format!("grep -H . {files}  # expect 1"),
            subject,
        });
    }
    out
}

pub(super) fn pfc_priority_mismatch(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let Some(pfc) = pfc_of(n) else {
            continue;
        };
        let name = &n.name;
        let roce = roce_dscp(n, ctx.expect.nccl_ib_tc);
        let mapped = dcb_of(n).and_then(|d| dscp_priority(d, roce.dscp));
        let mut dscp_fix = None;
        let (severity, finding, evidence, target) = match ctx.expect.pfc_priority {
            Some(e) if pfc != Priorities::one(e) => {
                let (severity, finding) = if pfc.is_empty() {
                    (
                        Severity::Critical,
                        format!(
                            "{}: PFC is off on every priority, but RoCE is expected on priority {e}: RoCE traffic is not lossless",
                            subject.describe()
                        ),
                    )
                } else if !pfc.contains(e) {
                    (
                        Severity::Critical,
                        format!(
                            "{}: PFC is on priority {} but not on the expected RoCE priority {e}: RoCE traffic is not lossless",
                            subject.describe(),
                            list(pfc)
                        ),
                    )
                } else {
                    (
                        Severity::Warning,
                        format!(
                            "{}: PFC is on priorities {}, not only on the expected RoCE priority {e}: other traffic can pause the link too",
                            subject.describe(),
                            list(pfc)
                        ),
                    )
                };
                let evidence = format!(
                    "PFC enabled priorities: {} (pfc_en 0x{pfc:02x}); expected {e} only (expect.pfc_priority)",
                    list(pfc)
                );
                (severity, finding, evidence, e)
            }
            expected => match mapped {
                // PFC is where expected, or nothing is expected: the DSCP
                // the host's RoCE traffic carries must land on a PFC
                // priority (mlx5 lists rx/tx_prioN_pause only for PFC
                // priorities, so pause counters cannot show this).
                Some((p, how)) if !pfc.is_empty() && !pfc.contains(p) => {
                    let target = expected.or(pfc.first()).unwrap_or(p);
                    // An assumed DSCP (NCCL's default, nothing configured
                    // says what the jobs set) is not evidence enough to
                    // page: info, saying it assumed.
                    let severity = if roce.configured() {
                        Severity::Critical
                    } else {
                        Severity::Info
                    };
                    let d = roce.dscp;
                    let assumed = if roce.configured() {
                        ""
                    } else {
                        " (if the jobs set NCCL_IB_TC, give it as expect.nccl_ib_tc)"
                    };
                    // Which side is wrong depends on the fabric: offer
                    // PFC where the traffic lands unless a PFC priority is
                    // expected, then the marking and the map.
                    let move_pfc = if expected.is_none() {
                        format!(
                            "If priority {p} is the fabric's RoCE priority (as on the switch ports), put PFC there: dcb pfc set dev {name} prio-pfc all:off {p}:on. Otherwise m"
                        )
                    } else {
                        "M".to_string()
                    };
                    dscp_fix = Some(format!(
                        "{move_pfc}ark RoCE traffic with a DSCP that the switches and this port map to PFC priority {target}: NCCL_IB_TC=<DSCP << 2> in the jobs' environment (and expect.nccl_ib_tc here){assumed}; \
                         or map DSCP {d} to priority {target} on the port: dcb app add dev {name} dscp-prio {d}:{target} (or mlnx_qos -i {name} --dscp2prio set,{d},{target}), and the same on the switch"
                    ));
                    (
                        severity,
                        format!(
                            "{}: RoCE traffic with {} lands on priority {p}, where PFC is off: RoCE traffic is not lossless",
                            subject.describe(),
                            roce.describe()
                        ),
                        format!(
                            "trust dscp; DSCP {d} -> priority {p} ({how}); PFC enabled priorities: {} (pfc_en 0x{pfc:02x}); expected the RoCE DSCP on a PFC priority{}",
                            list(pfc),
                            expected.map(|e| format!(" ({e}, expect.pfc_priority)")).unwrap_or_default()
                        ),
                        target,
                    )
                }
                _ if expected.is_some() => continue,
                _ => {
                    // Without an expectation, only a contradiction in the data:
                    // pause frames on a priority that has no PFC here mean the
                    // link partner uses another PFC priority (drivers that list
                    // pause counters for every priority).
                    let mut paused = Vec::new();
                    let mut seconds = 0.0f64;
                    for p in Priorities::ALL.difference(pfc) {
                        let mut total = 0u64;
                        for direction in [FrameDirection::Rx, FrameDirection::Tx] {
                            let meaning = Meaning::PfcPauseFrames {
                                priority: p,
                                direction,
                            };
                            let inc = ctx.history.netdev(name).increase(
                                FollowedCounter::Stat(meaning),
                                ctx.rules.pfc_storm.window,
                            );
                            if let Some(inc) = inc {
                                total = total.saturating_add(inc.amount);
                                seconds = seconds.max(inc.seconds);
                            }
                        }
                        if total > 0 {
                            paused.push((p, total));
                        }
                    }
                    let Some(&(first, _)) = paused.first() else {
                        continue;
                    };
                    let pauses = paused
                        .iter()
                        .map(|(p, c)| format!("priority {p} +{c}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    (
                    Severity::Warning,
                    format!(
                        "{}: pause frames on priority {} where PFC is off here: the link partner uses another PFC priority",
                        subject.describe(),
                        list(paused.iter().map(|(p, _)| *p))
                    ),
                    format!(
                        "PFC enabled priorities: {}; pause frames {pauses} over {}; expected pauses only on PFC priorities",
                        list(pfc),
                        crate::rates::span(seconds)
                    ),
                    first,
                )
                }
            },
        };
        let mut pfc_vector = [0u8; 8];
        if let Some(slot) = pfc_vector.get_mut(usize::from(target)) {
            *slot = 1;
        }
        let vector = pfc_vector
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let verify = if dscp_fix.is_some() {
            format!("dcb app show dev {name}; dcb pfc show dev {name}; mlnx_qos -i {name}")
        } else {
            format!("dcb pfc show dev {name}; mlnx_qos -i {name}")
        };
        let fix = dscp_fix.unwrap_or_else(|| format!(
            "Put PFC on the RoCE priority only, as on the switch port: dcb pfc set dev {name} prio-pfc all:off {target}:on (or mlnx_qos -i {name} --pfc {vector}), and make the switch's PFC priority the same"
        ));
        out.push(Finding {
            rule: RuleId::PfcPriorityMismatch,
            severity,
            finding,
            evidence,
            fix,
            verify,
            subject,
        });
    }
    out
}
