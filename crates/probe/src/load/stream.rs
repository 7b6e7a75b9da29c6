//! The requester's loop: for each message size in turn, keep `depth`
//! writes outstanding on every queue pair for `per_size`, count the bytes
//! of the writes that complete inside the sample window
//! ([`super::sample_window`]), then let the writes in flight drain. A
//! stream stops early, and says why, on an error completion, when no
//! write completes for `stall` (a link down, a responder gone), when its
//! byte budget is spent, or when asked to stop.
//!
//! The figure is perftest's `BW_average` of `ib_write_bw -D` (bytes of the
//! completions counted in the sample state over the sample time,
//! perftest_resources.c `catch_alarm` and perftest_parameters.c
//! `print_report_bw`), in bytes per second; perftest prints it in MiB/s
//! (`0x100000`), or Gb/s with `--report_gbits` (`125000000`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{sample_window, write_id, write_of, Completion, Requester};
use crate::{Failure, Reason};

/// What a stream does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlan {
    /// Message sizes, in the order they run.
    pub sizes: Vec<u64>,
    pub per_size: Duration,
    /// Writes outstanding per queue pair.
    pub depth: u32,
    /// Bytes the stream may write in all (the responder's grant), spread
    /// evenly over the sizes.
    pub max_bytes: u64,
    /// Writes outstanding and none completed for this long: the stream is
    /// stalled and stops.
    pub stall: Duration,
}

/// The default `stall`: longer than an RC queue pair retries a lost packet
/// before it fails the write (timeout 14 and 7 retries: ≈0.5 s).
pub const DEFAULT_STALL: Duration = Duration::from_secs(2);

/// One message size's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeResult {
    /// Message size, bytes.
    pub size: u64,
    /// Bytes completed inside the sample window.
    pub sample_bytes: u64,
    /// The sample window's length, seconds (0: no window was reached).
    pub sample_seconds: f64,
    /// Bytes completed at this size, inside the window or not.
    pub bytes: u64,
    pub messages: u64,
}

impl SizeResult {
    /// Bytes per second over the sample window; `None` without one.
    pub fn bytes_per_second(&self) -> Option<f64> {
        (self.sample_seconds > 0.0).then(|| self.sample_bytes as f64 / self.sample_seconds)
    }
}

/// A whole stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamReport {
    /// The sizes that ran (an aborted stream lists the size it stopped in
    /// last, and none after it).
    pub sizes: Vec<SizeResult>,
    /// Bytes written in all.
    pub bytes: u64,
    /// Why the stream stopped early, if it did.
    pub failure: Option<Failure>,
    pub elapsed: Duration,
}

/// Runs the plan on `requester`; `stop` ends it at the next completion
/// or boundary.
pub fn run(requester: &mut dyn Requester, plan: &StreamPlan, stop: &AtomicBool) -> StreamReport {
    let started = Instant::now();
    let mut report = StreamReport {
        sizes: Vec::new(),
        bytes: 0,
        failure: None,
        elapsed: Duration::ZERO,
    };
    let n = plan.sizes.len().max(1) as u64;
    for (i, &size) in plan.sizes.iter().enumerate() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let left = plan.max_bytes.saturating_sub(report.bytes);
        let budget = left / (n - i as u64).max(1);
        let (result, failure) = one_size(requester, plan, size, budget, stop);
        report.bytes += result.bytes;
        report.sizes.push(result);
        if failure.is_some() {
            report.failure = failure;
            break;
        }
    }
    report.elapsed = started.elapsed();
    report
}

/// One size: fill, measure, drain.
fn one_size(
    r: &mut dyn Requester,
    plan: &StreamPlan,
    size: u64,
    budget: u64,
    stop: &AtomicBool,
) -> (SizeResult, Option<Failure>) {
    let mut result = SizeResult {
        size,
        sample_bytes: 0,
        sample_seconds: 0.0,
        bytes: 0,
        messages: 0,
    };
    let Ok(len) = u32::try_from(size) else {
        let f = Failure::new(Reason::PostSend, format!("message size {size} above 4 GiB"));
        return (result, Some(f));
    };
    let qps = r.qps();
    let depth = plan.depth.max(1);
    let start = Instant::now();
    let (w0, w1) = sample_window(start, plan.per_size);
    let end = start + plan.per_size;
    let mut outstanding = vec![0u32; qps];
    let mut posted = 0u64;
    let mut last_progress = start;
    // When posting stopped before the window's end (budget, stop, error).
    let mut stopped_posting: Option<Instant> = None;
    let mut failure = None;
    let mut done = Vec::with_capacity(64);
    loop {
        let now = Instant::now();
        let posting = now < end && failure.is_none() && !stop.load(Ordering::SeqCst);
        if posting {
            'fill: for (qp, out) in outstanding.iter_mut().enumerate() {
                while *out < depth {
                    if posted.saturating_add(size) > budget {
                        break 'fill;
                    }
                    if let Err(e) = r.post_write(qp, len, write_id(qp, len)) {
                        failure = Some(e);
                        break 'fill;
                    }
                    *out += 1;
                    posted += size;
                }
            }
        }
        let in_flight: u32 = outstanding.iter().sum();
        let can_post = posting && failure.is_none() && posted.saturating_add(size) <= budget;
        if !can_post && stopped_posting.is_none() {
            stopped_posting = Some(now.min(end));
        }
        if in_flight == 0 && (!can_post || failure.is_some()) {
            break;
        }
        if failure.is_some() {
            // Writes posted before the error complete (flushed) or not:
            // the QPs are dropped by the caller either way.
            break;
        }
        let stall_at = last_progress + plan.stall;
        if now >= stall_at {
            failure = Some(Failure::new(
                Reason::Timeout,
                format!(
                    "no write completed for {} ms with {in_flight} outstanding ({size}-byte messages)",
                    plan.stall.as_millis()
                ),
            ));
            break;
        }
        let mut until = stall_at;
        for boundary in [w0, w1, end] {
            if boundary > now && boundary < until {
                until = boundary;
            }
        }
        if let Err(e) = r.wait(until, &mut done) {
            failure = Some(e);
            break;
        }
        let now = Instant::now();
        for c in done.drain(..) {
            let Completion { wr_id, status, .. } = c;
            let (qp, bytes) = write_of(wr_id);
            if status != 0 {
                failure.get_or_insert_with(|| {
                    Failure::new(
                        Reason::Completion(status),
                        format!(
                            "work completion {} on a {size}-byte RDMA WRITE",
                            crate::wc_status_name(status)
                        ),
                    )
                });
                continue;
            }
            if let Some(o) = outstanding.get_mut(qp) {
                *o = o.saturating_sub(1);
            }
            result.bytes += u64::from(bytes);
            result.messages += 1;
            if now >= w0 && now <= w1 {
                result.sample_bytes += u64::from(bytes);
            }
            last_progress = now;
        }
    }
    let sample_end = stopped_posting.map_or(w1, |t| t.min(w1));
    result.sample_seconds = sample_end.saturating_duration_since(w0).as_secs_f64();
    if result.sample_seconds == 0.0 {
        result.sample_bytes = 0;
    }
    (result, failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::fake::FakeRequester;

    fn plan(sizes: &[u64]) -> StreamPlan {
        StreamPlan {
            sizes: sizes.to_vec(),
            per_size: Duration::from_millis(200),
            depth: 4,
            max_bytes: u64::MAX,
            stall: Duration::from_millis(300),
        }
    }

    #[test]
    fn every_size_runs_and_its_window_counts_only_what_completed_inside() {
        let mut r = FakeRequester::new(2);
        let report = run(&mut r, &plan(&[65536, 1 << 20]), &AtomicBool::new(false));
        assert!(report.failure.is_none(), "{:?}", report.failure);
        assert_eq!(report.sizes.len(), 2);
        for s in &report.sizes {
            assert!(s.messages > 0 && s.bytes == s.messages * s.size, "{s:?}");
            assert!(s.sample_bytes <= s.bytes && s.sample_bytes > 0, "{s:?}");
            assert!((s.sample_seconds - 0.1).abs() < 1e-9, "{s:?}");
        }
        assert_eq!(
            report.bytes,
            report.sizes.iter().map(|s| s.bytes).sum::<u64>()
        );
        assert_eq!(r.outstanding(), 0, "every write drained");
        assert!(r.max_outstanding_per_qp() <= 4);
    }

    #[test]
    fn an_error_completion_stops_the_stream_and_skips_the_later_sizes() {
        let mut r = FakeRequester::new(2);
        r.fail_after(10, 12); // IBV_WC_RETRY_EXC_ERR
        let report = run(&mut r, &plan(&[65536, 1 << 20]), &AtomicBool::new(false));
        let f = report.failure.expect("failed");
        assert_eq!(f.reason, Reason::Completion(12));
        assert!(f.message.contains("IBV_WC_RETRY_EXC_ERR"), "{f}");
        assert_eq!(report.sizes.len(), 1);
    }

    #[test]
    fn a_silent_responder_is_a_stall_within_the_stall_time() {
        let mut r = FakeRequester::new(1);
        r.go_silent_after(3);
        let report = run(&mut r, &plan(&[65536]), &AtomicBool::new(false));
        let f = report.failure.expect("stalled");
        assert_eq!(f.reason, Reason::Timeout, "{f}");
    }

    #[test]
    fn the_byte_budget_is_never_exceeded() {
        let mut r = FakeRequester::new(4);
        let mut p = plan(&[65536, 65536]);
        p.max_bytes = 65536 * 10;
        let report = run(&mut r, &p, &AtomicBool::new(false));
        assert!(report.failure.is_none());
        assert!(report.bytes <= p.max_bytes, "{}", report.bytes);
        assert_eq!(r.posted_bytes(), report.bytes);
    }

    #[test]
    fn stop_ends_the_stream() {
        let mut r = FakeRequester::new(1);
        let report = run(&mut r, &plan(&[65536, 65536]), &AtomicBool::new(true));
        assert!(report.sizes.is_empty() && report.bytes == 0);
    }
}
