//! Reads of one file for the walk: absent is `None`, any other failure a
//! [`ReadError`] recorded and `None`.

use std::path::Path;

use roce_host::errno::is_absent;

use crate::pci::{self, SpeedText};
use crate::types::*;

pub(super) fn io_error(path: &Path, e: &std::io::Error) -> ReadError {
    ReadError::io(path, e)
}

/// The most read of one file: `/proc/modules` of a host with many modules
/// is tens of KiB; a sysfs attribute is at most a page (64 KiB on arm64).
const MAX_TEXT: u64 = 1 << 20;

/// The file's text (at most [`MAX_TEXT`]); `None` when absent (see
/// [`roce_host::errno`]) or unreadable (recorded).
pub(super) fn read_text(path: &Path, errors: &mut Vec<ReadError>) -> Option<String> {
    match roce_host::fs::read_text_capped(path, MAX_TEXT) {
        Ok(t) => Some(t),
        Err(e) if is_absent(&e) => None,
        Err(e) => {
            errors.push(io_error(path, &e));
            None
        }
    }
}

pub(super) fn read_parsed<T, E: std::fmt::Display>(
    path: &Path,
    parse: impl Fn(&str) -> Result<T, E>,
    errors: &mut Vec<ReadError>,
) -> Option<T> {
    let text = read_text(path, errors)?;
    match parse(&text) {
        Ok(v) => Some(v),
        Err(msg) => {
            errors.push(ReadError::parse(path, msg.to_string()));
            None
        }
    }
}

pub(super) fn read_hex(path: &Path, errors: &mut Vec<ReadError>) -> Option<u32> {
    read_parsed(path, pci::parse_hex, errors)
}

pub(super) fn read_speed(path: &Path, errors: &mut Vec<ReadError>) -> Option<LinkSpeed> {
    match read_parsed(path, pci::parse_link_speed, errors)? {
        SpeedText::Speed(s) => Some(s),
        SpeedText::Unknown => None,
    }
}
