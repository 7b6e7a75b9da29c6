//! One attribute file and its kept handle ([`roce_host::KeptAttr`]: one
//! `pread` through the kept handle, reopened once when stale, within the
//! open-file budget that [`super::Ctx`] carries), and what the reader does
//! with a failure: records it in the snapshot's errors.

use roce_host::{Einval, Reading};

use crate::parse;

use super::errno::push_parse;
use super::Ctx;

/// One attribute file and, while the budget allows, its open handle.
pub(super) type Attr = roce_host::KeptAttr;

/// Result of reading one attribute file into the buffer.
pub(super) enum Got {
    /// This many bytes.
    Len(usize),
    /// Not provided here; not an error.
    Absent,
    /// Recorded in the errors.
    Failed,
}

/// Drops an attribute's kept handle, if it has one.
pub(super) fn close_attr(attr: &mut Attr, ctx: &mut Ctx<'_>) {
    attr.close(&mut ctx.io);
}

pub(super) fn text_attr(attr: &mut Attr, ctx: &mut Ctx<'_>, stale: &mut bool) -> Option<String> {
    match read_attr(attr, Einval::Error, ctx, stale) {
        Got::Len(n) => parse::text(&ctx.io.buf.text(n)),
        Got::Absent | Got::Failed => None,
    }
}

pub(super) fn parsed_attr<T, E: std::fmt::Display>(
    attr: &mut Attr,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Option<T> {
    let Got::Len(n) = read_attr(attr, Einval::Error, ctx, stale) else {
        return None;
    };
    match parse(&ctx.io.buf.text(n)) {
        Ok(v) => Some(v),
        Err(msg) => {
            push_parse(ctx.errors, &attr.path, msg);
            None
        }
    }
}

/// Reads one attribute through its kept handle; a failure that is not
/// *absent* goes to the errors.
pub(super) fn read_attr(
    attr: &mut Attr,
    einval: Einval,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> Got {
    match attr.read(&mut ctx.io, einval, stale) {
        Reading::Value(n) => Got::Len(n),
        Reading::Absent => Got::Absent,
        Reading::Error(e) => {
            ctx.errors.push(e);
            Got::Failed
        }
    }
}
