//! Basic-auth verification: the cache of outcomes, and the one bcrypt
//! thread with its queue, fair by source so that a flood of wrong passwords
//! cannot starve a scraper whose password is not cached yet.
//!
//! Every outcome (success and failure) is cached under a SHA-256 of the
//! presented credentials and the configured hash, as exporter-toolkit does
//! since CVE-2022-46146: a repeated password is answered at once. A flood of
//! *distinct* wrong passwords defeats any cache, so the bcrypt thread serves
//! its queue by source (the client's IPv4 address, or its IPv6 /64):
//!
//! - a source has at most [`WAITING_PER_SOURCE`] checks waiting and the
//!   queue [`MAX_WAITING`] in all; a check beyond is not queued, the request
//!   is answered 503 at once and counted `refused`, unless the queue is full
//!   and holds a check of a source with more recent failures: that one is
//!   dropped (its request answered 503) for the newcomer;
//! - the next check run is the waiting one whose source has the fewest
//!   recent failed verifications (halved every [`FAILURE_HALF_LIFE`]), the
//!   oldest first among equals: a scraper that has not sent a wrong password
//!   goes before every source that has, whatever their number, and waits for
//!   at most the check in progress and the first checks of sources with no
//!   failure yet (one each);
//! - the thread is one: a flood takes at most one core, and its memory is
//!   the bounded queue and the bounded table of sources' failures
//!   ([`MAX_SOURCES`]).
//!
//! Sources behind one address (a NAT, the same host) share their standing:
//! a flood from the scraper's own address is not told apart from it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Checks one source may have waiting.
pub const WAITING_PER_SOURCE: usize = 2;
/// Checks waiting in all.
pub const MAX_WAITING: usize = 256;
/// Sources whose failures are remembered; past it the one with the fewest
/// (decayed) is forgotten.
pub const MAX_SOURCES: usize = 4096;
/// A source's count of failed verifications halves in this time.
pub const FAILURE_HALF_LIFE: Duration = Duration::from_secs(60);

/// Outcomes remembered per kind. Successes need a right password, so an
/// attacker cannot fill their set and push a scraper's entry out; failures
/// are bounded separately (one entry out, an arbitrary one, per entry in).
const CACHED_SUCCESSES: usize = 256;
const CACHED_FAILURES: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A SHA-256 of the presented user and password and the hash they were
/// checked against: the cache never holds a password.
pub(super) type CredentialKey = [u8; 32];

/// Cached outcomes of bcrypt verifications and how many were run.
#[derive(Default)]
pub(super) struct AuthState {
    cache: Mutex<AuthCache>,
    pub(super) verifications: AtomicU64,
}

#[derive(Default)]
struct AuthCache {
    ok: HashSet<CredentialKey>,
    failed: HashSet<CredentialKey>,
}

impl AuthState {
    pub(super) fn lookup(&self, key: &CredentialKey) -> Option<bool> {
        let cache = lock(&self.cache);
        if cache.ok.contains(key) {
            Some(true)
        } else if cache.failed.contains(key) {
            Some(false)
        } else {
            None
        }
    }

    pub(super) fn remember(&self, key: CredentialKey, ok: bool) {
        let mut cache = lock(&self.cache);
        let (set, bound) = if ok {
            (&mut cache.ok, CACHED_SUCCESSES)
        } else {
            (&mut cache.failed, CACHED_FAILURES)
        };
        if set.len() >= bound {
            if let Some(old) = set.iter().next().copied() {
                set.remove(&old);
            }
        }
        set.insert(key);
    }

    /// The verification itself, counted; `known`: the user exists (an
    /// unknown one is checked against another user's hash, so that its
    /// answer takes as long, and always fails).
    pub(super) fn verify(&self, password: &[u8], hash: &str, known: bool) -> bool {
        self.verifications.fetch_add(1, Ordering::Relaxed);
        COUNTS.verifications.fetch_add(1, Ordering::Relaxed);
        // A panic would end the one bcrypt thread: it is a failed check.
        let verified = std::panic::catch_unwind(|| bcrypt::verify(password, hash));
        matches!(verified, Ok(Ok(true))) && known
    }
}

/// Where a request comes from, as the queue tells sources apart: an IPv4
/// address, or the /64 of an IPv6 one (one host's share of addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKey {
    V4(u32),
    V6(u64),
}

impl SourceKey {
    pub fn of(ip: IpAddr) -> SourceKey {
        match ip {
            IpAddr::V4(v4) => SourceKey::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => SourceKey::V4(u32::from(v4)),
                None => SourceKey::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// One verification for the bcrypt thread.
pub(super) struct BcryptJob {
    pub(super) password: Vec<u8>,
    pub(super) hash: String,
    pub(super) known: bool,
    pub(super) key: CredentialKey,
    pub(super) state: Arc<AuthState>,
    pub(super) reply: tokio::sync::oneshot::Sender<bool>,
}

/// A source's failed verifications, decayed.
#[derive(Clone, Copy)]
struct Failures {
    count: f64,
    at: Instant,
}

impl Failures {
    fn now(self, now: Instant) -> f64 {
        let halves =
            now.saturating_duration_since(self.at).as_secs_f64() / FAILURE_HALF_LIFE.as_secs_f64();
        self.count * 0.5f64.powf(halves)
    }
}

#[derive(Default)]
struct QueueState {
    /// Waiting checks by source, each with its arrival number.
    waiting: HashMap<SourceKey, VecDeque<(u64, BcryptJob)>>,
    total: usize,
    arrivals: u64,
    failures: HashMap<SourceKey, Failures>,
}

impl QueueState {
    /// The next check to run (see the module doc).
    fn next(&mut self, now: Instant) -> Option<(SourceKey, BcryptJob)> {
        let failures = &self.failures;
        let standing = |s: &SourceKey| failures.get(s).map_or(0.0, |f| f.now(now));
        let source = self
            .waiting
            .iter()
            .filter_map(|(s, q)| q.front().map(|(n, _)| (*s, *n)))
            .min_by(|a, b| {
                standing(&a.0)
                    .total_cmp(&standing(&b.0))
                    .then(a.1.cmp(&b.1))
            })?
            .0;
        let queue = self.waiting.get_mut(&source)?;
        let (_, job) = queue.pop_front()?;
        if queue.is_empty() {
            self.waiting.remove(&source);
        }
        self.total -= 1;
        Some((source, job))
    }

    fn standing(&self, source: &SourceKey, now: Instant) -> f64 {
        self.failures.get(source).map_or(0.0, |f| f.now(now))
    }

    /// Drops the waiting check of the source with the most recent failures
    /// (the latest of its checks), when that is more than `than`'s: room
    /// for a check of `than` in a full queue.
    fn drop_worse_than(&mut self, than: &SourceKey, now: Instant) -> bool {
        let mine = self.standing(than, now);
        let worst = self
            .waiting
            .iter()
            .filter_map(|(s, q)| q.back().map(|(n, _)| (*s, *n, self.standing(s, now))))
            .max_by(|a, b| a.2.total_cmp(&b.2).then(a.1.cmp(&b.1)));
        let Some((source, _, standing)) = worst else {
            return false;
        };
        if standing <= mine {
            return false;
        }
        if let Some(queue) = self.waiting.get_mut(&source) {
            // Dropping the job drops its reply: its request answers 503.
            queue.pop_back();
            if queue.is_empty() {
                self.waiting.remove(&source);
            }
            self.total -= 1;
        }
        true
    }

    fn failed(&mut self, source: SourceKey, now: Instant) {
        let count = self.failures.get(&source).map_or(0.0, |f| f.now(now)) + 1.0;
        if !self.failures.contains_key(&source) && self.failures.len() >= MAX_SOURCES {
            let least = self
                .failures
                .iter()
                .min_by(|a, b| a.1.now(now).total_cmp(&b.1.now(now)))
                .map(|(s, _)| *s);
            if let Some(least) = least {
                self.failures.remove(&least);
            }
        }
        self.failures.insert(source, Failures { count, at: now });
    }
}

/// The bcrypt thread's queue.
pub(super) struct Queue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

/// Why a check was not queued.
pub(super) struct Full;

impl Queue {
    /// Queues `job` from `source`; `Full` past [`WAITING_PER_SOURCE`] or
    /// [`MAX_WAITING`].
    pub(super) fn push(&self, source: SourceKey, job: BcryptJob) -> Result<(), Full> {
        let mut st = lock(&self.state);
        let mine = st.waiting.get(&source).map_or(0, VecDeque::len);
        if mine >= WAITING_PER_SOURCE {
            return Err(Full);
        }
        if st.total >= MAX_WAITING && !st.drop_worse_than(&source, Instant::now()) {
            return Err(Full);
        }
        st.arrivals += 1;
        let n = st.arrivals;
        st.waiting.entry(source).or_default().push_back((n, job));
        st.total += 1;
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    fn run(&self) {
        loop {
            let (source, job) = {
                let mut st = lock(&self.state);
                loop {
                    if let Some(next) = st.next(Instant::now()) {
                        break next;
                    }
                    st = self
                        .wake
                        .wait(st)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
            };
            if job.reply.is_closed() {
                continue; // the client went away while queued
            }
            // Identical credentials queued together are verified once.
            let ok = match job.state.lookup(&job.key) {
                Some(ok) => ok,
                None => {
                    let ok = job.state.verify(&job.password, &job.hash, job.known);
                    job.state.remember(job.key, ok);
                    if !ok {
                        lock(&self.state).failed(source, Instant::now());
                    }
                    ok
                }
            };
            let _ = job.reply.send(ok);
        }
    }
}

/// The one queue and thread for every connection and configuration,
/// started on first use; `None` when the thread cannot be started.
pub(super) fn queue() -> Option<&'static Queue> {
    static QUEUE: OnceLock<Option<&'static Queue>> = OnceLock::new();
    *QUEUE.get_or_init(|| {
        let queue: &'static Queue = Box::leak(Box::new(Queue {
            state: Mutex::new(QueueState::default()),
            wake: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("bcrypt".into())
            .spawn(move || queue.run());
        match spawned {
            Ok(_) => Some(queue),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the bcrypt thread; basic auth answers 503 for unchecked credentials");
                None
            }
        }
    })
}

/// Basic-auth outcomes since start, process-wide (the bcrypt thread is).
pub(super) struct Counts {
    pub(super) used: AtomicBool,
    pub(super) allowed: AtomicU64,
    pub(super) denied: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) verifications: AtomicU64,
}

pub(super) static COUNTS: Counts = Counts {
    used: AtomicBool::new(false),
    allowed: AtomicU64::new(0),
    denied: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    verifications: AtomicU64::new(0),
};

/// Basic-auth checks since start, by outcome, and the bcrypt verifications
/// they took (`roce_web_auth_checks_total`, `roce_web_bcrypt_verifications_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuthCounts {
    /// Right credentials (cached or verified).
    pub allowed: u64,
    /// Wrong or missing credentials (cached or verified): 401.
    pub denied: u64,
    /// Not checked: the source's share of the bcrypt queue, or the queue,
    /// was full (503).
    pub refused: u64,
    pub verifications: u64,
}

/// The counts since start; `None` until basic auth checked a request.
pub fn auth_counts() -> Option<AuthCounts> {
    let c = &COUNTS;
    c.used.load(Ordering::Relaxed).then(|| AuthCounts {
        allowed: c.allowed.load(Ordering::Relaxed),
        denied: c.denied.load(Ordering::Relaxed),
        refused: c.refused.load(Ordering::Relaxed),
        verifications: c.verifications.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> (BcryptJob, tokio::sync::oneshot::Receiver<bool>) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        (
            BcryptJob {
                password: Vec::new(),
                hash: String::new(),
                known: false,
                key: [0; 32],
                state: Arc::default(),
                reply,
            },
            rx,
        )
    }

    #[test]
    fn a_source_without_failures_goes_before_every_source_with_some() {
        let now = Instant::now();
        let mut st = QueueState::default();
        let flood: Vec<SourceKey> = (0..200).map(|i| SourceKey::V4(0x7f01_0000 + i)).collect();
        for s in &flood {
            st.failed(*s, now);
        }
        let mut keep = Vec::new();
        for s in &flood {
            let (j, rx) = job();
            keep.push(rx);
            st.arrivals += 1;
            st.waiting
                .entry(*s)
                .or_default()
                .push_back((st.arrivals, j));
            st.total += 1;
        }
        let scraper = SourceKey::of("127.0.0.2".parse().unwrap());
        let (j, _rx) = job();
        st.arrivals += 1;
        st.waiting
            .entry(scraper)
            .or_default()
            .push_back((st.arrivals, j));
        st.total += 1;
        // Last in, first out of 201.
        assert_eq!(st.next(now).map(|(s, _)| s), Some(scraper));
        // Among equals, the oldest first.
        assert_eq!(st.next(now).map(|(s, _)| s), Some(flood[0]));
        // Failures fade: an hour later nobody stands out.
        let later = now + Duration::from_secs(3600);
        assert!(st.failures[&flood[1]].now(later) < 1e-10);
    }

    #[test]
    fn the_queue_is_bounded_per_source_and_in_all() {
        let q = Queue {
            state: Mutex::new(QueueState::default()),
            wake: Condvar::new(),
        };
        let one = SourceKey::of("10.0.0.1".parse().unwrap());
        let mut rx = Vec::new();
        for _ in 0..WAITING_PER_SOURCE {
            let (j, r) = job();
            rx.push(r);
            assert!(q.push(one, j).is_ok());
        }
        assert!(q.push(one, job().0).is_err(), "past its share");
        for i in 0..(MAX_WAITING - WAITING_PER_SOURCE) {
            let (j, r) = job();
            rx.push(r);
            assert!(q.push(SourceKey::V4(i as u32), j).is_ok());
        }
        assert!(q.push(SourceKey::V4(u32::MAX), job().0).is_err(), "full");
        // A source with failures waiting makes room for one without.
        let flooder = SourceKey::V4(3);
        lock(&q.state).failed(flooder, Instant::now());
        let (scraper_job, mut scraper_rx) = job();
        assert!(q.push(SourceKey::V4(u32::MAX), scraper_job).is_ok());
        assert_eq!(lock(&q.state).total, MAX_WAITING);
        assert!(!lock(&q.state).waiting.contains_key(&flooder));
        assert!(scraper_rx.try_recv().is_err());
        // An IPv6 host's /64 is one source.
        assert_eq!(
            SourceKey::of("2001:db8::1".parse().unwrap()),
            SourceKey::of("2001:db8::ffff".parse().unwrap())
        );
        assert_eq!(SourceKey::of("::ffff:10.0.0.1".parse().unwrap()), one);
    }

    #[test]
    fn the_table_of_failures_is_bounded() {
        let now = Instant::now();
        let mut st = QueueState::default();
        for i in 0..(MAX_SOURCES as u32 + 100) {
            st.failed(SourceKey::V4(i), now);
        }
        assert_eq!(st.failures.len(), MAX_SOURCES);
    }
}
