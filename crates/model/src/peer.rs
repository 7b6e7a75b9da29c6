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

/// Why a peer's address (its GID) is not one a datagram may be aimed at:
/// not a unicast host address of this node's fabric (decided by
/// `roce_fleet::peer_address::admit_address`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressRefusal {
    /// `::`, `0.0.0.0`.
    Unspecified,
    /// `::1`, `127/8`.
    Loopback,
    /// `ff00::/8`, `224/4`.
    Multicast,
    /// `255.255.255.255`, or the broadcast address of one of this node's
    /// port subnets.
    Broadcast,
    /// The network address of one of this node's port subnets (IPv6: its
    /// Subnet-Router anycast address).
    Network,
    /// `fe80::/10`, `169.254/16`, without `peer_probes.allow_link_local`.
    LinkLocal,
    /// `0/8`, `240/4`, `::/8` outside the IPv4-mapped range, `100::/64`,
    /// `fec0::/10`.
    Reserved,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`,
    /// `3fff::/20`.
    Documentation,
    /// Inside none of this node's port subnets nor of the configured
    /// fabric networks.
    OffFabric,
}

impl AddressRefusal {
    pub const ALL: [AddressRefusal; 9] = [
        AddressRefusal::Unspecified,
        AddressRefusal::Loopback,
        AddressRefusal::Multicast,
        AddressRefusal::Broadcast,
        AddressRefusal::Network,
        AddressRefusal::LinkLocal,
        AddressRefusal::Reserved,
        AddressRefusal::Documentation,
        AddressRefusal::OffFabric,
    ];

    /// The label value (`reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            AddressRefusal::Unspecified => "unspecified",
            AddressRefusal::Loopback => "loopback",
            AddressRefusal::Multicast => "multicast",
            AddressRefusal::Broadcast => "broadcast",
            AddressRefusal::Network => "network",
            AddressRefusal::LinkLocal => "link_local",
            AddressRefusal::Reserved => "reserved",
            AddressRefusal::Documentation => "documentation",
            AddressRefusal::OffFabric => "off_fabric",
        }
    }
}

/// Why an endpoint (or a whole document) was refused: the `reason` label
/// of `roce_peer_probe_endpoints_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// The endpoints of one peer name several nodes, or a node other than
    /// the peer's host name.
    NodeMismatch,
    /// The node is held by another peer address, and this claim proves
    /// nothing the holder's does not (both are reported).
    NodeClaimed,
    /// The GID is not a unicast host address of this node's fabric.
    Address(AddressRefusal),
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
    /// A responder of another peer-probe wire version (an exporter of
    /// another release: a mixed-version fleet); never probed, as it would
    /// not answer.
    WireVersion,
    /// More endpoints than one peer may have (64), or than one answer
    /// (100,000): the whole document, or the series past the bound.
    TooMany,
    /// A Prometheus series whose labels do not make an endpoint.
    Malformed,
}

impl From<AddressRefusal> for Refusal {
    fn from(r: AddressRefusal) -> Refusal {
        Refusal::Address(r)
    }
}

impl Refusal {
    pub const ALL: [Refusal; 19] = [
        Refusal::NodeMismatch,
        Refusal::NodeClaimed,
        Refusal::Address(AddressRefusal::Unspecified),
        Refusal::Address(AddressRefusal::Loopback),
        Refusal::Address(AddressRefusal::Multicast),
        Refusal::Address(AddressRefusal::Broadcast),
        Refusal::Address(AddressRefusal::Network),
        Refusal::Address(AddressRefusal::LinkLocal),
        Refusal::Address(AddressRefusal::Reserved),
        Refusal::Address(AddressRefusal::Documentation),
        Refusal::Address(AddressRefusal::OffFabric),
        Refusal::Qpn,
        Refusal::Qkey,
        Refusal::Mtu,
        Refusal::Name,
        Refusal::OffRail,
        Refusal::WireVersion,
        Refusal::TooMany,
        Refusal::Malformed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NodeMismatch => "node_mismatch",
            Refusal::NodeClaimed => "node_claimed",
            Refusal::Address(a) => a.as_str(),
            Refusal::Qpn => "qpn",
            Refusal::Qkey => "qkey",
            Refusal::Mtu => "mtu",
            Refusal::Name => "name",
            Refusal::OffRail => "off_rail",
            Refusal::WireVersion => "wire_version",
            Refusal::TooMany => "too_many",
            Refusal::Malformed => "malformed",
        }
    }
}

/// Two peer addresses that claim one node: the one that holds it (probed)
/// and the one refused, each with what proves its claim.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeConflict {
    pub node: String,
    /// The address holding the node (`host:port` as listed, or the
    /// Prometheus instance).
    pub holder: String,
    pub holder_proof: &'static str,
    /// The address whose claim was refused.
    pub claimant: String,
    pub claimant_proof: &'static str,
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
    /// Nodes claimed by two peer addresses now (at most 16 reported).
    pub conflicts: Vec<NodeConflict>,
    /// This node has not yet tried every listed peer's endpoints once (its
    /// first walk): peers probing it may be unknown to it, and its
    /// endpoints document says so (`learning`).
    pub learning: bool,
}
