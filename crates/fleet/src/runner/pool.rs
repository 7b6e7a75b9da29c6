//! The fetch pool: the threads that carry out the coordinator's requests
//! (the peer list, documents, the Prometheus query), each answered as soon
//! as it ends.

use super::*;

/// Work for the fetch pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Job {
    List,
    Document(PeerAddress),
    Query,
}

/// A finished job.
pub(super) enum Done {
    List(Vec<PeerAddress>, Vec<crate::FleetError>),
    Document(PeerAddress, Result<Vec<Endpoint>, FetchError>),
    Query(Result<Vec<FleetSeries>, FetchError>),
}

/// What the pool's workers run jobs with.
pub(super) struct Work {
    pub(super) list: Mutex<Option<PeerList>>,
    pub(super) fetcher: Option<Arc<dyn Fetch>>,
    pub(super) query: Option<Arc<dyn Query>>,
}

impl Work {
    pub(super) fn run(&self, job: Job) -> Done {
        let failed = |what: &str| FetchError {
            reason: FetchReason::Unsupported,
            message: format!("no {what} configured"),
        };
        match job {
            Job::List => {
                let mut list = lock(&self.list);
                match list.as_mut() {
                    Some(l) => {
                        let peers = l.current();
                        Done::List(peers, l.errors.clone())
                    }
                    None => Done::List(Vec::new(), Vec::new()),
                }
            }
            Job::Document(peer) => {
                let r = match &self.fetcher {
                    Some(f) => f.fetch(&peer),
                    None => Err(failed("fetcher")),
                };
                Done::Document(peer, r)
            }
            Job::Query => Done::Query(match &self.query {
                Some(q) => q.query(),
                None => Err(failed("query")),
            }),
        }
    }
}

/// The fetch workers: jobs in, results out, each as soon as it ends. A
/// worker that panics answers its job with an error (the coordinator's
/// count of jobs in flight stays true).
pub(super) struct Pool {
    pub(super) jobs: Option<mpsc::Sender<Job>>,
    pub(super) done: mpsc::Receiver<Done>,
}

impl Pool {
    pub(super) fn start(work: Arc<Work>, workers: usize) -> Pool {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel::<Done>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        for _ in 0..workers.max(1) {
            let (rx, tx, work) = (job_rx.clone(), done_tx.clone(), work.clone());
            let spawned = std::thread::Builder::new()
                .name("roce-peer-fetch".into())
                .spawn(move || loop {
                    let job = match lock(&rx).recv() {
                        Ok(j) => j,
                        Err(_) => return,
                    };
                    let again = job.clone();
                    let done =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.run(job)))
                            .unwrap_or_else(|_| {
                                let e = FetchError {
                                    reason: FetchReason::Parse,
                                    message: "the fetch panicked".into(),
                                };
                                match again {
                                    Job::List => Done::List(
                                        Vec::new(),
                                        vec![crate::FleetError::ListPanicked],
                                    ),
                                    Job::Document(p) => Done::Document(p, Err(e)),
                                    Job::Query => Done::Query(Err(e)),
                                }
                            });
                    if tx.send(done).is_err() {
                        return;
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start a peer fetch thread");
            }
        }
        Pool {
            jobs: Some(jobs),
            done,
        }
    }

    pub(super) fn submit(&self, job: Job) -> bool {
        self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Workers end once their current job (bounded by its deadline) is done.
        self.jobs.take();
    }
}
