//! Where the peers' endpoints come from, and which of them may be probed.
//!
//! Two sources, one admission:
//! - a peer's own document (`GET /peer-probe/endpoints`, [`DocumentFetcher`]),
//!   fetched for the peers about to be probed and kept until probes to
//!   them fail (see `roce_fleet::runner`);
//! - the Prometheus HTTP API ([`PrometheusQuery`]): every exporter with
//!   peer probes on publishes `roce_peer_probe_endpoint_info`, and one
//!   instant query per refresh returns the fleet's endpoints, each with the
//!   `instance` Prometheus scraped it from.
//!
//! Whatever the source, [`Admission::admit`] decides, per peer, which
//! endpoints may be probed: one node per document, named as the peer's
//! host when the peer is addressed by name, and every endpoint one this
//! node may aim probes at (a unicast host address of its fabric:
//! [`crate::peer_address::admit_address`], the same check in every
//! discovery mode, `all_to_all` included; a possible QPN, our Q_Key, our
//! wire version, a real MTU, label-safe names, on a configured rail
//! network). It also says what proves the node the endpoints name
//! ([`Proof`]): who holds a node claimed by two addresses is the
//! catalog's decision (`roce_fleet::runner`). Refusals are counted by
//! [`Refusal`] reason.

pub use roce_model::peer::Refusal;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

use roce_probe::peer::{Endpoint, QKEY};
use roce_probe::peer_wire::WIRE_VERSION;
use serde::Deserialize;

use super::peer_address::{admit_gid, AddressPolicy, PortSubnet};
use super::peer_http::{
    basic_authorization, client_config, query_escape, read_secret, ClientError, FetchError,
    FetchReason, HttpClient, Request, Url,
};
use super::peer_list::PeerAddress;
use super::peer_rails::Rails;
use crate::config::{PeerProbeConfig, PeerPrometheusConfig};
use crate::error::FleetError;

/// Largest endpoints document read from a peer (64 endpoints fit).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Endpoints taken from one peer at most (no node has more ports): a
/// document with more is refused whole (`too_many`).
pub const MAX_ENDPOINTS_PER_PEER: usize = 64;
/// Endpoints taken from one Prometheus answer at most: 10,000 nodes of 8
/// ports, with room.
pub const MAX_FLEET_ENDPOINTS: usize = 100_000;
/// Node and device names: bounded and label-safe.
pub const MAX_NAME_BYTES: usize = 128;

/// GIDs a probe is never aimed at, one of each kind: multicast,
/// unspecified, loopback, link-local, IPv4-mapped loopback, broadcast,
/// reserved, documentation and off the fabric (the values the tests feed
/// the admission with).
pub const HOSTILE_GIDS: [&str; 9] = [
    "ff02::1",
    "::",
    "::1",
    "fe80::1",
    "::ffff:127.0.0.1",
    "::ffff:255.255.255.255",
    "::ffff:240.0.0.1",
    "2001:db8::1",
    "::ffff:8.8.8.8",
];

fn name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NAME_BYTES
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Whether `host` (the host of a peer's address, or an `instance` label)
/// is an address rather than a name: an IP address, or a Kubernetes pod
/// name made of one (`10-0-0-5.svc…`).
pub fn host_is_address(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.parse::<IpAddr>().is_ok() {
        return true;
    }
    let label = first_label(host);
    label
        .replace('-', ".")
        .parse::<std::net::Ipv4Addr>()
        .is_ok()
        || label.replace('-', ":").parse::<Ipv6Addr>().is_ok()
}

fn first_label(s: &str) -> String {
    s.split('.').next().unwrap_or("").to_ascii_lowercase()
}

/// Whether `node` may be the node behind `host` (the host of the address
/// its endpoints came from). A host that is an address says nothing of the
/// node (only a proof binds it, see [`Proof`]). A host that is a name must
/// be the node's name, compared by first label (`node-b.example.com` is
/// `node-b`).
pub fn identity_matches(node: &str, host: &str) -> bool {
    host_is_address(host) || first_label(host) == first_label(node)
}

/// What binds a node name to the peer address its endpoints came from:
/// what lets one claim take a node over from another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Proof {
    /// Nothing: the peer is addressed by an IP address (or a pod name made
    /// of one) and nothing else vouches for the name.
    #[default]
    None,
    /// The node name resolves (DNS, `/etc/hosts`) to the peer's address.
    Dns,
    /// The peer is addressed by that name: its TLS certificate proved the
    /// name (`https://`), or DNS brought the fetch there (`http://`).
    Name,
    /// The Prometheus target's own `node` label (service discovery, not
    /// the exporter) is that name.
    TargetLabel,
}

impl Proof {
    pub fn as_str(self) -> &'static str {
        match self {
            Proof::None => "none",
            Proof::Dns => "dns",
            Proof::Name => "name",
            Proof::TargetLabel => "target_label",
        }
    }

    /// Whether anything vouches for the claim.
    pub fn proven(self) -> bool {
        self != Proof::None
    }
}

/// Where a peer's endpoints came from.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The host of the peer's address (or of the series' `instance`).
    pub host: &'a str,
    /// The `node` label Prometheus attached to the target (service
    /// discovery), when the exporter's own was renamed `exported_node`.
    pub target_node: Option<&'a str>,
}

/// What the admission of one peer's endpoints gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admitted {
    pub endpoints: Vec<Endpoint>,
    pub refused: BTreeMap<Refusal, u64>,
    /// The node the endpoints name, when they name one.
    pub node: Option<String>,
    /// What proves that node (before a DNS lookup, which the catalog makes
    /// when two claims meet).
    pub proof: Proof,
}

/// The admission rule (see the module doc). The subnets of this node's
/// ports are handed in by the caller (they are known once the ports are
/// open).
#[derive(Debug, Clone)]
pub struct Admission {
    pub rails: Rails,
    pub policy: AddressPolicy,
    /// Configured fabric networks (`peer_probes.fabric_networks`,
    /// `rails.networks`), beyond the ports' own subnets.
    pub fabric: Vec<PortSubnet>,
}

impl Admission {
    /// The admission of `peer_probes:`: its rails, `allow_link_local`, and
    /// `fabric_networks` with the rail networks as the fabric beyond the
    /// ports' own subnets.
    pub fn from_config(c: &PeerProbeConfig) -> Result<Admission, FleetError> {
        let rails = Rails::new(&c.rails)?;
        let mut fabric = c.fabric_networks.clone();
        fabric.extend(rails.fabric());
        Ok(Admission {
            rails,
            policy: AddressPolicy {
                allow_link_local: c.allow_link_local,
            },
            fabric,
        })
    }

    /// One endpoint on its own (the document-level checks are in
    /// [`Admission::admit`]); `ports`: the subnets of this node's ports.
    pub fn check(&self, e: &Endpoint, ports: &[PortSubnet]) -> Result<(), Refusal> {
        if !name_ok(&e.node)
            || !name_ok(&e.device)
            || e.port == 0
            || e.port == 255
            || e.rail
                .as_deref()
                .is_some_and(|r| !super::peer_rails::rail_name_ok(r))
        {
            return Err(Refusal::Name);
        }
        if e.wire != WIRE_VERSION {
            return Err(Refusal::WireVersion);
        }
        let fabric: Vec<PortSubnet> = ports.iter().chain(&self.fabric).copied().collect();
        admit_gid(&e.gid, &fabric, &self.policy)?;
        if !(2..=0xFF_FFFF).contains(&e.qpn) {
            return Err(Refusal::Qpn);
        }
        if e.qkey != QKEY {
            return Err(Refusal::Qkey);
        }
        if ![256, 512, 1024, 2048, 4096].contains(&e.mtu) {
            return Err(Refusal::Mtu);
        }
        if let Some(claim) = &e.subnet {
            let holds =
                super::peer_rails::Net::parse(claim).is_some_and(|n| n.contains_gid(&e.gid));
            if !holds {
                return Err(Refusal::OffRail);
            }
        }
        if !self.rails.admissible(e) {
            return Err(Refusal::OffRail);
        }
        Ok(())
    }

    /// The endpoints of one peer that may be probed, and what proves the
    /// node they name; `ports`: the subnets of this node's ports.
    pub fn admit(&self, claim: Claim, endpoints: Vec<Endpoint>, ports: &[PortSubnet]) -> Admitted {
        let mut out = Admitted::default();
        if endpoints.is_empty() {
            return out;
        }
        let n = endpoints.len() as u64;
        let mut refuse_all = |r: Refusal| {
            out.refused.insert(r, n);
        };
        if endpoints.len() > MAX_ENDPOINTS_PER_PEER {
            refuse_all(Refusal::TooMany);
            return out;
        }
        let node = endpoints[0].node.clone();
        if endpoints.iter().any(|e| e.node != node) || !identity_matches(&node, claim.host) {
            refuse_all(Refusal::NodeMismatch);
            return out;
        }
        out.proof = if claim
            .target_node
            .is_some_and(|t| first_label(t) == first_label(&node))
        {
            Proof::TargetLabel
        } else if host_is_address(claim.host) {
            Proof::None
        } else {
            Proof::Name
        };
        for e in endpoints {
            match self.check(&e, ports) {
                Ok(()) => out.endpoints.push(e),
                Err(r) => *out.refused.entry(r).or_insert(0) += 1,
            }
        }
        out.endpoints.sort();
        out.endpoints.dedup();
        out.node = Some(node);
        out
    }
}

/// Fetches a peer's endpoint document (the real one is
/// [`DocumentFetcher`]; tests hand in their own).
pub trait Fetch: Send + Sync + 'static {
    fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError>;
}

/// The peers' `/peer-probe/endpoints`, with the TLS and basic auth of
/// `peer_probes:` (`tls_ca_file`, `username`, `password_file`).
#[derive(Debug, Clone)]
pub struct DocumentFetcher {
    pub client: HttpClient,
}

impl DocumentFetcher {
    /// From the configuration; an unreadable CA or password file is an
    /// error (said once at start, not per fetch).
    pub fn new(config: &PeerProbeConfig) -> Result<DocumentFetcher, ClientError> {
        let tls = match &config.tls_ca_file {
            Some(path) => Some(client_config("peer_probes.tls_ca_file", path)?),
            None => None,
        };
        let authorization = match (&config.username, &config.password_file) {
            (Some(user), Some(path)) => Some(basic_authorization(
                user,
                &read_secret("peer_probes.password_file", path)?,
            )),
            _ => None,
        };
        Ok(DocumentFetcher {
            client: HttpClient::new(config.fetch_timeout, tls, authorization),
        })
    }

    /// Whether addresses without a scheme mean `https` (a CA is configured).
    pub fn default_tls(&self) -> bool {
        self.client.has_tls()
    }
}

impl Fetch for DocumentFetcher {
    fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
        let url = peer.url().ok_or_else(|| {
            super::peer_http::fetch_error(
                FetchReason::Unsupported,
                format!("{}: not an http(s) address", peer.0),
            )
        })?;
        let body = self.client.get(
            &url,
            &Request {
                path: "/peer-probe/endpoints",
                accept: "application/json",
                max_body: MAX_DOCUMENT_BYTES,
                gzip: false,
            },
        )?;
        roce_probe::peer::parse_endpoints(&body).map_err(|e| {
            super::peer_http::fetch_error(FetchReason::Parse, format!("{}: {e}", url.authority))
        })
    }
}

/// One endpoint as the fleet's Prometheus holds it: the `instance` it was
/// scraped from (the peer) and the endpoint its labels make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSeries {
    pub instance: String,
    /// The target's own `node` label (service discovery), where the
    /// exporter's was renamed `exported_node`.
    pub target_node: Option<String>,
    pub endpoint: Result<Endpoint, Refusal>,
}

/// Queries the fleet's endpoints (the real one is [`PrometheusQuery`];
/// tests hand in their own).
pub trait Query: Send + Sync + 'static {
    fn query(&self) -> Result<Vec<FleetSeries>, FetchError>;
}

/// One instant query of the Prometheus HTTP API per call.
#[derive(Debug, Clone)]
pub struct PrometheusQuery {
    client: HttpClient,
    url: Url,
    query: String,
    max_bytes: usize,
}

impl PrometheusQuery {
    pub fn new(c: &PeerPrometheusConfig) -> Result<PrometheusQuery, ClientError> {
        let url = Url::parse(&c.url).ok_or_else(|| ClientError::File {
            key: "peer_probes.prometheus.url",
            path: c.url.clone(),
            message: "expected http(s)://host[:port][/prefix]".into(),
        })?;
        let tls = match &c.tls_ca_file {
            Some(path) => Some(client_config("peer_probes.prometheus.tls_ca_file", path)?),
            None => None,
        };
        let authorization = match (&c.bearer_token_file, &c.username, &c.password_file) {
            (Some(path), _, _) => Some(format!(
                "Bearer {}",
                read_secret("peer_probes.prometheus.bearer_token_file", path)?
            )),
            (None, Some(user), Some(path)) => Some(basic_authorization(
                user,
                &read_secret("peer_probes.prometheus.password_file", path)?,
            )),
            _ => None,
        };
        Ok(PrometheusQuery {
            client: HttpClient::new(c.timeout, tls, authorization),
            url,
            query: c.query.clone(),
            max_bytes: c.max_bytes,
        })
    }
}

impl Query for PrometheusQuery {
    fn query(&self) -> Result<Vec<FleetSeries>, FetchError> {
        let path = format!("/api/v1/query?query={}", query_escape(&self.query));
        let body = self.client.get(
            &self.url,
            &Request {
                path: &path,
                accept: "application/json",
                max_body: self.max_bytes,
                gzip: true,
            },
        )?;
        parse_query_response(&body).map_err(|e| {
            super::peer_http::fetch_error(
                FetchReason::Parse,
                format!("{}: {e}", self.url.authority),
            )
        })
    }
}

#[derive(Deserialize)]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiData {
    result_type: String,
    result: Vec<ApiSample>,
}

#[derive(Deserialize)]
struct ApiSample {
    metric: BTreeMap<String, String>,
}

/// The series of an instant-query answer (`/api/v1/query`), each made an
/// endpoint or refused as `Malformed`; at most [`MAX_FLEET_ENDPOINTS`]
/// (the rest refused as `TooMany`).
pub fn parse_query_response(body: &[u8]) -> Result<Vec<FleetSeries>, FleetError> {
    let r: ApiResponse =
        serde_json::from_slice(body).map_err(|e| FleetError::QueryAnswer(e.into()))?;
    if r.status != "success" {
        return Err(FleetError::QueryStatus {
            status: r.status,
            error: r.error.unwrap_or_default(),
        });
    }
    let data = r.data.ok_or(FleetError::QueryWithoutData)?;
    if data.result_type != "vector" {
        return Err(FleetError::QueryResultType {
            result_type: data.result_type,
        });
    }
    Ok(data
        .result
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let instance = s.metric.get("instance").cloned().unwrap_or_default();
            let target_node = s
                .metric
                .contains_key("exported_node")
                .then(|| s.metric.get("node").cloned())
                .flatten();
            let endpoint = if i >= MAX_FLEET_ENDPOINTS {
                Err(Refusal::TooMany)
            } else {
                endpoint_of_labels(&s.metric)
            };
            FleetSeries {
                instance,
                target_node,
                endpoint,
            }
        })
        .collect())
}

/// The endpoint described by the labels of one
/// `roce_peer_probe_endpoint_info` series. A scrape whose target labels
/// already hold `node` renames the exporter's to `exported_node`.
pub fn endpoint_of_labels(l: &BTreeMap<String, String>) -> Result<Endpoint, Refusal> {
    let get = |k: &str| l.get(k).map(String::as_str).ok_or(Refusal::Malformed);
    let num = |k: &str| get(k)?.parse::<u32>().map_err(|_| Refusal::Malformed);
    let node = l
        .get("exported_node")
        .or_else(|| l.get("node"))
        .ok_or(Refusal::Malformed)?;
    let opt = |k: &str| l.get(k).filter(|v| !v.is_empty()).cloned();
    Ok(Endpoint {
        node: node.clone(),
        device: get("device")?.to_string(),
        device_index: num("device_index")?,
        port: get("port")?.parse().map_err(|_| Refusal::Malformed)?,
        gid: get("gid")?.parse().map_err(|_| Refusal::Malformed)?,
        gid_index: num("gid_index")?,
        qpn: num("qpn")?,
        qkey: QKEY,
        mtu: num("mtu")?,
        subnet: opt("subnet"),
        rail: opt("rail"),
        incarnation: match l.get("incarnation").filter(|v| !v.is_empty()) {
            Some(v) => v.parse().map_err(|_| Refusal::Malformed)?,
            None => 0,
        },
        // Absent from the series of exporters before wire version 2.
        wire: match l.get("wire").filter(|v| !v.is_empty()) {
            Some(v) => v.parse().map_err(|_| Refusal::Malformed)?,
            None => 1,
        },
        // Every node reads the whole fleet from one answer: none is
        // still learning its peers.
        learning: false,
    })
}

/// The host of an `instance` label (`host:port`, `[v6]:port` or `host`).
pub fn instance_host(instance: &str) -> &str {
    if instance.starts_with('[') || instance.matches(':').count() == 1 {
        super::peer_http::host_of(instance)
    } else {
        instance
    }
}

#[cfg(test)]
mod tests;
