//! Which addresses a datagram may ever be aimed at: a peer's address must
//! be a unicast host address on this node's fabric. One function,
//! [`admit_address`], decides it for every discovery mode (documents, the
//! fleet's Prometheus, `all_to_all` or rails) and for anything else that
//! aims traffic at a peer (the bandwidth load test's responder admits its
//! peers with it too): the address, the subnets of this node's RDMA ports,
//! the policy; `Ok` or the reason it is refused.
//!
//! Refused, each with its reason ([`AddressRefusal`]):
//! - unspecified (`0.0.0.0`, `::`), loopback (`127/8`, `::1`), multicast
//!   (`224/4`, `ff00::/8`), the limited broadcast `255.255.255.255`;
//! - link-local (`169.254/16`, `fe80::/10`) unless the policy allows it
//!   (`peer_probes.allow_link_local`: a fabric addressed by link-local GIDs
//!   only, one L2 segment);
//! - reserved (`0/8`, `240/4`, IPv6 `::/8` outside the IPv4-mapped range,
//!   `100::/64`, the deprecated site-local `fec0::/10`) and documentation
//!   (`192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`,
//!   `3fff::/20`) ranges (IANA special-purpose registries, RFC 6890,
//!   RFC 5737, RFC 3849, RFC 9637);
//! - off the fabric: inside none of the ports' subnets (the interface
//!   prefixes of their GIDs) nor of the configured fabric networks (a
//!   routed fabric with a /31 per NIC names them: `rails.networks`,
//!   `peer_probes.fabric_networks`);
//! - inside an interface subnet, its network address or (IPv4) its
//!   broadcast address; IPv6 has no broadcast, and its all-zero interface
//!   identifier is the Subnet-Router anycast address (RFC 4291 2.6.1),
//!   refused as `network`. /31 and /32 (RFC 3021) and /127, /128 have no
//!   such addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Deserializer};

/// A subnet of this node's fabric: the prefix of an RDMA port's address on
/// its interface, or a configured fabric network. `addr` is the network
/// address (no host bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortSubnet {
    pub addr: IpAddr,
    pub len: u8,
    /// An interface's own prefix (network and broadcast addresses are
    /// refused inside it), not a configured network spanning many links.
    pub on_link: bool,
}

impl PortSubnet {
    /// The subnet of `addr` with prefix `len` (host bits cleared).
    pub fn of(addr: IpAddr, len: u8, on_link: bool) -> PortSubnet {
        let len = len.min(max_len(&addr));
        let addr = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask32(len))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask128(len))),
        };
        PortSubnet { addr, len, on_link }
    }

    /// `a.b.c.d/len` or `x::/len`, the network address itself (a
    /// configured network, not on one link).
    pub fn parse(text: &str) -> Option<PortSubnet> {
        let (a, l) = text.trim().split_once('/')?;
        let addr: IpAddr = a.parse().ok()?;
        let len: u8 = l.parse().ok().filter(|l| *l <= max_len(&addr))?;
        let net = PortSubnet::of(addr, len, false);
        (net.addr == addr).then_some(net)
    }

    /// Whether `a` is inside.
    pub fn contains(&self, a: &IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(n), IpAddr::V4(a)) => u32::from(*a) & mask32(self.len) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => u128::from(*a) & mask128(self.len) == u128::from(n),
            _ => false,
        }
    }

    /// The IPv4 network, for the rail rule.
    pub fn v4(&self) -> Option<(Ipv4Addr, u8)> {
        match self.addr {
            IpAddr::V4(a) => Some((a, self.len)),
            IpAddr::V6(_) => None,
        }
    }
}

impl std::fmt::Display for PortSubnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

fn max_len(a: &IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

fn mask32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

/// Configured CIDR networks (`10.0.0.0/16`, `fd00:1::/64`): at most 64,
/// each a network address.
pub fn networks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PortSubnet>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    if texts.len() > 64 {
        return Err(serde::de::Error::custom("at most 64 networks"));
    }
    texts
        .iter()
        .map(|t| {
            PortSubnet::parse(t).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{t:?} is not a network (an address with no host bits and a prefix length, e.g. 10.0.0.0/16)"
                ))
            })
        })
        .collect()
}

/// What may be admitted beyond unicast host addresses of the subnets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// Link-local addresses (`fe80::/10`, `169.254/16`) are admitted
    /// (on-link by definition: no subnet check).
    pub allow_link_local: bool,
}

pub use roce_model::peer::AddressRefusal;

/// The address a GID stands for: the IPv4 address of an IPv4-mapped GID
/// (RoCE v2 over IPv4), the IPv6 address otherwise.
pub fn gid_address(gid: &Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(*gid),
    }
}

fn in_v4(a: Ipv4Addr, net: [u8; 4], len: u8) -> bool {
    u32::from(a) & mask32(len) == u32::from(Ipv4Addr::from(net))
}

fn in_v6(a: Ipv6Addr, net: u128, len: u8) -> bool {
    u128::from(a) & mask128(len) == net
}

/// The special-purpose range `a` is in, if any.
fn special(a: &IpAddr, policy: &AddressPolicy) -> Option<AddressRefusal> {
    use AddressRefusal::*;
    match *a {
        IpAddr::V4(v) => {
            let r = if v.is_unspecified() {
                Unspecified
            } else if v.is_loopback() {
                Loopback
            } else if v.is_broadcast() {
                Broadcast
            } else if v.is_multicast() {
                Multicast
            } else if v.is_link_local() {
                if policy.allow_link_local {
                    return None;
                }
                LinkLocal
            } else if in_v4(v, [192, 0, 2, 0], 24)
                || in_v4(v, [198, 51, 100, 0], 24)
                || in_v4(v, [203, 0, 113, 0], 24)
            {
                Documentation
            } else if in_v4(v, [0, 0, 0, 0], 8) || in_v4(v, [240, 0, 0, 0], 4) {
                Reserved
            } else {
                return None;
            };
            Some(r)
        }
        IpAddr::V6(v) => {
            let r = if v.is_unspecified() {
                Unspecified
            } else if v.is_loopback() {
                Loopback
            } else if v.is_multicast() {
                Multicast
            } else if in_v6(v, 0xfe80 << 112, 10) {
                if policy.allow_link_local {
                    return None;
                }
                LinkLocal
            } else if in_v6(v, 0x2001_0db8 << 96, 32) || in_v6(v, 0x3fff << 112, 20) {
                Documentation
            } else if in_v6(v, 0, 8) || in_v6(v, 0x0100 << 112, 64) || in_v6(v, 0xfec0 << 112, 10) {
                Reserved
            } else {
                return None;
            };
            Some(r)
        }
    }
}

/// Whether a datagram may be aimed at `addr` (see the module doc).
/// `subnets`: this node's fabric (its RDMA ports' interface subnets and
/// the configured fabric networks).
pub fn admit_address(
    addr: &IpAddr,
    subnets: &[PortSubnet],
    policy: &AddressPolicy,
) -> Result<(), AddressRefusal> {
    if let Some(r) = special(addr, policy) {
        return Err(r);
    }
    let link_local = match addr {
        IpAddr::V4(v) => v.is_link_local(),
        IpAddr::V6(v) => in_v6(*v, 0xfe80 << 112, 10),
    };
    if link_local {
        // Allowed by the policy (else refused above): on-link by itself.
        return Ok(());
    }
    let mut inside = false;
    for s in subnets.iter().filter(|s| s.contains(addr)) {
        inside = true;
        if !s.on_link {
            continue;
        }
        let host_bits = max_len(addr) - s.len;
        // /31, /32 (RFC 3021), /127, /128: every address is a host.
        if host_bits < 2 {
            continue;
        }
        match addr {
            IpAddr::V4(v) => {
                let host = u32::from(*v) & !mask32(s.len);
                if host == 0 {
                    return Err(AddressRefusal::Network);
                }
                if host == !mask32(s.len) {
                    return Err(AddressRefusal::Broadcast);
                }
            }
            IpAddr::V6(v) => {
                if u128::from(*v) & !mask128(s.len) == 0 {
                    return Err(AddressRefusal::Network);
                }
            }
        }
    }
    if inside {
        Ok(())
    } else {
        Err(AddressRefusal::OffFabric)
    }
}

/// [`admit_address`] for a GID.
pub fn admit_gid(
    gid: &Ipv6Addr,
    subnets: &[PortSubnet],
    policy: &AddressPolicy,
) -> Result<(), AddressRefusal> {
    admit_address(&gid_address(gid), subnets, policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric() -> Vec<PortSubnet> {
        vec![
            PortSubnet::of("10.0.2.15".parse().unwrap(), 24, true),
            PortSubnet::of("fd00:1::5".parse().unwrap(), 64, true),
            PortSubnet::parse("10.8.0.0/16").unwrap(),
        ]
    }

    fn why(text: &str) -> Result<(), AddressRefusal> {
        let gid: Ipv6Addr = match text.parse::<IpAddr>().unwrap() {
            IpAddr::V4(v) => v.to_ipv6_mapped(),
            IpAddr::V6(v) => v,
        };
        admit_gid(&gid, &fabric(), &AddressPolicy::default())
    }

    #[test]
    fn unicast_hosts_of_the_fabric_are_admitted() {
        for ok in [
            "10.0.2.16",
            "10.0.2.1",
            "10.0.2.254",
            "fd00:1::16",
            "10.8.0.0",
            "10.8.255.255",
        ] {
            assert_eq!(why(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn every_other_kind_of_address_is_refused_with_its_reason() {
        use AddressRefusal::*;
        for (addr, reason) in [
            ("0.0.0.0", Unspecified),
            ("::", Unspecified),
            ("127.0.0.1", Loopback),
            ("::1", Loopback),
            ("224.0.0.1", Multicast),
            ("239.1.2.3", Multicast),
            ("ff02::1", Multicast),
            ("255.255.255.255", Broadcast),
            ("10.0.2.255", Broadcast),
            ("10.0.2.0", Network),
            ("fd00:1::", Network),
            ("169.254.1.1", LinkLocal),
            ("fe80::1", LinkLocal),
            ("240.0.0.1", Reserved),
            ("0.1.2.3", Reserved),
            ("100::1", Reserved),
            ("::1.2.3.4", Reserved),
            ("fec0::1", Reserved),
            ("192.0.2.7", Documentation),
            ("198.51.100.7", Documentation),
            ("203.0.113.7", Documentation),
            ("2001:db8::7", Documentation),
            ("3fff::7", Documentation),
            ("8.8.8.8", OffFabric),
            ("10.0.3.16", OffFabric),
            ("fd00:2::16", OffFabric),
            ("2a00:1450::1", OffFabric),
        ] {
            assert_eq!(why(addr), Err(reason), "{addr}");
            assert!(!reason.as_str().is_empty());
        }
    }

    #[test]
    fn link_local_only_when_allowed_and_small_subnets_have_no_broadcast() {
        let allow = AddressPolicy {
            allow_link_local: true,
        };
        let ll: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        assert_eq!(admit_gid(&ll, &[], &allow), Ok(()));
        let v4ll = Ipv4Addr::new(169, 254, 3, 4).to_ipv6_mapped();
        assert_eq!(admit_gid(&v4ll, &[], &allow), Ok(()));
        // Multicast stays refused whatever the policy.
        let mc: Ipv6Addr = "ff02::1".parse().unwrap();
        assert_eq!(admit_gid(&mc, &[], &allow), Err(AddressRefusal::Multicast));
        // A /31 per NIC (RFC 3021): both addresses are hosts.
        let p2p = [PortSubnet::of("10.9.0.0".parse().unwrap(), 31, true)];
        for a in [Ipv4Addr::new(10, 9, 0, 0), Ipv4Addr::new(10, 9, 0, 1)] {
            assert_eq!(
                admit_gid(&a.to_ipv6_mapped(), &p2p, &AddressPolicy::default()),
                Ok(())
            );
        }
        // No subnet known: everything is off the fabric.
        assert_eq!(
            admit_gid(
                &Ipv4Addr::new(10, 0, 2, 16).to_ipv6_mapped(),
                &[],
                &AddressPolicy::default()
            ),
            Err(AddressRefusal::OffFabric)
        );
    }

    #[test]
    fn configured_networks_parse_as_networks_only() {
        assert_eq!(
            PortSubnet::parse("10.8.0.0/16").map(|n| n.to_string()),
            Some("10.8.0.0/16".into())
        );
        assert_eq!(PortSubnet::parse("10.8.0.1/16"), None);
        assert_eq!(PortSubnet::parse("10.8.0.0/33"), None);
        assert!(PortSubnet::parse("fd00::/8").is_some());
        assert_eq!(PortSubnet::parse("fd00::/129"), None);
        assert!(!PortSubnet::parse("10.8.0.0/16").unwrap().on_link);
    }
}
