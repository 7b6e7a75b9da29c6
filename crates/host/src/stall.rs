//! Per-item deadlines for a reader's file calls: which file a reader is in
//! now, the files whose read is stuck past its deadline, and the file layer
//! that keeps both ([`WatchedFs`]).
//!
//! Reading stays on the reader's own thread, with nothing added to a call
//! but two stores to its [`Progress`] (no clock, no lock, no hand-over to
//! another thread: a sample makes hundreds of reads). The watcher (the
//! sampler, which waits for the reader on a timer anyway) looks at the
//! progress one item deadline apart while a call of the source runs: the
//! same call in flight at both looks has been blocked for at least that
//! long. It then [`abandon`](StallWatch::abandon)s that reader (its later
//! calls fail at once, so its call ends as soon as the kernel lets go),
//! marks the file stuck, and goes on with a sibling reader over the same
//! watch, which skips the stuck file: its value is absent, the rest of the
//! source is read. When the stuck read returns, the file is read again from
//! the next sample on.
//!
//! A stuck file is reported once, by the watcher, when it is found; calls
//! not made for it meanwhile read as absent ([`crate::errno::means_absent`]).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::Stuck;
use crate::fs::{KeptDir, SysFile, SysFs};

/// The item number of a call whose path could not be kept.
const UNNAMED: usize = usize::MAX;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Set in [`Progress::seq`] once the reader is left to a stuck call.
const ABANDONED: u64 = 1 << 63;

/// Where one reader is: written by the reader's thread, looked at (and
/// marked abandoned) by the watcher.
#[derive(Debug, Default)]
pub struct Progress {
    /// Odd while a call is in flight (bumped at each call's start and end),
    /// with [`ABANDONED`] set once the watcher left the reader to its call:
    /// set by a compare-and-swap from the value it looked at, so only while
    /// that very call is still in flight.
    seq: AtomicU64,
    /// The item of the call in flight (or of the last one).
    item: AtomicUsize,
}

impl Progress {
    /// Starts a call of `item`; false when the reader is abandoned (then no
    /// call is in flight).
    fn begin(&self, item: usize) -> bool {
        self.item.store(item, Ordering::Relaxed);
        if self.seq.fetch_add(1, Ordering::AcqRel) & ABANDONED != 0 {
            self.seq.fetch_add(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Ends the call; true when the reader was abandoned during it.
    fn end(&self) -> bool {
        self.seq.fetch_add(1, Ordering::AcqRel) & ABANDONED != 0
    }

    fn abandoned(&self) -> bool {
        self.seq.load(Ordering::Acquire) & ABANDONED != 0
    }

    fn look(&self) -> Look {
        let seq = self.seq.load(Ordering::Acquire);
        Look {
            seq,
            item: self.item.load(Ordering::Relaxed),
        }
    }
}

/// What the watcher saw of a reader at one look; two equal looks in a call
/// one item deadline apart mean that call has been blocked since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    seq: u64,
    item: usize,
}

impl Look {
    /// Whether a call was in flight (of a reader not yet abandoned).
    pub fn in_call(self) -> bool {
        self.seq & ABANDONED == 0 && self.seq % 2 == 1
    }
}

/// The paths of the items in use: one per open handle and per listing in
/// flight, numbered from a free list, so that the table is as large as the
/// handles a reader keeps (a path is not kept for every file ever read).
#[derive(Debug, Default)]
struct Names {
    paths: Vec<Option<PathBuf>>,
    free: Vec<usize>,
}

/// The per-item deadline state one source shares between its readers: the
/// reader in use, the names of the files in use, and the stuck ones.
#[derive(Debug, Default)]
pub struct StallWatch {
    current: Mutex<Arc<Progress>>,
    names: Mutex<Names>,
    /// Stuck files and since when they were found stuck.
    stuck: Mutex<HashMap<PathBuf, Instant>>,
    /// `stuck.len()`, read on every call without the lock.
    stuck_count: AtomicUsize,
}

impl StallWatch {
    pub fn new() -> Arc<StallWatch> {
        Arc::new(StallWatch::default())
    }

    /// A new reader's progress, the one looked at from now on.
    pub fn new_reader(&self) -> Arc<Progress> {
        let p = Arc::new(Progress::default());
        *lock(&self.current) = p.clone();
        p
    }

    /// The reader in use now, as it is at this instant.
    pub fn look(&self) -> Look {
        lock(&self.current).look()
    }

    /// Leaves the reader in use to the call `look` saw in flight: that
    /// file is stuck (skipped by every reader until its read returns) and
    /// the reader's later calls fail at once. The file's path, when it was
    /// named; `None` when the reader has moved on since `look`.
    pub fn abandon(&self, look: Look) -> Option<PathBuf> {
        if !look.in_call() {
            return None;
        }
        let current = lock(&self.current).clone();
        let path = self.path_of(look.item);
        // Marked stuck before the reader is marked abandoned, so that the
        // call's return, which clears the mark, cannot come in between.
        if let Some(path) = &path {
            let mut stuck = lock(&self.stuck);
            stuck.insert(path.clone(), Instant::now());
            self.stuck_count.store(stuck.len(), Ordering::Release);
        }
        let swapped = current.seq.compare_exchange(
            look.seq,
            look.seq | ABANDONED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if swapped.is_err() {
            // The call returned since the look: nothing is stuck.
            if let Some(path) = &path {
                let mut stuck = lock(&self.stuck);
                stuck.remove(path);
                self.stuck_count.store(stuck.len(), Ordering::Release);
            }
            return None;
        }
        Some(path.unwrap_or_else(|| PathBuf::from("(a file whose name was not kept)")))
    }

    /// Files stuck now.
    pub fn stuck_now(&self) -> usize {
        self.stuck_count.load(Ordering::Acquire)
    }

    fn path_of(&self, item: usize) -> Option<PathBuf> {
        lock(&self.names).paths.get(item).cloned().flatten()
    }

    /// Numbers `path` for as long as it is in use.
    fn name(&self, path: &Path) -> usize {
        let mut names = lock(&self.names);
        match names.free.pop() {
            Some(id) => {
                if let Some(slot) = names.paths.get_mut(id) {
                    *slot = Some(path.to_path_buf());
                    return id;
                }
                UNNAMED
            }
            None => {
                names.paths.push(Some(path.to_path_buf()));
                names.paths.len() - 1
            }
        }
    }

    fn unname(&self, item: usize) {
        let mut names = lock(&self.names);
        if let Some(slot) = names.paths.get_mut(item) {
            *slot = None;
            names.free.push(item);
        }
    }

    fn is_stuck(&self, path: &Path) -> bool {
        self.stuck_now() > 0 && lock(&self.stuck).contains_key(path)
    }

    /// A call of a stuck item returned: it is read again from now on.
    fn returned(&self, item: usize) {
        let Some(path) = self.path_of(item) else {
            return;
        };
        let mut stuck = lock(&self.stuck);
        let Some(since) = stuck.remove(&path) else {
            return;
        };
        self.stuck_count.store(stuck.len(), Ordering::Release);
        drop(stuck);
        tracing::warn!(
            file = %path.display(),
            stuck_for = ?since.elapsed(),
            "a stuck read returned; the file is read again from the next sample"
        );
    }
}

/// A file layer whose calls are watched per item: each open, read and
/// listing names its path to the watch, a stuck path is not called again
/// until its read returns, and an abandoned reader's calls fail at once.
pub struct WatchedFs {
    inner: Box<dyn SysFs>,
    watch: Arc<StallWatch>,
    progress: Arc<Progress>,
}

impl WatchedFs {
    /// A new reader over `inner`, the one `watch` looks at from now on.
    pub fn new(inner: Box<dyn SysFs>, watch: Arc<StallWatch>) -> WatchedFs {
        let progress = watch.new_reader();
        WatchedFs {
            inner,
            watch,
            progress,
        }
    }

    /// A call on `path` that keeps no handle: named while it runs.
    fn call_path<T>(&self, path: &Path, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        if self.watch.is_stuck(path) {
            return Err(Stuck::error(false));
        }
        let item = self.watch.name(path);
        let r = watched(&self.progress, &self.watch, item, f);
        self.watch.unname(item);
        r
    }
}

/// One call of `item` on `progress`'s reader: not made once the reader is
/// abandoned; a stuck call that returns clears its file's mark.
fn watched<T>(
    progress: &Progress,
    watch: &StallWatch,
    item: usize,
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<T> {
    if progress.abandoned() || !progress.begin(item) {
        return Err(Stuck::error(true));
    }
    let r = f();
    if progress.end() {
        watch.returned(item);
    }
    r
}

/// An open handle, named for as long as it lives.
struct WatchedFile {
    inner: Box<dyn SysFile>,
    item: usize,
    watch: Arc<StallWatch>,
    progress: Arc<Progress>,
}

impl Drop for WatchedFile {
    fn drop(&mut self) {
        self.watch.unname(self.item);
    }
}

impl SysFile for WatchedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.watch.stuck_now() > 0
            && self
                .watch
                .path_of(self.item)
                .is_some_and(|p| self.watch.is_stuck(&p))
        {
            return Err(Stuck::error(false));
        }
        watched(&self.progress, &self.watch, self.item, || {
            self.inner.read_at(buf, offset)
        })
    }
}

impl SysFs for WatchedFs {
    fn open(&self, path: &Path) -> io::Result<Box<dyn SysFile>> {
        if self.watch.is_stuck(path) {
            return Err(Stuck::error(false));
        }
        let item = self.watch.name(path);
        match watched(&self.progress, &self.watch, item, || self.inner.open(path)) {
            Ok(inner) => Ok(Box::new(WatchedFile {
                inner,
                item,
                watch: self.watch.clone(),
                progress: self.progress.clone(),
            })),
            Err(e) => {
                self.watch.unname(item);
                Err(e)
            }
        }
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.call_path(path, || self.inner.read_dir(path))
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        self.call_path(path, || self.inner.read_link(path))
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self.call_path(path, || self.inner.canonicalize(path))
    }

    fn list_kept(
        &self,
        path: &Path,
        kept: &mut KeptDir,
        names: &mut Vec<OsString>,
    ) -> io::Result<()> {
        self.call_path(path, || self.inner.list_kept(path, kept, names))
    }
}

/// The per-item deadline for a source whose whole call has `deadline`: a
/// quarter of it, between 25 ms and 1 s. A stuck call is found between one
/// and two item deadlines after it began, so two stuck files in one sample
/// still leave the source time to read the rest.
pub fn item_deadline(deadline: Duration) -> Duration {
    (deadline / 4).clamp(Duration::from_millis(25), Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::StdFs;
    use crate::kept::{Io, KeptAttr, ReadBuf};
    use crate::{Einval, Reading};

    /// A file layer whose reads of one path block until released.
    struct Blocking {
        path: PathBuf,
        release: Arc<(Mutex<bool>, std::sync::Condvar)>,
    }

    struct BlockingFile(
        Box<dyn SysFile>,
        Option<Arc<(Mutex<bool>, std::sync::Condvar)>>,
    );

    impl SysFile for BlockingFile {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            if let Some(r) = &self.1 {
                let (m, c) = &**r;
                let mut done = m.lock().unwrap();
                while !*done {
                    done = c.wait(done).unwrap();
                }
            }
            self.0.read_at(buf, offset)
        }
    }

    impl SysFs for Blocking {
        fn open(&self, path: &Path) -> io::Result<Box<dyn SysFile>> {
            let gate = (path == self.path).then(|| self.release.clone());
            Ok(Box::new(BlockingFile(StdFs.open(path)?, gate)))
        }
        fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
            StdFs.read_dir(path)
        }
        fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
            StdFs.read_link(path)
        }
        fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
            StdFs.canonicalize(path)
        }
    }

    #[test]
    fn a_stuck_read_is_found_by_two_looks_skipped_by_the_next_reader_and_read_again_once_it_returns(
    ) {
        let dir = std::env::temp_dir().join(format!("roce-stall-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, "1\n").unwrap();
        std::fs::write(&b, "2\n").unwrap();
        let release = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let watch = StallWatch::new();
        let fs = WatchedFs::new(
            Box::new(Blocking {
                path: a.clone(),
                release: release.clone(),
            }),
            watch.clone(),
        );
        let idle = watch.look();
        assert!(!idle.in_call());
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let stuck_reader = std::thread::spawn({
            let (a, b) = (a.clone(), b.clone());
            move || {
                let mut buf = ReadBuf::new();
                let mut io = Io::new(&fs, &mut buf, usize::MAX);
                let mut stale = false;
                let mut attr = KeptAttr::new(a);
                assert!(matches!(
                    attr.open(&mut io, Einval::Error),
                    Reading::Value(())
                ));
                entered_tx.send(()).unwrap();
                let first = attr.read(&mut io, Einval::Error, &mut stale);
                // Abandoned meanwhile: its next call is not made.
                let next = KeptAttr::new(b).read(&mut io, Einval::Error, &mut stale);
                (first, next)
            }
        });
        entered.recv().unwrap();
        // Two equal looks with a call in flight: stuck (the reader thread
        // is blocked on the gate, so the looks cannot differ).
        let first = loop {
            let l = watch.look();
            if l.in_call() {
                break l;
            }
            std::thread::yield_now();
        };
        assert_eq!(watch.look(), first);
        assert_eq!(watch.abandon(first), Some(a.clone()));
        assert_eq!(watch.stuck_now(), 1);

        // The next reader skips the stuck file (absent) and reads the rest.
        let fs2 = WatchedFs::new(Box::new(StdFs), watch.clone());
        let mut buf = ReadBuf::new();
        let mut io = Io::new(&fs2, &mut buf, usize::MAX);
        let mut stale = false;
        assert_eq!(
            KeptAttr::new(a.clone()).read(&mut io, Einval::Error, &mut stale),
            Reading::Absent
        );
        assert_eq!(
            KeptAttr::new(b.clone()).read(&mut io, Einval::Error, &mut stale),
            Reading::Value(2)
        );
        assert_eq!(io.reads, 1, "the stuck file was not touched");

        // The stuck read returns: the abandoned reader stops at its next
        // call, and the file is read again.
        *release.0.lock().unwrap() = true;
        release.1.notify_all();
        let (first, next) = stuck_reader.join().unwrap();
        assert_eq!(first, Reading::Value(2));
        assert_eq!(next, Reading::Absent);
        assert_eq!(watch.stuck_now(), 0);
        assert_eq!(
            KeptAttr::new(a).read(&mut io, Einval::Error, &mut stale),
            Reading::Value(2)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn item_deadlines() {
        assert_eq!(
            item_deadline(Duration::from_secs(5)),
            Duration::from_secs(1)
        );
        assert_eq!(
            item_deadline(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
        assert_eq!(
            item_deadline(Duration::from_millis(100)),
            Duration::from_millis(25)
        );
    }
}
