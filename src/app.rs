//! The state the HTTP server serves: the latest published snapshot and its
//! encodings, built at most once per sample and format whatever the number
//! of scrapers.

use std::io::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;

use crate::exposition::{self, BuildInfo, Format};
use crate::snapshot::{Snapshot, SourceState};

/// `/healthz` answers 503 once the newest sample started more than this many
/// sample intervals ago ([`STALE_AFTER_MIN`] at least). A running sampler
/// never gets there: a sample takes at most two source deadlines (one
/// interval each; the sampler stops waiting for more), and after an overrun
/// the next starts one interval later,
/// so the newest sample is at most five intervals old.
pub const STALE_AFTER_INTERVALS: u32 = 6;
/// The least age at which a sample is stale, whatever the interval: a short
/// interval on a loaded host does not make `/healthz` flap.
pub const STALE_AFTER_MIN: Duration = Duration::from_secs(10);

/// One published sample and its lazily built encodings.
pub struct Published {
    pub snapshot: Arc<Snapshot>,
    text: OnceLock<Bytes>,
    openmetrics: OnceLock<Bytes>,
    text_gzip: OnceLock<Bytes>,
    openmetrics_gzip: OnceLock<Bytes>,
}

impl Published {
    pub fn new(snapshot: Arc<Snapshot>) -> Self {
        Published {
            snapshot,
            text: OnceLock::new(),
            openmetrics: OnceLock::new(),
            text_gzip: OnceLock::new(),
            openmetrics_gzip: OnceLock::new(),
        }
    }
}

/// What the server's `POST` actions go to (the load-test responder).
pub type Actions = Arc<dyn Fn(&roce_web::Action) -> Option<roce_web::ActionAnswer> + Send + Sync>;

/// Shared by every connection; owned by `main` behind an `Arc`.
pub struct App {
    current: ArcSwap<Published>,
    build: BuildInfo,
    /// Where the exposition is served (`--web.telemetry-path`), for the
    /// landing page's link.
    telemetry_path: String,
    actions: Option<Actions>,
}

impl App {
    pub fn new(build: BuildInfo, first: Arc<Snapshot>) -> Self {
        App {
            current: ArcSwap::from_pointee(Published::new(first)),
            build,
            telemetry_path: crate::server::DEFAULT_TELEMETRY_PATH.to_string(),
            actions: None,
        }
    }

    /// `self` serving the exposition at `path` (`--web.telemetry-path`).
    pub fn with_telemetry_path(mut self, path: &str) -> Self {
        self.telemetry_path = path.to_string();
        self
    }

    /// The same state, handing `POST` actions to `actions`.
    pub fn with_actions(mut self, actions: Actions) -> Self {
        self.actions = Some(actions);
        self
    }

    /// Swaps in a new sample; scrapes in flight keep the one they started with.
    pub fn publish(&self, snapshot: Arc<Snapshot>) {
        self.current.store(Arc::new(Published::new(snapshot)));
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load().snapshot.clone()
    }

    pub fn build(&self) -> &BuildInfo {
        &self.build
    }

    /// This node's peer-probe endpoints as the JSON other exporters fetch
    /// (`roce_probe::peer::Endpoints`); `None` while peer probes are off.
    pub fn peer_endpoints_json(&self) -> Option<String> {
        let snapshot = self.snapshot();
        let results = snapshot.peer_probes.as_ref()?;
        let doc = roce_probe::peer::Endpoints {
            version: roce_probe::peer::ENDPOINTS_VERSION,
            endpoints: results.endpoints.clone(),
        };
        serde_json::to_string(&doc).ok().map(|mut s| {
            s.push('\n');
            s
        })
    }

    /// The exposition of the latest sample, gzip-compressed when asked.
    pub fn metrics(&self, format: Format, gzip: bool) -> Bytes {
        let published = self.current.load_full();
        let plain = match format {
            Format::Text => &published.text,
            Format::OpenMetrics => &published.openmetrics,
        };
        let plain = plain
            .get_or_init(|| {
                Bytes::from(exposition::encode(
                    published.snapshot.clone(),
                    &self.build,
                    format,
                ))
            })
            .clone();
        if !gzip {
            return plain;
        }
        let cell = match format {
            Format::Text => &published.text_gzip,
            Format::OpenMetrics => &published.openmetrics_gzip,
        };
        cell.get_or_init(|| gzip_bytes(&plain)).clone()
    }

    /// `/healthz`: healthy once a sample exists and while the newest one is
    /// fresh (see [`STALE_AFTER_INTERVALS`]); a failed collector is listed
    /// but keeps it healthy.
    pub fn health(&self) -> (bool, String) {
        self.health_at(crate::snapshot::monotonic_now())
    }

    /// [`Self::health`] at `now` on the monotonic clock.
    pub fn health_at(&self, now: Duration) -> (bool, String) {
        let snapshot = self.snapshot();
        if snapshot.sequence == 0 {
            return (false, "no sample yet\n".into());
        }
        let age = snapshot.age_at(now).unwrap_or(Duration::ZERO);
        let interval = if snapshot.interval.is_zero() {
            self.build.sample_interval
        } else {
            snapshot.interval
        };
        let limit = stale_after(interval);
        if age > limit {
            return (
                false,
                format!(
                    "stale: the newest sample ({}) started {:.0}s ago, more than {:.0}s ({STALE_AFTER_INTERVALS} sample intervals of {:?}): the sampler is not keeping up\n",
                    snapshot.sequence,
                    age.as_secs_f64(),
                    limit.as_secs_f64(),
                    interval
                ),
            );
        }
        let failed: Vec<String> = snapshot
            .sources
            .iter()
            .filter_map(|s| match &s.state {
                SourceState::Failed(why) => Some(format!("{}: {why}", s.name)),
                _ => None,
            })
            .collect();
        // A failing collector is reported but does not make the process
        // unhealthy: restarting it would not fix the host.
        let mut body = format!(
            "ok, sample {} taken {:.0}s ago\n",
            snapshot.sequence,
            age.as_secs_f64()
        );
        for f in failed {
            body.push_str(&format!("collector failed: {f}\n"));
        }
        (true, body)
    }

    /// `/findings`: the active findings as a JSON list (schema:
    /// `docs/findings.schema.json`).
    pub fn findings_json(&self) -> String {
        let snapshot = self.snapshot();
        let mut json =
            serde_json::to_string_pretty(&snapshot.findings).unwrap_or_else(|_| "[]".into());
        json.push('\n');
        json
    }

    /// `/`: what this is, links, devices seen, last sample and each source.
    pub fn landing_page(&self) -> String {
        let s = self.snapshot();
        let mut html = String::new();
        html.push_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>roce_exporter</title></head><body>\n");
        html.push_str(&format!(
            "<h1>roce_exporter {}</h1>\n",
            escape(self.build.version)
        ));
        let metrics = escape(&self.telemetry_path);
        html.push_str(&format!("<p>RDMA fabric exporter: <a href=\"{metrics}\">{metrics}</a> · <a href=\"/findings\">/findings</a> · <a href=\"/runbook\">/runbook</a> · <a href=\"/healthz\">/healthz</a></p>\n"));
        html.push_str(&format!(
            "<h2>Last sample</h2>\n<p>#{} taken {:.1}s ago (every {}s)</p>\n",
            s.sequence,
            age_seconds(&s),
            self.build.sample_interval.as_secs_f64()
        ));
        html.push_str("<h2>Sources</h2>\n<table border=\"1\"><tr><th>collector</th><th>state</th><th>duration</th><th>errors (sample / total)</th><th>detail</th></tr>\n");
        for src in &s.sources {
            html.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{:.3} ms</td><td>{} / {}</td><td>{}</td></tr>\n",
                src.name,
                src.state.label(),
                src.duration.as_secs_f64() * 1e3,
                src.errors.len(),
                src.errors_total,
                escape(&match src.state.detail() {
                    Some(detail) => detail.to_string(),
                    None => src
                        .errors
                        .first()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                })
            ));
        }
        html.push_str("</table>\n");
        html.push_str(&format!("<h2>Findings ({})</h2>\n", s.findings.len()));
        if s.findings.is_empty() {
            html.push_str("<p>No active finding.</p>\n");
        } else {
            html.push_str("<table border=\"1\"><tr><th>severity</th><th>rule</th><th>subject</th><th>finding</th><th>evidence</th><th>fix</th><th>verify</th></tr>\n");
            for f in &s.findings {
                html.push_str(&format!(
                    "<tr><td>{}</td><td><a href=\"/runbook/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>\n",
                    f.severity.as_str(),
                    f.rule,
                    f.rule,
                    escape(&f.subject.describe()),
                    escape(&f.finding),
                    escape(&f.evidence),
                    escape(&f.fix),
                    escape(&f.verify)
                ));
            }
            html.push_str("</table>\n");
        }
        html.push_str("<h2>RDMA devices</h2>\n");
        match s.rdma.as_ref().filter(|r| !r.devices.is_empty()) {
            None => html.push_str("<p>No RDMA device seen.</p>\n"),
            Some(rdma) => {
                html.push_str("<table border=\"1\"><tr><th>device</th><th>driver</th><th>port</th><th>state</th><th>rate</th><th>link layer</th><th>netdev</th><th>GIDs</th></tr>\n");
                for d in &rdma.devices {
                    for p in &d.ports {
                        html.push_str(&format!(
                            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                            escape(&d.name),
                            escape(d.driver.as_deref().unwrap_or("")),
                            p.number,
                            escape(p.state.as_ref().map(|x| x.name()).unwrap_or("?")),
                            escape(p.phys_state.as_ref().map(|x| x.name()).unwrap_or("?")),
                            p.rate_bytes_per_second.map(|r| format!("{} Gb/s", r as f64 * 8.0 / 1e9)).unwrap_or_default(),
                            escape(p.link_layer.as_ref().map(|l| l.as_str()).unwrap_or("")),
                            escape(p.netdev.as_deref().unwrap_or("")),
                            p.gids.len()
                        ));
                    }
                }
                html.push_str("</table>\n");
            }
        }
        html.push_str("</body></html>\n");
        html
    }
}

fn age_seconds(s: &Snapshot) -> f64 {
    s.age().map_or(0.0, |d| d.as_secs_f64())
}

/// What the server (crates/web) serves: this state, the runbook, nothing
/// else.
impl roce_web::Content for App {
    fn metrics(&self, format: roce_web::ScrapeFormat, gzip: bool) -> (&'static str, Bytes) {
        let format = match format {
            roce_web::ScrapeFormat::Text => Format::Text,
            roce_web::ScrapeFormat::OpenMetrics => Format::OpenMetrics,
        };
        (format.content_type(), App::metrics(self, format, gzip))
    }

    fn health(&self) -> (bool, String) {
        App::health(self)
    }

    fn landing_page(&self) -> String {
        App::landing_page(self)
    }

    fn findings_json(&self) -> String {
        App::findings_json(self)
    }

    fn peer_endpoints_json(&self) -> Option<String> {
        App::peer_endpoints_json(self)
    }

    fn runbook_page(&self, path: &str) -> Option<&'static str> {
        crate::runbook::page(path)
    }

    fn action(&self, action: &roce_web::Action) -> Option<roce_web::ActionAnswer> {
        self.actions.as_ref().and_then(|a| a(action))
    }
}

/// The age past which a sample taken every `interval` is stale.
pub fn stale_after(interval: Duration) -> Duration {
    interval
        .saturating_mul(STALE_AFTER_INTERVALS)
        .max(STALE_AFTER_MIN)
}

fn gzip_bytes(plain: &[u8]) -> Bytes {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(plain.len() / 4),
        flate2::Compression::fast(),
    );
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(plain);
    Bytes::from(enc.finish().unwrap_or_default())
}

/// Minimal HTML escaping for text from the host (device names, errors).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_is_503_once_the_newest_sample_is_older_than_six_intervals() {
        let interval = Duration::from_secs(5);
        assert_eq!(stale_after(interval), Duration::from_secs(30));
        assert_eq!(stale_after(Duration::from_millis(100)), STALE_AFTER_MIN);
        let taken = Duration::from_secs(1000);
        let snapshot = Snapshot {
            sequence: 7,
            monotonic: Some(taken),
            interval,
            ..Snapshot::default()
        };
        let app = App::new(crate::build_info(interval), Arc::new(snapshot));
        let (ok, body) = app.health_at(taken + Duration::from_secs(29));
        assert!(ok, "{body}");
        assert_eq!(body, "ok, sample 7 taken 29s ago\n");
        let (ok, body) = app.health_at(taken + Duration::from_secs(31));
        assert!(!ok);
        assert!(
            body.starts_with("stale: the newest sample (7) started 31s ago, more than 30s"),
            "{body}"
        );
    }
}
