//! Probes between hosts, the part that is not verbs: who the peers are (a
//! list, DNS A/AAAA and SRV, a file, or one query of the fleet's
//! Prometheus), fetching and admitting what they say about their endpoints
//! (bounded HTTP with one absolute deadline, every document validated
//! before a probe is aimed), the rails this node computes itself, and the
//! runtime that runs the probing threads of `roce_probe::peer` over them.
//!
//! Everything here treats the network as hostile: bounded in size, time and
//! rate, refused with a counted reason (docs/peer-probes.md,
//! docs/security.md). The binary's peer-probe source starts the runtime and
//! copies its results into the snapshot.

pub mod config;
pub mod error;
pub mod load;
pub mod peer_address;
pub mod peer_dns;
pub mod peer_endpoints;
pub mod peer_http;
pub mod peer_list;
pub mod peer_rails;
pub mod runner;

pub use error::{FleetError, SharedError};
