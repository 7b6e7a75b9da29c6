//! Rules on counter growth over a window: link flaps, symbol errors above a
//! bit error rate, retransmissions, sequence errors, receive-buffer drops,
//! congestion notification and ECN spikes. All use reset-aware increases
//! ([`super::window`]) and stay silent on the first sample.

use super::history::Value;
use super::ports::{fmt_num, ports, subject};
use super::{Context, Finding, Rule, RuleId, Severity};
use crate::config::RateRule;
use crate::meaning::HwMeaning;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::LinkFlap,
        checks: "no carrier_down_count (else link_downed) increments within the window",
        evaluate: link_flap,
    },
    Rule {
        id: RuleId::SymbolErrors,
        checks: "symbol errors stay below the bit error rate limit",
        evaluate: symbol_errors,
    },
    Rule {
        id: RuleId::Retransmissions,
        checks: "transport retransmissions and ACK timeouts stay below the limit",
        evaluate: retransmissions,
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
        id: RuleId::CnpSpike,
        checks: "congestion notification packets stay below the limit",
        evaluate: cnp_spike,
    },
    Rule {
        id: RuleId::EcnSpike,
        checks: "ECN-marked RoCE packets stay below the limit",
        evaluate: ecn_spike,
    },
];

fn link_flap(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let window = ctx.rules.link_flap.window;
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        // The netdev's carrier_down_count first: a 32-bit kernel count on
        // every Ethernet driver, where the PMA link_downed is 8 bits wide
        // (IBTA PortCounters LinkDownedCounter) and stops at 255.
        let carrier = p.netdev.as_deref().and_then(|n| {
            ctx.history
                .netdev(n)
                .increase(Value::CarrierDown, window)
                .map(|inc| {
                    (
                        inc,
                        "carrier_down_count",
                        format!("cat /sys/class/net/{n}/carrier_down_count"),
                    )
                })
        });
        let Some((inc, counter, verify)) = carrier.or_else(|| {
            ctx.history
                .port(&d.name, p.number)
                .increase(Value::LinkDowned, window)
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
        }) else {
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
        let Some(inc) = ctx
            .history
            .port(&d.name, p.number)
            .increase(Value::SymbolErrors, cfg.window)
        else {
            continue;
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
                "symbol_error +{} over {} at {} Gb/s = BER {ber:.2e}; expected <= {:.0e}",
                inc.amount,
                span(inc.seconds),
                fmt_num(rate as f64 * 8.0 / 1e9),
                cfg.max_ber
            ),
            fix: "Clean or replace the cable/transceiver (check optics power with mlxlink or ethtool -m); errors \
                  this high cause retransmissions and link flaps"
                .into(),
            verify: format!("cat /sys/class/infiniband/{}/ports/{}/counters/symbol_error  # must stop increasing", d.name, p.number),
            subject,
        });
    }
    out
}

/// A rate rule over the sum of hardware counters with the given meanings.
struct HwRate {
    rule: RuleId,
    /// Summed per sample before the increase is taken.
    values: &'static [Value],
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
            values: &[Value::Hw(HwMeaning::Retransmissions), Value::Hw(HwMeaning::LocalAckTimeout)],
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
            values: &[Value::Hw(HwMeaning::OutOfSequence), Value::Hw(HwMeaning::PacketSeqErr), Value::Hw(HwMeaning::ImpliedNakSeqErr)],
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
            values: &[Value::Hw(HwMeaning::OutOfBuffer)],
            what: "receive drops for lack of posted buffers",
            fix: "The receiving application does not post receive WQEs fast enough, or the NIC's receive buffer is \
                  exhausted: check the application's receive queue depth and the host's CPU/PCIe load",
        },
    )
}

fn cnp_spike(ctx: &Context) -> Vec<Finding> {
    hw_rate(
        ctx,
        &ctx.rules.cnp_spike,
        &HwRate {
            rule: RuleId::CnpSpike,
            values: &[Value::Hw(HwMeaning::CnpSent), Value::Hw(HwMeaning::CnpHandled)],
            what: "congestion notification packets",
            fix: "The fabric is congested on this port's path: look for incast (many senders to one receiver), \
                  oversubscribed uplinks or a slow receiver; check the switch ECN thresholds",
        },
    )
}

fn ecn_spike(ctx: &Context) -> Vec<Finding> {
    hw_rate(
        ctx,
        &ctx.rules.ecn_spike,
        &HwRate {
            rule: RuleId::EcnSpike,
            values: &[Value::Hw(HwMeaning::EcnMarked)],
            what: "ECN-marked RoCE packets",
            fix: "Switches mark this traffic as congested: look for incast or oversubscribed links on the path, \
                  and check that DCQCN reacts (rp_cnp_handled grows on the senders)",
        },
    )
}

/// "1m30s"-style span of a window.
pub fn span(seconds: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(seconds.round() as u64)).to_string()
}
