//! DCQCN judged against the traffic: per role (the notification point's
//! ECN marks per packet received, the reaction point's CNPs per packet
//! sent) and for misconfiguration (marks without CNPs, CNPs ignored).

use super::*;

/// Events per packet on one port over a rule's window, when there was
/// enough traffic to judge.
struct Share {
    events: u64,
    packets: u64,
    /// Time the packets were counted over.
    seconds: f64,
    ratio: f64,
}

impl Share {
    /// The increase of the hardware counters with meaning `events` per
    /// increase of the port's `packets`.
    fn per_traffic(
        ctx: &Context,
        d: &Device,
        p: &Port,
        events: HwMeaning,
        packets: FollowedCounter,
        cfg: &TrafficRatioRule,
    ) -> Option<Share> {
        let series = ctx.history.port(&d.name, p.number);
        let events = series.increase_of_sum(&[FollowedCounter::Hw(events)], cfg.window)?;
        let packets = series.increase(packets, cfg.window)?;
        (packets.amount > 0 && packets.per_second() >= cfg.min_packets_per_second).then(|| Share {
            events: events.amount,
            packets: packets.amount,
            seconds: packets.seconds,
            ratio: events.amount as f64 / packets.amount as f64,
        })
    }
}

/// A traffic-ratio rule: a finding, written by `write`, for every port
/// whose share (from `measure`) is above `cfg.max_ratio`.
fn traffic_ratio(
    ctx: &Context,
    cfg: &TrafficRatioRule,
    measure: impl Fn(&Device, &Port) -> Option<Share>,
    write: impl Fn(&Device, &Port, Subject, Share) -> Finding,
) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    ports(s)
        .filter_map(|(d, p)| {
            let share = measure(d, p).filter(|t| t.ratio > cfg.max_ratio)?;
            Some(write(d, p, subject(d, p), share))
        })
        .collect()
}

/// [`traffic_ratio`] of a hardware counter's increase against the RoCE
/// packets counted by `counters.1`.
fn per_traffic_ratio(
    ctx: &Context,
    cfg: &TrafficRatioRule,
    counters: (HwMeaning, FollowedCounter),
    write: impl Fn(&Device, &Port, Subject, Share) -> Finding,
) -> Vec<Finding> {
    let (events, packets) = counters;
    let measure = |d: &Device, p: &Port| Share::per_traffic(ctx, d, p, events, packets, cfg);
    traffic_ratio(ctx, cfg, measure, write)
}

fn percent(ratio: f64) -> String {
    fmt_num((ratio * 1000.0).round() / 10.0)
}

pub(super) fn receiver_congested(ctx: &Context) -> Vec<Finding> {
    let cfg = &ctx.rules.receiver_congested;
    per_traffic_ratio(
        ctx,
        cfg,
        (HwMeaning::EcnMarked, FollowedCounter::RcvPackets),
        |d, p, subject, t| {
            Finding {
            rule: RuleId::ReceiverCongested,
            severity: Severity::Warning,
            finding: format!(
                "{}: {}% of the RoCE packets received carry an ECN congestion mark: the path into this host stays congested \
                 (notification point role)",
                subject.describe(),
                percent(t.ratio)
            ),
            evidence: format!(
                "{} +{} of port_rcv_packets +{} over {} = {}%; expected <= {}% (rules.receiver_congested.max_ratio)",
                names(d, HwMeaning::EcnMarked, "ECN-marked RoCE packets"),
                t.events,
                t.packets,
                span(t.seconds),
                percent(t.ratio),
                percent(cfg.max_ratio)
            ),
            fix: "Switch queues toward this host stay above their ECN marking threshold for most of the window: DCQCN does not \
                  bring the senders down to what this port drains. Look for incast beyond the job's design (many senders to this \
                  host), an oversubscribed last hop, or a slow receiver (PCIe, out_of_buffer); check that the senders react \
                  (rp_cnp_handled grows there) and that the switch ECN thresholds match the fabric design"
                .into(),
            verify: format!(
                "rdma statistic show link {}/{}  # twice: np_ecn_marked_roce_packets against port_rcv_packets in sysfs counters/",
                d.name, p.number
            ),
            subject,
        }
        },
    )
}

pub(super) fn sender_throttled(ctx: &Context) -> Vec<Finding> {
    let cfg = &ctx.rules.sender_throttled;
    per_traffic_ratio(
        ctx,
        cfg,
        (HwMeaning::CnpHandled, FollowedCounter::XmitPackets),
        |d, p, subject, t| {
            Finding {
            rule: RuleId::SenderThrottled,
            severity: Severity::Warning,
            finding: format!(
                "{}: {} CNPs handled per 100 RoCE packets sent: DCQCN keeps cutting this host's sending rate (reaction point role)",
                subject.describe(),
                percent(t.ratio)
            ),
            evidence: format!(
                "{} +{} per port_xmit_packets +{} over {} = {}%; expected <= {}% (rules.sender_throttled.max_ratio)",
                names(d, HwMeaning::CnpHandled, "CNPs handled"),
                t.events,
                t.packets,
                span(t.seconds),
                percent(t.ratio),
                percent(cfg.max_ratio)
            ),
            fix: format!(
                "The receivers of this host's traffic are congested: a notification point sends at most one CNP per QP per CNP \
                 interval, so this many means many congested flows for most of the window. Find the congested receivers or hops \
                 (receiver_congested on them, switch ECN counters), spread the traffic (NCCL_IB_HCA, adaptive routing), and \
                 compare the DCQCN parameters (/sys/class/net/{}/ecn/roce_rp/*) with the fabric design",
                netdev_of(d, p)
            ),
            verify: format!("rdma statistic show link {}/{}  # twice, a few seconds apart", d.name, p.number),
            subject,
        }
        },
    )
}

pub(super) fn cnp_not_sent(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.cnp_not_sent;
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        let series = ctx.history.port(&d.name, p.number);
        let (Some(marked), Some(sent)) = (
            series.increase(FollowedCounter::Hw(HwMeaning::EcnMarked), cfg.window),
            series.increase(FollowedCounter::Hw(HwMeaning::CnpSent), cfg.window),
        ) else {
            continue;
        };
        if sent.amount > 0 || marked.amount == 0 || marked.per_second() <= cfg.per_second {
            continue;
        }
        let subject = subject(d, p);
        let netdev = netdev_of(d, p);
        out.push(Finding {
            rule: RuleId::CnpNotSent,
            severity: Severity::Warning,
            finding: format!(
                "{}: ECN-marked RoCE packets arrive but no CNP is sent: the notification point is off, senders never slow down",
                subject.describe()
            ),
            evidence: format!(
                "{} +{} ({}/s), {} +0 over {}; expected CNPs when marks arrive above {}/s (rules.cnp_not_sent.per_second)",
                names(d, HwMeaning::EcnMarked, "ECN-marked RoCE packets"),
                marked.amount,
                fmt_num(marked.per_second()),
                names(d, HwMeaning::CnpSent, "CNPs sent"),
                span(marked.seconds),
                fmt_num(cfg.per_second)
            ),
            fix: format!(
                "Turn the notification point on for the RoCE priority: echo 1 > /sys/class/net/{netdev}/ecn/roce_np/enable/<priority> \
                 (mlx5; the priority is the one PFC is on, dcb pfc show dev {netdev}). Without CNPs congestion is left to PFC pauses \
                 or drops"
            ),
            verify: format!(
                "grep -H . /sys/class/net/{netdev}/ecn/roce_np/enable/*; rdma statistic show link {}/{}  # np_cnp_sent must grow with the marks",
                d.name, p.number
            ),
            subject,
        });
    }
    out
}

pub(super) fn cnp_ignored(ctx: &Context) -> Vec<Finding> {
    let cfg = &ctx.rules.cnp_ignored;
    // Ignored among all received (ignored + handled), over the time the
    // ignored ones were counted.
    let measure = |d: &Device, p: &Port| {
        let series = ctx.history.port(&d.name, p.number);
        let ignored = series.increase(FollowedCounter::Hw(HwMeaning::CnpIgnored), cfg.window)?;
        let handled = series
            .increase(FollowedCounter::Hw(HwMeaning::CnpHandled), cfg.window)
            .map_or(0, |i| i.amount);
        let received = ignored.amount.saturating_add(handled);
        if ignored.amount == 0 || ignored.seconds <= 0.0 {
            return None;
        }
        if (received as f64 / ignored.seconds) < cfg.min_packets_per_second {
            return None;
        }
        Some(Share {
            events: ignored.amount,
            packets: received,
            seconds: ignored.seconds,
            ratio: ignored.amount as f64 / received as f64,
        })
    };
    traffic_ratio(ctx, cfg, measure, |d, p, subject, t| {
        let netdev = netdev_of(d, p);
        Finding {
            rule: RuleId::CnpIgnored,
            severity: Severity::Warning,
            finding: format!(
                "{}: {}% of the CNPs received are ignored: the reaction point is off, this host does not slow down when told to",
                subject.describe(),
                percent(t.ratio)
            ),
            evidence: format!(
                "{} +{}, {} +{} over {} = {}% ignored; expected <= {}% (rules.cnp_ignored.max_ratio)",
                names(d, HwMeaning::CnpIgnored, "CNPs ignored"),
                t.events,
                names(d, HwMeaning::CnpHandled, "CNPs handled"),
                t.packets - t.events,
                span(t.seconds),
                percent(t.ratio),
                percent(cfg.max_ratio)
            ),
            fix: format!(
                "Turn the reaction point on for the RoCE priority: echo 1 > /sys/class/net/{netdev}/ecn/roce_rp/enable/<priority> \
                 (mlx5; the priority PFC is on, dcb pfc show dev {netdev}). A sender that ignores CNPs keeps the congestion it \
                 causes, and PFC pauses spread it"
            ),
            verify: format!(
                "grep -H . /sys/class/net/{netdev}/ecn/roce_rp/enable/*; rdma statistic show link {}/{}  # rp_cnp_ignored must stop growing",
                d.name, p.number
            ),
            subject,
        }
    })
}

/// The port's netdev for a fix, or the shell words that find it where the
/// snapshot has none.
fn netdev_of(d: &Device, p: &Port) -> String {
    p.netdev
        .clone()
        .unwrap_or_else(|| format!("$(ls /sys/class/infiniband/{}/device/net)", d.name))
}
