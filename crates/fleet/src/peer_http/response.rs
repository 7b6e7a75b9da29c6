//! One GET over hyper's HTTP/1.1 client connection and what is taken of
//! its answer: the head (bounded by hyper: [`MAX_HEAD_BYTES`],
//! [`MAX_HEADERS`]), the status, framing and encoding checked here, the
//! body read within the caller's bound as it arrives and a `gzip` body
//! inflated within it again. The connection is the caller's: TCP, TLS, or
//! an answer held in memory ([`parse_answer`], for the fuzz target and
//! tests).

use std::io::Read;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Body;
use hyper::header::{self, HeaderMap, HeaderValue};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{fetch_error, FetchError, FetchReason, Request};
use crate::error::FleetError;

/// Bytes of a response head (status line and headers) at most.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Header fields of a response head at most (hyper's default, said here).
pub const MAX_HEADERS: usize = 100;
/// hyper's read buffer at most: the head and the body pass through it.
const MAX_READ_BUFFER: usize = 64 * 1024;
/// Characters of a refused redirect's `Location` kept for the message.
const MAX_LOCATION_CHARS: usize = 128;

/// One GET: where, what, and with which credentials.
pub(super) struct Exchange<'a> {
    /// `host:port`, the `Host` header and the messages' prefix.
    pub(super) authority: &'a str,
    /// Path and query (the URL's prefix included).
    pub(super) target: &'a str,
    /// The `Authorization` header value.
    pub(super) authorization: Option<&'a str>,
    pub(super) request: &'a Request<'a>,
    /// POST with an empty body (parameters in the query) in place of GET;
    /// then any status but a redirect is an answer.
    pub(super) post: bool,
}

impl Exchange<'_> {
    /// Sends the request over `io` and reads the answer: its status and
    /// body, after the checks of the module doc (a GET's status 200 only).
    /// Not bounded in time: the caller's deadline is.
    pub(super) async fn run<IO>(&self, io: IO) -> Result<(u16, Vec<u8>), FetchError>
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let authority = self.authority;
        let request = self.http_request()?;
        let read = Arc::new(AtomicUsize::new(0));
        let io = Counted {
            io,
            read: read.clone(),
        };
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .max_header_size(MAX_HEAD_BYTES)
            .max_headers(MAX_HEADERS)
            .max_buf_size(MAX_READ_BUFFER)
            .handshake::<_, Empty<Bytes>>(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| answer_error(authority, &e))?;
        // The connection is driven beside the request, on the caller's
        // runtime, and ends with it; its errors come back through the
        // answer.
        tokio::spawn(connection);
        let answer = sender.send_request(request).await.map_err(|e| {
            // hyper says a head over its bounds is a parse error; more
            // than the bound read before it is the head too long.
            if e.is_parse() && read.load(Ordering::SeqCst) > MAX_HEAD_BYTES {
                return fetch_error(
                    FetchReason::TooLarge,
                    format!(
                        "{authority}: {}",
                        FleetError::HeadTooLong {
                            max: MAX_HEAD_BYTES
                        }
                    ),
                );
            }
            answer_error(authority, &e)
        })?;
        let (head, body) = answer.into_parts();
        let path = self.request.path;
        if head.status.is_redirection() {
            let location = head
                .headers
                .get(header::LOCATION)
                .map(|v| {
                    String::from_utf8_lossy(v.as_bytes())
                        .chars()
                        .take(MAX_LOCATION_CHARS)
                        .collect::<String>()
                })
                .unwrap_or_default();
            return Err(fetch_error(
                FetchReason::Redirect,
                format!(
                    "{authority}: HTTP {} to {location:?} for {path}: redirects are not followed",
                    head.status.as_u16()
                ),
            ));
        }
        let status = head.status.as_u16();
        if !self.post && head.status != hyper::StatusCode::OK {
            return Err(fetch_error(
                FetchReason::Status,
                format!("{authority}: HTTP {} for {path}", head.status.as_u16()),
            ));
        }
        let gzip = gzip_encoded(&head.headers)
            .map_err(|e| fetch_error(FetchReason::Parse, format!("{authority}: {e}")))?;
        let max = self.request.max_body;
        let too_large = || {
            fetch_error(
                FetchReason::TooLarge,
                format!("{authority}: body larger than {max} bytes"),
            )
        };
        // A Content-Length over the bound is refused before its body; a
        // compressed body is no larger than the bound either.
        if body.size_hint().lower() > max as u64 {
            return Err(too_large());
        }
        let mut body = body;
        let mut taken = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| answer_error(authority, &e))?;
            if let Ok(data) = frame.into_data() {
                if taken.len().saturating_add(data.len()) > max {
                    return Err(too_large());
                }
                taken.extend_from_slice(&data);
            }
        }
        if !gzip {
            return Ok((status, taken));
        }
        if !self.request.gzip {
            return Err(fetch_error(
                FetchReason::Parse,
                format!("{authority}: a gzip body that was not asked for"),
            ));
        }
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(taken.as_slice())
            .take(max as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| fetch_error(FetchReason::Parse, format!("{authority}: gzip: {e}")))?;
        if out.len() > max {
            return Err(too_large());
        }
        Ok((status, out))
    }

    /// The GET (or empty POST) request: `Host`, `Accept`, `Accept-Encoding`
    /// when a gzip body is asked for, the credentials, `Connection: close`.
    fn http_request(&self) -> Result<hyper::Request<Empty<Bytes>>, FetchError> {
        let authority = self.authority;
        let refused = |what: &str| {
            fetch_error(
                FetchReason::Unsupported,
                format!("{authority}: {what} cannot be sent"),
            )
        };
        let mut builder = if self.post {
            hyper::Request::post(self.target).header(header::CONTENT_LENGTH, "0")
        } else {
            hyper::Request::get(self.target)
        };
        builder = builder
            .header(header::HOST, authority)
            .header(header::ACCEPT, self.request.accept)
            .header(header::USER_AGENT, "roce_exporter")
            .header(header::CONNECTION, "close");
        if self.request.gzip {
            builder = builder.header(header::ACCEPT_ENCODING, "gzip");
        }
        if let Some(a) = self.authorization {
            let mut value = HeaderValue::from_str(a).map_err(|_| refused("the credentials"))?;
            value.set_sensitive(true);
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder.body(Empty::new()).map_err(|_| {
            let method = if self.post { "POST" } else { "GET" };
            refused(&format!("{method} {:.64?}", self.target))
        })
    }
}

/// Whether the body is gzip-encoded; an error for a framing or encoding
/// this client does not take (`Transfer-Encoding` other than `chunked`,
/// which hyper decodes; `Content-Encoding` other than `gzip`, `identity`).
fn gzip_encoded(headers: &HeaderMap) -> Result<bool, FleetError> {
    let refused = |header: &'static str, value: &HeaderValue| FleetError::Header {
        header,
        value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
    };
    for v in headers.get_all(header::TRANSFER_ENCODING) {
        if !v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"chunked") {
            return Err(refused("transfer-encoding", v));
        }
    }
    let mut gzip = false;
    for v in headers.get_all(header::CONTENT_ENCODING) {
        let text = v.as_bytes().trim_ascii();
        if text.eq_ignore_ascii_case(b"gzip") {
            gzip = true;
        } else if !text.eq_ignore_ascii_case(b"identity") {
            return Err(refused("content-encoding", v));
        }
    }
    Ok(gzip)
}

/// A hyper error of the exchange, by what failed: a malformed or
/// truncated head or body is `parse`; a refused TLS record is `tls`; the
/// rest is the connection's.
fn answer_error(authority: &str, e: &hyper::Error) -> FetchError {
    let at = |reason| fetch_error(reason, format!("{authority}: {e}"));
    if e.is_parse() || e.is_parse_status() || e.is_incomplete_message() {
        return at(FetchReason::Parse);
    }
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    let Some(io) = io else {
        return at(FetchReason::Connect);
    };
    if io
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
    {
        return at(FetchReason::Tls);
    }
    match io.kind() {
        std::io::ErrorKind::TimedOut => at(FetchReason::Timeout),
        // The end of the connection within the body, a malformed chunk
        // or trailer, or a trailer section over its bound.
        std::io::ErrorKind::UnexpectedEof
        | std::io::ErrorKind::InvalidData
        | std::io::ErrorKind::InvalidInput => at(FetchReason::Parse),
        _ => at(FetchReason::Connect),
    }
}

/// A connection whose bytes read are counted.
struct Counted<IO> {
    io: IO,
    read: Arc<AtomicUsize>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        self.read
            .fetch_add(buf.filled().len() - before, Ordering::SeqCst);
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// An answer held in memory as a connection: as a server, it answers once
/// the request was written (taken and dropped); reads then give `raw`,
/// then the end of the connection.
struct Recorded {
    raw: Bytes,
    asked: bool,
    /// The read waiting for the request.
    reader: Option<std::task::Waker>,
    /// Whether a read found the end (the answer needed it to be whole).
    reached_end: Arc<AtomicBool>,
}

impl AsyncRead for Recorded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.asked {
            self.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = self.raw.len().min(buf.remaining());
        if n == 0 && buf.remaining() > 0 {
            self.reached_end.store(true, Ordering::SeqCst);
        }
        let now = self.raw.split_to(n);
        buf.put_slice(&now);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Recorded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.asked = true;
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The body of an answer read whole (`raw`: head and body, then the end
/// of the connection), checked as [`super::HttpClient::get`] checks it;
/// and whether the answer was whole by its own framing (a length, the
/// last chunk, a refusal), without the end of the connection. For the
/// fuzz target and tests.
pub fn parse_answer(raw: &[u8], request: &Request) -> (bool, Result<Vec<u8>, FetchError>) {
    let reached_end = Arc::new(AtomicBool::new(false));
    let io = Recorded {
        raw: Bytes::copy_from_slice(raw),
        asked: false,
        reader: None,
        reached_end: reached_end.clone(),
    };
    let exchange = Exchange {
        authority: "peer",
        target: request.path,
        authorization: None,
        request,
        post: false,
    };
    let result = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| fetch_error(FetchReason::Connect, format!("peer: {e}")))
        .and_then(|runtime| runtime.block_on(exchange.run(io)))
        .map(|(_, body)| body);
    let whole = !reached_end.load(Ordering::SeqCst);
    (whole, result)
}
