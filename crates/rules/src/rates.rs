//! Rules on counter growth over a window: link flaps, symbol errors above a
//! bit error rate, retransmissions, ACK timeouts, sequence errors,
//! receive-buffer drops, and DCQCN judged per role against the traffic
//! (the notification point's ECN marks per packet received, the reaction
//! point's CNPs per packet sent) and for misconfiguration (marks without
//! CNPs, CNPs ignored); plus PMA error counters stuck at their maximum. All
//! use reset-aware increases ([`super::window`]) and stay silent on the
//! first sample.

use std::time::Duration;

use serde::Serialize;

use roce_netdev::Meaning;
use roce_rdma::{Device, LinkLayer, Port};

use super::history::FollowedCounter;
use super::ports::{fmt_num, ports, subject};
use super::settings::section;
use super::window::Increase;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::meaning::{HwMeaning, Provider, HW_MAPPINGS};

mod dcqcn;
use dcqcn::{cnp_ignored, cnp_not_sent, receiver_congested, sender_throttled};

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::LinkFlap,
        checks: "no link-down events within the window (the 64-bit ethtool counter where the driver has one, else carrier_down_count, else link_downed)",
        evaluate: link_flap,
    },
    Rule {
        id: RuleId::SymbolErrors,
        checks: "symbol errors stay below the bit error rate limit (the 64-bit ethtool counter where the driver has one, else symbol_error)",
        evaluate: symbol_errors,
    },
    Rule {
        id: RuleId::CounterSaturated,
        checks: "no InfiniBand PMA error counter is stuck at its maximum (16-, 8- or 4-bit)",
        evaluate: counter_saturated,
    },
    Rule {
        id: RuleId::Retransmissions,
        checks: "transport retransmissions stay below the limit",
        evaluate: retransmissions,
    },
    Rule {
        id: RuleId::AckTimeouts,
        checks: "no ACK timeout within the window (warning), none at a sustained rate (critical)",
        evaluate: ack_timeouts,
    },
    Rule {
        id: RuleId::SequenceErrors,
        checks: "out-of-sequence packets and sequence-error NAKs stay below the limit",
        evaluate: sequence_errors,
    },
    Rule {
        id: RuleId::OutOfBuffer,
        checks: "no receive drops for lack of buffers above the limit",
        evaluate: out_of_buffer,
    },
    Rule {
        id: RuleId::ReceiverCongested,
        checks: "ECN-marked RoCE packets stay below rules.receiver_congested.max_ratio of the RoCE packets received",
        evaluate: receiver_congested,
    },
    Rule {
        id: RuleId::SenderThrottled,
        checks: "CNPs handled stay below rules.sender_throttled.max_ratio of the RoCE packets sent",
        evaluate: sender_throttled,
    },
    Rule {
        id: RuleId::CnpNotSent,
        checks: "ECN-marked RoCE packets arriving are answered with CNPs (the notification point is on)",
        evaluate: cnp_not_sent,
    },
    Rule {
        id: RuleId::CnpIgnored,
        checks: "CNPs arriving are handled, not ignored (the reaction point is on)",
        evaluate: cnp_ignored,
    },
];

/// The increase of a 64-bit netdev counter of the port's netdev, where the
/// driver has one: preferred over the narrow PMA counters, which stick at
/// their maximum. mlx5 is the driver the netdev table maps them for, so
/// the evidence names its counters.
fn netdev_wide(
    ctx: &Context,
    p: &Port,
    meaning: Meaning,
    window: std::time::Duration,
) -> Option<Increase> {
    let netdev = p.netdev.as_deref()?;
    ctx.history
        .netdev(netdev)
        .increase(FollowedCounter::Stat(meaning), window)
}

fn link_flap(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let window = ctx.rules.link_flap.window;
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        // The widest counter the host has: the driver's 64-bit physical
        // link-down events, else the netdev's carrier_down_count (a 32-bit
        // kernel count on every Ethernet driver, Linux 4.16+), else the PMA
        // link_downed, 8 bits wide (IBTA LinkDownedCounter), stuck at 255.
        let netdev = p.netdev.as_deref();
        let wide = netdev_wide(ctx, p, Meaning::LinkDownEvents, window).map(|inc| {
            let n = netdev.unwrap_or_default();
            (
                inc,
                "link_down_events_phy (ethtool)",
                format!("ethtool -S {n} | grep link_down_events_phy"),
            )
        });
        let carrier = || {
            let n = netdev?;
            ctx.history
                .netdev(n)
                .increase(FollowedCounter::CarrierDown, window)
                .map(|inc| {
                    (
                        inc,
                        "carrier_down_count",
                        format!("cat /sys/class/net/{n}/carrier_down_count"),
                    )
                })
        };
        let pma = || {
            ctx.history
                .port(&d.name, p.number)
                .increase(FollowedCounter::LinkDowned, window)
                .map(|inc| {
                    (
                        inc,
                        "link_downed",
                        format!(
                            "cat /sys/class/infiniband/{}/ports/{}/counters/link_downed",
                            d.name, p.number
                        ),
                    )
                })
        };
        let Some((inc, counter, verify)) = wide.or_else(carrier).or_else(pma) else {
            continue;
        };
        if inc.amount == 0 {
            continue;
        }
        let subject = subject(d, p);
        out.push(Finding {
            rule: RuleId::LinkFlap,
            severity: Severity::Warning,
            finding: format!("{} went down {} time(s) in the last {}", subject.describe(), inc.amount, span(inc.seconds)),
            evidence: format!("{counter} +{} over {}; expected 0", inc.amount, span(inc.seconds)),
            fix: "Reseat or replace the cable/transceiver and check the switch port's error log; repeated flaps \
                  with symbol errors point at the physical link"
                .into(),
            verify: format!("{verify}  # must stop increasing"),
            subject,
        });
    }
    out
}

fn symbol_errors(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.symbol_errors;
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        let Some(rate) = p.rate_bytes_per_second else {
            continue;
        };
        let wide = netdev_wide(ctx, p, Meaning::PhySymbolErrors, cfg.window);
        let (inc, counter) = match wide {
            Some(inc) => (inc, "rx_symbol_err_phy (ethtool)"),
            None => {
                let Some(inc) = ctx
                    .history
                    .port(&d.name, p.number)
                    .increase(FollowedCounter::SymbolErrors, cfg.window)
                else {
                    continue;
                };
                (inc, "symbol_error")
            }
        };
        let bits = rate as f64 * 8.0 * inc.seconds;
        if inc.amount == 0 || bits <= 0.0 {
            continue;
        }
        let ber = inc.amount as f64 / bits;
        if ber <= cfg.max_ber {
            continue;
        }
        let subject = subject(d, p);
        out.push(Finding {
            rule: RuleId::SymbolErrors,
            severity: Severity::Warning,
            finding: format!("{} has a bit error rate of {ber:.1e}, above {:.0e}", subject.describe(), cfg.max_ber),
            evidence: format!(
                "{counter} +{} over {} at {} Gb/s = BER {ber:.2e}; expected <= {:.0e}",
                inc.amount,
                span(inc.seconds),
                fmt_num(rate as f64 * 8.0 / 1e9),
                cfg.max_ber
            ),
            fix: "Clean or replace the cable/transceiver (check optics power with mlxlink or ethtool -m); errors \
                  this high cause retransmissions and link flaps"
                .into(),
            verify: match (wide, p.netdev.as_deref()) {
                (Some(_), Some(n)) => format!("ethtool -S {n} | grep rx_symbol_err_phy  # must stop increasing"),
                _ => format!("cat /sys/class/infiniband/{}/ports/{}/counters/symbol_error  # must stop increasing", d.name, p.number),
            },
            subject,
        });
    }
    out
}

/// Widths of the InfiniBand PortCounters error counters under
/// `ports/<port>/counters/` (`PORT_PMA_ATTR(name, counter, width, offset)`
/// in drivers/infiniband/core/sysfs.c). IBTA PortCounters do not wrap: a
/// counter at its maximum stays there until reset. The data and packet
/// counters are left out: sysfs shows their 64-bit extended form where
/// the HCA has one, so their width is not known from the name.
pub const PMA_WIDTHS: &[(&str, u32)] = &[
    ("symbol_error", 16),
    ("link_error_recovery", 8),
    ("link_downed", 8),
    ("port_rcv_errors", 16),
    ("port_rcv_remote_physical_errors", 16),
    ("port_rcv_switch_relay_errors", 16),
    ("port_xmit_discards", 16),
    ("port_xmit_constraint_errors", 8),
    ("port_rcv_constraint_errors", 8),
    ("local_link_integrity_errors", 4),
    ("excessive_buffer_overrun_errors", 4),
    ("VL15_dropped", 16),
];

/// The 64-bit netdev counter a rate rule reads instead of a PMA counter.
fn wide_replacement(name: &str) -> Option<(Meaning, &'static str)> {
    match name {
        "symbol_error" => Some((Meaning::PhySymbolErrors, "rx_symbol_err_phy")),
        "link_downed" => Some((Meaning::LinkDownEvents, "link_down_events_phy")),
        _ => None,
    }
}

fn counter_saturated(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let netdev_has = |p: &Port, m: Meaning| {
        let Some(name) = p.netdev.as_deref() else {
            return false;
        };
        s.netdev
            .iter()
            .flat_map(|nd| nd.netdevs.iter())
            .any(|n| n.name == name && n.stats.iter().any(|st| st.meaning == m))
    };
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        let mut stuck = Vec::new();
        let mut replaced = Vec::new();
        let mut blind = false;
        for &(name, bits) in PMA_WIDTHS {
            let max = (1u64 << bits) - 1;
            if p.counter(name) != Some(max) {
                continue;
            }
            stuck.push(format!("{name} = {max} ({bits}-bit)"));
            match wide_replacement(name) {
                Some((m, wide)) if netdev_has(p, m) => replaced.push(format!("{name} -> {wide}")),
                _ => blind = true,
            }
        }
        if stuck.is_empty() {
            continue;
        }
        let subject = subject(d, p);
        let names: Vec<&str> = stuck.iter().filter_map(|s| s.split(' ').next()).collect();
        let ib = matches!(p.link_layer, Some(LinkLayer::InfiniBand));
        let at = format!("-C {} -P {}", d.name, p.number);
        let reset = if ib {
            format!("reset them with a PortCounters Set through the PMA: perfquery -R {at}")
        } else {
            format!(
                "reset them with perfquery -R {at} where the PMA answers on this RoCE port; otherwise they stay until the NIC's \
                 counters are reset (firmware reset or power cycle), and only the driver's 64-bit ethtool counters keep counting"
            )
        };
        let files = match names.as_slice() {
            [one] => (*one).to_string(),
            many => format!("{{{}}}", many.join(",")),
        };
        out.push(Finding {
            rule: RuleId::CounterSaturated,
            severity: if blind { Severity::Warning } else { Severity::Info },
            finding: format!(
                "{}: {} stuck at the maximum: the counter no longer counts, and rules on it see no growth",
                subject.describe(),
                names.join(", ")
            ),
            evidence: format!(
                "{}; IB PortCounters stop at their maximum until reset{}",
                stuck.join(", "),
                if replaced.is_empty() {
                    String::new()
                } else {
                    format!("; rate rules read the driver's 64-bit counter instead: {}", replaced.join(", "))
                }
            ),
            fix: format!(
                "Errors this many mean the link has a history of trouble: check the cable/transceiver (mlxlink or ethtool -m) and \
                 the switch port. Then {reset}, so that new errors are counted again"
            ),
            verify: format!(
                "grep -H . /sys/class/infiniband/{}/ports/{}/counters/{files}  # below the maximum after the reset",
                d.name, p.number
            ),
            subject,
        });
    }
    out
}

/// A rate rule over the sum of hardware counters with the given meanings.
struct HwRate {
    rule: RuleId,
    /// Summed per sample before the increase is taken.
    values: &'static [FollowedCounter],
    what: &'static str,
    fix: &'static str,
}

fn hw_rate(ctx: &Context, cfg: &RateRule, spec: &HwRate) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        let Some(inc) = ctx
            .history
            .port(&d.name, p.number)
            .increase_of_sum(spec.values, cfg.window)
        else {
            continue;
        };
        let rate = inc.per_second();
        if inc.amount == 0 || rate <= cfg.per_second {
            continue;
        }
        let subject = subject(d, p);
        out.push(Finding {
            rule: spec.rule,
            severity: Severity::Warning,
            finding: format!(
                "{}: {} at {}/s, above {}/s",
                subject.describe(),
                spec.what,
                fmt_num(rate),
                fmt_num(cfg.per_second)
            ),
            evidence: format!(
                "+{} over {} = {}/s; expected <= {}/s (rules.{}.per_second)",
                inc.amount,
                span(inc.seconds),
                fmt_num(rate),
                fmt_num(cfg.per_second),
                spec.rule
            ),
            fix: spec.fix.into(),
            verify: format!(
                "rdma statistic show link {}/{}  # twice, a few seconds apart",
                d.name, p.number
            ),
            subject,
        });
    }
    out
}

fn retransmissions(ctx: &Context) -> Vec<Finding> {
    hw_rate(
        ctx,
        &ctx.rules.retransmissions,
        &HwRate {
            rule: RuleId::Retransmissions,
            values: &[FollowedCounter::Hw(HwMeaning::Retransmissions)],
            what: "transport retransmissions",
            fix: "Find where packets are lost: check PFC/ECN on the RoCE priority end to end, the switch's drop \
                  counters and the link error counters; loss on RoCE costs whole go-back-N windows",
        },
    )
}

fn sequence_errors(ctx: &Context) -> Vec<Finding> {
    hw_rate(
        ctx,
        &ctx.rules.sequence_errors,
        &HwRate {
            rule: RuleId::SequenceErrors,
            values: &[FollowedCounter::Hw(HwMeaning::OutOfSequence), FollowedCounter::Hw(HwMeaning::PacketSeqErr), FollowedCounter::Hw(HwMeaning::ImpliedNakSeqErr)],
            what: "packet sequence errors",
            fix: "Packets are lost or reordered on the path: make the RoCE priority lossless (PFC) or congestion \
                  controlled (ECN/DCQCN) on every hop, and check for drops on the switches",
        },
    )
}

fn out_of_buffer(ctx: &Context) -> Vec<Finding> {
    hw_rate(
        ctx,
        &ctx.rules.out_of_buffer,
        &HwRate {
            rule: RuleId::OutOfBuffer,
            values: &[FollowedCounter::Hw(HwMeaning::OutOfBuffer)],
            what: "receive drops for lack of posted buffers",
            fix: "The receiving application does not post receive WQEs fast enough, or the NIC's receive buffer is \
                  exhausted: check the application's receive queue depth and the host's CPU/PCIe load",
        },
    )
}

/// The provider's counter names for `meaning`, for evidence texts
/// (`np_cnp_sent`, `rp_cnp_handled + ...`); a plain description when the
/// table has none.
pub(crate) fn names(d: &Device, meaning: HwMeaning, plain: &'static str) -> String {
    let provider = Provider::of(d);
    let names: Vec<&str> = HW_MAPPINGS
        .iter()
        .filter(|m| Some(m.provider) == provider && m.meaning == meaning)
        .map(|m| m.name)
        .collect();
    if names.is_empty() {
        plain.to_string()
    } else {
        names.join(" + ")
    }
}

/// Seconds of transport timeout at NCCL's default NCCL_IB_TIMEOUT=20: the
/// IB local ACK timeout is 4.096 µs × 2^timeout.
const NCCL_DEFAULT_ACK_TIMEOUT_SECONDS: f64 = 4.096e-6 * (1u64 << 20) as f64;

fn ack_timeouts(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.ack_timeouts;
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        let series = ctx.history.port(&d.name, p.number);
        let value = FollowedCounter::Hw(HwMeaning::LocalAckTimeout);
        let Some(inc) = series.increase(value, cfg.window) else {
            continue;
        };
        if inc.amount == 0 {
            continue;
        }
        let rate = inc.per_second();
        // Sustained: above the rate, and in both halves of the window, so
        // that one burst (a link flap timing out many QPs at once) or the
        // first minutes after start stay a warning.
        let newer = series
            .increase(value, cfg.window / 2)
            .map_or(0, |i| i.amount);
        let older = inc.amount.saturating_sub(newer);
        let sustained = rate > cfg.per_second && newer > 0 && older > 0;
        let subject = subject(d, p);
        let stall = fmt_num((NCCL_DEFAULT_ACK_TIMEOUT_SECONDS * 10.0).round() / 10.0);
        out.push(Finding {
            rule: RuleId::AckTimeouts,
            severity: if sustained { Severity::Critical } else { Severity::Warning },
            finding: if sustained {
                format!(
                    "{}: ACK timeouts at {}/s, above {}/s: QPs keep stalling for the whole transport timeout (about {stall} s each at NCCL_IB_TIMEOUT=20)",
                    subject.describe(),
                    fmt_num(rate),
                    fmt_num(cfg.per_second)
                )
            } else {
                format!(
                    "{}: {} ACK timeout(s) in the last {}: each stalled a QP for the whole transport timeout (about {stall} s at NCCL_IB_TIMEOUT=20)",
                    subject.describe(),
                    inc.amount,
                    span(inc.seconds)
                )
            },
            evidence: format!(
                "{} +{} over {} = {}/s (+{older} in the older half of the window, +{newer} in the newer); expected 0 (any is a warning), \
                 critical above {}/s in both halves (rules.ack_timeouts.per_second)",
                names(d, HwMeaning::LocalAckTimeout, "ACK timeouts"),
                inc.amount,
                span(inc.seconds),
                fmt_num(rate),
                fmt_num(cfg.per_second)
            ),
            fix: "A request or its ACK was lost and the requester waited out the whole timeout (4.096 µs × 2^NCCL_IB_TIMEOUT) \
                  before retransmitting. Find the loss: discards on the lossless priority, symbol errors, PFC off on some hop \
                  of the RoCE priority, a peer that stopped responding. Lowering NCCL_IB_TIMEOUT shortens the stall but hides the loss"
                .into(),
            verify: format!(
                "rdma statistic show link {}/{}  # twice, a few seconds apart: local_ack_timeout_err must stay the same",
                d.name, p.number
            ),
            subject,
        });
    }
    out
}

/// "1m30s"-style span of a window.
pub fn span(seconds: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(seconds.round() as u64)).to_string()
}

/// A rule on events per second over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateRule {
    pub window: Duration,
    /// Events per second above which the rule fires.
    pub per_second: f64,
}

section!(RateRule {
    window: Duration = "crate::values::opt_duration",
    per_second: f64 = "crate::values::opt_per_second",
});

/// A rule on events per packet over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrafficRatioRule {
    pub window: Duration,
    /// Events per packet (0..1) above which the rule fires.
    pub max_ratio: f64,
    /// Below this many packets per second (the denominator) the ratio says
    /// nothing and the rule stays silent: an idle port.
    pub min_packets_per_second: f64,
}

section!(TrafficRatioRule {
    window: Duration = "crate::values::opt_duration",
    max_ratio: f64 = "crate::values::opt_share",
    min_packets_per_second: f64 = "crate::values::opt_per_second",
});
