//! The routes: which path gets what, for which methods, with which
//! headers. The content comes from the exporter through [`Content`]; the
//! server knows nothing of samples, rules or the host.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};

use crate::actions::{Action, ActionAnswer};
use crate::negotiation::{accepts_gzip, negotiate_format, ScrapeFormat};
use crate::webconfig::REALM;

/// What the server serves, provided by the exporter. Each call answers one
/// request; it must not block for long (it runs on the server's threads).
pub trait Content: Send + Sync + 'static {
    /// `/metrics`: the exposition in `format`, gzip-compressed when `gzip`,
    /// and its content type.
    fn metrics(&self, format: ScrapeFormat, gzip: bool) -> (&'static str, Bytes);
    /// `/healthz`: whether the exporter is healthy, and a plain-text status.
    fn health(&self) -> (bool, String);
    /// `/`: an HTML page.
    fn landing_page(&self) -> String;
    /// `/findings`: JSON.
    fn findings_json(&self) -> String;
    /// `/peer-probe/endpoints`: JSON, `None` (404) while peer probes are off.
    fn peer_endpoints_json(&self) -> Option<String>;
    /// `/runbook...`: the plain-text section `path` names, `None` (404) for
    /// no section.
    fn runbook_page(&self, path: &str) -> Option<&'static str>;
    /// A `POST` to `action.path`: `None` when no action has that path (the
    /// request is then answered as any other method is). Must not block:
    /// work that takes time answers [`ActionAnswer::Pending`].
    fn action(&self, _action: &Action) -> Option<ActionAnswer> {
        None
    }
}

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
const APPLICATION_JSON: &str = "application/json";
const TEXT_HTML: &str = "text/html; charset=utf-8";
const ALLOWED_METHODS: &str = "GET, HEAD";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Metrics,
    Health,
    Landing,
    Findings,
    /// This node's peer-probe responders.
    PeerEndpoints,
    /// A section of the runbook.
    Runbook(&'static str),
}

/// The path of the exposition unless `--web.telemetry-path` says another.
pub const DEFAULT_TELEMETRY_PATH: &str = "/metrics";

/// Whether `path` can be `--web.telemetry-path`: absolute, at most 256
/// bytes of visible ASCII without a query or fragment, and not a path the
/// server answers otherwise (`/` is, as in node_exporter: the exposition
/// then takes the landing page's place).
pub fn valid_telemetry_path(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("must start with /");
    }
    if path.len() > 256 || !path.bytes().all(|b| b.is_ascii_graphic()) || path.contains(['?', '#'])
    {
        return Err("must be at most 256 visible ASCII characters without ? or #");
    }
    let taken = ["/healthz", "/findings", "/peer-probe/endpoints"];
    if taken.contains(&path) || path.starts_with("/runbook") {
        return Err("is a path the exporter serves already");
    }
    Ok(())
}

/// The whole routing table. Pure: the request's parts in, a response out.
pub(crate) fn respond(
    content: &dyn Content,
    telemetry_path: &str,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    has_body: bool,
) -> Response<Full<Bytes>> {
    let mut response = route_request(content, telemetry_path, method, path, headers, has_body);
    if has_body {
        // The body was not read; the connection cannot carry another request.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn route_request(
    content: &dyn Content,
    telemetry_path: &str,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    has_body: bool,
) -> Response<Full<Bytes>> {
    let route = match path {
        p if p == telemetry_path => Route::Metrics,
        "/healthz" => Route::Health,
        "/" => Route::Landing,
        "/findings" => Route::Findings,
        "/peer-probe/endpoints" => Route::PeerEndpoints,
        p if p.starts_with("/runbook") => match content.runbook_page(p) {
            Some(text) => Route::Runbook(text),
            None => return simple(StatusCode::NOT_FOUND, "not found\n"),
        },
        _ => return simple(StatusCode::NOT_FOUND, "not found\n"),
    };
    let head = match *method {
        Method::GET => false,
        Method::HEAD => true,
        _ => {
            let mut r = simple(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
            return r;
        }
    };
    if has_body {
        return simple(
            StatusCode::PAYLOAD_TOO_LARGE,
            "requests with a body are not accepted\n",
        );
    }
    let (status, content_type, body, metrics_headers) = match route {
        Route::Metrics => {
            let format = negotiate_format(headers);
            let gzip = accepts_gzip(headers);
            let (content_type, body) = content.metrics(format, gzip);
            (StatusCode::OK, content_type, body, Some(gzip))
        }
        Route::Health => {
            let (healthy, text) = content.health();
            let status = if healthy {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (status, TEXT_PLAIN, Bytes::from(text), None)
        }
        Route::Landing => (
            StatusCode::OK,
            TEXT_HTML,
            Bytes::from(content.landing_page()),
            None,
        ),
        Route::Findings => (
            StatusCode::OK,
            APPLICATION_JSON,
            Bytes::from(content.findings_json()),
            None,
        ),
        Route::PeerEndpoints => match content.peer_endpoints_json() {
            Some(body) => (StatusCode::OK, APPLICATION_JSON, Bytes::from(body), None),
            None => return simple(StatusCode::NOT_FOUND, "peer probes are off\n"),
        },
        Route::Runbook(text) => (
            StatusCode::OK,
            TEXT_PLAIN,
            Bytes::from_static(text.as_bytes()),
            None,
        ),
    };
    let length = body.len();
    let mut response = Response::new(Full::new(if head { Bytes::new() } else { body }));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if head {
        // What GET would have sent; hyper keeps an explicit length on HEAD.
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    if let Some(gzip) = metrics_headers {
        // The representation depends on both request headers.
        h.insert(
            header::VARY,
            HeaderValue::from_static("Accept, Accept-Encoding"),
        );
        if gzip {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
    }
    response
}

/// `401` asking for basic auth.
pub(crate) fn unauthorized(has_body: bool) -> Response<Full<Bytes>> {
    let mut r = simple(StatusCode::UNAUTHORIZED, "unauthorized\n");
    let challenge = format!("Basic realm=\"{REALM}\"");
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    if has_body {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// `503` for a request over a limit; the client may retry at once.
pub(crate) fn busy(has_body: bool, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = simple(StatusCode::SERVICE_UNAVAILABLE, text);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    if has_body {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

fn simple(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(TEXT_PLAIN));
    r
}
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Content for the server's own tests.
    pub(crate) struct Fixed;

    impl Content for Fixed {
        fn metrics(&self, _: ScrapeFormat, _: bool) -> (&'static str, Bytes) {
            ("text/plain; version=0.0.4", Bytes::from_static(b"up 1\n"))
        }
        fn health(&self) -> (bool, String) {
            (true, "ok\n".into())
        }
        fn landing_page(&self) -> String {
            "<html></html>\n".into()
        }
        fn findings_json(&self) -> String {
            "[]\n".into()
        }
        fn peer_endpoints_json(&self) -> Option<String> {
            None
        }
        fn runbook_page(&self, _: &str) -> Option<&'static str> {
            None
        }
    }

    fn get(telemetry_path: &str, path: &str) -> (StatusCode, Bytes) {
        use http_body_util::BodyExt as _;
        let r = respond(
            &Fixed,
            telemetry_path,
            &Method::GET,
            path,
            &HeaderMap::new(),
            false,
        );
        let status = r.status();
        let body = futures_body(r.into_body().collect());
        (status, body)
    }

    fn futures_body(
        f: impl std::future::Future<
            Output = Result<http_body_util::Collected<Bytes>, std::convert::Infallible>,
        >,
    ) -> Bytes {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        match rt.block_on(f) {
            Ok(c) => c.to_bytes(),
            Err(e) => match e {},
        }
    }

    #[test]
    fn the_exposition_is_served_at_the_telemetry_path_only() {
        assert_eq!(
            get(DEFAULT_TELEMETRY_PATH, "/metrics"),
            (StatusCode::OK, Bytes::from_static(b"up 1\n"))
        );
        assert_eq!(get("/prom/metrics", "/prom/metrics").0, StatusCode::OK);
        assert_eq!(get("/prom/metrics", "/metrics").0, StatusCode::NOT_FOUND);
        // `/`, as node_exporter allows: the exposition takes the landing page's place
        assert_eq!(get("/", "/").1, Bytes::from_static(b"up 1\n"));
        assert_eq!(get("/prom/metrics", "/healthz").0, StatusCode::OK);
    }

    #[test]
    fn telemetry_paths_that_cannot_work_are_refused() {
        for ok in ["/metrics", "/", "/prom/metrics", "/metrics/"] {
            assert_eq!(valid_telemetry_path(ok), Ok(()), "{ok}");
        }
        let long = format!("/{}", "m".repeat(256));
        for bad in [
            "metrics",
            "",
            "/me trics",
            "/m?x=1",
            "/m#a",
            "/healthz",
            "/findings",
            "/runbook/x",
            &long,
        ] {
            assert!(valid_telemetry_path(bad).is_err(), "{bad:?}");
        }
    }
}
