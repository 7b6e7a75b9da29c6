//! The per-sample file layer: the PCIe link attributes that change at run
//! time (`current_link_speed`, `current_link_width`) are opened once per
//! rebuild and re-read with `pread` at offset 0 ([`roce_host::KeptAttr`]),
//! so the value is fresh without an open.
//!
//! The file layer is [`roce_host::SysFs`] so that tests can count the calls
//! and play a hot-unplug on a fixture tree.

use std::path::PathBuf;

use roce_host::{Einval, Io, Reading};

/// One attribute kept between samples.
#[derive(Debug)]
pub(crate) struct KeptAttr {
    attr: roce_host::KeptAttr,
    /// Absent when the cache was built (a function without link
    /// attributes): not looked at again until the next rebuild.
    absent: bool,
}

/// What a kept attribute read gave.
#[derive(Debug)]
pub(crate) enum Fresh {
    /// The value: this many bytes in the reader's buffer.
    Len(usize),
    Absent,
    /// The file is gone (its device was unplugged or its driver
    /// reloaded): the cached tree is stale.
    Vanished,
    Error(roce_host::ReadError),
}

impl KeptAttr {
    /// Opens the attribute at a rebuild. One that could not be opened for
    /// another reason than its absence is retried (and the error reported)
    /// every sample.
    pub fn open(io: &mut Io<'_>, path: PathBuf) -> KeptAttr {
        let mut attr = roce_host::KeptAttr::new(path);
        let absent = matches!(attr.open(io, Einval::Error), Reading::Absent);
        KeptAttr { attr, absent }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.attr.path
    }

    pub fn read(&mut self, io: &mut Io<'_>) -> Fresh {
        if self.absent {
            return Fresh::Absent;
        }
        let was_open = self.attr.is_open();
        let mut stale = false;
        match self.attr.read(io, Einval::Error, &mut stale) {
            Reading::Value(n) => Fresh::Len(n),
            // Gone under a kept handle, and gone at the reopen; or there
            // when the cache was built and gone now.
            Reading::Absent if stale || !was_open => Fresh::Vanished,
            Reading::Absent => Fresh::Absent,
            Reading::Error(e) => Fresh::Error(e),
        }
    }
}
