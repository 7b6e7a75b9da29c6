//! Rules on PCIe Advanced Error Reporting: errors the kernel counted on
//! the NICs' and GPUs' own functions, and on the bridge ports of their
//! paths (root ports, switch ports), judged by the growth of the totals
//! over `rules.pcie_aer.window`, silent on the first sample.
//!
//! A PCIe error is counted by the receiver that saw it: errors on the TLPs
//! a NIC sends (its DMA writes, GPUDirect RDMA into GPU memory among them)
//! land on the bridge port above it, where neither the NIC's AER files nor
//! its own counters show them. Each bridge finding names what the port
//! serves: the NIC (its RDMA port) and the GPU whose nearest NIC it is.

use std::collections::BTreeMap;

use roce_netdev::aer::{AerCounts, PciAer};
use roce_netdev::phys::BridgeHealth;

use super::history::{FollowedCounter, Series};
use super::phys::netdev_subject;
use super::rates::span;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::PcieAerErrors,
        checks: "no PCIe AER errors on NIC or GPU links within the window",
        evaluate: pcie_aer_errors,
    },
    Rule {
        id: RuleId::PcieBridgeAerErrors,
        checks: "no PCIe AER errors on the bridge ports of a NIC's or GPU's path within the window",
        evaluate: pcie_bridge_aer_errors,
    },
];

/// Growth of a function's AER totals over the window: (severity, amount,
/// seconds) for each that grew.
fn growth(series: &Series<'_>, window: std::time::Duration) -> Vec<(&'static str, u64, f64)> {
    [
        ("correctable", FollowedCounter::AerCorrectable),
        ("nonfatal", FollowedCounter::AerNonfatal),
        ("fatal", FollowedCounter::AerFatal),
    ]
    .into_iter()
    .filter_map(|(name, v)| {
        series
            .increase(v, window)
            .filter(|i| i.amount > 0)
            .map(|i| (name, i.amount, i.seconds))
    })
    .collect()
}

/// The index of the GPU at `pci`, from the topology source.
fn gpu_index(s: &Snapshot, pci: &str) -> Option<u32> {
    s.topology
        .as_ref()?
        .gpus
        .iter()
        .find(|g| g.address.to_string() == pci)
        .map(|g| g.index as u32)
}

fn pcie_aer_errors(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let Some(phys) = &s.phys else { return vec![] };
    let window = ctx.rules.pcie_aer.window;
    let mut functions: Vec<(String, Subject, &str)> = Vec::new();
    for n in &phys.netdevs {
        if let Some(pci) = &n.pci {
            functions.push((pci.clone(), netdev_subject(n), "NIC"));
        }
    }
    for g in &phys.gpus {
        let subject = Subject {
            gpu: gpu_index(s, &g.pci),
            ..Subject::default()
        };
        functions.push((g.pci.clone(), subject, "GPU"));
    }
    let mut out = Vec::new();
    for (pci, subject, role) in functions {
        let grew = growth(&ctx.history.pci(&pci), window);
        if grew.is_empty() {
            continue;
        }
        let parts: Vec<String> = grew
            .iter()
            .map(|(name, amount, secs)| format!("{name} +{amount} over {}", span(*secs)))
            .collect();
        let uncorrectable = grew.iter().any(|(name, _, _)| *name != "correctable");
        out.push(Finding {
            rule: RuleId::PcieAerErrors,
            severity: if uncorrectable {
                Severity::Critical
            } else {
                Severity::Warning
            },
            finding: if uncorrectable {
                format!(
                    "{} ({role} {pci}): uncorrectable PCIe errors: transactions were lost or the device was reset",
                    subject.describe()
                )
            } else {
                format!(
                    "{} ({role} {pci}): correctable PCIe errors are growing: the link replays packets and is marginal (riser, slot, retimer)",
                    subject.describe()
                )
            },
            evidence: format!("AER {}; expected none", parts.join(", ")),
            fix: "Reseat the card and its riser, check the slot's retimer/cabling and the BIOS/firmware level; \
                  move the card to another slot if it persists; the kernel log names the error kinds"
                .into(),
            verify: format!(
                "cat /sys/bus/pci/devices/{pci}/aer_dev_correctable /sys/bus/pci/devices/{pci}/aer_dev_nonfatal /sys/bus/pci/devices/{pci}/aer_dev_fatal  # TOTAL_ERR_* must stop growing"
            ),
            subject,
        });
    }
    out
}

/// The kinds that counted in an AER file, "RxErr 17, BadDLLP 2".
fn kinds(c: Option<&AerCounts>) -> Vec<String> {
    c.map(|c| {
        c.kinds
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect()
    })
    .unwrap_or_default()
}

fn kinds_of(aer: &PciAer) -> String {
    let all: Vec<String> = [&aer.correctable, &aer.nonfatal, &aer.fatal]
        .into_iter()
        .flat_map(|c| kinds(c.as_ref()))
        .collect();
    if all.is_empty() {
        String::new()
    } else {
        format!(" (by kind, since boot: {})", all.join(", "))
    }
}

/// "GPU 2" or, without the topology source's index, the GPU's address.
fn gpu_name(s: &Snapshot, pci: &str) -> String {
    match gpu_index(s, pci) {
        Some(i) => format!("GPU {i}"),
        None => format!("GPU {pci}"),
    }
}

/// The GPUs whose nearest NIC is the RDMA device `device`, by index.
fn gpus_near(s: &Snapshot, device: &str) -> Vec<u32> {
    let Some(t) = &s.topology else {
        return vec![];
    };
    t.gpus_nearest_to(device)
        .into_iter()
        .map(|g| g as u32)
        .collect()
}

/// The subject a bridge port's finding is filed under: the first NIC it
/// serves (its RDMA port) with the GPU that NIC serves for GPUDirect (one
/// of the GPUs below the port when there is one, else the nearest GPU),
/// or the first GPU it serves when it serves no NIC.
fn bridge_subject(s: &Snapshot, b: &BridgeHealth) -> Subject {
    let phys_netdev = b
        .netdevs
        .first()
        .and_then(|name| s.phys.as_ref()?.netdevs.iter().find(|n| &n.name == name));
    let below: Vec<u32> = b.gpus.iter().filter_map(|g| gpu_index(s, g)).collect();
    match phys_netdev {
        Some(n) => {
            let mut subject = netdev_subject(n);
            let near = n
                .rdma
                .as_ref()
                .map(|r| gpus_near(s, &r.device))
                .unwrap_or_default();
            subject.gpu = below
                .iter()
                .find(|g| near.contains(g))
                .or(below.first())
                .or(near.first())
                .copied();
            subject
        }
        None => Subject {
            gpu: below.first().copied(),
            ..Subject::default()
        },
    }
}

/// What a bridge port is to the subject: "the NIC's upstream port" or the
/// NICs and GPUs below it.
fn bridge_role(s: &Snapshot, b: &BridgeHealth) -> String {
    let gpus: Vec<String> = b.gpus.iter().map(|g| gpu_name(s, g)).collect();
    match (b.endpoint_link, b.netdevs.as_slice(), gpus.as_slice()) {
        (true, [n, ..], []) => format!("the upstream port of {n}'s NIC"),
        (true, [], [g, ..]) => format!("the upstream port of {g}"),
        _ => {
            let below: Vec<&str> = b
                .netdevs
                .iter()
                .map(String::as_str)
                .chain(gpus.iter().map(String::as_str))
                .collect();
            format!("a port above {}", below.join(", "))
        }
    }
}

/// A bridge port whose AER totals grew, with each severity's growth.
type Grown<'a> = (&'a BridgeHealth, Vec<(&'static str, u64, f64)>);

fn pcie_bridge_aer_errors(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let Some(phys) = &s.phys else { return vec![] };
    let window = ctx.rules.pcie_aer.window;
    // Ports that grew, by the subject their finding is filed under: one
    // finding per subject, naming each of its ports.
    let mut grown: BTreeMap<Subject, Vec<Grown<'_>>> = BTreeMap::new();
    for b in &phys.bridges {
        let g = growth(&ctx.history.pci(&b.pci), window);
        if !g.is_empty() {
            grown.entry(bridge_subject(s, b)).or_default().push((b, g));
        }
    }
    let mut out = Vec::new();
    for (subject, ports) in grown {
        let uncorrectable = ports
            .iter()
            .any(|(_, g)| g.iter().any(|(sev, _, _)| *sev != "correctable"));
        let nic_upstream = ports
            .iter()
            .any(|(b, _)| b.endpoint_link && !b.netdevs.is_empty());
        let names: Vec<String> = ports
            .iter()
            .map(|(b, _)| format!("{} ({})", b.pci, bridge_role(s, b)))
            .collect();
        let what = if uncorrectable {
            "uncorrectable PCIe errors (transactions lost, or a reset)"
        } else {
            "correctable PCIe errors (the link replays packets: it is marginal)"
        };
        let why = if nic_upstream {
            match subject.gpu {
                Some(g) => format!(": the port counts the errors of what the NIC sends, its DMA writes into GPU {g}'s memory (GPUDirect RDMA) among them, which the NIC's own counters do not show"),
                None => ": the port counts the errors of what the NIC sends, its DMA writes among them, which the NIC's own counters do not show".to_string(),
            }
        } else {
            String::new()
        };
        let evidence: Vec<String> = ports
            .iter()
            .map(|(b, g)| {
                let parts: Vec<String> = g
                    .iter()
                    .map(|(sev, amount, secs)| format!("{sev} +{amount} over {}", span(*secs)))
                    .collect();
                format!("{}: AER {}{}", b.pci, parts.join(", "), kinds_of(&b.aer))
            })
            .collect();
        let files: Vec<String> = ports
            .iter()
            .map(|(b, _)| {
                format!(
                    "/sys/bus/pci/devices/{}/aer_dev_{{correctable,nonfatal,fatal}}",
                    b.pci
                )
            })
            .collect();
        out.push(Finding {
            rule: RuleId::PcieBridgeAerErrors,
            severity: if uncorrectable {
                Severity::Critical
            } else {
                Severity::Warning
            },
            finding: format!(
                "{}: {what} on the bridge port(s) of its PCIe path, {}{why}",
                subject.describe(),
                names.join("; "),
            ),
            evidence: format!("{}; expected none", evidence.join("; ")),
            fix: "Reseat the card below the port (NIC or GPU) and its riser or cable, check the slot's retimer and the \
                  PCIe switch board, update the BIOS and the switch, NIC and GPU firmware; the kernel log names the \
                  kinds and the reporting port (dmesg | grep -i aer); move the card to another slot to tell card from slot"
                .into(),
            verify: format!("cat {}  # TOTAL_ERR_* must stop growing", files.join(" ")),
            subject,
        });
    }
    out
}
