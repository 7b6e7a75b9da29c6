//! From NCCL's (net, device) of a connection to the NIC, port and
//! transport it names, and label-safe values.

use super::*;

pub(super) fn resolve(p: &Process, net: &str, dev: u32) -> (String, u16, Transport) {
    if net == "Socket" {
        let name = p
            .sockets
            .get(&dev)
            .cloned()
            .unwrap_or_else(|| "unknown".to_string());
        return (name, 0, Transport::Socket);
    }
    // The HPC-X net plugin (nccl-rdma-sharp-plugins, `src/p2p_plugin.c`)
    // prints its device table as `NET/IB : Using ...` but names itself
    // `IBext` / `IBext_vN` on the connection lines: an `IBext` connection
    // without a table of its own takes the `IB` one (and the other way).
    let table = p.nets.get(net).or_else(|| {
        if net.starts_with("IBext") {
            p.nets.get("IB").or_else(|| {
                p.nets
                    .iter()
                    .find(|(k, _)| k.starts_with("IBext"))
                    .map(|(_, t)| t)
            })
        } else if net == "IB" {
            p.nets
                .iter()
                .find(|(k, _)| k.starts_with("IBext"))
                .map(|(_, t)| t)
        } else {
            None
        }
    });
    match table.and_then(|t| t.get(&dev)) {
        Some(d) => {
            let device = d
                .members
                .iter()
                .map(|m| m.device.as_str())
                .collect::<Vec<_>>()
                .join("+");
            let port = d.members.first().map_or(0, |m| m.port);
            let link = d.members.first().map(|m| m.link);
            (label_safe(&device), port, transport_of(net, link))
        }
        None => ("unknown".to_string(), 0, transport_of(net, None)),
    }
}

/// `IB` and the IB-derived plugins (`IBext`, `IBext_v8`) are verbs: the
/// link layer of the device decides IB or RoCE.
pub(super) fn transport_of(net: &str, link: Option<NcclLinkLayer>) -> Transport {
    if net == "Socket" {
        return Transport::Socket;
    }
    if net == "IB" || net.starts_with("IBext") {
        return match link {
            Some(NcclLinkLayer::Ib) => Transport::Ib,
            Some(NcclLinkLayer::Roce) => Transport::Roce,
            _ => Transport::Other,
        };
    }
    Transport::Other
}

/// A label value: at most 64 characters of a conservative set; anything
/// else becomes `_`.
pub fn label_safe(s: &str) -> String {
    s.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | ':' | ' ' | '/') {
                c
            } else {
                '_'
            }
        })
        .collect()
}
