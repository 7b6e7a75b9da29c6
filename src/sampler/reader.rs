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
//!
//! Within a source, a source that reads through a watched file layer
//! ([`Source::stall_watch`]) and can make siblings ([`Source::respawner`])
//! has a deadline per file call as well
//! ([`roce_host::stall::item_deadline`], a quarter of the source's): while
//! its call runs, the sampler looks at the file call in flight once per
//! item deadline, and the same call in flight at two looks is stuck. The
//! sampler then marks that file stuck, leaves the reader (and the source's
//! instance) to it, puts a sibling instance in the slot, and has a new
//! reader call the source again from scratch: the sibling skips the stuck
//! file (its value absent, the stuck file reported once as a `timeout`
//! error of the source), reads everything else, and the sources after it
//! follow in the same sample. At most [`MAX_RESPAWNS_PER_SAMPLE`] siblings
//! are started per sample and [`MAX_ABANDONED`] instances may be left to
//! stuck reads per source; past either, the source's own deadline applies
//! as above. A later sample calls the sibling and queues behind nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::snapshot::{KernelRequests, Snapshot, SourceState};
use crate::sources::{Input, Part, Respawn, Sampled, Source};
use roce_host::stall::{item_deadline, Look, StallWatch};
use roce_host::{HostError, ReadError};
use roce_rdma::RdmaSnapshot;

/// Siblings started per sample, all sources together: each stuck file
/// costs up to two item deadlines of the sample's time.
pub(super) const MAX_RESPAWNS_PER_SAMPLE: usize = 2;
/// Instances of one source left to stuck reads at once (each holds a
/// thread in the kernel until its read returns).
pub(super) const MAX_ABANDONED: usize = 4;

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

/// One instance of a source and the lock its calls hold.
struct Instance {
    source: Mutex<Box<dyn Source>>,
    /// When the call in flight started.
    since: Mutex<Option<Instant>>,
}

impl Instance {
    fn new(source: Box<dyn Source>) -> Arc<Instance> {
        Arc::new(Instance {
            source: Mutex::new(source),
            since: Mutex::new(None),
        })
    }
}

/// The per-item watch of a source and how to make its siblings.
struct Stall {
    watch: Arc<StallWatch>,
    respawn: Respawn,
}

impl Stall {
    fn of(source: &dyn Source) -> Option<Stall> {
        Some(Stall {
            watch: source.stall_watch()?,
            respawn: source.respawner()?,
        })
    }
}

/// One source and the lock its calls hold.
pub(super) struct Slot {
    pub name: &'static str,
    pub needs_rdma: bool,
    /// Why the source is off ([`Source::disabled`]): then it is never
    /// called.
    pub off: Option<String>,
    /// The instance called; a sibling takes its place when a call sticks
    /// in a file.
    instance: Mutex<Arc<Instance>>,
    /// A source from a reloaded configuration, taken in place of the one
    /// behind `source` by the next call: set when a reload comes while a
    /// call is stuck, so that the stuck read is not doubled.
    pending: Mutex<Option<Box<dyn Source>>>,
    /// The per-item watch of the instance in use, when it has one.
    stall: Mutex<Option<Stall>>,
    /// Instances left to a stuck read whose call has not returned.
    abandoned: AtomicUsize,
    /// Stuck files found by the sampler, handed to the source's next
    /// outcome: each is reported once.
    found: Mutex<Vec<HostError>>,
}

impl Slot {
    pub fn new(source: Box<dyn Source>) -> Arc<Slot> {
        Arc::new(Slot {
            name: source.name(),
            needs_rdma: source.needs_rdma(),
            off: source.disabled(),
            stall: Mutex::new(Stall::of(source.as_ref())),
            instance: Mutex::new(Instance::new(source)),
            pending: Mutex::new(None),
            abandoned: AtomicUsize::new(0),
            found: Mutex::new(Vec::new()),
        })
    }

    fn instance(&self) -> Arc<Instance> {
        lock(&self.instance).clone()
    }

    /// Whether a call of this source is running (or stuck).
    pub fn in_flight(&self) -> bool {
        matches!(
            self.instance().source.try_lock(),
            Err(TryLockError::WouldBlock)
        )
    }

    /// Hands the slot a source to take at its next call.
    pub fn replace_later(&self, source: Box<dyn Source>) {
        *lock(&self.pending) = Some(source);
    }

    /// The stuck files found since the source's last outcome, for the next.
    fn take_found(&self) -> Vec<HostError> {
        std::mem::take(&mut *lock(&self.found))
    }

    fn watch(&self) -> Option<Arc<StallWatch>> {
        lock(&self.stall).as_ref().map(|s| s.watch.clone())
    }

    /// Leaves the instance in use to the file call `seen` in flight, and
    /// puts a sibling in its place; false (nothing changed) when the source
    /// makes no siblings, too many instances are left to stuck reads
    /// already, or the call has returned since `seen`.
    fn respawn(&self, seen: Look, deadline: Duration) -> bool {
        if self.abandoned.load(Ordering::Acquire) >= MAX_ABANDONED {
            return false;
        }
        let stall = lock(&self.stall);
        let Some(stall) = stall.as_ref() else {
            return false;
        };
        let Some(path) = stall.watch.abandon(seen) else {
            return false;
        };
        let fresh = (stall.respawn)();
        self.abandoned.fetch_add(1, Ordering::AcqRel);
        *lock(&self.instance) = Instance::new(fresh);
        tracing::warn!(
            collector = self.name,
            file = %path.display(),
            deadline = ?deadline,
            "a read did not return within its deadline; its value is left out until it returns, and the rest of the collector is read again without it"
        );
        lock(&self.found).push(HostError::File(ReadError::stuck(&path, deadline)));
        true
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
    /// Siblings started in this round ([`MAX_RESPAWNS_PER_SAMPLE`]).
    respawned: usize,
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
                respawned: 0,
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
        // The last look at the file call in flight of a watched source.
        let mut looked: Option<Looked> = None;
        let item = item_deadline(deadline);
        // With a watched source, the waits are at most an item deadline:
        // the reader does not wake the sampler when a call starts, so a
        // round that runs that long is looked at on this timer.
        let longest_wait = if slots.iter().any(|s| s.watch().is_some()) {
            item
        } else {
            Duration::MAX
        };
        while !state.finished {
            let now = Instant::now();
            let wait = match state.current {
                Some((i, since)) => {
                    let ran = now.saturating_duration_since(since);
                    if ran >= deadline {
                        let mut timed_out = Outcome::failed(timeout_reason(deadline), ran);
                        timed_out.errors = slots[i].take_found();
                        state.outcomes[i] = Some(timed_out);
                        None
                    } else {
                        match look_at(&mut looked, &slots[i], i, since, now, item) {
                            Stuck::No(next_look) => Some((deadline - ran).min(next_look)),
                            Stuck::Yes(seen) => {
                                if state.respawned < MAX_RESPAWNS_PER_SAMPLE
                                    && slots[i].respawn(seen, item)
                                {
                                    // Called again, a sibling in its place.
                                    state.respawned += 1;
                                    state.next =
                                        order.iter().position(|&j| j == i).unwrap_or(state.next);
                                    state.outcomes[i] = None;
                                    None
                                } else {
                                    if let Some(l) = looked.as_mut() {
                                        l.done = true;
                                    }
                                    Some(deadline - ran)
                                }
                            }
                        }
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
                looked = None;
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
                .wait_timeout(state, wait.min(longest_wait))
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

/// The last look at a watched source's file call in flight.
struct Looked {
    slot: usize,
    /// When the source's call started: a new call is a new watch.
    call: Instant,
    at: Instant,
    seen: Look,
    /// Stuck, and no sibling could take over: the source's own deadline
    /// applies.
    done: bool,
}

enum Stuck {
    /// Not stuck; look again after this long.
    No(Duration),
    /// The call `Look` saw has been in flight for an item deadline.
    Yes(Look),
}

/// Looks at slot `i`'s file call in flight, at most once per `item`
/// deadline: the same call in flight at two looks is stuck.
fn look_at(
    looked: &mut Option<Looked>,
    slot: &Slot,
    i: usize,
    call: Instant,
    now: Instant,
    item: Duration,
) -> Stuck {
    let Some(watch) = slot.watch() else {
        return Stuck::No(Duration::MAX);
    };
    match looked {
        Some(l) if l.slot == i && l.call == call => {
            if l.done {
                return Stuck::No(Duration::MAX);
            }
            let due = l.at + item;
            if now < due {
                return Stuck::No(due - now);
            }
            let seen = watch.look();
            if seen.in_call() && seen == l.seen {
                return Stuck::Yes(seen);
            }
            l.seen = seen;
            l.at = now;
        }
        _ => {
            *looked = Some(Looked {
                slot: i,
                call,
                at: now,
                seen: watch.look(),
                done: false,
            });
        }
    }
    Stuck::No(item)
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
        let mut inst = slot.instance();
        if matches!(inst.source.try_lock(), Err(TryLockError::WouldBlock)) {
            // A call of an earlier sample, past its whole deadline: when it
            // is in a file call now, it is left to it and a sibling called.
            let since = *lock(&inst.since);
            let ran = since.map_or(Duration::ZERO, |s| s.elapsed());
            let seen = slot.watch().map(|w| w.look()).filter(|l| l.in_call());
            if !seen.is_some_and(|seen| slot.respawn(seen, ran)) {
                let mut timed_out = Outcome::failed(timeout_reason(self.deadline), ran);
                timed_out.errors = slot.take_found();
                return Some(timed_out);
            }
            inst = slot.instance();
        }
        let mut source = match inst.source.try_lock() {
            Ok(source) => source,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Some(Outcome::failed(
                    timeout_reason(self.deadline),
                    Duration::ZERO,
                ))
            }
        };
        if let Some(newer) = lock(&slot.pending).take() {
            *lock(&slot.stall) = Stall::of(newer.as_ref());
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
        *lock(&inst.since) = Some(started);
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
        *lock(&inst.since) = None;
        drop(source);
        if !Arc::ptr_eq(&inst, &slot.instance()) {
            // This instance was left to a stuck read, which has returned.
            slot.abandoned.fetch_sub(1, Ordering::AcqRel);
        }
        if lock(&self.round.state).reader != self.reader {
            tracing::info!(
                collector = slot.name,
                took = ?duration,
                "collector call returned after its deadline; that reading is dropped"
            );
            return None;
        }
        let mut found = slot.take_found();
        if !found.is_empty() {
            found.append(&mut errors);
            errors = found;
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
