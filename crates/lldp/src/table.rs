//! The neighbour table: per watched port, the neighbours heard, each kept
//! for its TTL from the last time it was heard. Bounded: only ports
//! registered with [`NeighbourTable::watch`] are kept (at most
//! [`MAX_PORTS`]), at most [`MAX_PER_PORT`] neighbours per port (the one
//! heard longest ago gives way, counted). A TTL of 0 (the sender's
//! shutdown LLDPDU) removes the neighbour at once.
//!
//! It also keeps, per port, the first neighbour heard since start, so a
//! later different neighbour (a recabled port) can be told apart from the
//! same one heard again. Time is milliseconds of a monotonic clock the
//! caller passes in.

use std::collections::BTreeMap;

use crate::tlv::Lldpdu;

/// The most ports kept.
pub const MAX_PORTS: usize = 256;
/// The most neighbours kept per port (a switch port has one; a hub or a
/// misbehaving peer may send several).
pub const MAX_PER_PORT: usize = 4;

/// Who a neighbour is: its chassis ID and port ID (the MSAP identifier of
/// IEEE 802.1AB) and system name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    pub chassis_id: String,
    pub port_id: String,
    pub system_name: Option<String>,
}

impl Identity {
    pub fn of(pdu: &Lldpdu) -> Self {
        Identity {
            chassis_id: pdu.chassis_id.value.clone(),
            port_id: pdu.port_id.value.clone(),
            system_name: pdu.system_name.clone(),
        }
    }

    /// Whether both name the same remote port (system names may change
    /// without a recabling).
    pub fn same_port(&self, other: &Identity) -> bool {
        self.chassis_id == other.chassis_id && self.port_id == other.port_id
    }
}

/// One neighbour as last heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub pdu: Lldpdu,
    /// When it was last heard (ms).
    pub heard_at_ms: u64,
    /// When it expires (ms): last heard plus its TTL.
    pub expires_at_ms: u64,
}

/// What the table holds for one port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortNeighbours {
    /// Live neighbours, the most recently heard first.
    pub neighbours: Vec<Neighbour>,
    /// The first neighbour heard since start.
    pub first: Option<Identity>,
    /// When anything was last heard on the port (ms), even if it expired since.
    pub last_heard_ms: Option<u64>,
    /// The TTL of the last LLDPDU heard (seconds).
    pub last_ttl: Option<u16>,
    /// LLDPDUs accepted.
    pub frames: u64,
    /// Neighbours dropped to keep the port within [`MAX_PER_PORT`].
    pub evicted: u64,
    /// Neighbours removed by TTL expiry or a shutdown LLDPDU.
    pub aged_out: u64,
}

impl PortNeighbours {
    /// The neighbour heard most recently.
    pub fn current(&self) -> Option<&Neighbour> {
        self.neighbours.first()
    }

    /// `(first, current)` when the current neighbour is another remote
    /// port than the first one heard since start.
    pub fn changed(&self) -> Option<(&Identity, Identity)> {
        let first = self.first.as_ref()?;
        let current = Identity::of(&self.current()?.pdu);
        (!first.same_port(&current)).then_some((first, current))
    }
}

/// Neighbours of every watched port.
#[derive(Debug, Clone, Default)]
pub struct NeighbourTable {
    ports: BTreeMap<String, PortNeighbours>,
    /// LLDPDUs for ports not watched (or beyond [`MAX_PORTS`]).
    pub ignored: u64,
}

impl NeighbourTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `port`'s neighbours from now on (no-op beyond [`MAX_PORTS`]).
    pub fn watch(&mut self, port: &str) {
        if self.ports.len() < MAX_PORTS && !self.ports.contains_key(port) {
            self.ports
                .insert(port.to_string(), PortNeighbours::default());
        }
    }

    /// Stops keeping ports not in `keep` (netdevs that went away).
    pub fn retain(&mut self, keep: &[String]) {
        self.ports.retain(|p, _| keep.iter().any(|k| k == p));
    }

    /// Records an LLDPDU heard on `port` at `now_ms`.
    pub fn observe(&mut self, port: &str, pdu: Lldpdu, now_ms: u64) {
        let Some(state) = self.ports.get_mut(port) else {
            self.ignored = self.ignored.saturating_add(1);
            return;
        };
        state.frames = state.frames.saturating_add(1);
        state.last_heard_ms = Some(now_ms);
        state.last_ttl = Some(pdu.ttl);
        let identity = Identity::of(&pdu);
        let existing = state
            .neighbours
            .iter()
            .position(|n| Identity::of(&n.pdu).same_port(&identity));
        if let Some(i) = existing {
            state.neighbours.remove(i);
        }
        if pdu.ttl == 0 {
            if existing.is_some() {
                state.aged_out = state.aged_out.saturating_add(1);
            }
            return;
        }
        if state.first.is_none() {
            state.first = Some(identity);
        }
        let expires_at_ms = now_ms.saturating_add(u64::from(pdu.ttl) * 1000);
        state.neighbours.insert(
            0,
            Neighbour {
                pdu,
                heard_at_ms: now_ms,
                expires_at_ms,
            },
        );
        if state.neighbours.len() > MAX_PER_PORT {
            state.neighbours.truncate(MAX_PER_PORT);
            state.evicted = state.evicted.saturating_add(1);
        }
    }

    /// Drops neighbours whose TTL ran out by `now_ms`.
    pub fn expire(&mut self, now_ms: u64) {
        for state in self.ports.values_mut() {
            let before = state.neighbours.len();
            state.neighbours.retain(|n| n.expires_at_ms > now_ms);
            let gone = (before - state.neighbours.len()) as u64;
            state.aged_out = state.aged_out.saturating_add(gone);
        }
    }

    pub fn port(&self, port: &str) -> Option<&PortNeighbours> {
        self.ports.get(port)
    }

    pub fn ports(&self) -> impl Iterator<Item = (&String, &PortNeighbours)> {
        self.ports.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::switch_frame;
    use crate::tlv::parse_frame;

    fn pdu(name: &str, port: &str, ttl: u16) -> Lldpdu {
        let mut p = parse_frame(&switch_frame(name, port, 3, 26, 3).frame([2; 6])).unwrap();
        p.ttl = ttl;
        p
    }

    #[test]
    fn neighbour_lives_for_its_ttl_from_the_last_frame() {
        let mut t = NeighbourTable::new();
        t.watch("eth0");
        t.observe("eth0", pdu("leaf1", "swp1", 120), 0);
        t.expire(119_999);
        assert_eq!(t.port("eth0").unwrap().neighbours.len(), 1);
        t.observe("eth0", pdu("leaf1", "swp1", 120), 60_000);
        t.expire(150_000);
        assert_eq!(t.port("eth0").unwrap().neighbours.len(), 1);
        t.expire(180_000);
        let p = t.port("eth0").unwrap();
        assert!(p.neighbours.is_empty());
        assert_eq!(p.aged_out, 1);
        assert_eq!(p.last_heard_ms, Some(60_000));
    }

    #[test]
    fn shutdown_ttl_zero_removes_at_once() {
        let mut t = NeighbourTable::new();
        t.watch("eth0");
        t.observe("eth0", pdu("leaf1", "swp1", 120), 0);
        t.observe("eth0", pdu("leaf1", "swp1", 0), 1000);
        assert!(t.port("eth0").unwrap().neighbours.is_empty());
    }

    #[test]
    fn bounded_per_port_and_unwatched_ignored() {
        let mut t = NeighbourTable::new();
        t.watch("eth0");
        for i in 0..100 {
            t.observe("eth0", pdu("leaf1", &format!("swp{i}"), 120), i);
        }
        let p = t.port("eth0").unwrap();
        assert_eq!(p.neighbours.len(), MAX_PER_PORT);
        assert_eq!(p.evicted, 100 - MAX_PER_PORT as u64);
        assert_eq!(p.current().unwrap().pdu.port_id.value, "swp99");
        t.observe("eth9", pdu("leaf1", "swp1", 120), 0);
        assert_eq!(t.ignored, 1);
        assert!(t.port("eth9").is_none());
    }

    #[test]
    fn recabling_is_told_from_the_same_neighbour_again() {
        let mut t = NeighbourTable::new();
        t.watch("eth0");
        t.observe("eth0", pdu("leaf1", "swp1", 120), 0);
        t.observe("eth0", pdu("leaf1", "swp1", 120), 30_000);
        assert!(t.port("eth0").unwrap().changed().is_none());
        t.observe("eth0", pdu("leaf1", "swp7", 120), 60_000);
        let p = t.port("eth0").unwrap();
        let (old, new) = p.changed().unwrap();
        assert_eq!(old.port_id, "swp1");
        assert_eq!(new.port_id, "swp7");
    }
}
