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
//!   a probe from an admitted responder gets an echo of its size, others a
//!   short "not admitted" at a small global rate, answers are never
//!   answered, anything else is dropped and counted;
//! - an answer leaves with the DSCP its probe arrived with, and carries
//!   this node's hold time (receive completion to post), which the prober
//!   subtracts from its round trip.
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
    flow_label, Endpoint, Outcome, PeerPort, PeerVerbs, Probe, Responder, Served,
    DEFAULT_FLOW_LABELS, GRH_LEN, QKEY,
};
use crate::peer_admit::{handle, Datagram, Handled, InFlight, Refusal};
use crate::peer_ah::{AhCache, AhFactory, AhKey, Lookup};
use crate::peer_wire::{grh_traffic_class, Kind, Message, HEADER_LEN};
use crate::verbs::OpenError;
use crate::{Failure, Reason};

/// Receive buffers kept posted: a burst of this many probes from peers
/// between two polls is answered; more are dropped by the HCA (no RNR on UD).
const RECV_SLOTS: usize = 16;
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

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A failure with the errno libibverbs left (its calls return NULL or a
/// negative value and set errno, or return the errno itself).
fn os_fail(reason: Reason, what: String, errno: i32) -> Failure {
    let text = std::io::Error::from_raw_os_error(errno);
    Failure::with_errno(reason, Some(errno), format!("{what}: {text}"))
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
            send_cq: ptr::null_mut(),
            recv_cq: ptr::null_mut(),
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
fn open_device(device: &str) -> Result<*mut ibv_context, OpenError> {
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
    /// Completion events of the CQ: an idle port sleeps in `poll(2)` on
    /// its descriptor and wakes when a datagram arrives, so a peer's probe
    /// is answered at once without spinning a core.
    channel: *mut ibv_comp_channel,
    mr: *mut ibv_mr,
    /// Send completions (polled, never waited for: they only free a slot).
    send_cq: *mut ibv_cq,
    /// Receive completions, with the completion channel: what wakes an
    /// idle port. Apart from the sends' so that freeing a send slot never
    /// consumes a received datagram.
    recv_cq: *mut ibv_cq,
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
            for cq in [self.send_cq, self.recv_cq] {
                if !cq.is_null() {
                    ibv_destroy_cq(cq);
                }
            }
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

fn mtu_bytes(mtu: ibv_mtu::Type) -> u32 {
    match mtu {
        ibv_mtu::IBV_MTU_256 => 256,
        ibv_mtu::IBV_MTU_512 => 512,
        ibv_mtu::IBV_MTU_1024 => 1024,
        ibv_mtu::IBV_MTU_2048 => 2048,
        _ => 4096,
    }
}

impl UdPort {
    /// Creates PD, MR, CQ and the UD QP, takes the QP to RTS and posts the
    /// receives. On error, what was created is freed by `Drop`.
    fn setup(&mut self, device: &str, gid_index: u32) -> Result<(), Failure> {
        let port = self.port;
        // SAFETY: an all-zero ibv_port_attr is valid (plain integers).
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; attr is a valid out-pointer of the right size.
        let rc = unsafe { ibv_query_port(self.ctx, port, &mut attr) };
        if rc != 0 {
            return Err(os_fail(
                Reason::QueryPort,
                format!("ibv_query_port({device}/{port})"),
                rc,
            ));
        }
        if attr.state != ibv_port_state::IBV_PORT_ACTIVE {
            return Err(Failure::new(
                Reason::PortDown,
                format!("{device}/{port} is not ACTIVE"),
            ));
        }
        if attr.link_layer != LINK_LAYER_ETHERNET {
            // The endpoint document carries no LID, and an IB UD address
            // handle needs one: InfiniBand peers are not probed yet.
            return Err(Failure::new(
                Reason::QueryPort,
                format!("{device}/{port} is InfiniBand: peer probes run on RoCE ports only"),
            ));
        }
        self.mtu = mtu_bytes(attr.active_mtu);
        self.sgid_index = u8::try_from(gid_index).map_err(|_| {
            Failure::new(
                Reason::GidIndex,
                format!("GID index {gid_index} does not fit the 8-bit sgid_index"),
            )
        })?;
        // SAFETY: an all-zero GID is a valid value of the union.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; gid is a valid out-pointer.
        let rc = unsafe { ibv_query_gid(self.ctx, port, i32::from(self.sgid_index), &mut gid) };
        if rc != 0 {
            return Err(os_fail(
                Reason::GidIndex,
                format!("GID index {gid_index} of {device}/{port}"),
                last_errno(),
            ));
        }
        // SAFETY: every bit pattern is a valid [u8; 16].
        let raw = unsafe { gid.raw };
        self.gid = Ipv6Addr::from(raw);
        if self.gid.is_unspecified() {
            return Err(Failure::new(
                Reason::GidIndex,
                format!("GID index {gid_index} of {device}/{port} is empty"),
            ));
        }
        // SAFETY: ctx is open.
        self.pd = unsafe { ibv_alloc_pd(self.ctx) };
        if self.pd.is_null() {
            return Err(os_fail(
                Reason::AllocPd,
                "ibv_alloc_pd".into(),
                last_errno(),
            ));
        }
        let factory = PdAhFactory {
            pd: self.pd,
            port,
            sgid_index: self.sgid_index,
        };
        self.ahs = Some(AhCache::new(factory).map_err(|e| {
            Failure::new(
                Reason::AllocPd,
                format!("address-handle resolver thread: {e}"),
            )
        })?);
        // SAFETY: the buffer lives as long as the port and is deregistered
        // (Drop) before it is freed (field order: buf drops after Drop ran).
        self.mr = unsafe {
            ibv_reg_mr(
                self.pd,
                self.buf.ptr.cast(),
                self.buf.len,
                ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32,
            )
        };
        if self.mr.is_null() {
            let errno = last_errno();
            let reason = if matches!(errno, libc::ENOMEM | libc::EPERM | libc::EAGAIN) {
                Reason::Memlock
            } else {
                Reason::RegMr
            };
            return Err(os_fail(
                reason,
                format!("ibv_reg_mr({} bytes)", self.buf.len),
                errno,
            ));
        }
        // SAFETY: ctx is open.
        self.channel = unsafe { ibv_create_comp_channel(self.ctx) };
        if self.channel.is_null() {
            return Err(os_fail(
                Reason::CreateCq,
                "ibv_create_comp_channel".into(),
                last_errno(),
            ));
        }
        // SAFETY: the channel is live; its fd is owned by libibverbs and
        // only its flags change (non-blocking: ibv_get_cq_event never hangs).
        unsafe {
            let fd = (*self.channel).fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        // SAFETY: ctx is live; no channel, no context pointer.
        self.send_cq = unsafe {
            ibv_create_cq(
                self.ctx,
                SEND_SLOTS as i32,
                ptr::null_mut(),
                ptr::null_mut(),
                0,
            )
        };
        if self.send_cq.is_null() {
            return Err(os_fail(
                Reason::CreateCq,
                "ibv_create_cq".into(),
                last_errno(),
            ));
        }
        // SAFETY: ctx and the channel are live; no context pointer.
        self.recv_cq = unsafe {
            ibv_create_cq(
                self.ctx,
                RECV_SLOTS as i32,
                ptr::null_mut(),
                self.channel,
                0,
            )
        };
        if self.recv_cq.is_null() {
            return Err(os_fail(
                Reason::CreateCq,
                "ibv_create_cq".into(),
                last_errno(),
            ));
        }
        // SAFETY: an all-zero init attr is valid (null pointers, zero counts).
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.send_cq;
        init.recv_cq = self.recv_cq;
        init.cap.max_send_wr = SEND_SLOTS as u32;
        init.cap.max_recv_wr = RECV_SLOTS as u32;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.qp_type = ibv_qp_type::IBV_QPT_UD;
        // SAFETY: pd and the CQs are live; init is a valid attribute.
        self.qp = unsafe { ibv_create_qp(self.pd, &mut init) };
        if self.qp.is_null() {
            return Err(os_fail(
                Reason::CreateQp,
                "ibv_create_qp (UD)".into(),
                last_errno(),
            ));
        }
        // SAFETY: qp is live.
        self.qpn = unsafe { (*self.qp).qp_num };
        let m = ibv_qp_attr_mask::IBV_QP_STATE;
        self.modify(
            ibv_qp_state::IBV_QPS_INIT,
            m | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
                | ibv_qp_attr_mask::IBV_QP_PORT
                | ibv_qp_attr_mask::IBV_QP_QKEY,
            Reason::QpInit,
            "UD QP RESET→INIT",
        )?;
        self.modify(
            ibv_qp_state::IBV_QPS_RTR,
            m,
            Reason::QpRtr,
            "UD QP INIT→RTR",
        )?;
        self.modify(
            ibv_qp_state::IBV_QPS_RTS,
            m | ibv_qp_attr_mask::IBV_QP_SQ_PSN,
            Reason::QpRts,
            "UD QP RTR→RTS",
        )?;
        for slot in 0..RECV_SLOTS {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    fn modify(
        &mut self,
        state: ibv_qp_state::Type,
        mask: ibv_qp_attr_mask,
        reason: Reason,
        what: &str,
    ) -> Result<(), Failure> {
        // SAFETY: an all-zero QP attribute is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state;
        attr.pkey_index = 0;
        attr.port_num = self.port;
        attr.qkey = QKEY;
        attr.sq_psn = 0;
        // SAFETY: qp is live; the mask names only fields set above.
        let rc = unsafe { ibv_modify_qp(self.qp, &mut attr, mask.0 as i32) };
        if rc != 0 {
            return Err(os_fail(reason, what.into(), rc));
        }
        Ok(())
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), Failure> {
        // SAFETY: mr is live (setup created it before any receive).
        let lkey = unsafe { (*self.mr).lkey };
        let mut sge = ibv_sge {
            addr: self.buf.addr(slot * SLOT),
            length: SLOT as u32,
            lkey,
        };
        let mut wr = ibv_recv_wr {
            wr_id: slot as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: qp is live; the SGE lies in the registered buffer and the
        // slot has no other request outstanding (it was just completed).
        let rc = unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_fail(Reason::PostRecv, "ibv_post_recv".into(), rc));
        }
        Ok(())
    }

    /// Sends `payload` to `qpn` through the address handle of `key`
    /// (`ah`); returns the `wr_id` of the send.
    fn send(&mut self, key: AhKey, ah: AhPtr, qpn: u32, payload: &[u8]) -> Result<u64, Failure> {
        let slot = match self.send_busy.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                // Every slot busy: reap send completions for a moment.
                let until = Instant::now() + Duration::from_millis(10);
                loop {
                    self.reap_sends(None)?;
                    if let Some(s) = self.send_busy.iter().position(Option::is_none) {
                        break s;
                    }
                    if Instant::now() >= until {
                        return Err(Failure::new(
                            Reason::PostSend,
                            "every send slot still in flight".to_string(),
                        ));
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        };
        let len = payload.len().min(MAX_PAYLOAD);
        let offset = (RECV_SLOTS + slot) * SLOT;
        self.buf
            .write(offset, payload.get(..len).unwrap_or(payload));
        // SAFETY: mr is live.
        let lkey = unsafe { (*self.mr).lkey };
        let mut sge = ibv_sge {
            addr: self.buf.addr(offset),
            length: len as u32,
            lkey,
        };
        // SAFETY: an all-zero send WR is valid (null pointers, zero unions).
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        self.sends += 1;
        wr.wr_id = SEND_ID + self.sends * SEND_SLOTS as u64 + slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.ud.ah = ah.0;
        wr.wr.ud.remote_qpn = qpn;
        wr.wr.ud.remote_qkey = QKEY;
        let mut bad = ptr::null_mut();
        // SAFETY: qp and ah are live (the cache keeps the handle until the
        // send completes); the SGE lies in the registered buffer in a slot
        // with no request outstanding.
        let rc = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_fail(Reason::PostSend, "ibv_post_send (UD)".into(), rc));
        }
        if let Some(ahs) = self.ahs.as_mut() {
            ahs.hold(&key);
        }
        self.send_busy[slot] = Some(key);
        Ok(wr.wr_id)
    }

    /// The address handle of `key` now, without waiting.
    fn handle_for(&mut self, key: &AhKey) -> Lookup<AhPtr> {
        match self.ahs.as_mut() {
            Some(ahs) => ahs.get(key, Instant::now()),
            None => Lookup::Failed(libc::EPIPE),
        }
    }

    /// Frees the slots of completed sends (their address handles stay in
    /// the cache); returns the failure of the send `expect` names, if it
    /// failed.
    fn reap_sends(&mut self, expect: Option<&Expect>) -> Result<Option<Event>, Failure> {
        // SAFETY: an all-zero work completion is valid.
        let mut wcs: [ibv_wc; SEND_SLOTS] = unsafe { std::mem::zeroed() };
        // SAFETY: send_cq is live; wcs has room for SEND_SLOTS completions.
        let n = unsafe { ibv_poll_cq(self.send_cq, wcs.len() as i32, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(os_fail(Reason::PollCq, "ibv_poll_cq (send)".into(), -n));
        }
        let mut event = None;
        for wc in wcs.iter().take(n as usize) {
            let slot = (wc.wr_id.wrapping_sub(SEND_ID) % SEND_SLOTS as u64) as usize;
            if let Some(key) = self.send_busy.get_mut(slot).and_then(Option::take) {
                if let Some(ahs) = self.ahs.as_mut() {
                    ahs.release(&key);
                }
            }
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS
                && expect.is_some_and(|e| e.wr_id == wc.wr_id)
            {
                event = Some(Event::SendFailed(wc.status, wc.vendor_err));
            }
        }
        Ok(event)
    }

    /// Polls the CQs once and handles what completed: frees finished
    /// sends, answers probes, sends the answers whose address handle came
    /// in, reposts receives. Returns how many datagrams were received and
    /// what happened to `expect` (the probe in flight), if anything.
    fn poll_once(
        &mut self,
        expect: Option<&Expect>,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Result<(usize, Option<Event>), Failure> {
        let mut event = self.reap_sends(expect)?;
        self.send_waiting(served);
        // SAFETY: an all-zero work completion is valid.
        let mut wcs: [ibv_wc; 8] = unsafe { std::mem::zeroed() };
        // SAFETY: recv_cq is live; wcs has room for 8 completions.
        let n = unsafe { ibv_poll_cq(self.recv_cq, wcs.len() as i32, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(os_fail(Reason::PollCq, "ibv_poll_cq (receive)".into(), -n));
        }
        for wc in wcs.iter().take(n as usize) {
            let slot = wc.wr_id as usize;
            if slot >= RECV_SLOTS {
                continue;
            }
            if wc.status == ibv_wc_status::IBV_WC_SUCCESS {
                if let Some(e) = self.received(slot, wc, expect, responder, served) {
                    event = Some(e);
                }
            }
            // A flushed receive (QP in error) fails to post: reported here.
            self.post_recv(slot)?;
        }
        Ok((n as usize, event))
    }

    /// Handles one received datagram in receive slot `slot`.
    fn received(
        &mut self,
        slot: usize,
        wc: &ibv_wc,
        expect: Option<&Expect>,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Option<Event> {
        let at = Instant::now();
        let len = (wc.byte_len as usize).min(SLOT);
        let has_grh = wc.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0;
        let grh = self.buf.slice(slot * SLOT, GRH_LEN as usize);
        let sender = if has_grh { grh_sender(grh) } else { None };
        let Some((gid, ipv4)) = sender else {
            served.refuse(Refusal::Foreign);
            return None;
        };
        let traffic_class = grh_traffic_class(grh, ipv4).unwrap_or(0);
        let payload_len = len.saturating_sub(GRH_LEN as usize);
        let payload = self
            .buf
            .slice(slot * SLOT + GRH_LEN as usize, payload_len)
            .to_vec();
        let d = Datagram {
            payload: &payload,
            gid,
            qpn: wc.src_qp,
            traffic_class,
        };
        match handle(&d, expect.map(|e| &e.flight), responder, at, served) {
            Handled::Reply(m) => Some(Event::Reply(at, m)),
            Handled::Answer(msg, tc) => {
                // An echo is as large as its probe (the reverse path
                // carries the same size); "not admitted" is the header.
                let size = match msg.kind {
                    Kind::Echo => payload.len(),
                    _ => HEADER_LEN,
                };
                let key = AhKey {
                    gid,
                    traffic_class: tc,
                    flow_label: flow_label(
                        u64::from(msg.nonce),
                        u64::from(msg.seq),
                        DEFAULT_FLOW_LABELS,
                    ),
                };
                self.waiting.push_back(WaitingAnswer {
                    key,
                    qpn: wc.src_qp,
                    msg,
                    size,
                    received: at,
                });
                if self.waiting.len() > WAITING_ANSWERS {
                    self.waiting.pop_front();
                    served.refuse(Refusal::AnswerFailed);
                }
                self.send_waiting(served);
                None
            }
            Handled::Dropped => None,
        }
    }

    /// Sends the waiting answers whose address handle is there, in order;
    /// drops those whose handle failed or that waited too long.
    fn send_waiting(&mut self, served: &mut Served) {
        let mut keep = std::collections::VecDeque::new();
        while let Some(w) = self.waiting.pop_front() {
            match self.handle_for(&w.key) {
                Lookup::Ready(ah) => {
                    let mut msg = w.msg;
                    if msg.kind == Kind::Echo {
                        msg.hold_ns =
                            u32::try_from(w.received.elapsed().as_nanos()).unwrap_or(u32::MAX);
                    }
                    match self.send(w.key, ah, w.qpn, &msg.encode(w.size)) {
                        Ok(_) if msg.kind == Kind::Echo => served.answered += 1,
                        Ok(_) => served.not_admitted += 1,
                        // A failed answer is the peer's loss to see, not
                        // this port's error.
                        Err(_) => served.refuse(Refusal::AnswerFailed),
                    }
                }
                Lookup::Waiting if w.received.elapsed() < ANSWER_PATIENCE => keep.push_back(w),
                Lookup::Waiting | Lookup::Failed(_) => served.refuse(Refusal::AnswerFailed),
            }
        }
        self.waiting = keep;
    }
}

/// The prefix length of `addr` on this host's interfaces (`getifaddrs`):
/// with the GID's IPv4 address, the subnet of the rail rule. `None` when
/// no interface holds the address.
pub fn ipv4_prefix_len(addr: Ipv4Addr) -> Option<u8> {
    let mut head: *mut libc::ifaddrs = ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_netmask.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr of its family.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) != libc::AF_INET {
            continue;
        }
        // SAFETY: AF_INET: both are sockaddr_in.
        let (a, m) = unsafe {
            (
                (*ifa.ifa_addr.cast::<libc::sockaddr_in>()).sin_addr.s_addr,
                (*ifa.ifa_netmask.cast::<libc::sockaddr_in>())
                    .sin_addr
                    .s_addr,
            )
        };
        if Ipv4Addr::from(u32::from_be(a)) == addr {
            found = u8::try_from(u32::from_be(m).leading_ones()).ok();
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// The probe in flight: whose answer ends a ping.
struct Expect {
    flight: InFlight,
    /// The probe's send.
    wr_id: u64,
}

enum Event {
    /// The answer to the probe in flight, received at this instant.
    Reply(Instant, Message),
    SendFailed(u32, u32),
}

/// The sender's GID from the 40 bytes a UD receive starts with, as
/// rdma-core's `get_grh_header_version` decides: on RoCE v2 over IPv4 the
/// last 20 bytes are the IPv4 header (version 4, IHL 5, valid checksum) and
/// the GID is the IPv4-mapped source address; otherwise it is an IPv6
/// header or IB GRH whose source GID sits at bytes 8..24.
pub fn sender_gid(grh: &[u8]) -> Option<Ipv6Addr> {
    grh_sender(grh).map(|(gid, _)| gid)
}

/// The sender's GID and whether the header is RoCE v2 over IPv4.
fn grh_sender(grh: &[u8]) -> Option<(Ipv6Addr, bool)> {
    let grh: &[u8; 40] = grh.get(..40)?.try_into().ok()?;
    let ip6_version = grh[0] >> 4;
    let ip4 = &grh[20..40];
    let ipv4 = if ip6_version != 6 {
        if ip4[0] >> 4 != 4 {
            return None;
        }
        true
    } else {
        ip4[0] == 0x45 && ipv4_checksum_ok(ip4)
    };
    if ipv4 {
        let src = Ipv4Addr::new(ip4[12], ip4[13], ip4[14], ip4[15]);
        return Some((src.to_ipv6_mapped(), true));
    }
    let mut sgid = [0u8; 16];
    sgid.copy_from_slice(&grh[8..24]);
    Some((Ipv6Addr::from(sgid), false))
}

/// Whether a 20-byte IPv4 header carries a valid header checksum.
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    if h.len() < 20 {
        return false;
    }
    let mut sum = 0u32;
    for (i, pair) in h[..20].chunks(2).enumerate() {
        if i == 5 {
            continue;
        }
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let check = !(sum as u16);
    check == u16::from_be_bytes([h[10], h[11]])
}

impl PeerPort for UdPort {
    fn local(&self) -> (Ipv6Addr, u32, u32) {
        (self.gid, self.qpn, self.mtu)
    }

    fn ping(
        &mut self,
        to: &Endpoint,
        probe: &Probe,
        timeout: Duration,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Outcome {
        // Answer what is waiting first, so that its answers do not count
        // against this probe's round trip.
        self.serve(responder, served);
        // The address handle comes before the clock starts; the port goes
        // on answering while the resolver waits for the neighbour.
        let key = AhKey {
            gid: to.gid,
            traffic_class: probe.traffic_class,
            flow_label: probe.flow_label,
        };
        let give_up = Instant::now() + timeout;
        let ah = loop {
            match self.handle_for(&key) {
                Lookup::Ready(ah) => break ah,
                Lookup::Failed(_) => return Outcome::Unresolved,
                Lookup::Waiting => {}
            }
            if Instant::now() >= give_up {
                return Outcome::Unresolved;
            }
            self.serve(responder, served);
            std::thread::sleep(Duration::from_micros(100));
        };
        let payload =
            Message::probe(probe.nonce, probe.seq, probe.incarnation).encode(probe.size as usize);
        let started = Instant::now();
        let wr_id = match self.send(key, ah, to.qpn, &payload) {
            Ok(s) => s,
            Err(f) => return Outcome::Failed(f),
        };
        let expect = Expect {
            flight: InFlight {
                gid: to.gid,
                qpn: to.qpn,
                nonce: probe.nonce,
                seq: probe.seq,
            },
            wr_id,
        };
        let deadline = started + timeout;
        let mut spins = 0u32;
        loop {
            match self
                .poll_once(Some(&expect), responder, served)
                .map(|(_, e)| e)
            {
                Ok(Some(Event::Reply(at, m))) => {
                    return match m.kind {
                        Kind::NotAdmitted => Outcome::NotAdmitted {
                            incarnation: m.incarnation,
                        },
                        _ => Outcome::Answered {
                            rtt: (at - started)
                                .saturating_sub(Duration::from_nanos(u64::from(m.hold_ns))),
                            incarnation: m.incarnation,
                        },
                    }
                }
                Ok(Some(Event::SendFailed(status, vendor))) => {
                    return Outcome::Failed(Failure::new(
                        Reason::Completion(status),
                        format!(
                            "work completion {} on the probe's send (vendor error {vendor:#x})",
                            crate::wc_status_name(status)
                        ),
                    ))
                }
                Ok(None) => {}
                Err(f) => return Outcome::Failed(f),
            }
            if Instant::now() >= deadline {
                return Outcome::Lost;
            }
            spins += 1;
            if spins < 2000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn serve(&mut self, responder: &mut Responder, served: &mut Served) {
        // Bounded: at most the receive ring and the sends, then return.
        for _ in 0..(RECV_SLOTS + SEND_SLOTS) {
            match self.poll_once(None, responder, served) {
                Ok((0, _)) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }

    fn idle(&mut self, timeout: Duration, responder: &mut Responder, served: &mut Served) {
        // Arm first, then drain: a completion that lands after the drain
        // raises an event, one that landed before is handled by the drain.
        // SAFETY: recv_cq is live.
        let armed = unsafe { ibv_req_notify_cq(self.recv_cq, 0) } == 0;
        let before = *served;
        self.serve(responder, served);
        // Answers waiting for an address handle are sent from polls: a
        // port holding some wakes at least every millisecond.
        if *served != before || !armed || !self.waiting.is_empty() {
            if !armed || !self.waiting.is_empty() {
                std::thread::sleep(timeout.min(Duration::from_millis(1)));
            }
            return;
        }
        // SAFETY: channel is live.
        let fd = unsafe { (*self.channel).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready > 0 {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: the channel is live and non-blocking; an event got is
            // acknowledged at once (ibv_destroy_cq waits for every ack).
            unsafe {
                if ibv_get_cq_event(self.channel, &mut cq, &mut ctx) == 0 {
                    ibv_ack_cq_events(cq, 1);
                }
            }
            self.serve(responder, served);
        }
    }
}

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
    }
}
