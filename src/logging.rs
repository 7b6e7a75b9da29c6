//! Log output: logfmt (the Prometheus ecosystem's default) or JSON, on
//! stderr, through `tracing`.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::cli::{LogFormat, LogLevel};

/// Installs the global subscriber. Safe to call once; later calls are no-ops.
pub fn init(level: LogLevel, format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_max_level(level.as_filter())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Logfmt => builder.event_format(Logfmt).try_init(),
    };
}

/// `ts=2026-12-02T11:00:00.000Z level=info msg="collector ok" collector=rdma`
struct Logfmt;

impl<S, N> FormatEvent<S, N> for Logfmt
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        write!(
            w,
            "ts={now} level={}",
            meta.level().as_str().to_ascii_lowercase()
        )?;
        let mut visitor = Fields {
            out: String::new(),
            message: None,
        };
        event.record(&mut visitor);
        if let Some(msg) = visitor.message {
            write!(w, " msg={}", quote(&msg))?;
        }
        write!(w, "{}", visitor.out)?;
        writeln!(w)
    }
}

struct Fields {
    out: String,
    message: Option<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_string());
        } else {
            self.out.push(' ');
            self.out.push_str(field.name());
            self.out.push('=');
            self.out.push_str(&quote(value));
        }
    }
}

/// Quotes a logfmt value when it needs it.
fn quote(v: &str) -> String {
    if !v.is_empty()
        && !v
            .chars()
            .any(|c| c == ' ' || c == '"' || c == '=' || c.is_control())
    {
        return v.to_string();
    }
    let mut out = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn logfmt_quoting() {
        assert_eq!(super::quote("rdma"), "rdma");
        assert_eq!(super::quote("a b"), "\"a b\"");
        assert_eq!(super::quote("x=\"y\"\n"), "\"x=\\\"y\\\"\\n\"");
        assert_eq!(super::quote(""), "\"\"");
    }
}
