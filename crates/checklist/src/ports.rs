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
/// of them found something over the window, and the load the window had:
/// without it, "nothing grew" is no verdict on transport and congestion.
pub(crate) fn counters(history: &[&Snapshot], findings: &[Finding], out: &mut Vec<Item>) {
    const AREAS: [Area; 3] = [Area::LinkErrors, Area::Transport, Area::Congestion];
    let section = "Counter rules over the window";
    let Some(s) = history.last() else { return };
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
        let load = rules::ports::load(history, &d.name, p.number);
        // The window's own length varies with the sampling: the rate says
        // how busy it was.
        let moved = load.map(|l| {
            if l.bytes == 0 {
                "0 B moved".to_string()
            } else {
                format!(
                    "{} moved, {}/s",
                    bytes_text(l.bytes as f64),
                    bytes_text(l.per_second())
                )
            }
        });
        let (status, text) = match (found.is_empty(), read, load) {
            (true, false, _) => (
                Status::Unknown,
                format!("{subject}: no port counters were read"),
            ),
            (true, true, Some(l)) if l.loaded() => (
                Status::Ok,
                format!("{subject}: no finding; load {}", moved.unwrap_or_default()),
            ),
            (true, true, Some(_)) => (
                Status::Unknown,
                format!(
                    "{subject}: no load in the window ({}): transport and congestion counters had nothing to judge; link errors: no finding",
                    moved.unwrap_or_default()
                ),
            ),
            (true, true, None) => (
                Status::Unknown,
                format!("{subject}: no finding, load not known (no data counters over two samples)"),
            ),
            (false, _, _) => (
                status_of(found.iter().copied()),
                format!(
                    "{subject}: {} (below){}",
                    rule_list(found.iter().copied()),
                    moved.map_or(String::new(), |m| format!("; load {m}"))
                ),
            ),
        };
        out.push(item(section, status, text));
    }
}

/// `12.3 GB`, `512 B`: decimal units, as link rates are counted.
fn bytes_text(b: f64) -> String {
    const UNITS: [(&str, f64); 4] = [("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)];
    for (u, f) in UNITS {
        if b >= f {
            return format!("{:.1} {u}", b / f);
        }
    }
    format!("{b:.0} B")
}
