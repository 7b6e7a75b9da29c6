//! The netlink socket: one request at a time, answers bounded in time
//! (`SO_RCVTIMEO` plus an overall deadline) and in size (a byte cap).
//! Parsing is left to [`crate::msg`]; this file only moves bytes.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::error::NlError;
use crate::msg::{
    messages, parse_done, parse_error, NlMessage, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN,
    NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_DUMP_INTR, NLM_F_MULTI, NLM_F_REQUEST,
};

/// `NETLINK_RDMA` and `NETLINK_CONNECTOR` from
/// `include/uapi/linux/netlink.h`.
const NETLINK_RDMA: i32 = 20;
const NETLINK_CONNECTOR: i32 = 11;
/// `SOL_NETLINK` / `NETLINK_EXT_ACK` from `include/linux/socket.h` and
/// `include/uapi/linux/netlink.h`.
const SOL_NETLINK: i32 = 270;
const NETLINK_EXT_ACK: i32 = 11;

/// Receive buffer. The kernel sizes dump datagrams to at most 32 KiB
/// (`netlink_recvmsg` caps `max_recvmsg_len`) and single replies to
/// `NLMSG_DEFAULT_SIZE`; a larger datagram is reported, not cut silently.
const RECV_BUF: usize = 64 * 1024;

/// Default cap on the bytes of one answer.
pub const DEFAULT_MAX_REPLY_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `NETLINK_RDMA` (20): RDMA nldev.
    Rdma,
    /// `NETLINK_ROUTE` (0): rtnetlink, DCB.
    Route,
    /// `NETLINK_GENERIC` (16): genetlink families such as ethtool.
    Generic,
    /// `NETLINK_CONNECTOR` (11): nothing the exporter asks. The kernel
    /// takes any request on it and never answers one (`cn_rx_skb` in
    /// drivers/connector/connector.c sends no ack, and drops messages no
    /// callback is registered for), which makes it the real kernel peer
    /// that hangs, for the tests of the timeouts.
    Connector,
}

impl Protocol {
    fn raw(self) -> i32 {
        match self {
            Protocol::Rdma => NETLINK_RDMA,
            Protocol::Route => libc::NETLINK_ROUTE,
            Protocol::Generic => libc::NETLINK_GENERIC,
            Protocol::Connector => NETLINK_CONNECTOR,
        }
    }
}

/// A bound netlink socket talking to the kernel.
#[derive(Debug)]
pub struct Socket {
    protocol: Protocol,
    fd: OwnedFd,
    port_id: u32,
    seq: u32,
    timeout: Duration,
    max_reply_bytes: usize,
    buf: Vec<u8>,
    /// A request ended mid-answer (timeout, cap, overrun): the rest of that
    /// answer may still arrive, so the next request starts on a new socket.
    desynced: bool,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn open_fd(protocol: Protocol, timeout: Duration) -> Result<(OwnedFd, u32), NlError> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol.raw(),
        )
    };
    if raw < 0 {
        return Err(NlError::Io {
            op: "socket",
            errno: errno(),
        });
    }
    // SAFETY: `raw` is a descriptor we just opened and own alone.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };

    // A zero timeval means "block forever": never send that.
    let t = timeout.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    for (opt, name) in [
        (libc::SO_RCVTIMEO, "setsockopt(SO_RCVTIMEO)"),
        (libc::SO_SNDTIMEO, "setsockopt(SO_SNDTIMEO)"),
    ] {
        // SAFETY: `tv` outlives the call and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(NlError::Io {
                op: name,
                errno: errno(),
            });
        }
    }
    // Extended ack gives the kernel's text with errors. Older kernels lack
    // it, which only loses the text.
    let one: libc::c_int = 1;
    // SAFETY: `one` outlives the call and its size is passed.
    let _ = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_NETLINK,
            NETLINK_EXT_ACK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };

    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: `addr` is a valid sockaddr_nl and its size is passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(NlError::Io {
            op: "bind",
            errno: errno(),
        });
    }
    let mut len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // SAFETY: `addr` and `len` are valid for writes of the passed size.
    let rc = unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_nl).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(NlError::Io {
            op: "getsockname",
            errno: errno(),
        });
    }
    Ok((fd, addr.nl_pid))
}

impl Socket {
    /// Opens and binds a socket. `timeout` bounds each request as a whole.
    pub fn open(protocol: Protocol, timeout: Duration) -> Result<Socket, NlError> {
        let (fd, port_id) = open_fd(protocol, timeout)?;
        Ok(Socket {
            protocol,
            fd,
            port_id,
            seq: 0,
            timeout,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            buf: vec![0; RECV_BUF],
            desynced: false,
        })
    }

    /// The port id the kernel gave this socket.
    pub fn port_id(&self) -> u32 {
        self.port_id
    }

    /// Caps the bytes one answer may take (default 8 MiB).
    pub fn set_max_reply_bytes(&mut self, limit: usize) {
        self.max_reply_bytes = limit.max(NLMSG_HDRLEN);
    }

    /// Sends one request built by [`crate::MessageBuilder`] and collects its
    /// answer. Sequence number and port id are set here; `NLM_F_REQUEST`
    /// and `NLM_F_ACK` are added. The answer ends at `NLMSG_DONE` (dumps),
    /// at a reply without `NLM_F_MULTI`, or at the ack; an `NLMSG_ERROR`
    /// with an errno becomes [`NlError::Kernel`]. Messages of other
    /// sequence numbers (late answers to an earlier request) are skipped.
    pub fn request(&mut self, mut msg: Vec<u8>) -> Result<Vec<NlMessage>, NlError> {
        if self.desynced {
            let (fd, port_id) = open_fd(self.protocol, self.timeout)?;
            self.fd = fd;
            self.port_id = port_id;
            self.desynced = false;
        }
        let result = self.exchange(&mut msg);
        if matches!(
            result,
            Err(NlError::Timeout
                | NlError::TooLarge { .. }
                | NlError::Overrun
                | NlError::Truncated { .. }
                | NlError::Malformed { .. }
                | NlError::Io { .. })
        ) {
            self.desynced = true;
        }
        result
    }

    fn exchange(&mut self, msg: &mut [u8]) -> Result<Vec<NlMessage>, NlError> {
        let len = u32::try_from(msg.len()).ok();
        let (Some(len), Some(hdr)) = (len, msg.get_mut(..NLMSG_HDRLEN)) else {
            return Err(NlError::Malformed {
                what: "request",
                detail: format!("{} bytes: not a netlink message", msg.len()),
            });
        };
        self.seq = self.seq.wrapping_add(1).max(1);
        let seq = self.seq;
        let flags = u16::from_ne_bytes([hdr[6], hdr[7]]) | NLM_F_REQUEST | NLM_F_ACK;
        hdr[0..4].copy_from_slice(&len.to_ne_bytes());
        hdr[6..8].copy_from_slice(&flags.to_ne_bytes());
        hdr[8..12].copy_from_slice(&seq.to_ne_bytes());
        hdr[12..16].copy_from_slice(&self.port_id.to_ne_bytes());
        self.send(msg)?;

        let deadline = Instant::now() + self.timeout;
        let mut total = 0usize;
        let mut out = Vec::new();
        loop {
            if Instant::now() > deadline {
                return Err(NlError::Timeout);
            }
            let n = self.recv()?;
            total = total.saturating_add(n);
            if total > self.max_reply_bytes {
                return Err(NlError::TooLarge {
                    limit: self.max_reply_bytes,
                });
            }
            let datagram = self.buf.get(..n).unwrap_or(&[]);
            for raw in messages(datagram) {
                let raw = raw?;
                if raw.seq != seq || raw.pid != self.port_id {
                    continue;
                }
                match raw.kind {
                    NLMSG_NOOP => continue,
                    NLMSG_ERROR => {
                        let e = parse_error(raw.payload, raw.flags)?;
                        if e.errno == 0 {
                            return Ok(out);
                        }
                        return Err(NlError::Kernel {
                            errno: e.errno,
                            message: e.message,
                        });
                    }
                    NLMSG_DONE => {
                        let e = parse_done(raw.payload, raw.flags);
                        if e.errno != 0 {
                            return Err(NlError::Kernel {
                                errno: e.errno,
                                message: e.message,
                            });
                        }
                        return Ok(out);
                    }
                    NLMSG_OVERRUN => return Err(NlError::Overrun),
                    _ => {
                        if raw.flags & NLM_F_DUMP_INTR != 0 {
                            return Err(NlError::DumpInterrupted);
                        }
                        out.push(raw.to_message());
                        // A single reply: its ack (asked for above) will be
                        // skipped by the next request as a stale sequence.
                        if raw.flags & NLM_F_MULTI == 0 {
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }

    fn send(&self, msg: &[u8]) -> Result<(), NlError> {
        // SAFETY: sockaddr_nl is plain data; all-zero (pid 0) is the kernel.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        for _ in 0..3 {
            // SAFETY: `msg` and `kernel` are valid for the passed lengths.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    msg.as_ptr().cast(),
                    msg.len(),
                    0,
                    (&kernel as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if rc >= 0 {
                return Ok(());
            }
            match errno() {
                libc::EINTR => continue,
                libc::EAGAIN => return Err(NlError::Timeout),
                e => {
                    return Err(NlError::Io {
                        op: "sendto",
                        errno: e,
                    })
                }
            }
        }
        Err(NlError::Io {
            op: "sendto",
            errno: libc::EINTR,
        })
    }

    /// One datagram into `self.buf`; returns its length.
    fn recv(&mut self) -> Result<usize, NlError> {
        for _ in 0..3 {
            // SAFETY: `self.buf` is valid for writes of its length.
            // MSG_TRUNC makes the return value the datagram's real length.
            let rc = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if rc >= 0 {
                let n = rc as usize;
                if n > self.buf.len() {
                    return Err(NlError::Truncated {
                        what: "netlink datagram",
                        need: n,
                        have: self.buf.len(),
                    });
                }
                return Ok(n);
            }
            match errno() {
                libc::EINTR => continue,
                libc::EAGAIN => return Err(NlError::Timeout),
                libc::ENOBUFS => return Err(NlError::Overrun),
                e => {
                    return Err(NlError::Io {
                        op: "recv",
                        errno: e,
                    })
                }
            }
        }
        Err(NlError::Io {
            op: "recv",
            errno: libc::EINTR,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{MessageBuilder, NLM_F_DUMP};

    /// rtnetlink exists on every Linux host (and in CI containers): dump
    /// the links and expect at least `lo`.
    #[test]
    fn route_dump_lists_loopback() {
        let Ok(mut s) = Socket::open(Protocol::Route, Duration::from_secs(2)) else {
            return; // no netlink at all (seccomp sandbox): nothing to test
        };
        // RTM_GETLINK = 18, struct ifinfomsg = 16 bytes (rtnetlink.h).
        let req = MessageBuilder::new(18, NLM_F_DUMP)
            .header(&[0u8; 16])
            .finish()
            .unwrap();
        let msgs = s.request(req).unwrap();
        assert!(!msgs.is_empty());
        assert!(msgs.iter().all(|m| m.kind == 16)); // RTM_NEWLINK
                                                    // Second request on the same socket: sequence numbers advance.
        let req = MessageBuilder::new(18, NLM_F_DUMP)
            .header(&[0u8; 16])
            .finish()
            .unwrap();
        assert_eq!(s.request(req).unwrap().len(), msgs.len());
    }

    #[test]
    fn kernel_error_is_mapped() {
        let Ok(mut s) = Socket::open(Protocol::Route, Duration::from_secs(2)) else {
            return;
        };
        // RTM_GETLINK for ifindex 0x7fff_fff0, which does not exist: ENODEV.
        let mut ifi = [0u8; 16];
        ifi[4..8].copy_from_slice(&0x7fff_fff0i32.to_ne_bytes());
        let req = MessageBuilder::new(18, 0).header(&ifi).finish().unwrap();
        match s.request(req) {
            Err(NlError::Kernel { errno, .. }) => assert_eq!(errno, libc::ENODEV),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn byte_cap_stops_a_dump_and_the_socket_recovers() {
        let Ok(mut s) = Socket::open(Protocol::Route, Duration::from_secs(2)) else {
            return;
        };
        let dump = || {
            MessageBuilder::new(18, NLM_F_DUMP)
                .header(&[0u8; 16])
                .finish()
                .unwrap()
        };
        s.set_max_reply_bytes(32);
        assert_eq!(s.request(dump()), Err(NlError::TooLarge { limit: 32 }));
        s.set_max_reply_bytes(DEFAULT_MAX_REPLY_BYTES);
        // The rest of the cut dump must not leak into this answer.
        let msgs = s.request(dump()).unwrap();
        assert!(!msgs.is_empty() && msgs.iter().all(|m| m.kind == 16));
    }

    #[test]
    fn short_request_is_refused() {
        let Ok(mut s) = Socket::open(Protocol::Route, Duration::from_secs(2)) else {
            return;
        };
        assert!(matches!(
            s.request(vec![1, 2, 3]),
            Err(NlError::Malformed { .. })
        ));
    }
}
