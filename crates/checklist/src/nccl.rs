//! NCCL: the settings this host needs and what jobs used: the transport and
//! GPUDirect RDMA each NIC saw, the rails the jobs used, the bandwidth
//! measured against the node's (one `Measured:` line per measurement,
//! whatever its source), and nccl-tests' own check of its results. Each
//! status is the finding of a rule about the line, or "not judged".

use roce_model::snapshot::Snapshot;
use roce_nccl::aggregate::{NcclSummary, Transport};
use roce_rules::settings::Expectations;
use roce_rules::{self as rules, Finding, RuleId};

use crate::{item, status_of, Item, NcclSetting, Status};

/// The NCCL settings, each with NCCL's default judged on this host
/// ([`rules::nccl_advice::advice`]).
pub(crate) fn nccl_settings(s: &Snapshot, expect: &Expectations) -> Vec<NcclSetting> {
    use rules::nccl_advice::NcclValue;
    rules::nccl_advice::advice(s, expect)
        .into_iter()
        .map(|a| {
            let (action, value) = match a.value {
                NcclValue::Set(v) => ("export", v),
                NcclValue::Choose(v) => ("choose", v),
                NcclValue::Unset(v) => ("unset", v),
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

const SECTION: &str = "NCCL (what jobs used)";

/// What NCCL jobs used (the `nccl` source), in the reference's answer
/// format: `Transport seen: {IB|RoCEv2|RoCE v1|Socket} GDR: {on|off}` per
/// transport and GDR state, `Measured: <busbw> GB/s vs expected <GB/s>`
/// per measurement; without data, where to point NCCL.
pub(crate) fn nccl_seen(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    let n = s.nccl.as_ref();
    let log_dir = n
        .and_then(|n| n.log_dir.as_ref())
        .map_or("<dir>".to_string(), |d| d.display().to_string());
    let inspector_dir = n
        .and_then(|n| n.inspector_dir.as_ref())
        .map_or("<dir>".to_string(), |d| d.display().to_string());
    let (n, sum) = match n {
        Some(n) if n.summary.has_data() => (n, &n.summary),
        _ => {
            let how = if n.is_some() {
                "no NCCL data in the window"
            } else {
                "no NCCL data (the nccl source is off)"
            };
            out.push(item(
                SECTION,
                Status::Unknown,
                format!(
                    "{how}: run jobs with NCCL_DEBUG=INFO NCCL_DEBUG_FILE={log_dir}/nccl.%h.%p.log (nccl-tests: save their output there too) and the NCCL Inspector \
                     (NCCL_PROFILER_PLUGIN=<path>/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1 \
                     NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=30000000 NCCL_INSPECTOR_DUMP_DIR={inspector_dir}), \
                     and set nccl: {{enabled: true, log_dir: {log_dir}, inspector_dir: {inspector_dir}}}"
                ),
            ));
            return;
        }
    };
    transport_seen(s, sum, findings, out);
    rails_used(s, sum, findings, out);
    measured(s, n, findings, out, &inspector_dir);
    tests_results(sum, findings, out);
}

/// The findings of `rule` about any of `nics` (`mlx5_0 port 1`).
fn about<'a>(
    findings: &'a [Finding],
    rule: RuleId,
    nics: &'a [String],
) -> impl Iterator<Item = &'a Finding> + 'a {
    findings.iter().filter(move |f| {
        f.rule == rule
            && f.subject.device.as_ref().is_some_and(|d| {
                nics.iter()
                    .any(|n| n.split([' ', '+']).next() == Some(d.as_str()))
            })
    })
}

/// A status from findings, or "not judged" where the rule that judges the
/// line made none (it was turned off, or its inputs were missing).
fn judged<'a>(found: impl Iterator<Item = &'a Finding>, ok: bool) -> Status {
    let found: Vec<&Finding> = found.collect();
    if found.is_empty() {
        if ok {
            Status::Ok
        } else {
            Status::Unknown
        }
    } else {
        status_of(found.into_iter())
    }
}

fn transport_seen(s: &Snapshot, sum: &NcclSummary, findings: &[Finding], out: &mut Vec<Item>) {
    let gids = rules::nccl_seen::gid::roce_gids(s);
    // (transport name, gdr) -> NICs, and how the RoCE version is known.
    let mut seen: std::collections::BTreeMap<(String, bool), (Vec<String>, Vec<String>)> =
        std::collections::BTreeMap::new();
    for r in &sum.connections {
        let k = &r.key;
        let (name, basis) = match k.transport {
            Transport::Ib => ("IB".to_string(), None),
            Transport::Roce => {
                let g = gids.iter().find(|g| {
                    k.device.split('+').next() == Some(g.device.as_str())
                        && g.port == u32::from(k.port)
                });
                match g {
                    Some(g) => (g.transport_name().to_string(), Some(g.basis_text())),
                    None => ("RoCE (GID not known)".to_string(), None),
                }
            }
            Transport::Socket => ("Socket".to_string(), None),
            Transport::Other => (k.net.clone(), None),
        };
        let nic = if k.port == 0 {
            k.device.clone()
        } else {
            format!("{} port {}", k.device, k.port)
        };
        let e = seen.entry((name, k.gdr)).or_default();
        if !e.0.contains(&nic) {
            e.0.push(nic);
        }
        if let Some(b) = basis {
            if !e.1.contains(&b) {
                e.1.push(b);
            }
        }
    }
    let versions = if sum.versions.is_empty() {
        String::new()
    } else {
        format!("; NCCL {}", sum.versions.join(", "))
    };
    let socket_findings = || {
        findings
            .iter()
            .filter(|f| f.rule == RuleId::NcclSocketTransport)
    };
    if seen.is_empty() {
        if rules::nccl_seen::transport::on_socket(sum) {
            let why = socket_findings()
                .next()
                .map(|f| f.finding.clone())
                .unwrap_or_else(|| "not judged: nccl_socket_transport made no finding".into());
            out.push(item(
                SECTION,
                judged(socket_findings(), false),
                format!(
                    "Transport seen: Socket GDR: off (no connection line yet; {why}{versions})"
                ),
            ));
        } else {
            out.push(item(
                SECTION,
                Status::Unknown,
                format!(
                    "Transport seen: none (no NET connection in the window; networks chosen: {}{versions})",
                    if sum.networks.is_empty() { "none".to_string() } else { sum.networks.join(", ") }
                ),
            ));
        }
    }
    // NICs with a GDRDMA connection: their connections without it are the
    // send side where NCCL does not use GDR reads (nccl_gdr_not_used).
    let with_gdr: Vec<String> = seen
        .iter()
        .filter(|((name, gdr), _)| *gdr && name != "Socket")
        .flat_map(|(_, (nics, _))| nics.iter().cloned())
        .collect();
    for ((name, gdr), (nics, bases)) in &seen {
        let status = if name == "Socket" {
            judged(socket_findings(), false)
        } else {
            let gid = about(findings, RuleId::NcclGidNotRocev2, nics);
            let gdr_off = about(findings, RuleId::NcclGdrNotUsed, nics);
            let found: Vec<&Finding> = if *gdr {
                gid.collect()
            } else {
                gid.chain(gdr_off).collect()
            };
            // GDR off is a verdict of nccl_gdr_not_used; without one it is
            // not judged, unless the same NICs use GDR on other
            // connections.
            let ok = *gdr || nics.iter().all(|n| with_gdr.contains(n));
            judged(found.into_iter(), ok)
        };
        let basis = if bases.is_empty() {
            String::new()
        } else {
            format!("; {}", bases.join("; "))
        };
        out.push(item(
            SECTION,
            status,
            format!(
                "Transport seen: {name} GDR: {} ({}{basis}{versions})",
                if *gdr { "on" } else { "off" },
                nics.join(", ")
            ),
        ));
    }
}

fn rails_used(s: &Snapshot, sum: &NcclSummary, findings: &[Finding], out: &mut Vec<Item>) {
    if sum.job.ib_ports.is_empty() {
        return;
    }
    let Some(rails) = rules::nccl_seen::rails::rails(s, sum).filter(|r| r.from_topology) else {
        return;
    };
    let listed = |d: &str, p: u32| {
        sum.job
            .ib_ports
            .iter()
            .any(|x| x.device == d && u32::from(x.port) == p)
    };
    let used: Vec<&str> = rails
        .ports
        .iter()
        .filter(|p| listed(&p.device, p.port))
        .map(|p| p.device.as_str())
        .collect();
    let hca = sum
        .job
        .setting("NCCL_IB_HCA")
        .map_or(String::new(), |v| format!("; NCCL_IB_HCA={v}"));
    out.push(item(
        SECTION,
        judged(
            findings
                .iter()
                .filter(|f| f.rule == RuleId::NcclRailsUnused),
            true,
        ),
        format!(
            "Rails in NCCL's device table: {} of the {} rails of the job's GPUs ({}{hca})",
            used.len(),
            rails.ports.len(),
            if used.is_empty() {
                "none".to_string()
            } else {
                used.join(", ")
            }
        ),
    ));
}

fn measured(
    s: &Snapshot,
    n: &roce_model::nccl::NcclSnapshot,
    findings: &[Finding],
    out: &mut Vec<Item>,
    inspector_dir: &str,
) {
    let all = rules::measured::measurements(n);
    if all.is_empty() {
        out.push(item(
            SECTION,
            Status::Unknown,
            format!(
                "Measured: no large multi-node collective in the window (bus bandwidth comes from the NCCL Inspector: \
                 NCCL_PROFILER_PLUGIN=<path>/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR={inspector_dir}, \
                 or from nccl-tests' output saved into nccl.log_dir; the fabric's own RDMA bandwidth per rail: roce_exporter check --load)"
            ),
        ));
        return;
    }
    for m in all {
        let expected = rules::measured::expected_for(s, &m);
        let exp = match &expected {
            Some(e) => format!("{:.1} GB/s", e.bytes_per_second / 1e9),
            None => "unknown".to_string(),
        };
        let (status, why) = match (&m.not_judged, &expected) {
            (Some(why), _) => (Status::Unknown, format!("; not judged: {why}")),
            (None, None) => (
                Status::Unknown,
                "; not judged: no RDMA port rate, or no target for this collective".to_string(),
            ),
            (None, Some(e)) => (
                judged(
                    findings.iter().filter(|f| {
                        f.rule == RuleId::NcclBusbwBelowLineRate
                            && f.finding.starts_with(&m.finding_prefix())
                    }),
                    true,
                ),
                format!("; expected: {}", e.basis),
            ),
        };
        out.push(item(
            SECTION,
            status,
            format!(
                "Measured: {:.1} GB/s vs expected {exp} ({} {} busbw: {}{why})",
                m.gbs,
                m.source.as_str(),
                m.collective,
                m.what
            ),
        ));
    }
}

fn tests_results(sum: &NcclSummary, findings: &[Finding], out: &mut Vec<Item>) {
    for t in &sum.job.tests {
        let r = &t.run;
        if r.rows == 0 {
            continue;
        }
        let wrong = findings.iter().filter(|f| {
            f.rule == RuleId::NcclTestsWrong
                && f.evidence
                    .starts_with(&format!("{} run {} ", t.file, t.index + 1))
        });
        let validated = r.validation != Some(false);
        out.push(item(
            SECTION,
            judged(wrong, validated),
            format!(
                "Results of {} ({}, run {}): #wrong {} in {} row(s){}",
                r.program.as_deref().unwrap_or("nccl-tests"),
                t.file,
                t.index + 1,
                r.wrong,
                r.rows,
                match (validated, r.out_of_bounds) {
                    (false, _) => ", not validated (nccl-tests ran with -c 0)".to_string(),
                    (true, Some(o)) => format!(", Out of bounds values {o}"),
                    (true, None) => ", footer not read yet".to_string(),
                }
            ),
        ));
    }
}
