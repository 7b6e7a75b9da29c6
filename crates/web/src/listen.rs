//! Listening: parsing and binding `--web.listen-address`, the accept loop,
//! the connection cap the open files limit allows, and the shutdown drain.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::connection::{
    serve_connection, stopping, ConnTable, ServeOptions, Shared, MAX_CONNECTIONS_CAP,
};
use crate::routes::Content;
use crate::webconfig::{WebConfig, WebConfigWatcher};
use crate::WebLimits;

/// Kernel listen backlog: connections not accepted yet (the accept loop
/// takes them as fast as it can).
const LISTEN_BACKLOG: i32 = 1024;
/// File descriptors kept free of connections for everything else the
/// exporter opens (sysfs, procfs, netlink, the probes).
const RESERVED_FDS: u64 = 256;
/// Pause after an accept error that is not about one connection (out of file
/// descriptors, out of memory), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Slack on top of `close_grace` for the last connection tasks to notice
/// their deadline and leave the connection table.
const DRAIN_SLACK: Duration = Duration::from_millis(500);

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
    #[error("--web.systemd-socket: {0}")]
    Systemd(String),
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

/// Most sockets taken from systemd: a socket unit of this exporter passes
/// one per listen address.
pub const MAX_SYSTEMD_SOCKETS: usize = 16;

/// The listening TCP sockets systemd passes by socket activation
/// (`sd_listen_fds(3)`, read with the listenfd crate): `LISTEN_PID` must be
/// this process and `LISTEN_FDS` count them (1 to
/// [`MAX_SYSTEMD_SOCKETS`]) from descriptor 3; each must be a TCP socket
/// that listens (a Unix or datagram socket, or one that never called
/// listen(2), is refused). Call it before the process starts a thread:
/// listenfd removes the variables as it reads them.
pub fn systemd_listeners() -> Result<Vec<std::net::TcpListener>, ServerError> {
    let refuse = |why: String| ServerError::Systemd(why);
    let pid = std::env::var("LISTEN_PID").map_err(|_| {
        refuse("LISTEN_PID is not set: not started by a systemd socket unit".into())
    })?;
    if pid.trim() != std::process::id().to_string() {
        return Err(refuse(format!(
            "LISTEN_PID {pid:?} is not this process ({})",
            std::process::id()
        )));
    }
    if std::env::var_os("LISTEN_FDS_FIRST_FD").is_some() {
        // listenfd's own extension; systemd passes its sockets from 3.
        return Err(refuse(
            "LISTEN_FDS_FIRST_FD is set; systemd never sets it".into(),
        ));
    }
    let count = std::env::var("LISTEN_FDS").unwrap_or_default();
    match count.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_SYSTEMD_SOCKETS).contains(&n) => {}
        _ => {
            return Err(refuse(format!(
                "LISTEN_FDS {count:?} is not a number of sockets from 1 to {MAX_SYSTEMD_SOCKETS}"
            )))
        }
    }
    let mut fds = listenfd::ListenFd::from_env();
    let mut out = Vec::with_capacity(fds.len());
    for i in 0..fds.len() {
        let fd = 3 + i;
        let listener = match fds.take_tcp_listener(i) {
            Ok(Some(l)) => l,
            Ok(None) => return Err(refuse(format!("descriptor {fd} was already taken"))),
            Err(e) => return Err(refuse(format!("descriptor {fd}: {e}"))),
        };
        match socket2::SockRef::from(&listener).is_listener() {
            Ok(true) => {}
            Ok(false) => {
                return Err(refuse(format!(
                    "descriptor {fd} is a TCP socket that does not listen"
                )))
            }
            Err(e) => return Err(refuse(format!("descriptor {fd}: {e}"))),
        }
        listener
            .set_nonblocking(true)
            .map_err(|e| refuse(format!("descriptor {fd}: {e}")))?;
        out.push(listener);
    }
    Ok(out)
}

/// Listeners from [`systemd_listeners`] for [`serve_with`] (inside the
/// server's runtime).
pub fn adopt(listeners: Vec<std::net::TcpListener>) -> Result<Vec<TcpListener>, ServerError> {
    listeners
        .into_iter()
        .map(|l| TcpListener::from_std(l).map_err(|e| ServerError::Systemd(e.to_string())))
        .collect()
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

/// Serves `content` until `shutdown` resolves, then drains open connections.
pub async fn serve<C: Content>(
    listeners: Vec<TcpListener>,
    content: Arc<C>,
    limits: WebLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    serve_with(listeners, content, ServeOptions::new(limits), shutdown).await
}

/// [`serve`] with every limit explicit (tests shorten the timeouts).
pub async fn serve_with<C: Content>(
    listeners: Vec<TcpListener>,
    content: Arc<C>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let table = Arc::new(ConnTable::new(connection_cap(
        options.limits.max_connections,
    )));
    let shared = Arc::new(Shared::new(content, &options));
    if let Some(w) = &options.web_config {
        if let Err(e) = crate::webconfig::WebConfigWatcher::watch(w) {
            tracing::warn!(error = %e, "cannot watch the web configuration files; changes need a restart");
        }
    }
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
    let grace = options.close_grace + DRAIN_SLACK;
    match tokio::time::timeout(grace, table.drained()).await {
        Ok(()) => tracing::debug!("all connections closed"),
        Err(_) => {
            tracing::warn!("some connections were still open after the shutdown grace period")
        }
    }
    Ok(())
}

/// Raises the soft limit on open files to the hard limit. The RDMA reader
/// keeps counter files open between samples (a `pread` costs a fraction of
/// an open/read/close), and a GPU node with 8 ports and their GID tables
/// can exceed systemd's default soft limit of 1024; the connections take
/// the rest. Returns the soft limit in force afterwards, `None` when there
/// is none (`RLIM_INFINITY`).
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // `None` in an `Rlimit`: unlimited.
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let current = current?;
    if maximum.is_none_or(|max| current < max) {
        let raised = Rlimit {
            current: maximum,
            maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return maximum;
        }
    }
    Some(current)
}

/// `max_connections`, lowered to what the open files limit allows (after
/// raising its soft value to the hard one, as `main` already does and Go's
/// runtime does for every Go exporter): the RDMA reader may keep half the
/// limit open (`roce_rdma::fs::default_max_open`), the connections get the
/// other half less [`RESERVED_FDS`].
fn connection_cap(configured: usize) -> usize {
    let configured = configured.clamp(1, MAX_CONNECTIONS_CAP);
    let Some(limit) = raise_open_file_limit() else {
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

#[cfg(test)]
mod tests {
    use super::*;

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
