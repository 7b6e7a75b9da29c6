//! Files a user names (the configuration, the web configuration, peer
//! lists, secrets, certificates, `resolv.conf`), read so that no such file
//! can freeze or bloat the exporter: opened without blocking
//! (`O_NONBLOCK`: a FIFO with no writer does not hold the open), refused
//! unless `fstat` says it is a regular file (a FIFO, `/dev/zero`, a socket,
//! a directory are never read), read up to a byte cap (a file that grows
//! while read is refused at the cap), and on a thread of its own under a
//! deadline: a read stuck in the kernel (a hung network mount) is
//! abandoned, and the caller gets an error in time.
//!
//! An abandoned read keeps its thread until the kernel lets go; at most
//! [`MAX_STUCK`] may be outstanding in the process, past which reads are
//! refused at once, so a mount that stays hung cannot pile up threads.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Reads abandoned after their deadline and still blocked, at most.
pub const MAX_STUCK: usize = 8;

/// Reads abandoned and still blocked in the kernel. Process-wide on
/// purpose: the threads it counts are the process's, whoever started them.
static STUCK: AtomicUsize = AtomicUsize::new(0);

/// What a read may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_bytes: u64,
    pub deadline: Duration,
}

impl Limits {
    /// At most `max_bytes`, read within 5 s.
    const fn within_5s(max_bytes: u64) -> Limits {
        Limits {
            max_bytes,
            deadline: Duration::from_secs(5),
        }
    }

    /// A configuration file (main or web): 4 MiB, 5 s.
    pub const CONFIG: Limits = Limits::within_5s(4 << 20);
    /// A list (peers, `resolv.conf`): 1 MiB, 5 s.
    pub const LIST: Limits = Limits::within_5s(1 << 20);
    /// A certificate, key or CA bundle: 1 MiB, 5 s.
    pub const PEM: Limits = Limits::within_5s(1 << 20);
    /// A secret (password, token): 4 KiB, 5 s.
    pub const SECRET: Limits = Limits::within_5s(4 << 10);
}

/// Why a named file was not read: the file and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.display())]
pub struct NamedFileError {
    pub path: PathBuf,
    pub kind: NamedFileErrorKind,
}

/// What went wrong reading a named file.
#[derive(Debug, thiserror::Error)]
pub enum NamedFileErrorKind {
    #[error("{0}")]
    Open(std::io::Error),
    #[error("not a regular file ({0}): refused, never read")]
    NotRegular(&'static str),
    #[error("larger than {0} bytes: refused")]
    TooLarge(u64),
    #[error("not read within {0:?} (a hung mount?): abandoned")]
    TimedOut(Duration),
    #[error("not read: {MAX_STUCK} earlier reads are still blocked in the kernel")]
    TooManyStuck,
    #[error("{0}")]
    Read(std::io::Error),
    #[error("not UTF-8 text")]
    NotText,
}

impl NamedFileError {
    fn new(path: &Path, kind: NamedFileErrorKind) -> NamedFileError {
        NamedFileError {
            path: path.to_path_buf(),
            kind,
        }
    }

    /// Whether the file does not exist (ENOENT, ENOTDIR): some callers
    /// keep what they had, others treat it as empty.
    pub fn is_absent(&self) -> bool {
        matches!(&self.kind, NamedFileErrorKind::Open(e)
            if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)))
    }
}

/// Reads `path` within `limits`.
pub fn read_bytes(path: &Path, limits: Limits) -> Result<Vec<u8>, NamedFileError> {
    read_with(path, limits, read_now)
}

/// [`read_bytes`] with the read itself given (tests make it hang).
fn read_with(
    path: &Path,
    limits: Limits,
    read: fn(&Path, u64) -> Result<Vec<u8>, NamedFileError>,
) -> Result<Vec<u8>, NamedFileError> {
    if STUCK.load(Ordering::SeqCst) >= MAX_STUCK {
        return Err(NamedFileError::new(path, NamedFileErrorKind::TooManyStuck));
    }
    let (tx, rx) = mpsc::sync_channel(1);
    let owned = path.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("roce-read-file".into())
        .spawn(move || {
            let r = read(&owned, limits.max_bytes);
            // The receiver gave up: this read was abandoned and is done now.
            if tx.send(r).is_err() {
                STUCK.fetch_sub(1, Ordering::SeqCst);
            }
        });
    if spawned.is_err() {
        // No thread to spare: read here, still without blocking on a
        // FIFO and within the cap.
        return read(path, limits.max_bytes);
    }
    match rx.recv_timeout(limits.deadline) {
        Ok(r) => r,
        Err(_) => {
            STUCK.fetch_add(1, Ordering::SeqCst);
            // The read may have finished between the timeout and now.
            match rx.try_recv() {
                Ok(r) => {
                    STUCK.fetch_sub(1, Ordering::SeqCst);
                    r
                }
                Err(_) => Err(NamedFileError::new(
                    path,
                    NamedFileErrorKind::TimedOut(limits.deadline),
                )),
            }
        }
    }
}

/// Reads `path` within `limits` as UTF-8 text.
pub fn read_text(path: &Path, limits: Limits) -> Result<String, NamedFileError> {
    let bytes = read_bytes(path, limits)?;
    String::from_utf8(bytes).map_err(|_| NamedFileError::new(path, NamedFileErrorKind::NotText))
}

/// How a file type that is not a regular file is named in errors.
pub fn file_type_name(t: &std::fs::FileType) -> &'static str {
    if t.is_file() {
        "a regular file"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

fn read_now(path: &Path, max: u64) -> Result<Vec<u8>, NamedFileError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| NamedFileError::new(path, NamedFileErrorKind::Open(e)))?;
    let meta = file
        .metadata()
        .map_err(|e| NamedFileError::new(path, NamedFileErrorKind::Read(e)))?;
    let t = meta.file_type();
    if !t.is_file() {
        return Err(NamedFileError::new(
            path,
            NamedFileErrorKind::NotRegular(file_type_name(&t)),
        ));
    }
    if meta.len() > max {
        return Err(NamedFileError::new(path, NamedFileErrorKind::TooLarge(max)));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    // One byte past the cap tells a file that grew while read.
    file.take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| NamedFileError::new(path, NamedFileErrorKind::Read(e)))?;
    if out.len() as u64 > max {
        return Err(NamedFileError::new(path, NamedFileErrorKind::TooLarge(max)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("roce-named-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let d = dir("regular");
        let f = d.join("config.yml");
        std::fs::write(&f, "sample_interval: 5s\n").unwrap();
        assert_eq!(
            read_text(&f, Limits::CONFIG).unwrap(),
            "sample_interval: 5s\n"
        );
        let missing = read_text(&d.join("nope"), Limits::CONFIG).unwrap_err();
        assert!(missing.is_absent(), "{missing}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_at_once() {
        let d = dir("fifo");
        let fifo = d.join("config.yml");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let t = Instant::now();
        let e = read_text(&fifo, Limits::CONFIG).unwrap_err();
        assert!(
            matches!(e.kind, NamedFileErrorKind::NotRegular("a FIFO")),
            "{e}"
        );
        // Refused, not waited out (the bound against a hang, not a timing).
        assert!(t.elapsed() < Limits::CONFIG.deadline);
        let e = read_bytes(Path::new("/dev/zero"), Limits::CONFIG).unwrap_err();
        assert!(
            matches!(e.kind, NamedFileErrorKind::NotRegular("a character device")),
            "{e}"
        );
        let e = read_bytes(&d, Limits::CONFIG).unwrap_err();
        assert!(
            matches!(e.kind, NamedFileErrorKind::NotRegular("a directory")),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_read_stuck_in_the_kernel_is_abandoned_at_the_deadline() {
        fn hang(_: &Path, _: u64) -> Result<Vec<u8>, NamedFileError> {
            std::thread::sleep(Duration::from_millis(600));
            Ok(b"late".to_vec())
        }
        let limits = Limits {
            max_bytes: 100,
            deadline: Duration::from_millis(50),
        };
        let e = read_with(Path::new("/mnt/hung/config.yml"), limits, hang).unwrap_err();
        assert!(matches!(e.kind, NamedFileErrorKind::TimedOut(_)), "{e}");
        assert!(e.to_string().contains("/mnt/hung/config.yml"), "{e}");
        // The abandoned read is counted while it hangs, and let go after.
        let until = Instant::now() + Duration::from_secs(10);
        while STUCK.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(STUCK.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_file_over_the_cap_is_refused() {
        let d = dir("big");
        let f = d.join("peers");
        std::fs::write(&f, vec![b'a'; 5000]).unwrap();
        let e = read_bytes(&f, Limits::SECRET).unwrap_err();
        assert!(matches!(e.kind, NamedFileErrorKind::TooLarge(4096)), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_that_grows_while_read_stops_at_the_cap() {
        let d = dir("grow");
        let f = d.join("config.yml");
        std::fs::write(&f, "a: 1\n").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                use std::io::Write;
                let mut w = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
                let chunk = vec![b'#'; 64 << 10];
                while !stop.load(Ordering::SeqCst) {
                    if w.write_all(&chunk).is_err() {
                        break;
                    }
                    // Stops growing once well past the cap.
                    if w.metadata().map(|m| m.len()).unwrap_or(0) > 64 << 20 {
                        break;
                    }
                }
            })
        };
        let limits = Limits::within_5s(1 << 20);
        // Read until a read that began with the file already past the cap
        // has returned: that one must refuse; every read before it returns
        // at most the cap. (Bounded by the writer, not by a count of reads,
        // which a loaded machine could finish before the file grows.)
        let mut refused = false;
        loop {
            let past_cap = std::fs::metadata(&f).is_ok_and(|m| m.len() > limits.max_bytes);
            match read_bytes(&f, limits) {
                Ok(b) => assert!(b.len() as u64 <= limits.max_bytes),
                Err(NamedFileError {
                    kind: NamedFileErrorKind::TooLarge(_),
                    ..
                }) => {
                    refused = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
            if past_cap || writer.is_finished() {
                break;
            }
            std::thread::yield_now();
        }
        stop.store(true, Ordering::SeqCst);
        let _ = writer.join();
        assert!(
            refused,
            "the growing file passed the cap and was still read"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
