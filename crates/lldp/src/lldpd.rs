//! lldpd's neighbours, from `lldpcli -f json0 show neighbors details`.
//!
//! The `json0` format is lldpd's stable JSON (`src/client/json_writer.c`
//! without the cleanup pass): every tag is an array of objects, a tag's
//! text is under `"value"`, attributes are strings or, for yes/no/on/off,
//! booleans. Per neighbour (`display_interface` in `src/client/display.c`):
//! `interface[].name/via/rid/age`, `chassis[0].id[0].{type,value}`,
//! `chassis[0].name/descr/mgmt-ip[].value`, `port[0].id[0].{type,value}`,
//! `port[0].descr/ttl/mfs[0].value`, `vlan[].{vlan-id,pvid}` and, since lldpd
//! does not decode the 802.1Qaz TLVs, `unknown-tlvs[0].unknown-tlv[]`
//! with `oui` ("00,80,C2"), `subtype`, `len` and `value` (the information
//! string as comma-separated hex), which [`crate::tlv::decode_org`] decodes
//! as it decodes them from a frame.
//!
//! The document is bounded ([`MAX_DOCUMENT`] bytes, [`MAX_NEIGHBOURS`]
//! neighbours) and every string goes through the same sanitizer as the
//! wire's. Only LLDP neighbours are kept (lldpd also speaks CDP, EDP, ...).

use serde_json::Value;

use crate::tlv::{decode_org, sanitize_text, Id, Lldpdu, MAX_MGMT};

/// The largest document read.
pub const MAX_DOCUMENT: usize = 4 << 20;
/// The most neighbours read from one document.
pub const MAX_NEIGHBOURS: usize = 1024;
/// The TTL taken for a listed neighbour without one (seconds).
pub const DEFAULT_TTL: u16 = 120;
/// The most custom TLVs read per neighbour.
pub const MAX_CUSTOM_TLVS: usize = 64;

/// One neighbour lldpd reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LldpdNeighbour {
    /// The local interface it was heard on.
    pub interface: String,
    pub pdu: Lldpdu,
    /// Seconds since lldpd last saw this neighbour's information change
    /// (lldpd's `age`), when it parsed.
    pub age_seconds: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum LldpdError {
    #[error("lldpcli output of {0} bytes is larger than {MAX_DOCUMENT}")]
    TooLarge(usize),
    #[error("lldpcli output is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("lldpcli output has no \"lldp\" array (not json0?)")]
    Shape,
}

/// Parses the whole output of `lldpcli -f json0 show neighbors details`.
pub fn parse_json0(doc: &[u8]) -> Result<Vec<LldpdNeighbour>, LldpdError> {
    if doc.len() > MAX_DOCUMENT {
        return Err(LldpdError::TooLarge(doc.len()));
    }
    let root: Value = serde_json::from_slice(doc)?;
    let lldp = root
        .get("lldp")
        .and_then(Value::as_array)
        .ok_or(LldpdError::Shape)?;
    let mut out = Vec::new();
    for block in lldp {
        let Some(interfaces) = block.get("interface").and_then(Value::as_array) else {
            continue;
        };
        for iface in interfaces {
            if out.len() >= MAX_NEIGHBOURS {
                return Ok(out);
            }
            if let Some(n) = neighbour(iface) {
                out.push(n);
            }
        }
    }
    Ok(out)
}

fn neighbour(iface: &Value) -> Option<LldpdNeighbour> {
    if iface.get("via").and_then(Value::as_str) != Some("LLDP") {
        return None;
    }
    let interface = sanitize_text(iface.get("name")?.as_str()?.as_bytes());
    let chassis = first(iface, "chassis")?;
    let port = first(iface, "port")?;
    let chassis_id = id(first(chassis, "id")?, true)?;
    let port_id = id(first(port, "id")?, false)?;
    // lldpd lists only live neighbours and prints no TTL when it is 0; a
    // neighbour it lists is never a shutdown, so a missing TTL is taken as
    // IEEE 802.1AB's default (30 s x 4).
    let ttl = text(port, "ttl")
        .and_then(|t| t.parse::<u16>().ok())
        .filter(|t| *t > 0)
        .unwrap_or(DEFAULT_TTL);
    let mut pdu = Lldpdu {
        chassis_id,
        port_id,
        ttl,
        port_description: text(port, "descr"),
        system_name: text(chassis, "name"),
        system_description: text(chassis, "descr"),
        max_frame_size: text(port, "mfs").and_then(|t| t.parse().ok()),
        ..Lldpdu::default()
    };
    if let Some(mgmt) = chassis.get("mgmt-ip").and_then(Value::as_array) {
        for m in mgmt.iter().take(MAX_MGMT) {
            if let Some(v) = m.get("value").and_then(Value::as_str) {
                pdu.management_addresses.push(sanitize_text(v.as_bytes()));
            }
        }
    }
    if let Some(vlans) = iface.get("vlan").and_then(Value::as_array) {
        pdu.pvid = vlans
            .iter()
            .find(|v| v.get("pvid").and_then(Value::as_bool) == Some(true))
            .and_then(|v| v.get("vlan-id")?.as_str()?.parse().ok());
    }
    if let Some(custom) = first(iface, "unknown-tlvs")
        .and_then(|u| u.get("unknown-tlv"))
        .and_then(Value::as_array)
    {
        for tlv in custom.iter().take(MAX_CUSTOM_TLVS) {
            let (Some(oui), Some(subtype)) = (
                tlv.get("oui").and_then(Value::as_str).and_then(hex_bytes),
                tlv.get("subtype")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<u8>().ok()),
            ) else {
                pdu.malformed_org_tlvs = pdu.malformed_org_tlvs.saturating_add(1);
                continue;
            };
            let info = match tlv.get("value").and_then(Value::as_str) {
                Some(v) => match hex_bytes(v) {
                    Some(b) => b,
                    None => {
                        pdu.malformed_org_tlvs = pdu.malformed_org_tlvs.saturating_add(1);
                        continue;
                    }
                },
                None => Vec::new(),
            };
            let [a, b, c] = oui[..] else {
                pdu.malformed_org_tlvs = pdu.malformed_org_tlvs.saturating_add(1);
                continue;
            };
            decode_org([a, b, c], subtype, &info, &mut pdu);
        }
    }
    let age_seconds = iface.get("age").and_then(Value::as_str).and_then(parse_age);
    Some(LldpdNeighbour {
        interface,
        pdu,
        age_seconds,
    })
}

/// The first object of a json0 tag array.
fn first<'a>(v: &'a Value, tag: &str) -> Option<&'a Value> {
    v.get(tag)?.as_array()?.first()
}

/// The text of a json0 tag (`tag[0].value`), sanitized.
fn text(v: &Value, tag: &str) -> Option<String> {
    let s = first(v, tag)?.get("value")?.as_str()?;
    Some(sanitize_text(s.as_bytes()))
}

/// An ID from its lldpd type name (`chassis_id_subtype_map` and
/// `port_id_subtype_map` in `src/lib/atoms/`) and rendered value.
fn id(v: &Value, chassis: bool) -> Option<Id> {
    let value = sanitize_text(v.get("value")?.as_str()?.as_bytes());
    let subtype = match (v.get("type").and_then(Value::as_str)?, chassis) {
        ("ifalias", true) => 2,
        ("mac", true) => 4,
        ("ip", true) => 5,
        ("ifname", true) => 6,
        ("local", true) => 7,
        ("ifalias", false) => 1,
        ("mac", false) => 3,
        ("ip", false) => 4,
        ("ifname", false) => 5,
        ("local", false) => 7,
        _ => 0,
    };
    Some(Id { subtype, value })
}

/// `"00,80,C2"` to bytes; at most 512 (an org TLV's information string
/// fits in 507).
fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    if s.len() > 512 * 3 {
        return None;
    }
    s.split(',')
        .map(|h| {
            if h.len() == 2 {
                u8::from_str_radix(h, 16).ok()
            } else {
                None
            }
        })
        .collect()
}

/// lldpd's age, `"%d day%s, %02d:%02d:%02d"` (`display_age`), in seconds.
pub fn parse_age(s: &str) -> Option<u64> {
    let (days, clock) = s.split_once(", ")?;
    let days: u64 = days.split_once(' ')?.0.parse().ok()?;
    let mut parts = clock.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, sec) = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() || m >= 60 || sec >= 60 {
        return None;
    }
    days.checked_mul(86_400)?
        .checked_add(h.checked_mul(3600)?)?
        .checked_add(m * 60 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_as_lldpd_prints_it() {
        assert_eq!(parse_age("0 day, 00:00:33"), Some(33));
        assert_eq!(parse_age("2 days, 01:02:03"), Some(2 * 86400 + 3723));
        assert_eq!(parse_age("too much"), None);
        assert_eq!(parse_age("1 day, 00:61:00"), None);
    }

    #[test]
    fn listed_neighbour_without_ttl_is_alive() {
        let doc = br#"{"lldp":[{"interface":[{"name":"eth0","via":"LLDP","chassis":[{"id":[{"type":"mac","value":"00:00:00:00:00:02"}]}],"port":[{"id":[{"type":"ifname","value":"swp1"}]}]}]}]}"#;
        let n = parse_json0(doc).unwrap();
        assert_eq!(n[0].pdu.ttl, DEFAULT_TTL);
        assert_eq!(n[0].age_seconds, None);
    }

    #[test]
    fn hex_strings() {
        assert_eq!(hex_bytes("00,80,C2"), Some(vec![0, 0x80, 0xc2]));
        assert_eq!(hex_bytes("0,80"), None);
        assert_eq!(hex_bytes("zz"), None);
    }
}
