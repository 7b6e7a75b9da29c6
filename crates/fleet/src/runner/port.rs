//! One port thread: the UD responder and the paced probe rounds over the
//! peers on its rail, and the wait between probes.

use super::*;

pub(super) fn run_port<V: PeerVerbs>(
    mut verbs: V,
    target: LocalTarget,
    settings: RunnerSettings,
    id: ProberId,
    class: &AtomicU8,
    shared: &Shared,
    stop: &AtomicBool,
) {
    let key = (target.device.clone(), target.port);
    let publish = |f: &dyn Fn(&mut PublishedPort)| {
        let mut ports = lock(&shared.ports);
        f(ports.entry(key.clone()).or_default());
    };
    let halt = || stop.load(Ordering::SeqCst) || shared.stop.load(Ordering::SeqCst);
    let mut seed = u64::from(id.nonce) | 1;
    while !halt() {
        let port = match verbs.open_port(&target.device, target.port, target.gid_index) {
            Ok(p) => p,
            Err(e) => {
                let (failure, unavailable) = match e {
                    OpenError::Unavailable(why) => (None, Some(why)),
                    OpenError::Failed(f) => {
                        (Some(format!("{}: {}", f.reason.as_str(), f.message)), None)
                    }
                };
                publish(&|s| {
                    s.endpoint = None;
                    s.failure = failure.clone();
                    s.unavailable = unavailable.clone();
                });
                if !nap(stop, REOPEN_AFTER) {
                    return;
                }
                continue;
            }
        };
        let (gid, qpn, mtu) = roce_probe::peer::PeerPort::local(&port);
        let fabric = (settings.subnet_of)(&gid);
        let subnet = fabric
            .and_then(|s| s.v4())
            .map(|(a, len)| crate::peer_rails::Net::of(a, len));
        let rails = &settings.admission.rails;
        let rail = rails.local(&LocalPort {
            device: &target.device,
            device_index: target.device_index,
            netdev: target.netdev.as_deref(),
            gid,
            subnet,
        });
        let endpoint = Endpoint {
            node: settings.node.clone(),
            device: target.device.clone(),
            device_index: target.device_index,
            port: target.port,
            gid,
            gid_index: target.gid_index,
            qpn,
            qkey: QKEY,
            mtu,
            subnet: subnet.map(|n| n.to_string()),
            rail: rail.as_ref().map(crate::peer_rails::Rail::name),
            incarnation: id.incarnation,
            wire: roce_probe::peer_wire::WIRE_VERSION,
            learning: false,
        };
        let all_to_all = settings.probe.all_to_all;
        let probe_settings = PeerSettings {
            traffic_class: target.traffic_class,
            // The peers handed to the prober are already this port's (by
            // the rail rule above): it does not choose again.
            all_to_all: true,
            ..settings.probe.clone()
        };
        let mut prober = PortProber::new(endpoint.clone(), port, probe_settings, id);
        let rail_name = endpoint.rail.clone();
        publish(&|s| {
            s.endpoint = Some(endpoint.clone());
            s.subnet = fabric;
            s.rail = rail_name.clone();
            s.failure = None;
            s.unavailable = None;
        });
        let pps = prober.settings.packets_per_second;
        let mut seen: Option<Arc<Vec<Arc<Endpoint>>>> = None;
        let mut mine: Vec<Endpoint> = Vec::new();
        // The responder (GID, QPN, incarnation) each peer port had: another
        // one is a restarted peer, whose history starts afresh (the probes
        // lost to its old QPN are no loss on the path).
        let mut responders: BTreeMap<PeerKey, (std::net::Ipv6Addr, u32, u64)> = BTreeMap::new();
        while !halt() {
            let (generation, peers) = lock(&shared.peers).clone();
            if !seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &peers)) {
                mine = peers
                    .iter()
                    .filter(|p| all_to_all || rail.as_ref().is_some_and(|r| rails.on_rail(r, p)))
                    .map(|p| Endpoint::clone(p))
                    .collect();
                seen = Some(peers);
                let mut now = BTreeMap::new();
                for p in &mine {
                    let key = p.key();
                    if responders
                        .get(&key)
                        .is_some_and(|r| *r != (p.gid, p.qpn, p.incarnation))
                    {
                        prober.stats.peers.remove(&key);
                    }
                    now.insert(key, (p.gid, p.qpn, p.incarnation));
                }
                responders = now;
                let before = prober.stats.peers_known;
                prober.set_peers(&mine);
                // Published before the round (which takes seconds): the
                // rules read whether this port has peers at all, and the
                // coordinator whether its responder admits the peers yet.
                let changed = prober.stats.peers_known != before;
                let stats = changed.then(|| prober.stats.clone());
                publish(&|s| {
                    s.applied = generation;
                    if let Some(st) = &stats {
                        s.stats = st.clone();
                    }
                });
            }
            prober.settings.traffic_class = class.load(Ordering::SeqCst);
            if prober.stats.peers_known == 0 {
                prober.serve();
                prober.idle(TICK);
            } else {
                let mut mark = Instant::now();
                prober.next_round(&mut || {
                    if halt() {
                        return None;
                    }
                    seed = xorshift(seed);
                    let d = gap_after(
                        spacing(pps, (seed % 10_000) as f64 / 10_000.0),
                        mark.elapsed(),
                    );
                    mark = Instant::now() + d;
                    Some(d)
                });
                // Only the small probe: a lost large one with the small
                // answered is a path MTU, which a new document cannot fix.
                // A responder whose answers carry another incarnation than
                // its document is a restarted peer whose new QP took the
                // old QPN: its document is stale too.
                let stale = |k: &PeerKey, seen: Option<u64>| {
                    mine.iter().any(|e| {
                        e.key() == *k
                            && e.incarnation != 0
                            && seen.is_some_and(|i| i != e.incarnation)
                    })
                };
                let failing: Vec<PeerKey> = prober
                    .stats
                    .peers
                    .iter()
                    .filter(|(k, p)| {
                        p.rounds_since_sampled == 0
                            && (p.last_small_ok == Some(false) || stale(k, p.answered_by))
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                if !failing.is_empty() {
                    lock(&shared.failing).extend(failing);
                }
            }
            let stats = prober.stats.clone();
            publish(&|s| s.stats = stats.clone());
        }
        return;
    }
}

/// The wait after a probe: what is left of its `spacing` once the probe
/// itself took `spent` (its RTT, or the whole timeout when lost). Probes
/// are sent one at a time, so this keeps the configured rate while the
/// answers come faster than the spacing; a lost probe still takes its
/// timeout (see docs/peer-probes.md, "Achieved rate").
pub fn gap_after(spacing: Duration, spent: Duration) -> Duration {
    spacing.saturating_sub(spent)
}

pub(super) fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}

pub(super) fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}
