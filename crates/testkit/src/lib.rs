//! Test support for roce_exporter: one builder for sysfs and procfs trees
//! in the kernel's layout ([`tree::Tree`], [`rdma`], [`pci`]), one list of
//! kernel names ([`kernel`]), and the trees built from them ([`trees`]):
//! the fixtures the crates' tests read, the demo node, the benchmark tree.
//! Network namespaces with veth pairs for the tests of real netdevs
//! ([`netns`]). With the `snapshot` feature, snapshots of the model for the rule and
//! exposition tests ([`snapshot`]).
//! The committed trees are regenerated with
//! `cargo run -p roce-testkit -- fixtures`; a test keeps them in step.

pub mod compare;
pub mod kernel;
pub mod netns;
pub mod pci;
pub mod rdma;
#[cfg(feature = "snapshot")]
pub mod snapshot;
pub mod tree;
pub mod trees;

use std::io;
use std::path::Path;

/// Builds a tree (or a folder of trees) at the path given.
pub type Build = fn(&Path) -> io::Result<()>;

/// Where each committed tree lives, relative to the repository root, and
/// how it is built.
pub const COMMITTED: &[(&str, Build)] = &[
    ("crates/rdma/tests/fixtures", trees::rdma::write_all),
    ("crates/topology/tests/fixtures", trees::pci::write_all),
    ("examples/demo-gpu-node/sys", trees::demo::write),
];
