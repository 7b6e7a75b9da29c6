//! The crate's error: a `peer_probes:` setting that cannot be used, a
//! source of the peer list that could not be read, an answer that does not
//! parse, a client that cannot be built. Each variant names what failed
//! (the setting, the name, the path, the header) in its fields;
//! [`FleetError::kind`] says which class of failure it is. The messages
//! are the words the configuration check and the log print.

use std::path::PathBuf;
use std::sync::Arc;

use roce_host::named::NamedFileErrorKind;
use roce_host::ErrorKind;

use crate::config::RailBy;
use crate::peer_dns::DnsError;
use crate::peer_http::ClientError;

/// An error of another crate held by a [`FleetError`], so that the
/// latter can be cloned and compared (as the configuration's errors are):
/// two are equal when they say the same.
#[derive(Debug)]
pub struct SharedError<E>(pub Arc<E>);

impl<E> Clone for SharedError<E> {
    fn clone(&self) -> Self {
        SharedError(Arc::clone(&self.0))
    }
}

impl<E> From<E> for SharedError<E> {
    fn from(e: E) -> Self {
        SharedError(Arc::new(e))
    }
}

impl<E: std::fmt::Display> PartialEq for SharedError<E> {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl<E: std::fmt::Display> Eq for SharedError<E> {}

impl<E: std::fmt::Display> std::fmt::Display for SharedError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What failed in the fleet crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetError {
    // `peer_probes:` settings, checked once at start.
    #[error("flow_labels {value}: expected 1 to {max}")]
    FlowLabels { value: u32, max: u32 },
    /// Two settings of which one is set without the other.
    #[error("{first} and {second} go together")]
    Unpaired {
        first: &'static str,
        second: &'static str,
    },
    #[error("peer {peer:?} is http:// while username/password_file are set: credentials are never sent over plain http (use https:// and tls_ca_file)")]
    CredentialsToPlainPeer { peer: String },
    #[error("username/password_file without tls_ca_file: peers would be fetched over plain http with credentials; set tls_ca_file (peers are then https)")]
    CredentialsWithoutCa,
    #[error("prometheus replaces the peer list: set either prometheus or peers/dns/srv/file")]
    PrometheusAndPeerList,
    #[error("prometheus.url {url:?}: expected http(s)://host[:port][/prefix]")]
    PrometheusUrl { url: String },
    #[error("prometheus: bearer_token_file or username/password_file, not both")]
    TwoCredentials,
    #[error("prometheus.url {url:?} is http:// while credentials are set: they are never sent over plain http")]
    CredentialsToPlainPrometheus { url: String },
    #[error("prometheus.url is https:// and needs prometheus.tls_ca_file")]
    PrometheusWithoutCa,
    #[error("prometheus.query must be 1 to 4096 bytes")]
    QueryLength,
    /// A rail name of `rails.networks` that is not label-safe.
    #[error("rails.networks: rail name {rail:?}")]
    RailName { rail: String },
    #[error("rails.networks.{rail}: {network:?} is not an IPv4 network (e.g. 10.0.0.0/16)")]
    RailNetwork { rail: String, network: String },
    #[error("rails.networks: {rail} and {other} overlap")]
    RailsOverlap { rail: String, other: String },
    /// An entry of `rails.map` with an empty or long key, or a rail name
    /// that is not label-safe.
    #[error("rails.map: {key:?}: {rail:?}")]
    RailMapEntry { key: String, rail: String },
    #[error("rails.netdev_pattern {pattern:?}: one `*` marks the rail (eth*)")]
    NetdevPattern { pattern: String },
    /// `rails.by` without the setting it reads.
    #[error("rails.by {by:?} needs rails.{setting}")]
    RailsNeed { by: RailBy, setting: &'static str },
    /// An unreadable CA or secret file, or a TLS client that cannot be
    /// built (at start).
    #[error(transparent)]
    Client(#[from] ClientError),

    // Sources of the peer list, read at every refresh.
    /// `peer_probes.dns`: the A/AAAA lookup of `name:port`.
    #[error("peer_probes.dns {name}: {error}")]
    Resolve {
        name: String,
        error: SharedError<std::io::Error>,
    },
    /// `peer_probes.srv`: the SRV lookup of one name.
    #[error("peer_probes.srv {name}: {error}")]
    Srv { name: String, error: DnsError },
    /// `peer_probes.file`: its metadata or its text.
    #[error("peer_probes.file {}: {error}", path.display())]
    PeerFile {
        path: PathBuf,
        error: SharedError<NamedFileErrorKind>,
    },

    /// Reading the peer list panicked (caught; the next refresh reads
    /// it again).
    #[error("the peer list panicked")]
    ListPanicked,

    // Answers of the network, each refused whole.
    /// A Prometheus query answer that is not JSON of the HTTP API.
    #[error("query answer: {0}")]
    QueryAnswer(SharedError<serde_json::Error>),
    #[error("query status {status:.32?}: {error:.200}")]
    QueryStatus { status: String, error: String },
    #[error("query answer without data")]
    QueryWithoutData,
    #[error("query result {result_type:.32?}, expected an instant vector")]
    QueryResultType { result_type: String },
    /// A response head over its bound (hyper's parser stopped at it).
    #[error("a head longer than {max} bytes")]
    HeadTooLong { max: usize },
    /// A response header whose value is refused (`content-length`,
    /// `transfer-encoding`, `content-encoding`).
    #[error("{header} {value:.32?}")]
    Header { header: &'static str, value: String },
}

impl FleetError {
    /// The class of the failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FleetError::Resolve { error, .. } => ErrorKind::of_io(&error.0),
            FleetError::Srv { error, .. } => match error {
                DnsError::Timeout { .. } => ErrorKind::Busy,
                DnsError::NoServer(_) | DnsError::Rcode { .. } => ErrorKind::Absent,
                DnsError::Io { .. } => ErrorKind::Failed,
                DnsError::Name(_) | DnsError::Malformed(_) => ErrorKind::Malformed,
            },
            FleetError::PeerFile { error, .. } => match &*error.0 {
                NamedFileErrorKind::Open(e) | NamedFileErrorKind::Read(e) => ErrorKind::of_io(e),
                NamedFileErrorKind::TimedOut(_) | NamedFileErrorKind::TooManyStuck => {
                    ErrorKind::Busy
                }
                NamedFileErrorKind::NotRegular(_)
                | NamedFileErrorKind::TooLarge(_)
                | NamedFileErrorKind::NotText => ErrorKind::Malformed,
            },
            FleetError::Client(ClientError::Tls(_)) | FleetError::ListPanicked => ErrorKind::Failed,
            _ => ErrorKind::Malformed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_cause() {
        let gone = FleetError::PeerFile {
            path: "/etc/peers".into(),
            error: NamedFileErrorKind::Open(std::io::Error::from_raw_os_error(libc::ENOENT)).into(),
        };
        assert_eq!(gone.kind(), ErrorKind::Absent);
        assert_eq!(
            gone.to_string(),
            "peer_probes.file /etc/peers: No such file or directory (os error 2)"
        );
        let denied = FleetError::Resolve {
            name: "x:1".into(),
            error: std::io::Error::from_raw_os_error(libc::EACCES).into(),
        };
        assert_eq!(denied.kind(), ErrorKind::Permission);
        let stuck = FleetError::PeerFile {
            path: "/nfs/peers".into(),
            error: NamedFileErrorKind::TooManyStuck.into(),
        };
        assert_eq!(stuck.kind(), ErrorKind::Busy);
        assert_eq!(FleetError::QueryWithoutData.kind(), ErrorKind::Malformed);
        assert_eq!(
            FleetError::Unpaired {
                first: "username",
                second: "password_file"
            }
            .to_string(),
            "username and password_file go together"
        );
        assert_eq!(stuck.clone(), stuck);
        assert_ne!(stuck, gone);
    }
}
