//! The coordinator thread: starts and stops the port threads, feeds the
//! fetch pool from the catalog's plan and publishes what it admits.

use super::catalog::Catalog;
use super::pool::{FetchJob, Pool, Work};
use super::port::{run_port, seed, xorshift};
use super::*;

pub(super) fn coordinate<V>(
    verbs: V,
    source: EndpointSource,
    settings: RunnerSettings,
    shared: &Arc<Shared>,
) where
    V: PeerVerbs + Clone + 'static,
{
    let mut seed = seed();
    // This exporter's incarnation: in its endpoints and its probes, so
    // that peers tell a restart from a path that lost packets.
    seed = xorshift(seed);
    let incarnation = seed;
    let (work, mode) = match source {
        EndpointSource::Documents { list, fetcher } => (
            Work {
                list: Mutex::new(Some(*list)),
                fetcher: Some(fetcher),
                query: None,
                lookup_deadline: settings.fetch_timeout,
                resolve: settings.resolve,
            },
            DiscoveryMode::Documents,
        ),
        EndpointSource::Prometheus(q) => (
            Work {
                list: Mutex::new(None),
                fetcher: None,
                query: Some(q),
                lookup_deadline: settings.fetch_timeout,
                resolve: settings.resolve,
            },
            DiscoveryMode::Prometheus,
        ),
    };
    let dns_queries = lock(&work.list).as_ref().map_or(0, PeerList::dns_queries) as u64;
    let pool = Pool::start(Arc::new(work), FETCH_WORKERS);
    seed = xorshift(seed);
    let mut catalog = Catalog::new(mode, settings.refresh, seed, settings.pace);
    let mut published: Option<Instant> = None;
    let mut threads: Vec<PortThread> = Vec::new();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let targets = lock(&shared.targets).clone();
        // Stop the threads of removed or changed ports; a new traffic
        // class alone is handed to the running thread.
        let (keep, gone): (Vec<PortThread>, Vec<PortThread>) = threads
            .into_iter()
            .partition(|t| targets.iter().any(|n| n.same_port(&t.target)));
        threads = keep;
        for t in &mut threads {
            if let Some(n) = targets.iter().find(|n| n.same_port(&t.target)) {
                t.class.store(n.traffic_class, Ordering::SeqCst);
                t.target = n.clone();
            }
        }
        for t in gone {
            t.stop.store(true, Ordering::SeqCst);
            let _ = t.handle.join();
            let key = (t.target.device.clone(), t.target.port);
            if !threads
                .iter()
                .any(|o| (o.target.device.clone(), o.target.port) == key)
            {
                lock(&shared.ports).remove(&key);
            }
        }
        for target in &targets {
            if threads.iter().any(|t| &t.target == target) {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let class = Arc::new(AtomicU8::new(target.traffic_class));
            let (s, sh, v, st, t, c) = (
                stop.clone(),
                shared.clone(),
                verbs.clone(),
                settings.clone(),
                target.clone(),
                class.clone(),
            );
            seed = xorshift(seed);
            let id = ProberId {
                nonce: (seed >> 16) as u32,
                incarnation,
            };
            let spawned = std::thread::Builder::new()
                .name(format!("roce-peer-{}", target.device))
                .spawn(move || run_port(v, t, st, id, &c, &sh, &s));
            match spawned {
                Ok(handle) => threads.push(PortThread {
                    target: target.clone(),
                    class,
                    stop,
                    handle,
                }),
                Err(e) => tracing::warn!(error = %e, "cannot start a peer-probe port thread"),
            }
        }
        // Results that ended since the last tick, each published at once;
        // the next requests planned and counted under the same lock, so a
        // reader never sees a finished pass without what it started.
        let now = Instant::now();
        // Documents are admitted against the subnets of the open ports.
        let opened: Vec<Option<crate::peer_address::PortSubnet>> = lock(&shared.ports)
            .values()
            .filter(|p| p.endpoint.is_some())
            .map(|p| p.subnet)
            .collect();
        if !opened.is_empty() {
            let mut subnets: Vec<_> = opened.into_iter().flatten().collect();
            subnets.sort();
            subnets.dedup();
            catalog.set_subnets(subnets);
        }
        let jobs = {
            let mut d = lock(&shared.discovery);
            while let Ok(done) = pool.done.try_recv() {
                catalog.apply(done, now, &settings.admission, &mut d);
            }
            if catalog.changed && published.is_none_or(|t| now >= t + PUBLISH_EVERY) {
                catalog.changed = false;
                published = Some(now);
                let mut peers = lock(&shared.peers);
                *peers = (peers.0 + 1, Arc::new(catalog.endpoints()));
            }
            let failing = std::mem::take(&mut *lock(&shared.failing));
            let jobs = catalog.plan(
                now,
                FETCH_WORKERS.saturating_sub(catalog.in_flight),
                &failing,
            );
            for job in &jobs {
                let (kind, n) = match job {
                    FetchJob::List => (RequestKind::Dns, dns_queries),
                    FetchJob::Document(_) => (RequestKind::Document, 1),
                    FetchJob::Query => (RequestKind::Prometheus, 1),
                    FetchJob::Prove(_) => (RequestKind::Dns, 1),
                };
                if n > 0 {
                    *d.requests.entry(kind).or_insert(0) += n;
                }
            }
            let (listed, known) = catalog.peer_counts();
            d.peers_configured = listed;
            d.peers_known = known;
            let (generation, endpoints) = {
                let p = lock(&shared.peers);
                (p.0, p.1.len())
            };
            d.endpoints = endpoints;
            d.in_flight = catalog.in_flight;
            // Learning until every listed peer was tried once and what it
            // admitted is admitted by the responders of the open ports:
            // a peer told otherwise would call its unanswered probes lost.
            d.learning = catalog.learning()
                || catalog.changed
                || lock(&shared.ports)
                    .values()
                    .any(|p| p.endpoint.is_some() && p.applied < generation);
            jobs
        };
        for job in jobs {
            if !pool.submit(job) {
                catalog.in_flight = catalog.in_flight.saturating_sub(1);
            }
        }
        if !nap(&shared.stop, TICK) {
            break;
        }
    }
    for t in &threads {
        t.stop.store(true, Ordering::SeqCst);
    }
    for t in threads {
        let _ = t.handle.join();
    }
}
