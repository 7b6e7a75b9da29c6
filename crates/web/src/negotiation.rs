//! Content negotiation: the exposition format from `Accept`, gzip from
//! `Accept-Encoding`, as Prometheus clients send them.

use hyper::header::{self, HeaderMap};

/// The exposition formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrapeFormat {
    /// The Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0.
    OpenMetrics,
}

/// One element of an `Accept` or `Accept-Encoding` list: the lowercased
/// token, its parameters (lowercased names, unquoted values) and its q-value
/// (1 when absent, `None` when malformed, which drops the element).
struct ListItem {
    token: String,
    params: Vec<(String, String)>,
    q: Option<f32>,
}

fn list_items<'a>(
    headers: &'a HeaderMap,
    name: header::HeaderName,
) -> impl Iterator<Item = ListItem> + 'a {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|item| {
            let mut parts = item.split(';');
            let token = parts.next()?.trim().to_ascii_lowercase();
            if token.is_empty() {
                return None;
            }
            let mut q = Some(1.0_f32);
            let mut params = Vec::new();
            for p in parts {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                let k = k.trim().to_ascii_lowercase();
                let v = v.trim().trim_matches('"').to_string();
                if k == "q" {
                    q = v.parse::<f32>().ok().filter(|q| (0.0..=1.0).contains(q));
                } else {
                    params.push((k, v));
                }
            }
            Some(ListItem { token, params, q })
        })
}

/// OpenMetrics when the client prefers it (q-values honoured; ties go to
/// OpenMetrics, which the client named explicitly), the Prometheus text
/// format otherwise, including for unknown or missing `Accept` headers.
/// OpenMetrics versions 1.0.0 and 0.0.1 (or none) are served as 1.0.0, as
/// client_golang does; text/plain of any version gets 0.0.4.
pub(crate) fn negotiate_format(headers: &HeaderMap) -> ScrapeFormat {
    let mut openmetrics = 0.0_f32;
    let mut text = 0.0_f32;
    for item in list_items(headers, header::ACCEPT) {
        let Some(q) = item.q else { continue };
        let version = item
            .params
            .iter()
            .find(|(k, _)| k == "version")
            .map(|(_, v)| v.as_str());
        match item.token.as_str() {
            "application/openmetrics-text" => {
                if matches!(version, None | Some("1.0.0") | Some("0.0.1")) {
                    openmetrics = openmetrics.max(q);
                }
            }
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    if openmetrics > 0.0 && openmetrics >= text {
        ScrapeFormat::OpenMetrics
    } else {
        ScrapeFormat::Text
    }
}

/// Whether `Accept-Encoding` allows gzip (`gzip`, `x-gzip` or `*` with a
/// q-value above zero, unless gzip itself is refused with `q=0`).
pub(crate) fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut gzip: Option<f32> = None;
    let mut any: Option<f32> = None;
    for item in list_items(headers, header::ACCEPT_ENCODING) {
        let Some(q) = item.q else { continue };
        match item.token.as_str() {
            "gzip" | "x-gzip" => gzip = Some(gzip.map_or(q, |g| g.max(q))),
            "*" => any = Some(any.map_or(q, |a| a.max(q))),
            _ => {}
        }
    }
    gzip.or(any).is_some_and(|q| q > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn format_for(accept: &str) -> ScrapeFormat {
        negotiate_format(&headers(&[("accept", accept)]))
    }

    #[test]
    fn prometheus_server_accept_headers_get_openmetrics() {
        // Prometheus 2.x default scrape Accept header.
        assert_eq!(
            format_for("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            ScrapeFormat::OpenMetrics
        );
        // Prometheus 3.x, with escaping parameters.
        assert_eq!(
            format_for("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"),
            ScrapeFormat::OpenMetrics
        );
        assert_eq!(
            format_for("application/openmetrics-text"),
            ScrapeFormat::OpenMetrics
        );
    }

    #[test]
    fn text_is_the_default_and_q_values_decide() {
        assert_eq!(negotiate_format(&HeaderMap::new()), ScrapeFormat::Text);
        assert_eq!(format_for("*/*"), ScrapeFormat::Text);
        assert_eq!(format_for("application/json"), ScrapeFormat::Text);
        assert_eq!(format_for("text/plain;version=0.0.4"), ScrapeFormat::Text);
        assert_eq!(
            format_for("text/plain;version=0.0.4, application/openmetrics-text;q=0.5"),
            ScrapeFormat::Text
        );
        assert_eq!(
            format_for("application/openmetrics-text;q=0"),
            ScrapeFormat::Text
        );
        assert_eq!(
            format_for("application/openmetrics-text;version=2.0.0"),
            ScrapeFormat::Text
        );
        assert_eq!(
            format_for("application/openmetrics-text;q=bogus"),
            ScrapeFormat::Text
        );
        assert_eq!(
            format_for("Application/OpenMetrics-Text; Version=\"1.0.0\"; Q=0.9, text/plain;q=0.8"),
            ScrapeFormat::OpenMetrics
        );
    }

    #[test]
    fn gzip_negotiation() {
        let gz = |v: &str| accepts_gzip(&headers(&[("accept-encoding", v)]));
        assert!(!accepts_gzip(&HeaderMap::new()));
        assert!(gz("gzip"));
        assert!(gz("deflate, gzip;q=0.5"));
        assert!(gz("x-gzip"));
        assert!(gz("*"));
        assert!(gz("GZIP"));
        assert!(!gz("gzip;q=0"));
        assert!(!gz("gzip;q=0, *"));
        assert!(!gz("identity"));
        assert!(!gz("br, deflate"));
    }
}
