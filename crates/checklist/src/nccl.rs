//! NCCL: the settings this host needs and what jobs used.

use roce_model::snapshot::Snapshot;
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
pub(crate) fn nccl_seen(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
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
