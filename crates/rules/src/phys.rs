//! Rules on the physical layer and device health: optics against the
//! module's own thresholds (Rx power low, temperature high) and against
//! their sibling lanes, and devlink health reporters (FEC is
//! [`crate::fec`]'s, PCIe AER [`crate::aer`]'s). Module readings are judged as read (the module is the
//! authority on its limits); counters by their reset-aware growth over the
//! rule's window, silent on the first sample. What a driver does not offer
//! is never judged.

use serde::Serialize;

use roce_netdev::devlink::ReporterState;
use roce_netdev::module::{Medium, ModuleInfo, Thresholds};
use roce_netdev::phys::PhysNetdev;

use super::history::FollowedCounter;
use super::rates::span;
use super::settings::section;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::ModuleRxPowerLow,
        checks:
            "every module lane receives more optical power than the module's low warning threshold",
        evaluate: module_rx_power_low,
    },
    Rule {
        id: RuleId::ModuleTemperatureHigh,
        checks: "every module stays below its own high temperature warning threshold",
        evaluate: module_temperature_high,
    },
    Rule {
        id: RuleId::ModuleLaneImbalance,
        checks: "no module lane receives far less optical power than its sibling lanes",
        evaluate: module_lane_imbalance,
    },
    Rule {
        id: RuleId::DevlinkReporterError,
        checks: "every NIC devlink health reporter is healthy and counts no new errors",
        evaluate: devlink_reporter_error,
    },
];

/// The subject of a netdev: its RDMA port when it backs one.
pub(crate) fn netdev_subject(n: &PhysNetdev) -> Subject {
    match &n.rdma {
        Some(r) => Subject::port(&r.device, r.port, Some(&n.name)),
        None => Subject {
            netdev: Some(n.name.clone()),
            ..Subject::default()
        },
    }
}

pub(crate) fn phys_netdevs(s: &Snapshot) -> impl Iterator<Item = &PhysNetdev> {
    s.phys.iter().flat_map(|p| p.netdevs.iter())
}

fn modules(s: &Snapshot) -> impl Iterator<Item = (&PhysNetdev, &ModuleInfo)> {
    phys_netdevs(s).filter_map(|n| n.module.as_ref().map(|m| (n, m)))
}

/// Thresholds a module actually programmed: an unprogrammed page reads all
/// zeros (or the same value everywhere), which judges nothing.
fn programmed(t: Option<&Thresholds>) -> Option<&Thresholds> {
    t.filter(|t| t.high_warning > t.low_warning && t.high_alarm >= t.high_warning)
}

fn dbm(watts: f64) -> String {
    if watts <= 0.0 {
        "no light".into()
    } else {
        format!("{:.1} dBm", 10.0 * (watts * 1e3).log10())
    }
}

fn mw(watts: f64) -> String {
    format!("{:.3} mW", watts * 1e3)
}

fn module_name(m: &ModuleInfo) -> String {
    format!("{} {} {} (serial {})", m.kind, m.vendor, m.part, m.serial)
}

fn verify_module(netdev: &str) -> String {
    format!("ethtool -m {netdev}  # Rx power, temperature and thresholds of the module")
}

fn module_rx_power_low(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, m) in modules(s) {
        let Some(t) = programmed(m.thresholds.rx_power_watts.as_ref()) else {
            continue;
        };
        let low: Vec<(usize, f64)> = m
            .lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.rx_power_watts.map(|w| (i, w)))
            .filter(|&(_, w)| w < t.low_warning)
            .collect();
        if low.is_empty() {
            continue;
        }
        let alarm = low.iter().any(|&(_, w)| w < t.low_alarm);
        let lanes: Vec<String> = low
            .iter()
            .map(|&(i, w)| format!("lane {} {} ({})", i + 1, mw(w), dbm(w)))
            .collect();
        let subject = netdev_subject(n);
        out.push(Finding {
            rule: RuleId::ModuleRxPowerLow,
            severity: if alarm { Severity::Critical } else { Severity::Warning },
            finding: format!(
                "{}: the module receives too little light on {} lane(s): a dirty, damaged or bent fiber, or a failing far-end transmitter",
                subject.describe(),
                low.len()
            ),
            evidence: format!(
                "{}; module's low warning {} ({}), low alarm {} ({}); {}",
                lanes.join(", "),
                mw(t.low_warning),
                dbm(t.low_warning),
                mw(t.low_alarm),
                dbm(t.low_alarm),
                module_name(m)
            ),
            fix: "Clean both fiber ends and the module's receptacle (inspect with a scope), reseat the module, \
                  check the far end's Tx power; replace the cable or the module if it stays low"
                .into(),
            verify: verify_module(&n.name),
            subject,
        });
    }
    out
}

fn module_temperature_high(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, m) in modules(s) {
        let (Some(temp), Some(t)) = (
            m.temperature_celsius,
            programmed(m.thresholds.temperature_celsius.as_ref()),
        ) else {
            continue;
        };
        if temp <= t.high_warning {
            continue;
        }
        let subject = netdev_subject(n);
        out.push(Finding {
            rule: RuleId::ModuleTemperatureHigh,
            severity: if temp > t.high_alarm {
                Severity::Critical
            } else {
                Severity::Warning
            },
            finding: format!(
                "{}: the module runs at {temp:.1} °C, above its own warning threshold: lasers age fast and links drop when hot",
                subject.describe()
            ),
            evidence: format!(
                "temperature {temp:.1} °C; module's high warning {:.1} °C, high alarm {:.1} °C; {}",
                t.high_warning,
                t.high_alarm,
                module_name(m)
            ),
            fix: "Check the chassis airflow and fan speeds at this cage (blanked slots, blocked inlets), and that the \
                  module's power class is one the cage cools; replace the module if it stays hot"
                .into(),
            verify: verify_module(&n.name),
            subject,
        });
    }
    out
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

fn module_lane_imbalance(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let factor = ctx.rules.module_lane_imbalance.factor;
    let mut out = Vec::new();
    for (n, m) in modules(s) {
        // Only where each lane is its own fibre: on WDM optics (FR4, LR4,
        // CWDM4) the lanes share one fibre and differ by several dB within
        // specification, and an unknown medium says nothing either way.
        if m.medium != Medium::ParallelFibre {
            continue;
        }
        let rx: Vec<f64> = m.lanes.iter().filter_map(|l| l.rx_power_watts).collect();
        if rx.len() < 2 || rx.len() != m.lanes.len() {
            continue;
        }
        // Lanes already below the module's low warning are the
        // module_rx_power_low finding's.
        let low_warning = programmed(m.thresholds.rx_power_watts.as_ref()).map(|t| t.low_warning);
        let mut weak = Vec::new();
        for (i, &w) in rx.iter().enumerate() {
            let siblings: Vec<f64> = rx
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, &v)| v)
                .collect();
            let Some(med) = median(siblings) else {
                continue;
            };
            if med <= 0.0 || low_warning.is_some_and(|lw| w < lw) {
                continue;
            }
            if w * factor < med {
                weak.push((i, w, med));
            }
        }
        if weak.is_empty() {
            continue;
        }
        let lanes: Vec<String> = weak
            .iter()
            .map(|&(i, w, med)| {
                format!(
                    "lane {} {} vs siblings' median {} ({:.1} dB below)",
                    i + 1,
                    mw(w),
                    mw(med),
                    10.0 * (med / w.max(f64::MIN_POSITIVE)).log10()
                )
            })
            .collect();
        let subject = netdev_subject(n);
        out.push(Finding {
            rule: RuleId::ModuleLaneImbalance,
            severity: Severity::Warning,
            finding: format!(
                "{}: {} lane(s) of the module receive far less light than the others: one fiber of the bundle is dirty or damaged",
                subject.describe(),
                weak.len()
            ),
            evidence: format!(
                "{}; limit: a lane below its siblings' median / {} ({:.1} dB); {}",
                lanes.join(", "),
                crate::ports::fmt_num(factor),
                10.0 * factor.log10(),
                module_name(m)
            ),
            fix: "Clean and inspect the MPO/MTP connector at both ends (the weak lane's fiber), then reseat; \
                  replace the cable if the lane stays low"
                .into(),
            verify: verify_module(&n.name),
            subject,
        });
    }
    out
}

fn devlink_reporter_error(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let Some(reporters) = s.phys.as_ref().and_then(|p| p.reporters.as_ref()) else {
        return vec![];
    };
    let window = ctx.rules.devlink_health.window;
    let mut out = Vec::new();
    for nr in reporters {
        let r = &nr.reporter;
        let inc = ctx
            .history
            .reporter(&r.device, &r.name, r.port)
            .increase(FollowedCounter::ReporterErrors, window)
            .filter(|i| i.amount > 0);
        // A reporter without a recover operation (mlx5's `fw`) stays in
        // the error state until the driver reloads: the state says nothing
        // new, the growth of its error count does.
        let recoverable = r.auto_recover.is_some();
        let in_error = r.state == ReporterState::Error && recoverable;
        if !in_error && inc.is_none() {
            continue;
        }
        let subject = phys_netdevs(s)
            .find(|n| n.name == nr.netdev)
            .map(netdev_subject)
            .unwrap_or_else(|| Subject {
                netdev: Some(nr.netdev.clone()),
                ..Subject::default()
            });
        let grew = inc
            .map(|i| format!("errors +{} over {}", i.amount, span(i.seconds)))
            .unwrap_or_else(|| "no new errors in the window".into());
        out.push(Finding {
            rule: RuleId::DevlinkReporterError,
            severity: if in_error {
                Severity::Critical
            } else {
                Severity::Warning
            },
            finding: if in_error {
                format!(
                    "{}: the NIC's {} health reporter is in error and was not recovered",
                    subject.describe(),
                    r.name
                )
            } else {
                format!(
                    "{}: the NIC's {} health reporter saw errors{}",
                    subject.describe(),
                    r.name,
                    if recoverable { " (recovered)" } else { "" }
                )
            },
            evidence: format!(
                "devlink pci/{} reporter {} state {}, {grew}, error count {}, recoveries {}{}",
                r.device,
                r.name,
                r.state.as_str(),
                r.errors,
                r.recoveries,
                if recoverable {
                    ""
                } else {
                    " (no recover operation: judged by error-count growth)"
                }
            ),
            fix: if recoverable {
                "Read the reporter's diagnosis and dump (devlink health diagnose/dump show), collect the firmware \
                 dump for the vendor, then recover it or reload the driver; update the NIC firmware if it repeats"
                    .into()
            } else {
                format!(
                    "Read the reporter's diagnosis (devlink health diagnose pci/{} reporter {}) and the firmware's syndrome in the kernel log, and send both to the vendor; this reporter has no recover operation and stays in error until the driver reloads; update the NIC firmware if its errors keep growing",
                    r.device, r.name
                )
            },
            verify: format!(
                "devlink health show pci/{} reporter {}  # state healthy, error count steady",
                r.device, r.name
            ),
            subject,
        });
    }
    out
}

/// `module_lane_imbalance`'s section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaneRule {
    pub factor: f64,
}

section!(LaneRule {
    factor: f64 = "crate::values::opt_factor",
});
