//! The UD verbs layer of the probes between hosts ([`crate::peer`]): one
//! unreliable-datagram queue pair per local port, at once the responder
//! other nodes probe and the prober that sends this node's probes.
//!
//! sideway 0.4 creates no address handles, sets no UD destination and
//! reports no `src_qp`, so this module calls libibverbs through sideway's
//! sys crate (`rdma-mummy-sys`, which loads libibverbs at run time like
//! sideway itself). Every object is held as a raw pointer in [`UdPort`],
//! created one at a time into the struct, so that an error at any step
//! drops the struct and its `Drop` frees what exists so far: nothing leaks
//! on an error path.
//!
//! Wire behaviour:
//! - each send carries an address handle (GRH: the peer's GID, this port's
//!   GID index, the traffic class, the flow label, from which RoCE v2
//!   derives the UDP source port, so probes spread over ECMP paths), made
//!   by the resolver thread of [`crate::peer_ah`] and kept between sends:
//!   the port's thread never waits in the kernel for a neighbour;
//! - receives are posted with 40 bytes for the GRH (on RoCE v2 over IPv4
//!   its last 20 bytes are the IPv4 header) ahead of room for a 4096-byte
//!   payload, so a probe of any IB MTU fits;
//! - the sender of a datagram is its GID (from the GRH, as rdma-core's
//!   `ibv_init_ah_from_wc` reads it) and its QPN (`src_qp` of the
//!   completion); what is answered, and how, is [`crate::peer_admit::handle`]:
//!   a proven probe of an admitted responder gets an echo of its size, an
//!   admitted one without its cookie a challenge within a small total
//!   budget, anyone else nothing; answers are never answered, anything
//!   else is dropped and counted;
//! - an answer leaves with the DSCP its probe arrived with, and carries
//!   this node's hold time (receive completion to post), which the prober
//!   subtracts from its round trip;
//! - the port's thread waits on events only: both CQs deliver to one
//!   completion channel (`ibv_req_notify_cq`), whose descriptor sits in one
//!   `poll(2)` with the address-handle resolver's `eventfd` and the
//!   deadline of what it waits for (an echo, a handle, the gap before the
//!   next probe); a lost probe costs a sleep in the kernel, not a core;
//! - round trips are taken on the device's completion timestamps where the
//!   device keeps a clock (`cq`), on the host's clock otherwise, and the
//!   port says which ([`crate::peer::RttClock`]).
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ptr;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{
    ibv_access_flags, ibv_ack_cq_events, ibv_ah, ibv_ah_attr, ibv_alloc_pd, ibv_close_device,
    ibv_comp_channel, ibv_context, ibv_cq, ibv_create_ah, ibv_create_comp_channel, ibv_create_cq,
    ibv_create_qp, ibv_dealloc_pd, ibv_dereg_mr, ibv_destroy_ah, ibv_destroy_comp_channel,
    ibv_destroy_cq, ibv_destroy_qp, ibv_free_device_list, ibv_get_cq_event, ibv_get_device_list,
    ibv_get_device_name, ibv_gid, ibv_modify_qp, ibv_mr, ibv_mtu, ibv_open_device, ibv_pd,
    ibv_poll_cq, ibv_port_attr, ibv_port_state, ibv_post_recv, ibv_post_send, ibv_qp, ibv_qp_attr,
    ibv_qp_attr_mask, ibv_qp_init_attr, ibv_qp_state, ibv_qp_type, ibv_query_gid, ibv_query_port,
    ibv_recv_wr, ibv_reg_mr, ibv_req_notify_cq, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wc,
    ibv_wc_flags, ibv_wc_status, ibv_wr_opcode,
};

use crate::peer::{
    flow_label, Endpoint, PeerPort, PeerVerbs, Probe, ProbeOutcome, Responder, RttClock, Served,
    DEFAULT_FLOW_LABELS, GRH_LEN, QKEY,
};
use crate::peer_admit::{handle, Datagram, DatagramRefusal, Handled, InFlight};
use crate::peer_ah::{AhCache, AhFactory, AhKey, Lookup};
use crate::peer_wire::{grh_traffic_class, Message, MessageKind, HEADER_LEN};
use crate::verbs::OpenError;
use crate::{Failure, Reason};

/// Receive buffers kept posted: a burst of this many datagrams between
/// two wake-ups of the port's thread is taken in (a flood of forged
/// probes included, so that peers' probes among them still find a
/// buffer); more are dropped by the HCA (no RNR on UD). 128 slots of 4 KiB
/// lock ≈ 530 KiB per port.
const RECV_SLOTS: usize = 128;
/// Sends in flight at once (a probe and the answers of one poll).
const SEND_SLOTS: usize = 4;
/// Largest payload received: the largest IB MTU (a UD message is one packet).
const MAX_PAYLOAD: usize = 4096;
/// One slot of the registered buffer: GRH room, then the payload.
const SLOT: usize = GRH_LEN as usize + MAX_PAYLOAD;
/// `wr_id` of sends: this + serial × SEND_SLOTS + slot (receives: the slot).
const SEND_ID: u64 = 1 << 32;
/// `IBV_LINK_LAYER_ETHERNET` (a `#define` in verbs.h, absent from the bindings).
const LINK_LAYER_ETHERNET: u8 = 2;
/// Hop limit of the GRH (routers decrement it; 64 as rdma-core's examples).
const HOP_LIMIT: u8 = 64;
/// Answers waiting for their address handle at most; more are dropped
/// (counted): a flood of new senders cannot grow the port's memory.
const WAITING_ANSWERS: usize = 16;
/// An answer whose address handle has not come in this long is dropped:
/// its prober has given up.
const ANSWER_PATIENCE: Duration = Duration::from_secs(1);

/// An address handle of a port's protection domain.
#[derive(Debug, Clone, Copy)]
pub struct AhPtr(*mut ibv_ah);

// SAFETY: an address handle is a plain kernel object reference; libibverbs
// allows it to be created on one thread and used and destroyed on another.
unsafe impl Send for AhPtr {}

/// Makes address handles in one port's protection domain (on the
/// resolver thread) and destroys them (on the port's thread).
struct PdAhFactory {
    pd: *mut ibv_pd,
    port: u8,
    sgid_index: u8,
}

// SAFETY: libibverbs calls on one PD are thread-safe; the PD outlives the
// factory (the cache is shut down before the PD is deallocated).
unsafe impl Send for PdAhFactory {}
// SAFETY: as above; the factory holds no state of its own.
unsafe impl Sync for PdAhFactory {}

impl AhFactory for PdAhFactory {
    type Handle = AhPtr;

    fn create(&self, key: &AhKey) -> Result<AhPtr, i32> {
        // SAFETY: an all-zero AH attribute is valid.
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        attr.is_global = 1;
        attr.port_num = self.port;
        attr.grh.dgid = ibv_gid {
            raw: key.gid.octets(),
        };
        attr.grh.sgid_index = self.sgid_index;
        attr.grh.hop_limit = HOP_LIMIT;
        attr.grh.traffic_class = key.traffic_class;
        attr.grh.flow_label = key.flow_label & 0xF_FFFF;
        // SAFETY: the PD is live (see the Sync note); attr is valid. On
        // RoCE this may wait in the kernel for the neighbour's address.
        let ah = unsafe { ibv_create_ah(self.pd, &mut attr) };
        if ah.is_null() {
            Err(last_errno())
        } else {
            Ok(AhPtr(ah))
        }
    }

    fn destroy(&self, h: AhPtr) {
        // SAFETY: the handle came from create and no send uses it (the
        // cache destroys only handles not held by a send in flight).
        unsafe { ibv_destroy_ah(h.0) };
    }
}

/// An answer waiting for its address handle.
struct WaitingAnswer {
    key: AhKey,
    qpn: u32,
    msg: Message,
    size: usize,
    received: Instant,
}

/// Opens UD ports with libibverbs.
#[derive(Debug, Default, Clone)]
pub struct IbPeerVerbs;

impl IbPeerVerbs {
    pub fn new() -> Self {
        IbPeerVerbs
    }
}

pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A failure with the errno libibverbs left (its calls return NULL or a
/// negative value and set errno, or return the errno itself).
pub(crate) fn os_fail(reason: Reason, what: String, errno: i32) -> Failure {
    let text = std::io::Error::from_raw_os_error(errno);
    Failure::with_errno(reason, Some(errno), format!("{what}: {text}"))
}

/// A completion channel of the open device `ctx`, its descriptor
/// non-blocking (`ibv_get_cq_event` never hangs: the caller polls the fd).
pub(crate) fn nonblocking_channel(ctx: *mut ibv_context) -> Result<*mut ibv_comp_channel, Failure> {
    // SAFETY: ctx is an open device context.
    let channel = unsafe { ibv_create_comp_channel(ctx) };
    if channel.is_null() {
        return Err(os_fail(
            Reason::CreateCq,
            "ibv_create_comp_channel".into(),
            last_errno(),
        ));
    }
    // SAFETY: the channel is live; its fd is owned by libibverbs and only
    // its flags change.
    unsafe {
        let fd = (*channel).fd;
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    Ok(channel)
}

impl PeerVerbs for IbPeerVerbs {
    type Port = UdPort;

    fn open_port(&mut self, device: &str, port: u8, gid_index: u32) -> Result<UdPort, OpenError> {
        let ctx = open_device(device)?;
        let mut p = UdPort {
            ctx,
            pd: ptr::null_mut(),
            channel: ptr::null_mut(),
            mr: ptr::null_mut(),
            send_cq: Cq::Plain(ptr::null_mut()),
            recv_cq: Cq::Plain(ptr::null_mut()),
            clock: None,
            sent_ts: None,
            sends: 0,
            qp: ptr::null_mut(),
            buf: SlotBuffer::new((RECV_SLOTS + SEND_SLOTS) * SLOT),
            send_busy: [None; SEND_SLOTS],
            ahs: None,
            waiting: std::collections::VecDeque::new(),
            gid: Ipv6Addr::UNSPECIFIED,
            qpn: 0,
            mtu: 0,
            port,
            sgid_index: 0,
        };
        p.setup(device, gid_index)?;
        Ok(p)
    }
}

/// Opens `device` by name; the device list is freed on every path.
pub(crate) fn open_device(device: &str) -> Result<*mut ibv_context, OpenError> {
    let mut n = 0i32;
    // SAFETY: `n` is a valid out-pointer; the list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(OpenError::Unavailable(format!(
            "libibverbs cannot list RDMA devices ({}): rdma-core missing or no uverbs device",
            std::io::Error::last_os_error()
        )));
    }
    let mut found = ptr::null_mut();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` valid device pointers.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: a listed device has a NUL-terminated name owned by the list.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) };
        if name.to_bytes() == device.as_bytes() {
            found = dev;
            break;
        }
    }
    let ctx = if found.is_null() {
        Err(OpenError::Failed(Failure::new(
            Reason::DeviceOpen,
            format!("{device} is not listed by libibverbs"),
        )))
    } else {
        // SAFETY: `found` is a device of the live list (a context keeps its
        // own reference, so the list may be freed afterwards).
        let ctx = unsafe { ibv_open_device(found) };
        if ctx.is_null() {
            Err(OpenError::Failed(os_fail(
                Reason::DeviceOpen,
                format!("ibv_open_device({device})"),
                last_errno(),
            )))
        } else {
            Ok(ctx)
        }
    };
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
    ctx
}

/// Memory the device reads and writes, cut into receive and send slots;
/// touched only through its pointer, a slot only while no work request
/// on it is outstanding.
struct SlotBuffer {
    ptr: *mut u8,
    len: usize,
}

impl SlotBuffer {
    fn new(len: usize) -> Self {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let len = b.len();
        SlotBuffer {
            ptr: Box::into_raw(b).cast::<u8>(),
            len,
        }
    }

    fn addr(&self, offset: usize) -> u64 {
        self.ptr as u64 + offset.min(self.len) as u64
    }

    fn slice(&self, offset: usize, len: usize) -> &[u8] {
        if offset.saturating_add(len) > self.len {
            return &[];
        }
        // SAFETY: in bounds (checked); callers read a slot only after its
        // completion was polled, so the device no longer writes it.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) }
    }

    fn write(&mut self, offset: usize, data: &[u8]) {
        if offset.saturating_add(data.len()) <= self.len {
            // SAFETY: in bounds (checked); the slot has no request outstanding.
            unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) };
        }
    }
}

impl Drop for SlotBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from Box::into_raw of a boxed slice of len.
        unsafe {
            drop(Box::from_raw(ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )))
        };
    }
}

/// One port's UD queue pair and what it needs. Null pointers are objects
/// not created (yet); `Drop` frees the others, QP first, context last.
pub struct UdPort {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    /// Completion events of both CQs: the port sleeps in `poll(2)` on its
    /// descriptor and wakes when a datagram arrives or a send completes,
    /// so a peer's probe is answered at once without spinning a core.
    channel: *mut ibv_comp_channel,
    mr: *mut ibv_mr,
    /// Send completions: they free a slot, and give the probe's send
    /// timestamp where the device keeps a clock.
    send_cq: Cq,
    /// Receive completions. Apart from the sends' so that freeing a send
    /// slot never consumes a received datagram.
    recv_cq: Cq,
    /// The device's clock, where both CQs carry its timestamps.
    clock: Option<DeviceClock>,
    /// The send completion timestamp of the latest probe: (`wr_id`, ticks).
    sent_ts: Option<(u64, u64)>,
    /// Sends posted so far: part of each send's `wr_id`, so that a
    /// completion names its send, not only its (reused) slot.
    sends: u64,
    qp: *mut ibv_qp,
    buf: SlotBuffer,
    /// The address handle held by the send in flight on each send slot
    /// (`None`: slot free).
    send_busy: [Option<AhKey>; SEND_SLOTS],
    /// The port's address handles and their resolver thread.
    ahs: Option<AhCache<PdAhFactory>>,
    /// Answers waiting for their address handle, oldest first.
    waiting: std::collections::VecDeque<WaitingAnswer>,
    gid: Ipv6Addr,
    qpn: u32,
    mtu: u32,
    port: u8,
    sgid_index: u8,
}

// SAFETY: the port is owned and used by one thread at a time (the prober
// thread); libibverbs objects are not tied to the thread that created them.
unsafe impl Send for UdPort {}

impl Drop for UdPort {
    fn drop(&mut self) {
        // Return values are ignored: after a device removal every destroy
        // fails (EIO) and the kernel has released the objects anyway.
        // SAFETY: each pointer is null or an object created by this port
        // and destroyed only here, in dependency order.
        unsafe {
            if !self.qp.is_null() {
                ibv_destroy_qp(self.qp);
            }
            // Joins the resolver (it may be in ibv_create_ah on this PD)
            // and destroys every handle before the PD goes.
            if let Some(mut ahs) = self.ahs.take() {
                ahs.shutdown();
            }
            self.send_cq.destroy();
            self.recv_cq.destroy();
            if !self.channel.is_null() {
                ibv_destroy_comp_channel(self.channel);
            }
            if !self.mr.is_null() {
                ibv_dereg_mr(self.mr);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            if !self.ctx.is_null() {
                ibv_close_device(self.ctx);
            }
        }
    }
}

/// An MTU enum of libibverbs in bytes.
pub(crate) fn mtu_bytes(mtu: ibv_mtu::Type) -> u32 {
    match mtu {
        ibv_mtu::IBV_MTU_256 => 256,
        ibv_mtu::IBV_MTU_512 => 512,
        ibv_mtu::IBV_MTU_1024 => 1024,
        ibv_mtu::IBV_MTU_2048 => 2048,
        _ => 4096,
    }
}

mod cq;
mod datapath;
mod headers;
mod setup;
mod wait;

use cq::{Completion, Cq, DeviceClock};

pub use headers::{ip_prefix_len, ipv4_prefix_len, sender_gid};

#[cfg(test)]
mod tests {
    use super::*;

    /// A RoCE v2 receive over IPv4: 20 undefined bytes, then the IPv4
    /// header of the packet (as rxe and mlx5 place it).
    fn roce_v2_ipv4(src: [u8; 4], dst: [u8; 4]) -> [u8; 40] {
        let mut g = [0u8; 40];
        let h = &mut g[20..40];
        h[0] = 0x45;
        h[1] = 0x68; // DSCP 26 << 2
        h[2..4].copy_from_slice(&(20u16 + 8 + 12 + 64 + 4).to_be_bytes());
        h[8] = 64;
        h[9] = 17; // UDP
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&dst);
        let mut sum = 0u32;
        for pair in h.chunks(2) {
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        g
    }

    #[test]
    fn the_sender_of_a_roce_v2_ipv4_datagram_is_its_mapped_source_address() {
        let g = roce_v2_ipv4([10, 0, 2, 15], [10, 0, 2, 16]);
        assert_eq!(
            sender_gid(&g),
            Some(Ipv4Addr::new(10, 0, 2, 15).to_ipv6_mapped())
        );
        // A corrupted checksum with an IPv6 version nibble up front: read
        // as a GRH, as rdma-core does.
        let mut bad = g;
        bad[0] = 0x60;
        bad[31] ^= 0xff;
        let mut as_grh = [0u8; 16];
        as_grh.copy_from_slice(&bad[8..24]);
        assert_eq!(sender_gid(&bad), Some(Ipv6Addr::from(as_grh)));
    }

    #[test]
    fn the_sender_of_a_grh_datagram_is_its_source_gid() {
        let mut g = [0u8; 40];
        g[0] = 0x60;
        let sgid: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        g[8..24].copy_from_slice(&sgid.octets());
        g[24..40].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
        assert_eq!(sender_gid(&g), Some(sgid));
        assert_eq!(sender_gid(&[0u8; 40]), None);
        assert_eq!(sender_gid(&[0x60u8; 12]), None);
    }

    #[test]
    fn loopback_has_its_prefix_and_unknown_addresses_none() {
        assert_eq!(ipv4_prefix_len(Ipv4Addr::LOCALHOST), Some(8));
        assert_eq!(ipv4_prefix_len(Ipv4Addr::new(192, 0, 2, 123)), None);
        // ::1 is /128 where the host has IPv6 on lo (not every container).
        let v6 = ip_prefix_len(std::net::IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert!(v6.is_none() || v6 == Some(128), "{v6:?}");
    }
}
