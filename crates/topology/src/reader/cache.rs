//! The last walk kept between walks: its snapshot, its errors, and the
//! run-time link attributes (`current_link_speed`, `current_link_width`)
//! that are re-read through kept descriptors ([`crate::attr`]) every link
//! interval; in between the last reading is served.

use std::path::Path;
use std::time::Instant;

use roce_host::{Io, ReadBuf, SysFs};

use super::TopologyReader;
use crate::attr::{Fresh, KeptAttr};
use crate::pci::{self, SpeedText};
use crate::types::*;

/// The last walk and what a sample re-reads of it.
pub(super) struct Cache {
    /// The RDMA devices it was built for.
    pub(super) nics: Vec<NicRef>,
    pub(super) built: Instant,
    /// The walk's snapshot with the last reading of the link attributes
    /// and its errors: what is served until the next reading.
    pub(super) snap: TopologySnapshot,
    /// When the link attributes were last read.
    pub(super) links_read: Instant,
    /// The walk's errors except those of the re-read files: they stay true
    /// until the next walk, so every sample repeats them (as each walk
    /// did before the cache).
    static_errors: Vec<ReadError>,
    kept: Vec<KeptLink>,
    /// For each of `snap.links`, its lower end's index in `snap.functions`.
    link_functions: Vec<Option<usize>>,
}

/// The run-time link attributes of one function.
struct KeptLink {
    function: usize,
    speed: KeptAttr,
    width: KeptAttr,
}

impl TopologyReader {
    pub(super) fn rebuild(&mut self, nics: &[NicRef], now: Instant) -> TopologySnapshot {
        self.cache = None;
        self.rebuilds += 1;
        let (snap, dirs) = self.walk(nics);
        let mut kept = Vec::new();
        for (function, f) in snap.functions.iter().enumerate() {
            let Some(dir) = dirs.get(&f.address) else {
                continue;
            };
            let mut io = unbudgeted(self.files.as_ref(), &mut self.buf);
            kept.push(KeptLink {
                function,
                speed: KeptAttr::open(&mut io, dir.join("current_link_speed")),
                width: KeptAttr::open(&mut io, dir.join("current_link_width")),
            });
        }
        let static_errors = snap
            .errors
            .iter()
            .filter(|e| {
                !kept
                    .iter()
                    .any(|k| k.speed.path() == e.path || k.width.path() == e.path)
            })
            .cloned()
            .collect();
        let link_functions = snap
            .links
            .iter()
            .map(|l| {
                snap.functions
                    .iter()
                    .position(|f| f.address == l.downstream)
            })
            .collect();
        self.cache = Some(Cache {
            nics: nics.to_vec(),
            built: now,
            snap: snap.clone(),
            links_read: now,
            static_errors,
            kept,
            link_functions,
        });
        snap
    }
}

impl Cache {
    /// The cached snapshot with the link attributes read now; `None` when
    /// one of them vanished (the tree changed: walk again).
    pub(super) fn refresh(&mut self, io: &mut Io<'_>) -> Option<TopologySnapshot> {
        let mut errors = self.static_errors.clone();
        for k in &mut self.kept {
            let speed = match k.speed.read(io) {
                Fresh::Vanished => return None,
                fresh => fresh_parsed(
                    fresh,
                    io,
                    k.speed.path(),
                    pci::parse_link_speed,
                    &mut errors,
                ),
            };
            let width = match k.width.read(io) {
                Fresh::Vanished => return None,
                fresh => fresh_parsed(
                    fresh,
                    io,
                    k.width.path(),
                    pci::parse_link_width,
                    &mut errors,
                ),
            };
            if let Some(f) = self.snap.functions.get_mut(k.function) {
                f.current_speed = match speed {
                    Some(SpeedText::Speed(s)) => Some(s),
                    Some(SpeedText::Unknown) | None => None,
                };
                f.current_width = width.flatten();
            }
        }
        for (link, index) in self.snap.links.iter_mut().zip(&self.link_functions) {
            if let Some(f) = index.and_then(|i| self.snap.functions.get(i)) {
                link.current_speed = f.current_speed;
                link.current_width = f.current_width;
            }
        }
        self.snap.errors = errors;
        Some(self.snap.clone())
    }
}

/// A re-read attribute's value, with the same errors as a first read.
fn fresh_parsed<T, E: std::fmt::Display>(
    fresh: Fresh,
    io: &Io<'_>,
    path: &Path,
    parse: impl Fn(&str) -> Result<T, E>,
    errors: &mut Vec<ReadError>,
) -> Option<T> {
    match fresh {
        Fresh::Len(n) => match parse(&io.buf.text(n)) {
            Ok(v) => Some(v),
            Err(msg) => {
                errors.push(ReadError::parse(path, msg.to_string()));
                None
            }
        },
        Fresh::Absent | Fresh::Vanished => None,
        Fresh::Error(e) => {
            errors.push(e);
            None
        }
    }
}

/// The kept link attributes: two per function, all kept (no budget).
pub(super) fn unbudgeted<'a>(fs: &'a dyn SysFs, buf: &'a mut ReadBuf) -> Io<'a> {
    Io::new(fs, buf, usize::MAX)
}
