//! The payload of the datagrams peer probes exchange, and the rules that
//! keep a responder from ever being turned into a packet loop or a weapon.
//!
//! Three messages share one 40-byte header (big-endian), padded with zeros
//! to the probe's size; nothing else is carried (no host data):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `RPRB` |
//! | 4 | wire version (2) |
//! | 5 | kind: 1 probe, 2 echo, 3 challenge |
//! | 6..8 | zero |
//! | 8..12 | the prober's nonce (random per prober start) |
//! | 12..16 | the probe's sequence number |
//! | 16..24 | the sender's incarnation (random per exporter start) |
//! | 24..28 | echo only: the responder's hold time in ns (receive completion to the echo's post) |
//! | 28..32 | zero |
//! | 32..40 | the cookie: in a probe, the one the probed responder gave this prober (0: none yet); in an echo or a challenge, the responder's current cookie for the prober |
//!
//! A cookie is the responder's keyed hash of the prober's GID and QPN
//! ([`crate::peer_admit::CookieSecret`], as DNS cookies and QUIC's retry
//! token): only the holder of that address receives it, so a probe that
//! carries it proves its sender receives at the (GID, QPN) it claims. A
//! responder echoes proven probes only; an admitted sender without a valid
//! cookie gets a challenge (the header alone, smaller than any probe)
//! within a small total budget, and the prober sends its probe again with
//! the cookie.
//!
//! Only a probe is ever answered. An echo and a challenge are answers and
//! are never answered themselves, so two responders that are sent a forged
//! probe naming each other exchange at most one message, whatever nonce it
//! carries. A datagram without the magic, of another kind, or shorter than
//! the header is foreign; one of another wire version is counted apart
//! (`wire_version`: a fleet of mixed versions says so); both are dropped,
//! never answered.

/// `RPRB`: a datagram without it is not a peer probe.
pub const MAGIC: [u8; 4] = *b"RPRB";
/// The format of this module; another version is dropped and counted as
/// such.
pub const WIRE_VERSION: u8 = 2;
/// Bytes of the header; the smallest valid message.
pub const HEADER_LEN: usize = 40;

/// What a datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// A prober asks for an echo.
    Probe = 1,
    /// A responder's answer to a proven probe (its cookie valid).
    Echo = 2,
    /// A responder's answer to a probe from an admitted sender without a
    /// valid cookie: the cookie to probe with (the header only).
    Challenge = 3,
}

/// The header of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    pub kind: MessageKind,
    pub nonce: u32,
    pub seq: u32,
    /// The incarnation of the exporter that sent this message.
    pub incarnation: u64,
    /// Echo only: how long the responder held the probe, ns.
    pub hold_ns: u32,
    /// See the module doc (0: none).
    pub cookie: u64,
}

/// Why a datagram is not a message of this format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Foreign {
    #[error("shorter than the {HEADER_LEN}-byte header")]
    Short,
    #[error("no RPRB magic")]
    Magic,
    #[error("wire version {0} (this exporter speaks {WIRE_VERSION})")]
    Version(u8),
    #[error("unknown message kind {0}")]
    Kind(u8),
}

impl Message {
    /// A probe with these fields, carrying `cookie` (0: none yet).
    pub fn probe(nonce: u32, seq: u32, incarnation: u64, cookie: u64) -> Message {
        Message {
            kind: MessageKind::Probe,
            nonce,
            seq,
            incarnation,
            hold_ns: 0,
            cookie,
        }
    }

    /// The header as bytes.
    pub fn header(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC);
        h[4] = WIRE_VERSION;
        h[5] = self.kind as u8;
        h[8..12].copy_from_slice(&self.nonce.to_be_bytes());
        h[12..16].copy_from_slice(&self.seq.to_be_bytes());
        h[16..24].copy_from_slice(&self.incarnation.to_be_bytes());
        h[24..28].copy_from_slice(&self.hold_ns.to_be_bytes());
        h[32..40].copy_from_slice(&self.cookie.to_be_bytes());
        h
    }

    /// The message padded with zeros to `size` bytes (at least the header).
    pub fn encode(&self, size: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(size.max(HEADER_LEN));
        v.extend_from_slice(&self.header());
        v.resize(size.max(HEADER_LEN), 0);
        v
    }

    /// Reads the header of a received datagram. The version is read before
    /// the length, so that a shorter message of another version is told
    /// as such.
    pub fn decode(b: &[u8]) -> Result<Message, Foreign> {
        if b.len() < 6 {
            return Err(Foreign::Short);
        }
        if b[0..4] != MAGIC {
            return Err(Foreign::Magic);
        }
        if b[4] != WIRE_VERSION {
            return Err(Foreign::Version(b[4]));
        }
        let h: &[u8; HEADER_LEN] = b
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(Foreign::Short)?;
        let kind = match h[5] {
            1 => MessageKind::Probe,
            2 => MessageKind::Echo,
            3 => MessageKind::Challenge,
            k => return Err(Foreign::Kind(k)),
        };
        let word = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let long = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&h[i..i + 8]);
            u64::from_be_bytes(x)
        };
        Ok(Message {
            kind,
            nonce: word(8),
            seq: word(12),
            incarnation: long(16),
            hold_ns: word(24),
            cookie: long(32),
        })
    }

    /// The echo a responder of `incarnation` sends to this proven probe,
    /// with the prober's current `cookie`; `None` for anything that is not
    /// a probe (answers are never answered).
    pub fn echo(&self, incarnation: u64, hold_ns: u32, cookie: u64) -> Option<Message> {
        self.answer(MessageKind::Echo, incarnation, hold_ns, cookie)
    }

    /// The challenge a responder of `incarnation` sends to this unproven
    /// probe of an admitted sender: the cookie to probe with.
    pub fn challenge(&self, incarnation: u64, cookie: u64) -> Option<Message> {
        self.answer(MessageKind::Challenge, incarnation, 0, cookie)
    }

    fn answer(
        &self,
        kind: MessageKind,
        incarnation: u64,
        hold_ns: u32,
        cookie: u64,
    ) -> Option<Message> {
        if self.kind != MessageKind::Probe {
            return None;
        }
        Some(Message {
            kind,
            nonce: self.nonce,
            seq: self.seq,
            incarnation,
            hold_ns,
            cookie,
        })
    }
}

/// The traffic class of an answer: the DSCP the probe arrived with, and
/// ECN-capable where it was (a CE mark set by a switch on the way in is
/// not copied: only a congested switch may set CE).
pub fn answer_traffic_class(arrived: u8) -> u8 {
    match arrived & 0b11 {
        0b11 => (arrived & !0b11) | 0b10,
        _ => arrived,
    }
}

/// The IP traffic class (ToS byte) a UD receive's 40-byte GRH area shows:
/// on RoCE v2 over IPv4 its last 20 bytes are the IPv4 header (ToS at
/// byte 21); otherwise an IPv6 header or IB GRH with the traffic class in
/// bits 4..12. `ipv4` says which (see `peer_ibverbs::sender_gid`).
pub fn grh_traffic_class(grh: &[u8], ipv4: bool) -> Option<u8> {
    if ipv4 {
        return grh.get(21).copied();
    }
    let (a, b) = (*grh.first()?, *grh.get(1)?);
    Some(((a & 0x0f) << 4) | (b >> 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_round_trips_and_carries_nothing_else() {
        let m = Message::probe(0xdead_beef, 7, 0x0102_0304_0506_0708, 0x1122_3344_5566_7788);
        let b = m.encode(64);
        assert_eq!(b.len(), 64);
        assert_eq!(&b[..4], b"RPRB");
        assert_eq!(b[4], 2);
        assert_eq!(&b[32..40], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert!(b[HEADER_LEN..].iter().all(|x| *x == 0));
        assert!(b[6..8].iter().chain(&b[28..32]).all(|x| *x == 0));
        assert_eq!(Message::decode(&b), Ok(m));
        // A size below the header still carries the whole header.
        assert_eq!(m.encode(8).len(), HEADER_LEN);
    }

    #[test]
    fn foreign_datagrams_and_other_versions_are_told_apart() {
        let mut b = Message::probe(1, 2, 3, 4).encode(64);
        assert_eq!(Message::decode(&b[..39]), Err(Foreign::Short));
        b[5] = 9;
        assert_eq!(Message::decode(&b), Err(Foreign::Kind(9)));
        b[4] = 3;
        assert_eq!(Message::decode(&b), Err(Foreign::Version(3)));
        b[0] = b'X';
        assert_eq!(Message::decode(&b), Err(Foreign::Magic));
        // A probe of wire version 1 (a 32-byte header, no cookie), as an
        // exporter of the version before sends it: its version is read
        // although it is shorter than this version's header.
        let mut v1 = vec![0u8; 32];
        v1[..4].copy_from_slice(b"RPRB");
        v1[4] = 1;
        v1[5] = 1;
        assert_eq!(Message::decode(&v1), Err(Foreign::Version(1)));
        // The payload of the format before the magic (nonce, seq, zeros).
        let mut old = vec![0u8; 64];
        old[..4].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        assert_eq!(Message::decode(&old), Err(Foreign::Magic));
        assert_eq!(Message::decode(b"RPR"), Err(Foreign::Short));
    }

    #[test]
    fn only_a_probe_is_answered() {
        let p = Message::probe(5, 6, 1, 0);
        let echo = p.echo(42, 900, 77).unwrap();
        assert_eq!(
            (
                echo.kind,
                echo.nonce,
                echo.seq,
                echo.incarnation,
                echo.hold_ns,
                echo.cookie
            ),
            (MessageKind::Echo, 5, 6, 42, 900, 77)
        );
        let c = p.challenge(42, 78).unwrap();
        assert_eq!(
            (c.kind, c.hold_ns, c.cookie),
            (MessageKind::Challenge, 0, 78)
        );
        assert_eq!(echo.echo(1, 0, 1), None);
        assert_eq!(c.challenge(1, 1), None);
    }

    #[test]
    fn answers_keep_the_dscp_and_never_copy_a_congestion_mark() {
        // NCCL_IB_TC=106: DSCP 26, ECT(0).
        assert_eq!(answer_traffic_class(106), 106);
        // Marked CE on the way: DSCP 26, ECT(0) again.
        assert_eq!(answer_traffic_class(107), 106);
        assert_eq!(answer_traffic_class(104), 104);
        assert_eq!(answer_traffic_class(0), 0);
    }

    #[test]
    fn traffic_class_is_read_from_either_header() {
        let mut g = [0u8; 40];
        g[21] = 0x6a;
        assert_eq!(grh_traffic_class(&g, true), Some(0x6a));
        let mut v6 = [0u8; 40];
        v6[0] = 0x66; // version 6, traffic class high nibble 6
        v6[1] = 0xa0; // low nibble a
        assert_eq!(grh_traffic_class(&v6, false), Some(0x6a));
        assert_eq!(grh_traffic_class(&[], false), None);
    }
}
