//! The fetch pool: the threads that carry out the coordinator's requests
//! (the peer list, documents, the Prometheus query, the DNS lookup of a
//! node name two addresses claim), each answered as soon as it ends.

use super::*;

/// Work for the fetch pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FetchJob {
    List,
    Document(PeerAddress),
    Query,
    /// Resolve a node name (a DNS proof of one of two claims).
    Prove(String),
}

/// A finished job.
pub(super) enum Finished {
    List(Vec<PeerAddress>, Vec<crate::FleetError>),
    Document(PeerAddress, Result<Vec<Endpoint>, FetchError>),
    Query(Result<Vec<FleetSeries>, FetchError>),
    /// The addresses the node name resolved to (empty: none, or the
    /// deadline passed).
    Proved(String, Vec<std::net::IpAddr>),
}

/// What the pool's workers run jobs with.
pub(super) struct Work {
    pub(super) list: Mutex<Option<PeerList>>,
    pub(super) fetcher: Option<Arc<dyn Fetch>>,
    pub(super) query: Option<Arc<dyn Query>>,
    /// The deadline of a name lookup, and how names are resolved.
    pub(super) lookup_deadline: Duration,
    pub(super) resolve: Resolve,
}

impl Work {
    pub(super) fn run(&self, job: FetchJob) -> Finished {
        let failed = |what: &str| FetchError {
            reason: FetchReason::Unsupported,
            message: format!("no {what} configured"),
        };
        match job {
            FetchJob::List => {
                let mut list = lock(&self.list);
                match list.as_mut() {
                    Some(l) => {
                        let peers = l.current();
                        Finished::List(peers, l.errors.clone())
                    }
                    None => Finished::List(Vec::new(), Vec::new()),
                }
            }
            FetchJob::Document(peer) => {
                let r = match &self.fetcher {
                    Some(f) => f.fetch(&peer),
                    None => Err(failed("fetcher")),
                };
                Finished::Document(peer, r)
            }
            FetchJob::Query => Finished::Query(match &self.query {
                Some(q) => q.query(),
                None => Err(failed("query")),
            }),
            FetchJob::Prove(node) => {
                let addrs = (self.resolve)(&node, self.lookup_deadline);
                Finished::Proved(node, addrs)
            }
        }
    }
}

/// The fetch workers: jobs in, results out, each as soon as it ends. A
/// worker that panics answers its job with an error (the coordinator's
/// count of jobs in flight stays true).
pub(super) struct Pool {
    pub(super) jobs: Option<mpsc::Sender<FetchJob>>,
    pub(super) done: mpsc::Receiver<Finished>,
}

impl Pool {
    pub(super) fn start(work: Arc<Work>, workers: usize) -> Pool {
        let (jobs, job_rx) = mpsc::channel::<FetchJob>();
        let (done_tx, done) = mpsc::channel::<Finished>();
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
                                    FetchJob::List => Finished::List(
                                        Vec::new(),
                                        vec![crate::FleetError::ListPanicked],
                                    ),
                                    FetchJob::Document(p) => Finished::Document(p, Err(e)),
                                    FetchJob::Query => Finished::Query(Err(e)),
                                    FetchJob::Prove(n) => Finished::Proved(n, Vec::new()),
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

    pub(super) fn submit(&self, job: FetchJob) -> bool {
        self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Workers end once their current job (bounded by its deadline) is done.
        self.jobs.take();
    }
}
