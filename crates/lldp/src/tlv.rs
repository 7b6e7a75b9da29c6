//! IEEE 802.1AB LLDPDU decoding, with the IEEE 802.1 (PVID) and 802.3
//! (maximum frame size) organizationally specific TLVs and the IEEE 802.1Qaz
//! DCBX TLVs (ETS configuration, ETS recommendation, PFC configuration,
//! application priority).
//!
//! The checks follow lldpd's decoder (`src/daemon/protocols/lldp.c`,
//! `lldp_decode`): the destination is one of the three LLDP multicast
//! addresses, the ethertype is 0x88cc, Chassis ID, Port ID and TTL come
//! first in that order and once each, ID TLVs carry 2 to 256 octets and a
//! subtype 1..=7, the End TLV has length 0 and must be present, and a TLV
//! that runs past the frame rejects the frame. The 802.1Qaz layouts are
//! those Wireshark's dissector reads (`packet-lldp.c`,
//! `dissect_ieee_802_1_tlv`, subtypes 0x9..0xC): a DCBX TLV of the wrong
//! length is dropped alone (counted), the rest of the frame is kept.
//!
//! Everything decoded from the wire is bounded: the frame
//! ([`MAX_FRAME`]), text ([`MAX_TEXT`] bytes, control characters replaced),
//! management addresses ([`MAX_MGMT`]) and APP entries ([`MAX_APP`]).

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use roce_host::Priorities;

/// The LLDP ethertype.
pub const ETH_P_LLDP: u16 = 0x88cc;
/// The largest frame decoded (a jumbo frame); larger ones are rejected.
pub const MAX_FRAME: usize = 9216;
/// The most bytes kept of any text TLV or ID.
pub const MAX_TEXT: usize = 255;
/// The most management addresses kept per neighbour.
pub const MAX_MGMT: usize = 4;
/// The most APP priority entries kept per neighbour.
pub const MAX_APP: usize = 64;

/// The LLDP destination addresses lldpd accepts (nearest bridge, nearest
/// non-TPMR bridge, nearest customer bridge).
pub const LLDP_MULTICAST: [[u8; 6]; 3] = [
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x03],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x00],
];

/// TLV types of IEEE 802.1AB.
pub mod tlv_type {
    pub const END: u8 = 0;
    pub const CHASSIS_ID: u8 = 1;
    pub const PORT_ID: u8 = 2;
    pub const TTL: u8 = 3;
    pub const PORT_DESCR: u8 = 4;
    pub const SYSTEM_NAME: u8 = 5;
    pub const SYSTEM_DESCR: u8 = 6;
    pub const SYSTEM_CAP: u8 = 7;
    pub const MGMT_ADDR: u8 = 8;
    pub const ORG: u8 = 127;
}

/// The IEEE 802.1 OUI (PVID, and the 802.1Qaz DCBX TLVs).
pub const OUI_DOT1: [u8; 3] = [0x00, 0x80, 0xc2];
/// The IEEE 802.3 OUI (maximum frame size).
pub const OUI_DOT3: [u8; 3] = [0x00, 0x12, 0x0f];

/// IEEE 802.1 subtypes decoded here.
pub mod dot1 {
    pub const PVID: u8 = 1;
    pub const ETS_CONFIGURATION: u8 = 9;
    pub const ETS_RECOMMENDATION: u8 = 10;
    pub const PFC_CONFIGURATION: u8 = 11;
    pub const APPLICATION_PRIORITY: u8 = 12;
}
/// IEEE 802.3 subtype of the maximum frame size TLV.
pub const DOT3_MFS: u8 = 4;

/// APP selector values (IEEE 802.1Q; the kernel's `IEEE_8021QAZ_APP_SEL_*`).
pub mod app_selector {
    pub const ETHERTYPE: u8 = 1;
    pub const STREAM: u8 = 2;
    pub const DGRAM: u8 = 3;
    pub const ANY: u8 = 4;
    pub const DSCP: u8 = 5;
}

/// A chassis or port identifier: its subtype and its value rendered as
/// lldpd renders it (MAC as `aa:bb:..`, network address as an IP, names
/// as text, anything else as colon-separated hex).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    pub subtype: u8,
    pub value: String,
}

/// ETS configuration or recommendation (802.1Qaz).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdvertisedEts {
    /// Willing bit (configuration TLV only; false in a recommendation).
    pub willing: bool,
    /// Credit-based shaper supported (configuration TLV only).
    pub cbs: bool,
    /// Maximum traffic classes, 1..=8 (the wire's 0 means 8); 0 in a
    /// recommendation, which carries none.
    pub max_tcs: u8,
    /// Traffic class of each priority 0..7.
    pub prio_tc: [u8; 8],
    /// Bandwidth percent of each traffic class 0..7.
    pub tc_bw: [u8; 8],
    /// Transmission selection algorithm of each traffic class
    /// (0 strict, 1 CBS, 2 ETS, 255 vendor).
    pub tsa: [u8; 8],
}

/// PFC configuration (802.1Qaz).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pfc {
    pub willing: bool,
    /// MACsec bypass capability.
    pub mbc: bool,
    /// PFC capability: how many traffic classes may have PFC enabled.
    pub cap: u8,
    /// The priorities with PFC on (the TLV's enable bitmap).
    pub enable: Priorities,
}

/// One APP priority entry (802.1Qaz): `protocol` (an ethertype, port or,
/// with selector 5, a DSCP) maps to `priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AppEntry {
    pub selector: u8,
    pub protocol: u16,
    pub priority: u8,
}

/// One decoded LLDPDU. TLVs the frame did not carry stay `None`/empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lldpdu {
    pub chassis_id: Id,
    pub port_id: Id,
    /// Seconds the information stays valid; 0 announces shutdown.
    pub ttl: u16,
    pub port_description: Option<String>,
    pub system_name: Option<String>,
    pub system_description: Option<String>,
    /// Management addresses (IPv4/IPv6), at most [`MAX_MGMT`].
    pub management_addresses: Vec<String>,
    pub pvid: Option<u16>,
    pub max_frame_size: Option<u16>,
    pub ets_configuration: Option<AdvertisedEts>,
    pub ets_recommendation: Option<AdvertisedEts>,
    pub pfc: Option<Pfc>,
    /// APP priority table, `None` when the TLV was absent (an empty table
    /// is `Some(vec![])`); at most [`MAX_APP`] entries.
    pub app: Option<Vec<AppEntry>>,
    /// TLVs skipped: unknown types and org TLVs not decoded here.
    pub skipped_tlvs: u32,
    /// Decoded org TLVs dropped for a length that does not fit their layout.
    pub malformed_org_tlvs: u32,
}

/// Why a frame was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes is shorter than an Ethernet header")]
    TooShort(usize),
    #[error("frame of {0} bytes is larger than {MAX_FRAME}")]
    TooLong(usize),
    #[error("destination is not an LLDP multicast address")]
    NotLldpDestination,
    #[error("ethertype {0:#06x} is not LLDP")]
    NotLldp(u16),
    #[error("TLV header truncated at offset {0}")]
    TruncatedHeader(usize),
    #[error("TLV type {tlv_type} at offset {offset} claims {len} bytes, {left} left")]
    TruncatedTlv {
        tlv_type: u8,
        offset: usize,
        len: usize,
        left: usize,
    },
    #[error("TLV type {0} out of order (chassis ID, port ID, TTL come first)")]
    OutOfOrder(u8),
    #[error("TLV type {0} repeated")]
    Duplicate(u8),
    #[error("TLV type {tlv_type} has invalid length {len}")]
    BadLength { tlv_type: u8, len: usize },
    #[error("ID TLV type {tlv_type} has invalid subtype {subtype}")]
    BadSubtype { tlv_type: u8, subtype: u8 },
    #[error("mandatory TLV missing (chassis ID, port ID, TTL or End)")]
    MissingMandatory,
}

/// Decodes a whole Ethernet frame (destination, source, ethertype, LLDPDU).
pub fn parse_frame(frame: &[u8]) -> Result<Lldpdu, FrameError> {
    if frame.len() > MAX_FRAME {
        return Err(FrameError::TooLong(frame.len()));
    }
    if frame.len() < 14 {
        return Err(FrameError::TooShort(frame.len()));
    }
    if !LLDP_MULTICAST.iter().any(|m| frame[..6] == m[..]) {
        return Err(FrameError::NotLldpDestination);
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    if ethertype != ETH_P_LLDP {
        return Err(FrameError::NotLldp(ethertype));
    }
    parse_pdu(&frame[14..])
}

/// Decodes an LLDPDU (the bytes after the ethertype).
pub fn parse_pdu(pdu: &[u8]) -> Result<Lldpdu, FrameError> {
    if pdu.len() > MAX_FRAME {
        return Err(FrameError::TooLong(pdu.len()));
    }
    let mut out = Lldpdu::default();
    let (mut got_chassis, mut got_port, mut got_ttl, mut got_end) = (false, false, false, false);
    let mut off = 0usize;
    let mut count = 0usize;
    while off < pdu.len() {
        let Some(hdr) = pdu.get(off..off + 2) else {
            return Err(FrameError::TruncatedHeader(off));
        };
        let header = u16::from_be_bytes([hdr[0], hdr[1]]);
        let tlv_type = (header >> 9) as u8;
        let len = usize::from(header & 0x1ff);
        let start = off + 2;
        let Some(value) = pdu.get(start..start + len) else {
            return Err(FrameError::TruncatedTlv {
                tlv_type,
                offset: off,
                len,
                left: pdu.len() - start,
            });
        };
        off = start + len;
        count += 1;
        // The first three TLVs are chassis ID, port ID and TTL, in order.
        let expected = match count {
            1 => Some(tlv_type::CHASSIS_ID),
            2 => Some(tlv_type::PORT_ID),
            3 => Some(tlv_type::TTL),
            _ => None,
        };
        match expected {
            Some(want) if want != tlv_type => return Err(FrameError::OutOfOrder(tlv_type)),
            None if matches!(
                tlv_type,
                tlv_type::CHASSIS_ID | tlv_type::PORT_ID | tlv_type::TTL
            ) =>
            {
                return Err(FrameError::Duplicate(tlv_type))
            }
            _ => {}
        }
        match tlv_type {
            tlv_type::END => {
                if len != 0 {
                    return Err(FrameError::BadLength { tlv_type, len });
                }
                got_end = true;
                break;
            }
            tlv_type::CHASSIS_ID | tlv_type::PORT_ID => {
                if !(2..=256).contains(&len) {
                    return Err(FrameError::BadLength { tlv_type, len });
                }
                let subtype = value[0];
                if subtype == 0 || subtype > 7 {
                    return Err(FrameError::BadSubtype { tlv_type, subtype });
                }
                let id = Id {
                    subtype,
                    value: render_id(tlv_type, subtype, &value[1..]),
                };
                if tlv_type == tlv_type::CHASSIS_ID {
                    out.chassis_id = id;
                    got_chassis = true;
                } else {
                    out.port_id = id;
                    got_port = true;
                }
            }
            tlv_type::TTL => {
                if len < 2 {
                    return Err(FrameError::BadLength { tlv_type, len });
                }
                out.ttl = u16::from_be_bytes([value[0], value[1]]);
                got_ttl = true;
            }
            tlv_type::PORT_DESCR | tlv_type::SYSTEM_NAME | tlv_type::SYSTEM_DESCR => {
                if len == 0 {
                    continue;
                }
                let text = Some(sanitize_text(value));
                match tlv_type {
                    tlv_type::PORT_DESCR => out.port_description = text,
                    tlv_type::SYSTEM_NAME => out.system_name = text,
                    _ => out.system_description = text,
                }
            }
            tlv_type::SYSTEM_CAP => {
                if len < 4 {
                    return Err(FrameError::BadLength { tlv_type, len });
                }
            }
            tlv_type::MGMT_ADDR => decode_mgmt(value, &mut out)?,
            tlv_type::ORG => {
                if len < 4 {
                    return Err(FrameError::BadLength { tlv_type, len });
                }
                let oui = [value[0], value[1], value[2]];
                decode_org(oui, value[3], &value[4..], &mut out);
            }
            _ => out.skipped_tlvs = out.skipped_tlvs.saturating_add(1),
        }
    }
    if !(got_chassis && got_port && got_ttl && got_end) {
        return Err(FrameError::MissingMandatory);
    }
    Ok(out)
}

/// The management address TLV: string length (subtype + address), address
/// subtype (IANA family: 1 IPv4, 2 IPv6), address, interface numbering
/// subtype and number, OID. Other families are skipped.
fn decode_mgmt(value: &[u8], out: &mut Lldpdu) -> Result<(), FrameError> {
    let bad = || FrameError::BadLength {
        tlv_type: tlv_type::MGMT_ADDR,
        len: value.len(),
    };
    let str_len = usize::from(*value.first().ok_or_else(bad)?);
    if !(1..=32).contains(&str_len) || value.len() < 1 + str_len + 5 {
        return Err(bad());
    }
    let family = value[1];
    let addr = &value[2..1 + str_len];
    let text = match (family, addr.len()) {
        (1, 4) => Some(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]).to_string()),
        (2, 16) => {
            let mut b = [0u8; 16];
            b.copy_from_slice(addr);
            Some(Ipv6Addr::from(b).to_string())
        }
        _ => None,
    };
    if let Some(text) = text {
        if out.management_addresses.len() < MAX_MGMT && !out.management_addresses.contains(&text) {
            out.management_addresses.push(text);
        }
    }
    Ok(())
}

/// Decodes one organizationally specific TLV's information string (after
/// OUI and subtype) into `out`: the 802.1 PVID and DCBX TLVs and the
/// 802.3 maximum frame size. Others are counted as skipped. Shared with the
/// lldpd reader, which hands over lldpd's undecoded ("unknown") TLVs.
pub fn decode_org(oui: [u8; 3], subtype: u8, info: &[u8], out: &mut Lldpdu) {
    let ok = match (oui, subtype) {
        (OUI_DOT1, dot1::PVID) => match info {
            [a, b, ..] => {
                out.pvid = Some(u16::from_be_bytes([*a, *b]));
                true
            }
            _ => false,
        },
        (OUI_DOT3, DOT3_MFS) => match info {
            [a, b, ..] => {
                out.max_frame_size = Some(u16::from_be_bytes([*a, *b]));
                true
            }
            _ => false,
        },
        (OUI_DOT1, dot1::ETS_CONFIGURATION) => match decode_ets(info, true) {
            Some(ets) => {
                out.ets_configuration.get_or_insert(ets);
                true
            }
            None => false,
        },
        (OUI_DOT1, dot1::ETS_RECOMMENDATION) => match decode_ets(info, false) {
            Some(ets) => {
                out.ets_recommendation.get_or_insert(ets);
                true
            }
            None => false,
        },
        (OUI_DOT1, dot1::PFC_CONFIGURATION) => match info {
            [flags, enable] => {
                out.pfc.get_or_insert(Pfc {
                    willing: flags & 0x80 != 0,
                    mbc: flags & 0x40 != 0,
                    cap: flags & 0x0f,
                    enable: Priorities::from_bits(*enable),
                });
                true
            }
            _ => false,
        },
        (OUI_DOT1, dot1::APPLICATION_PRIORITY) => decode_app(info, out),
        _ => {
            out.skipped_tlvs = out.skipped_tlvs.saturating_add(1);
            true
        }
    };
    if !ok {
        out.malformed_org_tlvs = out.malformed_org_tlvs.saturating_add(1);
    }
}

/// ETS: one octet of flags (configuration: willing 0x80, CBS 0x40, max TCs
/// 0x07; recommendation: reserved), the priority assignment table (4
/// octets, a nibble per priority, priority 0 in the high nibble), the TC
/// bandwidth table (8 octets) and the TSA table (8 octets): 21 octets.
fn decode_ets(info: &[u8], configuration: bool) -> Option<AdvertisedEts> {
    if info.len() != 21 {
        return None;
    }
    let flags = info[0];
    let mut prio_tc = [0u8; 8];
    for (i, tc) in prio_tc.iter_mut().enumerate() {
        let byte = info[1 + i / 2];
        *tc = if i % 2 == 0 { byte >> 4 } else { byte & 0x0f };
    }
    let mut tc_bw = [0u8; 8];
    tc_bw.copy_from_slice(&info[5..13]);
    let mut tsa = [0u8; 8];
    tsa.copy_from_slice(&info[13..21]);
    let (willing, cbs, max_tcs) = if configuration {
        let n = flags & 0x07;
        (
            flags & 0x80 != 0,
            flags & 0x40 != 0,
            if n == 0 { 8 } else { n },
        )
    } else {
        (false, false, 0)
    };
    Some(AdvertisedEts {
        willing,
        cbs,
        max_tcs,
        prio_tc,
        tc_bw,
        tsa,
    })
}

/// APP: one reserved octet, then 3-octet entries: priority (3 high bits),
/// reserved (2 bits), selector (3 low bits), protocol ID (2 octets).
fn decode_app(info: &[u8], out: &mut Lldpdu) -> bool {
    let Some((_, entries)) = info.split_first() else {
        return false;
    };
    if entries.len() % 3 != 0 {
        return false;
    }
    if out.app.is_some() {
        // A second APP TLV: the first one stands.
        return true;
    }
    let mut app = Vec::with_capacity((entries.len() / 3).min(MAX_APP));
    for e in entries.chunks_exact(3).take(MAX_APP) {
        let entry = AppEntry {
            priority: e[0] >> 5,
            selector: e[0] & 0x07,
            protocol: u16::from_be_bytes([e[1], e[2]]),
        };
        if !app.contains(&entry) {
            app.push(entry);
        }
    }
    out.app = Some(app);
    true
}

/// Renders an ID value as lldpd does: MAC subtypes (chassis 4, port 3) as
/// `aa:bb:cc:dd:ee:ff`, network address subtypes (chassis 5, port 4) as
/// an IP, printable text as text, anything else as colon-separated hex.
fn render_id(tlv: u8, subtype: u8, raw: &[u8]) -> String {
    let raw = &raw[..raw.len().min(MAX_TEXT)];
    let is_mac =
        (tlv == tlv_type::CHASSIS_ID && subtype == 4) || (tlv == tlv_type::PORT_ID && subtype == 3);
    let is_addr =
        (tlv == tlv_type::CHASSIS_ID && subtype == 5) || (tlv == tlv_type::PORT_ID && subtype == 4);
    if is_mac && raw.len() == 6 {
        return hex(raw);
    }
    if is_addr {
        match (raw.first(), raw.len()) {
            (Some(1), 5) => return Ipv4Addr::new(raw[1], raw[2], raw[3], raw[4]).to_string(),
            (Some(2), 17) => {
                let mut b = [0u8; 16];
                b.copy_from_slice(&raw[1..]);
                return Ipv6Addr::from(b).to_string();
            }
            _ => return hex(raw),
        }
    }
    match std::str::from_utf8(raw) {
        Ok(s) if !s.is_empty() && s.chars().all(|c| !c.is_control()) => s.to_string(),
        _ => hex(raw),
    }
}

fn hex(raw: &[u8]) -> String {
    let mut s = String::with_capacity(raw.len() * 3);
    for (i, b) in raw.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Text from the wire: lossy UTF-8, control characters replaced by `?`,
/// trailing NULs and whitespace dropped, at most [`MAX_TEXT`] bytes (cut
/// on a character boundary).
pub fn sanitize_text(raw: &[u8]) -> String {
    let raw = &raw[..raw.len().min(MAX_TEXT)];
    let text = String::from_utf8_lossy(raw);
    let mut s: String = text
        .trim_end_matches(|c: char| c == '\0' || c.is_whitespace())
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if s.len() > MAX_TEXT {
        let mut cut = MAX_TEXT;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ets_nibbles_put_priority_zero_high() {
        let mut info = vec![0x08, 0x01, 0x23, 0x45, 0x67];
        info.extend_from_slice(&[10, 20, 30, 40, 0, 0, 0, 0]);
        info.extend_from_slice(&[2, 2, 2, 2, 0, 0, 0, 0]);
        let ets = decode_ets(&info, true).unwrap();
        assert_eq!(ets.prio_tc, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(ets.max_tcs, 8);
        assert!(!ets.willing);
    }

    #[test]
    fn sanitize_replaces_controls_and_bounds() {
        assert_eq!(sanitize_text(b"leaf\x1b[31m01\0\0"), "leaf?[31m01");
        let long = "é".repeat(400);
        let s = sanitize_text(long.as_bytes());
        assert!(s.len() <= MAX_TEXT);
        assert!(s.chars().all(|c| c == 'é'));
    }
}
