//! What one read of a host file gave: a value, nothing (absent: the kernel
//! does not provide it here, which is not an error), or an error with the
//! path and errno.

use std::io;
use std::path::Path;

use crate::errno::{means_absent, Einval};
use crate::error::ReadError;

/// The outcome of reading one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading<T> {
    Value(T),
    Absent,
    Error(ReadError),
}

impl<T> Reading<T> {
    /// A failed call on `path`, classified (see [`crate::errno`]).
    pub fn failed(path: &Path, e: &io::Error, einval: Einval) -> Self {
        if means_absent(e, einval) {
            Reading::Absent
        } else {
            Reading::Error(ReadError::io(path, e))
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Reading::Value(v) => Reading::Value(f(v)),
            Reading::Absent => Reading::Absent,
            Reading::Error(e) => Reading::Error(e),
        }
    }

    /// The value, if there is one; an error goes to `errors`.
    pub fn value_or_record(self, errors: &mut Vec<ReadError>) -> Option<T> {
        match self {
            Reading::Value(v) => Some(v),
            Reading::Absent => None,
            Reading::Error(e) => {
                errors.push(e);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_classifies() {
        let path = Path::new("/sys/class/net/eth0/speed");
        let einval = io::Error::from_raw_os_error(libc::EINVAL);
        assert_eq!(
            Reading::<u64>::failed(path, &einval, Einval::Absent),
            Reading::Absent
        );
        let r = Reading::<u64>::failed(path, &einval, Einval::Error);
        let mut errors = Vec::new();
        assert_eq!(r.value_or_record(&mut errors), None);
        assert_eq!(errors, vec![ReadError::io(path, &einval)]);
    }
}
