//! The probe engine: runs one round on a target, classifies what went
//! wrong, keeps the statistics, and keeps each target's session between
//! rounds (recreated only after a failure). No clock of its own beyond the
//! wall-clock stamp of a success, no thread: the runner calls it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::verbs::{OpenError, Session, Verbs};
use crate::{Failure, ProbeResults, ProbeState, ProbeTarget, Reason, TargetStats};

/// Hard caps, whatever the configuration says: at most this many targets
/// hold resources at once (each a few KiB of registered memory, one CQ and
/// two QPs), and every round has at most two requests in flight.
pub const MAX_TARGETS: usize = 64;
/// Registered buffer per target: source and destination halves.
pub const BUFFER_LEN: usize = 4096;
/// Bytes written per round (fits in one packet at any RoCE MTU).
pub const PAYLOAD_LEN: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long a round may wait for its completions.
    pub timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            timeout: Duration::from_secs(2),
        }
    }
}

/// The outcome of one round.
pub type RoundOutcome = Result<Duration, Failure>;

pub struct ProbeEngine<V: Verbs> {
    verbs: V,
    settings: Settings,
    sessions: BTreeMap<ProbeTarget, V::Session>,
    stats: BTreeMap<ProbeTarget, TargetStats>,
    state: ProbeState,
    /// Round counter: the tag of the SEND and the seed of the payload, so
    /// that a stale write from an earlier round cannot pass for this one.
    round: u32,
}

impl<V: Verbs> ProbeEngine<V> {
    pub fn new(verbs: V, settings: Settings) -> Self {
        ProbeEngine {
            verbs,
            settings,
            sessions: BTreeMap::new(),
            stats: BTreeMap::new(),
            state: ProbeState::Starting,
            round: 0,
        }
    }

    /// Keeps only `targets` (capped at [`MAX_TARGETS`]): the others' sessions
    /// are closed and their statistics dropped.
    pub fn retain(&mut self, targets: &[ProbeTarget]) {
        let keep: Vec<&ProbeTarget> = targets.iter().take(MAX_TARGETS).collect();
        self.sessions.retain(|t, _| keep.contains(&t));
        self.stats.retain(|t, _| keep.contains(&t));
    }

    /// Runs one round on `target`. Rounds on a target beyond the cap are
    /// refused without touching the device.
    pub fn round(&mut self, target: &ProbeTarget) -> Option<RoundOutcome> {
        if !self.stats.contains_key(target) && self.stats.len() >= MAX_TARGETS {
            return None;
        }
        self.round = self.round.wrapping_add(1);
        let tag = self.round;
        let result = self.try_round(target, tag)?;
        let stats = self.stats.entry(target.clone()).or_default();
        stats.requests += 1;
        match &result {
            Ok(rtt) => {
                stats.successes += 1;
                stats.rtt.observe(*rtt);
                stats.last_rtt = Some(*rtt);
                stats.last_success = Some(SystemTime::now());
                stats.last_failure = None;
                stats.last_ok = Some(true);
            }
            Err(failure) => {
                *stats.failures.entry(failure.reason.as_str()).or_insert(0) += 1;
                stats.last_failure = Some(failure.clone());
                stats.last_ok = Some(false);
                // Whatever broke may have left work requests or a QP in
                // error: start from scratch next time.
                self.sessions.remove(target);
            }
        }
        Some(result)
    }

    /// A panic in the verbs layer, caught by the runner: counted, and the
    /// session (in an unknown state) dropped.
    pub fn record_panic(&mut self, target: &ProbeTarget, what: &str) {
        // Dropping may panic again (a destroy that fails asserts in the
        // binding): forget the session rather than risk that.
        if let Some(session) = self.sessions.remove(target) {
            std::mem::forget(session);
        }
        let stats = self.stats.entry(target.clone()).or_default();
        stats.requests += 1;
        *stats.failures.entry(Reason::Internal.as_str()).or_insert(0) += 1;
        stats.last_failure = Some(Failure::new(
            Reason::Internal,
            format!("verbs layer panicked: {what}"),
        ));
        stats.last_ok = Some(false);
    }

    /// `None` when verbs are unavailable on this host (not a round).
    fn try_round(&mut self, target: &ProbeTarget, tag: u32) -> Option<RoundOutcome> {
        if !self.sessions.contains_key(target) {
            match self.verbs.open(target, BUFFER_LEN) {
                Ok(session) => {
                    self.state = ProbeState::Running;
                    self.stats
                        .entry(target.clone())
                        .or_default()
                        .sessions_opened += 1;
                    self.sessions.insert(target.clone(), session);
                }
                Err(OpenError::Unavailable(why)) => {
                    self.state = ProbeState::Unavailable(why);
                    return None;
                }
                Err(OpenError::Failed(f)) => {
                    self.state = ProbeState::Running;
                    return Some(Err(classify(f)));
                }
            }
        }
        let session = self.sessions.get_mut(target)?;
        match session.port_active() {
            Ok(true) => {}
            Ok(false) => {
                return Some(Err(Failure::new(
                    Reason::PortDown,
                    format!("{}/{} is not ACTIVE", target.device, target.port),
                )))
            }
            Err(f) => return Some(Err(classify(f))),
        }
        let payload = payload(tag);
        let landed = match session.round(&payload, tag, self.settings.timeout) {
            Ok(l) => l,
            Err(f) => return Some(Err(classify(f))),
        };
        if landed.written != payload || landed.tag != tag {
            return Some(Err(Failure::new(
                Reason::PayloadMismatch,
                format!(
                    "round {tag}: {} of {} written bytes differ, SEND tag {} (expected {tag})",
                    landed
                        .written
                        .iter()
                        .zip(payload.iter().chain(std::iter::repeat(&0)))
                        .filter(|(a, b)| a != b)
                        .count()
                        + landed.written.len().abs_diff(payload.len()),
                    payload.len(),
                    landed.tag
                ),
            )));
        }
        Some(Ok(landed.rtt))
    }

    pub fn results(&self) -> ProbeResults {
        ProbeResults {
            state: self.state.clone(),
            targets: self
                .stats
                .iter()
                .map(|(t, s)| (t.clone(), s.clone()))
                .collect(),
        }
    }

    /// Targets holding resources now.
    pub fn open_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The path (MTU, traffic class) the open session of `target` was
    /// connected with, when the verbs layer says.
    pub fn path(&self, target: &ProbeTarget) -> Option<crate::verbs::QpPath> {
        self.sessions.get(target)?.path()
    }
}

/// Refines what the verbs layer reported so that a missing permission is
/// named with its fix: a memory registration refused for lack of locked
/// memory (with the limit in force), and a device open refused by file
/// permissions or a device cgroup.
pub fn classify(f: Failure) -> Failure {
    match (f.reason, f.errno) {
        (Reason::RegMr, Some(libc::ENOMEM | libc::EPERM | libc::EAGAIN)) => Failure {
            reason: Reason::Memlock,
            errno: f.errno,
            message: format!(
                "{}; the locked-memory limit (RLIMIT_MEMLOCK) is too low for RDMA memory \
                 registration{}: raise it (systemd: LimitMEMLOCK=infinity in the unit, or a \
                 size like the packaged unit's 64M; shell: ulimit -l unlimited; containers: \
                 --ulimit memlock=-1)",
                f.message,
                memlock_limit_text()
                    .map(|l| format!(" (it is {l} for this process)"))
                    .unwrap_or_default()
            ),
        },
        (Reason::DeviceOpen, Some(libc::EACCES | libc::EPERM)) => Failure {
            reason: f.reason,
            errno: f.errno,
            message: format!(
                "{}; the probes need read-write access to the device's \
                 /dev/infiniband/uverbs* node: {} (systemd: DeviceAllow=char-infiniband_verbs rw \
                 with DevicePolicy=closed; containers: the device must be allowed and mounted; \
                 or turn probes off with probes.enabled: false)",
                f.message,
                if f.errno == Some(libc::EPERM) {
                    "the open was refused by a device cgroup or seccomp, not by file modes"
                } else {
                    "the node's owner, group or mode does not let this user read and write it"
                }
            ),
        },
        (Reason::DeviceOpen, Some(libc::ENOENT | libc::ENXIO | libc::ENODEV)) => Failure {
            reason: f.reason,
            errno: f.errno,
            message: format!(
                "{}; the device's /dev/infiniband/uverbs* node is missing here (containers: \
                 mount /dev/infiniband; hosts: load ib_uverbs)",
                f.message
            ),
        },
        _ => f,
    }
}

/// RLIMIT_MEMLOCK of this process as `ulimit -l` would put it, from
/// /proc/self/limits (no unsafe getrlimit in this crate's engine).
fn memlock_limit_text() -> Option<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()?;
    Some(match soft.parse::<u64>() {
        Ok(bytes) => format!("{} KiB", bytes / 1024),
        Err(_) => soft.to_string(),
    })
}

/// A payload that differs from round to round (and from zeros).
pub fn payload(tag: u32) -> Vec<u8> {
    let seed = tag.to_le_bytes();
    (0..PAYLOAD_LEN)
        .map(|i| {
            let k = seed.get(i % 4).copied().unwrap_or(0);
            k ^ (i as u8).wrapping_mul(31) ^ 0xA5
        })
        .collect()
}
