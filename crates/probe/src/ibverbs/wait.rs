//! The loopback session's wait for its completions: the CQ armed with
//! `ibv_req_notify_cq`, then `poll(2)` on the completion channel's
//! descriptor up to the round's deadline, each event taken and
//! acknowledged (sideway 0.4 creates the channel and attaches the CQ, and
//! leaves arming and the events to the caller: rdma-mummy-sys, sideway's
//! own sys crate, has the calls).

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{ibv_ack_cq_events, ibv_get_cq_event, ibv_req_notify_cq};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel, CompletionQueue};

/// Asks for an event at the CQ's next completion; false when the provider
/// refuses (the caller then wakes every millisecond instead).
pub(super) fn arm(cq: &BasicCompletionQueue) -> bool {
    // SAFETY: the CQ is live while the session holds it.
    unsafe { ibv_req_notify_cq(cq.cq().as_ptr(), 0) == 0 }
}

/// Sleeps until the channel has an event or `until`, then takes and
/// acknowledges its events (every event must be acknowledged before the
/// CQ is destroyed).
pub(super) fn sleep(channel: &CompletionChannel, until: Instant, armed: bool) {
    let now = Instant::now();
    let mut until = until;
    if !armed {
        until = until.min(now + Duration::from_millis(1));
    }
    let left = until.saturating_duration_since(now);
    let mut fd = libc::pollfd {
        fd: channel.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: left.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: left.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and timespec, no signal mask change.
    let ready = unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
    if ready <= 0 {
        return;
    }
    // SAFETY: the channel is live and non-blocking; each event got is
    // acknowledged on the CQ it names (ours: the channel has one CQ).
    unsafe {
        let chan = channel.comp_channel().as_ptr();
        for _ in 0..16 {
            let mut got = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            if ibv_get_cq_event(chan, &mut got, &mut ctx) != 0 {
                break;
            }
            ibv_ack_cq_events(got, 1);
        }
    }
}
