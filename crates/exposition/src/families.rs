//! The list of every family the exporter can expose, and the metric
//! reference (`docs/metrics.md`) generated from it.

use super::{Family, MetricKind};

/// Every family table, in the order the reference lists them.
pub fn all() -> Vec<(&'static str, Vec<&'static Family>)> {
    vec![
        ("Exporter", super::exporter::FAMILIES.iter().collect()),
        (
            "Exporter process (Prometheus' standard names, from /proc/self)",
            super::process::FAMILIES.iter().collect(),
        ),
        (
            "RDMA devices, ports and GIDs",
            super::rdma::FAMILIES.iter().collect(),
        ),
        (
            "RDMA port counters (`counters/`)",
            super::rdma::port_counter_families().collect(),
        ),
        (
            "RDMA hardware counters with known meaning",
            super::hw_counters::families(),
        ),
        (
            "Congestion and lossless Ethernet (netdevs)",
            super::netdev::FAMILIES.iter().collect(),
        ),
        (
            "Physical layer and device health",
            super::phys::FAMILIES.iter().collect(),
        ),
        (
            "GPU-NIC topology",
            super::topology::FAMILIES.iter().collect(),
        ),
        ("Verbs probes", super::probes::FAMILIES.iter().collect()),
        (
            "Probes between hosts (`peer_probes:`)",
            super::peer_probes::FAMILIES.iter().collect(),
        ),
        (
            "NCCL (what jobs used, from their logs and Inspector output)",
            super::nccl::FAMILIES.iter().collect(),
        ),
        (
            "LLDP neighbours and the switch's DCBX view (`lldp:`)",
            super::lldp::FAMILIES.iter().collect(),
        ),
        (
            "Load test (`check --load`, `load_test:`)",
            super::load_test::FAMILIES.iter().collect(),
        ),
        (
            "Findings (rules; details at /findings)",
            super::findings::FAMILIES.iter().collect(),
        ),
    ]
}

/// The family whose exposed name is `name`.
pub fn find(name: &str) -> Option<&'static Family> {
    all()
        .into_iter()
        .flat_map(|(_, t)| t.into_iter())
        .find(|f| f.exposed_name() == name)
}

/// Markdown metric reference, generated from the family tables.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    out.push_str("# Metric reference\n\n");
    out.push_str(
        "Generated from the family tables in `crates/exposition/src/` by \
         `cargo run -- docs metrics > docs/metrics.md`; a test fails when this file is stale.\n\
         Every value is sampled every `sample_interval` (default 5 s); a scrape only encodes the latest sample.\n\n",
    );
    for (section, families) in all() {
        if families.is_empty() {
            continue;
        }
        out.push_str(&format!("## {section}\n\n"));
        out.push_str(
            "| name | type | labels | unit | source | judged by | help |\n|---|---|---|---|---|---|---|\n",
        );
        for f in &families {
            let kind = match f.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            let unit = f.unit.map(|u| u.as_str()).unwrap_or("");
            let labels = f.labels.join(", ");
            let name = f.exposed_name();
            let judges = crate::rules::reads::judged_by(&name);
            let judged = if judges.is_empty() {
                "not judged".to_string()
            } else {
                judges
                    .iter()
                    .map(|r| format!("[{r}](runbook.md#{r})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {} | {} |\n",
                name,
                kind,
                labels,
                unit,
                f.source.replace('|', "\\|"),
                judged,
                f.help.replace('|', "\\|")
            ));
        }
        out.push('\n');
        if section.starts_with("RDMA hardware counters") {
            out.push_str(&super::hw_counters::reference_markdown());
            out.push('\n');
        }
        if section.starts_with("Congestion and lossless Ethernet") {
            out.push_str(&super::netdev::reference_markdown());
            out.push('\n');
        }
    }
    out.push_str(&super::groups::budget_markdown());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_a_rule_reads_is_exposed() {
        for rule in crate::rules::RuleId::ALL {
            for family in crate::rules::reads::reads(*rule) {
                assert!(
                    find(family).is_some(),
                    "{rule} reads {family}, which is not exposed"
                );
            }
        }
    }

    #[test]
    fn drift_entries_name_exposed_families_and_their_labels() {
        for d in crate::rules::table::DRIFT {
            let family =
                find(d.family).unwrap_or_else(|| panic!("{}: no family {}", d.config, d.family));
            for label in d.per.iter().chain(d.values) {
                assert!(
                    family.labels.contains(label),
                    "{}: {} has no label {label}",
                    d.config,
                    d.family
                );
            }
        }
    }
}
