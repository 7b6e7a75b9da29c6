//! The error every reader reports for a file that should have been readable
//! and was not: its path, and the errno or the reason its content did not
//! parse.

use std::io;
use std::path::{Path, PathBuf};

/// A file that should have been readable and was not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub path: PathBuf,
    pub kind: ReadErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadErrorKind {
    /// The read failed with this errno (EACCES, EIO, ...).
    Io(i32),
    /// The file was read but its content did not parse.
    Parse(String),
}

impl ReadError {
    /// A failed system call on `path`.
    pub fn io(path: &Path, e: &io::Error) -> Self {
        ReadError {
            path: path.to_path_buf(),
            kind: ReadErrorKind::Io(crate::errno::errno(e)),
        }
    }

    /// Content of `path` that did not parse, and why.
    pub fn parse(path: &Path, msg: impl Into<String>) -> Self {
        ReadError {
            path: path.to_path_buf(),
            kind: ReadErrorKind::Parse(msg.into()),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ReadErrorKind::Io(errno) => {
                write!(
                    f,
                    "{}: {}",
                    self.path.display(),
                    io::Error::from_raw_os_error(*errno)
                )
            }
            ReadErrorKind::Parse(msg) => write!(f, "{}: {}", self.path.display(), msg),
        }
    }
}

impl std::error::Error for ReadError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_path_and_strerror() {
        let e = ReadError::io(
            Path::new("/sys/class/net/eth0/mtu"),
            &io::Error::from_raw_os_error(libc::EACCES),
        );
        assert_eq!(
            e.to_string(),
            "/sys/class/net/eth0/mtu: Permission denied (os error 13)"
        );
        let e = ReadError::parse(Path::new("/sys/x"), "not a number: \"x\"");
        assert_eq!(e.to_string(), "/sys/x: not a number: \"x\"");
    }
}
