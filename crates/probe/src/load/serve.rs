//! The responder's loop for one session: receives kept posted on every
//! queue pair, each message (a write with immediate) counted with its
//! length, and the session ended by the first of:
//! - a stop (the requester's end request, a reload, shutdown): at once,
//!   through the receiver's waker;
//! - its deadline (the granted time from the start);
//! - its byte cap (the granted bytes): the queue pairs are moved to the
//!   error state, so the requester's next write fails instead of landing;
//! - silence: no message within `first_message` of the start, or within
//!   `idle` of the last one (a requester that died or stopped writing);
//! - an error completion.
//!
//! The caller then drops the receiver, which releases every queue pair,
//! memory region and buffer of the session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Receiver;
use crate::Failure;

/// A session's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// From the start of [`serve`].
    pub deadline: Duration,
    pub max_bytes: u64,
    /// The first message must come within this time of the start.
    pub first_message: Duration,
    /// And each later one within this time of the one before.
    pub idle: Duration,
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    /// Asked to: the requester's end request, a reload, shutdown.
    Stopped,
    /// No message for the idle time: the requester stopped or died.
    Idle,
    Deadline,
    ByteCap,
    Failed(String),
}

impl Ended {
    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Ended::Stopped => "stopped",
            Ended::Idle => "idle",
            Ended::Deadline => "deadline",
            Ended::ByteCap => "byte_cap",
            Ended::Failed(_) => "failed",
        }
    }
}

/// What a session received.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeReport {
    pub bytes: u64,
    pub messages: u64,
    pub ended: Ended,
    /// From the first message to the last, seconds.
    pub active_seconds: f64,
}

/// Serves one session until it ends (see the module doc).
pub fn serve(
    r: &mut dyn Receiver,
    depth: u32,
    limits: &ServeLimits,
    stop: &AtomicBool,
) -> ServeReport {
    let start = Instant::now();
    let mut report = ServeReport {
        bytes: 0,
        messages: 0,
        ended: Ended::Stopped,
        active_seconds: 0.0,
    };
    let depth = depth.max(1);
    let qps = r.qps();
    for qp in 0..qps {
        if let Err(e) = r.post_receives(qp, depth) {
            report.ended = failed(&e);
            return report;
        }
    }
    let deadline = start + limits.deadline;
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut consumed = vec![0u32; qps];
    let mut done = Vec::with_capacity(64);
    report.ended = loop {
        if stop.load(Ordering::SeqCst) {
            break Ended::Stopped;
        }
        let now = Instant::now();
        if now >= deadline {
            r.halt();
            break Ended::Deadline;
        }
        let silent_at = match last {
            Some(t) => t + limits.idle,
            None => start + limits.first_message,
        };
        if now >= silent_at {
            break Ended::Idle;
        }
        if let Err(e) = r.wait(silent_at.min(deadline), &mut done) {
            break failed(&e);
        }
        let now = Instant::now();
        let mut failure = None;
        for c in done.drain(..) {
            if c.status != 0 {
                failure.get_or_insert_with(|| {
                    Ended::Failed(format!(
                        "work completion {} on a receive",
                        crate::wc_status_name(c.status)
                    ))
                });
                continue;
            }
            report.bytes = report.bytes.saturating_add(u64::from(c.bytes));
            report.messages += 1;
            if let Some(n) = consumed.get_mut(c.qp) {
                *n += 1;
            }
            first.get_or_insert(now);
            last = Some(now);
        }
        if let Some(f) = failure {
            break f;
        }
        if report.bytes > limits.max_bytes {
            r.halt();
            break Ended::ByteCap;
        }
        let mut reposted = Ok(());
        for (qp, n) in consumed.iter_mut().enumerate() {
            if *n > 0 {
                reposted = r.post_receives(qp, *n);
                *n = 0;
                if reposted.is_err() {
                    break;
                }
            }
        }
        if let Err(e) = reposted {
            break failed(&e);
        }
    };
    if let (Some(a), Some(b)) = (first, last) {
        report.active_seconds = b.duration_since(a).as_secs_f64();
    }
    report
}

fn failed(e: &Failure) -> Ended {
    Ended::Failed(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::fake::FakeReceiver;

    fn limits() -> ServeLimits {
        ServeLimits {
            deadline: Duration::from_secs(5),
            max_bytes: 1 << 30,
            first_message: Duration::from_millis(100),
            idle: Duration::from_millis(100),
        }
    }

    #[test]
    fn messages_are_counted_and_receives_reposted_until_the_requester_goes_quiet() {
        let mut r = FakeReceiver::new(2);
        r.script(&[(0, 65536), (1, 65536), (0, 1 << 20)]);
        let report = serve(&mut r, 8, &limits(), &AtomicBool::new(false));
        assert_eq!(report.ended, Ended::Idle);
        assert_eq!(report.bytes, 2 * 65536 + (1 << 20));
        assert_eq!(report.messages, 3);
        assert_eq!(r.posted(0), 8 + 2);
        assert_eq!(r.posted(1), 8 + 1);
    }

    #[test]
    fn the_byte_cap_halts_the_queue_pairs() {
        let mut r = FakeReceiver::new(1);
        r.script(&[(0, 1 << 20); 5]);
        let mut l = limits();
        l.max_bytes = 3 << 20;
        let report = serve(&mut r, 8, &l, &AtomicBool::new(false));
        assert_eq!(report.ended, Ended::ByteCap);
        assert!(r.halted());
    }

    #[test]
    fn a_requester_that_never_writes_ends_the_session_after_the_first_message_time() {
        let mut r = FakeReceiver::new(1);
        let report = serve(&mut r, 8, &limits(), &AtomicBool::new(false));
        assert_eq!((report.ended, report.messages), (Ended::Idle, 0));
    }

    #[test]
    fn the_deadline_ends_a_session_that_keeps_writing() {
        let mut r = FakeReceiver::new(1);
        r.endless(65536);
        let mut l = limits();
        l.deadline = Duration::from_millis(50);
        l.max_bytes = u64::MAX;
        let report = serve(&mut r, 8, &l, &AtomicBool::new(false));
        assert_eq!(report.ended, Ended::Deadline);
        assert!(r.halted());
    }

    #[test]
    fn a_stop_ends_it_and_an_error_completion_fails_it() {
        let mut r = FakeReceiver::new(1);
        r.endless(65536);
        let report = serve(&mut r, 8, &limits(), &AtomicBool::new(true));
        assert_eq!(report.ended, Ended::Stopped);
        let mut r = FakeReceiver::new(1);
        r.script(&[(0, 65536)]);
        r.fail_next(5); // IBV_WC_WR_FLUSH_ERR
        let report = serve(&mut r, 8, &limits(), &AtomicBool::new(false));
        assert!(
            matches!(&report.ended, Ended::Failed(m) if m.contains("IBV_WC_WR_FLUSH_ERR")),
            "{:?}",
            report.ended
        );
    }
}
