//! How each collector fared in the latest sample.

use roce_model::snapshot::{Snapshot, SourceState};

use crate::{Item, Status};

pub(crate) fn collectors(s: &Snapshot, out: &mut Vec<Item>) {
    for src in &s.sources {
        let (status, text) = match &src.state {
            SourceState::Ok if src.errors.is_empty() => (Status::Ok, format!("{}: read", src.name)),
            SourceState::Ok => (
                Status::Warn,
                format!(
                    "{}: read with {} error(s), first: {}",
                    src.name,
                    src.errors.len(),
                    src.errors[0]
                ),
            ),
            SourceState::Unavailable(why) => (
                Status::Unknown,
                format!("{}: nothing to read ({why})", src.name),
            ),
            SourceState::Disabled(why) => (Status::Unknown, format!("{}: off ({why})", src.name)),
            SourceState::Failed(why) => (Status::Fail, format!("{}: failed ({why})", src.name)),
        };
        out.push(Item {
            section: "Collectors",
            status,
            text,
        });
    }
}
