//! The RDMA ports: their state and transport, and the counter rules over the window.

use roce_model::snapshot::Snapshot;
use roce_rdma::LinkLayer;
use roce_rules::{self as rules, Area, Finding};

use crate::{area, item, on_port, rule_list, status_of, Item, Status};

pub(crate) fn transport(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
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
            status: status.checked(false),
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

/// The counter rules (link errors, transport, congestion) per port: which
/// of them found something over the window.
pub(crate) fn counters(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
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
