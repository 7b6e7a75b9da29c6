//! The probe's own thread: takes the current targets from the sampler,
//! runs the rounds that are due, and publishes the results after each one.
//! The sampler only swaps a target list in and copies the results out, so a
//! slow or hanging device never delays a sample or a scrape.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::{ProbeEngine, Settings};
use crate::schedule::Schedule;
use crate::verbs::Verbs;
use crate::{ProbeResults, ProbeTarget};

/// How often the thread looks at the target list when nothing is due.
const IDLE_CHECK: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Shared {
    targets: Mutex<Vec<ProbeTarget>>,
    results: Mutex<ProbeResults>,
}

/// A running probe thread; dropping it stops the thread (after the round in
/// progress, bounded by the round timeout) and frees every resource.
pub struct Runner {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Runner {
    pub fn spawn<V: Verbs + 'static>(
        verbs: V,
        interval: Duration,
        settings: Settings,
    ) -> std::io::Result<Runner> {
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = mpsc::channel();
        let inner = shared.clone();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ u64::from(std::process::id());
        let thread = std::thread::Builder::new()
            .name("roce-probe".into())
            .spawn(move || {
                run(
                    ProbeEngine::new(verbs, settings),
                    Schedule::new(interval, seed),
                    &inner,
                    &stopped,
                )
            })?;
        Ok(Runner {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Replaces the targets; rounds on removed ones stop and their
    /// resources are freed.
    pub fn set_targets(&self, targets: Vec<ProbeTarget>) {
        let mut t = self
            .shared
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *t != targets {
            *t = targets;
        }
    }

    /// The latest published results (cheap: a copy of a few counters).
    pub fn results(&self) -> ProbeResults {
        self.shared
            .results
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run<V: Verbs>(
    mut engine: ProbeEngine<V>,
    mut schedule: Schedule,
    shared: &Shared,
    stop: &mpsc::Receiver<()>,
) {
    loop {
        let targets = shared
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let now = Instant::now();
        schedule.retain(&targets, now);
        engine.retain(&targets);
        for target in schedule.due(now) {
            if matches!(stop.try_recv(), Err(mpsc::TryRecvError::Disconnected)) {
                return;
            }
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.round(&target)));
            if let Err(panic) = outcome {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                engine.record_panic(&target, &what);
            }
            schedule.done(&target, Instant::now());
            *shared
                .results
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = engine.results();
        }
        // Removed targets must vanish from the results even when no round ran.
        *shared
            .results
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = engine.results();
        let now = Instant::now();
        let wake = schedule
            .next_due()
            .map(|at| at.saturating_duration_since(now))
            .unwrap_or(IDLE_CHECK)
            .min(IDLE_CHECK);
        match stop.recv_timeout(wake) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
