//! The exporter's integration tests, one binary: each module is one area
//! (the checklist, expositions and golden files, HTTP and TLS, the rules,
//! sources over fixture trees, privileges, signals, packaging, the
//! monitoring stack), and `support` holds the helpers several share. One
//! binary links the exporter once instead of once per file. One area:
//! `cargo test --test it <module>::`.

mod support;

/// The rdma crate's test file layer (injected errnos, recorded reads) and
/// its fixture trees.
#[path = "../../crates/rdma/tests/common/mod.rs"]
mod rdma_common;

mod attack;
mod attack_load;
mod attack_sources;
mod check;
mod check_host;
mod check_nccl;
mod clock;
mod config;
mod exposition;
mod faults;
mod http;
mod http_pressure;
mod kernel_requests;
mod layers;
mod load_http;
mod monitoring;
mod nccl_source;
mod netdev;
mod packaging;
mod peer_probes;
mod phys;
mod privileges;
mod probe;
mod readme;
mod rules;
mod rules_completions;
mod rules_congestion;
mod rules_fec;
mod rules_host;
mod rules_lldp;
mod rules_load;
mod rules_nccl;
mod rules_phys;
mod rules_qos;
mod signals;
mod tls;
mod topology;
mod web_flags;
