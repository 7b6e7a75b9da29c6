//! Recording failures in the snapshot's errors with their path. Which
//! failures are *absent* and which are errors is decided in one place for
//! every reader, [`roce_host::errno`].

use std::io;
use std::path::Path;

pub(super) use roce_host::errno::is_absent;
use roce_host::ReadError;

pub(super) fn push_io(errors: &mut Vec<ReadError>, path: &Path, e: &io::Error) {
    errors.push(ReadError::io(path, e));
}

pub(super) fn push_parse(errors: &mut Vec<ReadError>, path: &Path, msg: impl std::fmt::Display) {
    errors.push(ReadError::parse(path, msg.to_string()));
}
