//! Bandwidth under load: large RDMA WRITE streams between one local port
//! and a peer's responder, measured the way perftest's `ib_write_bw -D`
//! measures (bytes of the writes completed between the end of a warm-up
//! margin and the start of an end margin, over that time), for a few
//! message sizes in turn.
//!
//! Layers, as the probes have them:
//! - [`stream`]: the requester's loop (several QPs, several writes
//!   outstanding on each, one size after the other, bounded in time and
//!   bytes) over the [`Requester`] trait;
//! - [`serve`]: the responder's loop (receives kept posted, every message
//!   counted, the session ended on its deadline, its byte cap, an idle
//!   requester or a stop) over the [`Receiver`] trait;
//! - [`rc`] (feature `ibverbs`): both traits on libibverbs RC queue pairs,
//!   completions waited for on a completion channel;
//! - [`gpu`]: GPU memory through CUDA's driver library (loaded at run time)
//!   and dma-buf, or the reason host memory is used instead.
//!
//! Every message is an RDMA WRITE with immediate: the responder gets one
//! receive completion per message with its length, so it counts the bytes
//! written into it itself (its byte cap is a hard cap, not the requester's
//! promise) and sees a requester that stopped or died as silence.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::Failure;

pub mod gpu;
#[cfg(feature = "ibverbs")]
pub mod rc;
pub mod serve;
pub mod stream;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

/// The message sizes measured by default: 64 KiB, 1 MiB and 8 MiB
/// (perftest's largest default size is 8 MiB, `MAX_SIZE`).
pub const DEFAULT_SIZES: [u64; 3] = [64 << 10, 1 << 20, 8 << 20];
/// Largest message size accepted anywhere (one buffer of it per port and
/// side is registered).
pub const MAX_MESSAGE_BYTES: u64 = 64 << 20;
/// Smallest message size accepted.
pub const MIN_MESSAGE_BYTES: u64 = 4 << 10;
/// Queue pairs per port at most.
pub const MAX_QPS: u32 = 16;
/// Writes outstanding per queue pair at most.
pub const MAX_DEPTH: u32 = 128;
/// Message sizes per run at most.
pub const MAX_SIZES: usize = 8;
/// Queue pairs per port by default.
pub const DEFAULT_QPS: u32 = 4;
/// Writes outstanding per queue pair by default: with 4 QPs and 64 KiB
/// messages 4 MiB in flight, several times the bandwidth-delay product
/// of a 400 Gb/s port within a data centre (≈50 KB per µs of RTT).
pub const DEFAULT_DEPTH: u32 = 16;

/// One side's queue pairs, as the other side connects to them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpSet {
    /// The GID the QPs' packets carry (RoCE v2: the port's IPv4-mapped
    /// address).
    pub gid: Ipv6Addr,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// One per queue pair, in order: QP `i` connects to the other side's
    /// QP `i`.
    pub qpns: Vec<u32>,
    /// The first packet sequence number of every QP's send queue.
    pub psn: u32,
    /// The port's active MTU in bytes.
    pub mtu: u32,
}

/// Where the requester writes: the responder's registered buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
}

/// What a side's port and queue pairs are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub device: String,
    pub port: u8,
    pub gid_index: u32,
    /// The GRH traffic class (DSCP << 2 on RoCE): the RoCE priority's.
    pub traffic_class: u8,
    pub qps: u32,
    /// Work requests per QP: outstanding writes (requester) or receives
    /// kept posted (responder).
    pub depth: u32,
    /// The registered buffer: the largest message.
    pub buffer_bytes: u64,
    pub memory: MemoryWanted,
}

/// Where a side's buffer should live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryWanted {
    Host,
    /// The GPU of this PCI address (`0000:17:00.0`), through dma-buf;
    /// host memory when that cannot be done (the reason is kept).
    Gpu {
        pci_address: String,
    },
}

/// Where a side's buffer lives, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MemoryUsed {
    Host {
        /// Why not GPU memory, when it was asked for.
        #[serde(skip_serializing_if = "Option::is_none")]
        fallback: Option<String>,
    },
    /// GPU memory registered through dma-buf.
    Gpu { pci_address: String },
}

/// One work completion, as the loops need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    /// `ibv_wc_status` (0: success).
    pub status: u32,
    /// Bytes of the message (receives of a write with immediate).
    pub bytes: u32,
    /// Index of the queue pair it belongs to (receives).
    pub qp: usize,
}

/// The requester's side of a stream: writes posted, completions awaited.
pub trait Requester: Send {
    fn qps(&self) -> usize;
    /// Posts one signaled RDMA WRITE with immediate of `len` bytes from the
    /// local buffer into the responder's window, on QP `qp`.
    fn post_write(&mut self, qp: usize, len: u32, wr_id: u64) -> Result<(), Failure>;
    /// Appends completions to `out`: returns once at least one came, or at
    /// `until`. Waits on the completion channel, never by sleeping.
    fn wait(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure>;
}

/// The responder's side: receives kept posted, messages counted.
pub trait Receiver: Send {
    fn qps(&self) -> usize;
    /// Posts `n` receives on QP `qp` (a write with immediate consumes one).
    fn post_receives(&mut self, qp: usize, n: u32) -> Result<(), Failure>;
    /// As [`Requester::wait`]; also returns early once woken
    /// ([`Receiver::waker`]).
    fn wait(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure>;
    /// Moves every QP to the error state: the requester's next writes fail
    /// at once instead of retrying into a closed door.
    fn halt(&mut self);
    /// Something another thread calls to end a [`Receiver::wait`] early.
    fn waker(&self) -> Waker;
}

/// Ends a responder's wait from another thread.
#[derive(Clone)]
pub struct Waker(std::sync::Arc<dyn Fn() + Send + Sync>);

impl Waker {
    pub fn new(f: impl Fn() + Send + Sync + 'static) -> Self {
        Waker(std::sync::Arc::new(f))
    }

    pub fn wake(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waker")
    }
}

/// Opens either side on a port.
pub trait LoadVerbs: Send + Sync {
    type Requester: Requester + Connect;
    type Receiver: Receiver + Connect;
    fn requester(&self, spec: &PortSpec) -> Result<Self::Requester, crate::verbs::OpenError>;
    fn receiver(&self, spec: &PortSpec) -> Result<Self::Receiver, crate::verbs::OpenError>;
}

/// What both sides share: their queue pairs to publish, and connecting
/// them to the other side's.
pub trait Connect {
    /// This side's queue pairs, for the other side.
    fn local(&self) -> QpSet;
    /// Where the other side writes (responder), `None` for a requester.
    fn window(&self) -> Option<Window>;
    /// Connects QP `i` to the remote's QP `i` (RTR, then RTS); a
    /// requester also learns where to write.
    fn connect(&mut self, remote: &QpSet, window: Option<Window>) -> Result<(), Failure>;
    /// Where the buffer lives.
    fn memory(&self) -> MemoryUsed;
}

/// The shortest a sample window may be: a size whose margins leave less
/// is measured over its whole time instead.
pub const MIN_SAMPLE: Duration = Duration::from_millis(100);

/// The sample window of a size run for `per_size` from `start`:
/// perftest's duration mode, a quarter of the time cut at each end
/// (`margin = duration / 4`, perftest_parameters.c), so that neither the
/// pipeline filling nor its draining is in the figure.
pub fn sample_window(start: Instant, per_size: Duration) -> (Instant, Instant) {
    let margin = per_size / 4;
    if per_size.saturating_sub(margin * 2) < MIN_SAMPLE {
        return (start, start + per_size);
    }
    (start + margin, start + per_size - margin)
}

/// `wr_id` of a write: the QP and the length, so that a completion says
/// what it completed.
pub fn write_id(qp: usize, len: u32) -> u64 {
    ((qp as u64) << 32) | u64::from(len)
}

/// The QP and length of a write's `wr_id`.
pub fn write_of(wr_id: u64) -> (usize, u32) {
    ((wr_id >> 32) as usize, (wr_id & 0xFFFF_FFFF) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_window_drops_a_quarter_at_each_end() {
        let t = Instant::now();
        let (a, b) = sample_window(t, Duration::from_secs(4));
        assert_eq!(a - t, Duration::from_secs(1));
        assert_eq!(b - t, Duration::from_secs(3));
        let (a, b) = sample_window(t, Duration::from_millis(150));
        assert_eq!((a, b - t), (t, Duration::from_millis(150)));
    }

    #[test]
    fn a_write_id_carries_its_qp_and_length() {
        assert_eq!(write_of(write_id(7, 8 << 20)), (7, 8 << 20));
    }
}
