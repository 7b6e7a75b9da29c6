//! The server at its connection cap: kept-alive connections give their slot
//! up (`Connection: close`) while no slot is free, so clients waiting in the
//! backlog are served instead of waiting out the connection age. Found by
//! bench/load.py: 200 kept-alive scrapers on 64 slots, most of them served
//! once a minute. Plain `std::net::TcpStream` clients on loopback.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use roce_exporter::app::App;
use roce_exporter::config::WebLimits;
use roce_exporter::exposition::BuildInfo;
use roce_exporter::server::{self, ServeOptions};
use roce_exporter::snapshot::Snapshot;
use tokio::sync::oneshot;

/// Bound on every read, so that a regression fails instead of hanging.
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
    let listeners = server::bind(&["127.0.0.1:0".to_string()])
        .await
        .expect("bind");
    let addr = listeners[0].local_addr().expect("local_addr");
    let limits = WebLimits {
        max_connections,
        ..WebLimits::default()
    };
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

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, EVENTUALLY).expect("connect");
    s.set_read_timeout(Some(EVENTUALLY)).unwrap();
    s.set_write_timeout(Some(EVENTUALLY)).unwrap();
    s
}

/// Sends a keep-alive GET /healthz and reads the answer: status and the
/// value of its Connection header.
fn healthz(s: &mut TcpStream) -> (u16, Option<String>) {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk).expect("read the answer");
        assert!(n > 0, "closed before answering");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let header = |name: &str| {
        head.split("\r\n").find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_ascii_lowercase())
        })
    };
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
        let mut s = connect(addr);
        for _ in 0..3 {
            assert_eq!(healthz(&mut s), (200, None));
        }
    })
    .await
    .unwrap();
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_kept_alive_connection_gives_its_slot_to_a_waiting_client() {
    let (addr, stop) = start(2).await;
    tokio::task::spawn_blocking(move || {
        // A and B take both slots (B's answer means B was accepted, and the
        // accept queue hands connections out in order, so A was too).
        let _a = connect(addr);
        let mut b = connect(addr);
        let (status, connection) = healthz(&mut b);
        assert_eq!(status, 200);
        assert_eq!(
            connection.as_deref(),
            Some("close"),
            "no slot was free: B is told to close"
        );
        assert!(closed(&mut b), "and B is closed after its answer");
        // C waited in the backlog: it gets B's slot while A is still open
        // (before the fix it waited until the connection age cut A or B).
        let mut c = connect(addr);
        assert_eq!(healthz(&mut c).0, 200);
    })
    .await
    .unwrap();
    let _ = stop.send(());
}
