//! What the sampler logs about each source: its state when it changes, and
//! its read errors as *conditions* (a file or request and the kind of its
//! failure), logged when one starts, changes kind or ends; not the text of
//! each error, which can change every sample (a file whose bad content
//! varies). Changes are logged at most once per [`LOG_SPACING`] of
//! sampling per source (counted in samples, so the bound holds on the
//! sampler's own schedule): a change within the spacing is logged at its
//! end against what was last logged, so a condition that comes and goes
//! faster is one line, not one per sample.
//!
//! A read stuck past its per-item deadline (kind `timeout`) is logged by
//! the sampler when it is found and by the file layer when it returns
//! (`roce_host::stall`), not as a condition here: it is reported in one
//! sample only.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::snapshot::SourceState;
use roce_host::{ErrorKind, HostError};

/// The least sampling time between two change lines of one source.
pub(super) const LOG_SPACING: Duration = Duration::from_secs(10);

/// [`LOG_SPACING`] in samples of `interval`, at least one.
pub(super) fn spacing(interval: Duration) -> u64 {
    if interval.is_zero() {
        return 1;
    }
    let n = LOG_SPACING.as_nanos().div_ceil(interval.as_nanos());
    u64::try_from(n).unwrap_or(u64::MAX).max(1)
}

/// What was last logged of a source: its state, its conditions (by key,
/// with the first text seen of each), and the sample it was logged in.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Logged {
    state: SourceState,
    errors: BTreeMap<String, String>,
    sequence: u64,
}

impl Logged {
    pub(super) fn of(state: &SourceState, errors: &[HostError], sequence: u64) -> Logged {
        let mut conditions = BTreeMap::new();
        for e in errors.iter().filter(|e| e.kind() != ErrorKind::Timeout) {
            conditions
                .entry(condition(e))
                .or_insert_with(|| e.to_string());
        }
        Logged {
            state: state.clone(),
            errors: conditions,
            sequence,
        }
    }

    fn same(&self, other: &Logged) -> bool {
        self.state == other.state && self.errors.keys().eq(other.errors.keys())
    }
}

/// What an error is about and how it failed, without what varies between
/// samples (a parse error's content).
fn condition(e: &HostError) -> String {
    let kind = e.kind().as_str();
    match e {
        HostError::File(f) => format!("{} ({kind})", f.path.display()),
        HostError::Request { what, .. } => format!("{what} ({kind})"),
        HostError::Unlistable { setting, dir, .. } => {
            format!("{setting} {} ({kind})", dir.display())
        }
    }
}

/// Logs how `now` differs from `previous` when it does and the spacing
/// since `previous` has passed (or there is none); the new record to keep
/// when it logged, `None` when nothing was logged.
pub(super) fn log_change(
    name: &str,
    previous: Option<&Logged>,
    now: Logged,
    spacing: u64,
) -> Option<Logged> {
    const SHOWN: usize = 5;
    let list = |texts: Vec<&String>| {
        let mut text = texts
            .iter()
            .take(SHOWN)
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        if texts.len() > SHOWN {
            text.push_str(&format!("; and {} more", texts.len() - SHOWN));
        }
        text
    };
    if let Some(p) = previous {
        if p.same(&now) {
            if let Some(first) = now.errors.values().next() {
                tracing::debug!(collector = name, errors = now.errors.len(), first = %first, "read errors");
            }
            return None;
        }
        if now.sequence < p.sequence.saturating_add(spacing) {
            // Logged at the end of the spacing, against `p`.
            return None;
        }
    }
    let state_changed = previous.is_none_or(|p| p.state != now.state);
    if !state_changed {
        let before = previous.map(|p| &p.errors).cloned().unwrap_or_default();
        if now.errors.is_empty() {
            tracing::warn!(collector = name, cleared = %list(before.values().collect()), "collector read errors cleared");
        } else {
            let new = now
                .errors
                .iter()
                .filter(|(k, _)| !before.contains_key(*k))
                .map(|(_, v)| v)
                .collect();
            let gone = before
                .iter()
                .filter(|(k, _)| !now.errors.contains_key(*k))
                .map(|(_, v)| v)
                .collect();
            tracing::warn!(collector = name, errors = now.errors.len(), new = %list(new), cleared = %list(gone), "collector read errors changed");
        }
        return Some(now);
    }
    match &now.state {
        SourceState::Ok => {
            if now.errors.is_empty() {
                tracing::info!(collector = name, "collector ok");
            } else {
                tracing::warn!(collector = name, errors = now.errors.len(), new = %list(now.errors.values().collect()), "collector ok with read errors");
            }
        }
        SourceState::Unavailable(why) => {
            tracing::info!(collector = name, reason = %why, "collector has nothing to read")
        }
        SourceState::Disabled(why) => {
            tracing::info!(collector = name, reason = %why, "collector disabled")
        }
        SourceState::Failed(why) => {
            tracing::error!(collector = name, error = %why, "collector failed")
        }
    }
    Some(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_host::ReadError;
    use std::path::Path;

    #[test]
    fn spacing_in_samples() {
        assert_eq!(spacing(Duration::from_secs(5)), 2);
        assert_eq!(spacing(Duration::from_secs(1)), 10);
        assert_eq!(spacing(Duration::from_millis(100)), 100);
        assert_eq!(spacing(Duration::from_secs(60)), 1);
        assert_eq!(spacing(Duration::ZERO), 1);
    }

    #[test]
    fn a_condition_is_its_file_and_kind_not_its_text() {
        let bad = |content: &str| -> HostError {
            ReadError::parse(Path::new("/sys/x"), format!("not a number: {content:?}")).into()
        };
        let a = Logged::of(&SourceState::Ok, &[bad("ab")], 1);
        let b = Logged::of(&SourceState::Ok, &[bad("cd")], 2);
        assert!(a.same(&b));
        let eio: HostError = ReadError::io(
            Path::new("/sys/x"),
            &std::io::Error::from_raw_os_error(libc::EIO),
        )
        .into();
        assert!(
            !a.same(&Logged::of(&SourceState::Ok, &[eio], 3)),
            "another kind"
        );
        let stuck: HostError = ReadError::stuck(Path::new("/sys/y"), Duration::from_secs(1)).into();
        assert!(Logged::of(&SourceState::Ok, &[stuck], 4).errors.is_empty());
    }
}
