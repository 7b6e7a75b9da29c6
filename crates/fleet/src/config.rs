//! The `peer_probes:` section of the configuration: who the peers are
//! (a list, DNS, a file, or the fleet's Prometheus), how fast to probe them,
//! how to fetch their endpoint documents, and how this node computes its
//! rails.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use roce_model::values::{CountLimit, DurationLimit};

use crate::error::FleetError;

/// `peer_probes:`: UD probes to other exporters' responders
/// (`roce_probe::peer`; design in docs/peer-probes.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerProbeConfig {
    /// Off by default: on, each active port keeps a responder and
    /// `/peer-probe/endpoints` publishes it.
    pub enabled: bool,
    /// Peer exporters: `host:port` or `http(s)://host:port`.
    pub peers: Vec<String>,
    /// A DNS name whose A/AAAA records are the peers (`name:port`).
    pub dns: Option<String>,
    /// DNS names whose SRV records are the peers (target and port each):
    /// a Kubernetes headless Service's named port is
    /// `_<port>._tcp.<service>.<namespace>.svc.cluster.local`.
    #[serde(deserialize_with = "srv_names")]
    pub srv: Vec<String>,
    /// A file of peer addresses, one per line (`#` comments), re-read when
    /// its modification time changes.
    pub file: Option<std::path::PathBuf>,
    /// The fleet's endpoints from the Prometheus HTTP API (one query per
    /// refresh) instead of a peer list and per-peer documents.
    pub prometheus: Option<PeerPrometheusConfig>,
    /// Probe every peer port, not only those on the same rail (every peer
    /// address is still admitted as any other: a unicast host of the
    /// fabric).
    pub all_to_all: bool,
    /// Admit peers' link-local GIDs (`fe80::/10`, `169.254/16`): a fabric
    /// addressed by link-local GIDs only, on one L2 segment. Off by
    /// default: a link-local GID names a host only on its own link.
    pub allow_link_local: bool,
    /// Networks of the fabric beyond the subnets of this node's RDMA ports
    /// (`10.0.0.0/16`, `fd00:1::/48`; at most 64): where peers may be on a
    /// routed fabric whose links are /31s. The `rails.networks` count too.
    /// A peer GID outside both is refused (`off_fabric`).
    #[serde(deserialize_with = "crate::peer_address::networks")]
    pub fabric_networks: Vec<crate::peer_address::PortSubnet>,
    /// How the rail of a port is found (the ports that probe each other).
    pub rails: RailConfig,
    /// Probe packets per second per local port ([`PACKETS_PER_SECOND`]): a
    /// ceiling. Probes are sent one at a time, so it is reached while
    /// answers come within the spacing; each lost probe takes `timeout`
    /// instead (docs/peer-probes.md, "Achieved rate").
    #[serde(deserialize_with = "packets_per_second")]
    pub packets_per_second: u32,
    /// Peers probed per round and port ([`SAMPLE`]).
    #[serde(deserialize_with = "sample")]
    pub sample: usize,
    /// Distinct flow labels (RoCE v2 UDP source ports, so ECMP paths) each
    /// pair of ports walks, whatever the number of peers ([`FLOW_LABELS`]).
    #[serde(deserialize_with = "flow_labels")]
    pub flow_labels: u32,
    /// How long a probe waits for its echo.
    #[serde(deserialize_with = "timeout")]
    pub timeout: Duration,
    /// How often the peer list (DNS, SRV, file) is read again, or the
    /// Prometheus query made again.
    #[serde(deserialize_with = "refresh")]
    pub refresh: Duration,
    /// The absolute deadline of one endpoint document fetch (resolution,
    /// connect, TLS, request and the whole answer) and of one DNS lookup.
    #[serde(deserialize_with = "fetch_timeout")]
    pub fetch_timeout: Duration,
    /// PEM file of the CA(s) that signed the peers' server certificates:
    /// with it, `https://` peers are fetched (and addresses without a
    /// scheme mean `https`).
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// Basic-auth user for the peers' endpoints route (with `password_file`).
    pub username: Option<String>,
    /// File holding the basic-auth password (first line; never logged).
    pub password_file: Option<std::path::PathBuf>,
}

impl Default for PeerProbeConfig {
    fn default() -> Self {
        PeerProbeConfig {
            enabled: false,
            peers: Vec::new(),
            dns: None,
            srv: Vec::new(),
            file: None,
            prometheus: None,
            all_to_all: false,
            allow_link_local: false,
            fabric_networks: Vec::new(),
            rails: RailConfig::default(),
            packets_per_second: 5,
            sample: 8,
            flow_labels: roce_probe::peer::DEFAULT_FLOW_LABELS,
            timeout: Duration::from_millis(500),
            refresh: Duration::from_secs(60),
            fetch_timeout: Duration::from_secs(5),
            tls_ca_file: None,
            username: None,
            password_file: None,
        }
    }
}

/// `peer_probes.packets_per_second`.
pub const PACKETS_PER_SECOND: CountLimit = CountLimit {
    key: "peer_probes.packets_per_second",
    min: 1,
    max: roce_probe::peer::MAX_PACKETS_PER_SECOND as u64,
    unit: "",
    why: "probe packets a local port sends each second",
};

/// `peer_probes.sample`.
pub const SAMPLE: CountLimit = CountLimit {
    key: "peer_probes.sample",
    min: 1,
    max: 16,
    unit: "",
    why: "peers each local port probes per round",
};

/// `peer_probes.flow_labels`.
pub const FLOW_LABELS: CountLimit = CountLimit {
    key: "peer_probes.flow_labels",
    min: 1,
    max: roce_probe::peer::MAX_FLOW_LABELS as u64,
    unit: "",
    why: "ECMP paths each pair of ports walks",
};

/// `peer_probes.timeout`.
pub const TIMEOUT: DurationLimit = DurationLimit {
    key: "peer_probes.timeout",
    min: Duration::from_millis(1),
    max: Duration::from_secs(10),
    why: "how long a probe waits for its echo",
};

/// `peer_probes.refresh`.
pub const REFRESH: DurationLimit = DurationLimit {
    key: "peer_probes.refresh",
    min: Duration::from_secs(1),
    max: Duration::from_secs(24 * 3600),
    why: "each refresh reads the peer list or queries Prometheus",
};

/// `peer_probes.fetch_timeout`: a fetch holds one of the 16 fetch workers
/// this long at most.
pub const FETCH_TIMEOUT: DurationLimit = DurationLimit {
    key: "peer_probes.fetch_timeout",
    min: Duration::from_millis(10),
    max: Duration::from_secs(60),
    why: "a fetch holds one of the 16 fetch workers this long at most",
};

/// Longest `peer_probes.fetch_timeout`.
pub const MAX_FETCH_TIMEOUT: Duration = FETCH_TIMEOUT.max;

/// `peer_probes.prometheus.timeout`.
pub const QUERY_TIMEOUT: DurationLimit = DurationLimit {
    key: "peer_probes.prometheus.timeout",
    min: Duration::from_millis(10),
    max: Duration::from_secs(60),
    why: "a query holds a fetch worker this long at most",
};

/// `peer_probes.prometheus.max_bytes`.
pub const QUERY_BYTES: CountLimit = CountLimit {
    key: "peer_probes.prometheus.max_bytes",
    min: 1024,
    max: 1 << 30,
    unit: "bytes",
    why: "the largest answer taken, after decompression",
};

roce_model::limit_parsers! {
    packets_per_second: PACKETS_PER_SECOND as u32,
    sample: SAMPLE as usize,
    flow_labels: FLOW_LABELS as u32,
    timeout: TIMEOUT as Duration,
    refresh: REFRESH as Duration,
    fetch_timeout: FETCH_TIMEOUT as Duration,
    query_timeout: QUERY_TIMEOUT as Duration,
    query_bytes: QUERY_BYTES as usize,
}

/// Names of SRV records: at most 16, each a DNS name of at most 253 bytes.
fn srv_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    if names.len() > 16 {
        return Err(serde::de::Error::custom("at most 16 SRV names"));
    }
    for n in &names {
        let t = n.trim_end_matches('.');
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if t.is_empty() || t.len() > 253 || !t.split('.').all(label_ok) {
            return Err(serde::de::Error::custom(format!(
                "{n:?} is not a DNS name (e.g. _metrics._tcp.roce-exporter.monitoring.svc.cluster.local)"
            )));
        }
    }
    Ok(names)
}

/// `peer_probes.prometheus`: where the fleet's endpoints are read from.
/// Each exporter with peer probes on publishes
/// `roce_peer_probe_endpoint_info`; one instant query per refresh returns
/// them all.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerPrometheusConfig {
    /// `http(s)://host:port[/prefix]` of the Prometheus server (or of
    /// anything serving its HTTP API: Thanos Query, VictoriaMetrics).
    pub url: String,
    /// The instant query; its result must be series of
    /// `roce_peer_probe_endpoint_info` (narrow it with a selector, e.g.
    /// `roce_peer_probe_endpoint_info{job="roce"}`).
    #[serde(default = "default_endpoint_query")]
    pub query: String,
    /// PEM file of the CA(s) of the server's certificate (`https://`).
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// A file holding a bearer token (first line; never logged).
    pub bearer_token_file: Option<std::path::PathBuf>,
    /// Basic-auth user (with `password_file`).
    pub username: Option<String>,
    pub password_file: Option<std::path::PathBuf>,
    /// The absolute deadline of one query, answer included.
    #[serde(default = "default_query_timeout", deserialize_with = "query_timeout")]
    pub timeout: Duration,
    /// Largest answer taken, after decompression.
    #[serde(default = "default_query_bytes", deserialize_with = "query_bytes")]
    pub max_bytes: usize,
}

fn default_endpoint_query() -> String {
    "roce_peer_probe_endpoint_info".into()
}

fn default_query_timeout() -> Duration {
    Duration::from_secs(10)
}

/// 64 MiB: 10,000 nodes of 8 ports at ≈400 bytes per series.
fn default_query_bytes() -> usize {
    64 << 20
}

/// `peer_probes.rails`: which local port probes which peer port. A rail
/// is computed by this node for its own ports, and for a peer's port from
/// what this node can check itself (its GID against this node's subnets
/// or the configured networks); a document's own `subnet` claim never
/// decides it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RailConfig {
    pub by: RailBy,
    /// `by: netdev`: the port's netdev name with one `*` whose match is
    /// the rail (`eth*`: eth3 is rail 3; `rdma*np0`).
    pub netdev_pattern: Option<String>,
    /// `by: map`: RDMA device (or netdev) name to rail name.
    pub map: std::collections::BTreeMap<String, String>,
    /// `by: networks`: rail name to the IPv4 network holding every address
    /// of that rail (`rail0: 10.0.0.0/16` over the /31s of a pure L3
    /// fabric).
    pub networks: std::collections::BTreeMap<String, String>,
}

impl Default for RailConfig {
    fn default() -> Self {
        RailConfig {
            by: RailBy::Subnet,
            netdev_pattern: None,
            map: std::collections::BTreeMap::new(),
            networks: std::collections::BTreeMap::new(),
        }
    }
}

/// How a port's rail is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RailBy {
    /// The IPv4 subnet of the port's GID on this host: a peer is on the
    /// rail when its GID is inside it; ports without one (InfiniBand) by
    /// device index.
    Subnet,
    /// The device's position in the sorted device list.
    DeviceIndex,
    /// The netdev name against `netdev_pattern`.
    Netdev,
    /// The explicit `map`.
    Map,
    /// The configured `networks` a GID falls in.
    Networks,
}

impl PeerProbeConfig {
    /// Checks across the keys of `peer_probes:`: credentials never over
    /// plain http, one source of endpoints, rails that can be computed.
    pub fn validate(&self) -> Result<(), FleetError> {
        if !(1..=roce_probe::peer::MAX_FLOW_LABELS).contains(&self.flow_labels) {
            return Err(FleetError::FlowLabels {
                value: self.flow_labels,
                max: roce_probe::peer::MAX_FLOW_LABELS,
            });
        }
        if self.username.is_some() != self.password_file.is_some() {
            return Err(FleetError::Unpaired {
                first: "username",
                second: "password_file",
            });
        }
        if self.username.is_some() {
            if let Some(p) = self.peers.iter().find(|p| p.trim().starts_with("http://")) {
                return Err(FleetError::CredentialsToPlainPeer { peer: p.clone() });
            }
            let listed = !self.peers.is_empty()
                || self.dns.is_some()
                || !self.srv.is_empty()
                || self.file.is_some();
            if self.tls_ca_file.is_none() && listed {
                return Err(FleetError::CredentialsWithoutCa);
            }
        }
        if let Some(prom) = &self.prometheus {
            let listed = !self.peers.is_empty()
                || self.dns.is_some()
                || !self.srv.is_empty()
                || self.file.is_some();
            if listed {
                return Err(FleetError::PrometheusAndPeerList);
            }
            let url = crate::peer_http::Url::parse(&prom.url).ok_or_else(|| {
                FleetError::PrometheusUrl {
                    url: prom.url.clone(),
                }
            })?;
            if prom.username.is_some() != prom.password_file.is_some() {
                return Err(FleetError::Unpaired {
                    first: "prometheus.username",
                    second: "prometheus.password_file",
                });
            }
            let credentials = prom.username.is_some() || prom.bearer_token_file.is_some();
            if prom.username.is_some() && prom.bearer_token_file.is_some() {
                return Err(FleetError::TwoCredentials);
            }
            if credentials && !url.tls {
                return Err(FleetError::CredentialsToPlainPrometheus {
                    url: prom.url.clone(),
                });
            }
            if url.tls && prom.tls_ca_file.is_none() {
                return Err(FleetError::PrometheusWithoutCa);
            }
            if prom.query.trim().is_empty() || prom.query.len() > 4096 {
                return Err(FleetError::QueryLength);
            }
        }
        crate::peer_rails::Rails::new(&self.rails).map(|_| ())
    }
}
