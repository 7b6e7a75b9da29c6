//! roce_exporter: a Prometheus exporter for RDMA fabrics.
//!
//! Data flows one way: [`sources`] read the host into a [`snapshot::Snapshot`]
//! (plain data, no Prometheus), the [`sampler`] runs them on an interval and
//! publishes the result into the [`app::App`], [`exposition`] is the only
//! place that names metrics, and the [`server`] (crates/web) only serves,
//! what [`app::App`] hands it.

#![deny(unsafe_code)]

pub mod app;
pub mod check;
pub mod cli;
pub mod config;
pub mod host;
pub mod load;
pub mod load_responder;
pub mod logging;
pub mod manpage;
pub mod runbook;
pub mod sampler;
pub mod sources;

/// The model (crates/model), the rules (crates/rules), the exposition
/// (crates/exposition) and the HTTP server (crates/web), under the names the
/// binary, the tests and the fuzz targets use.
pub use roce_exposition as exposition;
pub use roce_model::{meaning, snapshot, values};
pub use roce_rules as rules;
pub use roce_web as server;
pub use roce_web::webconfig;

/// `roce_exporter --version`, in node_exporter's layout: version, branch
/// and revision, then build user, build date, compiler and target.
pub const VERSION_TEXT: &str = concat!(
    "version ",
    env!("CARGO_PKG_VERSION"),
    " (branch: ",
    env!("ROCE_EXPORTER_BRANCH"),
    ", revision: ",
    env!("ROCE_EXPORTER_REVISION"),
    ")\n  build user:       ",
    env!("ROCE_EXPORTER_BUILD_USER"),
    "\n  build date:       ",
    env!("ROCE_EXPORTER_BUILD_DATE"),
    "\n  rust version:     ",
    env!("ROCE_EXPORTER_RUSTC"),
    "\n  platform:         ",
    env!("ROCE_EXPORTER_TARGET"),
);

/// What `roce_exporter_build_info` reports for this build (the facts the
/// build script recorded), sampling every `sample_interval`.
pub fn build_info(sample_interval: std::time::Duration) -> exposition::BuildInfo {
    exposition::BuildInfo::current(sample_interval).with_build(
        env!("ROCE_EXPORTER_REVISION"),
        env!("ROCE_EXPORTER_BRANCH"),
        env!("ROCE_EXPORTER_RUSTC"),
    )
}
