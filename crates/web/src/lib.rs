//! roce_exporter's HTTP server: `/metrics`, `/healthz` and `/` over HTTP/1.1
//! (hyper 1 on tokio), with its own accept loop so that every limit is
//! enforced here rather than left to a framework default. It only serves
//! what the exporter hands it through [`Content`]; it never touches the host.
//!
//! Modules: [`listen`] (addresses, accept loop, drain), [`connection`] (the
//! connection table, TLS handshake, hyper, the answer), [`routes`] (paths
//! and [`Content`]), [`negotiation`] (format and gzip), [`webconfig`]
//! (`--web.config.file`: TLS, basic auth, headers) and its `tls`
//! section.
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
//! - basic-auth checks run on one bcrypt thread with cached outcomes and a
//!   bounded queue served fairly by source, a source without failed
//!   checks first (see [`webconfig::auth`]); a check that finds its
//!   source's share of the queue, or the queue, full is answered `503`;
//! - when a burst of connections (64 or more) has closed down to an eighth
//!   of its peak, the allocator's free memory is given back to the kernel
//!   (glibc `malloc_trim`);
//! - on shutdown, accepting stops, connections finish their current request
//!   and close, and whatever is still open after `close_grace` is cut.
//!
//! With [`ServeOptions::web_config`] (`--web.config.file`): TLS (the
//! handshake must finish within `header_read_timeout`), basic auth on every
//! path and extra response headers, from the configuration in force when
//! the connection was accepted (see [`webconfig`]).

use std::time::Duration;

pub mod actions;
pub mod connection;
pub mod listen;
pub mod negotiation;
pub mod routes;
mod tls;
mod trim;
pub mod webconfig;

pub use actions::{Action, ActionAnswer, Answer, Caller, ServerRefusal};
pub use connection::{serve_stream, ServeOptions};
pub use listen::{
    adopt, bind, raise_open_file_limit, serve, serve_with, systemd_listeners, ServerError,
    MAX_SYSTEMD_SOCKETS,
};
pub use negotiation::ScrapeFormat;
pub use routes::{valid_telemetry_path, Content, DEFAULT_TELEMETRY_PATH};

/// The server's limits (`web:` in the configuration file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebLimits {
    /// Most requests answered at once; one more is answered 503 at once.
    pub max_requests: usize,
    /// Most connections open at once; at the cap a new connection closes
    /// the open one that has waited longest for a request.
    pub max_connections: usize,
    /// A client must send its request headers within this time.
    pub header_read_timeout: Duration,
    /// Largest request (headers) accepted.
    pub max_request_bytes: usize,
    /// Longest a response may go without the client taking a byte of it
    /// (its receive window and the socket buffers full); then the
    /// connection is cut. A slow but reading client is not affected.
    pub write_stall_timeout: Duration,
}

impl Default for WebLimits {
    fn default() -> Self {
        WebLimits {
            max_requests: 40,
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            max_request_bytes: 16 * 1024,
            write_stall_timeout: Duration::from_secs(10),
        }
    }
}
