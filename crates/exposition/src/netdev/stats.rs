//! The netdev's ethtool statistics mapped to their families (pauses,
//! discards, NIC ECN marks, physical errors, PCIe trouble), the raw
//! counters the config names, and the link facts (MTU, speed, driver,
//! operational state). Per-priority counters of idle priorities are left
//! out here, and the set of priorities in use handed to [`super::qos`].

use roce_host::Priorities;
use roce_netdev::{DcbOutcome, Meaning, Netdev, StatValue};

use super::super::groups::{Group, Groups};
use super::super::labels::NetdevLabels;
use super::super::{push_into, FamilySamples, Value};
use super::*;

/// Adds the netdev's statistics and link facts; returns the priorities
/// whose per-priority series are exported (`None`: every priority).
/// `fec_bits_read`: FEC_GET reported the netdev's corrected bits
/// (roce_fec_corrected_bits_total), so the driver's own total of them is
/// left out without the `lanes` group.
pub(super) fn collect(
    netdev: &Netdev,
    base: NetdevLabels<'_>,
    fec_bits_read: bool,
    groups: &Groups,
    out: &mut [FamilySamples],
) -> Option<Priorities> {
    // Standard pause statistics win over the driver's own link pause
    // counters: they are the same frames, and one series must not double.
    let standard_pause = netdev
        .pause
        .filter(|p| p.rx_frames.is_some() || p.tx_frames.is_some());
    // A zero counter of a priority that carries no configured traffic says
    // nothing until it counts, and its PFC and ECN enable nothing at all:
    // left out unless `idle_priorities` is on (8 priorities times every
    // per-priority family is most of a netdev's series otherwise). The
    // whole PFC set stays in one series, which the fleet rules compare.
    let in_use = match groups.is_on(Group::IdlePriorities) {
        true => None,
        false => priorities_in_use(netdev),
    };
    for stat in &netdev.stats {
        if standard_pause.is_some() && matches!(stat.meaning, Meaning::LinkPauseFrames { .. }) {
            continue;
        }
        // mlx5's rx_corrected_bits_phy and FEC_GET's corrected bits are
        // one register field (PPCNT physical layer statistical group,
        // phy_corrected_bits: en_stats.c, fec_set_corrected_bits_total):
        // one series of it by default, the per-lane split with `lanes`.
        if fec_bits_read
            && !groups.is_on(Group::Lanes)
            && matches!(
                stat.meaning,
                Meaning::PhyErrors {
                    kind: "fec_corrected_bits",
                    lane: None
                }
            )
        {
            continue;
        }
        if let Some(priority) = priority_of(&stat.meaning) {
            let zero = match stat.value {
                StatValue::Count(v) => v == 0,
                StatValue::Seconds(v) => v == 0.0,
            };
            if zero && !exported(in_use, priority) {
                continue;
            }
        }
        push_stat(out, base, &stat.meaning, stat.value, groups);
    }
    if let Some(pause) = standard_pause {
        if let Some(v) = pause.rx_frames {
            push_into(out, &LINK_PAUSE_FRAMES, base.direction("rx"), v);
        }
        if let Some(v) = pause.tx_frames {
            push_into(out, &LINK_PAUSE_FRAMES, base.direction("tx"), v);
        }
    }
    for raw in &netdev.raw {
        let labels = EthtoolStatLabels {
            netdev: base.netdev,
            device: base.device,
            port: base.port,
            stat: &raw.name,
        };
        push_into(out, &ETHTOOL_STAT, labels, raw.value);
    }
    if let Some(mtu) = netdev.mtu {
        push_into(out, &MTU, base, mtu);
    }
    if let Some(speed) = netdev.speed_mbps {
        push_into(out, &SPEED, base, speed.saturating_mul(125_000));
    }
    let driver = netdev.driver.as_deref().unwrap_or("");
    let oper = netdev.operstate.as_deref().unwrap_or("");
    let dcb = match &netdev.dcb {
        DcbOutcome::Ok(_) => "supported",
        DcbOutcome::Unsupported => "unsupported",
        DcbOutcome::Disabled | DcbOutcome::Failed(_) => "",
    };
    let labels = NetdevInfoLabels {
        netdev: base.netdev,
        device: base.device,
        port: base.port,
        driver,
        operstate: oper,
        dcb,
    };
    push_into(out, &INFO, labels, 1u64);
    in_use
}

fn push_stat(
    out: &mut [FamilySamples],
    base: NetdevLabels<'_>,
    meaning: &Meaning,
    value: StatValue,
    groups: &Groups,
) {
    let NetdevLabels {
        netdev,
        device,
        port,
    } = base;
    let value = match value {
        StatValue::Count(v) => Value::U64(v),
        StatValue::Seconds(v) => Value::F64(v),
    };
    match *meaning {
        Meaning::PfcPauseFrames {
            priority,
            direction,
        } => {
            let pr = priority.to_string();
            let labels = base.priority(&pr).direction(direction.as_str());
            push_into(out, &PFC_PAUSE_FRAMES, labels, value);
        }
        Meaning::PfcPauseDuration {
            priority,
            direction,
        } => {
            let pr = priority.to_string();
            let labels = base.priority(&pr).direction(direction.as_str());
            push_into(out, &PFC_PAUSE_DURATION, labels, value);
        }
        Meaning::PfcPauseTransitions {
            priority,
            direction,
        } => {
            let pr = priority.to_string();
            let labels = base.priority(&pr).direction(direction.as_str());
            push_into(out, &PFC_PAUSE_TRANSITIONS, labels, value);
        }
        Meaning::LinkPauseFrames { direction } => {
            push_into(
                out,
                &LINK_PAUSE_FRAMES,
                base.direction(direction.as_str()),
                value,
            );
        }
        Meaning::PauseStormEvents { severity } => {
            let labels = StormLabels {
                netdev,
                device,
                port,
                severity,
            };
            push_into(out, &PAUSE_STORM_EVENTS, labels, value);
        }
        Meaning::Discards {
            reason,
            priority: None,
        } => {
            let labels = DiscardLabels {
                netdev,
                device,
                port,
                reason,
            };
            push_into(out, &DISCARDS, labels, value);
        }
        Meaning::Discards {
            reason,
            priority: Some(priority),
        } => {
            let pr = priority.to_string();
            let labels = PriorityDiscardLabels {
                netdev,
                device,
                port,
                reason,
                priority: &pr,
            };
            push_into(out, &PRIORITY_DISCARDS, labels, value);
        }
        Meaning::EcnMarked { priority } => {
            let pr = priority.to_string();
            push_into(out, &NIC_ECN_MARKED, base.priority(&pr), value);
        }
        Meaning::PhySymbolErrors => push_into(out, &PHY_SYMBOL_ERRORS, base, value),
        Meaning::LinkDownEvents => push_into(out, &LINK_DOWN_EVENTS, base, value),
        Meaning::PhyErrors { kind, lane } => {
            if lane.is_some() && !groups.is_on(Group::Lanes) {
                return;
            }
            let lane = lane.map(|v| v.to_string()).unwrap_or_default();
            let labels = PhyErrorLabels {
                netdev,
                device,
                port,
                kind,
                lane: &lane,
            };
            push_into(out, &PHY_ERRORS, labels, value);
        }
        Meaning::PcieErrors { kind } => {
            let labels = PcieErrorLabels {
                netdev,
                device,
                port,
                kind,
            };
            push_into(out, &NIC_PCIE_ERRORS, labels, value);
        }
    }
}

/// The priority a per-priority counter belongs to.
fn priority_of(meaning: &Meaning) -> Option<u8> {
    match *meaning {
        Meaning::PfcPauseFrames { priority, .. }
        | Meaning::PfcPauseDuration { priority, .. }
        | Meaning::PfcPauseTransitions { priority, .. }
        | Meaning::EcnMarked { priority } => Some(priority),
        Meaning::Discards { priority, .. } => priority,
        _ => None,
    }
}

/// Priorities whose per-priority counters are exported even at zero: PFC
/// on, or a DSCP mapped to them. `None` when the DCB configuration is
/// unknown: then every priority is.
fn priorities_in_use(netdev: &Netdev) -> Option<Priorities> {
    let DcbOutcome::Ok(config) = &netdev.dcb else {
        return None;
    };
    let mapped: Priorities = config.dscp_map().into_iter().map(|(_, p)| p).collect();
    Some(config.pfc_enabled?.union(mapped))
}

/// Whether the series of a priority are exported: every priority where the
/// configuration is unknown (or `idle_priorities` is on), else those in use.
pub(super) fn exported(in_use: Option<Priorities>, priority: u8) -> bool {
    in_use.is_none_or(|p| p.contains(priority))
}
