//! A port's completion queues, extended where the provider has them: an
//! extended CQ (`ibv_create_cq_ex`) reports the completion timestamps of
//! the device where it keeps a clock (mlx5: `hca_core_clock`,
//! `completion_timestamp_mask`), so a round trip can be taken between the
//! probe's send completion and the echo's receive completion on the
//! device's own clock. A provider without extended CQs, or one that
//! refuses them, gets a plain CQ, and the round trips stay on the host's
//! clock (rxe has no device clock). Both are polled into [`Completion`]s,
//! so the rest of the datapath does not tell them apart.

use super::*;
use rdma_mummy_sys::{
    ibv_cq_ex, ibv_cq_init_attr_ex, ibv_create_cq_ex, ibv_create_cq_wc_flags, ibv_device_attr_ex,
    ibv_end_poll, ibv_poll_cq_attr, ibv_query_device_ex, ibv_start_poll, ibv_wc_read_byte_len,
    ibv_wc_read_completion_ts, ibv_wc_read_src_qp, ibv_wc_read_vendor_err, ibv_wc_read_wc_flags,
};

/// One work completion, whatever the CQ.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Completion {
    pub(super) wr_id: u64,
    pub(super) status: u32,
    pub(super) vendor_err: u32,
    pub(super) byte_len: u32,
    pub(super) src_qp: u32,
    /// The receive starts with a GRH (`IBV_WC_GRH`).
    pub(super) grh: bool,
    /// The device's completion timestamp, in ticks of its clock.
    pub(super) ts: Option<u64>,
}

/// The device's clock, where its completions carry timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DeviceClock {
    /// `hca_core_clock`: ticks per millisecond (kHz).
    pub(super) khz: u64,
    /// `completion_timestamp_mask`: the bits a timestamp has (it wraps).
    pub(super) mask: u64,
}

impl DeviceClock {
    /// The device's clock, when it reports completion timestamps.
    pub(super) fn of(ctx: *mut ibv_context) -> Option<DeviceClock> {
        // SAFETY: an all-zero extended device attribute is valid.
        let mut attr: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; no input (NULL is the documented "none").
        let rc = unsafe { ibv_query_device_ex(ctx, ptr::null(), &mut attr) };
        (rc == 0 && attr.hca_core_clock != 0 && attr.completion_timestamp_mask != 0).then_some(
            DeviceClock {
                khz: attr.hca_core_clock,
                mask: attr.completion_timestamp_mask,
            },
        )
    }

    /// Nanoseconds from timestamp `from` to `to` (wrapping in the mask).
    pub(super) fn between(&self, from: u64, to: u64) -> Duration {
        let ticks = to.wrapping_sub(from) & self.mask;
        Duration::from_nanos(
            u64::try_from(u128::from(ticks) * 1_000_000 / u128::from(self.khz.max(1)))
                .unwrap_or(u64::MAX),
        )
    }
}

/// A completion queue of the port (null: not created).
pub(super) enum Cq {
    Plain(*mut ibv_cq),
    /// Extended; `ts`: its completions carry the device's timestamp.
    Extended {
        cq: *mut ibv_cq_ex,
        ts: bool,
    },
}

impl Cq {
    /// A CQ of `cqe` entries on `channel`: extended (with timestamps when
    /// `timestamps`) where the provider makes one, plain otherwise.
    pub(super) fn create(
        ctx: *mut ibv_context,
        cqe: usize,
        channel: *mut ibv_comp_channel,
        timestamps: bool,
    ) -> Result<Cq, Failure> {
        let mut flags = ibv_create_cq_wc_flags::IBV_WC_EX_WITH_BYTE_LEN.0
            | ibv_create_cq_wc_flags::IBV_WC_EX_WITH_SRC_QP.0;
        if timestamps {
            flags |= ibv_create_cq_wc_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP.0;
        }
        // SAFETY: an all-zero extended CQ attribute is valid.
        let mut attr: ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.cqe = cqe as u32;
        attr.channel = channel;
        attr.wc_flags = u64::from(flags);
        // SAFETY: ctx and the channel are live; attr is valid. A provider
        // without extended CQs returns NULL with EOPNOTSUPP.
        let ex = unsafe { ibv_create_cq_ex(ctx, &mut attr) };
        if !ex.is_null() {
            return Ok(Cq::Extended {
                cq: ex,
                ts: timestamps,
            });
        }
        // SAFETY: ctx and the channel are live; no context pointer.
        let cq = unsafe { ibv_create_cq(ctx, cqe as i32, ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            return Err(os_fail(
                Reason::CreateCq,
                "ibv_create_cq".into(),
                last_errno(),
            ));
        }
        Ok(Cq::Plain(cq))
    }

    /// The CQ as `ibv_cq` (what QPs, notification and events take).
    pub(super) fn raw(&self) -> *mut ibv_cq {
        match self {
            Cq::Plain(cq) => *cq,
            // SAFETY: an extended CQ begins with its ibv_cq (verbs.h).
            Cq::Extended { cq, .. } => unsafe { rdma_mummy_sys::ibv_cq_ex_to_cq(*cq) },
        }
    }

    /// Whether its completions carry device timestamps.
    pub(super) fn timestamps(&self) -> bool {
        matches!(self, Cq::Extended { ts: true, .. })
    }

    /// Asks for an event on the channel at the next completion.
    pub(super) fn arm(&self) -> bool {
        let raw = self.raw();
        // SAFETY: the CQ is live (callers hold the port).
        !raw.is_null() && unsafe { ibv_req_notify_cq(raw, 0) } == 0
    }

    /// Polls up to `out.len()` completions into `out`; the count, or the
    /// provider's error.
    pub(super) fn poll(&mut self, out: &mut [Completion]) -> Result<usize, i32> {
        match self {
            Cq::Plain(cq) => {
                // SAFETY: an all-zero work completion is valid.
                let mut wcs: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
                let want = out.len().min(wcs.len()) as i32;
                // SAFETY: the CQ is live; wcs has room for `want` entries.
                let n = unsafe { ibv_poll_cq(*cq, want, wcs.as_mut_ptr()) };
                if n < 0 {
                    return Err(-n);
                }
                for (o, wc) in out.iter_mut().zip(wcs.iter().take(n as usize)) {
                    *o = Completion {
                        wr_id: wc.wr_id,
                        status: wc.status,
                        vendor_err: wc.vendor_err,
                        byte_len: wc.byte_len,
                        src_qp: wc.src_qp,
                        grh: wc.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0,
                        ts: None,
                    };
                }
                Ok(n as usize)
            }
            Cq::Extended { cq, ts } => {
                let (cq, ts) = (*cq, *ts);
                // One completion per batch (start_poll, read, end_poll),
                // never ibv_next_poll: rxe before rdma-core 55 unlocks and
                // moves its consumer index when next_poll finds the CQ
                // empty, and the end_poll every provider requires then
                // moves it past the producer (providers/rxe/rxe.c
                // cq_next_poll in v44, Debian 12's; fixed by "rxe: fix
                // completion queue consumer index overrun", 2024): garbage
                // read as completions.
                let mut n = 0;
                while n < out.len() {
                    // SAFETY: an all-zero poll attribute is valid (comp_mask 0).
                    let mut attr: ibv_poll_cq_attr = unsafe { std::mem::zeroed() };
                    // SAFETY: the CQ is live; start_poll either returns
                    // ENOENT (nothing, no end_poll) or 0 with a completion
                    // to read, and then end_poll ends the batch.
                    let rc = unsafe { ibv_start_poll(cq, &mut attr) };
                    if rc == libc::ENOENT {
                        break;
                    }
                    if rc != 0 {
                        return Err(rc);
                    }
                    // SAFETY: a completion is current; only the fields the
                    // CQ was created with are read; end_poll consumes it.
                    unsafe {
                        let flags = ibv_wc_read_wc_flags(cq);
                        out[n] = Completion {
                            wr_id: (*cq).wr_id,
                            status: (*cq).status,
                            vendor_err: ibv_wc_read_vendor_err(cq),
                            byte_len: ibv_wc_read_byte_len(cq),
                            src_qp: ibv_wc_read_src_qp(cq),
                            grh: flags & ibv_wc_flags::IBV_WC_GRH.0 != 0,
                            ts: ts.then(|| ibv_wc_read_completion_ts(cq)),
                        };
                        ibv_end_poll(cq);
                    }
                    n += 1;
                }
                Ok(n)
            }
        }
    }

    /// Destroys the CQ (at most once).
    pub(super) fn destroy(&mut self) {
        let raw = self.raw();
        if !raw.is_null() {
            // SAFETY: created by this CQ, destroyed once (then null).
            unsafe { ibv_destroy_cq(raw) };
        }
        *self = Cq::Plain(ptr::null_mut());
    }
}
