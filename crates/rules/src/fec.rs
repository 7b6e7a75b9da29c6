//! Rules on forward error correction: the pre-FEC bit error rate and the
//! uncorrectable codewords over a window (counter growth, silent on the
//! first sample), and two verdicts on the counters as read, which count
//! since the link came up (or since the driver started counting) and so
//! need no window: one lane carrying nearly all the corrected bits, and
//! bit errors that got past FEC. These judge a link in one sample, as
//! `check` takes it.
//!
//! Since when the counters run, from the kernel's mlx5 driver and the
//! NVIDIA firmware interface it reads: `en_stats.c` reads the physical
//! layer statistical group of the PPCNT register (`rx_corrected_bits_phy`
//! = `phy_corrected_bits`, `rx_err_lane_N_phy` = `phy_raw_errors_laneN`,
//! `rx_pcs_symbol_err_phy` = `phy_symbol_errors`; ethtool's FEC corrected
//! bits are the same `phy_corrected_bits`) and never sets the register's
//! clear bit; the firmware restarts that group when the link comes up (its
//! `time_since_last_clear` is what `mlxlink` shows as the time since link
//! up, and the PRM singles out `port_up_time` as the one field of the group
//! a new link-up does not clear). ethtool's corrected and uncorrectable
//! blocks come from the physical layer group (`rs_fec_*_blocks`), which a
//! link-up does not clear: they run since the NIC's firmware last cleared
//! them. Other drivers' counters run at least since the driver loaded.

use serde::Serialize;

use roce_netdev::fec::{line_rate, FecCounter};
use roce_netdev::phys::PhysNetdev;
use roce_netdev::{Meaning, Netdev, StatValue};

use super::fabric::{find_netdev, is_mlx5};
use super::history::FollowedCounter;
use super::phys::{netdev_subject, phys_netdevs};
use super::ports::fmt_num;
use super::rates::span;
use super::settings::section;
use super::{Context, Finding, Rule, RuleId, Severity};
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::FecBerHigh,
        checks: "the pre-FEC bit error rate stays below the limit",
        evaluate: fec_ber_high,
    },
    Rule {
        id: RuleId::FecUncorrectable,
        checks: "no uncorrectable FEC codewords within the window",
        evaluate: fec_uncorrectable,
    },
    Rule {
        id: RuleId::FecLaneSkew,
        checks: "FEC corrects bits on every lane of a link alike: no one lane carries nearly all of them since the link came up",
        evaluate: fec_lane_skew,
    },
    Rule {
        id: RuleId::PostFecErrors,
        checks: "no bit errors got past FEC since the link came up (or the counters started)",
        evaluate: post_fec_errors,
    },
];

/// Since when a counter runs: a phrase for the finding and the reason,
/// for the evidence.
#[derive(Clone, Copy)]
struct Since {
    phrase: &'static str,
    why: &'static str,
}

/// mlx5's PPCNT physical layer statistical counters.
const SINCE_LINK_UP_MLX5: Since = Since {
    phrase: "since the link last came up",
    why: "mlx5's firmware clears its physical layer statistical counters at link-up; the driver never clears them",
};
/// mlx5's PPCNT physical layer (block) counters.
const SINCE_FIRMWARE_MLX5: Since = Since {
    phrase: "since the NIC's firmware last cleared its counters",
    why: "mlx5 keeps its FEC block counters across link flaps and driver reloads",
};
/// Another driver's counters.
const SINCE_DRIVER: Since = Since {
    phrase: "since the driver started counting",
    why: "the driver's counters run since its load or the NIC's reset",
};

/// The link speed of a netdev in Mb/s, from the netdev part.
fn speed_mbps(s: &Snapshot, netdev: &str) -> Option<u64> {
    find_netdev(s, netdev).and_then(|n| n.speed_mbps)
}

/// The first ethtool statistic with this meaning, as a count.
fn stat(n: &Netdev, meaning: Meaning) -> Option<u64> {
    n.stats
        .iter()
        .find(|s| s.meaning == meaning)
        .and_then(|s| match s.value {
            StatValue::Count(c) => Some(c),
            StatValue::Seconds(_) => None,
        })
}

fn verify_fec(netdev: &str) -> String {
    format!("ethtool -I --show-fec {netdev}  # corrected bits and uncorrectable blocks must stop growing")
}

fn fec_ber_high(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.fec_ber;
    let mut out = Vec::new();
    for n in phys_netdevs(s) {
        let Some(speed) = speed_mbps(s, &n.name) else {
            continue;
        };
        let Some(inc) = ctx
            .history
            .netdev(&n.name)
            .increase(FollowedCounter::FecCorrectedBits, cfg.window)
        else {
            continue;
        };
        // Corrected bits are counted on the wire, at the FEC mode's line
        // rate (425 Gb/s for 400G RS(544,514)), not at the MAC speed.
        let fec = n.fec.as_ref();
        let lanes = fec
            .and_then(|f| f.corrected_bits.as_ref())
            .map_or(0, |c| c.lanes.len());
        let (rate, code) = line_rate(fec.and_then(|f| f.active), speed, lanes);
        let Some(ber) = roce_netdev::fec::ber(inc.amount, inc.seconds, rate) else {
            continue;
        };
        let max_ber = cfg.max_ber_for(code);
        if ber <= max_ber {
            continue;
        }
        let subject = netdev_subject(n);
        out.push(Finding {
            rule: RuleId::FecBerHigh,
            severity: Severity::Warning,
            finding: format!(
                "{}: pre-FEC bit error rate {ber:.1e}, above {max_ber:.0e} for {code}: FEC still hides it, but the margin before frames are lost is shrinking",
                subject.describe(),
            ),
            evidence: format!(
                "FEC corrected bits +{} over {} at {} Gb/s ({code} line rate of a {} Gb/s link) = pre-FEC BER {ber:.2e}; expected <= {max_ber:.0e} for {code}",
                inc.amount,
                span(inc.seconds),
                fmt_num(rate / 1e9),
                fmt_num(speed as f64 / 1e3),
            ),
            fix: "Check the module's Rx power per lane and clean or replace the cable/module; compare with the \
                  switch port's FEC counters to tell which direction degrades"
                .into(),
            verify: verify_fec(&n.name),
            subject,
        });
    }
    out
}

fn fec_uncorrectable(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let window = ctx.rules.fec_uncorrectable.window;
    let mut out = Vec::new();
    for n in phys_netdevs(s) {
        let Some(inc) = ctx
            .history
            .netdev(&n.name)
            .increase(FollowedCounter::FecUncorrectable, window)
        else {
            continue;
        };
        if inc.amount == 0 {
            continue;
        }
        let subject = netdev_subject(n);
        out.push(Finding {
            rule: RuleId::FecUncorrectable,
            severity: Severity::Warning,
            finding: format!(
                "{}: {} FEC codeword(s) could not be corrected in the last {}: frames were lost on the link (RoCE retransmits them)",
                subject.describe(),
                inc.amount,
                span(inc.seconds)
            ),
            evidence: format!(
                "FEC uncorrectable blocks +{} over {}; expected 0",
                inc.amount,
                span(inc.seconds)
            ),
            fix: "The link is beyond what FEC repairs: clean or replace the cable/module now, and check the \
                  pre-FEC BER and Rx power per lane"
                .into(),
            verify: verify_fec(&n.name),
            subject,
        });
    }
    out
}

/// Corrected bits per lane of one link, and where they were read.
struct LaneBits {
    /// One count per lane in use, lane 0 first.
    lanes: Vec<u64>,
    /// The counter the lanes come from, for the evidence.
    counter: &'static str,
    since: Since,
}

/// The fastest lanes links run on (100G PAM4): a link of `speed_mbps` has
/// at least this many.
fn min_lanes(speed_mbps: Option<u64>) -> usize {
    speed_mbps.map_or(1, |s| s.div_ceil(100_000).max(1) as usize)
}

/// The per-lane corrected bits of a link: ethtool's FEC statistics where
/// the driver counts lanes (it reports the lanes in use), else the
/// driver's per-lane counters (mlx5 `rx_err_lane_N_phy`, always four).
/// Driver counters are listed for every lane the NIC has, used or not, so
/// the lanes in use are those up to the last that counted anything, and at
/// least as many as the link speed needs: a single-lane link is never
/// judged against lanes it does not use.
fn lane_bits(p: &PhysNetdev, n: Option<&Netdev>) -> Option<LaneBits> {
    let mlx5 = n.is_some_and(is_mlx5);
    if let Some(c) = p.fec.as_ref().and_then(|f| f.corrected_bits.as_ref()) {
        if c.lanes.len() >= 2 {
            return Some(LaneBits {
                lanes: c.lanes.clone(),
                counter: "ethtool FEC corrected bits per lane",
                since: if mlx5 {
                    SINCE_LINK_UP_MLX5
                } else {
                    SINCE_DRIVER
                },
            });
        }
    }
    let n = n?;
    let mut lanes: Vec<u64> = Vec::new();
    for st in &n.stats {
        if let Meaning::PhyErrors {
            kind: "fec_corrected_bits",
            lane: Some(l),
        } = st.meaning
        {
            let StatValue::Count(v) = st.value else {
                continue;
            };
            let l = usize::from(l);
            if lanes.len() <= l {
                lanes.resize(l + 1, 0);
            }
            lanes[l] = v;
        }
    }
    let last_counting = lanes.iter().rposition(|&v| v > 0).map_or(0, |i| i + 1);
    let in_use = last_counting.max(min_lanes(n.speed_mbps)).min(lanes.len());
    lanes.truncate(in_use);
    (lanes.len() >= 2).then_some(LaneBits {
        lanes,
        counter: if mlx5 {
            "rx_err_lane_N_phy (corrected bits per lane)"
        } else {
            "the driver's corrected bits per lane"
        },
        since: if mlx5 {
            SINCE_LINK_UP_MLX5
        } else {
            SINCE_DRIVER
        },
    })
}

fn percent(part: u64, whole: u64) -> String {
    format!("{:.1} %", 100.0 * part as f64 / whole.max(1) as f64)
}

fn fec_lane_skew(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.fec_lane_skew;
    let mut out = Vec::new();
    for p in phys_netdevs(s) {
        let Some(bits) = lane_bits(p, find_netdev(s, &p.name)) else {
            continue;
        };
        let total = bits.lanes.iter().fold(0u64, |a, &v| a.saturating_add(v));
        let Some((worst, &most)) = bits.lanes.iter().enumerate().max_by_key(|&(_, v)| *v) else {
            continue;
        };
        if total < cfg.min_bits || (most as f64) < cfg.share * total as f64 {
            continue;
        }
        let others: Vec<String> = bits
            .lanes
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != worst)
            .map(|(i, v)| format!("lane {i} {v}"))
            .collect();
        let subject = netdev_subject(p);
        out.push(Finding {
            rule: RuleId::FecLaneSkew,
            severity: Severity::Warning,
            finding: format!(
                "{}: lane {worst} carries {} of the {total} bits FEC corrected {}: that lane's fiber, connector, module channel or SerDes is far worse than its siblings",
                subject.describe(),
                percent(most, total),
                bits.since.phrase,
            ),
            evidence: format!(
                "{}: lane {worst} {most}, {} ({}); limit: one lane >= {} of at least {} corrected bits",
                bits.counter,
                others.join(", "),
                bits.since.why,
                percent((cfg.share * 1000.0).round() as u64, 1000),
                cfg.min_bits,
            ),
            fix: format!(
                "Check the module's Rx power on lane {worst} (ethtool -m {}), clean and inspect that lane's fiber or \
                 reseat the cable; swap the module or cable to see whether the lane's errors follow it; the switch \
                 port's per-lane counters tell the direction",
                p.name
            ),
            verify: format!(
                "ethtool -S {}  | grep -E 'rx_corrected_bits_phy|rx_err_lane'  # after the fix and a link flap the lanes count alike",
                p.name
            ),
            subject,
        });
    }
    out
}

/// Bit errors that got past FEC, as counted: PCS symbol errors (mlx5
/// `rx_pcs_symbol_err_phy`: error bits FEC did not correct) where the
/// driver has them, else ethtool's uncorrectable FEC codewords.
fn post_fec(p: &PhysNetdev, n: Option<&Netdev>) -> Option<(u64, &'static str, Since)> {
    let mlx5 = n.is_some_and(is_mlx5);
    let symbol = n.and_then(|n| {
        stat(
            n,
            Meaning::PhyErrors {
                kind: "pcs_symbol_errors",
                lane: None,
            },
        )
    });
    if let Some(v) = symbol {
        let name = if mlx5 {
            "rx_pcs_symbol_err_phy (error bits FEC did not correct)"
        } else {
            "PCS symbol errors after FEC"
        };
        let since = if mlx5 {
            SINCE_LINK_UP_MLX5
        } else {
            SINCE_DRIVER
        };
        return Some((v, name, since));
    }
    let c: &FecCounter = p.fec.as_ref()?.uncorrectable_blocks.as_ref()?;
    let since = if mlx5 {
        SINCE_FIRMWARE_MLX5
    } else {
        SINCE_DRIVER
    };
    Some((c.total, "FEC uncorrectable blocks", since))
}

fn post_fec_errors(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let min = ctx.rules.post_fec_errors.min_errors;
    let mut out = Vec::new();
    for p in phys_netdevs(s) {
        let n = find_netdev(s, &p.name);
        let Some((count, what, since)) = post_fec(p, n) else {
            continue;
        };
        if count < min.max(1) {
            continue;
        }
        let corrected = p
            .fec
            .as_ref()
            .and_then(|f| f.corrected_bits.as_ref())
            .map(|c| format!("; FEC corrected {} bits", c.total))
            .unwrap_or_default();
        let subject = netdev_subject(p);
        out.push(Finding {
            rule: RuleId::PostFecErrors,
            severity: Severity::Warning,
            finding: format!(
                "{}: {count} error(s) got past FEC {}: frames were lost on the link (RoCE retransmits them)",
                subject.describe(),
                since.phrase,
            ),
            evidence: format!(
                "{what} {count}{corrected} ({}); expected fewer than {min}",
                since.why
            ),
            fix: "The link has lost frames beyond what FEC repairs: check the module's Rx power per lane and the \
                  per-lane corrected bits, clean or replace the cable/module; if the count keeps growing \
                  (fec_uncorrectable) replace it now"
                .into(),
            verify: format!(
                "ethtool -S {} | grep -E 'pcs_symbol_err|corrected_bits'; ethtool -I --show-fec {}  # no longer growing",
                p.name, p.name
            ),
            subject,
        });
    }
    out
}

/// `fec_lane_skew`'s section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaneSkewRule {
    /// Share of the link's corrected bits one lane holds at the most.
    pub share: f64,
    /// Corrected bits, over every lane, below which a link is not judged
    /// (a young link, or one that corrected a burst at bring-up).
    pub min_bits: u64,
}

section!(LaneSkewRule {
    share: f64 = "crate::values::opt_share",
    min_bits: u64 = "crate::values::opt_count",
});

/// `post_fec_errors`'s section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostFecRule {
    /// Post-FEC errors since the counters started at which the rule fires.
    pub min_errors: u64,
}

section!(PostFecRule {
    min_errors: u64 = "crate::values::opt_count",
});
