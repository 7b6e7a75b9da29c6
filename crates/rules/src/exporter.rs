//! Rules about what the exporter can see: RDMA devices and ports that went
//! away since it started (or that `expect.devices` names), no RDMA device
//! at all, and a collector that fails.

use super::settings::ExpectedDevices;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::snapshot::{Snapshot, SourceState};

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::RdmaDeviceMissing,
        checks: "the host has at least one RDMA device (when none was seen or expected)",
        evaluate: rdma_device_missing,
    },
    Rule {
        id: RuleId::RdmaDeviceGone,
        checks:
            "every RDMA device seen since start, or named or counted in expect.devices, is present",
        evaluate: rdma_device_gone,
    },
    Rule {
        id: RuleId::RdmaPortGone,
        checks: "every port seen since start on a present RDMA device is present",
        evaluate: rdma_port_gone,
    },
    Rule {
        id: RuleId::CollectorFailing,
        checks: "every collector runs (a failing one hides its part of the fabric)",
        evaluate: collector_failing,
    },
];

fn rdma_device_missing(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    // Only when the RDMA source ran and found nothing: a failed source is
    // collector_failing's business, a disabled one says nothing.
    let ran_empty = matches!(
        s.source("rdma").map(|x| &x.state),
        Some(SourceState::Unavailable(_))
    ) && s.rdma.as_ref().is_none_or(|r| r.devices.is_empty());
    // Devices seen or expected and now absent are rdma_device_gone's, by
    // name: one finding per condition.
    if !ran_empty || !ctx.history.seen().is_empty() || ctx.expect.devices.is_some() {
        return vec![];
    }
    vec![Finding {
        rule: RuleId::RdmaDeviceMissing,
        severity: Severity::Critical,
        subject: Subject::default(),
        finding: "No RDMA device on this host: NCCL falls back to NET/Socket (TCP)".into(),
        evidence: "/sys/class/infiniband is empty or absent; expected at least one device".into(),
        fix: "Load the NIC's RDMA driver (mlx5_ib, bnxt_re, irdma, ...) and check dmesg for firmware or driver errors".into(),
        verify: "ls /sys/class/infiniband; ibv_devinfo -l".into(),
    }]
}

fn collector_failing(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    s.sources
        .iter()
        .filter_map(|src| match &src.state {
            SourceState::Failed(why) => Some(Finding {
                rule: RuleId::CollectorFailing,
                severity: Severity::Warning,
                subject: Subject::default(),
                finding: format!("The {} collector failed: its metrics are missing", src.name),
                evidence: format!("roce_collector_success{{collector=\"{}\"}} 0: {why}", src.name),
                fix: "Read the exporter's log for the collector's error; a permission problem names the file or capability it needs".into(),
                verify: format!("curl -s localhost:9879/metrics | grep 'roce_collector_success{{collector=\"{}\"}}'", src.name),
            }),
            _ => None,
        })
        .collect()
}

/// The device names of the latest sample, when the RDMA source ran (a
/// failed or disabled source says nothing about devices).
fn present<'a>(ctx: &Context<'a>) -> Option<(&'a Snapshot, Vec<&'a str>)> {
    let s = ctx.latest?;
    let ran = matches!(
        s.source("rdma").map(|x| &x.state),
        Some(SourceState::Ok | SourceState::Unavailable(_))
    );
    if !ran {
        return None;
    }
    let names = s
        .rdma
        .iter()
        .flat_map(|r| r.devices.iter())
        .map(|d| d.name.as_str())
        .collect();
    Some((s, names))
}

fn rdma_device_gone(ctx: &Context) -> Vec<Finding> {
    let Some((_, present)) = present(ctx) else {
        return vec![];
    };
    let seen: Vec<&str> = ctx.history.seen().devices().map(|(d, _)| d).collect();
    let mut gone: Vec<(String, &str)> = Vec::new();
    for d in &seen {
        if !present.contains(d) {
            gone.push((d.to_string(), "seen since the exporter started"));
        }
    }
    if let Some(ExpectedDevices::Names(names)) = &ctx.expect.devices {
        for d in names {
            if !present.contains(&d.as_str()) && !gone.iter().any(|(g, _)| g == d) {
                gone.push((d.clone(), "named in expect.devices"));
            }
        }
    }
    let mut out: Vec<Finding> = gone
        .into_iter()
        .map(|(d, why)| Finding {
            rule: RuleId::RdmaDeviceGone,
            severity: Severity::Critical,
            finding: format!(
                "RDMA device {d} is gone: its ports and counters are no longer reported (a NIC that fell off the PCIe bus, a driver reset that failed, or a firmware fault)"
            ),
            evidence: format!(
                "/sys/class/infiniband/{d} absent; {why}; {} RDMA device(s) present: {}",
                present.len(),
                if present.is_empty() { "none".to_string() } else { present.join(", ") }
            ),
            fix: "Check the kernel log for the NIC's PCI function (AER errors, 'mlx5_core ... health', link down on the slot); \
                  reload the driver or reset the function (echo 1 > /sys/bus/pci/devices/<bdf>/remove; echo 1 > /sys/bus/pci/rescan); \
                  a NIC that stays gone needs a reboot or a hardware replacement"
                .into(),
            verify: format!("ls /sys/class/infiniband; ibv_devinfo -d {d}; dmesg | grep -iE 'mlx5|pcieport|AER' | tail"),
            subject: Subject {
                device: Some(d),
                ..Subject::default()
            },
        })
        .collect();
    if let Some(ExpectedDevices::Count(expected)) = ctx.expect.devices {
        // Devices already reported by name are not counted again.
        let accounted = present.len() + out.len();
        if accounted < expected {
            out.push(Finding {
                rule: RuleId::RdmaDeviceGone,
                severity: Severity::Critical,
                finding: format!(
                    "{} RDMA device(s) present where {expected} are expected, and the missing ones were never seen since the exporter started",
                    present.len()
                ),
                evidence: format!(
                    "{} present ({}); expected {expected} (expect.devices)",
                    present.len(),
                    if present.is_empty() { "none".to_string() } else { present.join(", ") }
                ),
                fix: "Check that every NIC is seated, powered and bound to its RDMA driver (lspci -nnk | grep -A3 -i mellanox; modprobe mlx5_ib); \
                      the kernel log names a NIC that failed to initialise"
                    .into(),
                verify: "ls /sys/class/infiniband | wc -l; lspci -d 15b3: | wc -l".into(),
                subject: Subject::default(),
            });
        }
    }
    out
}

fn rdma_port_gone(ctx: &Context) -> Vec<Finding> {
    let Some((s, present)) = present(ctx) else {
        return vec![];
    };
    let mut out = Vec::new();
    for (device, ports) in ctx.history.seen().devices() {
        // A device that is gone is rdma_device_gone's.
        if !present.contains(&device) {
            continue;
        }
        let now: Vec<u32> = super::ports::ports(s)
            .filter(|(d, _)| d.name == device)
            .map(|(_, p)| p.number)
            .collect();
        for &port in ports.iter().filter(|p| !now.contains(p)) {
            out.push(Finding {
                rule: RuleId::RdmaPortGone,
                severity: Severity::Critical,
                finding: format!(
                    "{device} port {port} is gone: the device is still there, its port is no longer reported"
                ),
                evidence: format!(
                    "/sys/class/infiniband/{device}/ports/{port} absent; seen since the exporter started; ports present: {}",
                    if now.is_empty() {
                        "none".to_string()
                    } else {
                        now.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                    }
                ),
                fix: "Check the kernel log for the device (a port removed by a failed reset or a mode change, e.g. a switchdev or link-layer change); reload the driver if the port does not come back".into(),
                verify: format!("ls /sys/class/infiniband/{device}/ports; dmesg | grep -i {device} | tail"),
                subject: Subject {
                    device: Some(device.to_string()),
                    port: Some(port),
                    ..Subject::default()
                },
            });
        }
    }
    out
}
