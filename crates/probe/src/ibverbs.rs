//! The verbs layer on libibverbs, through `sideway` (which loads
//! libibverbs at run time: a host without rdma-core gets an error here, not
//! a binary that fails to start). The only module with `unsafe`: buffer
//! registration and the addresses handed to work requests.
//!
//! A session holds, for one target: the device context, a PD, one
//! registered buffer (source half, destination half), one CQ and two RC
//! QPs (requester A, responder B) connected through the port's GID. A
//! round is a receive on B, then on A an RDMA WRITE of the payload into
//! B's half and a SEND of the tag; RC ordering makes the WRITE visible
//! before the SEND's receive completes. The CQ delivers to a completion
//! channel: a round waits for its completions in `poll(2)` on the
//! channel's descriptor up to its deadline (`wait`), never by polling in
//! a loop, so a port whose probes time out costs no CPU meanwhile.
#![allow(unsafe_code)]

use std::error::Error as _;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, PollCompletionQueueError,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{
    DeviceContext, LinkLayer as VerbsLinkLayer, Mtu, PortAttr, PortState,
};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use crate::verbs::{qp_path, Landed, OpenError, QpPath, Session, Verbs};
use crate::{Failure, Peer, ProbeTarget, Reason};

/// Offsets in the registered buffer.
const SRC: usize = 0;
const TAG_SRC: usize = 1024;
const DST: usize = 2048;
const TAG_DST: usize = 3072;
const TAG_LEN: usize = 4;

const WR_RECV: u64 = 1;
const WR_WRITE: u64 = 2;
const WR_SEND: u64 = 3;

/// RC retransmission timeout exponent (4.096 µs × 2^14 ≈ 67 ms) and retry
/// count: a lost packet is retried for about half a second before the
/// completion reports `IBV_WC_RETRY_EXC_ERR`, well inside the round timeout.
const QP_TIMEOUT: u8 = 14;
const QP_RETRY: u8 = 7;
const PSN: u32 = 0x1234;

/// Opens sessions with libibverbs.
#[derive(Debug, Default)]
pub struct IbVerbs;

impl IbVerbs {
    pub fn new() -> Self {
        IbVerbs
    }
}

/// The errno deepest in an error's source chain. sideway wraps the
/// `io::Error` in a `#[error(transparent)]` kind enum, whose `source()`
/// skips the `io::Error` itself, so a level that is no `io::Error` is also
/// read for the "(os error N)" its transparent Display ends with; without
/// that, EACCES from ibv_open_device and ENOMEM from ibv_reg_mr were lost
/// and neither the device_open hint nor the memlock reason could apply.
fn errno_of(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut found = None;
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            found = io.raw_os_error().or(found);
        } else if let Some(n) = os_error_in(&err.to_string()) {
            found = Some(n);
        }
        cur = err.source();
    }
    found
}

/// N of a trailing "(os error N)", as `io::Error`'s Display writes it.
fn os_error_in(text: &str) -> Option<i32> {
    let rest = text.trim_end().strip_suffix(')')?;
    let at = rest.rfind("(os error ")?;
    rest.get(at + "(os error ".len()..)?.parse().ok()
}

fn fail<E: std::error::Error + 'static>(reason: Reason, what: &str, e: &E) -> Failure {
    Failure::with_errno(reason, errno_of(e), format!("{what}: {e}"))
}

impl Verbs for IbVerbs {
    type Session = IbSession;

    fn open(&mut self, target: &ProbeTarget, buffer_len: usize) -> Result<IbSession, OpenError> {
        match target.peer {
            Peer::Loopback => {}
        }
        let list = DeviceList::new().map_err(|e| {
            OpenError::Unavailable(format!(
                "libibverbs cannot list RDMA devices ({}): rdma-core (libibverbs1 and the \
                 provider) missing or no uverbs device",
                e.source()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| e.to_string())
            ))
        })?;
        if list.is_empty() {
            return Err(OpenError::Unavailable(
                "libibverbs lists no RDMA device (no /dev/infiniband/uverbs* or no provider)"
                    .into(),
            ));
        }
        let device = list
            .iter()
            .find(|d| d.name() == target.device)
            .ok_or_else(|| {
                Failure::new(
                    Reason::DeviceOpen,
                    format!(
                        "{} is not listed by libibverbs (no uverbs device or provider for it)",
                        target.device
                    ),
                )
            })?;
        let ctx = device.open().map_err(|e| {
            let node = uverbs_node(&target.device);
            // libibverbs reports the errno of its last fallback (ENOENT
            // even when /dev/infiniband/uverbsN exists but is 0600), so
            // the node is opened here once to learn the real refusal.
            let errno = node
                .as_deref()
                .and_then(open_refusal)
                .or_else(|| errno_of(&e));
            Failure::with_errno(
                Reason::DeviceOpen,
                errno,
                format!(
                    "ibv_open_device({}{}): {e}",
                    target.device,
                    node.as_deref()
                        .map(|n| format!(", {n}"))
                        .unwrap_or_default()
                ),
            )
        })?;
        drop(list);
        Ok(IbSession::create(ctx, target, buffer_len)?)
    }
}

/// The character device libibverbs opens for `device`
/// (`/dev/infiniband/uverbsN`), from the `ibdev` file of each
/// `/sys/class/infiniband_verbs/uverbsN`, so that a refused open names the
/// file whose permissions matter. `None` when sysfs does not say.
fn uverbs_node(device: &str) -> Option<String> {
    let dir = std::fs::read_dir("/sys/class/infiniband_verbs").ok()?;
    dir.flatten().find_map(|entry| {
        let ibdev = std::fs::read_to_string(entry.path().join("ibdev")).ok()?;
        (ibdev.trim() == device)
            .then(|| format!("/dev/infiniband/{}", entry.file_name().to_string_lossy()))
    })
}

/// The errno of opening `node` read-write, as libibverbs does; `None`
/// when it opens (the descriptor is closed at once).
fn open_refusal(node: &str) -> Option<i32> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(node)
    {
        Ok(_) => None,
        Err(e) => e.raw_os_error(),
    }
}

/// A verbs resource whose destructor may panic, dropped so that the panic
/// stays here. sideway's QP and CQ destructors assert that the destroy
/// succeeded (`assert_eq!(ibv_destroy_qp(..), 0)`), and once the device is
/// gone (hot-unplug, driver reload: the kernel disassociates the context)
/// every destroy fails with EIO, which libibverbs passes on unless
/// RDMAV_ALLOW_DISASSOC_DESTROY is set (`verbs_is_destroy_err`). Dropping a
/// session would then panic in its first QP and again in the second while
/// the first panic unwinds: a panic during unwinding aborts the process,
/// the whole exporter. Each resource's panic is caught on its own (the
/// resource is leaked by libibverbs, as it is gone with the device), and
/// the others are still released.
struct Isolated<T>(ManuallyDrop<T>);

impl<T> Isolated<T> {
    fn new(value: T) -> Self {
        Isolated(ManuallyDrop::new(value))
    }
}

impl<T> Deref for Isolated<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Isolated<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> Drop for Isolated<T> {
    fn drop(&mut self) {
        let inner = &mut self.0;
        // SAFETY: the value is dropped here, once, and never used again
        // (this is its wrapper's destructor).
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| unsafe { ManuallyDrop::drop(inner) }));
    }
}

/// The resources of one target. Field order is drop order: QPs before the
/// CQ they use, the MR before the buffer it maps, all before the PD and
/// the context.
pub struct IbSession {
    qp_a: Isolated<BasicQueuePair>,
    qp_b: Isolated<BasicQueuePair>,
    cq: Isolated<Arc<BasicCompletionQueue>>,
    /// The CQ's completion events (after the CQ: it is destroyed first).
    channel: Isolated<Arc<CompletionChannel>>,
    mr: Arc<MemoryRegion>,
    buf: RegisteredBuffer,
    _pd: Arc<ProtectionDomain>,
    ctx: Arc<DeviceContext>,
    port: u8,
    path: QpPath,
}

/// Memory the device reads and writes; only touched through its raw
/// pointer, and only while no work request on it is outstanding.
struct RegisteredBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is owned by one session, used by one thread at a time.
unsafe impl Send for RegisteredBuffer {}

impl RegisteredBuffer {
    fn new(len: usize) -> Self {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let len = b.len();
        RegisteredBuffer {
            ptr: Box::into_raw(b).cast::<u8>(),
            len,
        }
    }

    fn addr(&self, offset: usize) -> u64 {
        self.ptr as u64 + offset.min(self.len) as u64
    }

    fn write(&mut self, offset: usize, data: &[u8]) {
        if offset.saturating_add(data.len()) <= self.len {
            // SAFETY: in bounds (checked), no request outstanding.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len())
            };
        }
    }

    fn zero(&mut self, offset: usize, len: usize) {
        if offset.saturating_add(len) <= self.len {
            // SAFETY: in bounds (checked), no request outstanding.
            unsafe { std::ptr::write_bytes(self.ptr.add(offset), 0, len) };
        }
    }

    fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        if offset.saturating_add(len) > self.len {
            return Vec::new();
        }
        let mut out = vec![0u8; len];
        // SAFETY: in bounds (checked); the completions were polled, so the
        // device is done writing.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), len) };
        out
    }
}

impl Drop for RegisteredBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from Box::into_raw of a boxed slice of len.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )))
        };
    }
}

impl IbSession {
    fn create(
        ctx: Arc<DeviceContext>,
        target: &ProbeTarget,
        buffer_len: usize,
    ) -> Result<Self, Failure> {
        let port_attr = active_port(&ctx, target)?;
        let (gid, sgid_index) = source_gid(&ctx, target)?;
        let pd = ctx
            .alloc_pd()
            .map_err(|e| fail(Reason::AllocPd, "ibv_alloc_pd", &e))?;
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        // The buffer is bound before the MR: an error below drops the MR first.
        let (buf, mr) = register_buffer(&pd, buffer_len, access)?;
        let (channel, cq, mut qp_a, mut qp_b) = loopback_qps(&ctx, &pd)?;

        let path = qp_path(target, mtu_bytes(port_attr.active_mtu()));
        let link = Link {
            target,
            access,
            gid,
            sgid_index,
            roce: matches!(port_attr.link_layer(), VerbsLinkLayer::Ethernet),
            lid: port_attr.lid(),
            mtu: path_mtu(path.mtu),
            traffic_class: path.traffic_class,
        };
        let (qpn_a, qpn_b) = (qp_a.qp_number(), qp_b.qp_number());
        link.connect(&mut qp_a, qpn_b, "requester")?;
        link.connect(&mut qp_b, qpn_a, "responder")?;
        Ok(IbSession {
            qp_a,
            qp_b,
            cq,
            channel,
            mr,
            buf,
            _pd: pd,
            ctx,
            port: target.port,
            path,
        })
    }
}

/// The target's port, which must be ACTIVE.
fn active_port(ctx: &DeviceContext, target: &ProbeTarget) -> Result<PortAttr, Failure> {
    let port = target.port;
    let port_attr = ctx.query_port(port).map_err(|e| {
        fail(
            Reason::QueryPort,
            &format!("ibv_query_port(port {port})"),
            &e,
        )
    })?;
    if !matches!(port_attr.port_state(), PortState::Active) {
        return Err(Failure::new(
            Reason::PortDown,
            format!("{}/{port} is not ACTIVE", target.device),
        ));
    }
    Ok(port_attr)
}

/// The target's GID (not empty) and its index as the 8-bit `sgid_index`.
fn source_gid(ctx: &DeviceContext, target: &ProbeTarget) -> Result<(Gid, u8), Failure> {
    let port = target.port;
    let gid = ctx.query_gid(port, target.gid_index).map_err(|e| {
        fail(
            Reason::GidIndex,
            &format!("GID index {} of {}/{port}", target.gid_index, target.device),
            &e,
        )
    })?;
    if gid.is_zero() {
        return Err(Failure::new(
            Reason::GidIndex,
            format!(
                "GID index {} of {}/{port} is empty (no address behind it)",
                target.gid_index, target.device
            ),
        ));
    }
    let sgid_index = u8::try_from(target.gid_index).map_err(|_| {
        Failure::new(
            Reason::GidIndex,
            format!(
                "GID index {} does not fit the 8-bit sgid_index",
                target.gid_index
            ),
        )
    })?;
    Ok((gid, sgid_index))
}

/// The session's buffer (room for the tag at least), registered and zeroed.
fn register_buffer(
    pd: &Arc<ProtectionDomain>,
    buffer_len: usize,
    access: AccessFlags,
) -> Result<(RegisteredBuffer, Arc<MemoryRegion>), Failure> {
    let mut buf = RegisteredBuffer::new(buffer_len.max(TAG_DST + TAG_LEN));
    // SAFETY: the buffer outlives the MR (field order of IbSession, and
    // the caller binds the buffer before the MR).
    let mr = unsafe { pd.reg_mr(buf.ptr as usize, buf.len, access) }
        .map_err(|e| fail(Reason::RegMr, &format!("ibv_reg_mr({} bytes)", buf.len), &e))?;
    buf.zero(0, buf.len);
    Ok((buf, mr))
}

/// The QP pair sharing one CQ, and the CQ's completion channel.
type LoopbackQps = (
    Isolated<Arc<CompletionChannel>>,
    Isolated<Arc<BasicCompletionQueue>>,
    Isolated<BasicQueuePair>,
    Isolated<BasicQueuePair>,
);

/// A completion channel (non-blocking), one CQ on it and two RC QPs
/// (requester, responder) on the CQ, in RESET.
fn loopback_qps(
    ctx: &Arc<DeviceContext>,
    pd: &Arc<ProtectionDomain>,
) -> Result<LoopbackQps, Failure> {
    let channel = Isolated::new(
        ctx.create_comp_channel()
            .map_err(|e| fail(Reason::CreateCq, "ibv_create_comp_channel", &e))?,
    );
    channel
        .set_nonblocking(true)
        .map_err(|e| fail(Reason::CreateCq, "O_NONBLOCK on the completion channel", &e))?;
    let mut cq_builder = ctx.create_cq_builder();
    cq_builder.setup_cqe(8).setup_comp_channel(&channel, 0);
    // Wrapped as soon as created: an error below drops them too.
    let cq = Isolated::new(
        cq_builder
            .build()
            .map_err(|e| fail(Reason::CreateCq, "ibv_create_cq", &e))?,
    );
    let mut qp_builder = pd.create_qp_builder();
    qp_builder
        .setup_max_send_wr(4)
        .setup_max_recv_wr(4)
        .setup_max_send_sge(1)
        .setup_max_recv_sge(1)
        .setup_send_cq(Arc::clone(&cq))
        .setup_recv_cq(Arc::clone(&cq));
    let qp_a = Isolated::new(
        qp_builder
            .build()
            .map_err(|e| fail(Reason::CreateQp, "ibv_create_qp (requester)", &e))?,
    );
    let qp_b = Isolated::new(
        qp_builder
            .build()
            .map_err(|e| fail(Reason::CreateQp, "ibv_create_qp (responder)", &e))?,
    );
    Ok((channel, cq, qp_a, qp_b))
}

/// How the two QPs of a session reach each other through the port.
struct Link<'a> {
    target: &'a ProbeTarget,
    access: AccessFlags,
    gid: Gid,
    sgid_index: u8,
    /// RoCE (GRH always) rather than InfiniBand (LID, GRH for a GID index).
    roce: bool,
    lid: u16,
    mtu: Mtu,
    traffic_class: u8,
}

impl Link<'_> {
    /// Takes `qp` through RESET→INIT→RTR→RTS, connected to QP `remote`.
    fn connect(&self, qp: &mut BasicQueuePair, remote: u32, name: &str) -> Result<(), Failure> {
        let (port, gid_index) = (self.target.port, self.target.gid_index);
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(port)
            .setup_access_flags(self.access);
        qp.modify(&attr)
            .map_err(|e| fail(Reason::QpInit, &format!("{name} QP RESET→INIT"), &e))?;
        let mut ah = AddressHandleAttribute::new();
        ah.setup_port(port).setup_service_level(0);
        if self.roce {
            ah.setup_grh(&self.gid, 0, self.sgid_index, 64, self.traffic_class);
        } else {
            ah.setup_dest_lid(self.lid);
            if gid_index != 0 {
                ah.setup_grh(&self.gid, 0, self.sgid_index, 64, self.traffic_class);
            }
        }
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(self.mtu)
            .setup_dest_qp_num(remote)
            .setup_rq_psn(PSN)
            .setup_max_dest_read_atomic(0)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&ah);
        qp.modify(&attr).map_err(|e| {
            fail(
                Reason::QpRtr,
                &format!("{name} QP INIT→RTR with GID index {gid_index}"),
                &e,
            )
        })?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(PSN)
            .setup_timeout(QP_TIMEOUT)
            .setup_retry_cnt(QP_RETRY)
            .setup_rnr_retry(QP_RETRY)
            .setup_max_read_atomic(0);
        qp.modify(&attr)
            .map_err(|e| fail(Reason::QpRts, &format!("{name} QP RTR→RTS"), &e))
    }
}

/// The verbs MTU of a path MTU in bytes.
fn path_mtu(bytes: u32) -> Mtu {
    match bytes {
        4096 => Mtu::Mtu4096,
        2048 => Mtu::Mtu2048,
        1024 => Mtu::Mtu1024,
        512 => Mtu::Mtu512,
        _ => Mtu::Mtu256,
    }
}

/// Bytes of an IB MTU.
fn mtu_bytes(mtu: Mtu) -> u32 {
    match mtu {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

impl Session for IbSession {
    fn path(&self) -> Option<QpPath> {
        Some(self.path)
    }

    fn port_active(&mut self) -> Result<bool, Failure> {
        let attr = self.ctx.query_port(self.port).map_err(|e| {
            fail(
                Reason::QueryPort,
                &format!("ibv_query_port(port {})", self.port),
                &e,
            )
        })?;
        Ok(matches!(attr.port_state(), PortState::Active))
    }

    fn round(&mut self, payload: &[u8], tag: u32, timeout: Duration) -> Result<Landed, Failure> {
        let len = payload.len().min(TAG_SRC - SRC);
        let payload = payload.get(..len).unwrap_or(payload);
        self.buf.write(SRC, payload);
        self.buf.write(TAG_SRC, &tag.to_le_bytes());
        self.buf.zero(DST, len);
        self.buf.zero(TAG_DST, TAG_LEN);
        let (lkey, rkey) = (self.mr.lkey(), self.mr.rkey());

        let mut recv = self.qp_b.start_post_recv();
        let wr = recv.construct_wr(WR_RECV);
        // SAFETY: the address lies in the registered buffer.
        unsafe { wr.setup_sge(lkey, self.buf.addr(TAG_DST), TAG_LEN as u32) };
        recv.post()
            .map_err(|e| fail(Reason::PostRecv, "ibv_post_recv", &e))?;

        let started = Instant::now();
        let mut send = self.qp_a.start_post_send();
        let wr = send
            .construct_wr(WR_WRITE, WorkRequestFlags::Signaled)
            .setup_write(rkey, self.buf.addr(DST));
        // SAFETY: source and destination lie in the registered buffer.
        unsafe { wr.setup_sge(lkey, self.buf.addr(SRC), len as u32) };
        let wr = send
            .construct_wr(WR_SEND, WorkRequestFlags::Signaled)
            .setup_send();
        // SAFETY: as above.
        unsafe { wr.setup_sge(lkey, self.buf.addr(TAG_SRC), TAG_LEN as u32) };
        send.post()
            .map_err(|e| fail(Reason::PostSend, "ibv_post_send", &e))?;

        // Three completions: the WRITE and the SEND on A (acknowledged by
        // B), the receive on B. Arm, drain, then sleep on the channel up to
        // the deadline.
        let deadline = started + timeout;
        let mut rtt = None;
        let mut pending = 3u32;
        while pending > 0 {
            let armed = wait::arm(&self.cq);
            match self.cq.start_poll() {
                Ok(poller) => {
                    for wc in poller {
                        pending = pending.saturating_sub(1);
                        if wc.status() != 0 {
                            return Err(Failure::new(
                                Reason::Completion(wc.status()),
                                format!(
                                    "work completion {} on {} (vendor error {:#x})",
                                    crate::wc_status_name(wc.status()),
                                    match wc.wr_id() {
                                        WR_RECV => "the responder's receive",
                                        WR_WRITE => "the RDMA WRITE",
                                        _ => "the SEND",
                                    },
                                    wc.vendor_err()
                                ),
                            ));
                        }
                        if wc.wr_id() == WR_SEND {
                            rtt = Some(started.elapsed());
                        }
                    }
                }
                Err(PollCompletionQueueError::CompletionQueueEmpty) => {}
                Err(e) => return Err(fail(Reason::PollCq, "ibv_poll_cq", &e)),
            }
            if pending == 0 {
                break;
            }
            if Instant::now() >= deadline {
                return Err(Failure::new(
                    Reason::Timeout,
                    format!(
                        "{pending} of 3 completions missing after {} ms",
                        timeout.as_millis()
                    ),
                ));
            }
            wait::sleep(&self.channel, deadline, armed);
        }
        let tag_bytes = self.buf.read(TAG_DST, TAG_LEN);
        let landed_tag = <[u8; 4]>::try_from(tag_bytes.as_slice())
            .map(u32::from_le_bytes)
            .unwrap_or(0);
        Ok(Landed {
            rtt: rtt.unwrap_or_else(|| started.elapsed()),
            written: self.buf.read(DST, len),
            tag: landed_tag,
        })
    }
}

mod wait;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod isolated_tests;
