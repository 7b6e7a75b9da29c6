//! Whom a responder answers, and how often: the admitted senders (the
//! responders of the configured peers on this port's rail, as their
//! endpoint documents name them), each answered at most
//! [`ANSWERS_PER_SECOND`] (token bucket), and anyone else told "not
//! admitted" at most [`NOT_ADMITTED_PER_SECOND`] in all. Everything not
//! answered is counted by [`DatagramRefusal`].
//!
//! The bounds make the responder useless as a weapon: a flood naming an
//! admitted sender gets at most that sender's rate back, a flood naming
//! anyone else at most the small global rate, each answer no larger than
//! the datagram that asked for it.

use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::time::Instant;

use crate::peer::MAX_PACKETS_PER_SECOND;
use crate::peer_wire::{answer_traffic_class, Message, MessageKind};

/// Echoes per second one admitted sender (GID, QPN) gets at most: twice
/// the most a prober port sends ([`MAX_PACKETS_PER_SECOND`]), so jitter
/// never refuses an honest prober.
pub const ANSWERS_PER_SECOND: f64 = 2.0 * MAX_PACKETS_PER_SECOND;
/// Echoes one admitted sender may get back to back.
pub const ANSWER_BURST: f64 = 20.0;
/// "Not admitted" replies per second for all senders together.
pub const NOT_ADMITTED_PER_SECOND: f64 = 5.0;
/// Token buckets kept at most (one per admitted sender; the admitted set
/// is bounded by the peer list).
pub const MAX_BUCKETS: usize = 65_536;

/// Why a received datagram got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DatagramRefusal {
    /// Not a message of this format (no magic, other version or kind,
    /// too short, no GRH to read the sender from).
    Foreign,
    /// An echo or "not admitted" that answers no probe in flight (late,
    /// duplicated or forged): answers are never answered.
    StrayAnswer,
    /// An admitted sender above its answer rate.
    RateLimited,
    /// A sender that is not admitted, above the "not admitted" rate.
    Unknown,
    /// The answer could not be sent (no address handle for the sender,
    /// every answer slot busy, a failed post).
    AnswerFailed,
}

impl DatagramRefusal {
    pub const ALL: [DatagramRefusal; 5] = [
        DatagramRefusal::Foreign,
        DatagramRefusal::StrayAnswer,
        DatagramRefusal::RateLimited,
        DatagramRefusal::Unknown,
        DatagramRefusal::AnswerFailed,
    ];

    /// The label value (`reason`).
    pub fn as_str(&self) -> &'static str {
        match self {
            DatagramRefusal::Foreign => "foreign",
            DatagramRefusal::StrayAnswer => "stray_answer",
            DatagramRefusal::RateLimited => "rate_limited",
            DatagramRefusal::Unknown => "unknown_sender",
            DatagramRefusal::AnswerFailed => "answer_failed",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What the responder did since it was last asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// Echoes sent to admitted senders.
    pub answered: u64,
    /// "Not admitted" replies sent.
    pub not_admitted: u64,
    refused: [u64; 5],
}

impl Served {
    /// Counts one datagram left unanswered.
    pub fn refuse(&mut self, why: DatagramRefusal) {
        self.refused[why.index()] += 1;
    }

    /// Datagrams left unanswered for `why`.
    pub fn refused(&self, why: DatagramRefusal) -> u64 {
        self.refused[why.index()]
    }

    /// Datagrams left unanswered, whatever the reason.
    pub fn unanswered(&self) -> u64 {
        self.refused.iter().sum()
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Served) {
        self.answered += other.answered;
        self.not_admitted += other.not_admitted;
        for (a, b) in self.refused.iter_mut().zip(other.refused) {
            *a += b;
        }
    }
}

/// What to do with a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Echo,
    NotAdmitted,
    Refuse(DatagramRefusal),
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    fn take(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One port's responder policy and its own incarnation.
#[derive(Debug)]
pub struct Responder {
    incarnation: u64,
    admitted: Vec<(Ipv6Addr, u32)>,
    buckets: HashMap<(Ipv6Addr, u32), Bucket>,
    not_admitted: Bucket,
}

impl Responder {
    pub fn new(incarnation: u64, now: Instant) -> Responder {
        Responder {
            incarnation,
            admitted: Vec::new(),
            buckets: HashMap::new(),
            not_admitted: Bucket::full(NOT_ADMITTED_PER_SECOND, now),
        }
    }

    /// The incarnation this responder's answers carry.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Replaces the admitted senders; the buckets of those kept stay (a
    /// refresh of the peer list does not reset anyone's rate).
    pub fn set_admitted(&mut self, mut senders: Vec<(Ipv6Addr, u32)>) {
        senders.sort();
        senders.dedup();
        if senders == self.admitted {
            return;
        }
        self.buckets.retain(|k, _| senders.binary_search(k).is_ok());
        self.admitted = senders;
    }

    /// Whether (`gid`, `qpn`) is admitted.
    pub fn is_admitted(&self, gid: &Ipv6Addr, qpn: u32) -> bool {
        self.admitted.binary_search(&(*gid, qpn)).is_ok()
    }

    /// The answer a probe from (`gid`, `qpn`) gets at `now`.
    pub fn admit(&mut self, gid: &Ipv6Addr, qpn: u32, now: Instant) -> Verdict {
        if self.is_admitted(gid, qpn) {
            if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(&(*gid, qpn)) {
                return Verdict::Refuse(DatagramRefusal::RateLimited);
            }
            let b = self
                .buckets
                .entry((*gid, qpn))
                .or_insert_with(|| Bucket::full(ANSWER_BURST, now));
            if b.take(ANSWERS_PER_SECOND, ANSWER_BURST, now) {
                Verdict::Echo
            } else {
                Verdict::Refuse(DatagramRefusal::RateLimited)
            }
        } else if self
            .not_admitted
            .take(NOT_ADMITTED_PER_SECOND, NOT_ADMITTED_PER_SECOND, now)
        {
            Verdict::NotAdmitted
        } else {
            Verdict::Refuse(DatagramRefusal::Unknown)
        }
    }
}

/// The probe a port waits for the answer of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    pub gid: Ipv6Addr,
    pub qpn: u32,
    pub nonce: u32,
    pub seq: u32,
}

/// What a received datagram asks of its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Send this answer to the sender (an echo or a "not admitted"), with
    /// this traffic class; the echo's hold time is filled in at the post.
    Answer(Message, u8),
    /// The answer to the probe in flight.
    Reply(Message),
    /// Nothing to send (counted in `served`).
    Dropped,
}

/// A datagram as a port received it.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    pub payload: &'a [u8],
    /// The sender: its GID (from the GRH) and QPN (the completion's `src_qp`).
    pub gid: Ipv6Addr,
    pub qpn: u32,
    /// The IP traffic class it arrived with.
    pub traffic_class: u8,
}

/// Decides what a port does with datagram `d`: a probe is answered as
/// `responder` admits it, the answer to `in_flight` ends the wait, and
/// everything else (foreign datagrams, stray answers, refused probes) is
/// counted in `served` and dropped. An answer is never answered.
pub fn handle(
    d: &Datagram,
    in_flight: Option<&InFlight>,
    responder: &mut Responder,
    now: Instant,
    served: &mut Served,
) -> Handled {
    let (gid, qpn) = (&d.gid, d.qpn);
    let msg = match Message::decode(d.payload) {
        Ok(m) => m,
        Err(_) => {
            served.refuse(DatagramRefusal::Foreign);
            return Handled::Dropped;
        }
    };
    match msg.kind {
        MessageKind::Probe => {
            let admitted = match responder.admit(gid, qpn, now) {
                Verdict::Echo => true,
                Verdict::NotAdmitted => false,
                Verdict::Refuse(why) => {
                    served.refuse(why);
                    return Handled::Dropped;
                }
            };
            match msg.answer(admitted, responder.incarnation(), 0) {
                Some(a) => Handled::Answer(a, answer_traffic_class(d.traffic_class)),
                None => {
                    served.refuse(DatagramRefusal::Foreign);
                    Handled::Dropped
                }
            }
        }
        MessageKind::Echo | MessageKind::NotAdmitted => match in_flight {
            Some(f)
                if f.nonce == msg.nonce && f.seq == msg.seq && f.gid == *gid && f.qpn == qpn =>
            {
                Handled::Reply(msg)
            }
            _ => {
                served.refuse(DatagramRefusal::StrayAnswer);
                Handled::Dropped
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn gid(last: u8) -> Ipv6Addr {
        std::net::Ipv4Addr::new(10, 0, 1, last).to_ipv6_mapped()
    }

    #[test]
    fn an_admitted_sender_is_answered_up_to_its_rate() {
        let t0 = Instant::now();
        let mut r = Responder::new(1, t0);
        r.set_admitted(vec![(gid(2), 17)]);
        // A flood of 1,000 probes in one instant: the burst is answered.
        let echoes = (0..1000)
            .filter(|_| r.admit(&gid(2), 17, t0) == Verdict::Echo)
            .count();
        assert_eq!(echoes, ANSWER_BURST as usize);
        // Over 10 s at 1,000/s: at most the rate (plus the burst).
        let mut answered = 0;
        for i in 0..10_000u64 {
            let now = t0 + Duration::from_millis(i);
            if r.admit(&gid(2), 17, now) == Verdict::Echo {
                answered += 1;
            }
        }
        assert!(
            answered <= (10.0 * ANSWERS_PER_SECOND) as usize + 1,
            "{answered}"
        );
        assert!(
            answered >= (9.0 * ANSWERS_PER_SECOND) as usize,
            "{answered}"
        );
        // An honest prober at the most a port sends is never refused.
        let mut r = Responder::new(1, t0);
        r.set_admitted(vec![(gid(2), 17)]);
        let step = Duration::from_secs_f64(1.0 / MAX_PACKETS_PER_SECOND);
        assert!((0..2000u32).all(|i| r.admit(&gid(2), 17, t0 + step * i) == Verdict::Echo));
    }

    #[test]
    fn strangers_get_a_few_not_admitted_replies_in_all() {
        let t0 = Instant::now();
        let mut r = Responder::new(1, t0);
        r.set_admitted(vec![(gid(2), 17)]);
        let mut nacks = 0;
        for i in 0..10_000u64 {
            // Each datagram names another sender, as a forger would.
            let g = gid((i % 250) as u8);
            if r.admit(&g, 1000 + i as u32, t0 + Duration::from_millis(i)) == Verdict::NotAdmitted {
                nacks += 1;
            }
        }
        assert!(
            nacks <= (10.0 * NOT_ADMITTED_PER_SECOND) as usize + 5,
            "{nacks}"
        );
        // The known QPN of a known GID is still answered, another QPN not.
        assert_eq!(r.admit(&gid(2), 17, t0), Verdict::Echo);
        assert_ne!(r.admit(&gid(2), 18, t0), Verdict::Echo);
    }

    #[test]
    fn a_new_peer_list_keeps_the_rate_of_senders_that_stay() {
        let t0 = Instant::now();
        let mut r = Responder::new(1, t0);
        r.set_admitted(vec![(gid(2), 17), (gid(3), 18)]);
        while r.admit(&gid(2), 17, t0) == Verdict::Echo {}
        r.set_admitted(vec![(gid(3), 18), (gid(2), 17)]);
        assert_eq!(
            r.admit(&gid(2), 17, t0),
            Verdict::Refuse(DatagramRefusal::RateLimited)
        );
        r.set_admitted(vec![(gid(3), 18)]);
        assert!(!r.is_admitted(&gid(2), 17));
    }

    /// Two responders that admit each other, joined by a wire that
    /// delivers every answer: what a forged probe starts.
    fn exchange(forged: &[u8], steps: usize) -> (usize, Served, Served) {
        let t0 = Instant::now();
        let (ga, gb) = (gid(1), gid(2));
        let mut a = Responder::new(0xa, t0);
        let mut b = Responder::new(0xb, t0);
        a.set_admitted(vec![(gb, 20)]);
        b.set_admitted(vec![(ga, 10)]);
        let (mut sa, mut sb) = (Served::default(), Served::default());
        // (to A?, payload, sender gid, sender qpn)
        let mut wire: Vec<(bool, Vec<u8>, Ipv6Addr, u32)> = vec![(true, forged.to_vec(), gb, 20)];
        let mut carried = 0;
        for step in 0..steps {
            let Some((to_a, payload, g, q)) = wire.pop() else {
                break;
            };
            carried += 1;
            let now = t0 + Duration::from_millis(step as u64);
            let d = Datagram {
                payload: &payload,
                gid: g,
                qpn: q,
                traffic_class: 106,
            };
            let (resp, served, me) = if to_a {
                (&mut a, &mut sa, (ga, 10))
            } else {
                (&mut b, &mut sb, (gb, 20))
            };
            if let Handled::Answer(m, _) = handle(&d, None, resp, now, served) {
                wire.push((!to_a, m.encode(payload.len()), me.0, me.1));
            }
        }
        (carried, sa, sb)
    }

    #[test]
    fn a_forged_probe_naming_a_peer_starts_one_echo_never_a_loop() {
        // A probe "from B" with a nonce neither owns: A echoes it to B,
        // and B drops the echo (an answer is never answered).
        let forged = Message::probe(0x5eed_f00d, 1, 0x99).encode(64);
        let (carried, sa, sb) = exchange(&forged, 100_000);
        assert_eq!(carried, 2, "the forged probe and one echo");
        assert_eq!(sa.answered + sa.not_admitted + sa.unanswered(), 0);
        assert_eq!(sb.refused(DatagramRefusal::StrayAnswer), 1);
        // A forged echo or "not admitted" gets nothing at all.
        for kind in [MessageKind::Echo, MessageKind::NotAdmitted] {
            let mut m = Message::probe(1, 1, 1);
            m.kind = kind;
            let (carried, sa, _) = exchange(&m.encode(64), 100);
            assert_eq!(carried, 1);
            assert_eq!(sa.refused(DatagramRefusal::StrayAnswer), 1);
        }
        // The payload format before the type field (nonce, seq, zeros) is
        // foreign: never answered.
        let mut old = vec![0u8; 64];
        old[..4].copy_from_slice(&0x5eed_f00du32.to_be_bytes());
        let (carried, sa, _) = exchange(&old, 100);
        assert_eq!(carried, 1);
        assert_eq!(sa.refused(DatagramRefusal::Foreign), 1);
    }

    #[test]
    fn the_answer_to_the_probe_in_flight_ends_the_wait_and_nothing_else_does() {
        let t0 = Instant::now();
        let mut r = Responder::new(1, t0);
        let mut served = Served::default();
        let f = InFlight {
            gid: gid(2),
            qpn: 20,
            nonce: 7,
            seq: 3,
        };
        let echo = Message {
            kind: MessageKind::Echo,
            nonce: 7,
            seq: 3,
            incarnation: 9,
            hold_ns: 1500,
        };
        let d = |payload: &[u8], g: Ipv6Addr, q: u32| {
            let mut out = Served::default();
            let mut r = Responder::new(1, t0);
            let h = handle(
                &Datagram {
                    payload,
                    gid: g,
                    qpn: q,
                    traffic_class: 0,
                },
                Some(&f),
                &mut r,
                t0,
                &mut out,
            );
            (h, out)
        };
        assert_eq!(d(&echo.encode(64), gid(2), 20).0, Handled::Reply(echo));
        // From another QPN, with another sequence: stray.
        assert_eq!(d(&echo.encode(64), gid(2), 21).0, Handled::Dropped);
        let mut late = echo;
        late.seq = 2;
        assert_eq!(d(&late.encode(64), gid(2), 20).0, Handled::Dropped);
        // A probe meanwhile is answered, with the DSCP it came with.
        r.set_admitted(vec![(gid(4), 40)]);
        let probe = Message::probe(55, 1, 4).encode(64);
        let h = handle(
            &Datagram {
                payload: &probe,
                gid: gid(4),
                qpn: 40,
                traffic_class: 107,
            },
            Some(&f),
            &mut r,
            t0,
            &mut served,
        );
        match h {
            Handled::Answer(m, tc) => {
                assert_eq!(
                    (m.kind, m.nonce, m.incarnation, tc),
                    (MessageKind::Echo, 55, 1, 106)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn served_counts_add_up_by_reason() {
        let mut a = Served::default();
        a.refuse(DatagramRefusal::Foreign);
        a.refuse(DatagramRefusal::StrayAnswer);
        a.answered = 2;
        let mut total = Served::default();
        total.add(&a);
        total.add(&a);
        assert_eq!(total.answered, 4);
        assert_eq!(total.refused(DatagramRefusal::Foreign), 2);
        assert_eq!(total.unanswered(), 4);
        assert_eq!(
            DatagramRefusal::ALL
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
            [
                "foreign",
                "stray_answer",
                "rate_limited",
                "unknown_sender",
                "answer_failed"
            ]
        );
    }
}
