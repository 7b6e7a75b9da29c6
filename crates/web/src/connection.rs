//! One connection: the connection table that decides which connection is
//! closed first when there are too many, the TLS handshake, hyper's HTTP/1.1
//! with the request limits, the write-stall guard, and the answer to each
//! request (authentication, then the route within `max_requests`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify, Semaphore};

use crate::routes::{busy, respond, unauthorized, Content, DEFAULT_TELEMETRY_PATH};
use crate::webconfig::{AuthOutcome, WebConfig, WebConfigWatcher};
use crate::WebLimits;
/// hyper refuses a read buffer smaller than this (`MINIMUM_MAX_BUFFER_SIZE`
/// in hyper's `proto/h1/io.rs`) and panics when asked for less.
const HYPER_MIN_BUF_SIZE: usize = 8192;
/// Above this the semaphore arithmetic would overflow (`max_requests`); no
/// host serves that many Prometheus scrapers.
pub(crate) const MAX_CONNECTIONS_CAP: usize = 1 << 20;

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
    /// `--web.telemetry-path`: where the exposition is served
    /// ([`DEFAULT_TELEMETRY_PATH`] unless given).
    pub telemetry_path: Arc<str>,
}

impl ServeOptions {
    pub fn new(limits: WebLimits) -> Self {
        ServeOptions {
            limits,
            max_connection_age: Duration::from_secs(60),
            close_grace: Duration::from_secs(5),
            web_config: None,
            telemetry_path: Arc::from(DEFAULT_TELEMETRY_PATH),
        }
    }
}

/// What every connection of one server shares.
pub(crate) struct Shared {
    content: Arc<dyn Content>,
    http: http1::Builder,
    timing: ConnectionTiming,
    /// One permit per request being answered (`max_requests`).
    requests: Arc<Semaphore>,
    telemetry_path: Arc<str>,
}

impl Shared {
    pub(crate) fn new(content: Arc<dyn Content>, options: &ServeOptions) -> Self {
        Shared {
            content,
            http: http1_builder(&options.limits),
            timing: ConnectionTiming::of(options),
            requests: Arc::new(Semaphore::new(
                options.limits.max_requests.clamp(1, MAX_CONNECTIONS_CAP),
            )),
            telemetry_path: options.telemetry_path.clone(),
        }
    }
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
pub(crate) struct ConnTable {
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
    /// Most connections open at once since memory was last given back.
    peak: usize,
    last_report: Option<Instant>,
}

/// Removes its connection from the table when the connection's task ends.
pub(crate) struct Registration {
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
        // The end of a burst: its buffers are free, give them back (outside
        // the lock).
        let trim = crate::trim::burst_over(open.peak, open.conns.len());
        if trim {
            open.peak = open.conns.len();
        }
        drop(open);
        if trim {
            crate::trim::release_free_memory();
        }
    }
}

/// How often, at most, shed connections are reported.
const SHED_REPORT_EVERY: Duration = Duration::from_secs(60);

impl ConnTable {
    pub(crate) fn new(cap: usize) -> Self {
        ConnTable {
            cap: cap.max(1),
            epoch: Instant::now(),
            open: Mutex::new(TableInner::default()),
            empty: Notify::new(),
        }
    }

    /// Closes the connection that is first to go when the table is full;
    /// false when every open connection has a request being answered.
    pub(crate) fn shed_one(&self) -> bool {
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
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Registration> {
        let mut open = self.open.lock().ok()?;
        if open.conns.len() >= self.cap && !self.shed(&mut open) {
            return None;
        }
        let id = open.next_id;
        open.next_id += 1;
        let state = Arc::new(ConnState::new(self.epoch));
        open.conns.insert(id, state.clone());
        open.peak = open.peak.max(open.conns.len());
        Some(Registration {
            table: self.clone(),
            id,
            state,
        })
    }

    /// Resolves once no connection is open.
    pub(crate) async fn drained(&self) {
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
pub(crate) async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

pub(crate) async fn serve_connection(
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
                let mut response = answer(&shared, &web, peer.ip(), req).await;
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
async fn answer(
    shared: &Shared,
    web: &WebConfig,
    peer: std::net::IpAddr,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let has_body = !req.body().is_end_stream();
    match web.check(req.headers(), peer).await {
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
    if req.method() == hyper::Method::POST {
        let caller = crate::actions::Caller {
            tls: web.tls().is_some(),
            authenticated: web.authenticates(),
        };
        let (path, query) = (req.uri().path(), req.uri().query().unwrap_or(""));
        let action =
            crate::actions::respond_action(&*shared.content, path, query, caller, has_body);
        if let Some(response) = action.await {
            return response;
        }
    }
    respond(
        &*shared.content,
        &shared.telemetry_path,
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
pub async fn serve_stream<I, C>(io: I, content: Arc<C>, options: &ServeOptions, web: Arc<WebConfig>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    C: Content,
{
    let shared = Arc::new(Shared::new(content, options));
    // Kept until the connection ends: a dropped sender reads as shutdown.
    let (stop_tx, stop_rx) = watch::channel(false);
    let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let state = Arc::new(ConnState::new(Instant::now()));
    drive_connection(io, peer, shared, web, stop_rx, state).await;
    drop(stop_tx);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One connection of a server whose `max_requests` permits are all
    /// held by the test: what a request gets at the limit, and after it.
    #[tokio::test]
    async fn over_max_requests_a_request_gets_503_at_once() {
        let options = ServeOptions::new(WebLimits {
            max_requests: 1,
            ..WebLimits::default()
        });
        let shared = Arc::new(Shared::new(Arc::new(crate::routes::tests::Fixed), &options));
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
}
