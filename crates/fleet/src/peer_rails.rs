//! Rails (`peer_probes.rails`): which local port probes which peer port.
//! A port's rail is computed by this node for its own ports, by one of
//! the configured ways, and every node publishes the rail it computed in
//! its endpoints (`rail`). For a peer's port, what this node can check
//! itself decides, never a document's claim:
//!
//! - `subnet` (the default): the IPv4 subnet of the local port's GID on
//!   this host; a peer port is on the rail when its GID is inside that
//!   subnet (its document's `subnet` is not read). A local port without an
//!   IPv4 subnet (InfiniBand, no address) pairs by device index.
//! - `networks`: configured rail networks, for fabrics without a shared
//!   subnet (a /31 per NIC, pure L3): a port's rail is the network its GID
//!   is in, for local and peer ports alike; a peer GID in none of them is
//!   refused (`off_rail`).
//! - `device_index`, `netdev` (a name pattern with one `*`), `map`
//!   (device or netdev name to rail): computed locally; a peer port pairs
//!   when the rail it publishes is this port's. The published rail only
//!   pairs ports: where probes are aimed is still the validated GID.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use roce_probe::peer::Endpoint;

use crate::config::{RailBy, RailConfig};
use crate::error::FleetError;

/// An IPv4 network (`10.0.0.0/16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Net {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Net {
    pub fn parse(text: &str) -> Option<Net> {
        let (a, l) = text.trim().split_once('/')?;
        let addr: Ipv4Addr = a.parse().ok()?;
        let len: u8 = l.parse().ok().filter(|l| *l <= 32)?;
        let net = Net { addr, len };
        // The network address itself, no host bits.
        (u32::from(addr) & net.mask() == u32::from(addr)).then_some(net)
    }

    pub fn of(addr: Ipv4Addr, len: u8) -> Net {
        let n = Net {
            addr,
            len: len.min(32),
        };
        Net {
            addr: Ipv4Addr::from(u32::from(addr) & n.mask()),
            len: n.len,
        }
    }

    fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        }
    }

    pub fn contains(&self, a: Ipv4Addr) -> bool {
        u32::from(a) & self.mask() == u32::from(self.addr)
    }

    /// Whether the GID is the IPv4-mapped form of an address inside.
    pub fn contains_gid(&self, gid: &Ipv6Addr) -> bool {
        gid.to_ipv4_mapped().is_some_and(|a| self.contains(a))
    }
}

impl std::fmt::Display for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A local port's rail.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rail {
    /// The subnet of its GID on this host.
    Subnet(Net),
    /// A configured rail network.
    Network { name: String, net: Net },
    /// A device index (`device_index`, or `subnet` without an address).
    Index(u32),
    /// A rail name (`netdev`, `map`).
    Named(String),
}

impl Rail {
    /// The name published in this port's endpoint (`rail`) and shown in
    /// the `rail` label.
    pub fn name(&self) -> String {
        match self {
            Rail::Subnet(n) => n.to_string(),
            Rail::Network { name, .. } | Rail::Named(name) => name.clone(),
            Rail::Index(i) => format!("index{i}"),
        }
    }
}

/// What this node knows of one of its ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPort<'a> {
    pub device: &'a str,
    pub device_index: u32,
    pub netdev: Option<&'a str>,
    pub gid: Ipv6Addr,
    /// The subnet of the GID's IPv4 address on this host's interface.
    pub subnet: Option<Net>,
}

/// The rail rule, checked once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rails {
    by: RailBy,
    pattern: Option<(String, String)>,
    map: BTreeMap<String, String>,
    networks: Vec<(String, Net)>,
}

/// Rail names are label values and JSON strings: short and plain
/// (`10.0.1.0/24`, `rail3`, `index0`).
pub fn rail_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/' | b':'))
}

impl Rails {
    pub fn new(c: &RailConfig) -> Result<Rails, FleetError> {
        let mut networks = Vec::new();
        for (name, text) in &c.networks {
            if !rail_name_ok(name) {
                return Err(FleetError::RailName { rail: name.clone() });
            }
            let net = Net::parse(text).ok_or_else(|| FleetError::RailNetwork {
                rail: name.clone(),
                network: text.clone(),
            })?;
            if let Some((other, _)) = networks
                .iter()
                .find(|(_, n): &&(String, Net)| n.contains(net.addr) || net.contains(n.addr))
            {
                return Err(FleetError::RailsOverlap {
                    rail: name.clone(),
                    other: other.clone(),
                });
            }
            networks.push((name.clone(), net));
        }
        for (k, v) in &c.map {
            if !rail_name_ok(v) || k.is_empty() || k.len() > 64 {
                return Err(FleetError::RailMapEntry {
                    key: k.clone(),
                    rail: v.clone(),
                });
            }
        }
        let pattern = match &c.netdev_pattern {
            None => None,
            Some(p) => {
                let (pre, post) = p
                    .split_once('*')
                    .filter(|(_, post)| !post.contains('*'))
                    .ok_or_else(|| FleetError::NetdevPattern { pattern: p.clone() })?;
                Some((pre.to_string(), post.to_string()))
            }
        };
        let need = |ok: bool, setting: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(FleetError::RailsNeed { by: c.by, setting })
            }
        };
        match c.by {
            RailBy::Netdev => need(pattern.is_some(), "netdev_pattern")?,
            RailBy::Map => need(!c.map.is_empty(), "map")?,
            RailBy::Networks => need(!networks.is_empty(), "networks")?,
            RailBy::Subnet | RailBy::DeviceIndex => {}
        }
        Ok(Rails {
            by: c.by,
            pattern,
            map: c.map.clone(),
            networks,
        })
    }

    /// The rail of a local port; `None` when it cannot be computed (no
    /// netdev matching the pattern, a device absent from the map, a GID in
    /// none of the networks): the port then probes nobody, which the rule
    /// `peer_probe_no_peer_on_rail` reports.
    pub fn local(&self, port: &LocalPort) -> Option<Rail> {
        match self.by {
            RailBy::Subnet => Some(match port.subnet {
                Some(n) => Rail::Subnet(n),
                None => Rail::Index(port.device_index),
            }),
            RailBy::DeviceIndex => Some(Rail::Index(port.device_index)),
            RailBy::Netdev => {
                let (pre, post) = self.pattern.as_ref()?;
                let name = port.netdev?;
                let rail = name
                    .strip_prefix(pre.as_str())?
                    .strip_suffix(post.as_str())?;
                rail_name_ok(rail).then(|| Rail::Named(rail.to_string()))
            }
            RailBy::Map => self
                .map
                .get(port.device)
                .or_else(|| port.netdev.and_then(|n| self.map.get(n)))
                .map(|r| Rail::Named(r.clone())),
            RailBy::Networks => self.network_of(&port.gid).map(|(name, net)| Rail::Network {
                name: name.to_string(),
                net,
            }),
        }
    }

    fn network_of(&self, gid: &Ipv6Addr) -> Option<(&str, Net)> {
        self.networks
            .iter()
            .find(|(_, n)| n.contains_gid(gid))
            .map(|(name, n)| (name.as_str(), *n))
    }

    /// The configured rail networks, as networks of the fabric (peer
    /// addresses inside them are on it).
    pub fn fabric(&self) -> Vec<crate::peer_address::PortSubnet> {
        self.networks
            .iter()
            .map(|(_, n)| crate::peer_address::PortSubnet::of(n.addr.into(), n.len, false))
            .collect()
    }

    /// Whether a peer port may be probed at all under this rule: with
    /// configured networks its GID must be inside one of them.
    pub fn admissible(&self, peer: &Endpoint) -> bool {
        self.by != RailBy::Networks || self.network_of(&peer.gid).is_some()
    }

    /// Whether `peer` is on the local port's `rail`.
    pub fn on_rail(&self, rail: &Rail, peer: &Endpoint) -> bool {
        match rail {
            Rail::Subnet(net) => net.contains_gid(&peer.gid),
            Rail::Network { net, .. } => net.contains_gid(&peer.gid),
            Rail::Index(i) => match self.by {
                // A port without an IPv4 subnet pairs with peers that
                // have none either (an IPv4 GID belongs to some subnet).
                RailBy::Subnet => peer.device_index == *i && peer.gid.to_ipv4_mapped().is_none(),
                _ => peer.device_index == *i,
            },
            Rail::Named(name) => peer.rail.as_deref() == Some(name.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(gid: Ipv4Addr, device_index: u32, rail: Option<&str>) -> Endpoint {
        Endpoint {
            node: "b".into(),
            device: "mlx5_0".into(),
            device_index,
            port: 1,
            gid: gid.to_ipv6_mapped(),
            gid_index: 3,
            qpn: 17,
            qkey: roce_probe::peer::QKEY,
            mtu: 4096,
            subnet: Some("10.0.1.0/24".into()),
            rail: rail.map(str::to_string),
            incarnation: 0,
            wire: roce_probe::peer_wire::WIRE_VERSION,
            learning: false,
        }
    }

    fn local(
        gid: Ipv4Addr,
        subnet: Option<Net>,
        netdev: Option<&'static str>,
    ) -> LocalPort<'static> {
        LocalPort {
            device: "mlx5_3",
            device_index: 3,
            netdev,
            gid: gid.to_ipv6_mapped(),
            subnet,
        }
    }

    fn rails(by: RailBy, f: impl FnOnce(&mut RailConfig)) -> Rails {
        let mut c = RailConfig {
            by,
            ..RailConfig::default()
        };
        f(&mut c);
        Rails::new(&c).unwrap()
    }

    #[test]
    fn subnet_rails_take_the_gid_not_the_documents_claim() {
        let r = rails(RailBy::Subnet, |_| {});
        let me = local(Ipv4Addr::new(10, 0, 1, 5), Net::parse("10.0.1.0/24"), None);
        let rail = r.local(&me).unwrap();
        assert_eq!(rail.name(), "10.0.1.0/24");
        assert!(r.on_rail(&rail, &peer(Ipv4Addr::new(10, 0, 1, 9), 0, None)));
        // Off the rail although its document claims the local subnet.
        assert!(!r.on_rail(&rail, &peer(Ipv4Addr::new(10, 9, 9, 9), 3, None)));
        // No subnet here: the device index, for peers without IPv4 GIDs.
        let ib = r
            .local(&local(Ipv4Addr::new(0, 0, 0, 0), None, None))
            .unwrap();
        assert_eq!(ib, Rail::Index(3));
        assert!(!r.on_rail(&ib, &peer(Ipv4Addr::new(10, 0, 1, 9), 3, None)));
    }

    #[test]
    fn l3_fabrics_with_a_31_per_nic_pair_by_configured_networks_or_names() {
        let r = rails(RailBy::Networks, |c| {
            c.networks.insert("rail0".into(), "10.0.0.0/16".into());
            c.networks.insert("rail1".into(), "10.1.0.0/16".into());
        });
        // A /31 per NIC: no subnet in common, one rail network.
        let me = local(Ipv4Addr::new(10, 0, 7, 1), Net::parse("10.0.7.0/31"), None);
        let rail = r.local(&me).unwrap();
        assert_eq!(rail.name(), "rail0");
        assert!(r.on_rail(&rail, &peer(Ipv4Addr::new(10, 0, 200, 3), 5, None)));
        assert!(!r.on_rail(&rail, &peer(Ipv4Addr::new(10, 1, 200, 3), 3, None)));
        assert!(!r.admissible(&peer(Ipv4Addr::new(192, 168, 0, 1), 3, Some("rail0"))));

        let r = rails(RailBy::Netdev, |c| {
            c.netdev_pattern = Some("rdma*np0".into())
        });
        let rail = r
            .local(&local(Ipv4Addr::new(10, 0, 7, 1), None, Some("rdma3np0")))
            .unwrap();
        assert_eq!(rail, Rail::Named("3".into()));
        assert!(r.on_rail(&rail, &peer(Ipv4Addr::new(10, 0, 9, 1), 0, Some("3"))));
        assert!(!r.on_rail(&rail, &peer(Ipv4Addr::new(10, 0, 9, 1), 3, Some("4"))));
        assert!(!r.on_rail(&rail, &peer(Ipv4Addr::new(10, 0, 9, 1), 3, None)));
        assert_eq!(
            r.local(&local(Ipv4Addr::new(10, 0, 7, 1), None, Some("eth0"))),
            None
        );

        let r = rails(RailBy::Map, |c| {
            c.map.insert("mlx5_3".into(), "r3".into());
        });
        assert_eq!(
            r.local(&local(Ipv4Addr::new(10, 0, 7, 1), None, None)),
            Some(Rail::Named("r3".into()))
        );
        let r = rails(RailBy::DeviceIndex, |_| {});
        let rail = r
            .local(&local(Ipv4Addr::new(10, 0, 7, 1), None, None))
            .unwrap();
        assert!(r.on_rail(&rail, &peer(Ipv4Addr::new(10, 5, 0, 1), 3, None)));
    }

    #[test]
    fn rail_settings_that_cannot_work_are_refused() {
        let bad = |f: fn(&mut RailConfig)| {
            let mut c = RailConfig::default();
            f(&mut c);
            Rails::new(&c).unwrap_err().to_string()
        };
        assert!(bad(|c| c.by = RailBy::Netdev).contains("netdev_pattern"));
        assert_eq!(
            Rails::new(&RailConfig {
                by: RailBy::Map,
                ..RailConfig::default()
            }),
            Err(FleetError::RailsNeed {
                by: RailBy::Map,
                setting: "map"
            })
        );
        assert!(bad(|c| {
            c.by = RailBy::Netdev;
            c.netdev_pattern = Some("eth".into());
        })
        .contains("one `*`"));
        assert!(bad(|c| c.by = RailBy::Map).contains("map"));
        assert!(bad(|c| {
            c.by = RailBy::Networks;
            c.networks.insert("a".into(), "10.0.0.1/16".into());
        })
        .contains("not an IPv4 network"));
        assert!(bad(|c| {
            c.networks.insert("a".into(), "10.0.0.0/8".into());
            c.networks.insert("b".into(), "10.1.0.0/16".into());
        })
        .contains("overlap"));
        assert!(bad(|c| {
            c.map.insert("mlx5_0".into(), "a b".into());
        })
        .contains("rails.map"));
    }
}
