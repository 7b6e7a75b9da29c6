//! The HTTP server against real sockets: routes, content negotiation, gzip,
//! limits (header timeout, header size, connection cap, connection age),
//! graceful shutdown and listen addresses. The client is a plain
//! `std::net::TcpStream`, so every byte on the wire is the test's choice.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::support::{connect, skip_unless_ci};
use roce_exporter::app::App;
use roce_exporter::config::WebLimits;
use roce_exporter::exposition::BuildInfo;
use roce_exporter::server::{self, ServeOptions, ServerError};
use roce_exporter::snapshot::{Snapshot, SourceState, SourceStatus};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The generous bound for "eventually": nothing here should come near it.
const EVENTUALLY: Duration = Duration::from_secs(10);

const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// What a Prometheus 2.x server sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

fn app(sequence: u64) -> Arc<App> {
    let snapshot = Snapshot {
        sequence,
        taken_at: (sequence > 0).then(SystemTime::now),
        sources: vec![
            SourceStatus {
                name: "rdma",
                state: SourceState::Ok,
                duration: Duration::from_micros(1500),
                errors: Vec::new(),
                errors_total: 0,
                errors_by_kind: Default::default(),
                kernel_requests: None,
            },
            SourceStatus {
                name: "netdev",
                state: SourceState::Unavailable("no netdev <script>".into()),
                duration: Duration::ZERO,
                errors: Vec::new(),
                errors_total: 0,
                errors_by_kind: Default::default(),
                kernel_requests: None,
            },
        ],
        ..Default::default()
    };
    Arc::new(App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(snapshot),
    ))
}

fn options() -> ServeOptions {
    ServeOptions::new(WebLimits::default())
}

struct Running {
    addrs: Vec<SocketAddr>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServerError>>,
}

impl Running {
    fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Signals shutdown and waits for `serve` to return.
    async fn stop(self) -> Result<(), ServerError> {
        let _ = self.stop.send(());
        tokio::time::timeout(EVENTUALLY, self.task)
            .await
            .expect("serve returns after shutdown")
            .expect("serve does not panic")
    }
}

async fn start(addresses: &[&str], app: Arc<App>, options: ServeOptions) -> Running {
    let addresses: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
    let listeners = server::bind(&addresses).await.expect("bind");
    let addrs = listeners
        .iter()
        .map(|l| l.local_addr().expect("local_addr"))
        .collect();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server::serve_with(listeners, app, options, async move {
        let _ = stopped.await;
    }));
    Running { addrs, stop, task }
}

async fn start_local(app: Arc<App>, options: ServeOptions) -> Running {
    start(&["127.0.0.1:0"], app, options).await
}

/// One parsed HTTP/1.1 response.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], close: bool) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        r.push_str("Connection: close\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}

/// Reads exactly one response (by Content-Length; HEAD responses have no
/// body whatever it says).
fn read_response(s: &mut TcpStream, head_request: bool) -> std::io::Result<Reply> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("closed after {} bytes", buf.len()),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..header_end].to_vec()).expect("ASCII head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line:?}");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = if head_request {
        0
    } else {
        headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.parse().expect("numeric content-length"))
            .expect("content-length")
    };
    let mut body = buf[header_end + 4..].to_vec();
    while body.len() < length {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "short body"));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(body.len(), length, "no bytes beyond the announced length");
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// One request on a fresh connection that asks to close afterwards; also
/// checks that the server does close it.
fn exchange_blocking(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let mut s = connect(addr, EVENTUALLY).expect("connect");
    s.write_all(&request(method, path, headers, true))
        .expect("send request");
    let reply = read_response(&mut s, method == "HEAD").expect("response");
    assert!(closed(&mut s), "the server closes after Connection: close");
    reply
}

async fn exchange(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let method = method.to_string();
    let path = path.to_string();
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let h: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        exchange_blocking(addr, &method, &path, &h)
    })
    .await
    .expect("client thread")
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    exchange(addr, "GET", path, headers).await
}

/// True when the peer closed the connection (EOF or reset) before
/// [`EVENTUALLY`], false when it stayed open that long or sent data.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1024];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
        ),
    }
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_default_to_the_prometheus_text_format() {
    let server = start_local(app(1), options()).await;
    for headers in [
        vec![],
        vec![("Accept", "*/*")],
        vec![("Accept", "text/plain;version=0.0.4")],
        vec![("Accept", "application/json")],
        vec![(
            "Accept",
            "application/openmetrics-text;q=0.2, text/plain;version=0.0.4",
        )],
    ] {
        let r = get(server.addr(), "/metrics", &headers).await;
        assert_eq!(r.status, 200, "{headers:?}");
        assert_eq!(
            r.header("content-type"),
            Some(TEXT_CONTENT_TYPE),
            "{headers:?}"
        );
        assert_eq!(r.header("content-encoding"), None);
        assert_eq!(r.header("vary"), Some("Accept, Accept-Encoding"));
        let body = r.text();
        assert!(
            body.contains("# TYPE roce_exporter_build_info gauge\n"),
            "{body}"
        );
        assert!(!body.contains("# EOF"), "{body}");
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_serve_openmetrics_when_asked() {
    let server = start_local(app(1), options()).await;
    for accept in [
        PROMETHEUS_ACCEPT,
        "application/openmetrics-text",
        "application/openmetrics-text; version=1.0.0",
        "text/plain;q=0.5, application/openmetrics-text;version=0.0.1;q=0.6",
    ] {
        let r = get(server.addr(), "/metrics", &[("Accept", accept)]).await;
        assert_eq!(r.status, 200, "{accept}");
        assert_eq!(
            r.header("content-type"),
            Some(OPENMETRICS_CONTENT_TYPE),
            "{accept}"
        );
        let body = r.text();
        assert!(body.ends_with("# EOF\n"), "{body}");
        assert!(body.contains("roce_exporter_build_info"), "{body}");
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_round_trips_to_the_plain_body() {
    let server = start_local(app(1), options()).await;
    for accept in ["text/plain", PROMETHEUS_ACCEPT] {
        let plain = get(server.addr(), "/metrics", &[("Accept", accept)]).await;
        assert_eq!(plain.header("content-encoding"), None);
        for encoding in ["gzip", "gzip, deflate, br", "deflate;q=1, gzip;q=0.5", "*"] {
            let gz = get(
                server.addr(),
                "/metrics",
                &[("Accept", accept), ("Accept-Encoding", encoding)],
            )
            .await;
            assert_eq!(gz.status, 200);
            assert_eq!(gz.header("content-encoding"), Some("gzip"), "{encoding}");
            assert_eq!(gz.header("vary"), Some("Accept, Accept-Encoding"));
            assert_eq!(gz.header("content-type"), plain.header("content-type"));
            assert_eq!(gunzip(&gz.body), plain.body, "{accept} / {encoding}");
        }
        let refused = get(
            server.addr(),
            "/metrics",
            &[
                ("Accept", accept),
                ("Accept-Encoding", "gzip;q=0, identity"),
            ],
        )
        .await;
        assert_eq!(refused.header("content-encoding"), None);
        assert_eq!(refused.body, plain.body);
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_sends_the_headers_of_get_without_a_body() {
    let server = start_local(app(1), options()).await;
    for (path, headers) in [
        ("/metrics", vec![]),
        ("/metrics", vec![("Accept-Encoding", "gzip")]),
        ("/metrics", vec![("Accept", PROMETHEUS_ACCEPT)]),
        ("/healthz", vec![]),
        ("/", vec![]),
    ] {
        let full = get(server.addr(), path, &headers).await;
        let head = exchange(server.addr(), "HEAD", path, &headers).await;
        assert_eq!(head.status, full.status, "{path}");
        assert!(head.body.is_empty());
        assert_eq!(
            head.header("content-length"),
            Some(full.body.len().to_string().as_str()),
            "{path} {headers:?}"
        );
        assert_eq!(head.header("content-type"), full.header("content-type"));
        assert_eq!(
            head.header("content-encoding"),
            full.header("content-encoding")
        );
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_and_methods() {
    let server = start_local(app(1), options()).await;
    for path in ["/nope", "/metrics/", "/metricsx", "/index.html"] {
        let r = get(server.addr(), path, &[]).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.text(), "not found\n");
    }
    for (method, path) in [
        ("POST", "/metrics"),
        ("PUT", "/healthz"),
        ("DELETE", "/"),
        ("OPTIONS", "/metrics"),
    ] {
        let r = exchange(server.addr(), method, path, &[("Content-Length", "0")]).await;
        assert_eq!(r.status, 405, "{method} {path}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
    // The query string does not change the route.
    let r = get(server.addr(), "/metrics?collect[]=x", &[]).await;
    assert_eq!(r.status, 200);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_body_is_refused_and_the_connection_closed() {
    let server = start_local(app(1), options()).await;
    let addr = server.addr();
    let reply = tokio::task::spawn_blocking(move || {
        let mut s = connect(addr, EVENTUALLY).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert!(closed(&mut s));
        r
    })
    .await
    .unwrap();
    assert_eq!(reply.status, 413);
    assert_eq!(reply.header("connection"), Some("close"));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_200_with_a_sample_and_503_before_the_first() {
    let healthy = start_local(app(3), options()).await;
    let r = get(healthy.addr(), "/healthz", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert!(r.text().starts_with("ok, sample 3 taken "), "{}", r.text());
    healthy.stop().await.unwrap();

    let waiting = start_local(app(0), options()).await;
    let r = get(waiting.addr(), "/healthz", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "no sample yet\n");
    waiting.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_503_once_the_newest_sample_is_stale() {
    // Taken an hour ago at a 5 s interval: far past six intervals. (Made
    // by hand, so without a monotonic time: its age is read on the wall
    // clock.)
    let snapshot = Snapshot {
        sequence: 12,
        taken_at: SystemTime::now().checked_sub(Duration::from_secs(3600)),
        interval: Duration::from_secs(5),
        ..Default::default()
    };
    let app = Arc::new(App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(snapshot),
    ));
    let server = start_local(app.clone(), options()).await;
    let r = get(server.addr(), "/healthz", &[]).await;
    assert_eq!(r.status, 503);
    assert!(
        r.text()
            .starts_with("stale: the newest sample (12) started 3600s ago, more than 30s (6 sample intervals of 5s)"),
        "{}",
        r.text()
    );
    // A fresh sample makes it healthy again.
    app.publish(Arc::new(Snapshot {
        sequence: 13,
        taken_at: Some(SystemTime::now()),
        interval: Duration::from_secs(5),
        ..Default::default()
    }));
    let r = get(server.addr(), "/healthz", &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.text().starts_with("ok, sample 13 taken "), "{}", r.text());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn landing_page_shows_version_and_sources_escaped() {
    let server = start_local(app(1), options()).await;
    let r = get(server.addr(), "/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let html = r.text();
    assert!(
        html.contains(&format!(
            "<h1>roce_exporter {}</h1>",
            env!("CARGO_PKG_VERSION")
        )),
        "{html}"
    );
    assert!(html.contains("<td>rdma</td><td>ok</td>"), "{html}");
    assert!(
        html.contains("<td>netdev</td><td>unavailable</td>"),
        "{html}"
    );
    assert!(html.contains("no netdev &lt;script&gt;"), "{html}");
    assert!(!html.contains("<script>"), "{html}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_scrapes_get_the_same_body() {
    let server = start_local(app(1), options()).await;
    let addr = server.addr();
    let clients: Vec<_> = (0..50)
        .map(|i| {
            tokio::task::spawn_blocking(move || {
                let accept = if i % 2 == 0 {
                    "text/plain"
                } else {
                    PROMETHEUS_ACCEPT
                };
                exchange_blocking(addr, "GET", "/metrics", &[("Accept", accept)])
            })
        })
        .collect();
    let mut bodies = (None, None);
    for (i, c) in clients.into_iter().enumerate() {
        let r = c.await.expect("client");
        assert_eq!(r.status, 200);
        let slot = if i % 2 == 0 {
            &mut bodies.0
        } else {
            &mut bodies.1
        };
        match slot {
            None => *slot = Some(r.body),
            Some(first) => assert_eq!(*first, r.body, "client {i}"),
        }
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_works_and_is_bounded_by_connection_age() {
    let mut opts = options();
    opts.limits.header_read_timeout = Duration::from_secs(30);
    opts.max_connection_age = Duration::from_secs(1);
    opts.close_grace = Duration::from_secs(1);
    let server = start_local(app(1), opts).await;
    let addr = server.addr();
    tokio::task::spawn_blocking(move || {
        let mut s = connect(addr, EVENTUALLY).unwrap();
        for _ in 0..3 {
            s.write_all(&request("GET", "/healthz", &[], false))
                .unwrap();
            assert_eq!(read_response(&mut s, false).unwrap().status, 200);
        }
        assert!(
            closed(&mut s),
            "an idle connection is closed at its age limit"
        );
    })
    .await
    .unwrap();
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalling_in_its_headers_is_cut_off() {
    let mut opts = options();
    opts.limits.header_read_timeout = Duration::from_millis(300);
    let server = start_local(app(1), opts).await;
    let addr = server.addr();
    tokio::task::spawn_blocking(move || {
        let mut s = connect(addr, EVENTUALLY).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n")
            .unwrap();
        assert!(closed(&mut s), "closed at the header read timeout");
        // Also a connection that never sends a byte.
        let mut silent = connect(addr, EVENTUALLY).unwrap();
        assert!(closed(&mut silent));
        // And a keep-alive connection idle after its response: the timer
        // restarts for the next request's headers.
        let mut idle = connect(addr, EVENTUALLY).unwrap();
        idle.write_all(&request("GET", "/healthz", &[], false))
            .unwrap();
        assert_eq!(read_response(&mut idle, false).unwrap().status, 200);
        assert!(closed(&mut idle), "an idle keep-alive connection is closed");
    })
    .await
    .unwrap();
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn others_are_served_while_a_client_stalls() {
    let mut opts = options();
    opts.limits.header_read_timeout = Duration::from_secs(30);
    let server = start_local(app(1), opts).await;
    let addr = server.addr();
    let mut stalled = tokio::task::spawn_blocking(move || {
        let mut s = connect(addr, EVENTUALLY).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nX-Slow: ")
            .unwrap();
        s
    })
    .await
    .unwrap();
    let r = get(addr, "/metrics", &[]).await;
    assert_eq!(r.status, 200);
    // The stalled request still completes once its headers arrive.
    let r = tokio::task::spawn_blocking(move || {
        stalled
            .write_all(b"1\r\nConnection: close\r\n\r\n")
            .unwrap();
        read_response(&mut stalled, false).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_a_new_client_closes_a_stalled_one() {
    let mut opts = options();
    opts.limits.max_connections = 1;
    // Far above the client's patience: only the cap can free the way.
    opts.limits.header_read_timeout = Duration::from_secs(60);
    let server = start_local(app(1), opts).await;
    let addr = server.addr();
    tokio::task::spawn_blocking(move || {
        // Takes the only place and never finishes its headers.
        let mut stalled = connect(addr, EVENTUALLY).unwrap();
        stalled.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        // Served at once: the stalled connection is closed for it (before
        // the change it waited in the backlog for the header timeout).
        let r = exchange_blocking(addr, "GET", "/healthz", &[]);
        assert_eq!(r.status, 200);
        assert!(
            closed(&mut stalled),
            "the stalled connection was closed for the new one"
        );
    })
    .await
    .unwrap();
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_are_refused() {
    let mut opts = options();
    opts.limits.max_request_bytes = 8192;
    let server = start_local(app(1), opts).await;
    let addr = server.addr();
    tokio::task::spawn_blocking(move || {
        let mut s = connect(addr, EVENTUALLY).unwrap();
        let mut req = b"GET /metrics HTTP/1.1\r\nHost: t\r\nX-Filler: ".to_vec();
        req.extend(std::iter::repeat_n(b'a', 64 * 1024));
        req.extend_from_slice(b"\r\n\r\n");
        // The server may close while we still write: that is a refusal too.
        let _ = s.write_all(&req);
        let mut answer = Vec::new();
        match s.read_to_end(&mut answer) {
            Ok(_) => {
                if !answer.is_empty() {
                    assert!(
                        answer.starts_with(b"HTTP/1.1 431 "),
                        "{}",
                        String::from_utf8_lossy(&answer)
                    );
                }
            }
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
                "{e}"
            ),
        }
    })
    .await
    .unwrap();
    // Headers within the limit are fine.
    let filler = "b".repeat(4000);
    let r = get(addr, "/healthz", &[("X-Filler", filler.as_str())]).await;
    assert_eq!(r.status, 200);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_completes_the_request_in_flight() {
    let mut opts = options();
    opts.limits.header_read_timeout = Duration::from_secs(30);
    opts.close_grace = Duration::from_secs(5);
    let server = start_local(app(1), opts).await;
    let addr = server.addr();
    let expected = get(addr, "/metrics", &[]).await.body;

    // A request half sent when shutdown starts. The listen queue is FIFO:
    // once a later connection has been served, this one was accepted.
    let mut in_flight = tokio::task::spawn_blocking(move || {
        let mut s = connect(addr, EVENTUALLY).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n")
            .unwrap();
        s
    })
    .await
    .unwrap();
    assert_eq!(get(addr, "/healthz", &[]).await.status, 200);

    let Running { stop, task, .. } = server;
    stop.send(()).unwrap();
    let reply = tokio::task::spawn_blocking(move || {
        in_flight.write_all(b"\r\n").unwrap();
        let r = read_response(&mut in_flight, false).unwrap();
        assert!(closed(&mut in_flight), "closed after the last response");
        r
    })
    .await
    .unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, expected);
    tokio::time::timeout(EVENTUALLY, task)
        .await
        .expect("serve returns")
        .expect("no panic")
        .expect("no error");
    assert!(
        TcpStream::connect_timeout(&addr, EVENTUALLY).is_err(),
        "nothing listens after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_connections_that_do_not_finish() {
    let mut opts = options();
    opts.limits.header_read_timeout = Duration::from_secs(30);
    opts.close_grace = Duration::from_millis(300);
    let server = start_local(app(1), opts).await;
    let addr = server.addr();
    let mut stuck = tokio::task::spawn_blocking(move || {
        let mut s = connect(addr, EVENTUALLY).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        s
    })
    .await
    .unwrap();
    assert_eq!(get(addr, "/healthz", &[]).await.status, 200);
    server.stop().await.unwrap();
    assert!(tokio::task::spawn_blocking(move || closed(&mut stuck))
        .await
        .unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_loopback() {
    let listeners = match server::bind(&["[::1]:0".to_string()]).await {
        Ok(l) => l,
        Err(ServerError::Bind(_, e)) => {
            skip_unless_ci(&format!("no IPv6 loopback here ({e})"));
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let addr = listeners[0].local_addr().unwrap();
    assert!(addr.is_ipv6());
    drop(listeners);
    let server = start(&[&addr.to_string()], app(1), options()).await;
    let r = get(server.addr(), "/healthz", &[]).await;
    assert_eq!(r.status, 200);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_interfaces_and_host_names() {
    let server = start(&[":0", "localhost:0"], app(1), options()).await;
    assert!(server.addrs.len() >= 2, "{:?}", server.addrs);
    assert!(server.addrs[0].ip().is_unspecified());
    let port = server.addrs[0].port();
    // `:PORT` takes IPv4 clients whether it bound [::] or 0.0.0.0.
    let r = get(SocketAddr::from(([127, 0, 0, 1], port)), "/healthz", &[]).await;
    assert_eq!(r.status, 200);
    for addr in &server.addrs[1..] {
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_eq!(get(*addr, "/healthz", &[]).await.status, 200);
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_listen_addresses_are_refused_before_binding() {
    for bad in ["9879", "::1:9879", "[::1]", ":99999", "127.0.0.1:port", ""] {
        let err = server::bind(&["127.0.0.1:0".to_string(), bad.to_string()])
            .await
            .expect_err(bad);
        assert!(matches!(err, ServerError::Address(..)), "{bad}: {err}");
        assert!(err.to_string().contains("invalid listen address"), "{err}");
    }
    assert!(matches!(
        server::bind(&[]).await,
        Err(ServerError::NoAddress)
    ));
    // Taken port: a clear bind error.
    let first = server::bind(&["127.0.0.1:0".to_string()]).await.unwrap();
    let taken = first[0].local_addr().unwrap().to_string();
    let err = server::bind(std::slice::from_ref(&taken))
        .await
        .expect_err("port in use");
    assert!(matches!(err, ServerError::Bind(..)), "{err}");
}

/// `/findings` serves the snapshot's findings as JSON valid against the
/// documented schema, and the landing page lists them escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn findings_are_served_as_json_valid_against_the_schema() {
    use roce_exporter::rules::{Finding, Severity, Subject};
    let findings = vec![
        Finding {
            rule: roce_exporter::rules::RuleId::PortDown,
            severity: Severity::Critical,
            subject: Subject::port("mlx5_0", 1, Some("ens1np0")),
            finding: "mlx5_0 port 1 (ens1np0) is down (DOWN, Polling)".into(),
            evidence: "state 1: DOWN, phys_state 2: Polling; expected 4: ACTIVE, 5: LinkUp".into(),
            fix: "Check the cable".into(),
            verify: "cat /sys/class/infiniband/mlx5_0/ports/1/state".into(),
        },
        Finding {
            rule: roce_exporter::rules::RuleId::CollectorFailing,
            severity: Severity::Warning,
            subject: Subject::default(),
            finding: "The <netdev> collector failed".into(),
            evidence: "x".into(),
            fix: "y".into(),
            verify: "z".into(),
        },
    ];
    let snapshot = Snapshot {
        sequence: 3,
        taken_at: Some(SystemTime::now()),
        findings,
        ..Default::default()
    };
    let app = Arc::new(App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(snapshot),
    ));
    let server = start_local(app, options()).await;
    let reply = get(server.addr(), "/findings", &[]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let json: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON body");
    let schema_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/findings.schema.json"
    ))
    .expect("schema file");
    let schema: serde_json::Value = serde_json::from_str(&schema_text).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&json)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(json[0]["rule"], "port_down");
    assert_eq!(json[0]["subject"]["port"], 1);
    assert_eq!(json[1]["subject"]["device"], serde_json::Value::Null);
    // The schema rejects what the contract forbids.
    let bad = serde_json::json!([{"rule": "x", "severity": "fatal", "subject": {"device": null, "port": null, "netdev": null, "gpu": null}, "finding": "a", "evidence": "b", "fix": "c", "verify": "d"}]);
    assert!(!validator.is_valid(&bad));
    let landing = get(server.addr(), "/", &[]).await.text();
    assert!(landing.contains("Findings (2)"), "{landing}");
    assert!(
        landing.contains("The &lt;netdev&gt; collector failed"),
        "{landing}"
    );
    assert!(
        landing.contains("<a href=\"/runbook/port_down\">port_down</a>"),
        "{landing}"
    );
    server.stop().await.expect("clean stop");
}

/// `/runbook/<rule>` serves that rule's section of docs/runbook.md (where
/// the generated alerts' runbook_url points), `/runbook` the whole text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runbook_sections_are_served() {
    let app = Arc::new(App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(Snapshot::default()),
    ));
    let server = start_local(app, options()).await;
    let reply = get(server.addr(), "/runbook/pfc_storm", &[]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let text = reply.text();
    assert!(text.starts_with("## pfc_storm\n"), "{text}");
    assert!(text.contains("**Fix.**"), "{text}");
    assert!(!text.contains("\n## "), "one section only: {text}");
    let whole = get(server.addr(), "/runbook", &[]).await;
    assert_eq!(whole.status, 200);
    assert!(whole.text().contains("## RoceExporterDown\n"));
    for missing in ["/runbook/no_such_rule", "/runbook/../metrics", "/runbooks"] {
        assert_eq!(
            get(server.addr(), missing, &[]).await.status,
            404,
            "{missing}"
        );
    }
    server.stop().await.expect("clean stop");
}

/// Serves one in-memory connection (the accept loop's per-connection code,
/// `server::serve_stream`) whose pipe holds `pipe` bytes each way, so a
/// client that does not read fills it at once, as a full socket would.
fn serve_pipe(pipe: usize, options: ServeOptions) -> (tokio::io::DuplexStream, JoinHandle<()>) {
    let (client, conn) = tokio::io::duplex(pipe);
    let task = tokio::spawn(async move {
        let web = Arc::new(roce_exporter::webconfig::WebConfig::plain());
        server::serve_stream(conn, app(1), &options, web).await;
    });
    (client, task)
}

/// Status line, declared body length and the body bytes that came.
fn split_response(bytes: &[u8]) -> (String, usize, usize) {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&bytes[..end]).to_string();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        })
        .expect("a content-length");
    let status = head.lines().next().unwrap_or_default().to_string();
    (status, length, bytes.len() - end - 4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_its_response_is_cut_at_the_write_stall_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut opts = options();
    opts.limits.header_read_timeout = Duration::from_secs(30);
    opts.limits.write_stall_timeout = Duration::from_millis(200);
    // Without the stall timeout only the connection age would end it.
    opts.max_connection_age = Duration::from_secs(600);
    let (mut client, served) = serve_pipe(512, opts);
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    // The client reads nothing: the server's write fills the pipe and stalls.
    tokio::time::timeout(EVENTUALLY, served)
        .await
        .expect("the stalled connection was cut")
        .unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    let (status, length, body) = split_response(&got);
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        body < length,
        "cut before the end: {body} of {length} body bytes came"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_that_keeps_reading_gets_the_whole_response() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut opts = options();
    opts.limits.write_stall_timeout = Duration::from_millis(300);
    let (mut client, served) = serve_pipe(64, opts);
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    // 64 bytes every 20 ms: the whole answer takes longer than the stall
    // timeout, but no single stall comes near it.
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let mut chunk = [0u8; 64];
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let n = tokio::time::timeout(EVENTUALLY, client.read(&mut chunk))
            .await
            .expect("the server kept sending")
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&chunk[..n]);
    }
    let (status, length, body) = split_response(&got);
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(body, length, "the whole body came");
    assert!(
        started.elapsed() > Duration::from_millis(300),
        "the test reads for longer than the stall timeout"
    );
    tokio::time::timeout(EVENTUALLY, served)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_probe_endpoints_are_json_and_absent_while_peer_probes_are_off() {
    let server = start_local(app(1), options()).await;
    let off = get(server.addr(), "/peer-probe/endpoints", &[]).await;
    assert_eq!(off.status, 404);

    let endpoint = roce_probe::peer::Endpoint {
        node: "node-a".into(),
        device: "rxe0".into(),
        device_index: 0,
        port: 1,
        gid: "::ffff:10.0.2.15".parse().expect("GID"),
        gid_index: 1,
        qpn: 17,
        qkey: roce_probe::peer::QKEY,
        mtu: 1024,
        subnet: Some("10.0.2.0/24".into()),
        rail: None,
        incarnation: 1234,
        wire: roce_probe::peer_wire::WIRE_VERSION,
        learning: false,
    };
    let snapshot = Snapshot {
        sequence: 2,
        taken_at: Some(SystemTime::now()),
        peer_probes: Some(roce_probe::peer::PeerResults {
            endpoints: vec![endpoint.clone()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let app = Arc::new(App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(snapshot),
    ));
    let server = start_local(app, options()).await;
    let reply = get(server.addr(), "/peer-probe/endpoints", &[]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let got = roce_probe::peer::parse_endpoints(&reply.body).expect("endpoints document");
    assert_eq!(got, vec![endpoint]);
}
