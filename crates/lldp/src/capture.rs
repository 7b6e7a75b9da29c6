//! Passive capture of LLDP frames behind the [`FrameSource`] trait: the
//! live [`PacketCapture`] (one AF_PACKET socket per netdev) and the
//! in-memory [`QueuedFrames`] tests use.
//!
//! The live capture only receives, never transmits. Per netdev it opens a
//! non-blocking `AF_PACKET`/`SOCK_RAW` socket for ethertype 0x88cc, bound
//! to the netdev, with a classic BPF filter that passes only frames whose
//! ethertype is 0x88cc and cuts them at [`SNAP_LEN`] bytes, a small
//! receive buffer ([`RCVBUF`], which bounds what the kernel queues between
//! samples), `PACKET_IGNORE_OUTGOING` (so an LLDP agent of the host itself
//! is not heard) and membership of the nearest-bridge multicast group
//! 01:80:c2:00:00:0e (so a NIC that filters multicast still passes it).
//! Opening needs `CAP_NET_RAW`; without it [`CaptureError::Permission`]
//! says so.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::tlv::ETH_P_LLDP;

/// The most bytes kept of a frame (an untagged 1500-byte LLDPDU plus the
/// Ethernet header and a VLAN tag); the filter cuts longer frames.
pub const SNAP_LEN: u32 = 1518;
/// The receive buffer asked for per socket.
pub const RCVBUF: libc::c_int = 64 * 1024;

const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_OUTGOING: u8 = 4;

/// What one drain read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainStats {
    pub frames: u64,
    pub bytes: u64,
    /// Frames the kernel dropped for a full receive buffer since the last
    /// drain (`PACKET_STATISTICS`).
    pub kernel_drops: u64,
    /// Frames left unread because the per-drain bound was reached.
    pub left_queued: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("opening an AF_PACKET socket needs CAP_NET_RAW: {0}")]
    Permission(io::Error),
    #[error("netdev {0} not found")]
    NoSuchNetdev(String),
    #[error("{what} on {netdev}: {err}")]
    Io {
        what: &'static str,
        netdev: String,
        err: io::Error,
    },
}

/// Where LLDP frames come from.
pub trait FrameSource: Send {
    /// Reads the frames queued since the last call, at most `max_frames`,
    /// handing each to `f` with the netdev it arrived on. Never blocks.
    /// With several netdevs the bound is shared among them, so that one
    /// flooded netdev does not keep the others' frames unread.
    fn drain(
        &mut self,
        max_frames: usize,
        f: &mut dyn FnMut(&str, &[u8]),
    ) -> Result<DrainStats, CaptureError>;
}

/// Frames queued in memory (tests, replays).
#[derive(Debug, Default, Clone)]
pub struct QueuedFrames {
    pub frames: Vec<(String, Vec<u8>)>,
}

impl FrameSource for QueuedFrames {
    fn drain(
        &mut self,
        max_frames: usize,
        f: &mut dyn FnMut(&str, &[u8]),
    ) -> Result<DrainStats, CaptureError> {
        let mut stats = DrainStats::default();
        let n = self.frames.len().min(max_frames);
        for (netdev, frame) in self.frames.drain(..n) {
            stats.frames += 1;
            stats.bytes += frame.len() as u64;
            f(&netdev, &frame);
        }
        stats.left_queued = !self.frames.is_empty();
        Ok(stats)
    }
}

struct PortSocket {
    netdev: String,
    ifindex: i32,
    fd: OwnedFd,
}

/// Live capture on a set of netdevs.
pub struct PacketCapture {
    sockets: Vec<PortSocket>,
    /// The socket the next drain starts with (each drain starts one
    /// further, so the remainder of the bound goes round).
    next: usize,
}

impl PacketCapture {
    /// Opens one socket per netdev. A netdev that cannot be opened is
    /// returned with its error; a missing permission fails the whole open.
    pub fn open(netdevs: &[String]) -> Result<(Self, Vec<CaptureError>), CaptureError> {
        let mut sockets = Vec::new();
        let mut errors = Vec::new();
        for netdev in netdevs {
            match open_one(netdev) {
                Ok(s) => sockets.push(s),
                Err(CaptureError::Permission(e)) => return Err(CaptureError::Permission(e)),
                Err(e) => errors.push(e),
            }
        }
        Ok((PacketCapture { sockets, next: 0 }, errors))
    }

    /// The netdevs with an open socket.
    pub fn netdevs(&self) -> Vec<String> {
        self.sockets.iter().map(|s| s.netdev.clone()).collect()
    }
}

fn io_err(what: &'static str, netdev: &str) -> CaptureError {
    CaptureError::Io {
        what,
        netdev: netdev.to_string(),
        err: io::Error::last_os_error(),
    }
}

fn setsockopt<T>(fd: i32, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live reference to a `T` of the given size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The classic BPF program: `ldh [12]; jeq #0x88cc, accept, drop;
/// accept: ret #SNAP_LEN; drop: ret #0`.
pub fn filter_program() -> [libc::sock_filter; 4] {
    const BPF_LD_H_ABS: u16 = 0x28;
    const BPF_JMP_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    [
        libc::sock_filter {
            code: BPF_LD_H_ABS,
            jt: 0,
            jf: 0,
            k: 12,
        },
        libc::sock_filter {
            code: BPF_JMP_JEQ_K,
            jt: 0,
            jf: 1,
            k: u32::from(ETH_P_LLDP),
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SNAP_LEN,
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ]
}

fn open_one(netdev: &str) -> Result<PortSocket, CaptureError> {
    let name = CString::new(netdev).map_err(|_| CaptureError::NoSuchNetdev(netdev.to_string()))?;
    // SAFETY: `name` is a NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
    if ifindex == 0 {
        return Err(CaptureError::NoSuchNetdev(netdev.to_string()));
    }
    let proto = ETH_P_LLDP.to_be();
    // SAFETY: plain socket(2) call.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::c_int::from(proto),
        )
    };
    if raw < 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => CaptureError::Permission(err),
            _ => CaptureError::Io {
                what: "socket",
                netdev: netdev.to_string(),
                err,
            },
        });
    }
    // SAFETY: `raw` is a socket we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let prog = filter_program();
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    setsockopt(raw, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
        .map_err(|_| io_err("SO_ATTACH_FILTER", netdev))?;
    setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &RCVBUF)
        .map_err(|_| io_err("SO_RCVBUF", netdev))?;
    // Older kernels lack it; outgoing frames are also skipped by type below.
    let _ = setsockopt(
        raw,
        libc::SOL_PACKET,
        PACKET_IGNORE_OUTGOING,
        &1 as &libc::c_int,
    );
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
    let rc = unsafe {
        libc::bind(
            raw,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io_err("bind", netdev));
    }
    // SAFETY: packet_mreq is plain data; zeroed is a valid value.
    let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
    mreq.mr_ifindex = ifindex;
    mreq.mr_type = libc::PACKET_MR_MULTICAST as u16;
    mreq.mr_alen = 6;
    mreq.mr_address[..6].copy_from_slice(&[0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e]);
    // A netdev without multicast filtering needs no membership.
    let _ = setsockopt(raw, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq);
    Ok(PortSocket {
        netdev: netdev.to_string(),
        ifindex,
        fd,
    })
}

impl FrameSource for PacketCapture {
    fn drain(
        &mut self,
        max_frames: usize,
        f: &mut dyn FnMut(&str, &[u8]),
    ) -> Result<DrainStats, CaptureError> {
        let mut stats = DrainStats::default();
        let mut buf = vec![0u8; SNAP_LEN as usize];
        let count = self.sockets.len();
        if count == 0 {
            return Ok(stats);
        }
        // Each socket gets an equal share of the bound (the first ones in
        // this drain's order one more, while the remainder lasts): a
        // flooding neighbour on one port fills its own share, never the
        // others', whose switches keep being heard.
        let (share, extra) = (max_frames / count, max_frames % count);
        let start = self.next % count;
        self.next = (start + 1) % count;
        for i in 0..count {
            let s = &self.sockets[(start + i) % count];
            let budget = share + usize::from(i < extra);
            let fd = s.fd.as_raw_fd();
            let mut taken = 0;
            loop {
                if taken >= budget {
                    stats.left_queued = true;
                    break;
                }
                // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
                let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut from_len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
                // SAFETY: `buf` and `from` are valid for the lengths passed.
                let n = unsafe {
                    libc::recvfrom(
                        fd,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_DONTWAIT,
                        (&mut from as *mut libc::sockaddr_ll).cast(),
                        &mut from_len,
                    )
                };
                if n < 0 {
                    let err = io::Error::last_os_error();
                    match err.raw_os_error() {
                        Some(libc::EAGAIN) | Some(libc::EINTR) => break,
                        _ => {
                            return Err(CaptureError::Io {
                                what: "recvfrom",
                                netdev: s.netdev.clone(),
                                err,
                            })
                        }
                    }
                }
                let n = n as usize;
                // Skipped frames count too: the bound is on the work done.
                taken += 1;
                if from.sll_pkttype == PACKET_OUTGOING || from.sll_ifindex != s.ifindex {
                    continue;
                }
                stats.frames += 1;
                stats.bytes += n as u64;
                f(&s.netdev, &buf[..n.min(buf.len())]);
            }
            // SAFETY: tpacket_stats is plain data; zeroed is a valid value.
            let mut ps: libc::tpacket_stats = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
            // SAFETY: `ps` is valid for `len` bytes.
            let rc = unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_PACKET,
                    libc::PACKET_STATISTICS,
                    (&mut ps as *mut libc::tpacket_stats).cast(),
                    &mut len,
                )
            };
            if rc == 0 {
                stats.kernel_drops += u64::from(ps.tp_drops);
            }
        }
        Ok(stats)
    }
}
