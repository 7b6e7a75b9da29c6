//! One attribute file and its kept handle: reading it (one `pread` through
//! the kept handle, reopened once when stale) within the open-file budget
//! that [`super::Ctx`] carries, and closing handles that are not worth
//! keeping.

use std::path::PathBuf;

use crate::fs::SysFile;
use crate::parse;

use super::errno::{classify, is_stale, push_parse, Einval};
use super::Ctx;

/// Result of reading one attribute file into a buffer.
pub(super) enum Got {
    /// This many bytes.
    Len(usize),
    /// Not provided here; not an error.
    Absent,
    /// Recorded in the errors.
    Failed,
}

/// One attribute file and, while the budget allows, its open handle.
pub(super) struct Attr {
    pub(super) path: PathBuf,
    pub(super) file: Option<Box<dyn SysFile>>,
}

impl Attr {
    pub(super) fn new(path: PathBuf) -> Self {
        Attr { path, file: None }
    }
}

/// Drops an attribute's kept handle, if it has one.
pub(super) fn close_attr(attr: &mut Attr, ctx: &mut Ctx<'_>) {
    if attr.file.take().is_some() {
        ctx.open = ctx.open.saturating_sub(1);
    }
}

pub(super) fn text_attr(attr: &mut Attr, ctx: &mut Ctx<'_>, stale: &mut bool) -> Option<String> {
    match read_attr(attr, Einval::Error, ctx, stale) {
        Got::Len(n) => parse::text(&ctx.buf.text(n)),
        Got::Absent | Got::Failed => None,
    }
}

pub(super) fn parsed_attr<T>(
    attr: &mut Attr,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<T> {
    let Got::Len(n) = read_attr(attr, Einval::Error, ctx, stale) else {
        return None;
    };
    match parse(&ctx.buf.text(n)) {
        Ok(v) => Some(v),
        Err(msg) => {
            push_parse(ctx.errors, &attr.path, msg);
            None
        }
    }
}

/// Reads one attribute (one `pread` at offset 0: sysfs hands out the whole
/// value at once) through its kept handle, reopening once when the handle
/// went stale. Handles are kept while the open-file budget allows.
pub(super) fn read_attr(
    attr: &mut Attr,
    einval: Einval,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> Got {
    let mut reopened = false;
    if let Some(file) = attr.file.as_deref() {
        match ctx.buf.read(file, &mut ctx.reads) {
            Ok(n) => return Got::Len(n),
            Err(e) if is_stale(&e) => {
                attr.file = None;
                ctx.open = ctx.open.saturating_sub(1);
                *stale = true;
                reopened = true;
            }
            Err(e) => return classify(ctx.errors, &attr.path, &e, einval),
        }
    }
    let file = match ctx.fs.open(&attr.path) {
        Ok(f) => f,
        Err(e) => {
            if reopened && is_stale(&e) {
                return Got::Absent;
            }
            return classify(ctx.errors, &attr.path, &e, einval);
        }
    };
    let result = ctx.buf.read(file.as_ref(), &mut ctx.reads);
    // Keep the handle (also when this read failed with EIO or similar: the
    // value may come back), unless it is stale or over the budget.
    let keep = match &result {
        Ok(_) => true,
        Err(e) => !is_stale(e),
    };
    if keep && ctx.open < ctx.max_open {
        attr.file = Some(file);
        ctx.open += 1;
    }
    match result {
        Ok(n) => Got::Len(n),
        Err(e) => classify(ctx.errors, &attr.path, &e, einval),
    }
}
