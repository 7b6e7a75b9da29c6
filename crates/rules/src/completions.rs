//! Work requests that failed: completions in error beyond the flushes every
//! teardown makes, and the remote access, invalid request and length errors
//! that name why (mlx5's `extended_err_cnts`, bnxt_re's requester
//! completion statuses). An application saw each of these as a completion
//! with an error status, and its QP went to the error state.
//!
//! A flushed completion (`IB_WC_WR_FLUSH_ERR`) is a completion in error,
//! so mlx5's `*_cqe_error` counts flushes too: the rule judges
//! `*_cqe_error` minus `*_cqe_flush_error` (never below zero), so that the
//! receive work requests every job leaves posted at its end, flushed when
//! its QPs are destroyed, are no finding.

use roce_rdma::{Device, Port};

use super::history::FollowedCounter;
use super::ports::{ports, subject};
use super::rates::{names, span};
use super::{Context, Finding, Rule, RuleId, Severity};
use crate::meaning::HwMeaning;

pub const RULES: &[Rule] = &[Rule {
    id: RuleId::CompletionErrors,
    checks: "no work request completes in error within the window (flushed completions excepted), and no remote access, invalid request or length error",
    evaluate: completion_errors,
}];

/// One kind of failure the rule counts: its meaning(s), what it is in the
/// finding, and the flushes to take away from it.
struct Failure {
    meaning: HwMeaning,
    flushes: Option<HwMeaning>,
    what: &'static str,
}

const FAILURES: [Failure; 6] = [
    Failure {
        meaning: HwMeaning::CompletionErrorsRequester,
        flushes: Some(HwMeaning::FlushErrorsRequester),
        what: "requester work request(s) completed in error",
    },
    Failure {
        meaning: HwMeaning::CompletionErrorsResponder,
        flushes: Some(HwMeaning::FlushErrorsResponder),
        what: "receive work request(s) completed in error",
    },
    Failure {
        meaning: HwMeaning::RemoteAccessErrorsRequester,
        flushes: None,
        what: "remote access error(s): the peer refused this side's rkey, address or access",
    },
    Failure {
        meaning: HwMeaning::RemoteAccessErrorsResponder,
        flushes: None,
        what: "RDMA request(s) from a peer refused for a wrong rkey, address or access",
    },
    Failure {
        meaning: HwMeaning::RemoteInvalidRequestErrors,
        flushes: None,
        what: "invalid request NAK(s) from the peer",
    },
    Failure {
        meaning: HwMeaning::LocalLengthErrors,
        flushes: None,
        what: "message(s) received longer than the receive buffer posted for them",
    },
];

/// What one port's counters of one failure moved over the window: the
/// failures and the evidence of the counters behind them.
fn failed(
    ctx: &Context,
    d: &Device,
    p: &Port,
    f: &Failure,
    evidence: &mut Vec<String>,
) -> Option<(u64, f64)> {
    let window = ctx.rules.completion_errors.window;
    let series = ctx.history.port(&d.name, p.number);
    let inc = series.increase(FollowedCounter::Hw(f.meaning), window)?;
    let flushed = f
        .flushes
        .and_then(|m| series.increase(FollowedCounter::Hw(m), window));
    let count = inc
        .amount
        .saturating_sub(flushed.as_ref().map_or(0, |i| i.amount));
    if inc.amount > 0 {
        let mut e = format!("{} +{}", names(d, f.meaning, f.what), inc.amount);
        if let (Some(m), Some(fl)) = (f.flushes, &flushed) {
            e.push_str(&format!(
                " (of which {} +{})",
                names(d, m, "flushed"),
                fl.amount
            ));
        }
        evidence.push(e);
    }
    Some((count, inc.seconds))
}

fn completion_errors(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        let mut parts = Vec::new();
        let mut evidence = Vec::new();
        let mut seconds: f64 = 0.0;
        for f in &FAILURES {
            let Some((count, secs)) = failed(ctx, d, p, f, &mut evidence) else {
                continue;
            };
            seconds = seconds.max(secs);
            if count > 0 {
                parts.push(format!("{count} {}", f.what));
            }
        }
        if parts.is_empty() {
            continue;
        }
        let subject = subject(d, p);
        out.push(Finding {
            rule: RuleId::CompletionErrors,
            severity: Severity::Warning,
            finding: format!(
                "{}: work requests failed in the last {}: {}",
                subject.describe(),
                span(seconds),
                parts.join("; ")
            ),
            evidence: format!(
                "{} over {}; expected no completion in error but flushes, and no access, invalid request or length error \
                 (rules.completion_errors.window)",
                evidence.join(", "),
                span(seconds)
            ),
            fix: "An application on this port saw a work completion with an error status and its QP went to the error state \
                  (NCCL logs it as NET/IB: Got completion from peer <address> with status=..., naming the peer). \
                  Remote access errors: an rkey, address or access right the other side does not accept (an application bug, \
                  or a peer that deregistered its memory or exited mid-transfer); invalid request: the peer NAKed the \
                  request as invalid (an opcode its QP does not take); length errors: a sender's messages are larger than the receive buffers posted \
                  for them. Completion errors with ACK timeouts or retry-exceeded errors beside them are the transport giving \
                  up on a peer it cannot reach: see ack_timeouts. Find the job on this port at that time and the peer it \
                  names; flushes alone are teardown and are not judged"
                .into(),
            verify: format!(
                "rdma statistic show link {}/{} | tr ' ' '\\n' | grep -A1 -E 'cqe|remote|length'  # twice, a minute apart: \
                 no error counter may grow faster than its flush counter",
                d.name, p.number
            ),
            subject,
        });
    }
    out
}
