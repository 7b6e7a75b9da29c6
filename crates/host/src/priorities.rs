//! A set of the eight IEEE 802.1p priorities, the one type in which every
//! crate passes them: PFC enable (DCB netlink's `pfc_en`, the lldptool and
//! ethtool readers, the switch's PFC TLV in LLDP frames), the priorities a
//! port's traffic uses, and the rules and exposition that judge and print
//! them.

use std::fmt;

/// A set of priorities 0-7; bit N of [`Priorities::bits`] is priority N, as
/// DCB (`struct ieee_pfc.pfc_en`) and the LLDP PFC TLV carry it. A value
/// above 7 is never in a set: adding one does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Priorities(u8);

impl Priorities {
    /// The empty set.
    pub const NONE: Priorities = Priorities(0);
    /// Every priority.
    pub const ALL: Priorities = Priorities(0xff);

    /// The set whose bit N is priority N.
    pub const fn from_bits(bits: u8) -> Priorities {
        Priorities(bits)
    }

    /// Bit N set for priority N in the set.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The set of `priority` alone (empty above 7).
    pub const fn one(priority: u8) -> Priorities {
        match 1u8.checked_shl(priority as u32) {
            Some(bit) => Priorities(bit),
            None => Priorities::NONE,
        }
    }

    /// The set with `priority` added.
    pub const fn with(self, priority: u8) -> Priorities {
        Priorities(self.0 | Priorities::one(priority).0)
    }

    pub const fn contains(self, priority: u8) -> bool {
        self.0 & Priorities::one(priority).0 != 0
    }

    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The lowest priority in the set.
    pub const fn first(self) -> Option<u8> {
        if self.0 == 0 {
            None
        } else {
            Some(self.0.trailing_zeros() as u8)
        }
    }

    /// The priorities in either set.
    pub const fn union(self, other: Priorities) -> Priorities {
        Priorities(self.0 | other.0)
    }

    /// The priorities in `self` and not in `other`.
    pub const fn difference(self, other: Priorities) -> Priorities {
        Priorities(self.0 & !other.0)
    }

    /// The priorities in ascending order.
    pub const fn iter(self) -> Iter {
        Iter(self.0)
    }
}

/// The priorities of a set in ascending order.
#[derive(Debug, Clone)]
pub struct Iter(u8);

impl Iterator for Iter {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        if self.0 == 0 {
            return None;
        }
        let p = self.0.trailing_zeros() as u8;
        self.0 &= self.0 - 1;
        Some(p)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.count_ones() as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter {}

impl IntoIterator for Priorities {
    type Item = u8;
    type IntoIter = Iter;

    fn into_iter(self) -> Iter {
        self.iter()
    }
}

/// Values above 7 are left out.
impl FromIterator<u8> for Priorities {
    fn from_iter<I: IntoIterator<Item = u8>>(iter: I) -> Priorities {
        iter.into_iter().fold(Priorities::NONE, Priorities::with)
    }
}

/// The priorities comma separated in ascending order (`3,4`), `none` for
/// the empty set: how label values and configuration lists print a set.
impl fmt::Display for Priorities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, p) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// The bitmap in hex (`0x18` with `{:#04x}`), as `pfc_en` is quoted.
impl fmt::LowerHex for Priorities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_of_priorities() {
        let p: Priorities = [4, 3, 3].into_iter().collect();
        assert_eq!(p.bits(), 0b0001_1000);
        assert!(p.contains(3) && p.contains(4) && !p.contains(0));
        assert_eq!(p.len(), 2);
        assert_eq!(p.first(), Some(3));
        assert_eq!(p.iter().collect::<Vec<_>>(), [3, 4]);
        assert_eq!(p.into_iter().collect::<Vec<_>>(), [3, 4]);
        assert_eq!(p.to_string(), "3,4");
        assert_eq!(format!("{p:02x}"), "18");
        assert_eq!(Priorities::NONE.to_string(), "none");
        assert_eq!(Priorities::ALL.len(), 8);
        assert_eq!(Priorities::NONE.first(), None);
    }

    #[test]
    fn values_above_seven_are_never_in_a_set() {
        assert_eq!(Priorities::one(8), Priorities::NONE);
        assert_eq!(Priorities::one(255), Priorities::NONE);
        assert!(!Priorities::ALL.contains(8));
        let p: Priorities = [7, 8, 200].into_iter().collect();
        assert_eq!(p, Priorities::one(7));
    }

    #[test]
    fn union_and_difference() {
        let nic = Priorities::from_bits(0b0001_1000);
        let sw = Priorities::from_bits(0b0001_0001);
        assert_eq!(nic.difference(sw).to_string(), "3");
        assert_eq!(sw.difference(nic).to_string(), "0");
        assert_eq!(nic.union(sw).to_string(), "0,3,4");
    }
}
