//! The data model between reading and judging: the immutable [`snapshot`]
//! of one sample (each reader crate's typed part, and how every source
//! fared), the [`finding`]s the rules make of it, the [`rule_table`] that
//! names every rule, and the meanings of hardware counter names
//! ([`meaning`]). Plain data and pure functions: no I/O, no Prometheus.
//!
//! The crate graph keeps it that way (tests/it/layers.rs): the readers
//! (roce-rdma, roce-netdev, roce-topology, roce-probe, roce-nccl, roce-lldp) produce
//! the parts, roce-rules reads the model and makes findings, roce-exposition
//! reads the model and names metrics, and only the binary wires them.

pub mod finding;
pub mod lldp;
pub mod load;
pub mod meaning;
pub mod nccl;
pub mod peer;
pub mod rule_table;
pub mod snapshot;
pub mod values;

pub use finding::{Finding, Severity, Subject};
pub use rule_table::{Area, RuleId};
pub use snapshot::{Snapshot, SourceState};
