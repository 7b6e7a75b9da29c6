//! `roce_exporter check`: one-shot fabric checklist. Samples twice over a
//! window, runs the rules, and prints what is right, what is wrong with Fix
//! and Verify lines, and the NCCL settings this host needs (only those it
//! can justify from what it read). Same sources and rules as the server.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_netdev::{DcbOutcome, Direction, Meaning};
use roce_rdma::LinkLayer;
use serde::Serialize;

use crate::config::{Config, Expectations};
use crate::host::HostPaths;
use crate::rules::{self, Finding, Severity};
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

/// Takes two samples `window` apart and builds the report. `progress`
/// shows a countdown on stderr while waiting (only on a terminal).
pub fn run(
    config: &Config,
    paths: &HostPaths,
    window: Duration,
    progress: bool,
) -> Result<Report, String> {
    let mut sampler = Sampler::new(sources::all(config, paths), config);
    let first = sampler.sample();
    if let Some(failed) = first
        .source("rdma")
        .filter(|s| matches!(s.state, SourceState::Failed(_)))
    {
        return Err(format!(
            "the rdma collector failed: {}",
            failed.state.detail().unwrap_or("")
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
        gpudirect(s, &mut checklist);
        roce_config(s, &findings, &mut checklist);
        congestion(history, s, &findings, &mut checklist);
        topology(s, &findings, &mut checklist);
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
        out.push(Item {
            section,
            status: Status::Fail,
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
        let port_status = status_of(findings.iter().filter(|f| {
            f.subject.device.as_deref() == Some(d.name.as_str()) && f.subject.port == Some(p.number)
        }));
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
        let status = if !p.is_up() {
            Status::Fail
        } else {
            port_status
        };
        out.push(Item {
            section,
            status,
            text,
        });
    }
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

fn gpudirect(s: &Snapshot, out: &mut Vec<Item>) {
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
    if mechanisms.is_empty() {
        out.push(item(
            section,
            Status::Fail,
            "verdict: unavailable: NCCL stages GPU data through host memory".into(),
        ));
        return;
    }
    // The verdict is per GPU: NCCL uses GPUDirect RDMA only where the
    // nearest NIC is within its default level too.
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
        out.push(if g.path_ok() {
            item(
                section,
                Status::Ok,
                format!("verdict {to}: ready ({})", mechanisms.join(", ")),
            )
        } else {
            item(
                section,
                Status::Warn,
                format!(
                    "verdict {to}: not used (NCCL uses GPUDirect RDMA up to {} by default, NCCL_NET_GDR_LEVEL): data staged through host memory",
                    rules::topology::NCCL_DEFAULT_GDR_LEVEL.as_str()
                ),
            )
        });
    }
}

/// Increase of a value over the whole history (first sample to last).
fn moved(history: &[Arc<Snapshot>], read: impl Fn(&Snapshot) -> Option<u64>) -> Option<u64> {
    rules::window::increase_over(history.iter().filter_map(|s| Some((s.clock()?, read(s)?))))
        .map(|i| i.amount)
}

fn sum_opt(values: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
    values.into_iter().flatten().reduce(u64::saturating_add)
}

const CONGESTION_RULES: [&str; 5] = [
    "pfc_storm",
    "discards_growing",
    "cnp_spike",
    "ecn_spike",
    "out_of_buffer",
];

const CONFIG_RULES: [&str; 5] = [
    "pfc_without_ecn",
    "pfc_priority_mismatch",
    "roce_trust_pcp",
    "cnp_priority_best_effort",
    "mtu_below_jumbo",
];

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
        let status = status_of(findings.iter().filter(|f| {
            CONFIG_RULES.contains(&f.rule)
                && f.subject.device == subject.device
                && f.subject.port == subject.port
        }));
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

fn congestion(history: &[Arc<Snapshot>], s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    use crate::meaning::{port_hw_value, HwMeaning};
    use rules::fabric::{find_netdev, stat_value};
    let section = "Congestion counters over the window";
    let ports: Vec<_> = rules::ports::ports(s)
        .filter(|(_, p)| matches!(p.link_layer, Some(LinkLayer::Ethernet)))
        .collect();
    if ports.is_empty() {
        out.push(item(
            section,
            Status::Unknown,
            "no RoCE port: nothing to check".into(),
        ));
        return;
    }
    for (d, p) in ports {
        let (dn, pn) = (d.name.as_str(), p.number);
        let port =
            |s: &Snapshot| rules::ports::find_port(s, dn, pn).map(|(d, p)| (d.clone(), p.clone()));
        let hw = |m: HwMeaning| {
            moved(history, |s| {
                port(s).and_then(|(d, p)| port_hw_value(&d, &p, m))
            })
        };
        // Traffic: PMA data counters (units of 4 octets) or rxe's packet
        // counters.
        let traffic = sum_opt([
            moved(history, |s| port(s)?.1.counter("port_xmit_data")),
            moved(history, |s| port(s)?.1.counter("port_rcv_data")),
        ])
        .map(|words| format!("{} bytes", words.saturating_mul(4)))
        .or_else(|| {
            sum_opt([
                moved(history, |s| port(s)?.1.hw_counter("sent_pkts")),
                moved(history, |s| port(s)?.1.hw_counter("rcvd_pkts")),
            ])
            .map(|n| format!("{n} packets"))
        });
        let traffic_moved = traffic.as_deref().is_some_and(|t| !t.starts_with("0 "));
        let mut parts = Vec::new();
        let mut grew_total = 0u64;
        let netdev = p.netdev.as_deref().and_then(|n| find_netdev(s, n));
        if let Some(n) = netdev {
            let name = n.name.as_str();
            let nd = |m: Meaning| moved(history, |s| stat_value(find_netdev(s, name)?, m));
            let pfc: Vec<u8> = match &n.dcb {
                DcbOutcome::Ok(c) => c
                    .pfc_enabled
                    .map(rules::fabric::pfc_priorities)
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            for prio in 0..8u8 {
                let frames = |direction| {
                    nd(Meaning::PfcPauseFrames {
                        priority: prio,
                        direction,
                    })
                };
                let (rx, tx) = (frames(Direction::Rx), frames(Direction::Tx));
                if rx.is_none() && tx.is_none() {
                    continue;
                }
                let grew = rx.unwrap_or(0).saturating_add(tx.unwrap_or(0)) > 0;
                if !pfc.contains(&prio) && !grew {
                    continue;
                }
                let paused = sum_opt([
                    nd(Meaning::PfcPauseDuration {
                        priority: prio,
                        direction: Direction::Rx,
                    }),
                    nd(Meaning::PfcPauseDuration {
                        priority: prio,
                        direction: Direction::Tx,
                    }),
                ])
                .inspect(|us| grew_total = grew_total.saturating_add(*us))
                .map(|us| format!(", {}s paused", rules::ports::fmt_num(us as f64 / 1e6)))
                .unwrap_or_default();
                grew_total = grew_total
                    .saturating_add(rx.unwrap_or(0))
                    .saturating_add(tx.unwrap_or(0));
                parts.push(format!(
                    "PFC pause priority {prio} rx +{} tx +{}{paused}",
                    rx.unwrap_or(0),
                    tx.unwrap_or(0)
                ));
            }
            let storms = sum_opt(n.stats.iter().filter_map(|st| match st.meaning {
                m @ Meaning::PauseStormEvents { .. } => Some(nd(m)),
                _ => None,
            }));
            if let Some(v) = storms {
                grew_total = grew_total.saturating_add(v);
                parts.push(format!("storm events +{v}"));
            }
            let discards = sum_opt(n.stats.iter().filter_map(|st| match st.meaning {
                m @ Meaning::Discards { priority: None, .. } => Some(nd(m)),
                _ => None,
            }));
            if let Some(v) = discards {
                grew_total = grew_total.saturating_add(v);
                parts.push(format!("discards +{v}"));
            }
            let marked = sum_opt(n.stats.iter().filter_map(|st| match st.meaning {
                m @ Meaning::EcnMarked { .. } => Some(nd(m)),
                _ => None,
            }));
            if let Some(v) = marked {
                grew_total = grew_total.saturating_add(v);
                parts.push(format!("ECN-marked (netdev) +{v}"));
            }
        }
        if let Some(v) = hw(HwMeaning::EcnMarked) {
            grew_total = grew_total.saturating_add(v);
            parts.push(format!("ECN-marked RoCE +{v}"));
        }
        let (sent, handled) = (hw(HwMeaning::CnpSent), hw(HwMeaning::CnpHandled));
        if sent.is_some() || handled.is_some() {
            grew_total = grew_total
                .saturating_add(sent.unwrap_or(0))
                .saturating_add(handled.unwrap_or(0));
            parts.push(format!(
                "CNP sent +{} handled +{}",
                sent.unwrap_or(0),
                handled.unwrap_or(0)
            ));
        }
        if let Some(v) = hw(HwMeaning::OutOfBuffer) {
            grew_total = grew_total.saturating_add(v);
            parts.push(format!("out_of_buffer +{v}"));
        }
        let subject = format!(
            "{dn} port {pn}{}",
            p.netdev
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
        if parts.is_empty() {
            out.push(item(
                section,
                Status::Unknown,
                format!("{subject}: no congestion counters were read (ethtool, DCB and hw counters absent or off)"),
            ));
            continue;
        }
        let related = findings.iter().filter(|f| {
            CONGESTION_RULES.contains(&f.rule)
                && f.subject.device.as_deref() == Some(dn)
                && f.subject.port == Some(pn)
        });
        let status = status_of(related);
        let load = match (&traffic, traffic_moved) {
            (Some(t), true) => format!("under load: traffic {t}"),
            (Some(_), false) => "no RoCE traffic in the window: not a test under load (rerun while a job runs, or with a longer --window)".into(),
            (None, _) => "traffic unknown (no data counters): not known to be under load".into(),
        };
        let quiet = if grew_total == 0 {
            "counters did not move; "
        } else {
            ""
        };
        let status = if status == Status::Ok && !traffic_moved {
            Status::Unknown
        } else {
            status
        };
        out.push(item(
            section,
            status,
            format!("{subject}: {}; {quiet}{load}", parts.join(", ")),
        ));
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
        let status = status_of(findings.iter().filter(|f| {
            matches!(
                f.rule,
                "gpu_nic_path_far" | "gpudirect_not_used" | "acs_on_gpu_nic_path"
            ) && f.subject.gpu == gpu_id
        }));
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
        let status = if on > 0 {
            Status::Fail
        } else if unknown > 0 {
            Status::Unknown
        } else {
            Status::Ok
        };
        out.push(item(section, status, text));
    }
    if !t.links.is_empty() {
        let down = findings
            .iter()
            .filter(|f| f.rule == "pcie_downtrained")
            .count();
        out.push(item(
            section,
            if down > 0 { Status::Warn } else { Status::Ok },
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
