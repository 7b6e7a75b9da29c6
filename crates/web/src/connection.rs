//! The HTTP server: `/metrics`, `/healthz` and `/` over HTTP/1.1 (hyper 1 on
//! tokio), with its own accept loop so that every limit is enforced here
//! rather than left to a framework default. It only serves what the [`App`]
//! holds; it never touches the host.
//!
//! What is limited is work, not idle connections: a connection that has not
//! sent a whole request costs a task and a small buffer, so the accept loop
//! always accepts, and sheds such connections first when there are too many.
//! Limits, all from [`WebLimits`] and [`ServeOptions`]:
//! - at most `max_requests` requests are answered at once; one more is
//!   answered `503` at once (node_exporter's `--web.max-requests`);
//! - at most `max_connections` connections are open (less when the file
//!   descriptor limit is lower); at the cap, a new connection closes the
//!   one that has waited longest without ever sending a whole request
//!   (headers incomplete, a TLS handshake), then, if none, the one idle
//!   between keep-alive requests or writing its answer for longest; a
//!   connection whose request is being answered is never closed for
//!   another (kept-alive clients reconnect, as HTTP clients do when an idle
//!   connection closes);
//! - a client must send its request headers within `header_read_timeout`
//!   (hyper's timer, which also bounds how long a keep-alive connection may
//!   sit idle between requests);
//! - request headers above `max_request_bytes` get `431` and the connection
//!   is closed; a request with a body gets `413` and the connection is closed;
//! - a response the client stops reading (its window and the socket buffers
//!   full, no byte taken) for `write_stall_timeout` has its connection cut;
//! - a connection older than [`ServeOptions::max_connection_age`] is told to
//!   close after its current response and is cut [`ServeOptions::close_grace`]
//!   later, so a client that reads its response very slowly cannot hold it
//!   forever;
//! - basic-auth checks run on one bcrypt thread with a bounded queue and
//!   cached outcomes (see [`crate::webconfig`]); a check that finds the
//!   queue full is answered `503`;
//! - on shutdown, accepting stops, connections finish their current request
//!   and close, and whatever is still open after `close_grace` is cut.
//!
//! With [`ServeOptions::web_config`] (`--web.config.file`): TLS (the
//! handshake must finish within `header_read_timeout`), basic auth on every
//! path and extra response headers, from the configuration in force when
//! the connection was accepted (see [`crate::webconfig`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};

use crate::app::App;
use crate::config::WebLimits;
use crate::exposition::Format;
use crate::webconfig::{AuthOutcome, WebConfig, WebConfigWatcher, REALM};

/// Kernel listen backlog: connections not accepted yet (the accept loop
/// takes them as fast as it can).
const LISTEN_BACKLOG: i32 = 1024;
/// hyper refuses a read buffer smaller than this (`MINIMUM_MAX_BUFFER_SIZE`
/// in hyper's `proto/h1/io.rs`) and panics when asked for less.
const HYPER_MIN_BUF_SIZE: usize = 8192;
/// Above this the semaphore arithmetic would overflow (`max_requests`); no
/// host serves that many Prometheus scrapers.
const MAX_CONNECTIONS_CAP: usize = 1 << 20;
/// File descriptors kept free of connections for everything else the
/// exporter opens (sysfs, procfs, netlink, the probes).
const RESERVED_FDS: u64 = 256;
/// Pause after an accept error that is not about one connection (out of file
/// descriptors, out of memory), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Slack on top of `close_grace` for the last connection tasks to notice
/// their deadline and leave the connection table.
const DRAIN_SLACK: Duration = Duration::from_millis(500);

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
const APPLICATION_JSON: &str = "application/json";
const TEXT_HTML: &str = "text/html; charset=utf-8";
const ALLOWED_METHODS: &str = "GET, HEAD";

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid listen address {0:?}: {1}")]
    Address(String, String),
    #[error("no listen address given")]
    NoAddress,
    #[error("cannot resolve listen address {0:?}: {1}")]
    Resolve(String, std::io::Error),
    #[error("cannot listen on {0}: {1}")]
    Bind(String, std::io::Error),
}

/// Everything [`serve_with`] needs besides the listeners and the state.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub limits: WebLimits,
    /// A connection older than this closes after its current response
    /// (keep-alive clients simply reconnect).
    pub max_connection_age: Duration,
    /// How long a connection told to close (shutdown or age) may take to
    /// finish its response before it is cut; also bounds the shutdown drain.
    pub close_grace: Duration,
    /// `--web.config.file`: TLS, basic auth, headers. `None`: plain HTTP.
    pub web_config: Option<Arc<WebConfigWatcher>>,
}

impl ServeOptions {
    pub fn new(limits: WebLimits) -> Self {
        ServeOptions {
            limits,
            max_connection_age: Duration::from_secs(60),
            close_grace: Duration::from_secs(5),
            web_config: None,
        }
    }
}

/// One parsed `--web.listen-address`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ListenSpec {
    /// `:PORT`: every interface, IPv6 dual-stack when the host has IPv6.
    AllInterfaces(u16),
    /// An IP literal: `0.0.0.0:9879`, `127.0.0.1:9879`, `[::1]:9879`.
    Socket(SocketAddr),
    /// A host name (`localhost:9879`), resolved at bind time.
    Host(String, u16),
}

/// Parses a listen address the way Prometheus exporters spell them
/// (Go's `host:port`, IPv6 in brackets, empty host for every interface).
fn parse_listen_address(text: &str) -> Result<ListenSpec, ServerError> {
    let invalid = |why: &str| ServerError::Address(text.to_string(), why.to_string());
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(ListenSpec::Socket(addr));
    }
    if text.starts_with('[') {
        return Err(invalid(
            "expected [IPv6]:PORT with an IPv6 address and a port, e.g. [::1]:9879",
        ));
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(invalid(
            "missing port; write HOST:PORT or :PORT, e.g. :9879",
        ));
    };
    if host.contains(':') {
        return Err(invalid(
            "an IPv6 address must be in brackets, e.g. [::1]:9879",
        ));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| invalid("the port must be a number from 0 to 65535"))?;
    if host.is_empty() {
        return Ok(ListenSpec::AllInterfaces(port));
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(ListenSpec::Socket(SocketAddr::new(IpAddr::V4(ip), port)));
    }
    let valid_name = host
        .split('.')
        .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if !valid_name {
        return Err(invalid("the host is neither an IP address nor a host name"));
    }
    Ok(ListenSpec::Host(host.to_string(), port))
}

/// Binds every listen address (`:9879`, `0.0.0.0:9879`, `[::1]:9879`,
/// `localhost:9879`). All addresses are checked before any is bound, so a
/// typo is reported before anything listens. The bound addresses (port 0
/// gives a free port) are each listener's `local_addr()`.
pub async fn bind(addresses: &[String]) -> Result<Vec<TcpListener>, ServerError> {
    if addresses.is_empty() {
        return Err(ServerError::NoAddress);
    }
    let specs = addresses
        .iter()
        .map(|a| parse_listen_address(a).map(|s| (a.as_str(), s)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut listeners = Vec::new();
    for (text, spec) in specs {
        match spec {
            ListenSpec::AllInterfaces(port) => {
                let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
                let listener = match bind_one(v6) {
                    Ok(l) => l,
                    Err(e) if no_such_family(&e) => {
                        let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
                        tracing::debug!(error = %e, "no IPv6 here; listening on IPv4 only");
                        bind_one(v4).map_err(|e| ServerError::Bind(format!("{text} ({v4})"), e))?
                    }
                    Err(e) => return Err(ServerError::Bind(format!("{text} ({v6})"), e)),
                };
                listeners.push(listener);
            }
            ListenSpec::Socket(addr) => {
                let listener =
                    bind_one(addr).map_err(|e| ServerError::Bind(text.to_string(), e))?;
                listeners.push(listener);
            }
            ListenSpec::Host(host, port) => {
                let mut resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
                    .await
                    .map_err(|e| ServerError::Resolve(text.to_string(), e))?
                    .collect();
                resolved.sort();
                resolved.dedup();
                // `localhost` often resolves to ::1 too; a host without IPv6
                // still listens on what it has.
                let mut bound = 0;
                let mut last_error = None;
                for addr in resolved {
                    match bind_one(addr) {
                        Ok(l) => {
                            listeners.push(l);
                            bound += 1;
                        }
                        Err(e) if no_such_family(&e) => {
                            tracing::debug!(%addr, error = %e, "skipping an address this host cannot use");
                            last_error = Some((addr, e));
                        }
                        Err(e) => return Err(ServerError::Bind(format!("{text} ({addr})"), e)),
                    }
                }
                if bound == 0 {
                    return Err(match last_error {
                        Some((addr, e)) => ServerError::Bind(format!("{text} ({addr})"), e),
                        None => ServerError::Address(
                            text.to_string(),
                            "the host name resolves to no address".into(),
                        ),
                    });
                }
            }
        }
    }
    Ok(listeners)
}

/// An address family or address this host does not have (IPv6 disabled,
/// `::1` absent).
fn no_such_family(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL | libc::EPROTONOSUPPORT)
    )
}

fn bind_one(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        // `[::]` serves IPv4 too (as Go's listeners do), whatever the
        // `net.ipv6.bindv6only` sysctl says; a specific address is unaffected.
        socket.set_only_v6(!addr.ip().is_unspecified())?;
    }
    // A restart must not fail on connections of the previous process still
    // in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&SockAddr::from(addr))?;
    socket.listen(LISTEN_BACKLOG)?;
    TcpListener::from_std(socket.into())
}

/// Serves until `shutdown` resolves, then drains open connections.
pub async fn serve(
    listeners: Vec<TcpListener>,
    app: Arc<App>,
    limits: WebLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    serve_with(listeners, app, ServeOptions::new(limits), shutdown).await
}

/// [`serve`] with every limit explicit (tests shorten the timeouts).
pub async fn serve_with(
    listeners: Vec<TcpListener>,
    app: Arc<App>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let table = Arc::new(ConnTable::new(connection_cap(
        options.limits.max_connections,
    )));
    let shared = Arc::new(Shared {
        app,
        http: http1_builder(&options.limits),
        timing: ConnectionTiming::of(&options),
        requests: Arc::new(Semaphore::new(
            options.limits.max_requests.clamp(1, MAX_CONNECTIONS_CAP),
        )),
    });
    // `true` once shutting down; a dropped sender (serve cancelled) also
    // stops everything.
    let (stop_tx, stop_rx) = watch::channel(false);

    let mut acceptors = Vec::with_capacity(listeners.len());
    for listener in listeners {
        match listener.local_addr() {
            Ok(addr) => tracing::info!(address = %addr, "listening"),
            Err(e) => tracing::debug!(error = %e, "listening (address unknown)"),
        }
        acceptors.push(tokio::spawn(accept_loop(
            listener,
            shared.clone(),
            table.clone(),
            options.web_config.clone(),
            stop_rx.clone(),
        )));
    }
    drop(stop_rx);

    shutdown.await;
    stop_tx.send_replace(true);
    for acceptor in acceptors {
        if let Err(e) = acceptor.await {
            tracing::warn!(error = %e, "an accept loop ended abnormally");
        }
    }
    // The listeners are closed now; wait for the connections to close.
    let grace = shared.timing.grace + DRAIN_SLACK;
    match tokio::time::timeout(grace, table.drained()).await {
        Ok(()) => tracing::debug!("all connections closed"),
        Err(_) => {
            tracing::warn!("some connections were still open after the shutdown grace period")
        }
    }
    Ok(())
}

/// What every connection of one server shares.
struct Shared {
    app: Arc<App>,
    http: http1::Builder,
    timing: ConnectionTiming,
    /// One permit per request being answered (`max_requests`).
    requests: Arc<Semaphore>,
}

/// `max_connections`, lowered to what the open files limit allows (after
/// raising its soft value to the hard one, as `main` already does and Go's
/// runtime does for every Go exporter): the RDMA reader may keep half the
/// limit open (`roce_rdma::fs::default_max_open`), the connections get the
/// other half less [`RESERVED_FDS`].
fn connection_cap(configured: usize) -> usize {
    let configured = configured.clamp(1, MAX_CONNECTIONS_CAP);
    let Some(limit) = crate::host::raise_open_file_limit() else {
        return configured;
    };
    let allowed = (limit / 2).saturating_sub(RESERVED_FDS).max(16);
    let allowed = usize::try_from(allowed).unwrap_or(usize::MAX);
    if allowed < configured {
        tracing::warn!(
            max_connections = configured,
            open_files_limit = limit,
            serving = allowed,
            "web.max_connections is above what the open files limit allows; raise LimitNOFILE"
        );
        return allowed;
    }
    configured
}

/// Where a connection is: what decides which one is closed first when
/// there are too many.
const WAITING: u8 = 0;
const ANSWERING: u8 = 1;
const WRITING: u8 = 2;

/// One open connection as the table sees it.
struct ConnState {
    /// [`WAITING`] (for request headers, a TLS handshake, or the next
    /// keep-alive request), [`ANSWERING`] (the request is being answered),
    /// [`WRITING`] (the answer is being written and not all taken yet).
    phase: AtomicU8,
    /// When the current phase began, in nanoseconds since the table's epoch.
    since: AtomicU64,
    /// Whether a request has been received whole on this connection.
    served: AtomicBool,
    epoch: Instant,
    /// Told when the table closes this connection for another.
    evict: Notify,
}

impl ConnState {
    fn new(epoch: Instant) -> Self {
        let state = ConnState {
            phase: AtomicU8::new(WAITING),
            since: AtomicU64::new(0),
            served: AtomicBool::new(false),
            epoch,
            evict: Notify::new(),
        };
        state.enter(WAITING);
        state
    }

    fn enter(&self, phase: u8) {
        if phase == ANSWERING {
            self.served.store(true, Ordering::Relaxed);
        }
        let nanos = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.since.store(nanos, Ordering::Relaxed);
        self.phase.store(phase, Ordering::Release);
    }

    /// The answer has been handed to the socket whole: waiting again.
    fn flushed(&self) {
        if self.phase.load(Ordering::Acquire) == WRITING {
            self.enter(WAITING);
        }
    }
}

/// The open connections, for the connection cap and the shutdown drain.
struct ConnTable {
    cap: usize,
    epoch: Instant,
    open: Mutex<TableInner>,
    /// Notified when the last connection closes.
    empty: Notify,
}

#[derive(Default)]
struct TableInner {
    next_id: u64,
    conns: HashMap<u64, Arc<ConnState>>,
    /// Connections closed for others since the last log line about it.
    shed: u64,
    last_report: Option<Instant>,
}

/// Removes its connection from the table when the connection's task ends.
struct Registration {
    table: Arc<ConnTable>,
    id: u64,
    state: Arc<ConnState>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Ok(mut open) = self.table.open.lock() else {
            return;
        };
        open.conns.remove(&self.id);
        if open.conns.is_empty() {
            self.table.empty.notify_waiters();
        }
    }
}

/// How often, at most, shed connections are reported.
const SHED_REPORT_EVERY: Duration = Duration::from_secs(60);

impl ConnTable {
    fn new(cap: usize) -> Self {
        ConnTable {
            cap: cap.max(1),
            epoch: Instant::now(),
            open: Mutex::new(TableInner::default()),
            empty: Notify::new(),
        }
    }

    /// Closes the connection that is first to go when the table is full;
    /// false when every open connection has a request being answered.
    fn shed_one(&self) -> bool {
        let Ok(mut open) = self.open.lock() else {
            return false;
        };
        self.shed(&mut open)
    }

    fn shed(&self, open: &mut TableInner) -> bool {
        let victim = open
            .conns
            .iter()
            .filter_map(|(id, c)| {
                // Never a whole request first; then whichever of the idle
                // and the writing has been so longest.
                let rank = match c.phase.load(Ordering::Acquire) {
                    WAITING if !c.served.load(Ordering::Relaxed) => 0,
                    WAITING | WRITING => 1,
                    _ => return None,
                };
                Some(((rank, c.since.load(Ordering::Relaxed)), *id))
            })
            .min()
            .map(|(_, id)| id);
        let Some(victim) = victim.and_then(|id| open.conns.remove(&id)) else {
            return false;
        };
        victim.evict.notify_one();
        open.shed += 1;
        let due = open
            .last_report
            .is_none_or(|t| t.elapsed() >= SHED_REPORT_EVERY);
        if due {
            tracing::warn!(
                max_connections = self.cap,
                closed = open.shed,
                "too many open connections: closing those that have waited longest for a request"
            );
            open.shed = 0;
            open.last_report = Some(Instant::now());
        }
        true
    }

    /// Adds a new connection, closing another one first when the table is
    /// full; `None` (the new one is refused) when every open connection has
    /// a request being answered.
    fn admit(self: &Arc<Self>) -> Option<Registration> {
        let mut open = self.open.lock().ok()?;
        if open.conns.len() >= self.cap && !self.shed(&mut open) {
            return None;
        }
        let id = open.next_id;
        open.next_id += 1;
        let state = Arc::new(ConnState::new(self.epoch));
        open.conns.insert(id, state.clone());
        Some(Registration {
            table: self.clone(),
            id,
            state,
        })
    }

    /// Resolves once no connection is open.
    async fn drained(&self) {
        loop {
            let notified = self.empty.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.open.lock().map(|o| o.conns.is_empty()).unwrap_or(true) {
                return;
            }
            notified.await;
        }
    }
}

fn http1_builder(limits: &WebLimits) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_request_bytes)
        .max_buf_size(limits.max_request_bytes.max(HYPER_MIN_BUF_SIZE))
        .keep_alive(true);
    b
}

#[derive(Debug, Clone, Copy)]
struct ConnectionTiming {
    max_age: Duration,
    grace: Duration,
    /// Bound on the TLS handshake.
    handshake: Duration,
    write_stall: Duration,
}

impl ConnectionTiming {
    fn of(options: &ServeOptions) -> Self {
        ConnectionTiming {
            max_age: options.max_connection_age,
            grace: options.close_grace,
            handshake: options.limits.header_read_timeout,
            write_stall: options.limits.write_stall_timeout,
        }
    }
}

/// A connection's byte stream whose writes fail with `TimedOut` once they
/// have made no progress for `timeout`. hyper has a timer for reading
/// request headers but none for writing: a client that stops reading an
/// answer larger than the socket buffers leaves the write pending, and the
/// connection open, until the connection age runs out. The deadline
/// starts when a write, flush or shutdown first returns `Pending` and is
/// dropped as soon as one completes.
///
/// It also tells the connection table when an answer has been flushed
/// whole, which ends the connection's writing phase.
struct WriteStallGuard<I> {
    io: I,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    state: Arc<ConnState>,
}

impl<I> WriteStallGuard<I> {
    fn new(io: I, timeout: Duration, state: Arc<ConnState>) -> Self {
        WriteStallGuard {
            io,
            timeout,
            stalled: None,
            state,
        }
    }

    /// After the stream answered `Pending`: `Pending` again (and woken at
    /// the deadline) until the stall has lasted `timeout`, then the error.
    fn stall<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let deadline = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no byte of the response for write_stall_timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        polled: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => self.stall(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteStallGuard<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteStallGuard<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.progress(polled, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.progress(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // hyper flushes the socket once its buffer is written out whole.
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        if matches!(polled, Poll::Ready(Ok(()))) {
            this.state.flushed();
        }
        this.progress(polled, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.progress(polled, cx)
    }
}

/// Resolves once shutdown has begun (or the server is gone).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    table: Arc<ConnTable>,
    web: Option<Arc<WebConfigWatcher>>,
    mut stop: watch::Receiver<bool>,
) {
    // Said once per episode of resource exhaustion, not per failed accept.
    let mut exhausted = false;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stopping(&mut stop) => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                exhausted = false;
                let Some(registration) = table.admit() else {
                    // Every connection has a request being answered: the
                    // newest waits for none of them.
                    tracing::debug!(%peer, "connection refused: every open connection is busy");
                    drop(stream);
                    continue;
                };
                // Responses are written whole; Nagle would only delay them.
                let _ = stream.set_nodelay(true);
                let web = match &web {
                    Some(w) => w.current(),
                    None => Arc::new(WebConfig::plain()),
                };
                tokio::spawn(serve_connection(
                    stream,
                    peer,
                    shared.clone(),
                    web,
                    stop.clone(),
                    registration,
                ));
            }
            Err(e) if is_connection_error(&e) => {
                tracing::debug!(error = %e, "accept failed for one connection");
            }
            Err(e) => {
                if !exhausted {
                    tracing::warn!(error = %e, "cannot accept connections; retrying");
                    exhausted = true;
                }
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    // Out of descriptors all the same (other files open):
                    // one waiting connection makes room for the next.
                    table.shed_one();
                }
                tokio::select! {
                    _ = stopping(&mut stop) => return,
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
}

/// Errors that concern one connection only (the peer went away before we
/// accepted it).
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    web: Arc<WebConfig>,
    stop: watch::Receiver<bool>,
    registration: Registration,
) {
    let state = registration.state.clone();
    let Some(tls) = web.tls().cloned() else {
        return drive_connection(stream, peer, shared, web, stop, state).await;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let handshake = tokio::time::timeout(shared.timing.handshake, acceptor.accept(stream));
    let handshake = tokio::select! {
        done = handshake => done,
        _ = state.evict.notified() => {
            tracing::debug!(%peer, "closed during its TLS handshake for a newer connection");
            return;
        }
    };
    match handshake {
        Ok(Ok(tls_stream)) => drive_connection(tls_stream, peer, shared, web, stop, state).await,
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
    drop(registration);
}

/// Serves HTTP/1.1 on one connection, plain or TLS, keeping `state` (its
/// entry in the connection table) up to date, until the peer closes it,
/// the server stops, its age runs out or the table closes it for another.
async fn drive_connection<I>(
    io: I,
    peer: SocketAddr,
    shared: Arc<Shared>,
    web: Arc<WebConfig>,
    mut stop: watch::Receiver<bool>,
    state: Arc<ConnState>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let timing = shared.timing;
    let service = {
        let shared = shared.clone();
        let state = state.clone();
        service_fn(move |req: Request<Incoming>| {
            let shared = shared.clone();
            let web = web.clone();
            let state = state.clone();
            async move {
                state.enter(ANSWERING);
                let mut response = answer(&shared, &web, req).await;
                let h = response.headers_mut();
                for (name, value) in web.headers() {
                    h.insert(name.clone(), value.clone());
                }
                state.enter(WRITING);
                Ok::<_, Infallible>(response)
            }
        })
    };
    let io = WriteStallGuard::new(io, timing.write_stall, state.clone());
    let conn = shared.http.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let finished = tokio::select! {
        result = conn.as_mut() => Some(result),
        _ = stopping(&mut stop) => None,
        _ = tokio::time::sleep(timing.max_age) => None,
        _ = state.evict.notified() => {
            tracing::debug!(%peer, "closed for a newer connection (too many open)");
            return;
        }
    };
    let result = match finished {
        Some(result) => result,
        None => {
            // Finish the request in progress (if any), then close.
            conn.as_mut().graceful_shutdown();
            let graceful = tokio::time::timeout(timing.grace, conn.as_mut());
            tokio::select! {
                done = graceful => match done {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::debug!(%peer, "connection did not finish in time; closing it");
                        Ok(())
                    }
                },
                _ = state.evict.notified() => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// One request's answer: authentication (cached, or on the bcrypt
/// thread), then, within `max_requests`, the route's response.
async fn answer(shared: &Shared, web: &WebConfig, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let has_body = !req.body().is_end_stream();
    match web.check(req.headers()).await {
        AuthOutcome::Allowed => {}
        AuthOutcome::Denied => return unauthorized(has_body),
        AuthOutcome::Busy => {
            return busy(
                has_body,
                "too many credential checks in progress; retry later\n",
            )
        }
    }
    // Held while the response is built; hyper writes it afterwards.
    let Ok(_permit) = shared.requests.clone().try_acquire_owned() else {
        return busy(has_body, "too many requests in progress; retry later\n");
    };
    respond(
        &shared.app,
        req.method(),
        req.uri().path(),
        req.headers(),
        has_body,
    )
}

/// Serves HTTP/1.1 on one already open byte stream, exactly as the accept
/// loop serves each plain connection it accepts (same hyper settings,
/// limits, routes, negotiation, auth and headers of `web`), until the peer
/// closes it or the connection age runs out. For the fuzzer, which feeds
/// request bytes over an in-memory pipe; not part of the supported API.
#[doc(hidden)]
pub async fn serve_stream<I>(io: I, app: Arc<App>, options: &ServeOptions, web: Arc<WebConfig>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared {
        app,
        http: http1_builder(&options.limits),
        timing: ConnectionTiming::of(options),
        requests: Arc::new(Semaphore::new(
            options.limits.max_requests.clamp(1, MAX_CONNECTIONS_CAP),
        )),
    });
    // Kept until the connection ends: a dropped sender reads as shutdown.
    let (stop_tx, stop_rx) = watch::channel(false);
    let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let state = Arc::new(ConnState::new(Instant::now()));
    drive_connection(io, peer, shared, web, stop_rx, state).await;
    drop(stop_tx);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Metrics,
    Health,
    Landing,
    Findings,
    /// This node's peer-probe responders (`roce_probe::peer::Endpoints`).
    PeerEndpoints,
    /// A section of docs/runbook.md (`crate::runbook`).
    Runbook(&'static str),
}

/// The whole routing table. Pure: the request's parts in, a response out.
fn respond(
    app: &App,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    has_body: bool,
) -> Response<Full<Bytes>> {
    let mut response = route_request(app, method, path, headers, has_body);
    if has_body {
        // The body was not read; the connection cannot carry another request.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn route_request(
    app: &App,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    has_body: bool,
) -> Response<Full<Bytes>> {
    let route = match path {
        "/metrics" => Route::Metrics,
        "/healthz" => Route::Health,
        "/" => Route::Landing,
        "/findings" => Route::Findings,
        "/peer-probe/endpoints" => Route::PeerEndpoints,
        p if p.starts_with("/runbook") => match crate::runbook::page(p) {
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
            (
                StatusCode::OK,
                format.content_type(),
                app.metrics(format, gzip),
                Some(gzip),
            )
        }
        Route::Health => {
            let (healthy, text) = app.health();
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
            Bytes::from(app.landing_page()),
            None,
        ),
        Route::Findings => (
            StatusCode::OK,
            APPLICATION_JSON,
            Bytes::from(app.findings_json()),
            None,
        ),
        Route::PeerEndpoints => match app.peer_endpoints_json() {
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
fn unauthorized(has_body: bool) -> Response<Full<Bytes>> {
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
fn busy(has_body: bool, text: &'static str) -> Response<Full<Bytes>> {
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
fn negotiate_format(headers: &HeaderMap) -> Format {
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
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// Whether `Accept-Encoding` allows gzip (`gzip`, `x-gzip` or `*` with a
/// q-value above zero, unless gzip itself is refused with `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One connection of a server whose `max_requests` permits are all
    /// held by the test: what a request gets at the limit, and after it.
    #[tokio::test]
    async fn over_max_requests_a_request_gets_503_at_once() {
        let app = Arc::new(App::new(
            crate::exposition::BuildInfo::current(Duration::from_secs(5)),
            Arc::new(crate::snapshot::Snapshot::default()),
        ));
        let options = ServeOptions::new(WebLimits {
            max_requests: 1,
            ..WebLimits::default()
        });
        let shared = Arc::new(Shared {
            app,
            http: http1_builder(&options.limits),
            timing: ConnectionTiming::of(&options),
            requests: Arc::new(Semaphore::new(1)),
        });
        let busy = shared.requests.clone().try_acquire_owned().unwrap();
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let state = Arc::new(ConnState::new(Instant::now()));
        let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let conn = tokio::spawn(drive_connection(
            server,
            peer,
            shared.clone(),
            Arc::new(WebConfig::plain()),
            stop_rx,
            state,
        ));
        let ask = async |client: &mut tokio::io::DuplexStream| {
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                .await
                .unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed before answering");
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|v| v.parse().ok())
                        .unwrap();
                    if body.len() >= length {
                        return head.to_string();
                    }
                }
            }
        };
        let head = ask(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains("retry-after: 1"), "{head}");
        drop(busy);
        let head = ask(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        drop(client);
        conn.await.unwrap();
    }

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

    fn format_for(accept: &str) -> Format {
        negotiate_format(&headers(&[("accept", accept)]))
    }

    #[test]
    fn prometheus_server_accept_headers_get_openmetrics() {
        // Prometheus 2.x default scrape Accept header.
        assert_eq!(
            format_for("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            Format::OpenMetrics
        );
        // Prometheus 3.x, with escaping parameters.
        assert_eq!(
            format_for("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"),
            Format::OpenMetrics
        );
        assert_eq!(
            format_for("application/openmetrics-text"),
            Format::OpenMetrics
        );
    }

    #[test]
    fn text_is_the_default_and_q_values_decide() {
        assert_eq!(negotiate_format(&HeaderMap::new()), Format::Text);
        assert_eq!(format_for("*/*"), Format::Text);
        assert_eq!(format_for("application/json"), Format::Text);
        assert_eq!(format_for("text/plain;version=0.0.4"), Format::Text);
        assert_eq!(
            format_for("text/plain;version=0.0.4, application/openmetrics-text;q=0.5"),
            Format::Text
        );
        assert_eq!(format_for("application/openmetrics-text;q=0"), Format::Text);
        assert_eq!(
            format_for("application/openmetrics-text;version=2.0.0"),
            Format::Text
        );
        assert_eq!(
            format_for("application/openmetrics-text;q=bogus"),
            Format::Text
        );
        assert_eq!(
            format_for("Application/OpenMetrics-Text; Version=\"1.0.0\"; Q=0.9, text/plain;q=0.8"),
            Format::OpenMetrics
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

    #[test]
    fn listen_addresses() {
        use ListenSpec::*;
        let ok = |s: &str| parse_listen_address(s).unwrap();
        assert_eq!(ok(":9879"), AllInterfaces(9879));
        assert_eq!(ok(":0"), AllInterfaces(0));
        assert_eq!(ok("0.0.0.0:9879"), Socket("0.0.0.0:9879".parse().unwrap()));
        assert_eq!(ok("127.0.0.1:1"), Socket("127.0.0.1:1".parse().unwrap()));
        assert_eq!(ok("[::1]:9879"), Socket("[::1]:9879".parse().unwrap()));
        assert_eq!(ok("[::]:9879"), Socket("[::]:9879".parse().unwrap()));
        assert_eq!(ok("localhost:9879"), Host("localhost".into(), 9879));
        assert_eq!(
            ok("node-1.example.org:80"),
            Host("node-1.example.org".into(), 80)
        );
        for bad in [
            "",
            "9879",
            ":",
            ":99999",
            ":-1",
            ":http",
            "::1:9879",
            "[::1]",
            "[::1",
            "[::1]:",
            "[localhost]:9879",
            "local host:9879",
            "a..b:9879",
            "127.0.0.1:9879 ",
        ] {
            assert!(
                matches!(parse_listen_address(bad), Err(ServerError::Address(..))),
                "{bad:?} should be refused"
            );
        }
    }
}
