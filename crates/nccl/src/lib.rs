//! What NCCL really did on this node, read from the files it writes: the
//! network and transport of every channel connection, whether GPUDirect RDMA
//! was used and why not, the NCCL versions, and the bus bandwidth of large
//! multi-node collectives.
//!
//! Inputs are two kinds of file the operator makes NCCL write into a
//! directory (nothing here runs NCCL or talks to it):
//! - debug logs (`NCCL_DEBUG=INFO NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log`),
//!   parsed line by line by [`log`];
//! - NCCL Inspector output (the profiler plugin in NCCL's
//!   `ext-profiler/inspector`), JSON records or its Prometheus text files,
//!   parsed by [`inspector`].
//!
//! [`tail`] reads a directory of such files incrementally with bounded memory
//! and work per pass; [`aggregate`] folds the parsed lines into a bounded
//! summary over a time window; [`reader`] is what the exporter's NCCL
//! source calls each sample, on its own cadence. The crate is pure: no Prometheus, no host
//! state beyond the files it is pointed at, and every format is taken from
//! NCCL's source (the tests name the file and version of each).

#![deny(unsafe_code)]

pub mod aggregate;
pub mod inspector;
pub mod log;
pub mod nccl_tests;
pub mod reader;
pub mod tail;

pub use aggregate::{Aggregator, AggregatorConfig, NcclSummary};
pub use reader::{FilesSkipped, NcclSnapshot};
