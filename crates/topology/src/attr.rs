//! The per-sample file layer: the PCIe link attributes that change at run
//! time (`current_link_speed`, `current_link_width`) are opened once per
//! rebuild and re-read with `pread` at offset 0, which makes sysfs run the
//! attribute's `show()` again (a read from offset 0 resets the seq_file,
//! fs/seq_file.c `seq_read_iter`), so the value is fresh without an open.
//!
//! Behind the [`AttrFiles`] trait so that tests can count the calls and
//! play a hot-unplug on a fixture tree.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Opens and re-reads kept attribute files.
pub trait AttrFiles: Send {
    fn open(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }

    /// Reads the attribute from offset 0 into `buf`; `path` is the file's
    /// path when it was opened.
    fn read_at(&self, file: &File, path: &Path, buf: &mut [u8]) -> io::Result<usize> {
        let _ = path;
        file.read_at(buf, 0)
    }
}

/// The host's files, read directly.
#[derive(Debug, Default, Clone, Copy)]
pub struct SysAttrFiles;

impl AttrFiles for SysAttrFiles {}

/// One attribute kept between samples.
#[derive(Debug)]
pub(crate) struct KeptAttr {
    pub path: PathBuf,
    state: AttrState,
}

#[derive(Debug)]
enum AttrState {
    /// Absent when the cache was built (a function without link
    /// attributes): not looked at again until the next rebuild.
    Absent,
    Open(File),
    /// The open failed with another error than ENOENT: retried (and the
    /// error reported) every sample, as the old full walk did.
    Broken,
}

/// What a kept attribute read gave.
#[derive(Debug)]
pub(crate) enum Fresh {
    Text(String),
    Absent,
    /// The file is gone (its device was unplugged or its driver
    /// reloaded): the cached tree is stale.
    Vanished,
    Error(io::Error),
}

/// Link attributes are one short line ("32.0 GT/s PCIe\n", "16\n").
const ATTR_BUF: usize = 64;

fn gone(e: &io::Error) -> bool {
    // ENODEV: reading a descriptor whose sysfs node was removed
    // (fs/kernfs/file.c: `kernfs_seq_start` fails with -ENODEV once the
    // node is no longer active).
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

impl KeptAttr {
    pub fn open(files: &dyn AttrFiles, path: PathBuf) -> KeptAttr {
        let state = match files.open(&path) {
            Ok(f) => AttrState::Open(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => AttrState::Absent,
            Err(_) => AttrState::Broken,
        };
        KeptAttr { path, state }
    }

    pub fn read(&mut self, files: &dyn AttrFiles) -> Fresh {
        match &self.state {
            AttrState::Absent => return Fresh::Absent,
            AttrState::Open(f) => match read_text(files, f, &self.path) {
                Err(e) if gone(&e) => {}
                Err(e) => return Fresh::Error(e),
                Ok(t) => return Fresh::Text(t),
            },
            AttrState::Broken => {}
        }
        // Gone or never opened: one reopen tells a replaced node (driver
        // reload: same path, new node) from a removed one.
        match files.open(&self.path) {
            Ok(f) => {
                let text = read_text(files, &f, &self.path);
                self.state = AttrState::Open(f);
                match text {
                    Ok(t) => Fresh::Text(t),
                    Err(e) if gone(&e) => Fresh::Vanished,
                    Err(e) => Fresh::Error(e),
                }
            }
            Err(e) if gone(&e) => Fresh::Vanished,
            Err(e) => {
                self.state = AttrState::Broken;
                Fresh::Error(e)
            }
        }
    }
}

fn read_text(files: &dyn AttrFiles, f: &File, path: &Path) -> io::Result<String> {
    let mut buf = [0u8; ATTR_BUF];
    let n = files.read_at(f, path, &mut buf)?;
    let bytes = buf.get(..n).unwrap_or_default();
    Ok(String::from_utf8_lossy(bytes).into_owned())
}
