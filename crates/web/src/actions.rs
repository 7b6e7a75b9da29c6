//! Requests that change state: `POST` to a path the exporter claims through
//! [`Content::action`]. The server knows nothing of what an action does;
//! it says who is asking ([`Caller`]: whether the connection is TLS and
//! whether the server authenticated the client) and waits, without holding
//! a thread, for an answer that the exporter may compute elsewhere
//! ([`ActionAnswer::Pending`]), at most [`ACTION_WAIT`].
//!
//! Parameters travel in the query string; a request with a body is refused
//! (`413`) like any other, so nothing unbounded is read.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use crate::routes::Content;

/// Longest the server waits for a pending answer; then `503`.
pub const ACTION_WAIT: Duration = Duration::from_secs(10);
/// Longest query string handed to [`Content::action`]; longer gets `414`.
pub const MAX_ACTION_QUERY: usize = 4096;

/// Who sent a request, as far as the server knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The connection is TLS.
    pub tls: bool,
    /// The server authenticated the client before the request reached the
    /// route: basic auth is configured (and the credentials passed), or a
    /// client certificate is required and was verified.
    pub authenticated: bool,
}

/// One state-changing request.
#[derive(Debug, Clone, Copy)]
pub struct Action<'a> {
    pub path: &'a str,
    /// The raw query string (without `?`), at most [`MAX_ACTION_QUERY`]
    /// bytes; hostile: parse with bounds.
    pub query: &'a str,
    pub caller: Caller,
}

/// An action's answer: a status and a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// Now, or later from another thread.
#[derive(Debug)]
pub enum ActionAnswer {
    Ready(Answer),
    /// Computed elsewhere; the server awaits it (a dropped sender is `503`).
    Pending(tokio::sync::oneshot::Receiver<Answer>),
}

/// The response to a `POST`, or `None` when no action claims the path (the
/// routes then answer as for any other method).
pub(crate) async fn respond_action(
    content: &dyn Content,
    path: &str,
    query: &str,
    caller: Caller,
    has_body: bool,
) -> Option<Response<Full<Bytes>>> {
    if query.len() > MAX_ACTION_QUERY {
        return Some(json(
            StatusCode::URI_TOO_LONG,
            "{\"refused\":\"malformed\",\"message\":\"query string too long\"}\n".into(),
            has_body,
        ));
    }
    let action = Action {
        path,
        query,
        caller,
    };
    let answer = content.action(&action)?;
    if has_body {
        return Some(json(
            StatusCode::PAYLOAD_TOO_LARGE,
            "{\"refused\":\"malformed\",\"message\":\"requests with a body are not accepted\"}\n"
                .into(),
            true,
        ));
    }
    let answer = match answer {
        ActionAnswer::Ready(a) => a,
        ActionAnswer::Pending(rx) => match tokio::time::timeout(ACTION_WAIT, rx).await {
            Ok(Ok(a)) => a,
            _ => Answer {
                status: 503,
                body: "{\"refused\":\"busy\",\"message\":\"no answer in time\"}\n".into(),
            },
        },
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Some(json(status, answer.body, has_body))
}

fn json(status: StatusCode, body: String, close: bool) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}
