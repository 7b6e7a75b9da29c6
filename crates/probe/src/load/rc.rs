//! Both sides of a stream on libibverbs: per port, a PD, one registered
//! buffer (the largest message; host memory, or GPU memory through
//! dma-buf), one CQ with a completion channel, and the RC queue pairs.
//! Through `rdma-mummy-sys` (sideway's sys crate, loaded at run time like
//! sideway) for what sideway 0.4 does not offer: waiting on the completion
//! channel's descriptor, `ibv_reg_dmabuf_mr`, writes with immediate.
//!
//! Completions are waited for in `poll(2)` on the completion channel's
//! descriptor and an eventfd (the responder's waker) together: an armed
//! CQ is drained once more before sleeping, so no completion is missed,
//! and nothing ever sleeps for a fixed time.
//!
//! Every object is a raw pointer in [`RcPort`], created one at a time into
//! it, so that `Drop` frees what exists at any step, in dependency order:
//! QPs, CQ, channel, MR, buffer, PD, context.
#![allow(unsafe_code)]

use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use rdma_mummy_sys::{
    ibv_access_flags, ibv_ack_cq_events, ibv_alloc_pd, ibv_close_device, ibv_comp_channel,
    ibv_context, ibv_cq, ibv_create_cq, ibv_create_qp, ibv_dealloc_pd, ibv_dereg_mr,
    ibv_destroy_comp_channel, ibv_destroy_cq, ibv_destroy_qp, ibv_get_cq_event, ibv_gid,
    ibv_modify_qp, ibv_mr, ibv_mtu, ibv_pd, ibv_poll_cq, ibv_port_attr, ibv_port_state,
    ibv_post_recv, ibv_post_send, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_init_attr,
    ibv_qp_state, ibv_qp_type, ibv_query_gid, ibv_query_port, ibv_recv_wr, ibv_reg_dmabuf_mr,
    ibv_reg_mr, ibv_req_notify_cq, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wc, ibv_wr_opcode,
};

use super::gpu::{GpuBuffer, GpuMemory};
use super::{
    Completion, Connect, LoadVerbs, MemoryUsed, MemoryWanted, PortSpec, QpSet, Receiver, Requester,
    Waker, Window,
};
use crate::peer_ibverbs::{last_errno, mtu_bytes, nonblocking_channel, open_device, os_fail};
use crate::verbs::OpenError;
use crate::{Failure, Reason};

/// RC retransmission timeout exponent (4.096 µs × 2^14 ≈ 67 ms) and retry
/// count, perftest's defaults (`DEF_QP_TIME` 14, 7 retries): a lost packet
/// is retried for about half a second before the write fails.
const QP_TIMEOUT: u8 = 14;
const QP_RETRY: u8 = 7;
/// 7: retry without end on "receiver not ready"; the responder reposts.
const RNR_RETRY: u8 = 7;
/// 0.64 ms between RNR retries (IBTA's table, value 12; perftest's).
const MIN_RNR_TIMER: u8 = 12;
const HOP_LIMIT: u8 = 64;
/// `IBV_LINK_LAYER_ETHERNET` (a `#define` in verbs.h).
const LINK_LAYER_ETHERNET: u8 = 2;
/// Completions taken per `ibv_poll_cq`.
const POLL_BATCH: usize = 64;

/// Opens ports with libibverbs; GPU memory through `gpu` where asked.
#[derive(Clone, Default)]
pub struct IbLoadVerbs {
    gpu: Option<Arc<dyn GpuMemory>>,
}

impl IbLoadVerbs {
    pub fn new(gpu: Option<Arc<dyn GpuMemory>>) -> Self {
        IbLoadVerbs { gpu }
    }
}

impl LoadVerbs for IbLoadVerbs {
    type Requester = RcPort;
    type Receiver = RcPort;

    fn requester(&self, spec: &PortSpec) -> Result<RcPort, OpenError> {
        RcPort::open(spec, false, self.gpu.as_deref())
    }

    fn receiver(&self, spec: &PortSpec) -> Result<RcPort, OpenError> {
        RcPort::open(spec, true, self.gpu.as_deref())
    }
}

/// Where the registered buffer lives.
enum Buffer {
    None,
    Host {
        ptr: *mut u8,
        layout: std::alloc::Layout,
    },
    Gpu(GpuBuffer),
}

impl Buffer {
    fn addr(&self) -> u64 {
        match self {
            Buffer::None => 0,
            Buffer::Host { ptr, .. } => *ptr as u64,
            Buffer::Gpu(g) => g.dptr,
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Buffer::Host { ptr, layout } = self {
            // SAFETY: allocated with this layout in `host_buffer`, freed once.
            unsafe { std::alloc::dealloc(*ptr, *layout) };
        }
    }
}

/// One port's side of a stream.
pub struct RcPort {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    channel: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qps: Vec<*mut ibv_qp>,
    mr: *mut ibv_mr,
    buf: Buffer,
    memory: MemoryUsed,
    wake: Option<Arc<OwnedFd>>,
    /// Whether the CQ is armed for one event.
    armed: bool,
    port: u8,
    sgid_index: u8,
    gid: Ipv6Addr,
    lid: u16,
    mtu: ibv_mtu::Type,
    roce: bool,
    traffic_class: u8,
    psn: u32,
    buffer_len: u64,
    responder: bool,
    remote: Option<Window>,
}

// SAFETY: a port is owned and used by one thread at a time; libibverbs
// objects are not tied to the thread that created them.
unsafe impl Send for RcPort {}

impl Drop for RcPort {
    fn drop(&mut self) {
        // Return values are ignored: after a device removal every destroy
        // fails (EIO) and the kernel has released the objects anyway.
        // SAFETY: each pointer is null or an object created by this port,
        // destroyed only here, in dependency order.
        unsafe {
            for qp in self.qps.drain(..) {
                ibv_destroy_qp(qp);
            }
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.channel.is_null() {
                ibv_destroy_comp_channel(self.channel);
            }
            if !self.mr.is_null() {
                ibv_dereg_mr(self.mr);
            }
        }
        // The buffer (and a GPU buffer's dma-buf) after its registration.
        self.buf = Buffer::None;
        // SAFETY: as above.
        unsafe {
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            if !self.ctx.is_null() {
                ibv_close_device(self.ctx);
            }
        }
    }
}

fn mtu_of(bytes: u32) -> ibv_mtu::Type {
    match bytes {
        b if b >= 4096 => ibv_mtu::IBV_MTU_4096,
        b if b >= 2048 => ibv_mtu::IBV_MTU_2048,
        b if b >= 1024 => ibv_mtu::IBV_MTU_1024,
        b if b >= 512 => ibv_mtu::IBV_MTU_512,
        _ => ibv_mtu::IBV_MTU_256,
    }
}

/// A random first PSN (24 bits), so that a late packet of an earlier
/// session never fits a new one.
fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: a valid buffer of its length.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let r = if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        std::process::id() ^ 0x5a5a
    };
    r & 0xFF_FFFF
}

impl RcPort {
    fn open(
        spec: &PortSpec,
        responder: bool,
        gpu: Option<&dyn GpuMemory>,
    ) -> Result<RcPort, OpenError> {
        let ctx = open_device(&spec.device)?;
        let mut p = RcPort {
            ctx,
            pd: ptr::null_mut(),
            channel: ptr::null_mut(),
            cq: ptr::null_mut(),
            qps: Vec::new(),
            mr: ptr::null_mut(),
            buf: Buffer::None,
            memory: MemoryUsed::Host { fallback: None },
            wake: None,
            armed: false,
            port: spec.port,
            sgid_index: 0,
            gid: Ipv6Addr::UNSPECIFIED,
            lid: 0,
            mtu: ibv_mtu::IBV_MTU_1024,
            roce: true,
            traffic_class: spec.traffic_class,
            psn: random_psn(),
            buffer_len: spec.buffer_bytes,
            responder,
            remote: None,
        };
        p.setup(spec, gpu)?;
        Ok(p)
    }

    fn setup(&mut self, spec: &PortSpec, gpu: Option<&dyn GpuMemory>) -> Result<(), Failure> {
        let (device, port) = (&spec.device, spec.port);
        // SAFETY: an all-zero ibv_port_attr is valid (plain integers).
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; attr is a valid out-pointer.
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
        self.mtu = attr.active_mtu;
        self.lid = attr.lid;
        self.roce = attr.link_layer == LINK_LAYER_ETHERNET;
        self.sgid_index = u8::try_from(spec.gid_index).map_err(|_| {
            Failure::new(
                Reason::GidIndex,
                format!(
                    "GID index {} does not fit the 8-bit sgid_index",
                    spec.gid_index
                ),
            )
        })?;
        // SAFETY: an all-zero GID is a valid value of the union.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; gid is a valid out-pointer.
        let rc = unsafe { ibv_query_gid(self.ctx, port, i32::from(self.sgid_index), &mut gid) };
        // SAFETY: every bit pattern is a valid [u8; 16].
        self.gid = Ipv6Addr::from(unsafe { gid.raw });
        if rc != 0 || self.gid.is_unspecified() {
            return Err(Failure::new(
                Reason::GidIndex,
                format!(
                    "GID index {} of {device}/{port} is empty or unreadable",
                    spec.gid_index
                ),
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
        self.register(spec, gpu)?;
        self.completion_queue(spec)?;
        for i in 0..spec.qps.max(1) {
            let qp = self.create_qp(spec)?;
            self.qps.push(qp);
            self.to_init(qp)
                .map_err(|e| Failure::new(e.reason, format!("QP {i}: {}", e.message)))?;
        }
        if self.responder {
            // SAFETY: eventfd with flags only.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(os_fail(Reason::CreateCq, "eventfd".into(), last_errno()));
            }
            // SAFETY: a fresh descriptor owned by nothing else.
            self.wake = Some(Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        Ok(())
    }

    /// The buffer and its memory region: GPU memory when asked and
    /// possible, else host memory (with the reason kept).
    fn register(&mut self, spec: &PortSpec, gpu: Option<&dyn GpuMemory>) -> Result<(), Failure> {
        let len = usize::try_from(spec.buffer_bytes.max(4096))
            .map_err(|_| Failure::new(Reason::RegMr, "buffer larger than the address space"))?;
        let access = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | if self.responder {
                ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            } else {
                0
            }) as i32;
        if let MemoryWanted::Gpu { pci_address } = &spec.memory {
            let why = match gpu {
                None => "no CUDA driver library was loaded".to_string(),
                Some(g) => match g.allocate(pci_address, len) {
                    Err(e) => e,
                    Ok(b) => {
                        // SAFETY: the dma-buf covers [dptr - offset, + len];
                        // the buffer outlives the MR (Drop order).
                        let mr = unsafe {
                            ibv_reg_dmabuf_mr(
                                self.pd,
                                b.offset,
                                b.len,
                                b.dptr,
                                b.fd.as_raw_fd(),
                                access,
                            )
                        };
                        if mr.is_null() {
                            format!(
                                "ibv_reg_dmabuf_mr: {}",
                                std::io::Error::from_raw_os_error(last_errno())
                            )
                        } else {
                            self.mr = mr;
                            self.buf = Buffer::Gpu(b);
                            self.memory = MemoryUsed::Gpu {
                                pci_address: pci_address.clone(),
                            };
                            return Ok(());
                        }
                    }
                },
            };
            self.memory = MemoryUsed::Host {
                fallback: Some(why),
            };
        }
        let layout = std::alloc::Layout::from_size_align(len, 4096)
            .map_err(|e| Failure::new(Reason::RegMr, format!("buffer layout: {e}")))?;
        // SAFETY: a non-zero size; zeroed so no host data leaves the node.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Failure::new(
                Reason::RegMr,
                format!("cannot allocate {len} bytes"),
            ));
        }
        self.buf = Buffer::Host { ptr, layout };
        // SAFETY: the buffer lives until Drop, after the MR is deregistered.
        self.mr = unsafe { ibv_reg_mr(self.pd, ptr.cast(), len, access) };
        if self.mr.is_null() {
            let e = last_errno();
            let reason = if matches!(e, libc::ENOMEM | libc::EPERM | libc::EAGAIN) {
                Reason::Memlock
            } else {
                Reason::RegMr
            };
            return Err(os_fail(reason, format!("ibv_reg_mr({len} bytes)"), e));
        }
        Ok(())
    }

    fn completion_queue(&mut self, spec: &PortSpec) -> Result<(), Failure> {
        self.channel = nonblocking_channel(self.ctx)?;
        let cqe = i32::try_from(spec.qps.max(1) * spec.depth.max(1) + 1).unwrap_or(i32::MAX);
        // SAFETY: ctx and the channel are live; no context pointer.
        self.cq = unsafe { ibv_create_cq(self.ctx, cqe, ptr::null_mut(), self.channel, 0) };
        if self.cq.is_null() {
            return Err(os_fail(
                Reason::CreateCq,
                "ibv_create_cq".into(),
                last_errno(),
            ));
        }
        Ok(())
    }

    fn create_qp(&mut self, spec: &PortSpec) -> Result<*mut ibv_qp, Failure> {
        // SAFETY: an all-zero init attribute is valid.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.cq;
        init.recv_cq = self.cq;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        let depth = spec.depth.max(1);
        if self.responder {
            init.cap.max_send_wr = 1;
            init.cap.max_recv_wr = depth;
        } else {
            init.cap.max_send_wr = depth;
            init.cap.max_recv_wr = 1;
        }
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: pd and cq are live; init is valid.
        let qp = unsafe { ibv_create_qp(self.pd, &mut init) };
        if qp.is_null() {
            return Err(os_fail(
                Reason::CreateQp,
                "ibv_create_qp (RC)".into(),
                last_errno(),
            ));
        }
        Ok(qp)
    }

    fn modify(
        &self,
        qp: *mut ibv_qp,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        reason: Reason,
        what: &str,
    ) -> Result<(), Failure> {
        // SAFETY: qp is live; the mask names only fields the caller set.
        let rc = unsafe { ibv_modify_qp(qp, attr, mask.0 as i32) };
        if rc != 0 {
            return Err(os_fail(reason, what.into(), rc));
        }
        Ok(())
    }

    fn to_init(&self, qp: *mut ibv_qp) -> Result<(), Failure> {
        // SAFETY: an all-zero QP attribute is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.port;
        a.qp_access_flags = if self.responder {
            ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
        } else {
            0
        };
        let m = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        self.modify(qp, &mut a, m, Reason::QpInit, "RC QP RESET→INIT")
    }

    fn to_rts(&self, qp: *mut ibv_qp, remote: &QpSet, dest: u32) -> Result<(), Failure> {
        // SAFETY: an all-zero QP attribute is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = mtu_of(mtu_bytes(self.mtu).min(remote.mtu));
        a.dest_qp_num = dest;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = MIN_RNR_TIMER;
        a.ah_attr.port_num = self.port;
        if self.roce || remote.lid == 0 {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid {
                raw: remote.gid.octets(),
            };
            a.ah_attr.grh.sgid_index = self.sgid_index;
            a.ah_attr.grh.hop_limit = HOP_LIMIT;
            a.ah_attr.grh.traffic_class = self.traffic_class;
        }
        if !self.roce {
            a.ah_attr.dlid = remote.lid;
        }
        let m = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_AV
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        self.modify(qp, &mut a, m, Reason::QpRtr, "RC QP INIT→RTR")?;
        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = self.psn;
        a.timeout = QP_TIMEOUT;
        a.retry_cnt = QP_RETRY;
        a.rnr_retry = RNR_RETRY;
        a.max_rd_atomic = 1;
        let m = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(qp, &mut a, m, Reason::QpRts, "RC QP RTR→RTS")
    }
}

mod datapath;
