//! Reading an answer: the response head (status line and the headers this
//! client uses), its framing (`Content-Length`, `chunked`) and encoding
//! (`gzip`), each bounded and checked before the body is handed on.

use std::io::Read;

use super::{fetch_error, FetchError, FetchReason, Request, MAX_HEAD_BYTES};
use crate::error::FleetError;

/// The parts of a response head this client uses.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Head {
    status: u16,
    len: usize,
    content_length: Option<usize>,
    chunked: bool,
    gzip: bool,
    location: Option<String>,
}

/// The head once it is complete; `Err` when it is not HTTP/1.x or too long.
fn head(raw: &[u8]) -> Option<Result<Head, FleetError>> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        if raw.len() > MAX_HEAD_BYTES {
            return Some(Err(FleetError::HeadUnterminated {
                max: MAX_HEAD_BYTES,
            }));
        }
        return None;
    };
    if end > MAX_HEAD_BYTES {
        return Some(Err(FleetError::HeadTooLong {
            max: MAX_HEAD_BYTES,
        }));
    }
    let text = String::from_utf8_lossy(&raw[..end]);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let bad_status = || {
        Some(Err(FleetError::StatusLine {
            line: status_line.to_string(),
        }))
    };
    let status = match status_line.split_once(' ') {
        Some(("HTTP/1.1" | "HTTP/1.0", rest)) => {
            let code = rest.split(' ').next().unwrap_or("");
            match (code.len(), code.parse::<u16>()) {
                (3, Ok(c)) => c,
                _ => return bad_status(),
            }
        }
        _ => return bad_status(),
    };
    let mut h = Head {
        status,
        len: end + 4,
        content_length: None,
        chunked: false,
        gzip: false,
        location: None,
    };
    let refused = |header: &'static str, value: &str| {
        Some(Err(FleetError::Header {
            header,
            value: value.to_string(),
        }))
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => match value.parse::<usize>() {
                Ok(n) if h.content_length.is_none_or(|m| m == n) => h.content_length = Some(n),
                _ => return refused("content-length", value),
            },
            "transfer-encoding" => {
                let v = value.to_ascii_lowercase();
                if v == "chunked" {
                    h.chunked = true;
                } else {
                    return refused("transfer-encoding", value);
                }
            }
            "content-encoding" => {
                let v = value.to_ascii_lowercase();
                match v.as_str() {
                    "gzip" => h.gzip = true,
                    "identity" => {}
                    _ => return refused("content-encoding", value),
                }
            }
            "location" => h.location = Some(value.chars().take(128).collect()),
            _ => {}
        }
    }
    Some(Ok(h))
}

/// Whether the answer in `raw` is whole (so no more reads are needed).
pub(super) fn complete(raw: &[u8]) -> bool {
    match head(raw) {
        None => false,
        Some(Err(_)) => true,
        Some(Ok(h)) => {
            let body = raw.get(h.len..).unwrap_or(&[]);
            if h.status != 200 {
                return true;
            }
            if h.chunked {
                return !matches!(dechunk(body, usize::MAX), Err(Dechunk::Incomplete));
            }
            h.content_length.is_some_and(|n| body.len() >= n)
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Dechunk {
    Incomplete,
    Malformed(ChunkPart),
    TooLarge,
}

/// The part of a `chunked` body that is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkPart {
    /// No line end within 64 bytes.
    SizeLine,
    /// Not 1 to 16 hexadecimal digits.
    Size,
    /// Data not followed by `\r\n`.
    End,
}

impl std::fmt::Display for ChunkPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChunkPart::SizeLine => "chunk size line",
            ChunkPart::Size => "chunk size",
            ChunkPart::End => "chunk end",
        })
    }
}

/// Decodes a `chunked` body, at most `max` bytes of data.
fn dechunk(mut body: &[u8], max: usize) -> Result<Vec<u8>, Dechunk> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = body.windows(2).position(|w| w == b"\r\n") else {
            return Err(if body.len() > 64 {
                Dechunk::Malformed(ChunkPart::SizeLine)
            } else {
                Dechunk::Incomplete
            });
        };
        let line = &body[..eol];
        let size_text = line.split(|b| *b == b';').next().unwrap_or(&[]);
        let size_text = std::str::from_utf8(size_text)
            .map_err(|_| Dechunk::Malformed(ChunkPart::Size))?
            .trim();
        if size_text.is_empty() || size_text.len() > 16 {
            return Err(Dechunk::Malformed(ChunkPart::Size));
        }
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| Dechunk::Malformed(ChunkPart::Size))?;
        body = &body[eol + 2..];
        if size == 0 {
            // Trailers (ignored) end with an empty line.
            return if body.starts_with(b"\r\n") || body.windows(4).any(|w| w == b"\r\n\r\n") {
                Ok(out)
            } else {
                Err(Dechunk::Incomplete)
            };
        }
        if out.len().saturating_add(size) > max {
            return Err(Dechunk::TooLarge);
        }
        if body.len() < size.saturating_add(2) {
            return Err(Dechunk::Incomplete);
        }
        out.extend_from_slice(&body[..size]);
        if &body[size..size + 2] != b"\r\n" {
            return Err(Dechunk::Malformed(ChunkPart::End));
        }
        body = &body[size + 2..];
    }
}

/// The body of an answer read whole (`raw`: head and body), checked as
/// [`HttpClient::get`] checks it; and whether `raw` is complete. For the
/// fuzz target and tests.
pub fn parse_answer(raw: &[u8], request: &Request) -> (bool, Result<Vec<u8>, FetchError>) {
    (complete(raw), decode(raw, "peer", request))
}

/// The body of a whole answer, after its status (200 only), framing and
/// encoding were checked.
pub(super) fn decode(
    raw: &[u8],
    authority: &str,
    request: &Request,
) -> Result<Vec<u8>, FetchError> {
    match decode_status(raw, authority, request)? {
        (200, body) => Ok(body),
        (status, _) => Err(fetch_error(
            FetchReason::Status,
            format!("{authority}: HTTP {status} for {}", request.path),
        )),
    }
}

/// The status and body of a whole answer, after its framing and encoding
/// were checked; a redirect is an error (never followed).
pub(super) fn decode_status(
    raw: &[u8],
    authority: &str,
    request: &Request,
) -> Result<(u16, Vec<u8>), FetchError> {
    let parse = |m: String| fetch_error(FetchReason::Parse, format!("{authority}: {m}"));
    let h = match head(raw) {
        Some(Ok(h)) => h,
        Some(Err(m)) => {
            let reason = if raw.len() > MAX_HEAD_BYTES {
                FetchReason::TooLarge
            } else {
                FetchReason::Parse
            };
            return Err(fetch_error(reason, format!("{authority}: {m}")));
        }
        None => return Err(parse("no complete response head".into())),
    };
    if (300..400).contains(&h.status) {
        return Err(fetch_error(
            FetchReason::Redirect,
            format!(
                "{authority}: HTTP {} to {:?} for {}: redirects are not followed",
                h.status,
                h.location.as_deref().unwrap_or(""),
                request.path
            ),
        ));
    }
    let status = h.status;
    let body = raw.get(h.len..).unwrap_or(&[]);
    let too_large = || {
        fetch_error(
            FetchReason::TooLarge,
            format!("{authority}: body larger than {} bytes", request.max_body),
        )
    };
    // A compressed body is no larger than the bound either.
    let wire_max = request.max_body;
    let body = if h.chunked {
        match dechunk(body, wire_max) {
            Ok(b) => b,
            Err(Dechunk::TooLarge) => return Err(too_large()),
            Err(Dechunk::Incomplete) => return Err(parse("truncated chunked body".into())),
            Err(Dechunk::Malformed(what)) => return Err(parse(format!("malformed {what}"))),
        }
    } else if let Some(n) = h.content_length {
        if n > wire_max {
            return Err(too_large());
        }
        match body.get(..n) {
            Some(b) => b.to_vec(),
            None => {
                return Err(parse(format!(
                    "truncated body: {} of {n} bytes",
                    body.len()
                )))
            }
        }
    } else {
        if body.len() > wire_max {
            return Err(too_large());
        }
        body.to_vec()
    };
    if !h.gzip {
        return Ok((status, body));
    }
    if !request.gzip {
        return Err(parse("a gzip body that was not asked for".into()));
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body.as_slice())
        .take(request.max_body as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| parse(format!("gzip: {e}")))?;
    if out.len() > request.max_body {
        return Err(too_large());
    }
    Ok((status, out))
}
