//! Rules on netdev congestion counters over a window. PFC: a storm (a
//! priority paused for nearly the whole window, or the NIC's storm detector
//! giving up on pause) is critical; pauses received (a congested neighbour)
//! and sent (this NIC's buffer full) are separate warnings. Discards: on a
//! lossless (PFC-enabled) priority critical; other NIC discards and drops in
//! the host's receive rings are info, each with its own threshold.
//! Reset-aware increases ([`super::window`]); silent on the first sample
//! and on netdevs whose driver has no such counters.

use std::time::Duration;

use serde::Serialize;

use roce_host::Priorities;
use roce_netdev::{DcbOutcome, FrameDirection, Meaning, Netdev};

use super::fabric::{all_netdevs, list};
use super::history::FollowedCounter;
use super::ports::fmt_num;
use super::rates::span;
use super::settings::section;
use super::window::Increase;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::PfcStorm,
        checks: "no priority is paused more than rules.pfc_storm.pause_ratio of the window, and the NIC's storm detector did not stop pausing (mlx5 tx_pause_storm_error_events)",
        evaluate: pfc_storm,
    },
    Rule {
        id: RuleId::PfcPauseReceived,
        checks: "no priority is paused by the link partner more than rules.pfc_pause_received.pause_ratio of the window",
        evaluate: pfc_pause_received,
    },
    Rule {
        id: RuleId::PfcPauseSent,
        checks: "this NIC pauses no priority of its link partner more than rules.pfc_pause_sent.pause_ratio of the window, and raised no pause storm warning",
        evaluate: pfc_pause_sent,
    },
    Rule {
        id: RuleId::LosslessDiscards,
        checks: "no discards on a PFC-enabled (lossless) priority",
        evaluate: lossless_discards,
    },
    Rule {
        id: RuleId::DiscardsGrowing,
        checks: "other NIC discards stay below rules.discards_growing.per_second",
        evaluate: discards_growing,
    },
    Rule {
        id: RuleId::HostRingDrops,
        checks: "drops in the host's receive rings stay below rules.host_ring_drops.per_second",
        evaluate: host_ring_drops,
    },
];

/// Discard reasons that are the host's receive or transmit rings, not the
/// NIC's or the fabric's buffers (mlx5 `rx_out_of_buffer`: "receive queue
/// had no software buffers allocated"; bnxt_en `rx/tx_total_discard_pkts`).
const HOST_RING_REASONS: [&str; 3] = ["rx_out_of_buffer", "rx_ring", "tx_ring"];

fn netdev_increase(
    ctx: &Context,
    name: &str,
    window: std::time::Duration,
    meaning: Meaning,
) -> Option<Increase> {
    ctx.history
        .netdev(name)
        .increase(FollowedCounter::Stat(meaning), window)
}

fn direction_words(direction: FrameDirection) -> &'static str {
    match direction {
        FrameDirection::Rx => "rx, paused by the link partner",
        FrameDirection::Tx => "tx, this NIC pausing the link partner",
    }
}

/// Storm event kinds the netdev reports (`warning`, `error`, ...).
fn storm_kinds(n: &Netdev) -> Vec<&'static str> {
    let mut kinds: Vec<&'static str> = n
        .stats
        .iter()
        .filter_map(|s| match s.meaning {
            Meaning::PauseStormEvents { severity } => Some(severity),
            _ => None,
        })
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

/// How long one priority was paused in one direction over a window.
#[derive(Debug, Clone, Copy)]
struct Paused {
    priority: u8,
    direction: FrameDirection,
    /// Seconds paused.
    paused: f64,
    /// Seconds of the window covered.
    seconds: f64,
}

impl Paused {
    fn ratio(&self) -> f64 {
        self.paused / self.seconds
    }

    fn evidence(&self) -> String {
        format!(
            "{} priority {} paused {}s of {} ({}%)",
            self.direction.as_str(),
            self.priority,
            fmt_num((self.paused * 1000.0).round() / 1000.0),
            span(self.seconds),
            fmt_num((self.ratio() * 100.0).round())
        )
    }
}

/// The priority paused longest in `direction` over `window`.
fn worst_paused(
    ctx: &Context,
    n: &Netdev,
    direction: FrameDirection,
    window: std::time::Duration,
) -> Option<Paused> {
    let mut worst: Option<Paused> = None;
    for priority in 0..8u8 {
        let meaning = Meaning::PfcPauseDuration {
            priority,
            direction,
        };
        let Some(inc) = netdev_increase(ctx, &n.name, window, meaning) else {
            continue;
        };
        if inc.seconds <= 0.0 {
            continue;
        }
        let p = Paused {
            priority,
            direction,
            paused: inc.amount as f64 / 1e6,
            seconds: inc.seconds,
        };
        if worst.is_none_or(|w| p.ratio() > w.ratio()) {
            worst = Some(p);
        }
    }
    worst
}

/// Storm events of the given kinds that grew within `window`, and the time
/// covered.
fn storms(
    ctx: &Context,
    n: &Netdev,
    window: std::time::Duration,
    wanted: impl Fn(&str) -> bool,
) -> (Vec<(&'static str, u64)>, f64) {
    let mut grew = Vec::new();
    let mut seconds = 0.0f64;
    for kind in storm_kinds(n).into_iter().filter(|k| wanted(k)) {
        let meaning = Meaning::PauseStormEvents { severity: kind };
        if let Some(inc) = netdev_increase(ctx, &n.name, window, meaning) {
            seconds = seconds.max(inc.seconds);
            if inc.amount > 0 {
                grew.push((kind, inc.amount));
            }
        }
    }
    (grew, seconds)
}

/// What a pause rule saw on one netdev: the priority paused over the rule's
/// ratio, and the storm events of the kinds it watches.
struct PauseSeen {
    over: Option<Paused>,
    storms: Vec<(&'static str, u64)>,
    storm_seconds: f64,
}

impl PauseSeen {
    /// `None` when neither was seen.
    fn of(
        over: Option<Paused>,
        (storms, storm_seconds): (Vec<(&'static str, u64)>, f64),
    ) -> Option<Self> {
        (over.is_some() || !storms.is_empty()).then_some(PauseSeen {
            over,
            storms,
            storm_seconds,
        })
    }

    /// The pause, then the storm events, `; `-separated.
    fn evidence(&self) -> String {
        let mut evidence = Vec::new();
        if let Some(w) = self.over {
            evidence.push(w.evidence());
        }
        if !self.storms.is_empty() {
            evidence.push(format!(
                "pause storm events {} over {}",
                storm_text(&self.storms),
                span(self.storm_seconds)
            ));
        }
        evidence.join("; ")
    }
}

fn storm_text(storms: &[(&str, u64)]) -> String {
    storms
        .iter()
        .map(|(k, c)| format!("{k} +{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The mlx5 detector's error event: it stopped sending pause frames after
/// pausing for too long ("reaching time out and disabling transmission of
/// pause frames", mlx5 counters.rst).
const STORM_ERROR: &str = "error";

/// Which storm detections belong to which pause direction: mlx5's
/// `tx_pause_storm_warning_events` count this NIC sending pauses for a long
/// time; bnxt_en's `continuous_pause_events` and
/// `continuous_roce_pause_events` are receive-side statistics
/// (`bnxt_port_stats_ext_arr`, `BNXT_RX_STATS_EXT_ENTRY`): pauses arriving
/// without a break.
fn storm_direction(kind: &str) -> Option<FrameDirection> {
    match kind {
        "warning" => Some(FrameDirection::Tx),
        k if k.starts_with("continuous") => Some(FrameDirection::Rx),
        _ => None,
    }
}

/// A storm on `n` in `direction`: paused over the storm ratio for the
/// storm window (the pause rules leave such a priority to `pfc_storm`).
fn storming(ctx: &Context, n: &Netdev, direction: FrameDirection) -> bool {
    let cfg = &ctx.rules.pfc_storm;
    worst_paused(ctx, n, direction, cfg.window).is_some_and(|w| w.ratio() > cfg.pause_ratio)
}

fn pfc_storm(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.pfc_storm;
    let mut out = Vec::new();
    for (n, subject) in all_netdevs(s) {
        let over = [FrameDirection::Rx, FrameDirection::Tx]
            .into_iter()
            .filter_map(|d| worst_paused(ctx, n, d, cfg.window))
            .filter(|w| w.ratio() > cfg.pause_ratio)
            .max_by(|a, b| a.ratio().total_cmp(&b.ratio()));
        let storms = storms(ctx, n, cfg.window, |k| k == STORM_ERROR);
        let Some(seen) = PauseSeen::of(over, storms) else {
            continue;
        };
        let name = &n.name;
        let finding = match seen.over {
            Some(w) => format!(
                "{}: priority {} was paused {}% of the last {} ({}): a PFC storm, the priority is blocked",
                subject.describe(),
                w.priority,
                fmt_num((w.ratio() * 100.0).round()),
                span(w.seconds),
                direction_words(w.direction)
            ),
            None => format!(
                "{}: the NIC's pause storm detector stopped its pause frames ({}): traffic on the lossless priority can be dropped",
                subject.describe(),
                storm_text(&seen.storms)
            ),
        };
        out.push(Finding {
            rule: RuleId::PfcStorm,
            severity: Severity::Critical,
            finding,
            evidence: format!(
                "{}; expected <= {}% paused (rules.pfc_storm.pause_ratio) and no storm error events",
                seen.evidence(),
                fmt_num(cfg.pause_ratio * 100.0)
            ),
            fix: format!(
                "Find the origin of the storm: rx, follow the pauses upstream on the switch (its per-port PFC counters) to the port \
                 or host that never drains; tx, this host's receive side is stuck (a hung process holding receive buffers, PCIe \
                 errors: lspci -vvv, out_of_buffer). Keep the NIC's storm prevention on (ethtool --get-tunable {name} \
                 pfc-prevention-tout) so that one stuck receiver cannot block the priority fabric-wide"
            ),
            verify: format!("ethtool -S {name} | grep -iE 'pause|storm'  # twice, a few seconds apart: the durations must stop growing"),
            subject,
        });
    }
    out
}

/// A pause rule in one direction: paused over `cfg.pause_ratio` of its
/// window and not a storm, or the storm detections of that direction.
fn pause_finding(
    ctx: &Context,
    n: &Netdev,
    subject: Subject,
    direction: FrameDirection,
    cfg: &PfcStormRule,
    rule: RuleId,
) -> Option<Finding> {
    let over = worst_paused(ctx, n, direction, cfg.window)
        .filter(|w| w.ratio() > cfg.pause_ratio)
        .filter(|_| !storming(ctx, n, direction));
    let storms = storms(ctx, n, cfg.window, |k| {
        storm_direction(k) == Some(direction)
    });
    let seen = PauseSeen::of(over, storms)?;
    let name = &n.name;
    let finding = match (seen.over, direction) {
        (Some(w), FrameDirection::Rx) => format!(
            "{}: the link partner paused priority {} for {}% of the last {}: congestion downstream of this port",
            subject.describe(),
            w.priority,
            fmt_num((w.ratio() * 100.0).round()),
            span(w.seconds)
        ),
        (Some(w), FrameDirection::Tx) => format!(
            "{}: this NIC paused priority {} of its link partner for {}% of the last {}: its receive buffer keeps filling",
            subject.describe(),
            w.priority,
            fmt_num((w.ratio() * 100.0).round()),
            span(w.seconds)
        ),
        (None, FrameDirection::Tx) => format!(
            "{}: the NIC's pause storm detector saw it sending pause frames for a long time ({})",
            subject.describe(),
            storm_text(&seen.storms)
        ),
        (None, FrameDirection::Rx) => format!(
            "{}: the NIC saw pause frames arrive without a break ({})",
            subject.describe(),
            storm_text(&seen.storms)
        ),
    };
    let fix = match direction {
        FrameDirection::Rx => format!(
            "The switch pauses this NIC because its own egress queue toward the receivers is full: incast, an oversubscribed \
             uplink, or pauses spreading from another port. Check the switch's queue and PFC counters on the path; make sure \
             the switch marks ECN below its PFC threshold and DCQCN is on at the senders (ecn/roce_rp, roce_np under \
             /sys/class/net/{name}), so that senders slow down before PFC has to pause"
        ),
        FrameDirection::Tx => format!(
            "This host does not drain the priority as fast as it arrives: check the receivers' out_of_buffer, PCIe (lspci -vvv: \
             link width and speed, errors) and memory load; check the NIC's buffer and headroom for the priority (dcb buffer \
             show dev {name}, mlnx_qos -i {name}); keep storm prevention on (ethtool --get-tunable {name} pfc-prevention-tout)"
        ),
    };
    Some(Finding {
        rule,
        severity: Severity::Warning,
        finding,
        evidence: format!(
            "{}; expected <= {}% paused (rules.{rule}.pause_ratio) and no storm events",
            seen.evidence(),
            fmt_num(cfg.pause_ratio * 100.0)
        ),
        fix,
        verify: format!(
            "ethtool -S {name} | grep -E '{}_prio[0-7]_pause_duration'  # twice, a few seconds apart",
            direction.as_str()
        ),
        subject,
    })
}

fn pfc_pause_received(ctx: &Context) -> Vec<Finding> {
    pause_findings(
        ctx,
        FrameDirection::Rx,
        &ctx.rules.pfc_pause_received,
        RuleId::PfcPauseReceived,
    )
}

fn pfc_pause_sent(ctx: &Context) -> Vec<Finding> {
    pause_findings(
        ctx,
        FrameDirection::Tx,
        &ctx.rules.pfc_pause_sent,
        RuleId::PfcPauseSent,
    )
}

/// [`pause_finding`] of every netdev of the latest sample.
fn pause_findings(
    ctx: &Context,
    direction: FrameDirection,
    cfg: &PfcStormRule,
    rule: RuleId,
) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    all_netdevs(s)
        .into_iter()
        .filter_map(|(n, subject)| pause_finding(ctx, n, subject, direction, cfg, rule))
        .collect()
}

/// Priorities with PFC on, where DCB was read.
fn lossless(n: &Netdev) -> Priorities {
    match &n.dcb {
        DcbOutcome::Ok(config) => config.pfc_enabled.unwrap_or_default(),
        _ => Priorities::NONE,
    }
}

fn lossless_discards(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.lossless_discards;
    let mut out = Vec::new();
    for (n, subject) in all_netdevs(s) {
        let priorities = lossless(n);
        if priorities.is_empty() {
            continue;
        }
        let mut grew = Vec::new();
        let mut hit = Priorities::NONE;
        let mut total = 0u64;
        let mut seconds = 0.0f64;
        for stat in &n.stats {
            let Meaning::Discards {
                reason,
                priority: Some(priority),
            } = stat.meaning
            else {
                continue;
            };
            if !priorities.contains(priority) {
                continue;
            }
            let Some(inc) = netdev_increase(ctx, &n.name, cfg.window, stat.meaning) else {
                continue;
            };
            seconds = seconds.max(inc.seconds);
            // One statistic per meaning: the driver's counters of one
            // meaning are summed when the names are resolved.
            if inc.amount > 0 {
                total = total.saturating_add(inc.amount);
                grew.push(format!("{reason} priority {priority} +{}", inc.amount));
                hit = hit.with(priority);
            }
        }
        if total == 0 || seconds <= 0.0 {
            continue;
        }
        let rate = total as f64 / seconds;
        if rate <= cfg.per_second {
            continue;
        }
        let name = &n.name;
        out.push(Finding {
            rule: RuleId::LosslessDiscards,
            severity: Severity::Critical,
            finding: format!(
                "{}: the NIC drops packets on lossless priority {} ({}/s): RoCE on it loses packets (retransmissions, ACK timeouts)",
                subject.describe(),
                list(hit),
                fmt_num(rate)
            ),
            evidence: format!(
                "{} over {} = {}/s on PFC priorities {}; expected <= {}/s (rules.lossless_discards.per_second)",
                grew.join(", "),
                span(seconds),
                fmt_num(rate),
                list(priorities),
                fmt_num(cfg.per_second)
            ),
            fix: format!(
                "A lossless priority drops only when PFC does not protect it: PFC must be on for the priority at both ends of the \
                 link (dcb pfc show dev {name}; the switch port's PFC priorities) and the RoCE traffic must really be classified \
                 into it (trust and DSCP map: dcb app show dev {name}); rx_no_buffer/rx_port on the priority: its receive buffer \
                 or headroom is too small for the cable length (dcb buffer show dev {name}, mlnx_qos -i {name})"
            ),
            verify: format!("ethtool -S {name} | grep -E 'rx_prio({})_(discards|buf_discard|cong_discard)'  # twice, a few seconds apart", hit.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("|")),
            subject,
        });
    }
    out
}

fn discard_reasons(n: &Netdev) -> Vec<&'static str> {
    let mut reasons: Vec<&'static str> = n
        .stats
        .iter()
        .filter_map(|s| match s.meaning {
            Meaning::Discards { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    reasons.sort_unstable();
    reasons.dedup();
    reasons
}

/// Port-wide discards of the reasons `wanted` keeps, over a rate rule.
fn discard_rate(
    ctx: &Context,
    n: &Netdev,
    window: std::time::Duration,
    wanted: impl Fn(&str) -> bool,
) -> Option<(Vec<String>, u64, f64)> {
    let mut grew = Vec::new();
    let mut total = 0u64;
    let mut seconds = 0.0f64;
    for reason in discard_reasons(n).into_iter().filter(|r| wanted(r)) {
        let Some(inc) = ctx
            .history
            .netdev(&n.name)
            .increase(FollowedCounter::Discards(reason), window)
        else {
            continue;
        };
        seconds = seconds.max(inc.seconds);
        if inc.amount > 0 {
            total = total.saturating_add(inc.amount);
            grew.push(format!("{reason} +{}", inc.amount));
        }
    }
    (total > 0 && seconds > 0.0).then_some((grew, total, seconds))
}

/// A netdev whose port-wide discards of some reasons run above a rule's
/// rate.
struct Discarding<'a> {
    netdev: &'a Netdev,
    subject: Subject,
    /// `reason +count` of each counter that grew.
    grew: Vec<String>,
    rate: f64,
    seconds: f64,
}

impl Discarding<'_> {
    /// The reasons of the counters that grew, comma-separated.
    fn reasons(&self) -> String {
        let names: Vec<&str> = self
            .grew
            .iter()
            .map(|g| g.split(' ').next().unwrap_or(""))
            .collect();
        names.join(", ")
    }

    /// What grew over which span, against the limit `setting` sets.
    fn evidence(&self, per_second: f64, setting: &str) -> String {
        format!(
            "{} over {} = {}/s; expected <= {}/s ({setting})",
            self.grew.join(", "),
            span(self.seconds),
            fmt_num(self.rate),
            fmt_num(per_second)
        )
    }
}

/// The netdevs whose discards of the host's own rings (`host_ring`) or of
/// every other reason exceed `per_second` over `window`.
fn discarding<'a>(
    ctx: &'a Context,
    window: std::time::Duration,
    per_second: f64,
    host_ring: bool,
) -> Vec<Discarding<'a>> {
    let Some(s) = ctx.latest() else { return vec![] };
    all_netdevs(s)
        .into_iter()
        .filter_map(|(netdev, subject)| {
            let wanted = |r: &str| HOST_RING_REASONS.contains(&r) == host_ring;
            let (grew, total, seconds) = discard_rate(ctx, netdev, window, wanted)?;
            let rate = total as f64 / seconds;
            (rate > per_second).then_some(Discarding {
                netdev,
                subject,
                grew,
                rate,
                seconds,
            })
        })
        .collect()
}

fn discards_growing(ctx: &Context) -> Vec<Finding> {
    let cfg = &ctx.rules.discards_growing;
    let mut out = Vec::new();
    for d in discarding(ctx, cfg.window, cfg.per_second, false) {
        let name = &d.netdev.name;
        out.push(Finding {
            rule: RuleId::DiscardsGrowing,
            severity: Severity::Info,
            finding: format!(
                "{}: the NIC discards packets at {}/s ({})",
                d.subject.describe(),
                fmt_num(d.rate),
                d.reasons()
            ),
            evidence: format!(
                "{}; drops on a lossless priority are lossless_discards",
                d.evidence(cfg.per_second, "rules.discards_growing.per_second")
            ),
            fix: format!(
                "On lossy priorities (TCP, storage) some drops under congestion are normal; sustained, look at which priority \
                 drops (ethtool -S {name} | grep -E 'rx_prio[0-7]_(discards|buf_discard|cong_discard)'). rx_port/rx_no_buffer: the \
                 NIC's receive buffer overflowed (buffer sizes: dcb buffer show dev {name}); tx_*: egress drops (link down, pauses)"
            ),
            verify: format!("ethtool -S {name} | grep -iE 'discard|drop'  # twice, a few seconds apart"),
            subject: d.subject,
        });
    }
    out
}

fn host_ring_drops(ctx: &Context) -> Vec<Finding> {
    let cfg = &ctx.rules.host_ring_drops;
    let mut out = Vec::new();
    for d in discarding(ctx, cfg.window, cfg.per_second, true) {
        let name = &d.netdev.name;
        out.push(Finding {
            rule: RuleId::HostRingDrops,
            severity: Severity::Info,
            finding: format!(
                "{}: the host's receive rings drop packets at {}/s ({}): the kernel network stack does not keep up (not the fabric, not RDMA)",
                d.subject.describe(),
                fmt_num(d.rate),
                d.reasons()
            ),
            evidence: d.evidence(cfg.per_second, "rules.host_ring_drops.per_second"),
            fix: format!(
                "The driver had no receive buffers posted when packets of the netdev's own (non-RDMA) traffic arrived: enlarge the \
                 rings (ethtool -g {name}; ethtool -G {name} rx <max>), spread interrupts over more CPUs (ethtool -l {name}, \
                 irqbalance) and check CPU load on the cores that serve them"
            ),
            verify: format!("ethtool -S {name} | grep -E 'rx_out_of_buffer|discard_pkts'  # twice, a few seconds apart"),
            subject: d.subject,
        });
    }
    out
}

/// A rule on the share of a window a priority is paused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PfcStormRule {
    pub window: Duration,
    /// Share of the window (0..1) one priority may be paused in one
    /// direction before the rule fires.
    pub pause_ratio: f64,
}

section!(PfcStormRule {
    window: Duration = "crate::values::opt_duration",
    pause_ratio: f64 = "crate::values::opt_share",
});
