//! The peer prober of one local port: the rounds over the peers on its
//! rail (the walk, the traffic plan, the probes) and the statistics they
//! keep, with the RTT baseline at the end of each round.

use std::time::Instant;

use super::*;

/// The peer prober of one local port: runs rounds over a verbs port and
/// keeps the statistics. No thread of its own: the caller says how long
/// to wait between probes (see [`spacing`]).
pub struct PortProber<P: PeerPort> {
    pub local: Endpoint,
    port: P,
    pub settings: PeerSettings,
    /// Whom the port answers (the matching peers' responders as of the
    /// last [`PortProber::set_peers`]) and how often, and the cookies the
    /// peers gave this prober.
    responder: Responder,
    id: ProberId,
    seq: u32,
    /// The peers on this port's rail, in a stable order.
    matching: Vec<Endpoint>,
    /// Where the walk over the matching peers goes on next round.
    cursor: usize,
    /// Walks over the whole list so far: with a pair's own visits, picks
    /// its flow label (a pair's state is forgotten between visits).
    laps: u64,
    /// The last round's small probes were all lost (at least two): the
    /// next round probes only [`FOCUS_PEERS`] suspects, so that a port
    /// that reaches nobody is judged in seconds, not after rounds whose
    /// every probe costs the timeout.
    focus: bool,
    pub stats: PortStats,
}

/// Suspects a port whose last round got no answer probes per round.
pub const FOCUS_PEERS: usize = 2;

/// How a probe was counted.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Recorded {
    /// Answered; the RTT (seconds) of a small probe.
    Answered(Option<f64>),
    Lost,
    Pending,
    /// Not sent (counted by reason, neither answered nor lost).
    Failed,
}

impl<P: PeerPort> PortProber<P> {
    pub fn new(local: Endpoint, port: P, settings: PeerSettings, id: ProberId) -> Self {
        let stats = PortStats {
            clock: port.clock(),
            ..PortStats::default()
        };
        PortProber {
            local,
            port,
            settings,
            responder: Responder::new(id.incarnation, Instant::now()),
            id,
            seq: 0,
            matching: Vec::new(),
            // Each node starts its walk at a place of its own: the nonce is
            // random per start.
            cursor: id.nonce as usize,
            laps: 0,
            focus: false,
            stats,
        }
    }

    /// The peers on this port's rail, in a stable order.
    pub fn matching(&self, peers: &[Endpoint]) -> Vec<Endpoint> {
        let mut m: Vec<Endpoint> = peers
            .iter()
            .filter(|p| same_rail(&self.local, p, self.settings.all_to_all))
            .filter(|p| !(p.gid == self.local.gid && p.qpn == self.local.qpn))
            .cloned()
            .collect();
        m.sort();
        m.dedup();
        m
    }

    /// Takes a new peer list: the matching peers are probed from the next
    /// round on and their responders admitted at once. Called when the
    /// list changes, not every round (the work grows with the list).
    pub fn set_peers(&mut self, peers: &[Endpoint]) {
        self.matching = self.matching(peers);
        self.stats.peers_known = self.matching.len();
        self.responder
            .set_admitted(self.matching.iter().map(|p| (p.gid, p.qpn)).collect());
    }

    /// The matching peers held now.
    pub fn peers(&self) -> &[Endpoint] {
        &self.matching
    }

    /// One round over `peers`: a small and a large probe to each peer of
    /// this round's sample. `pause` is called between probes (tests pass
    /// a no-op).
    pub fn round(&mut self, peers: &[Endpoint], pause: &mut dyn FnMut()) {
        self.round_with(peers, &mut || {
            pause();
            Some(Duration::ZERO)
        });
    }

    /// One round over `peers` (see [`PortProber::next_round`]).
    pub fn round_with(&mut self, peers: &[Endpoint], gap: &mut dyn FnMut() -> Option<Duration>) {
        self.set_peers(peers);
        self.next_round(gap);
    }

    /// One round over the peers of the last [`PortProber::set_peers`],
    /// answering peers between probes: after each probe `gap` says how
    /// long to wait (answering probes meanwhile, see
    /// [`PortProber::idle`]); `None` ends the round at once (the runner
    /// is stopping). A peer whose small probe was lost (or pending) gets
    /// no large one this round (it would tell nothing and cost another
    /// timeout).
    pub fn next_round(&mut self, gap: &mut dyn FnMut() -> Option<Duration>) {
        let sample = self.settings.sample.clamp(1, MAX_SAMPLE);
        let focused = if self.focus {
            suspects(&self.matching, FOCUS_PEERS, &self.stats.peers)
        } else {
            Vec::new()
        };
        let (chosen, wrapped) = if focused.is_empty() {
            let (chosen, cursor, wrapped) =
                choose(&self.matching, sample, self.cursor, &self.stats.peers);
            self.cursor = cursor;
            (chosen, wrapped)
        } else {
            (focused, false)
        };
        // The lap of this round's peers (a wrap ends the lap after them).
        let lap = self.laps;
        self.laps += u64::from(wrapped);
        for p in self.stats.peers.values_mut() {
            p.rounds_since_sampled += 1;
        }
        let large = self.local.mtu.max(SMALL_PAYLOAD);
        // Small probes only: a large probe's RTT includes its
        // serialization, so mixing sizes would blur the baseline.
        let mut round_rtts: Vec<f64> = Vec::with_capacity(chosen.len());
        let (mut small_sent, mut small_lost) = (0usize, 0usize);
        for peer in &chosen {
            let key = peer.key();
            let pair = self.stats.peers.entry(key.clone()).or_default();
            pair.rounds_since_sampled = 0;
            pair.suspect_rounds = pair.suspect_rounds.saturating_sub(1);
            let label = flow_label(
                pair_number(&key),
                lap.wrapping_add(pair.visits),
                self.settings.flow_labels,
            );
            pair.visits += 1;
            // The large probe is sized by this port's MTU, not the peer's:
            // a peer (or a path) with a lower MTU is what it must reveal.
            for (size, is_large) in [(SMALL_PAYLOAD, false), (large, true)] {
                self.seq = self.seq.wrapping_add(1);
                let probe = Probe {
                    nonce: self.id.nonce,
                    seq: self.seq,
                    incarnation: self.id.incarnation,
                    size,
                    flow_label: label,
                    traffic_class: self.settings.traffic_class,
                };
                let mut served = Served::default();
                let outcome = self.port.ping(
                    peer,
                    &probe,
                    self.settings.timeout,
                    &mut self.responder,
                    &mut served,
                );
                self.stats.served.add(&served);
                let recorded = self.record(peer, is_large, outcome);
                let lost = recorded == Recorded::Lost;
                if !is_large {
                    small_sent += 1;
                    small_lost += usize::from(lost);
                }
                if let Recorded::Answered(Some(rtt)) = recorded {
                    round_rtts.push(rtt);
                }
                match gap() {
                    Some(d) => self.idle(d),
                    None => {
                        bound_pairs(&mut self.stats.peers, &chosen);
                        return;
                    }
                }
                if !is_large && matches!(recorded, Recorded::Lost | Recorded::Pending) {
                    break;
                }
            }
        }
        self.focus = small_sent >= FOCUS_PEERS && small_lost == small_sent;
        end_round(&mut self.stats, &mut round_rtts);
        let mut served = Served::default();
        self.port.serve(&mut self.responder, &mut served);
        self.stats.served.add(&served);
        bound_pairs(&mut self.stats.peers, &chosen);
    }

    /// Counts one probe's outcome (with the RTT of an answered small
    /// probe). A
    /// probe lost to a peer that says it is still learning its peers, and
    /// that has not answered this port in its current incarnation, is
    /// pending: it may not know this port yet.
    fn record(&mut self, peer: &Endpoint, is_large: bool, outcome: ProbeOutcome) -> Recorded {
        let stats = &mut self.stats;
        let pair = stats.peers.entry(peer.key()).or_default();
        let (port_sent, pair_sent, last, recent) = if is_large {
            (
                &mut stats.large,
                &mut pair.large,
                &mut pair.last_large_ok,
                &mut pair.recent_large,
            )
        } else {
            (
                &mut stats.small,
                &mut pair.small,
                &mut pair.last_small_ok,
                &mut pair.recent_small,
            )
        };
        let answered = match outcome {
            ProbeOutcome::Answered { rtt, incarnation } => {
                pair.answered_by = Some(incarnation);
                pair.last_pending = false;
                stats.rtt.observe(rtt);
                Some(rtt)
            }
            ProbeOutcome::Lost
                if peer.learning
                    && (peer.incarnation == 0 || pair.answered_by != Some(peer.incarnation)) =>
            {
                pair.pending += 1;
                pair.last_pending = true;
                stats.pending += 1;
                return Recorded::Pending;
            }
            ProbeOutcome::Lost | ProbeOutcome::Unresolved => {
                if outcome == ProbeOutcome::Unresolved {
                    pair.unresolved += 1;
                }
                pair.last_pending = false;
                None
            }
            ProbeOutcome::Failed(f) => {
                *pair.errors.entry(f.reason.as_str()).or_insert(0) += 1;
                return Recorded::Failed;
            }
        };
        port_sent.sent += 1;
        pair_sent.sent += 1;
        if answered.is_some() {
            port_sent.answered += 1;
            pair_sent.answered += 1;
        }
        *last = Some(answered.is_some());
        recent.push(answered.is_some());
        match answered {
            Some(rtt) => {
                if !is_large {
                    pair.suspect_rounds = 0;
                    return Recorded::Answered(Some(rtt.as_secs_f64()));
                }
                Recorded::Answered(None)
            }
            None => {
                // A first loss makes the pair a suspect for the next rounds;
                // one whose last probes were all lost is judged, and goes
                // back to the walk.
                if !is_large
                    && pair.suspect_rounds == 0
                    && !pair.recent_small.last_all_lost(u32::from(SUSPECT_PROBES))
                {
                    pair.suspect_rounds = SUSPECT_PROBES - 1;
                }
                Recorded::Lost
            }
        }
    }

    /// Waits `d`, answering the probes of the peers known at the last
    /// round meanwhile.
    pub fn idle(&mut self, d: Duration) {
        let until = Instant::now() + d;
        let mut served = Served::default();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.port.serve(&mut self.responder, &mut served);
                break;
            }
            self.port.idle(left, &mut self.responder, &mut served);
        }
        self.stats.served.add(&served);
    }

    /// Answers pending datagrams between rounds.
    pub fn serve(&mut self) {
        let mut served = Served::default();
        self.port.serve(&mut self.responder, &mut served);
        self.stats.served.add(&served);
    }

    /// The verbs port (tests read what it sent).
    pub fn port(&self) -> &P {
        &self.port
    }
}

/// Keeps the pairs of the current sample and the [`TOP_FAILING`] others
/// with the most losses (then those still pending); the rest are forgotten
/// (their losses stay in the port's totals).
fn bound_pairs(pairs: &mut BTreeMap<PeerKey, PairStats>, chosen: &[Endpoint]) {
    let now: Vec<PeerKey> = chosen.iter().map(Endpoint::key).collect();
    let mut others: Vec<(u64, bool, PeerKey)> = pairs
        .iter()
        .filter(|(k, _)| !now.contains(k))
        .map(|(k, s)| (s.small.lost() + s.large.lost(), s.last_pending, k.clone()))
        .collect();
    others.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.cmp(&a.1))
            .then_with(|| a.2.cmp(&b.2))
    });
    let keep: Vec<PeerKey> = others
        .into_iter()
        .filter(|(lost, pending, _)| *lost > 0 || *pending)
        .take(TOP_FAILING)
        .map(|(_, _, k)| k)
        .collect();
    pairs.retain(|k, _| now.contains(k) || keep.contains(k));
}

/// Ends a round's RTT bookkeeping: the median of its small-probe RTTs
/// joins the port's history, and the baseline (a low percentile of the
/// history) and the recent RTT (the median of the last rounds' medians)
/// are computed again. Single answers move neither: a round median needs
/// half of the round's answers, recent needs most of its rounds, and
/// congestion moves the baseline only once it fills 75 % of the history
/// (then it is the new normal of that port).
pub fn end_round(stats: &mut PortStats, rtts: &mut [f64]) {
    let Some(m) = median(rtts) else {
        return;
    };
    stats.round_medians.push_back(m);
    while stats.round_medians.len() > BASELINE_ROUNDS {
        stats.round_medians.pop_front();
    }
    let mut all: Vec<f64> = stats.round_medians.iter().copied().collect();
    all.sort_by(f64::total_cmp);
    let i = ((all.len() - 1) as f64 * BASELINE_PERCENTILE).round() as usize;
    stats.baseline_seconds = all.get(i).copied();
    let skip = stats.round_medians.len().saturating_sub(RECENT_ROUNDS);
    let mut recent: Vec<f64> = stats.round_medians.iter().skip(skip).copied().collect();
    stats.recent_seconds = median(&mut recent);
}

/// The median of `v` (the upper middle for an even count: of a round's
/// four answers two fast outliers must not make it); `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

#[cfg(test)]
mod tests;
