//! Requests that change state: `POST` to a path the exporter claims through
//! [`Content::action`]. The server knows nothing of what an action does;
//! it says who is asking ([`Caller`]: whether the connection is TLS and
//! whether the server authenticated the client) and waits, without holding
//! a thread, for an answer that the exporter may compute elsewhere
//! ([`ActionAnswer::Pending`]), at most [`ACTION_WAIT`].
//!
//! Parameters travel in the query string; a request with a body is refused
//! (`413`) like any other, so nothing unbounded is read, and so is a query
//! over [`MAX_ACTION_QUERY`] (`414`). The action still sees such a request,
//! marked [`Action::refused`], so that it counts the refusal; it must start
//! nothing for it, and its answer is not awaited.

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
    /// bytes (empty when the server refused it as too long); hostile:
    /// parse with bounds.
    pub query: &'a str,
    pub caller: Caller,
    /// The server refuses this request whatever the action answers: count
    /// it, start nothing.
    pub refused: Option<ServerRefusal>,
}

/// Why the server refuses an action's request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRefusal {
    /// The request carries a body (`413`): it is not read.
    Body,
    /// The query is longer than [`MAX_ACTION_QUERY`] (`414`).
    QueryTooLong,
}

impl ServerRefusal {
    pub fn status(self) -> u16 {
        match self {
            ServerRefusal::Body => 413,
            ServerRefusal::QueryTooLong => 414,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            ServerRefusal::Body => "requests with a body are not accepted",
            ServerRefusal::QueryTooLong => "query string too long",
        }
    }
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
    let refused = if query.len() > MAX_ACTION_QUERY {
        Some(ServerRefusal::QueryTooLong)
    } else if has_body {
        Some(ServerRefusal::Body)
    } else {
        None
    };
    let action = Action {
        path,
        query: if refused == Some(ServerRefusal::QueryTooLong) {
            ""
        } else {
            query
        },
        caller,
        refused,
    };
    // Asked even when refused: the action counts the refusal (and says
    // whether it claims the path); it starts nothing for it.
    let answer = content.action(&action)?;
    if let Some(r) = refused {
        drop(answer);
        let status = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::BAD_REQUEST);
        let body = format!(
            "{{\"refused\":\"malformed\",\"message\":\"{}\"}}\n",
            r.message()
        );
        return Some(json(status, body, has_body));
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
