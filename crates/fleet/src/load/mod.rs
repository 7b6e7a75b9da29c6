//! The load test between nodes, the part that is not verbs: the
//! `load_test:` section, who may start a test on this node's responder
//! ([`admit`]), the control exchange over the exporter's own HTTP server
//! ([`wire`]: a `POST` that asks for a session and one that ends it), the
//! responder that runs one session per port ([`responder`]), and the
//! requester side that asks peers and runs the streams ([`client`]).
//!
//! The control exchange rides the exporter's HTTP server, so it has the
//! server's TLS and authentication and the peer probes' credential model
//! (`peer_probes.tls_ca_file`, `username`, `password_file`; never over
//! plain http). The responder refuses every request the server did not
//! authenticate over TLS, whatever else it says. The streams themselves
//! are RDMA (`roce_probe::load`).

use std::net::Ipv6Addr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use roce_model::values::{duration, number, share};
use roce_probe::load::{MAX_DEPTH, MAX_MESSAGE_BYTES, MAX_QPS, MAX_SIZES, MIN_MESSAGE_BYTES};

use crate::peer_rails::Net;

pub mod client;
pub mod responder;
pub mod wire;

/// `load_test:`: this node as a responder to other nodes' load tests, and
/// the defaults of `check --load`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoadTestConfig {
    /// Answer other nodes' load tests (off by default). Needs TLS and
    /// authentication on the web server (`--web.config.file`): without
    /// them every request is refused (`unauthenticated`).
    pub responder: bool,
    /// Longest session granted, from its start (at most 10 minutes).
    #[serde(deserialize_with = "max_seconds")]
    pub max_seconds: Duration,
    /// Most bytes one session may write into this node.
    #[serde(deserialize_with = "max_bytes")]
    pub max_bytes: u64,
    /// A request is refused while the port already carries more than this
    /// share of its line rate (either direction), unless forced.
    #[serde(deserialize_with = "share")]
    pub max_busy_share: f64,
    /// Admit link-local (fe80::/10) requester GIDs.
    pub allow_link_local: bool,
    /// Message sizes of `check --load`, bytes, in order.
    #[serde(deserialize_with = "sizes")]
    pub sizes: Vec<u64>,
    /// Time per message size of `check --load` (at most 10 s).
    #[serde(deserialize_with = "per_size")]
    pub per_size: Duration,
    /// Queue pairs per port.
    #[serde(deserialize_with = "qps")]
    pub qps: u32,
    /// Writes outstanding per queue pair.
    #[serde(deserialize_with = "depth")]
    pub depth: u32,
    /// Register GPU memory (dma-buf) for the streams of ports that have a
    /// GPU beside them, when CUDA's driver library is there.
    pub gpu: bool,
    /// Where `check --load` writes its results and the exporter reads
    /// them (`roce_load_test_*`); none: neither.
    pub results_file: Option<std::path::PathBuf>,
}

/// Longest time per size `check --load` runs (the bound).
pub const MAX_PER_SIZE: Duration = Duration::from_secs(10);
/// Ceiling of `max_seconds`.
pub const MAX_SESSION: Duration = Duration::from_secs(600);

impl Default for LoadTestConfig {
    fn default() -> Self {
        LoadTestConfig {
            responder: false,
            max_seconds: Duration::from_secs(120),
            // 120 s at 400 Gb/s.
            max_bytes: 6_000_000_000_000,
            max_busy_share: 0.1,
            allow_link_local: false,
            sizes: roce_probe::load::DEFAULT_SIZES.to_vec(),
            per_size: Duration::from_secs(5),
            qps: roce_probe::load::DEFAULT_QPS,
            depth: roce_probe::load::DEFAULT_DEPTH,
            gpu: true,
            results_file: None,
        }
    }
}

fn max_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = duration(d)?;
    if v > MAX_SESSION {
        return Err(serde::de::Error::custom(
            "at most 10m: a session holds a port's responder this long",
        ));
    }
    Ok(v)
}

fn per_size<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = duration(d)?;
    if v > MAX_PER_SIZE {
        return Err(serde::de::Error::custom("at most 10s per message size"));
    }
    Ok(v)
}

fn max_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    number(d, |v: &u64| *v >= 1 << 20, "at least 1048576 bytes")
}

fn qps<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    number(
        d,
        |v: &u32| (1..=MAX_QPS).contains(v),
        "1 to 16 queue pairs",
    )
}

fn depth<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    number(d, |v: &u32| (1..=MAX_DEPTH).contains(v), "1 to 128 writes")
}

fn sizes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    let v = Vec::<u64>::deserialize(d)?;
    if v.is_empty() || v.len() > MAX_SIZES {
        return Err(serde::de::Error::custom("1 to 8 message sizes"));
    }
    if let Some(bad) = v
        .iter()
        .find(|s| !(MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES).contains(*s))
    {
        return Err(serde::de::Error::custom(format!(
            "message size {bad}: expected 4096 to 67108864 bytes"
        )));
    }
    Ok(v)
}

pub use roce_model::load::LoadRefusal;

/// A local port as the load test sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalLoadPort {
    pub device: String,
    pub port: u8,
    pub netdev: Option<String>,
    pub gid_index: u32,
    pub gid: Ipv6Addr,
    /// The subnet of the GID's IPv4 address on this host.
    pub subnet: Option<Net>,
    pub traffic_class: u8,
    /// The port's line rate, bytes per second.
    pub rate_bytes_per_second: Option<f64>,
    /// What the port carried over the last sample interval, bytes per
    /// second (the larger direction); `None` when not measured.
    pub carried_bytes_per_second: Option<f64>,
    /// The GPU nearest the port's NIC (PCI address), for GPU memory.
    pub gpu: Option<String>,
}

/// Which local port a requester at `gid` may load: the peer probes'
/// admission ([`crate::peer_address::admit_gid`]: a unicast host address
/// of this node's fabric, never multicast, loopback, unspecified, reserved,
/// documentation, a subnet's network or broadcast address, or, unless
/// allowed, link-local) over the ports' own interface subnets (an IPv4
/// GID's prefix, an IPv6 GID's /64), then the first port whose subnet
/// holds it; this node's own addresses are never a peer.
pub fn admit(
    gid: &Ipv6Addr,
    ports: &[LocalLoadPort],
    allow_link_local: bool,
) -> Result<usize, LoadRefusal> {
    use crate::peer_address::{admit_gid, gid_address, AddressPolicy, AddressRefusal, PortSubnet};
    if ports.iter().any(|p| p.gid == *gid) {
        return Err(LoadRefusal::Gid);
    }
    let subnets: Vec<Option<PortSubnet>> = ports
        .iter()
        .map(|p| match p.gid.to_ipv4_mapped() {
            Some(_) => p
                .subnet
                .map(|n| PortSubnet::of(std::net::IpAddr::V4(n.addr), n.len, true)),
            None => Some(PortSubnet::of(std::net::IpAddr::V6(p.gid), 64, true)),
        })
        .collect();
    let fabric: Vec<PortSubnet> = subnets.iter().flatten().copied().collect();
    match admit_gid(gid, &fabric, &AddressPolicy { allow_link_local }) {
        Ok(()) => {}
        Err(AddressRefusal::OffFabric) => return Err(LoadRefusal::OffRail),
        Err(_) => return Err(LoadRefusal::Gid),
    }
    let addr = gid_address(gid);
    subnets
        .iter()
        .position(|s| s.is_some_and(|s| s.contains(&addr)))
        .ok_or(LoadRefusal::OffRail)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn port(device: &str, ip: [u8; 4], len: u8) -> LocalLoadPort {
        let v4 = std::net::Ipv4Addr::from(ip);
        LocalLoadPort {
            device: device.into(),
            port: 1,
            netdev: None,
            gid_index: 3,
            gid: v4.to_ipv6_mapped(),
            subnet: Some(Net::of(v4, len)),
            traffic_class: 106,
            rate_bytes_per_second: Some(50e9),
            carried_bytes_per_second: Some(0.0),
            gpu: None,
        }
    }

    fn gid(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn a_requester_is_admitted_on_the_port_whose_subnet_holds_it() {
        let ports = [
            port("mlx5_0", [10, 0, 0, 11], 24),
            port("mlx5_1", [10, 0, 1, 11], 24),
        ];
        assert_eq!(admit(&gid("::ffff:10.0.1.12"), &ports, false), Ok(1));
        assert_eq!(admit(&gid("::ffff:10.0.0.200"), &ports, false), Ok(0));
    }

    #[test]
    fn hostile_addresses_are_refused_with_their_reason() {
        let ports = [port("mlx5_0", [10, 0, 0, 11], 24)];
        // The peer probes' hostile set: special ranges refused as GIDs,
        // a public address as off the rail.
        for g in crate::peer_endpoints::HOSTILE_GIDS {
            assert!(admit(&gid(g), &ports, false).is_err(), "{g}");
        }
        for g in [
            "ff02::1",
            "::",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:255.255.255.255",
            "::ffff:240.0.0.1",
            "2001:db8::1",
            "::ffff:169.254.0.7",
            "::ffff:192.0.2.1",
        ] {
            assert_eq!(admit(&gid(g), &ports, false), Err(LoadRefusal::Gid), "{g}");
        }
        // The port's network and broadcast addresses, and its own.
        for g in ["::ffff:10.0.0.0", "::ffff:10.0.0.255", "::ffff:10.0.0.11"] {
            assert_eq!(admit(&gid(g), &ports, false), Err(LoadRefusal::Gid), "{g}");
        }
        for g in ["::ffff:10.0.9.1", "::ffff:8.8.8.8", "fd00:9::1"] {
            assert_eq!(
                admit(&gid(g), &ports, false),
                Err(LoadRefusal::OffRail),
                "{g}"
            );
        }
    }

    #[test]
    fn limits_out_of_bounds_are_refused_in_the_file() {
        let bad = [
            "max_seconds: 11m",
            "max_bytes: 10",
            "qps: 0",
            "qps: 17",
            "depth: 200",
            "sizes: []",
            "sizes: [100]",
            "sizes: [1, 2, 3, 4, 5, 6, 7, 8, 9]",
            "max_busy_share: 2",
            "per_size: 11s",
        ];
        for b in bad {
            assert!(
                serde_saphyr::from_str::<LoadTestConfig>(b).is_err(),
                "{b} accepted"
            );
        }
        let ok: LoadTestConfig =
            serde_saphyr::from_str("responder: true\nsizes: [65536, 8388608]\n").unwrap();
        assert!(ok.responder && ok.sizes == [65536, 8 << 20]);
    }
}
