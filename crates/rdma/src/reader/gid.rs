//! GID tables: which slots a sample reads, and reading them.
//!
//! A port's GID table has 256 slots on mlx5 (1024 on rxe), nearly all empty,
//! and reading every `gids/N` each sample would be most of the reader's cost
//! (node_exporter's infiniband collector reads no GIDs at all). The kernel's
//! GID cache keeps tables compact (`drivers/infiniband/core/cache.c`):
//! `__ib_cache_gid_add` asks `find_gid` for a free slot, and `find_gid`
//! returns the *lowest* free slot (`is_gid_entry_free`) outside the slots
//! reserved for default GIDs (`gid_table_reserve_default` reserves the first
//! one per supported GID type; only default GIDs go there). `del_gid` frees a
//! slot in place, nothing moves; an entry still referenced stays
//! `GID_TABLE_ENTRY_PENDING_DEL` (not free) until its last user drops it,
//! while sysfs already shows it as zeros (`show_port_gid` in core/sysfs.c
//! prints the zero GID when `rdma_get_gid_attr` fails, and its attributes
//! fail with EINVAL). So a new GID lands in the lowest slot that looks empty,
//! or a few past it when some of those are reserved or pending deletion.
//!
//! Hence, per port, between full scans the reader reads only the slots that
//! were populated (or unreadable) when last read, plus the lowest
//! [`GID_EMPTY_PROBES`] slots that looked empty: 4 populated slots on an mlx5
//! RoCE port cost 4×3 + 4 = 16 reads instead of 256 + 4×2. It reads the whole
//! table on the port's first sample, every `gid_full_scan_interval`
//! ([`super::RdmaReader::set_gid_full_scan_interval`], default 60 s, measured on the
//! monotonic clock passed to [`super::RdmaReader::read_at`]), when the port's state
//! changed since the last sample (link flaps add and remove GIDs), and at once
//! in the same sample when a known slot reads differently (emptied, another
//! GID or type: the table is churning, entries may have landed anywhere). A
//! netdev rename changes only `gid_attrs/ndevs/N`, which is read for every
//! populated slot anyway. What a partial pass can miss is a GID added past
//! the probes (a slot beyond several pending deletions); the next full scan
//! finds it. InfiniBand ports differ only in where slots come from:
//! `config_non_roce_gid_cache` copies the HCA's own table index for index
//! (usually slot 0 alone), and `del_gid` frees a non-RoCE slot at once; the
//! same watch list and full scans cover them.
//!
//! Handles of empty slots outside the probes are closed after each pass, so
//! an 8-port host's 2048 empty slots do not eat the open-file budget that the
//! counters read every sample need.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::parse;
use crate::types::{Gid, GidType, PortState};

use super::attr::{close_attr, read_attr, Attr, Got};
use roce_host::Einval;

use super::errno::push_parse;
use super::layout::PortLayout;
use super::Ctx;

/// Empty GID slots read every sample besides the populated ones, lowest
/// first: where the kernel puts the next GID. More than one because the
/// lowest empty-looking slots can be reserved for default GIDs (one per GID
/// type, two on RoCE) or pending deletion (see the module doc).
pub const GID_EMPTY_PROBES: usize = 4;

/// The most GID slots read per port: rxe's table, the largest a driver
/// makes (`RXE_PORT_GID_TBL_LEN` in drivers/infiniband/sw/rxe/rxe_param.h);
/// mlx5 reports at most 256. A longer table (a driver bug, a hostile tree)
/// is read up to here, and the slots past it are reported every sample
/// as a `refused` error of the port's `gids` folder.
pub const MAX_GID_SLOTS: u32 = 1024;

/// A port's GID table. Only the slots a watched pass reads are kept (with
/// their paths and handles): those not seen empty, and the lowest
/// [`GID_EMPTY_PROBES`] seen empty. Every other slot is empty as last read
/// and costs nothing until the next full pass, which builds its paths on
/// the fly: 255 slots × 3 paths per port would otherwise be most of the
/// reader's memory on a host with many ports.
pub(super) struct GidTable {
    /// `ports/N`.
    pub(super) dir: PathBuf,
    /// Number of slots read (`gids/` entries, at most [`MAX_GID_SLOTS`]).
    pub(super) len: u32,
    /// Slots listed past [`MAX_GID_SLOTS`], not read.
    pub(super) over_cap: u32,
    /// The kept slots, by index.
    pub(super) kept: BTreeMap<u32, GidSlot>,
}

impl GidTable {
    /// A table of `listed` slots, of which the first [`MAX_GID_SLOTS`] are
    /// read.
    pub(super) fn new(dir: PathBuf, listed: u32) -> Self {
        let len = listed.min(MAX_GID_SLOTS);
        GidTable {
            dir,
            len,
            over_cap: listed - len,
            kept: BTreeMap::new(),
        }
    }

    pub(super) fn slot(&self, index: u32) -> GidSlot {
        GidSlot {
            gid: Attr::new(self.dir.join(format!("gids/{index}"))),
            types: Attr::new(self.dir.join(format!("gid_attrs/types/{index}"))),
            ndevs: Attr::new(self.dir.join(format!("gid_attrs/ndevs/{index}"))),
            seen: Seen::Empty,
        }
    }
}

pub(super) struct GidSlot {
    pub(super) gid: Attr,
    pub(super) types: Attr,
    pub(super) ndevs: Attr,
    /// What the slot held when last read.
    pub(super) seen: Seen,
}

/// What a GID slot held when last read. A partial pass compares the slots it
/// knows to be non-empty against this; the netdev is not compared (a rename
/// moves no entry, and `ndevs/N` is read for every populated slot anyway).
#[derive(Clone, Default, PartialEq, Eq)]
pub(super) enum Seen {
    /// Zeros, or absent: where a new GID can land.
    #[default]
    Empty,
    Entry(Ipv6Addr, GidType),
    /// Not empty but not usable (read error, garbage, attributes failing):
    /// still read every sample so its error keeps being reported.
    Unusable,
}

/// Which GID slots a pass reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum GidPass {
    /// Every slot.
    Full,
    /// Slots not seen empty, and the lowest [`GID_EMPTY_PROBES`] seen empty.
    Watched,
}

/// The text of a kernel GID slot that holds nothing (`%pI6` of zeros).
pub(super) const ZERO_GID_TEXT: &[u8] = b"0000:0000:0000:0000:0000:0000:0000:0000";

/// The port's GIDs: a watched pass when nothing calls for a full scan, and a
/// full pass (in the same sample) when one is due or the watched pass found a
/// known slot changed. Afterwards, handles of slots the next watched pass
/// will not read are closed.
pub(super) fn read_gid_table(
    pl: &mut PortLayout,
    state: &Option<PortState>,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> Vec<Gid> {
    let due = pl
        .gids_scanned_at
        .is_none_or(|at| ctx.now.saturating_duration_since(at) >= ctx.gid_full_scan_interval);
    let state_changed = pl.state_seen.as_ref() != Some(state);
    pl.state_seen = Some(state.clone());
    let mut pass = if due || state_changed {
        GidPass::Full
    } else {
        GidPass::Watched
    };
    if pl.gids.over_cap > 0 {
        ctx.errors.push(roce_host::ReadError::refused(
            &pl.gids.dir.join("gids"),
            format!(
                "{} GID slots listed, more than any driver has: the first {MAX_GID_SLOTS} are read, {} are not",
                pl.gids.len + pl.gids.over_cap,
                pl.gids.over_cap
            ),
        ));
    }
    let mark = ctx.errors.len();
    let gids = loop {
        match read_gids(&mut pl.gids, pass, ctx, stale) {
            Some(gids) => break gids,
            None => {
                // A known slot changed: the table is churning. Start over
                // with every slot; errors of the abandoned pass would repeat.
                ctx.errors.truncate(mark);
                pass = GidPass::Full;
            }
        }
    };
    if pass == GidPass::Full {
        pl.gids_scanned_at = Some(ctx.now);
    }
    release_unwatched(&mut pl.gids, ctx);
    gids
}

/// Reads the slots `pass` selects, in index order. Populated slots only are
/// returned: a slot whose GID is all zeros is empty and its attributes are
/// not read at all. `None` when a watched pass found a slot that was not
/// empty reading differently.
pub(super) fn read_gids(
    table: &mut GidTable,
    pass: GidPass,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> Option<Vec<Gid>> {
    let mut out = Vec::new();
    match pass {
        GidPass::Watched => {
            // The kept slots are exactly the watched ones.
            for (&index, slot) in table.kept.iter_mut() {
                let (seen, gid) = read_gid_slot(index, slot, ctx, stale);
                if slot.seen != Seen::Empty && seen != slot.seen {
                    return None;
                }
                slot.seen = seen;
                out.extend(gid);
            }
        }
        GidPass::Full => {
            // Empty slots kept so far in this pass: in index order, so the
            // lowest ones, which the watched passes probe.
            let mut probes = 0;
            for index in 0..table.len {
                let mut slot = match table.kept.remove(&index) {
                    Some(slot) => slot,
                    None => table.slot(index),
                };
                let (seen, gid) = read_gid_slot(index, &mut slot, ctx, stale);
                slot.seen = seen;
                out.extend(gid);
                if slot.seen == Seen::Empty {
                    if probes == GID_EMPTY_PROBES {
                        // Most slots: empty, past the probes. Closed at
                        // once, so a full pass holds no more handles than a
                        // watched one.
                        close_slot(&mut slot, ctx);
                        continue;
                    }
                    probes += 1;
                }
                table.kept.insert(index, slot);
            }
        }
    }
    Some(out)
}

pub(super) fn close_slot(slot: &mut GidSlot, ctx: &mut Ctx<'_>) {
    for a in [&mut slot.gid, &mut slot.types, &mut slot.ndevs] {
        close_attr(a, ctx);
    }
}

/// One slot: what it holds, and the GID when it is usable.
pub(super) fn read_gid_slot(
    index: u32,
    slot: &mut GidSlot,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> (Seen, Option<Gid>) {
    let n = match read_attr(&mut slot.gid, Einval::Absent, ctx, stale) {
        Got::Len(n) => n,
        Got::Absent => return (Seen::Empty, None),
        Got::Failed => return (Seen::Unusable, None),
    };
    let raw = ctx.io.buf.bytes(n);
    if raw.trim_ascii() == ZERO_GID_TEXT {
        return (Seen::Empty, None);
    }
    let gid = match parse::gid_bytes(ctx.io.buf.bytes(n)) {
        Ok(g) => g,
        Err(msg) => {
            push_parse(ctx.errors, &slot.gid.path, msg);
            return (Seen::Unusable, None);
        }
    };
    if gid == Ipv6Addr::UNSPECIFIED {
        return (Seen::Empty, None);
    }
    let gid_type = match read_attr(&mut slot.types, Einval::Absent, ctx, stale) {
        Got::Len(n) => parse::gid_type(&ctx.io.buf.text(n)),
        // The slot emptied between the two reads.
        Got::Absent | Got::Failed => return (Seen::Unusable, None),
    };
    let netdev = match read_attr(&mut slot.ndevs, Einval::Absent, ctx, stale) {
        Got::Len(n) => match std::str::from_utf8(ctx.io.buf.bytes(n)) {
            Ok(text) => parse::text(text),
            Err(_) => {
                let name = std::ffi::OsStr::from_bytes(ctx.io.buf.bytes(n).trim_ascii());
                let e = super::not_utf8(&slot.ndevs.path, "netdev", name);
                ctx.errors.push(e);
                None
            }
        },
        Got::Absent | Got::Failed => None,
    };
    let seen = Seen::Entry(gid, gid_type.clone());
    let gid = Gid {
        index,
        gid,
        gid_type,
        netdev,
    };
    (seen, Some(gid))
}

/// After a pass: keeps the slots the next watched pass reads (those not
/// seen empty, and the lowest [`GID_EMPTY_PROBES`] seen empty, which are
/// added when a probe filled up) and drops the others with their handles.
/// Of the kept empty slots only `gids/N` stays open: their attributes fail
/// (EINVAL) until a GID lands there.
pub(super) fn release_unwatched(table: &mut GidTable, ctx: &mut Ctx<'_>) {
    let mut probes = 0;
    let mut index = 0;
    while index < table.len && probes < GID_EMPTY_PROBES {
        let empty = table.kept.get(&index).is_none_or(|s| s.seen == Seen::Empty);
        if empty {
            probes += 1;
            if !table.kept.contains_key(&index) {
                let slot = table.slot(index);
                table.kept.insert(index, slot);
            }
        }
        index += 1;
    }
    // `index` is now past the last probe: empty slots from there on go.
    let beyond: Vec<u32> = table
        .kept
        .range(index..)
        .filter(|(_, s)| s.seen == Seen::Empty)
        .map(|(&i, _)| i)
        .collect();
    for i in beyond {
        if let Some(mut slot) = table.kept.remove(&i) {
            close_slot(&mut slot, ctx);
        }
    }
    for slot in table.kept.values_mut().filter(|s| s.seen == Seen::Empty) {
        close_attr(&mut slot.types, ctx);
        close_attr(&mut slot.ndevs, ctx);
    }
}
