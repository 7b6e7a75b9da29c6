//! Reloading: the configuration in force, re-read when its file or a file
//! it names changes, and refused when the new one would not validate or
//! would lower the protection in force.

use std::sync::Mutex;

use super::*;

/// What identifies a file's version (a rewrite or a rename changes it);
/// `None` while it does not exist.
pub(super) type Stamp = Option<(SystemTime, u64, u64)>;

pub(super) fn stamp(file: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(file).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

struct WatchState {
    checked: Instant,
    /// Every file watched and its version when last looked at.
    seen: BTreeMap<PathBuf, Stamp>,
}

/// The web configuration in force, re-read when its file or a certificate,
/// key or CA file it names changes (looked at every [`RECHECK_EVERY`] off
/// the server's path), so certificates rotate without a restart.
/// A change is refused, with an error in the log, when the file does not
/// validate, is empty, or would lower the protection in force; the running
/// configuration stays, and the files the refused one names are watched
/// along with the running one's.
pub struct WebConfigWatcher {
    path: PathBuf,
    current: ArcSwap<WebConfig>,
    state: Mutex<WatchState>,
}

impl std::fmt::Debug for WebConfigWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfigWatcher")
            .field("path", &self.path)
            .finish()
    }
}

impl WebConfigWatcher {
    /// Loads the file; an invalid file is an error (the caller exits).
    pub fn load(path: &Path) -> Result<WebConfigWatcher, WebConfigError> {
        let Attempt { files, result } = attempt(path, false);
        let config = result?;
        Ok(WebConfigWatcher {
            path: path.to_path_buf(),
            current: ArcSwap::from_pointee(config),
            state: Mutex::new(WatchState {
                checked: Instant::now(),
                seen: files.into_iter().collect(),
            }),
        })
    }

    /// The configuration for a new connection: the one in force, never a
    /// file read (the files are looked at by [`WebConfigWatcher::watch`]'s
    /// thread, so a file that hangs never holds a connection up).
    pub fn current(&self) -> Arc<WebConfig> {
        self.current.load_full()
    }

    /// Looks at the files every [`RECHECK_EVERY`] on a thread of its own
    /// until the watcher is dropped.
    pub fn watch(watcher: &Arc<WebConfigWatcher>) -> std::io::Result<()> {
        let weak = Arc::downgrade(watcher);
        std::thread::Builder::new()
            .name("roce-web-config".into())
            .spawn(move || loop {
                std::thread::sleep(RECHECK_EVERY);
                match weak.upgrade() {
                    Some(w) => w.recheck(false),
                    None => return,
                }
            })
            .map(|_| ())
    }

    /// Looks at the files now (`force`) or if the last look is old enough.
    pub fn recheck(&self, force: bool) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if !force && state.checked.elapsed() < RECHECK_EVERY {
            return;
        }
        state.checked = Instant::now();
        if state.seen.iter().all(|(f, seen)| stamp(f) == *seen) {
            return;
        }
        let Attempt { files, result } = attempt(&self.path, true);
        let running = self.current.load_full();
        let refused = match result {
            Ok(next) => match running.lowered_by(&next) {
                None => {
                    let mut next = next;
                    // Outcomes are keyed by the configured hash: still
                    // right for whatever users the new file has.
                    next.auth = running.auth.clone();
                    self.current.store(Arc::new(next));
                    state.seen = files.into_iter().collect();
                    tracing::info!(file = %self.path.display(), "web configuration reloaded");
                    return;
                }
                Some(why) => format!(
                    "{}: {why}; lowering the protection in force takes a restart",
                    self.path.display()
                ),
            },
            Err(e) => e.to_string(),
        };
        tracing::error!(
            reason = %refused,
            "web configuration change refused; keeping the running one"
        );
        // Remembered as seen, so a bad file is reported once, not on every
        // look; the next change to any of them is looked at again. The
        // running configuration's files stay watched (its certificate may
        // still rotate), and so does every file the refused one names (one
        // that did not exist yet may appear).
        let mut seen: BTreeMap<PathBuf, Stamp> = running
            .files
            .iter()
            .map(|f| (f.clone(), stamp(f)))
            .collect();
        seen.extend(files);
        state.seen = seen;
    }
}
