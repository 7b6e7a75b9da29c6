//! `roce_exporter check --load`: the wiring of the load test's requester
//! side. From the check's sample, every active RDMA port
//! ([`local_ports`]); the peers named with `--peer` or the peer probes'
//! list; then the runs, every port at once first and each port alone
//! after: per run, the ports prepared (queue pairs, a session granted by a
//! peer's responder on the port's rail), a sample, the streams together,
//! a sample, the sessions ended; the rule table judged over the run's two
//! samples (its counter rules "under load" and the load-test rules), and
//! the run added to the report (crates/checklist's `load`). The results go
//! to `load_test.results_file` when one is configured, where the exporter
//! reads them (`roce_load_test_*`).

use std::io::Write as _;
use std::net::Ipv6Addr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use roce_fleet::load::client::{self, Control, LoadPlan, NotPrepared, Prepared};
use roce_fleet::load::wire::EndReport;
use roce_fleet::load::LocalLoadPort;
use roce_fleet::peer_rails::Net;
use roce_model::load::{
    LoadRun, LoadTestResults, LoadTestSnapshot, Outcome, PortLoad, RunScope, SizeLoad,
    RESULTS_VERSION,
};
use roce_probe::load::stream::StreamReport;
use roce_probe::load::{LoadVerbs, MemoryUsed};
use roce_topology::PathClass;

use crate::check::Report;
use crate::config::{Config, GidIndex};
use crate::rules;
use crate::sampler::Sampler;
use crate::snapshot::Snapshot;

/// What the command line asked for.
#[derive(Debug, Clone)]
pub struct LoadArgs {
    /// Time per message size.
    pub per_size: Duration,
    /// `--peer`: peers to ask, in order (else the peer probes' list).
    pub peers: Vec<String>,
    /// `--load-force`: load ports that already carry traffic.
    pub force: bool,
}

/// The subnet of an IPv4-mapped GID on this host's interface.
#[cfg(feature = "probes")]
fn subnet_of(gid: &Ipv6Addr) -> Option<Net> {
    let v4 = gid.to_ipv4_mapped()?;
    Some(Net::of(v4, roce_probe::peer_ibverbs::ipv4_prefix_len(v4)?))
}

#[cfg(not(feature = "probes"))]
fn subnet_of(_gid: &Ipv6Addr) -> Option<Net> {
    None
}

/// Every active RDMA port as the load test sees it, from `cur` (and
/// `prev`, for what each port carried between the two).
pub fn local_ports(prev: Option<&Snapshot>, cur: &Snapshot, config: &Config) -> Vec<LocalLoadPort> {
    let mut out = Vec::new();
    for (d, p) in rules::ports::ports(cur) {
        if !p.is_up() {
            continue;
        }
        let Ok(port) = u8::try_from(p.number) else {
            continue;
        };
        let gid_index = match config.probes.gid_index {
            GidIndex::Index(i) => Some(i),
            GidIndex::Auto => crate::sources::probe::auto_gid(p),
        };
        let Some(gid_index) = gid_index else { continue };
        let Some(gid) = p.gids.iter().find(|g| g.index == gid_index).map(|g| g.gid) else {
            continue;
        };
        let gpu = cur.topology.as_ref().and_then(|t| {
            t.paths
                .iter()
                .filter(|x| x.nic == d.name && matches!(x.class, PathClass::Pix | PathClass::Pxb))
                .min_by_key(|x| x.class)
                .and_then(|x| t.gpus.iter().find(|g| g.index == x.gpu))
                .map(|g| g.address.to_string())
        });
        out.push(LocalLoadPort {
            device: d.name.clone(),
            port,
            netdev: p.netdev.clone(),
            gid_index,
            gid,
            subnet: subnet_of(&gid),
            traffic_class: rules::fabric::port_traffic_class(
                cur,
                &d.name,
                p.number,
                config.expect.nccl_ib_tc,
            ),
            rate_bytes_per_second: rules::load_test::line_rate(p),
            carried_bytes_per_second: prev.and_then(|s| {
                rules::load_test::carried_bytes_per_second(s, cur, &d.name, p.number)
            }),
            gpu,
        });
    }
    out
}

/// The peers to ask: `--peer`, else the peer probes' list (static, DNS,
/// SRV, file), as addresses.
fn peers(config: &Config, args: &LoadArgs) -> Vec<String> {
    if !args.peers.is_empty() {
        return args.peers.clone();
    }
    let tls = config.peer_probes.tls_ca_file.is_some();
    roce_fleet::peer_list::PeerList::new(&config.peer_probes, tls)
        .current()
        .into_iter()
        .map(|a| a.0)
        .collect()
}

fn progress(show: bool, text: &str) {
    if show {
        let mut err = std::io::stderr();
        let _ = writeln!(err, "load test: {text}");
    }
}

/// Runs the load test after the check and adds it to `report`.
#[cfg(feature = "probes")]
pub fn run(config: &Config, sampler: &mut Sampler, report: &mut Report, args: &LoadArgs) {
    let show = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let gpu = config.load_test.gpu;
    let cuda = gpu.then(roce_probe::load::gpu::CudaDriver::load);
    let verbs = roce_probe::load::rc::IbLoadVerbs::new(match &cuda {
        Some(Ok(d)) => Some(Arc::new(d.clone()) as Arc<dyn roce_probe::load::gpu::GpuMemory>),
        _ => None,
    });
    let cuda_note = match cuda {
        Some(Err(e)) => Some(e),
        _ => None,
    };
    let control = match roce_fleet::load::client::HttpControl::new(&config.peer_probes) {
        Ok(c) => c,
        Err(e) => {
            roce_checklist::load::not_run(report, &format!("the peer_probes client settings: {e}"));
            return;
        }
    };
    run_with(
        config, sampler, report, args, &verbs, &control, cuda_note, show,
    );
}

#[cfg(not(feature = "probes"))]
pub fn run(_config: &Config, _sampler: &mut Sampler, report: &mut Report, _args: &LoadArgs) {
    roce_checklist::load::not_run(report, "built without verbs (feature `probes`)");
}

/// [`run`] over any verbs and control (the tests' fakes).
#[allow(clippy::too_many_arguments)]
pub fn run_with<V: LoadVerbs, C: Control>(
    config: &Config,
    sampler: &mut Sampler,
    report: &mut Report,
    args: &LoadArgs,
    verbs: &V,
    control: &C,
    cuda_note: Option<String>,
    show: bool,
) {
    let first = sampler.sample();
    let mut ports = local_ports(None, &first, config);
    if ports.is_empty() {
        roce_checklist::load::not_run(report, "no active RDMA port with a usable GID");
        return;
    }
    if cuda_note.is_some() {
        // No CUDA library: every port uses host memory, with the reason.
        for p in &mut ports {
            p.gpu = None;
        }
    }
    let peers = peers(config, args);
    let plan = LoadPlan {
        sizes: config.load_test.sizes.clone(),
        per_size: args.per_size,
        qps: config.load_test.qps,
        depth: config.load_test.depth,
        force: args.force,
        gpu: config.load_test.gpu,
    };
    let mut runs = vec![(RunScope::All, ports.clone())];
    if ports.len() > 1 {
        runs.extend(ports.iter().map(|p| (RunScope::Alone, vec![p.clone()])));
    }
    let mut results = LoadTestResults {
        version: RESULTS_VERSION,
        finished_at: 0.0,
        runs: Vec::new(),
    };
    for (scope, ports) in runs {
        let names: Vec<String> = ports
            .iter()
            .map(|p| format!("{}/{}", p.device, p.port))
            .collect();
        progress(
            show,
            &format!(
                "{} ({}): {} sizes x {:?}",
                scope.as_str(),
                names.join(" "),
                plan.sizes.len(),
                plan.per_size
            ),
        );
        let run = one_run(
            sampler,
            config,
            verbs,
            control,
            &ports,
            &peers,
            &plan,
            scope,
            cuda_note.as_deref(),
        );
        let (run, findings) = run;
        results.runs.push(run.clone());
        roce_checklist::load::add_run(report, run, findings);
    }
    results.finished_at = epoch_seconds(SystemTime::now());
    if let Some(path) = &config.load_test.results_file {
        if let Err(e) = write_results(path, &results) {
            eprintln!("roce_exporter check: cannot write {}: {e}", path.display());
        }
    }
}

fn epoch_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One run: prepare, sample, stream, sample, end, judge.
#[allow(clippy::too_many_arguments)]
fn one_run<V: LoadVerbs, C: Control>(
    sampler: &mut Sampler,
    config: &Config,
    verbs: &V,
    control: &C,
    ports: &[LocalLoadPort],
    peers: &[String],
    plan: &LoadPlan,
    scope: RunScope,
    cuda_note: Option<&str>,
) -> (LoadRun, Vec<rules::Finding>) {
    let mut prepared: Vec<Prepared<V::Requester>> = Vec::new();
    let mut not: Vec<NotPrepared> = Vec::new();
    for p in ports {
        match client::prepare(verbs, control, p, peers, plan) {
            Ok(x) => prepared.push(x),
            Err(e) => not.push(e),
        }
    }
    let before = sampler.sample();
    let started = SystemTime::now();
    let stop = AtomicBool::new(false);
    let reports = if prepared.is_empty() {
        Vec::new()
    } else {
        client::run(&mut prepared, plan, &stop)
    };
    let seconds = started.elapsed().map_or(0.0, |d| d.as_secs_f64());
    let after = sampler.sample();
    let meta: Vec<_> = prepared
        .iter()
        .map(|p| {
            (
                p.port.clone(),
                p.peer.clone(),
                p.grant.clone(),
                p.memory.clone(),
            )
        })
        .collect();
    let ends = client::finish(prepared, control);
    let mut loads = Vec::new();
    for (((port, peer, grant, memory), report), end) in meta.into_iter().zip(reports).zip(ends) {
        let mut l = port_load(&port, &before, &after, report, end.ok(), cuda_note);
        l.peer = Some(peer);
        l.peer_node = Some(grant.node);
        l.peer_device = Some(grant.device);
        l.peer_port = Some(grant.port);
        match memory {
            MemoryUsed::Gpu { .. } => l.memory = "gpu".into(),
            MemoryUsed::Host { fallback } => {
                l.memory = "host".into();
                l.memory_note = fallback.or(l.memory_note);
            }
        }
        loads.push(l);
    }
    for n in not {
        let mut l = port_load(
            &n.port,
            &before,
            &after,
            StreamReport {
                sizes: Vec::new(),
                bytes: 0,
                failure: None,
                elapsed: Duration::ZERO,
            },
            None,
            cuda_note,
        );
        l.outcome = Outcome::NotRun { message: n.why };
        l.counters = None;
        loads.push(l);
    }
    loads.sort_by(|a, b| (&a.device, a.port).cmp(&(&b.device, b.port)));
    let run = LoadRun {
        scope,
        started_at: epoch_seconds(started),
        seconds,
        ports: loads,
    };
    let mut judged = (*after).clone();
    judged.load_test = Some(LoadTestSnapshot {
        results: Some(Arc::new(LoadTestResults {
            version: RESULTS_VERSION,
            finished_at: epoch_seconds(SystemTime::now()),
            runs: vec![run.clone()],
        })),
        ..LoadTestSnapshot::default()
    });
    let findings = rules::evaluate(&[before, Arc::new(judged)], &config.rules, &config.expect);
    (run, findings)
}

fn port_load(
    port: &LocalLoadPort,
    before: &Snapshot,
    after: &Snapshot,
    report: StreamReport,
    end: Option<EndReport>,
    cuda_note: Option<&str>,
) -> PortLoad {
    let outcome = match &report.failure {
        None => Outcome::Completed,
        Some(f) => Outcome::Aborted {
            reason: f.reason.as_str().to_string(),
            message: f.message.clone(),
        },
    };
    PortLoad {
        device: port.device.clone(),
        port: u32::from(port.port),
        netdev: port.netdev.clone(),
        peer: None,
        peer_node: None,
        peer_device: None,
        peer_port: None,
        expected_bytes_per_second: port.rate_bytes_per_second,
        sizes: report
            .sizes
            .iter()
            .map(|s| SizeLoad {
                size: s.size,
                bytes_per_second: s.bytes_per_second(),
                sample_seconds: s.sample_seconds,
                bytes: s.bytes,
            })
            .collect(),
        bytes: report.bytes,
        responder_bytes: end.map(|e| e.bytes),
        counters: Some(rules::load_test::run_counters(
            before,
            after,
            &port.device,
            u32::from(port.port),
        )),
        outcome,
        memory: "host".into(),
        memory_note: cuda_note.map(|n| format!("CUDA: {n}")),
    }
}

/// Writes the results where the exporter reads them: a new file renamed
/// over the old one, so that a reader never sees half of it.
fn write_results(path: &std::path::Path, r: &LoadTestResults) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, path)
}
