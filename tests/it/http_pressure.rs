//! The server under connection floods: what is limited is work, not idle
//! connections, so clients that hold connections without finishing a
//! request (stalled or slow headers, reconnecting, not reading their
//! answer, oversized requests) at many times the limits do not keep a
//! scraper from being answered within Prometheus' 10 s scrape timeout.
//! Before, a connection slot was taken at accept: 80 half-header clients
//! held all 64 slots and a scrape waited for the header timeout. Plain
//! `std::net::TcpStream` clients on loopback; the only time bound is the
//! scraper's own read timeout.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::support::connect;
use roce_exporter::app::App;
use roce_exporter::config::WebLimits;
use roce_exporter::exposition::BuildInfo;
use roce_exporter::server::{self, ServeOptions};
use roce_exporter::snapshot::Snapshot;
use tokio::sync::oneshot;

/// Bound on every read, so that a regression fails instead of hanging;
/// also the scraper's timeout (Prometheus' default `scrape_timeout`).
const EVENTUALLY: Duration = Duration::from_secs(10);

fn app() -> Arc<App> {
    let snapshot = Snapshot {
        sequence: 1,
        taken_at: Some(SystemTime::now()),
        ..Default::default()
    };
    Arc::new(App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(snapshot),
    ))
}

async fn start(max_connections: usize) -> (SocketAddr, oneshot::Sender<()>) {
    start_with(WebLimits {
        max_connections,
        ..WebLimits::default()
    })
    .await
}

async fn start_with(limits: WebLimits) -> (SocketAddr, oneshot::Sender<()>) {
    let listeners = server::bind(&["127.0.0.1:0".to_string()])
        .await
        .expect("bind");
    let addr = listeners[0].local_addr().expect("local_addr");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server::serve_with(
        listeners,
        app(),
        ServeOptions::new(limits),
        async move {
            let _ = stopped.await;
        },
    ));
    (addr, stop)
}

/// Reads from `s` through the end of an answer's head: what was read, and
/// where the head ends (the blank line).
fn read_head(s: &mut TcpStream, chunk: &mut [u8]) -> Result<(Vec<u8>, usize), String> {
    let mut buf = Vec::new();
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok((buf, i));
        }
        let n = s.read(chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed before answering".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The status code of an answer's head (0 when it has none).
pub(crate) fn status_of(head: &str) -> u16 {
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The value of header `name` in an answer's head, in lower case.
fn header_of(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_ascii_lowercase())
    })
}

/// Sends a keep-alive GET /healthz and reads the answer: status and the
/// value of its Connection header.
fn healthz(s: &mut TcpStream) -> (u16, Option<String>) {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut chunk = [0u8; 4096];
    let (buf, end) = read_head(s, &mut chunk).unwrap_or_else(|e| panic!("{e}"));
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let status = status_of(&head);
    let header = |name: &str| header_of(&head, name);
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .expect("content-length");
    let mut have = buf.len() - end - 4;
    while have < length {
        let n = s.read(&mut chunk).expect("read the body");
        assert!(n > 0, "short body");
        have += n;
    }
    (status, header("connection"))
}

/// True when the server has closed the connection (end of stream or reset).
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_free_slots_connections_are_kept_alive() {
    let (addr, stop) = start(64).await;
    tokio::task::spawn_blocking(move || {
        let mut s = connect(addr, EVENTUALLY).expect("connect");
        for _ in 0..3 {
            assert_eq!(healthz(&mut s), (200, None));
        }
    })
    .await
    .unwrap();
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_connection_idle_longest_is_closed_for_a_new_one() {
    let (addr, stop) = start(2).await;
    tokio::task::spawn_blocking(move || {
        // A and B fill the table (B's answer means B was accepted, and the
        // accept queue hands connections out in order, so A was too).
        let mut a = connect(addr, EVENTUALLY).expect("connect");
        let mut b = connect(addr, EVENTUALLY).expect("connect");
        assert_eq!(healthz(&mut b), (200, None), "B is kept alive");
        // C closes A, which has waited longest without a request; B,
        // idle only since its answer, stays.
        let mut c = connect(addr, EVENTUALLY).expect("connect");
        assert_eq!(healthz(&mut c).0, 200);
        assert!(closed(&mut a), "A was closed for C");
        assert_eq!(healthz(&mut b).0, 200, "B is still served");
    })
    .await
    .unwrap();
    let _ = stop.send(());
}

/// Limits of the flood tests: a small connection cap, so that the abusive
/// clients below are ten times it and more, and a header timeout far above
/// the scraper's patience, so that only shedding can let it through.
fn flood_limits() -> WebLimits {
    WebLimits {
        max_connections: 32,
        max_requests: 4,
        header_read_timeout: Duration::from_secs(60),
        ..WebLimits::default()
    }
}

/// A keep-alive scrape of /metrics on `s`: the status, or why none came
/// within the scraper's timeout.
fn scrape(s: &mut TcpStream) -> Result<u16, String> {
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut chunk = [0u8; 65536];
    let (buf, end) = read_head(s, &mut chunk)?;
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let status = status_of(&head);
    let length: usize = header_of(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .ok_or("no content-length")?;
    let mut have = buf.len() - end - 4;
    while have < length {
        let n = s.read(&mut chunk).map_err(|e| format!("read body: {e}"))?;
        if n == 0 {
            return Err("short body".into());
        }
        have += n;
    }
    Ok(status)
}

/// A scraper as Prometheus' HTTP client behaves: keeps its connection
/// alive, and when the server has closed it while idle (seen as the
/// connection closing before any answer), retries once on a new one.
struct Scraper {
    addr: SocketAddr,
    conn: Option<TcpStream>,
}

impl Scraper {
    fn new(addr: SocketAddr) -> Self {
        Scraper { addr, conn: None }
    }

    fn scrape(&mut self) -> Result<u16, String> {
        if let Some(mut s) = self.conn.take() {
            match scrape(&mut s) {
                Ok(status) => {
                    self.conn = Some(s);
                    return Ok(status);
                }
                Err(e) if e.starts_with("closed before answering") || e.contains("reset") => {}
                Err(e) => return Err(e),
            }
        }
        let mut s = connect(self.addr, EVENTUALLY).expect("connect");
        let status = scrape(&mut s)?;
        self.conn = Some(s);
        Ok(status)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_headers_at_ten_times_the_cap_do_not_hold_up_a_scrape() {
    let (addr, stop) = start_with(flood_limits()).await;
    tokio::task::spawn_blocking(move || {
        // 10x the connection cap (80x the request limit), each with half a
        // request header and no more.
        let mut flood: Vec<TcpStream> = (0..320)
            .map(|_| {
                let mut s = connect(addr, EVENTUALLY).expect("connect");
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nX-Slow: ")
                    .unwrap();
                s
            })
            .collect();
        // A scraper: a new connection (Prometheus after a restart) and
        // then kept alive, each answer within its 10 s timeout.
        let mut scraper = connect(addr, EVENTUALLY).expect("connect");
        for i in 0..5 {
            assert_eq!(scrape(&mut scraper), Ok(200), "scrape {i}");
        }
        // Another fresh connection in the middle of the flood.
        assert_eq!(
            scrape(&mut connect(addr, EVENTUALLY).expect("connect")),
            Ok(200)
        );
        // The flood was shed oldest first.
        assert!(
            closed(&mut flood[0]),
            "the oldest stalled connection was closed"
        );
    })
    .await
    .unwrap();
    let _ = stop.send(());
}

/// Reconnecting slow-header clients, clients that do not read their
/// answer, oversized requests and requests with a body, all at once, each
/// kind at ten times the connection cap or more, while a kept-alive scraper
/// and a reconnecting one scrape: every scrape is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_abusive_clients_do_not_hold_up_scrapes() {
    let (addr, stop) = start_with(flood_limits()).await;
    tokio::task::spawn_blocking(move || {
        let mut scraper = Scraper::new(addr);
        assert_eq!(scraper.scrape(), Ok(200));
        let mut held = Vec::new();
        let big = format!(
            "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        for round in 0..4 {
            // Slow headers that reconnect: each round opens a new batch
            // and drops the previous one.
            held.retain(|_: &TcpStream| false);
            for _ in 0..320 {
                let mut s = connect(addr, EVENTUALLY).expect("connect");
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nX-Slow: a");
                held.push(s);
            }
            // Whole requests whose answers are never read.
            for _ in 0..80 {
                let mut s = connect(addr, EVENTUALLY).expect("connect");
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
                held.push(s);
            }
            // Oversized headers and requests with a body: refused, and
            // never left to pile up.
            for _ in 0..40 {
                let mut s = connect(addr, EVENTUALLY).expect("connect");
                let _ = s.write_all(big.as_bytes());
                held.push(s);
                let mut s = connect(addr, EVENTUALLY).expect("connect");
                let _ = s.write_all(
                    b"GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 1048576\r\n\r\nbbbb",
                );
                held.push(s);
            }
            assert_eq!(
                scraper.scrape(),
                Ok(200),
                "kept-alive scrape, round {round}"
            );
            assert_eq!(
                scrape(&mut connect(addr, EVENTUALLY).expect("connect")),
                Ok(200),
                "scrape on a new connection, round {round}"
            );
        }
    })
    .await
    .unwrap();
    let _ = stop.send(());
}
