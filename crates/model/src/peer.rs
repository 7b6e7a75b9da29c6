//! What the peer-probe discovery side publishes for the sampler: its mode,
//! the requests it made, and the failures and refusals by reason (the
//! `reason` and `kind` labels of the `roce_peer_probe_*` families).

use std::collections::BTreeMap;

/// Why a GET failed: the `reason` label of the fetch error counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FetchReason {
    /// The host name did not resolve (within the deadline).
    Resolve,
    /// The connection was refused or reset.
    Connect,
    /// The deadline passed (connect, handshake or answer).
    Timeout,
    /// The TLS handshake failed (an unknown CA, a name mismatch).
    Tls,
    /// A status other than 200 (or 3xx, see `Redirect`).
    Status,
    /// A redirect (3xx): never followed.
    Redirect,
    /// The head or the body exceeds its bound.
    TooLarge,
    /// Not an HTTP/1.x answer, a truncated body, a malformed chunk or
    /// gzip stream, or a document that does not parse.
    Parse,
    /// A scheme this client cannot reach (`https://` without a CA file).
    Unsupported,
    /// Credentials configured and a plain `http://` address: refused
    /// before connecting (they would cross the network in clear).
    PlainHttpCredentials,
}

impl FetchReason {
    pub const ALL: [FetchReason; 10] = [
        FetchReason::Resolve,
        FetchReason::Connect,
        FetchReason::Timeout,
        FetchReason::Tls,
        FetchReason::Status,
        FetchReason::Redirect,
        FetchReason::TooLarge,
        FetchReason::Parse,
        FetchReason::Unsupported,
        FetchReason::PlainHttpCredentials,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FetchReason::Resolve => "resolve",
            FetchReason::Connect => "connect",
            FetchReason::Timeout => "timeout",
            FetchReason::Tls => "tls",
            FetchReason::Status => "status",
            FetchReason::Redirect => "redirect",
            FetchReason::TooLarge => "too_large",
            FetchReason::Parse => "parse",
            FetchReason::Unsupported => "unsupported",
            FetchReason::PlainHttpCredentials => "plain_http_credentials",
        }
    }
}

impl std::fmt::Display for FetchReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an endpoint (or a whole document) was refused: the `reason` label
/// of `roce_peer_probe_endpoints_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// The endpoints of one peer name several nodes, or a node other than
    /// the peer's host name.
    NodeMismatch,
    /// The node is already claimed by another peer address.
    NodeClaimed,
    /// Not a unicast GID this node may aim at: multicast, unspecified,
    /// loopback, link-local, an IPv4-mapped loopback, broadcast,
    /// multicast or unspecified address.
    Gid,
    /// A QPN outside 2..=0xFFFFFF (0 and 1 are the QP0/QP1 special QPs,
    /// QPNs are 24 bits).
    Qpn,
    /// Another Q_Key than ours.
    Qkey,
    /// An MTU that is no IB MTU (256, 512, 1024, 2048, 4096).
    Mtu,
    /// A node, device or rail name that is empty, too long or not
    /// label-safe; a port number outside 1..=254.
    Name,
    /// Off every rail this node knows: outside the configured rail
    /// networks, or a `subnet` claim that does not hold its own GID.
    OffRail,
    /// More endpoints than one peer may have ([`MAX_ENDPOINTS_PER_PEER`]),
    /// or than one answer ([`MAX_FLEET_ENDPOINTS`]).
    TooMany,
    /// A Prometheus series whose labels do not make an endpoint.
    Malformed,
}

impl Refusal {
    pub const ALL: [Refusal; 10] = [
        Refusal::NodeMismatch,
        Refusal::NodeClaimed,
        Refusal::Gid,
        Refusal::Qpn,
        Refusal::Qkey,
        Refusal::Mtu,
        Refusal::Name,
        Refusal::OffRail,
        Refusal::TooMany,
        Refusal::Malformed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NodeMismatch => "node_mismatch",
            Refusal::NodeClaimed => "node_claimed",
            Refusal::Gid => "gid",
            Refusal::Qpn => "qpn",
            Refusal::Qkey => "qkey",
            Refusal::Mtu => "mtu",
            Refusal::Name => "name",
            Refusal::OffRail => "off_rail",
            Refusal::TooMany => "too_many",
            Refusal::Malformed => "malformed",
        }
    }
}

/// How endpoints are found: the `mode` label.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum DiscoveryMode {
    #[default]
    Documents,
    Prometheus,
}

impl DiscoveryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DiscoveryMode::Documents => "documents",
            DiscoveryMode::Prometheus => "prometheus",
        }
    }
}

/// Requests this node made to find endpoints: the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RequestKind {
    /// A peer's endpoint document.
    Document,
    /// A Prometheus instant query.
    Prometheus,
    /// A DNS lookup of the peer list (A/AAAA or SRV).
    Dns,
}

impl RequestKind {
    pub const ALL: [RequestKind; 3] = [
        RequestKind::Document,
        RequestKind::Prometheus,
        RequestKind::Dns,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Document => "document",
            RequestKind::Prometheus => "prometheus",
            RequestKind::Dns => "dns",
        }
    }
}

/// What the discovery side publishes for the sampler.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerDiscovery {
    pub mode: DiscoveryMode,
    /// Peers listed (documents: addresses; Prometheus: instances).
    pub peers_configured: usize,
    /// Peers whose admitted endpoints are held now.
    pub peers_known: usize,
    /// Peer endpoints held now (admitted).
    pub endpoints: usize,
    /// Failed requests, by reason (documents and queries).
    pub fetch_errors: BTreeMap<FetchReason, u64>,
    /// Refused endpoints, by reason.
    pub refused: BTreeMap<Refusal, u64>,
    /// Requests made, by kind.
    pub requests: BTreeMap<RequestKind, u64>,
    /// Completed passes over the peer list or Prometheus queries, failed
    /// or not: 0 while the first is still under way.
    pub passes: u64,
    /// Requests in flight now (documents, the list, the query).
    pub in_flight: usize,
    /// The rail each open local port computed (`device`, `port`, rail);
    /// `None` when it could not be computed.
    pub rails: Vec<(String, u8, Option<String>)>,
    /// Errors of the peer list at the latest refresh (a file that cannot
    /// be read, a name that does not resolve), each with its kind: the
    /// collector reports them every sample until a refresh without them.
    pub list_errors: Vec<roce_host::HostError>,
}
