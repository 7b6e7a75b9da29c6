//! Rules on netdev congestion counters over a window: PFC storms (time
//! paused per priority, the NIC's storm detections) and growing discards.
//! Reset-aware increases ([`super::window`]); silent on the first sample
//! and on netdevs whose driver has no such counters.

use roce_netdev::{Direction, Meaning, Netdev};

use super::fabric::all_netdevs;
use super::history::Value;
use super::ports::fmt_num;
use super::rates::span;
use super::window::Increase;
use super::{Context, Finding, Rule, RuleId, Severity};

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::PfcStorm,
        checks: "no priority is paused longer than rules.pfc_storm.pause_ratio of the window, and no pause storm events",
        evaluate: pfc_storm,
    },
    Rule {
        id: RuleId::DiscardsGrowing,
        checks: "netdev discards stay below rules.discards_growing.per_second",
        evaluate: discards_growing,
    },
];

fn netdev_increase(
    ctx: &Context,
    name: &str,
    window: std::time::Duration,
    meaning: Meaning,
) -> Option<Increase> {
    ctx.history
        .netdev(name)
        .increase(Value::Stat(meaning), window)
}

fn direction_words(direction: Direction) -> &'static str {
    match direction {
        Direction::Rx => "rx, paused by the link partner",
        Direction::Tx => "tx, this NIC pausing the link partner",
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

fn pfc_storm(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.pfc_storm;
    let mut out = Vec::new();
    for (n, subject) in all_netdevs(s) {
        // Worst (ratio, priority, direction, paused seconds, window seconds).
        let mut worst: Option<(f64, u8, Direction, f64, f64)> = None;
        for priority in 0..8u8 {
            for direction in [Direction::Rx, Direction::Tx] {
                let meaning = Meaning::PfcPauseDuration {
                    priority,
                    direction,
                };
                let Some(inc) = netdev_increase(ctx, &n.name, cfg.window, meaning) else {
                    continue;
                };
                if inc.seconds <= 0.0 {
                    continue;
                }
                let paused = inc.amount as f64 / 1e6;
                let ratio = paused / inc.seconds;
                if worst.is_none_or(|w| ratio > w.0) {
                    worst = Some((ratio, priority, direction, paused, inc.seconds));
                }
            }
        }
        let mut storms = Vec::new();
        let mut storm_seconds = 0.0f64;
        for kind in storm_kinds(n) {
            let meaning = Meaning::PauseStormEvents { severity: kind };
            if let Some(inc) = netdev_increase(ctx, &n.name, cfg.window, meaning) {
                storm_seconds = storm_seconds.max(inc.seconds);
                if inc.amount > 0 {
                    storms.push((kind, inc.amount));
                }
            }
        }
        let over = worst.filter(|w| w.0 > cfg.pause_ratio);
        if over.is_none() && storms.is_empty() {
            continue;
        }
        let severity = if storms.iter().any(|(k, _)| *k == "error") {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let storm_text = storms
            .iter()
            .map(|(k, c)| format!("{k} +{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let finding = match over {
            Some((ratio, p, d, _, secs)) => format!(
                "{}: priority {p} was paused {}% of the last {} ({}): a PFC storm",
                subject.describe(),
                fmt_num((ratio * 100.0).round()),
                span(secs),
                direction_words(d)
            ),
            None => format!(
                "{}: the NIC detected pause storms ({storm_text})",
                subject.describe()
            ),
        };
        let mut evidence = Vec::new();
        if let Some((ratio, p, d, paused, secs)) = worst {
            evidence.push(format!(
                "{} priority {p} paused {}s of {} ({}%)",
                d.as_str(),
                fmt_num((paused * 1000.0).round() / 1000.0),
                span(secs),
                fmt_num((ratio * 100.0).round())
            ));
        }
        if !storms.is_empty() {
            evidence.push(format!(
                "pause storm events {storm_text} over {}",
                span(storm_seconds)
            ));
        }
        let name = &n.name;
        out.push(Finding {
            rule: RuleId::PfcStorm,
            severity,
            finding,
            evidence: format!(
                "{}; expected <= {}% paused (rules.pfc_storm.pause_ratio) and no storm events",
                evidence.join("; "),
                fmt_num(cfg.pause_ratio * 100.0)
            ),
            fix: format!(
                "Find the source of the pauses: rx pauses come from the switch (a congested egress downstream: incast, a slow receiver, a storm spreading from another port); \
                 tx pauses mean this host cannot drain its receive buffers (check out_of_buffer, PCIe and memory load). \
                 Make sure ECN is on for the RoCE priority so senders slow down before PFC pauses, and keep the NIC's storm prevention on (ethtool --get-tunable {name} pfc-prevention-tout)"
            ),
            verify: format!("ethtool -S {name} | grep -iE 'pause|storm'  # twice, a few seconds apart: the durations must stop growing"),
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

fn discards_growing(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.discards_growing;
    let mut out = Vec::new();
    for (n, subject) in all_netdevs(s) {
        let mut grew = Vec::new();
        let mut total = 0u64;
        let mut seconds = 0.0f64;
        for reason in discard_reasons(n) {
            let Some(inc) = ctx
                .history
                .netdev(&n.name)
                .increase(Value::Discards(reason), cfg.window)
            else {
                continue;
            };
            seconds = seconds.max(inc.seconds);
            if inc.amount > 0 {
                total = total.saturating_add(inc.amount);
                grew.push(format!("{reason} +{}", inc.amount));
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
            rule: RuleId::DiscardsGrowing,
            severity: Severity::Warning,
            finding: format!(
                "{}: the NIC discards packets at {}/s ({})",
                subject.describe(),
                fmt_num(rate),
                grew.iter().map(|g| g.split(' ').next().unwrap_or("")).collect::<Vec<_>>().join(", ")
            ),
            evidence: format!(
                "{} over {} = {}/s; expected <= {}/s (rules.discards_growing.per_second)",
                grew.join(", "),
                span(seconds),
                fmt_num(rate),
                fmt_num(cfg.per_second)
            ),
            fix: format!(
                "rx_port/rx_no_buffer: the NIC's receive buffer overflowed: on the RoCE priority PFC must be on end to end (dcb pfc show dev {name}; mlnx_qos -i {name}); \
                 rx_out_of_buffer/rx_ring: the host does not refill its receive rings fast enough (ethtool -g {name}, CPU and interrupt load); \
                 tx_*: egress drops (link down, congestion)"
            ),
            verify: format!("ethtool -S {name} | grep -iE 'discard|drop|out_of_buffer'  # twice, a few seconds apart"),
            subject,
        });
    }
    out
}
