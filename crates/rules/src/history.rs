//! What the rules remember of earlier samples: the values of the counters
//! that rate rules follow, per subject, at the sample times kept.
//!
//! Rate rules look back over windows of up to ten minutes. Keeping whole
//! snapshots for that (every counter of every port, dozens of times) would
//! cost most of the sampler's memory, and reading a value back would mean
//! finding the port and the counter by name in every kept snapshot, for
//! every rule, every sample. Instead, each sample's followed values are taken once, when
//! the sample is pushed ([`History::push`]), into one column per (subject,
//! value) beside a shared column of sample times; a rule reads a column.
//!
//! Which values are followed is [`FollowedCounter`]: adding a rate rule over a new
//! quantity means adding its variant and taking it in [`followed`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use roce_netdev::{Meaning, Netdev, StatValue};
use roce_rdma::Port;

use super::window::{age, increase_over, Increase};
use crate::meaning::{HwMeaning, Provider, HW_MAPPINGS};
use crate::snapshot::Snapshot;

/// Most samples kept. A 10-minute window at 5 s would be 120 samples;
/// beyond this count the history is thinned evenly instead, which rate
/// rules tolerate (an increase over fewer, wider intervals is the same
/// increase; a reset inside a merged interval is skipped, as any reset).
pub const HISTORY_MAX: usize = 64;

/// What a column is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SubjectKey {
    /// An RDMA port: device and port number.
    Port(String, u32),
    /// A netdev by name.
    Netdev(String),
    /// A probe target: device, port, GID index.
    Probe(String, u8, u32),
    /// A PCI function (NIC, GPU or bridge port) by address: its AER counts.
    Pci(String),
    /// A devlink health reporter: PCI address, reporter name, devlink port.
    Reporter(String, String, Option<u32>),
}

/// A value followed over time. Every one is a cumulative counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowedCounter {
    /// `counters/link_downed` (rxe: its hardware counter of that name).
    LinkDowned,
    /// `counters/symbol_error`.
    SymbolErrors,
    /// `counters/port_rcv_packets`: on RoCE (mlx5) the RDMA packets
    /// received, the traffic congestion ratios are measured against.
    RcvPackets,
    /// `counters/port_xmit_packets`: RDMA packets sent.
    XmitPackets,
    /// Sum of the port's hardware counters with this meaning.
    Hw(HwMeaning),
    /// A netdev statistic with this meaning, as an integer ([`stat_integer`]).
    Stat(Meaning),
    /// A netdev's discards for one reason ([`discards`]).
    Discards(&'static str),
    /// A netdev's `carrier_down_count` (sysfs).
    CarrierDown,
    /// A netdev's FEC corrected bits and uncorrectable codewords (totals).
    FecCorrectedBits,
    FecUncorrectable,
    /// A PCI function's AER totals by severity.
    AerCorrectable,
    AerNonfatal,
    AerFatal,
    /// A devlink health reporter's error count.
    ReporterErrors,
    ProbeRequests,
    /// Failed probe rounds, every reason together.
    ProbeFailures,
    ProbeSuccesses,
    /// Round trips in the RTT histogram.
    ProbeRttCount,
    /// Sum of the round-trip times, in nanoseconds.
    ProbeRttSumNanos,
}

/// One followed value: its samples, aligned with [`History::times`]; `None`
/// where the subject or the value was absent.
#[derive(Debug, Clone)]
struct Column {
    value: FollowedCounter,
    samples: VecDeque<Option<u64>>,
}

/// Most RDMA devices, and ports per device, remembered as seen: far above
/// any host (a few dozen RDMA devices with SR-IOV), so that a host that
/// creates devices without end cannot grow the memory without end.
pub const SEEN_MAX_DEVICES: usize = 256;
pub const SEEN_MAX_PORTS: usize = 64;

/// The RDMA devices and ports seen since start (or the last
/// [`History::forget_seen`]), by name and number: what a NIC that falls
/// off the bus leaves behind when its series vanish.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    devices: BTreeMap<String, BTreeSet<u32>>,
}

impl Seen {
    fn record(&mut self, s: &Snapshot) {
        for d in s.rdma.iter().flat_map(|r| r.devices.iter()) {
            if !self.devices.contains_key(&d.name) && self.devices.len() >= SEEN_MAX_DEVICES {
                continue;
            }
            let ports = self.devices.entry(d.name.clone()).or_default();
            for p in &d.ports {
                if ports.len() < SEEN_MAX_PORTS || ports.contains(&p.number) {
                    ports.insert(p.number);
                }
            }
        }
    }

    /// Devices seen, in name order, with their ports.
    pub fn devices(&self) -> impl Iterator<Item = (&str, &BTreeSet<u32>)> {
        self.devices.iter().map(|(d, p)| (d.as_str(), p))
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

/// The followed values of the samples kept, oldest first.
#[derive(Debug, Clone)]
pub struct History {
    /// Sample times on the monotonic clock ([`Snapshot::clock`]).
    times: VecDeque<Duration>,
    subjects: HashMap<SubjectKey, Vec<Column>>,
    /// RDMA devices and ports seen, whatever the retention.
    seen: Seen,
    /// How far back samples are kept (the longest rule window and one
    /// interval more), and how many at most.
    retention: Duration,
    max: usize,
}

impl Default for History {
    fn default() -> Self {
        History::new(Duration::MAX, HISTORY_MAX)
    }
}

impl History {
    pub fn new(retention: Duration, max: usize) -> Self {
        History {
            times: VecDeque::new(),
            subjects: HashMap::new(),
            seen: Seen::default(),
            retention,
            max: max.max(2),
        }
    }

    /// A history of `snapshots` (oldest first) kept whole: for one-shot
    /// evaluations and tests.
    pub fn of<'a>(snapshots: impl IntoIterator<Item = &'a Snapshot>) -> Self {
        let mut history = History::new(Duration::MAX, usize::MAX);
        for s in snapshots {
            history.push(s);
        }
        history
    }

    /// Changes how much is kept, from the next push on.
    pub fn set_retention(&mut self, retention: Duration) {
        self.retention = retention;
        self.thin();
    }

    /// Samples kept.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// Columns kept, every subject together (for tests and benchmarks).
    pub fn columns(&self) -> usize {
        self.subjects.values().map(Vec::len).sum()
    }

    /// Takes the followed values of `s`, then drops what the retention no
    /// longer covers. A snapshot without a time is not kept: nothing could
    /// be measured against it.
    pub fn push(&mut self, s: &Snapshot) {
        self.seen.record(s);
        let Some(t) = s.clock() else { return };
        self.times.push_back(t);
        let len = self.times.len();
        let subjects = &mut self.subjects;
        let cap = self.max.saturating_add(1).min(1024).max(len);
        followed(s, &mut |subject, values| {
            if values.is_empty() {
                return;
            }
            let columns = subjects.entry(subject).or_default();
            for &(value, sample) in values {
                let column = match columns.iter_mut().position(|c| c.value == value) {
                    Some(i) => &mut columns[i],
                    None => {
                        // Room for one sample over the cap: a push comes
                        // before the thinning, and a full deque would
                        // double.
                        let mut samples = VecDeque::with_capacity(cap);
                        samples.extend(std::iter::repeat_n(None, len - 1));
                        columns.push(Column { value, samples });
                        let last = columns.len() - 1;
                        &mut columns[last]
                    }
                };
                if column.samples.len() < len {
                    column.samples.push_back(Some(sample));
                }
            }
        });
        // Columns this sample did not carry get a gap; those left with
        // nothing but gaps (a port that went away) are dropped.
        for columns in self.subjects.values_mut() {
            columns.retain_mut(|c| {
                if c.samples.len() == len {
                    return true;
                }
                c.samples.push_back(None);
                c.samples.iter().any(Option::is_some)
            });
        }
        self.subjects.retain(|_, columns| !columns.is_empty());
        self.thin();
    }

    /// Drops samples older than the retention (keeping two at least), then,
    /// while more than `max` remain, removes the inner sample whose removal
    /// merges the shortest pair of intervals, so that the samples stay evenly
    /// spread over the window. The first and the latest are never removed.
    fn thin(&mut self) {
        let Some(&latest) = self.times.back() else {
            return;
        };
        let mut expired = 0;
        while self.times.len() - expired > 2 && age(latest, self.times[expired]) > self.retention {
            expired += 1;
        }
        if expired > 0 {
            self.times.drain(..expired);
            for c in self.subjects.values_mut().flatten() {
                c.samples.drain(..expired);
            }
        }
        while self.times.len() > self.max {
            let span = |a: usize, b: usize| age(self.times[b], self.times[a]);
            let drop = (1..self.times.len() - 1)
                .min_by_key(|&i| span(i - 1, i + 1))
                .unwrap_or(1);
            self.times.remove(drop);
            for c in self.subjects.values_mut().flatten() {
                c.samples.remove(drop);
            }
        }
    }

    /// The RDMA devices and ports seen since start.
    pub fn seen(&self) -> &Seen {
        &self.seen
    }

    /// Forgets the devices and ports seen (a new device selection: one now
    /// excluded is not gone).
    pub fn forget_seen(&mut self) {
        self.seen = Seen::default();
    }

    /// The columns of one RDMA port.
    pub fn port(&self, device: &str, port: u32) -> Series<'_> {
        self.series(SubjectKey::Port(device.to_string(), port))
    }

    /// The columns of one netdev.
    pub fn netdev(&self, name: &str) -> Series<'_> {
        self.series(SubjectKey::Netdev(name.to_string()))
    }

    /// The columns of one PCI function.
    pub fn pci(&self, address: &str) -> Series<'_> {
        self.series(SubjectKey::Pci(address.to_string()))
    }

    /// The columns of one devlink health reporter.
    pub fn reporter(&self, pci: &str, name: &str, port: Option<u32>) -> Series<'_> {
        self.series(SubjectKey::Reporter(
            pci.to_string(),
            name.to_string(),
            port,
        ))
    }

    /// The columns of one probe target.
    pub fn probe(&self, device: &str, port: u8, gid_index: u32) -> Series<'_> {
        self.series(SubjectKey::Probe(device.to_string(), port, gid_index))
    }

    fn series(&self, key: SubjectKey) -> Series<'_> {
        Series {
            times: &self.times,
            columns: self.subjects.get(&key).map_or(&[], Vec::as_slice),
        }
    }
}

/// The followed values of one subject.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    times: &'a VecDeque<Duration>,
    columns: &'a [Column],
}

impl Series<'_> {
    /// Increase of `value` over the samples within `window` of the latest.
    pub fn increase(&self, value: FollowedCounter, window: Duration) -> Option<Increase> {
        self.increase_of_sum(&[value], window)
    }

    /// Increase of the sum of `values` over the samples within `window`:
    /// the sum of each value's own reset-aware increase, a sample without
    /// the value being a gap in its column as for a single value, not the
    /// increase of per-sample sums: a value that fails to read for one
    /// sample (EIO, say) would make the sum drop and then count the value's
    /// whole size as growth when it comes back, a false spike. The time
    /// covered is the longest of theirs.
    pub fn increase_of_sum(
        &self,
        values: &[FollowedCounter],
        window: Duration,
    ) -> Option<Increase> {
        let start = self.window_start(window);
        let mut total: Option<Increase> = None;
        for column in self.columns.iter().filter(|c| values.contains(&c.value)) {
            let samples = (start..self.times.len())
                .filter_map(|i| Some((self.times[i], column.samples.get(i).copied().flatten()?)));
            let Some(inc) = increase_over(samples) else {
                continue;
            };
            total = Some(match total {
                None => inc,
                Some(t) => Increase {
                    amount: t.amount.saturating_add(inc.amount),
                    seconds: t.seconds.max(inc.seconds),
                    resets: t.resets.saturating_add(inc.resets),
                },
            });
        }
        total
    }

    /// The first present sample of `value` within `window` of the latest.
    pub fn first_within(&self, value: FollowedCounter, window: Duration) -> Option<u64> {
        let column = self.columns.iter().find(|c| c.value == value)?;
        let start = self.window_start(window);
        column.samples.range(start..).find_map(|v| *v)
    }

    /// Index of the oldest sample within `window` of the latest.
    fn window_start(&self, window: Duration) -> usize {
        let Some(&latest) = self.times.back() else {
            return 0;
        };
        self.times
            .iter()
            .position(|&t| age(latest, t) <= window)
            .unwrap_or(self.times.len().saturating_sub(1))
    }
}

/// The meanings whose hardware counters rate rules follow.
const FOLLOWED_HW: [HwMeaning; 18] = [
    HwMeaning::Retransmissions,
    HwMeaning::LocalAckTimeout,
    HwMeaning::OutOfSequence,
    HwMeaning::PacketSeqErr,
    HwMeaning::ImpliedNakSeqErr,
    HwMeaning::OutOfBuffer,
    HwMeaning::CnpSent,
    HwMeaning::CnpHandled,
    HwMeaning::CnpIgnored,
    HwMeaning::EcnMarked,
    HwMeaning::CompletionErrorsRequester,
    HwMeaning::CompletionErrorsResponder,
    HwMeaning::FlushErrorsRequester,
    HwMeaning::FlushErrorsResponder,
    HwMeaning::RemoteAccessErrorsRequester,
    HwMeaning::RemoteAccessErrorsResponder,
    HwMeaning::RemoteInvalidRequestErrors,
    HwMeaning::LocalLengthErrors,
];

/// What [`followed`] hands over per subject.
type TakeSubject<'a> = dyn FnMut(SubjectKey, &[(FollowedCounter, u64)]) + 'a;

/// Calls `take` once per subject of `s` with its followed values.
fn followed(s: &Snapshot, take: &mut TakeSubject<'_>) {
    let mut values: Vec<(FollowedCounter, u64)> = Vec::new();
    for d in s.rdma.iter().flat_map(|r| r.devices.iter()) {
        let provider = Provider::of(d);
        for p in &d.ports {
            values.clear();
            if let Some(v) = link_downed(p) {
                values.push((FollowedCounter::LinkDowned, v));
            }
            if let Some(v) = p.counter("symbol_error") {
                values.push((FollowedCounter::SymbolErrors, v));
            }
            if let Some(v) = p.counter("port_rcv_packets") {
                values.push((FollowedCounter::RcvPackets, v));
            }
            if let Some(v) = p.counter("port_xmit_packets") {
                values.push((FollowedCounter::XmitPackets, v));
            }
            let mut sums = [None::<u64>; HwMeaning::ALL.len()];
            for row in HW_MAPPINGS.iter().filter(|m| Some(m.provider) == provider) {
                if let Some(v) = p.hw_counter(row.name) {
                    let sum = &mut sums[row.meaning.index()];
                    *sum = Some(sum.map_or(v, |s| s.saturating_add(v)));
                }
            }
            for m in FOLLOWED_HW {
                if let Some(v) = sums[m.index()] {
                    values.push((FollowedCounter::Hw(m), v));
                }
            }
            take(SubjectKey::Port(d.name.clone(), p.number), &values);
        }
    }
    for n in s.netdev.iter().flat_map(|nd| nd.netdevs.iter()) {
        values.clear();
        let mut reasons: Vec<&'static str> = Vec::new();
        for stat in &n.stats {
            // The first statistic with a meaning is its value (as
            // `stat_value` reads it), taken once.
            match stat.meaning {
                Meaning::PfcPauseFrames { .. }
                | Meaning::PfcPauseDuration { .. }
                | Meaning::PauseStormEvents { .. }
                | Meaning::PhySymbolErrors
                | Meaning::LinkDownEvents
                | Meaning::Discards {
                    priority: Some(_), ..
                } if !values
                    .iter()
                    .any(|(v, _)| *v == FollowedCounter::Stat(stat.meaning)) =>
                {
                    values.push((
                        FollowedCounter::Stat(stat.meaning),
                        stat_integer(stat.value),
                    ));
                }
                _ => {}
            }
            if let Meaning::Discards { reason, .. } = stat.meaning {
                if !reasons.contains(&reason) {
                    reasons.push(reason);
                }
            }
        }
        for reason in reasons {
            if let Some(v) = discards(n, reason) {
                values.push((FollowedCounter::Discards(reason), v));
            }
        }
        if let Some(v) = n.carrier.down {
            values.push((FollowedCounter::CarrierDown, v));
        }
        take(SubjectKey::Netdev(n.name.clone()), &values);
    }
    if let Some(phys) = &s.phys {
        followed_phys(phys, take);
    }
    for (t, st) in s.probes.iter().flat_map(|r| r.targets.iter()) {
        let failures = st
            .failures
            .values()
            .copied()
            .fold(0u64, u64::saturating_add);
        let rtt_nanos = (st.rtt.sum_seconds * 1e9).round().max(0.0) as u64;
        take(
            SubjectKey::Probe(t.device.clone(), t.port, t.gid_index),
            &[
                (FollowedCounter::ProbeRequests, st.requests),
                (FollowedCounter::ProbeFailures, failures),
                (FollowedCounter::ProbeSuccesses, st.successes),
                (FollowedCounter::ProbeRttCount, st.rtt.count),
                (FollowedCounter::ProbeRttSumNanos, rtt_nanos),
            ],
        );
    }
}

/// The physical-layer values: FEC totals per netdev (its own call, the
/// netdev's other values were taken above), AER totals per PCI function,
/// devlink reporter error counts.
fn followed_phys(phys: &roce_netdev::phys::PhysSnapshot, take: &mut TakeSubject<'_>) {
    let mut values: Vec<(FollowedCounter, u64)> = Vec::new();
    let aer = |pci: &str, a: &roce_netdev::aer::PciAer, take: &mut TakeSubject<'_>| {
        let mut v = Vec::new();
        for (value, counts) in [
            (FollowedCounter::AerCorrectable, &a.correctable),
            (FollowedCounter::AerNonfatal, &a.nonfatal),
            (FollowedCounter::AerFatal, &a.fatal),
        ] {
            if let Some(total) = counts.as_ref().and_then(|c| c.total) {
                v.push((value, total));
            }
        }
        take(SubjectKey::Pci(pci.to_string()), &v);
    };
    for n in &phys.netdevs {
        values.clear();
        if let Some(fec) = &n.fec {
            if let Some(c) = &fec.corrected_bits {
                values.push((FollowedCounter::FecCorrectedBits, c.total));
            }
            if let Some(c) = &fec.uncorrectable_blocks {
                values.push((FollowedCounter::FecUncorrectable, c.total));
            }
        }
        take(SubjectKey::Netdev(n.name.clone()), &values);
        if let Some(pci) = &n.pci {
            aer(pci, &n.aer, take);
        }
    }
    for g in &phys.gpus {
        aer(&g.pci, &g.aer, take);
    }
    for b in &phys.bridges {
        aer(&b.pci, &b.aer, take);
    }
    for r in phys.reporters.iter().flatten() {
        let r = &r.reporter;
        take(
            SubjectKey::Reporter(r.device.clone(), r.name.clone(), r.port),
            &[(FollowedCounter::ReporterErrors, r.errors)],
        );
    }
}

/// A link going down: the IB PMA counter on real HCAs; rxe counts it among
/// its hardware counters.
pub fn link_downed(p: &Port) -> Option<u64> {
    p.counter("link_downed")
        .or_else(|| p.hw_counter("link_downed"))
}

/// A statistic as an integer: counts as they are, durations in
/// microseconds (the unit drivers count in), so that the reset-aware integer
/// windows apply.
pub fn stat_integer(value: StatValue) -> u64 {
    match value {
        StatValue::Count(c) => c,
        StatValue::Seconds(sec) => (sec * 1e6).round().max(0.0) as u64,
    }
}

/// A netdev's discards for one reason: the port-wide counter when the
/// driver has one, else the sum of the per-priority counters (mlx5 has both `rx_discards_phy` and
/// `rx_prioN_discards`; summing both would count twice).
pub fn discards(n: &Netdev, reason: &str) -> Option<u64> {
    let value = |m: Meaning| {
        n.stats
            .iter()
            .find(|s| s.meaning == m)
            .map(|s| stat_integer(s.value))
    };
    let whole = n.stats.iter().find_map(|s| match s.meaning {
        Meaning::Discards {
            reason: r,
            priority: None,
        } if r == reason => value(s.meaning),
        _ => None,
    });
    whole.or_else(|| {
        n.stats
            .iter()
            .filter_map(|s| match s.meaning {
                Meaning::Discards {
                    reason: r,
                    priority: Some(_),
                } if r == reason => value(s.meaning),
                _ => None,
            })
            .reduce(u64::saturating_add)
    })
}

#[cfg(test)]
mod tests;
