//! The runbook (docs/runbook.md), compiled into the binary so that every
//! installation serves it: `/runbook` is the whole text, `/runbook/<section>`
//! one `## <section>` of it (a rule id, or the name of an alert that only
//! Prometheus evaluates). The generated alerts' `runbook_url` points here by
//! default, so the link works for anyone who installed the exporter.

/// docs/runbook.md as built.
pub const TEXT: &str = include_str!("../docs/runbook.md");

/// The `## name` section, heading included, up to the next `## `.
pub fn section(name: &str) -> Option<&'static str> {
    let heading = format!("## {name}\n");
    let start = if TEXT.starts_with(&heading) {
        0
    } else {
        TEXT.find(&format!("\n{heading}"))? + 1
    };
    let body = &TEXT[start + heading.len()..];
    let end = body
        .find("\n## ")
        .map_or(TEXT.len(), |i| start + heading.len() + i + 1);
    Some(&TEXT[start..end])
}

/// The text served for a request path under `/runbook`, or `None` (404).
pub fn page(path: &str) -> Option<&'static str> {
    match path.strip_prefix("/runbook")? {
        "" | "/" => Some(TEXT),
        rest => {
            let name = rest.strip_prefix('/')?;
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return None;
            }
            section(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_found_and_end_at_the_next() {
        let s = section("port_down").expect("port_down section");
        assert!(s.starts_with("## port_down\n"));
        assert!(!s[3..].contains("\n## "));
        assert_eq!(page("/runbook/port_down"), Some(s));
        assert_eq!(page("/runbook"), Some(TEXT));
        assert_eq!(page("/runbook/"), Some(TEXT));
    }

    #[test]
    fn unknown_or_odd_names_are_not_found() {
        assert_eq!(page("/runbook/no_such_rule"), None);
        assert_eq!(page("/runbook/../etc"), None);
        assert_eq!(page("/runbookx"), None);
        assert_eq!(page("/runbook/port_down/x"), None);
    }
}
