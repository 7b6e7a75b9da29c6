//! Which files a pass looks at: the tracked ones as they are now, new and
//! parked ones from the next slice of the directory's listing, and the
//! bound on parked files (see the module doc of [`super`]).

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::SystemTime;

use super::state::FileState;
use super::{errno, note_unreadable, PassStats, TailEvent, Tailer, MAX_PARKED_PER_SLOT};

pub(super) struct Candidate {
    pub(super) path: PathBuf,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) len: u64,
    pub(super) mtime: SystemTime,
    /// Grew since it was last read (new files too).
    pub(super) grew: bool,
}

impl Candidate {
    pub(super) fn new(path: PathBuf, meta: &fs::Metadata) -> Self {
        Candidate {
            path,
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            grew: true,
        }
    }

    /// Whether the file changed since `st` was last read: grew, or was
    /// rewritten (another size or time), or is another file.
    pub(super) fn changed_since(&self, st: &FileState) -> bool {
        self.dev != st.dev || self.ino != st.ino || self.len != st.offset || self.mtime != st.mtime
    }
}

impl Tailer {
    /// Forgets the parked files written longest ago past
    /// [`MAX_PARKED_PER_SLOT`] per slot.
    pub(super) fn bound_parked(&mut self, sink: &mut dyn FnMut(TailEvent<'_>)) {
        let cap = self.cfg.max_files.saturating_mul(MAX_PARKED_PER_SLOT);
        if self.parked.len() <= cap {
            return;
        }
        let mut by_age: Vec<(SystemTime, PathBuf)> = self
            .parked
            .iter()
            .map(|(p, st)| (st.mtime, p.clone()))
            .collect();
        by_age.sort();
        let excess = self.parked.len() - cap;
        for (_, path) in by_age.into_iter().take(excess) {
            self.parked.remove(&path);
            sink(TailEvent::Gone { file: &path });
        }
    }

    /// The tracked files as they are now; the deleted, replaced by
    /// something else, and idle ones are forgotten.
    pub(super) fn refresh_tracked(
        &mut self,
        now: SystemTime,
        stats: &mut PassStats,
        sink: &mut dyn FnMut(TailEvent<'_>),
    ) -> Vec<Candidate> {
        let mut out = Vec::with_capacity(self.files.len());
        let mut drop = Vec::new();
        for path in self.files.keys() {
            match fs::symlink_metadata(path) {
                Ok(meta) if meta.file_type().is_file() => {
                    let mut c = Candidate::new(path.clone(), &meta);
                    if let Some(st) = self.files.get(path) {
                        c.grew = c.changed_since(st);
                    }
                    let idle = now.duration_since(c.mtime).unwrap_or_default();
                    if idle > self.cfg.idle_expiry {
                        stats.aged_out += 1;
                        drop.push(path.clone());
                    } else {
                        out.push(c);
                    }
                }
                Ok(_) => drop.push(path.clone()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    stats.deleted += 1;
                    drop.push(path.clone());
                }
                Err(e) => {
                    note_unreadable(stats, path, errno(&e));
                }
            }
        }
        for path in drop {
            self.files.remove(&path);
            sink(TailEvent::Gone { file: &path });
        }
        out
    }

    /// Files not tracked, from the next slice of the listing: regular, not
    /// hidden, not compressed, written within the idle expiry, and new or
    /// parked and changed since. Parked files that went idle, and at the end
    /// of a listing those it did not meet (deleted), are forgotten.
    pub(super) fn discover(
        &mut self,
        now: SystemTime,
        stats: &mut PassStats,
        sink: &mut dyn FnMut(TailEvent<'_>),
    ) -> Vec<Candidate> {
        let mut out = Vec::new();
        let listing = match self.listing.take() {
            Some(l) => l,
            None => match fs::read_dir(&self.dir) {
                Ok(l) => {
                    self.listing_number += 1;
                    l
                }
                Err(e) => {
                    stats.dir_error = Some(errno(&e));
                    return out;
                }
            },
        };
        let mut listing = listing;
        loop {
            if stats.entries_seen >= self.cfg.max_dir_entries {
                self.listing = Some(listing);
                break;
            }
            let Some(entry) = listing.next() else {
                stats.listing_complete = true;
                break;
            };
            stats.entries_seen += 1;
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || name.ends_with(".gz") {
                continue;
            }
            // The type from the listing itself; links are not followed:
            // only what the jobs wrote here.
            match entry.file_type() {
                Ok(t) if t.is_file() => {}
                _ => continue,
            }
            let path = entry.path();
            if self.files.contains_key(&path) {
                continue;
            }
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.file_type().is_file() {
                continue;
            }
            let mut c = Candidate::new(path, &meta);
            // Not read yet: it has not grown since a read.
            c.grew = false;
            let idle = now.duration_since(c.mtime).unwrap_or_default() > self.cfg.idle_expiry;
            if let Some(st) = self.parked.get_mut(&c.path) {
                st.seen_in = self.listing_number;
                if idle {
                    stats.aged_out += 1;
                    self.parked.remove(&c.path);
                    sink(TailEvent::Gone { file: &c.path });
                    continue;
                }
                if !c.changed_since(st) {
                    continue;
                }
                c.grew = true;
            } else if idle {
                continue;
            }
            out.push(c);
        }
        if stats.listing_complete {
            let listing = self.listing_number;
            let gone: Vec<PathBuf> = self
                .parked
                .iter()
                .filter(|(_, st)| st.seen_in != listing)
                .map(|(p, _)| p.clone())
                .collect();
            for path in gone {
                stats.deleted += 1;
                self.parked.remove(&path);
                sink(TailEvent::Gone { file: &path });
            }
        }
        out
    }
}
