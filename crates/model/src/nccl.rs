//! The NCCL part of a snapshot: the summary of what NCCL jobs did and the
//! reader's own reading of its directories. The types are roce-nccl's,
//! whose reader fills them.

pub use roce_nccl::{FilesSkipped, NcclSnapshot};
