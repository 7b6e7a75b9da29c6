//! Whom a responder answers, and how often, and the cookies that prove a
//! prober receives where it claims to.
//!
//! A datagram's sender (its GID from the GRH, its QPN from the completion)
//! is a claim: anyone on the fabric can write any of them. So a responder
//! answers in three steps, each counted when it refuses
//! ([`DatagramRefusal`]):
//! - **admitted**: the sender must be one of the responders this port
//!   probes itself (the peers on its rail, as their endpoint documents or
//!   the fleet's Prometheus name them). Anyone else is never answered, so
//!   no datagram ever goes to an address outside that set;
//! - **proven**: the probe must carry the cookie this responder gives that
//!   (GID, QPN), its keyed hash ([`CookieSecret`], HMAC-SHA256 under a
//!   random key of this port, as DNS cookies and QUIC's retry token do).
//!   Only the receiver at that address gets the cookie, so only it can
//!   send proven probes. An admitted sender without a valid cookie gets a
//!   challenge carrying it (the 40-byte header, smaller than any probe)
//!   within [`CHALLENGES_PER_SECOND`] for all senders together, and
//!   nothing else: it keeps no state here;
//! - **within budget**: each proven sender at most
//!   [`ANSWERS_PER_SECOND`], and the responder at most
//!   [`TOTAL_ECHOES_PER_SECOND`] and [`TOTAL_ECHO_BYTES_PER_SECOND`] for
//!   all of them together.
//!
//! So forged probes in a peer's name reach neither that peer's budget
//! (only its proven probes spend it) nor its address beyond the small
//! challenge budget, and no set of senders draws more than the total
//! budget. The same object keeps the cookies the peers' responders gave
//! this port's prober (its jar), for the peers it probes.

use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::peer::MAX_PACKETS_PER_SECOND;
use crate::peer_wire::{answer_traffic_class, Foreign, Message, MessageKind};

/// Echoes per second one proven sender (GID, QPN) gets at most: twice the
/// most a prober port sends ([`MAX_PACKETS_PER_SECOND`]), so jitter never
/// refuses an honest prober.
pub const ANSWERS_PER_SECOND: f64 = 2.0 * MAX_PACKETS_PER_SECOND;
/// Echoes one proven sender may get back to back.
pub const ANSWER_BURST: f64 = 20.0;
/// Echoes per second one responder sends at most, all senders together:
/// ten times the most one prober port sends. On a rail every port probes
/// as much as it is probed, so a responder receives the configured rate
/// on average (5/s by default, 50/s at most).
pub const TOTAL_ECHOES_PER_SECOND: f64 = 10.0 * MAX_PACKETS_PER_SECOND;
/// Echoes back to back, all senders together.
pub const TOTAL_ECHO_BURST: f64 = 50.0;
/// Payload bytes of echoes per second, all senders together (1 MiB/s:
/// 256 MTU-sized echoes of 4,096 bytes).
pub const TOTAL_ECHO_BYTES_PER_SECOND: f64 = 1024.0 * 1024.0;
/// Echo bytes back to back (32 MTU-sized echoes).
pub const TOTAL_ECHO_BYTE_BURST: f64 = 128.0 * 1024.0;
/// Challenges per second for all unproven senders together: the only
/// datagrams an unproven claim draws, each the 40-byte header.
pub const CHALLENGES_PER_SECOND: f64 = 10.0;
/// Challenges back to back.
pub const CHALLENGE_BURST: f64 = 10.0;
/// The cookie key is replaced this often; cookies of the key before stay
/// valid one more period, and every echo carries the current cookie, so
/// probers move over without a challenge.
pub const COOKIE_ROTATION: Duration = Duration::from_secs(3600);
/// Per-sender buckets and jar entries kept at most (both are bounded by
/// the admitted set, itself bounded by the peer list).
pub const MAX_BUCKETS: usize = 65_536;

/// Why a received datagram got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DatagramRefusal {
    /// Not a message of this format (no magic, unknown kind, too short, no
    /// GRH to read the sender from).
    Foreign,
    /// A peer-probe message of another wire version (an exporter of
    /// another release: a mixed-version fleet).
    WireVersion,
    /// An echo or challenge that answers no probe in flight (late,
    /// duplicated or forged): answers are never answered.
    StrayAnswer,
    /// A probe from a sender that is not one of this port's peers: never
    /// answered.
    NotAdmitted,
    /// A probe from an admitted sender without a valid cookie, once the
    /// challenge budget is spent.
    Unproven,
    /// A proven sender above its own answer rate.
    RateLimited,
    /// A proven probe above the responder's total echo budget (packets or
    /// bytes per second).
    TotalBudget,
    /// The answer could not be sent (no address handle for the sender,
    /// every answer slot busy, a failed post).
    AnswerFailed,
}

impl DatagramRefusal {
    pub const ALL: [DatagramRefusal; 8] = [
        DatagramRefusal::Foreign,
        DatagramRefusal::WireVersion,
        DatagramRefusal::StrayAnswer,
        DatagramRefusal::NotAdmitted,
        DatagramRefusal::Unproven,
        DatagramRefusal::RateLimited,
        DatagramRefusal::TotalBudget,
        DatagramRefusal::AnswerFailed,
    ];

    /// The label value (`reason`).
    pub fn as_str(&self) -> &'static str {
        match self {
            DatagramRefusal::Foreign => "foreign",
            DatagramRefusal::WireVersion => "wire_version",
            DatagramRefusal::StrayAnswer => "stray_answer",
            DatagramRefusal::NotAdmitted => "not_admitted",
            DatagramRefusal::Unproven => "unproven",
            DatagramRefusal::RateLimited => "rate_limited",
            DatagramRefusal::TotalBudget => "total_budget",
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
    /// Echoes sent to proven senders.
    pub answered: u64,
    /// Challenges sent to admitted senders without a valid cookie.
    pub challenged: u64,
    refused: [u64; 8],
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
        self.challenged += other.challenged;
        for (a, b) in self.refused.iter_mut().zip(other.refused) {
            *a += b;
        }
    }
}

/// What to do with a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Echo it, carrying the sender's current cookie.
    Echo {
        cookie: u64,
    },
    /// Challenge the (admitted, unproven) sender with its cookie.
    Challenge {
        cookie: u64,
    },
    Refuse(DatagramRefusal),
}

/// A token bucket.
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

    /// Refills to `now`; whether `n` tokens are there.
    fn ready(&mut self, rate: f64, burst: f64, now: Instant, n: f64) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.at = now.max(self.at);
        self.tokens >= n
    }

    fn take(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let ok = self.ready(rate, burst, now, 1.0);
        if ok {
            self.tokens -= 1.0;
        }
        ok
    }
}

/// The key this port's cookies are made with: random per port, replaced
/// every [`COOKIE_ROTATION`], the one before still accepted meanwhile.
pub struct CookieSecret {
    current: hmac::Key,
    previous: Option<hmac::Key>,
    since: Instant,
}

impl std::fmt::Debug for CookieSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieSecret(..)")
    }
}

/// A fresh random HMAC-SHA256 key from the system's random source. Should
/// the source fail (it does not on Linux ≥ 3.17), a key is made from
/// std's randomly keyed hasher and the clock: weaker, never a fixed key.
fn random_key() -> hmac::Key {
    let mut bytes = [0u8; 32];
    if SystemRandom::new().fill(&mut bytes).is_err() {
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            chunk.copy_from_slice(&h.finish().to_be_bytes());
        }
    }
    hmac::Key::new(hmac::HMAC_SHA256, &bytes)
}

fn cookie_with(key: &hmac::Key, gid: &Ipv6Addr, qpn: u32) -> u64 {
    let mut msg = [0u8; 20];
    msg[..16].copy_from_slice(&gid.octets());
    msg[16..].copy_from_slice(&qpn.to_be_bytes());
    let tag = hmac::sign(key, &msg);
    let mut first = [0u8; 8];
    first.copy_from_slice(&tag.as_ref()[..8]);
    // 0 means "no cookie" on the wire.
    u64::from_be_bytes(first).max(1)
}

impl CookieSecret {
    pub fn new(now: Instant) -> CookieSecret {
        CookieSecret {
            current: random_key(),
            previous: None,
            since: now,
        }
    }

    /// Replaces the key once it is [`COOKIE_ROTATION`] old.
    pub fn rotate(&mut self, now: Instant) {
        if now.saturating_duration_since(self.since) >= COOKIE_ROTATION {
            self.previous = Some(std::mem::replace(&mut self.current, random_key()));
            self.since = now;
        }
    }

    /// The current cookie of (`gid`, `qpn`).
    pub fn cookie(&self, gid: &Ipv6Addr, qpn: u32) -> u64 {
        cookie_with(&self.current, gid, qpn)
    }

    /// Whether `cookie` is (`gid`, `qpn`)'s, under this key or the one before.
    pub fn verify(&self, gid: &Ipv6Addr, qpn: u32, cookie: u64) -> bool {
        cookie != 0
            && (cookie == self.cookie(gid, qpn)
                || self
                    .previous
                    .as_ref()
                    .is_some_and(|k| cookie == cookie_with(k, gid, qpn)))
    }
}

/// One port's responder policy, its own incarnation, and the cookies its
/// prober holds from the peers it probes.
#[derive(Debug)]
pub struct Responder {
    incarnation: u64,
    admitted: Vec<(Ipv6Addr, u32)>,
    secret: CookieSecret,
    /// Per proven sender (an entry is made by a valid cookie only).
    proven: HashMap<(Ipv6Addr, u32), Bucket>,
    total: Bucket,
    bytes: Bucket,
    challenges: Bucket,
    /// Cookies the admitted peers' responders gave this port's prober.
    jar: HashMap<(Ipv6Addr, u32), u64>,
}

impl Responder {
    pub fn new(incarnation: u64, now: Instant) -> Responder {
        Responder {
            incarnation,
            admitted: Vec::new(),
            secret: CookieSecret::new(now),
            proven: HashMap::new(),
            total: Bucket::full(TOTAL_ECHO_BURST, now),
            bytes: Bucket::full(TOTAL_ECHO_BYTE_BURST, now),
            challenges: Bucket::full(CHALLENGE_BURST, now),
            jar: HashMap::new(),
        }
    }

    /// The incarnation this responder's answers carry.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Replaces the admitted senders; the budgets and cookies of those kept
    /// stay (a refresh of the peer list resets no one's rate).
    pub fn set_admitted(&mut self, mut senders: Vec<(Ipv6Addr, u32)>) {
        senders.sort();
        senders.dedup();
        if senders == self.admitted {
            return;
        }
        self.proven.retain(|k, _| senders.binary_search(k).is_ok());
        self.jar.retain(|k, _| senders.binary_search(k).is_ok());
        self.admitted = senders;
    }

    /// Whether (`gid`, `qpn`) is admitted.
    pub fn is_admitted(&self, gid: &Ipv6Addr, qpn: u32) -> bool {
        self.admitted.binary_search(&(*gid, qpn)).is_ok()
    }

    /// The answer a probe of `size` bytes from (`gid`, `qpn`) carrying
    /// `cookie` gets at `now`.
    pub fn admit(
        &mut self,
        gid: &Ipv6Addr,
        qpn: u32,
        cookie: u64,
        size: usize,
        now: Instant,
    ) -> Verdict {
        if !self.is_admitted(gid, qpn) {
            return Verdict::Refuse(DatagramRefusal::NotAdmitted);
        }
        self.secret.rotate(now);
        if !self.secret.verify(gid, qpn, cookie) {
            return if self
                .challenges
                .take(CHALLENGES_PER_SECOND, CHALLENGE_BURST, now)
            {
                Verdict::Challenge {
                    cookie: self.secret.cookie(gid, qpn),
                }
            } else {
                Verdict::Refuse(DatagramRefusal::Unproven)
            };
        }
        let key = (*gid, qpn);
        if self.proven.len() >= MAX_BUCKETS && !self.proven.contains_key(&key) {
            return Verdict::Refuse(DatagramRefusal::RateLimited);
        }
        let own = self
            .proven
            .entry(key)
            .or_insert_with(|| Bucket::full(ANSWER_BURST, now));
        if !own.ready(ANSWERS_PER_SECOND, ANSWER_BURST, now, 1.0) {
            return Verdict::Refuse(DatagramRefusal::RateLimited);
        }
        let size = size as f64;
        if !self
            .total
            .ready(TOTAL_ECHOES_PER_SECOND, TOTAL_ECHO_BURST, now, 1.0)
            || !self.bytes.ready(
                TOTAL_ECHO_BYTES_PER_SECOND,
                TOTAL_ECHO_BYTE_BURST,
                now,
                size,
            )
        {
            return Verdict::Refuse(DatagramRefusal::TotalBudget);
        }
        own.tokens -= 1.0;
        self.total.tokens -= 1.0;
        self.bytes.tokens -= size;
        Verdict::Echo {
            cookie: self.secret.cookie(gid, qpn),
        }
    }

    /// The cookie the responder (`gid`, `qpn`) gave this port's prober (0:
    /// none yet).
    pub fn cookie_for(&self, gid: &Ipv6Addr, qpn: u32) -> u64 {
        self.jar.get(&(*gid, qpn)).copied().unwrap_or(0)
    }

    /// Keeps the cookie an admitted peer's responder gave in an answer to
    /// this port's probe in flight (the answer matched the probe's nonce,
    /// sequence and address, so a forger off the path cannot plant one).
    pub fn keep_cookie(&mut self, gid: &Ipv6Addr, qpn: u32, cookie: u64) {
        let key = (*gid, qpn);
        if cookie == 0 || !self.is_admitted(gid, qpn) {
            return;
        }
        if self.jar.len() < MAX_BUCKETS || self.jar.contains_key(&key) {
            self.jar.insert(key, cookie);
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
    /// Send this answer to the sender (an echo or a challenge), with this
    /// traffic class; the echo's hold time is filled in at the post.
    Answer(Message, u8),
    /// The answer to the probe in flight (an echo or a challenge).
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
/// `responder` admits it, the answer to `in_flight` ends the wait (or
/// brings the cookie to probe with), and everything else (foreign
/// datagrams, other wire versions, stray answers, refused probes) is
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
        Err(Foreign::Version(_)) => {
            served.refuse(DatagramRefusal::WireVersion);
            return Handled::Dropped;
        }
        Err(_) => {
            served.refuse(DatagramRefusal::Foreign);
            return Handled::Dropped;
        }
    };
    match msg.kind {
        MessageKind::Probe => {
            let answer = match responder.admit(gid, qpn, msg.cookie, d.payload.len(), now) {
                Verdict::Echo { cookie } => msg.echo(responder.incarnation(), 0, cookie),
                Verdict::Challenge { cookie } => msg.challenge(responder.incarnation(), cookie),
                Verdict::Refuse(why) => {
                    served.refuse(why);
                    return Handled::Dropped;
                }
            };
            match answer {
                Some(a) => Handled::Answer(a, answer_traffic_class(d.traffic_class)),
                None => {
                    served.refuse(DatagramRefusal::Foreign);
                    Handled::Dropped
                }
            }
        }
        MessageKind::Echo | MessageKind::Challenge => match in_flight {
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
mod tests;
