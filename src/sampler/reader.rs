//! The reader: one thread that calls every source of a sample in turn, the
//! sources that need nothing first, then those that read the RDMA part.
//!
//! One thread, not one per source, because each hand-over between threads
//! costs a wake-up and a context switch, a good share of a steady sample's
//! cost. Isolation is kept another way: each source sits behind its own
//! lock, held for as long as its call runs. When a call is still running
//! one deadline after it started, the sampler leaves that reader to it and
//! starts a new reader for the sources after it; a later sample finds the
//! stuck source's lock held, reports it timed out and does not call it
//! again until the call has returned. A read stuck in the kernel therefore
//! holds one thread, never one per sample. A sample waits for at most two
//! deadlines: when a second call sticks in the same sample, the sources
//! after it are reported not called and run in the next sample.

use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::snapshot::{KernelRequests, Snapshot, SourceState};
use crate::sources::{Input, Part, Sampled, Source};
use roce_host::HostError;
use roce_rdma::RdmaSnapshot;

/// How one source fared in this sample, before it is counted.
pub(super) struct Outcome {
    pub state: SourceState,
    pub part: Option<Part>,
    pub errors: Vec<HostError>,
    pub duration: Duration,
    pub kernel_requests: Option<KernelRequests>,
}

impl Outcome {
    fn failed(why: String, duration: Duration) -> Self {
        Outcome {
            state: SourceState::Failed(why),
            part: None,
            errors: Vec::new(),
            duration,
            kernel_requests: None,
        }
    }

    fn disabled(why: &str) -> Self {
        Outcome {
            state: SourceState::Disabled(why.to_string()),
            part: None,
            errors: Vec::new(),
            duration: Duration::ZERO,
            kernel_requests: None,
        }
    }
}

/// Kept the same from the first timed-out sample to the last, so that the
/// state is logged once.
fn timeout_reason(deadline: Duration) -> String {
    format!(
        "timed out: the call did not return within its deadline of {deadline:?} (one sample interval); not started again until it returns"
    )
}

/// Why a source was not called: calls stuck before it used the sample's time.
const SAMPLE_TIME_USED: &str =
    "not called in this sample: calls stuck before it used up the sample's time (two deadlines)";

/// A lock whose holder panicked is still usable here: every value behind
/// these locks is whole between statements (a source's panic is caught
/// inside the call, with the lock held but the source unchanged by it).
fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One source and the lock its calls hold.
pub(super) struct Slot {
    pub name: &'static str,
    pub needs_rdma: bool,
    /// Why the source is off ([`Source::disabled`]): then it is never
    /// called.
    pub off: Option<String>,
    source: Mutex<Box<dyn Source>>,
    /// A source from a reloaded configuration, taken in place of the one
    /// behind `source` by the next call: set when a reload comes while a
    /// call is stuck, so that the stuck read is not doubled.
    pending: Mutex<Option<Box<dyn Source>>>,
    /// When the call in flight started.
    since: Mutex<Option<Instant>>,
}

impl Slot {
    pub fn new(source: Box<dyn Source>) -> Arc<Slot> {
        Arc::new(Slot {
            name: source.name(),
            needs_rdma: source.needs_rdma(),
            off: source.disabled(),
            source: Mutex::new(source),
            pending: Mutex::new(None),
            since: Mutex::new(None),
        })
    }

    /// Whether a call of this source is running (or stuck).
    pub fn in_flight(&self) -> bool {
        matches!(self.source.try_lock(), Err(TryLockError::WouldBlock))
    }

    /// Hands the slot a source to take at its next call.
    pub fn replace_later(&self, source: Box<dyn Source>) {
        *lock(&self.pending) = Some(source);
    }
}

/// The sources of one sample and what they returned so far.
pub(super) struct Round {
    state: Mutex<RoundState>,
    finished: Condvar,
}

struct RoundState {
    /// By slot.
    outcomes: Vec<Option<Outcome>>,
    /// The position in the order of the next source to call.
    next: usize,
    /// The slot being called and since when.
    current: Option<(usize, Instant)>,
    /// Which reader works on the round: a reader left behind finds another
    /// number here when its stuck call returns, and ends.
    reader: u64,
    /// This sample's RDMA part, once the RDMA source returned it.
    rdma: Option<Arc<RdmaSnapshot>>,
    /// The last RDMA part, handed to the dependent sources when this sample
    /// has none.
    stale: Option<Arc<RdmaSnapshot>>,
    finished: bool,
}

/// What a round leaves for the snapshot.
pub(super) struct Read {
    pub outcomes: Vec<Option<Outcome>>,
    pub rdma: Option<Arc<RdmaSnapshot>>,
    pub stale: Option<Arc<RdmaSnapshot>>,
}

/// The work of one reader thread on one round.
struct Job {
    round: Arc<Round>,
    slots: Arc<[Arc<Slot>]>,
    order: Arc<[usize]>,
    previous: Option<Arc<Snapshot>>,
    deadline: Duration,
    reader: u64,
}

/// The reader thread the sampler hands its rounds to.
pub(super) struct Reader {
    jobs: Option<mpsc::Sender<Job>>,
    id: u64,
}

impl Reader {
    pub fn new() -> Reader {
        Reader { jobs: None, id: 0 }
    }

    /// Starts a new thread, leaving the one before (if any) to its call.
    fn restart(&mut self) -> Result<(), std::io::Error> {
        self.id += 1;
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("roce-sources".into())
            .spawn(move || {
                for job in rx {
                    if !job.run() {
                        return;
                    }
                }
            })?;
        self.jobs = Some(jobs);
        Ok(())
    }

    /// Hands `job` to the thread, starting one when there is none or the
    /// last has ended; why not when no thread can take it.
    fn hand(&mut self, mut job: Job) -> Result<(), String> {
        // A thread that ended (its sender errs) is replaced once.
        for _ in 0..2 {
            if self.jobs.is_none() {
                self.restart().map_err(|e| {
                    tracing::error!(error = %e, "cannot start the sources' thread");
                    format!("its thread could not be started: {e}")
                })?;
            }
            let Some(jobs) = &self.jobs else { break };
            job.reader = self.id;
            lock(&job.round.state).reader = self.id;
            match jobs.send(job) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(back)) => {
                    job = back;
                    self.jobs = None;
                }
            }
        }
        Err("its thread has ended".into())
    }

    /// Calls the sources of `slots` in `order` and waits for them, each
    /// until one `deadline` after its call started.
    pub fn read(
        &mut self,
        slots: &Arc<[Arc<Slot>]>,
        order: &Arc<[usize]>,
        previous: Option<Arc<Snapshot>>,
        stale: Option<Arc<RdmaSnapshot>>,
        deadline: Duration,
    ) -> Read {
        let round = Arc::new(Round {
            state: Mutex::new(RoundState {
                outcomes: slots.iter().map(|_| None).collect(),
                next: 0,
                current: None,
                reader: 0,
                rdma: None,
                stale,
                finished: false,
            }),
            finished: Condvar::new(),
        });
        // The reader's number is set when the job is handed over.
        let job = || Job {
            round: round.clone(),
            slots: slots.clone(),
            order: order.clone(),
            previous: previous.clone(),
            deadline,
            reader: 0,
        };
        let started = Instant::now();
        if let Err(why) = self.hand(job()) {
            give_up(&round, order, &why);
        }
        let mut state = lock(&round.state);
        // The position and time at which the round was last seen between
        // two calls: a reader takes microseconds there, so no progress over
        // a whole deadline means its thread is gone.
        let mut idle: Option<(usize, Instant)> = None;
        while !state.finished {
            let now = Instant::now();
            let wait = match state.current {
                Some((i, since)) => {
                    let ran = now.saturating_duration_since(since);
                    if ran >= deadline {
                        state.outcomes[i] = Some(Outcome::failed(timeout_reason(deadline), ran));
                        None
                    } else {
                        Some(deadline - ran)
                    }
                }
                None => match idle {
                    Some((next, at)) if next == state.next => {
                        let idle_for = now.saturating_duration_since(at);
                        (idle_for < deadline).then(|| deadline - idle_for)
                    }
                    _ => {
                        idle = Some((state.next, now));
                        Some(deadline)
                    }
                },
            };
            let Some(wait) = wait else {
                // The reader in the call keeps it; the round goes on with a
                // new reader from the next source.
                state.current = None;
                state.reader = u64::MAX;
                idle = None;
                drop(state);
                self.jobs = None;
                // A sample takes at most two deadlines, so that the newest
                // sample is never old enough for `/healthz` to call it stale:
                // past that, the sources not called yet wait for the next.
                if started.elapsed() >= deadline.saturating_mul(2) {
                    give_up(&round, order, SAMPLE_TIME_USED);
                } else if let Err(why) = self.hand(job()) {
                    give_up(&round, order, &why);
                }
                state = lock(&round.state);
                continue;
            };
            if state.current.is_some() {
                idle = None;
            }
            state = round
                .finished
                .wait_timeout(state, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
        Read {
            outcomes: std::mem::take(&mut state.outcomes),
            rdma: state.rdma.take(),
            stale: state.stale.take(),
        }
    }
}

/// Marks the sources not yet called failed and the round finished: no
/// thread can run them.
fn give_up(round: &Round, order: &[usize], why: &str) {
    let mut state = lock(&round.state);
    for &i in order.iter().skip(state.next) {
        if state.outcomes[i].is_none() {
            state.outcomes[i] = Some(Outcome::failed(why.to_string(), Duration::ZERO));
        }
    }
    state.next = order.len();
    state.current = None;
    state.finished = true;
}

impl Job {
    /// Calls the sources from the round's next one to the last. False when
    /// this reader was left behind by the round (its call outlived its
    /// deadline): then the thread ends.
    fn run(&self) -> bool {
        loop {
            let i = {
                let mut state = lock(&self.round.state);
                if state.reader != self.reader {
                    return false;
                }
                let Some(&i) = self.order.get(state.next) else {
                    state.finished = true;
                    self.round.finished.notify_all();
                    return true;
                };
                state.next += 1;
                i
            };
            let Some(slot) = self.slots.get(i) else {
                continue;
            };
            let mut outcome = match &slot.off {
                Some(why) => Outcome::disabled(why),
                None => match self.call(i, slot) {
                    Some(outcome) => outcome,
                    None => return false,
                },
            };
            let mut state = lock(&self.round.state);
            if state.reader != self.reader {
                return false;
            }
            state.current = None;
            outcome.part = match outcome.part.take() {
                Some(Part::Rdma(r)) => {
                    state.rdma = Some(Arc::new(r));
                    None
                }
                other => other,
            };
            state.outcomes[i] = Some(outcome);
        }
    }

    /// The RDMA part for a dependent source: this sample's, else the last
    /// one the RDMA source returned.
    fn rdma_input(&self) -> Option<Arc<RdmaSnapshot>> {
        let mut state = lock(&self.round.state);
        if let Some(r) = &state.rdma {
            return Some(r.clone());
        }
        if state.stale.is_none() {
            state.stale = self
                .previous
                .as_ref()
                .and_then(|p| p.rdma.clone())
                .map(Arc::new);
        }
        state.stale.clone()
    }

    /// One call of a source under its lock; `None` when the reader was left
    /// behind meanwhile (the reading is dropped).
    fn call(&self, i: usize, slot: &Slot) -> Option<Outcome> {
        let mut source = match slot.source.try_lock() {
            Ok(source) => source,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let since = *lock(&slot.since);
                return Some(Outcome::failed(
                    timeout_reason(self.deadline),
                    since.map_or(Duration::ZERO, |s| s.elapsed()),
                ));
            }
        };
        if let Some(newer) = lock(&slot.pending).take() {
            *source = newer;
        }
        let input = if slot.needs_rdma {
            Input {
                rdma: self.rdma_input(),
                previous: self.previous.clone(),
            }
        } else {
            Input::default()
        };
        let started = Instant::now();
        *lock(&slot.since) = Some(started);
        {
            let mut state = lock(&self.round.state);
            if state.reader != self.reader {
                return None;
            }
            state.current = Some((i, started));
        }
        let mut errors = Vec::new();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            source.sample(&input, &mut errors)
        }));
        // Let go of the input before answering: the sampler then moves the
        // RDMA part into the snapshot instead of copying it.
        drop(input);
        let reading = result.unwrap_or_else(|panic| {
            Sampled::bare(SourceState::Failed(format!(
                "collector panicked: {}",
                roce_rules::panic_message(panic.as_ref())
            )))
        });
        let duration = started.elapsed();
        let kernel_requests =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| source.kernel_requests()))
                .unwrap_or(None);
        *lock(&slot.since) = None;
        drop(source);
        if lock(&self.round.state).reader != self.reader {
            tracing::info!(
                collector = slot.name,
                took = ?duration,
                "collector call returned after its deadline; that reading is dropped"
            );
            return None;
        }
        Some(Outcome {
            state: reading.state,
            part: reading.part,
            errors,
            duration,
            kernel_requests,
        })
    }
}
