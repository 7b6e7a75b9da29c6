//! `roce_exporter check`: one-shot fabric checklist. Samples twice over a
//! window, runs the rules, and prints what it read, the findings with Fix
//! and Verify lines, and the NCCL settings this host needs (only those it
//! can justify from what it read). Same sources and rules as the server:
//! every verdict here is a finding of the rule table (`crates/rules/src/table.rs`),
//! filed under the checklist line of its area and subject; the checklist
//! itself only reports.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_netdev::DcbOutcome;
use roce_rdma::LinkLayer;
use serde::Serialize;

use crate::config::{Config, Expectations};
use crate::host::HostPaths;
use crate::rules::{self, Area, Finding, RuleId, Severity};
use crate::sampler::Sampler;
use crate::snapshot::{Snapshot, SourceState};
use crate::sources;

/// Result of one check item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Fail,
    Warn,
    Unknown,
}

impl Status {
    fn mark(self) -> &'static str {
        match self {
            Status::Ok => "[ok]  ",
            Status::Fail => "[FAIL]",
            Status::Warn => "[warn]",
            Status::Unknown => "[ -- ]",
        }
    }
}

/// One line of the checklist.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub section: &'static str,
    pub status: Status,
    pub text: String,
}

/// An NCCL environment setting: NCCL's default judged on this host.
#[derive(Debug, Clone, Serialize)]
pub struct NcclSetting {
    pub name: &'static str,
    /// What to export, "default is right", or a hint at what to choose.
    pub value: String,
    /// `export` (the default is wrong here), `default` (it is right) or
    /// `choose` (wrong or doubtful, and the value is the operator's choice).
    pub action: &'static str,
    pub reason: String,
}

/// The whole report; its JSON form is what `--format json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub window_seconds: f64,
    pub checklist: Vec<Item>,
    pub findings: Vec<Finding>,
    pub nccl: Vec<NcclSetting>,
}

impl Report {
    /// 1 when any finding is critical, else 0.
    pub fn exit_code(&self) -> u8 {
        u8::from(
            self.findings
                .iter()
                .any(|f| f.severity == Severity::Critical),
        )
    }
}

/// Why `check` could not judge the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// Without the RDMA devices there is nothing to judge.
    #[error("the rdma collector failed: {0}")]
    RdmaFailed(String),
}

/// Takes two samples `window` apart and builds the report. `progress`
/// shows a countdown on stderr while waiting (only on a terminal).
pub fn run(
    config: &Config,
    paths: &HostPaths,
    window: Duration,
    progress: bool,
) -> Result<Report, CheckError> {
    let mut sampler = Sampler::new(sources::all(config, paths), config);
    let first = sampler.sample();
    if let Some(failed) = first
        .source("rdma")
        .filter(|s| matches!(s.state, SourceState::Failed(_)))
    {
        return Err(CheckError::RdmaFailed(
            failed.state.detail().unwrap_or("").to_string(),
        ));
    }
    wait(window, progress && std::io::stderr().is_terminal());
    let second = sampler.sample();
    let history = vec![first, second.clone()];
    let findings = rules::evaluate(&history, &config.rules, &config.expect);
    Ok(build_report(&history, findings, window, &config.expect))
}

fn wait(window: Duration, show: bool) {
    let start = Instant::now();
    let mut err = std::io::stderr();
    while start.elapsed() < window {
        if show {
            let left = window.saturating_sub(start.elapsed());
            let _ = write!(
                err,
                "\rsampling counters: {:>4.1}s left ",
                left.as_secs_f64()
            );
            let _ = err.flush();
        }
        std::thread::sleep(Duration::from_millis(100).min(window.saturating_sub(start.elapsed())));
    }
    if show {
        let _ = write!(err, "\r{:40}\r", "");
        let _ = err.flush();
    }
}

/// The report over a history (first and last sample). Pure: tests build
/// histories in code.
pub fn build_report(
    history: &[Arc<Snapshot>],
    findings: Vec<Finding>,
    window: Duration,
    expect: &Expectations,
) -> Report {
    let mut checklist = Vec::new();
    let latest = history.last().map(|s| s.as_ref());
    if let Some(s) = latest {
        transport(s, &findings, &mut checklist);
        gpudirect(s, &findings, &mut checklist);
        roce_config(s, &findings, &mut checklist);
        nic_vs_switch(s, &findings, expect.rails.is_some(), &mut checklist);
        counters(s, &findings, &mut checklist);
        topology(s, &findings, &mut checklist);
        nccl_seen(s, &findings, &mut checklist);
        collectors(s, &mut checklist);
    }
    let nccl = latest.map(|s| nccl_settings(s, expect)).unwrap_or_default();
    Report {
        window_seconds: window.as_secs_f64(),
        checklist,
        findings,
        nccl,
    }
}

fn transport(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    let section = "Transport";
    let ports: Vec<_> = rules::ports::ports(s).collect();
    if ports.is_empty() {
        // rdma_device_missing (or nothing, when the rdma collector is off).
        let status = status_of(
            findings
                .iter()
                .filter(|f| area(f) == Area::Port && f.subject.device.is_none()),
        );
        out.push(Item {
            section,
            status: if status == Status::Ok {
                Status::Unknown
            } else {
                status
            },
            text: "no RDMA device: NCCL will fall back to NET/Socket (TCP)".into(),
        });
        return;
    }
    for (d, p) in ports {
        let kind = match p.link_layer {
            Some(LinkLayer::Ethernet) => "RoCE",
            Some(LinkLayer::InfiniBand) => "InfiniBand",
            _ => "unknown link layer",
        };
        let rate = p
            .rate_bytes_per_second
            .map(|r| format!(", {} Gb/s", rules::ports::fmt_num(r as f64 * 8.0 / 1e9)))
            .unwrap_or_default();
        let netdev = p
            .netdev
            .as_deref()
            .map(|n| format!(", netdev {n}"))
            .unwrap_or_default();
        let state = format!(
            "{}/{}",
            p.state.as_ref().map(|x| x.name()).unwrap_or("?"),
            p.phys_state.as_ref().map(|x| x.name()).unwrap_or("?")
        );
        let status = status_of(on_port(findings, &d.name, p.number));
        let mut text = format!(
            "{} port {}: {state}, {kind}{rate}{netdev}",
            d.name, p.number
        );
        if matches!(p.link_layer, Some(LinkLayer::Ethernet)) {
            match p.routable_roce_v2_gid() {
                Some(g) => text.push_str(&format!(", RoCE v2 GID {} ({})", g.index, g.gid)),
                None => text.push_str(", no routable RoCE v2 GID"),
            }
        }
        out.push(Item {
            section,
            status,
            text,
        });
    }
}

/// The area of the rule table a finding belongs to.
fn area(f: &Finding) -> Area {
    f.rule.spec().area
}

/// The findings about one port (any area).
fn on_port<'a>(
    findings: &'a [Finding],
    device: &'a str,
    port: u32,
) -> impl Iterator<Item = &'a Finding> + 'a {
    findings.iter().filter(move |f| {
        f.subject.device.as_deref() == Some(device) && f.subject.port == Some(port)
    })
}

/// The findings of the given areas.
fn in_areas<'a>(
    findings: &'a [Finding],
    areas: &'a [Area],
) -> impl Iterator<Item = &'a Finding> + 'a {
    findings.iter().filter(move |f| areas.contains(&area(f)))
}

/// `rule, rule` of some findings, each once.
fn rule_list<'a>(findings: impl Iterator<Item = &'a Finding>) -> String {
    let mut ids: Vec<RuleId> = findings.map(|f| f.rule).collect();
    ids.sort();
    ids.dedup();
    ids.iter()
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn collectors(s: &Snapshot, out: &mut Vec<Item>) {
    for src in &s.sources {
        let (status, text) = match &src.state {
            SourceState::Ok if src.errors.is_empty() => (Status::Ok, format!("{}: read", src.name)),
            SourceState::Ok => (
                Status::Warn,
                format!(
                    "{}: read with {} error(s), first: {}",
                    src.name,
                    src.errors.len(),
                    src.errors[0]
                ),
            ),
            SourceState::Unavailable(why) => (
                Status::Unknown,
                format!("{}: nothing to read ({why})", src.name),
            ),
            SourceState::Disabled(why) => (Status::Unknown, format!("{}: off ({why})", src.name)),
            SourceState::Failed(why) => (Status::Fail, format!("{}: failed ({why})", src.name)),
        };
        out.push(Item {
            section: "Collectors",
            status,
            text,
        });
    }
}

/// The NCCL settings, each with NCCL's default judged on this host
/// ([`rules::nccl::advice`]).
fn nccl_settings(s: &Snapshot, expect: &Expectations) -> Vec<NcclSetting> {
    use rules::nccl::NcclValue;
    rules::nccl::advice(s, expect)
        .into_iter()
        .map(|a| {
            let (action, value) = match a.value {
                NcclValue::Set(v) => ("export", v),
                NcclValue::Choose(v) => ("choose", v),
                NcclValue::DefaultIsRight => ("default", "default is right".into()),
            };
            NcclSetting {
                name: a.name,
                value,
                action,
                reason: a.why,
            }
        })
        .collect()
}

/// What NCCL jobs used (the `nccl` source), in the reference's answer
/// format: `Transport seen: {IB|RoCEv2|Socket} GDR: {on|off}` per transport
/// and GDR state, `Measured: <busbw> GB/s vs expected <GB/s>` per
/// collective; without data, where to point NCCL.
fn nccl_seen(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    use roce_nccl::aggregate::Transport;
    let section = "NCCL (what jobs used)";
    let n = s.nccl.as_ref();
    let log_dir = n
        .and_then(|n| n.log_dir.as_ref())
        .map_or("<dir>".to_string(), |d| d.display().to_string());
    let inspector_dir = n
        .and_then(|n| n.inspector_dir.as_ref())
        .map_or("<dir>".to_string(), |d| d.display().to_string());
    let sum = match n {
        Some(n) if n.summary.has_data() => &n.summary,
        _ => {
            let how = if n.is_some() {
                "no NCCL data in the window"
            } else {
                "no NCCL data (the nccl source is off)"
            };
            out.push(item(
                section,
                Status::Unknown,
                format!(
                    "{how}: run jobs with NCCL_DEBUG=INFO NCCL_DEBUG_FILE={log_dir}/nccl.%h.%p.log and the NCCL Inspector \
                     (NCCL_PROFILER_PLUGIN=<path>/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1 \
                     NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=30000000 NCCL_INSPECTOR_DUMP_DIR={inspector_dir}), \
                     and set nccl: {{enabled: true, log_dir: {log_dir}, inspector_dir: {inspector_dir}}}"
                ),
            ));
            return;
        }
    };
    let rule_status = |rule: RuleId| status_of(findings.iter().filter(|f| f.rule == rule));
    // (transport name, gdr) -> NICs.
    let mut seen: std::collections::BTreeMap<(String, bool), Vec<String>> =
        std::collections::BTreeMap::new();
    for r in &sum.connections {
        let k = &r.key;
        let name = match k.transport {
            Transport::Ib => "IB".to_string(),
            // NCCL selects RoCE v2 GIDs by default (NCCL_IB_ROCE_VERSION_NUM=2).
            Transport::Roce => "RoCEv2".to_string(),
            Transport::Socket => "Socket".to_string(),
            Transport::Other => k.net.clone(),
        };
        let nic = if k.port == 0 {
            k.device.clone()
        } else {
            format!("{} port {}", k.device, k.port)
        };
        let nics = seen.entry((name, k.gdr)).or_default();
        if !nics.contains(&nic) {
            nics.push(nic);
        }
    }
    let versions = if sum.versions.is_empty() {
        String::new()
    } else {
        format!("; NCCL {}", sum.versions.join(", "))
    };
    if seen.is_empty() {
        out.push(item(
            section,
            Status::Unknown,
            format!(
                "Transport seen: none (no NET connection in the window; networks chosen: {}{versions})",
                if sum.networks.is_empty() { "none".to_string() } else { sum.networks.join(", ") }
            ),
        ));
    }
    for ((name, gdr), nics) in &seen {
        let status = if name == "Socket" {
            rule_status(RuleId::NcclSocketTransport)
        } else if !gdr {
            status_of(findings.iter().filter(|f| {
                f.rule == RuleId::NcclGdrNotUsed
                    && f.subject.device.as_ref().is_some_and(|d| {
                        nics.iter()
                            .any(|n| n.split([' ', '+']).next() == Some(d.as_str()))
                    })
            }))
        } else {
            Status::Ok
        };
        out.push(item(
            section,
            status,
            format!(
                "Transport seen: {name} GDR: {} ({}{versions})",
                if *gdr { "on" } else { "off" },
                nics.join(", ")
            ),
        ));
    }
    let rate = rules::nccl_seen::line_rate(s, sum);
    for b in &sum.busbw {
        let status = status_of(findings.iter().filter(|f| {
            f.rule == RuleId::NcclBusbwBelowLineRate
                && f.finding.starts_with(&format!("NCCL {} ", b.collective))
        }));
        let expected = match rate
            .as_ref()
            .and_then(|r| rules::nccl_seen::expected_busbw(&b.collective, r))
        {
            Some(e) => format!("{:.1} GB/s ({})", e.bytes_per_second / 1e9, e.basis),
            None if rate.is_none() => "unknown (no RDMA port rate)".into(),
            None => "unknown (no target for this collective)".into(),
        };
        out.push(item(
            section,
            status,
            format!(
                "Measured: {:.1} GB/s vs expected {expected}; {} busbw, mean of {} collective(s) of at least {} MiB over up to {} nodes",
                b.mean_gbs,
                b.collective,
                b.samples,
                n.map_or(0, |n| n.busbw_min_bytes >> 20),
                b.largest_nnodes
            ),
        ));
    }
    if sum.busbw.is_empty() {
        out.push(item(
            section,
            Status::Unknown,
            format!(
                "Measured: no large multi-node collective in the window (bus bandwidth comes from the NCCL Inspector: \
                 NCCL_PROFILER_PLUGIN=<path>/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR={inspector_dir})"
            ),
        ));
    }
}

fn item(section: &'static str, status: Status, text: String) -> Item {
    Item {
        section,
        status,
        text,
    }
}

/// The worst severity of the findings that match, as a checklist status.
fn status_of<'a>(findings: impl Iterator<Item = &'a Finding>) -> Status {
    findings
        .map(|f| match f.severity {
            Severity::Critical => Status::Fail,
            Severity::Warning | Severity::Info => Status::Warn,
        })
        .min_by_key(|s| match s {
            Status::Fail => 0,
            Status::Warn => 1,
            _ => 2,
        })
        .unwrap_or(Status::Ok)
}

/// The topology when its collector ran and found GPUs; otherwise the item
/// that says why the section has nothing to check.
fn topology_with_gpus<'a>(
    s: &'a Snapshot,
    section: &'static str,
    without_gpu: &str,
    out: &mut Vec<Item>,
) -> Option<&'a roce_topology::TopologySnapshot> {
    let Some(t) = &s.topology else {
        out.push(item(
            section,
            Status::Unknown,
            "not checked: the topology collector did not run".into(),
        ));
        return None;
    };
    if t.gpus.is_empty() {
        out.push(item(
            section,
            Status::Unknown,
            format!("no GPU on this host: {without_gpu}"),
        ));
        return None;
    }
    Some(t)
}

fn gpudirect(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    let section = "GPUDirect RDMA";
    let Some(t) = topology_with_gpus(s, section, "GPUDirect RDMA does not apply", out) else {
        return;
    };
    let Some(g) = &t.gpudirect else {
        out.push(item(
            section,
            Status::Unknown,
            "not judged: no GPUDirect evidence was read".into(),
        ));
        return;
    };
    out.push(if g.peermem_ready() {
        item(section, Status::Ok, "nvidia_peermem: loaded".into())
    } else {
        item(
            section,
            Status::Unknown,
            "nvidia_peermem: not loaded".into(),
        )
    });
    let kernel = g
        .kernel
        .map(|(a, b)| format!("kernel {a}.{b}"))
        .unwrap_or_else(|| "kernel unknown".into());
    use roce_topology::gpudirect::NvidiaModule;
    let driver = match (g.nvidia_module, g.amdgpu_loaded) {
        (_, true) => "amdgpu",
        (NvidiaModule::Open, _) => "NVIDIA open kernel module",
        (NvidiaModule::Proprietary, _) => "proprietary NVIDIA kernel module",
        (NvidiaModule::Absent, _) => "no NVIDIA driver",
    };
    let verbs = g
        .libibverbs
        .as_ref()
        .map(|l| l.file.clone())
        .unwrap_or_else(|| "no libibverbs".into());
    let facts = format!("{kernel}, {driver}, {verbs}");
    out.push(if g.dmabuf_ready() {
        item(section, Status::Ok, format!("dma-buf: ready ({facts})"))
    } else {
        let mut unmet = Vec::new();
        if !g.kernel_supports_dmabuf() {
            unmet.push("kernel >= 5.12");
        }
        if !g.driver_exports_dmabuf() {
            unmet.push("the NVIDIA open kernel module or amdgpu");
        }
        if !g.rdma_core_supports_dmabuf() {
            unmet.push("libibverbs ABI >= 1.12 (rdma-core >= 34)");
        }
        item(
            section,
            Status::Unknown,
            format!("dma-buf: not usable ({facts}; needs {})", unmet.join(", ")),
        )
    });
    let mechanisms: Vec<&str> = [
        ("nvidia_peermem", g.peermem_ready()),
        ("dma-buf", g.dmabuf_ready()),
    ]
    .into_iter()
    .filter_map(|(m, ok)| ok.then_some(m))
    .collect();
    let verdicts: Vec<&Finding> = in_areas(findings, &[Area::GpuDirect]).collect();
    // Host-wide verdicts (drivers) first, then one line per GPU: where its
    // nearest NIC is, and the findings about it.
    for f in verdicts.iter().filter(|f| f.subject.gpu.is_none()) {
        out.push(item(
            section,
            status_of(std::iter::once(*f)),
            format!("verdict: {}", f.finding),
        ));
    }
    if mechanisms.is_empty() {
        if verdicts.is_empty() {
            out.push(item(section, Status::Ok, "verdict: no finding".into()));
        }
        return;
    }
    for g in rules::topology::gdr_per_gpu(t) {
        let Some(class) = g.class else {
            out.push(item(
                section,
                Status::Unknown,
                format!("verdict GPU {}: no RDMA NIC with a PCI function", g.gpu),
            ));
            continue;
        };
        let to = format!("GPU {} -> {} {}", g.gpu, g.nics.join("/"), class.as_str());
        let mine: Vec<&Finding> = verdicts
            .iter()
            .copied()
            .filter(|f| f.subject.gpu.and_then(|x| usize::try_from(x).ok()) == Some(g.gpu))
            .collect();
        if mine.is_empty() {
            out.push(item(
                section,
                Status::Ok,
                format!(
                    "verdict {to}: no finding (usable: {})",
                    mechanisms.join(", ")
                ),
            ));
        }
        for f in mine {
            out.push(item(
                section,
                status_of(std::iter::once(f)),
                format!("verdict {to}: {}", f.finding),
            ));
        }
    }
}

/// The lossless-Ethernet configuration of each RoCE netdev: MTU, PFC,
/// trust and DSCP map, ECN on the PFC priorities.
fn roce_config(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    use rules::fabric::{list, pfc_priorities, roce_mtu, roce_netdevs};
    let section = "RoCE netdev configuration";
    let netdevs = roce_netdevs(s);
    if netdevs.is_empty() {
        out.push(item(
            section,
            Status::Unknown,
            "no netdev of a RoCE port was read".into(),
        ));
        return;
    }
    for (n, subject) in netdevs {
        let mut parts = Vec::new();
        if let Some(mtu) = n.mtu {
            parts.push(format!("MTU {mtu} (RoCE MTU {})", roce_mtu(mtu)));
        }
        let mut pfc = Vec::new();
        match &n.dcb {
            DcbOutcome::Ok(c) => {
                if let Some(bits) = c.pfc_enabled {
                    pfc = pfc_priorities(bits);
                    parts.push(format!("PFC on priority {}", list(&pfc)));
                }
                let map = c.dscp_map();
                let trust = c.trust().as_str();
                if map.is_empty() {
                    parts.push(format!("trust {trust}"));
                } else {
                    parts.push(format!(
                        "trust {trust} (DSCP {})",
                        map.iter()
                            .map(|(d, p)| format!("{d}->{p}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
            DcbOutcome::Unsupported => parts.push("no DCB support".into()),
            DcbOutcome::Disabled => parts.push("DCB not read".into()),
            DcbOutcome::Failed(why) => parts.push(format!("DCB read failed ({why})")),
        }
        match &n.ecn {
            Some(e) if !pfc.is_empty() => {
                let role =
                    |entries: &[(u8, bool)], p: u8| match entries.iter().find(|(q, _)| *q == p) {
                        Some((_, true)) => "on",
                        Some((_, false)) => "off",
                        None => "absent",
                    };
                parts.push(
                    pfc.iter()
                        .map(|p| {
                            format!(
                                "ECN priority {p} np {} rp {}",
                                role(&e.np, *p),
                                role(&e.rp, *p)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                );
            }
            Some(_) => {}
            None => parts.push("ECN not readable here (no ecn/ folder)".into()),
        }
        let status = status_of(
            in_areas(findings, &[Area::NetdevConfig])
                .filter(|f| f.subject.device == subject.device && f.subject.port == subject.port),
        );
        // Nothing wrong found is not the same as checked: without DCB the
        // PFC and DSCP settings are unknown.
        let status = if status == Status::Ok && !matches!(n.dcb, DcbOutcome::Ok(_)) {
            Status::Unknown
        } else {
            status
        };
        out.push(item(
            section,
            status,
            format!("{}: {}", subject.describe(), parts.join(", ")),
        ));
    }
}

/// Each lossless (PFC) priority of each RoCE netdev: the NIC's PFC, the
/// switch port's (when DCBX gives it), DCQCN enable and parameters, its
/// traffic class, its buffer, and the DSCPs mapped to it on each side.
fn nic_vs_switch(s: &Snapshot, findings: &[Finding], rails_set: bool, out: &mut Vec<Item>) {
    use roce_netdev::dcb::{dcbx_mode_name, tsa_name};
    use rules::fabric::{pfc_priorities, roce_netdevs};
    let section = "NIC vs switch";
    for (n, subject) in roce_netdevs(s) {
        cabling(s, n, &subject, findings, rails_set, section, out);
        let DcbOutcome::Ok(c) = &n.dcb else { continue };
        let Some(bits) = c.pfc_enabled else { continue };
        let pfc = pfc_priorities(bits);
        let here = || {
            findings.iter().filter(|f| {
                f.subject.device == subject.device
                    && f.subject.port == subject.port
                    && [
                        RuleId::SwitchPfcMismatch,
                        RuleId::SwitchDscpMismatch,
                        RuleId::PfcWithoutEcn,
                        RuleId::LosslessBufferNoHeadroom,
                        RuleId::RoceTcShared,
                        RuleId::RoceTcNoBandwidth,
                    ]
                    .contains(&f.rule)
            })
        };
        if pfc.is_empty() {
            out.push(item(
                section,
                status_of(here().filter(|f| f.rule == RuleId::SwitchPfcMismatch)),
                format!(
                    "{}: no lossless priority (PFC off everywhere)",
                    subject.describe()
                ),
            ));
            continue;
        }
        let (peer, lldp_via) = rules::lldp::effective_peer(s, n, c);
        let dcbx = c.dcbx.map(dcbx_mode_name).unwrap_or("not reported");
        let peer_source = match &lldp_via {
            Some(via) => via.clone(),
            None => format!("DCBX {}", peer.standard.map(|s| s.as_str()).unwrap_or(dcbx)),
        };
        let nic_map = c.dscp_map();
        let peer_map = peer.dscp_map();
        for &p in &pfc {
            let mut parts = vec!["NIC PFC on".to_string()];
            parts.push(match peer.pfc_enabled {
                Some(sw) if sw & (1 << p) != 0 => format!("switch PFC on ({peer_source})"),
                Some(_) => format!("switch PFC OFF ({peer_source})"),
                None => format!("switch PFC not visible (DCBX {dcbx})"),
            });
            let role = |entries: &[(u8, bool)]| match entries.iter().find(|(q, _)| *q == p) {
                Some((_, true)) => "on",
                Some((_, false)) => "off",
                None => "absent",
            };
            match &n.ecn {
                Some(e) => parts.push(format!("DCQCN np {} rp {}", role(&e.np), role(&e.rp))),
                None => parts.push("DCQCN not readable".into()),
            }
            if !n.dcqcn.is_empty() {
                parts.push(format!(
                    "{} DCQCN parameters ({})",
                    n.dcqcn.len(),
                    n.dcqcn[0].source.as_str()
                ));
            }
            if let Some(ets) = &c.ets {
                let tc = ets.prio_tc[usize::from(p)];
                let tsa = ets.tc_tsa[usize::from(tc)];
                let share = if tsa == roce_netdev::dcb::TSA_ETS {
                    format!(" {}%", ets.tc_tx_bw[usize::from(tc)])
                } else {
                    String::new()
                };
                parts.push(format!("TC {tc} ({}{share})", tsa_name(tsa)));
            }
            if let Some(b) = &c.buffers {
                let buf = b.prio2buffer[usize::from(p)];
                parts.push(format!(
                    "buffer {buf} ({} bytes)",
                    b.buffer_size[usize::from(buf)]
                ));
            }
            let dscps = |map: &[(u8, u8)]| {
                let d: Vec<String> = map
                    .iter()
                    .filter(|(_, q)| *q == p)
                    .map(|(d, _)| d.to_string())
                    .collect();
                if d.is_empty() {
                    "none".to_string()
                } else {
                    d.join(",")
                }
            };
            parts.push(format!("DSCP NIC {}", dscps(&nic_map)));
            if let Some(m) = &peer_map {
                parts.push(format!("switch {}", dscps(m)));
            }
            let status = status_of(here().filter(|f| f.rule != RuleId::SwitchViewUnavailable));
            // Without the switch's view the comparison is not made.
            let status = if status == Status::Ok && peer.is_empty() {
                Status::Unknown
            } else {
                status
            };
            out.push(item(
                section,
                status,
                format!("{} priority {p}: {}", subject.describe(), parts.join(", ")),
            ));
        }
    }
}

/// The port's LLDP neighbour (when the LLDP source runs): the switch and
/// switch port it is cabled to and what the LLDP rules found.
fn cabling(
    s: &Snapshot,
    n: &roce_netdev::Netdev,
    subject: &rules::Subject,
    findings: &[Finding],
    rails_set: bool,
    section: &'static str,
    out: &mut Vec<Item>,
) {
    let Some(lldp) = &s.lldp else { return };
    let Some(p) = rules::lldp::lldp_port(s, &n.name) else {
        return;
    };
    let here = findings.iter().filter(|f| {
        f.subject.device == subject.device
            && f.subject.port == subject.port
            && [
                RuleId::LldpNeighborMissing,
                RuleId::LldpNeighborChanged,
                RuleId::LldpRailMismatch,
            ]
            .contains(&f.rule)
    });
    let line = match &p.neighbour {
        Some(pdu) => {
            let mut parts = vec![format!(
                "cabled to {} (chassis {}, LLDP via {})",
                rules::lldp::neighbour_name(pdu),
                pdu.chassis_id.value,
                lldp.via
            )];
            if let Some(f) = &pdu.pfc {
                let on = rules::fabric::pfc_priorities(f.enable);
                parts.push(format!("switch PFC on {}", rules::fabric::list(&on)));
            }
            if let Some(app) = &pdu.app {
                let dscp: Vec<String> = app
                    .iter()
                    .filter(|a| a.selector == roce_lldp::tlv::app_selector::DSCP)
                    .map(|a| format!("{}->{}", a.protocol, a.priority))
                    .collect();
                if !dscp.is_empty() {
                    parts.push(format!("switch DSCP {}", dscp.join(",")));
                }
            }
            let rail_wrong = findings.iter().any(|f| {
                f.rule == RuleId::LldpRailMismatch
                    && f.subject.device == subject.device
                    && f.subject.port == subject.port
            });
            parts.push(
                if rail_wrong {
                    "rail WRONG (lldp_rail_mismatch)"
                } else if rails_set {
                    "rail ok"
                } else {
                    "rail not judged (expect.rails unset)"
                }
                .to_string(),
            );
            parts.join(", ")
        }
        None => format!("no LLDP neighbour heard (LLDP via {})", lldp.via),
    };
    let status = status_of(here);
    let status = if status == Status::Ok && p.neighbour.is_none() {
        Status::Unknown
    } else {
        status
    };
    out.push(item(
        section,
        status,
        format!("{}: {line}", subject.describe()),
    ));
}

/// The counter rules (link errors, transport, congestion) per port: which
/// of them found something over the window.
fn counters(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    const AREAS: [Area; 3] = [Area::LinkErrors, Area::Transport, Area::Congestion];
    let section = "Counter rules over the window";
    let ports: Vec<_> = rules::ports::ports(s).collect();
    if ports.is_empty() {
        out.push(item(
            section,
            Status::Unknown,
            "no RDMA port: nothing to check".into(),
        ));
        return;
    }
    for (d, p) in ports {
        let subject = rules::ports::subject(d, p).describe();
        let found: Vec<&Finding> = on_port(findings, &d.name, p.number)
            .filter(|f| AREAS.contains(&area(f)))
            .collect();
        // Nothing found is not the same as judged: a port without counters
        // gave the rules nothing to read.
        let read = !p.counters.is_empty() || !p.hw_counters.is_empty();
        let (status, text) = match (found.is_empty(), read) {
            (true, true) => (Status::Ok, format!("{subject}: no finding")),
            (true, false) => (
                Status::Unknown,
                format!("{subject}: no port counters were read"),
            ),
            (false, _) => (
                status_of(found.iter().copied()),
                format!("{subject}: {} (below)", rule_list(found.iter().copied())),
            ),
        };
        out.push(item(section, status, text));
    }
}

fn topology(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    use roce_topology::AcsState;
    let section = "Topology";
    let Some(t) = topology_with_gpus(s, section, "no GPU-NIC placement to check", out) else {
        return;
    };
    for gpu in &t.gpus {
        let nearest = t.nearest_nics(gpu.index);
        let Some(first) = nearest.first() else {
            out.push(item(
                section,
                Status::Unknown,
                format!(
                    "GPU {} ({}): no RDMA NIC with a PCI function",
                    gpu.index, gpu.address
                ),
            ));
            continue;
        };
        let nics = nearest
            .iter()
            .map(|p| p.nic.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let gpu_id = u32::try_from(gpu.index).ok();
        let status = status_of(
            in_areas(findings, &[Area::GpuPlacement, Area::Acs])
                .filter(|f| f.subject.gpu == gpu_id),
        );
        out.push(item(
            section,
            status,
            format!(
                "GPU {} ({}) -> nearest NIC {nics}: {}",
                gpu.index,
                gpu.address,
                first.class.as_str()
            ),
        ));
    }
    if !t.acs.is_empty() {
        let count = |st: AcsState| t.acs.iter().filter(|a| a.state == st).count();
        let (on, off, none, unknown) = (
            count(AcsState::RedirectEnabled),
            count(AcsState::RedirectDisabled),
            count(AcsState::NoAcs),
            count(AcsState::Unknown),
        );
        let text = format!(
            "ACS P2P redirect on the {} bridge(s) between GPUs and their nearest NICs: {on} enabled, {off} disabled, {none} without ACS, {unknown} unknown{}",
            t.acs.len(),
            if unknown > 0 { " (config space beyond 64 bytes needs CAP_SYS_ADMIN)" } else { "" }
        );
        let status = match status_of(in_areas(findings, &[Area::Acs])) {
            Status::Ok if unknown > 0 => Status::Unknown,
            found => found,
        };
        out.push(item(section, status, text));
    }
    if !t.links.is_empty() {
        let down = in_areas(findings, &[Area::PcieLink]).count();
        out.push(item(
            section,
            status_of(in_areas(findings, &[Area::PcieLink])),
            format!(
                "PCIe links of GPUs and NICs: {} checked, {down} below what both ends support",
                t.links.len()
            ),
        ));
    }
}

/// The human-readable checklist.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "roce_exporter check: two samples {}s apart\n",
        rules::ports::fmt_num(report.window_seconds)
    ));
    let mut section = "";
    for item in &report.checklist {
        if item.section != section {
            section = item.section;
            out.push_str(&format!("\n{section}\n"));
        }
        out.push_str(&format!("  {} {}\n", item.status.mark(), item.text));
    }
    let critical = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Critical)
        .count();
    let warning = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    out.push_str(&format!(
        "\nFindings: {critical} critical, {warning} warning, {} info\n",
        report.findings.len() - critical - warning
    ));
    for f in &report.findings {
        out.push_str(&format!(
            "  [{}] {}: {}\n",
            f.severity.as_str(),
            f.rule,
            f.finding
        ));
        out.push_str(&format!("      Measured: {}\n", f.evidence));
        out.push_str(&format!("      Fix:      {}\n", f.fix));
        out.push_str(&format!("      Verify:   {}\n", f.verify));
    }
    out.push_str("\nNCCL settings (only where NCCL's default is wrong on this host)\n");
    if report.nccl.is_empty() {
        out.push_str("  none that the data read here can judge (NCCL's defaults apply)\n");
    }
    for n in &report.nccl {
        let line = match n.action {
            "export" => format!("export {}={}", n.name, n.value),
            "choose" => format!("{}={} (choose)", n.name, n.value),
            _ => format!("{}: {}", n.name, n.value),
        };
        out.push_str(&format!("  {line}    # {}\n", n.reason));
    }
    out
}
