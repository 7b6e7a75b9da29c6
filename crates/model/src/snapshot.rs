//! The immutable result of one sample: what every source read, and how each
//! source fared. Plain data; rules and exposition only read it.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use roce_host::{ErrorKind, HostError};

/// One sample of the host.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases by one per sample, from 1: also the samples taken since
    /// start (`roce_samples_total`).
    pub sequence: u64,
    /// Scheduled sample ticks skipped since start because a sample, or the
    /// host's scheduling of the sampler, overran the interval. Counted after
    /// each sample, so a miss shows in the snapshot that follows it.
    pub ticks_missed_total: u64,
    /// When the sample started, on the wall clock: for display and
    /// exposition only (it can step back or jump).
    pub taken_at: Option<SystemTime>,
    /// When the sample started, on the monotonic clock ([`monotonic_now`]):
    /// what windows, rates, hold times and staleness are measured on.
    pub monotonic: Option<Duration>,
    /// The sample interval in force when it was taken (zero: unknown).
    pub interval: Duration,
    /// One entry per source that ran, in the order they ran.
    pub sources: Vec<SourceStatus>,
    /// RDMA devices, ports, counters and GIDs (`/sys/class/infiniband`).
    pub rdma: Option<roce_rdma::RdmaSnapshot>,
    /// Netdevs behind RDMA ports: ethtool statistics with meaning, DCB, ECN,
    /// MTU (`roce-netdev`).
    pub netdev: Option<roce_netdev::NetdevSnapshot>,
    /// GPU-NIC PCIe topology and GPUDirect readiness (`roce-topology`).
    pub topology: Option<roce_topology::TopologySnapshot>,
    /// Physical layer and device health: FEC, modules, PCIe AER of NICs
    /// and GPUs, devlink health reporters (`roce-netdev` phys).
    pub phys: Option<roce_netdev::phys::PhysSnapshot>,
    /// Latest results of the verbs probes (their own thread; `roce-probe`).
    pub probes: Option<roce_probe::ProbeResults>,
    /// Latest results of the probes between hosts (`roce_probe::peer`).
    pub peer_probes: Option<roce_probe::peer::PeerResults>,
    /// Where the peer prober's endpoints came from and what was refused
    /// (`roce_fleet::runner`); present whenever `peer_probes` is.
    pub peer_discovery: Option<crate::peer::PeerDiscovery>,
    /// What NCCL jobs on this host used (their debug logs and Inspector
    /// output; `nccl.enabled`).
    pub nccl: Option<crate::nccl::NcclSnapshot>,
    /// LLDP neighbours of the RDMA netdevs and their switch ports' DCBX
    /// view (`lldp.mode`).
    pub lldp: Option<crate::lldp::LldpSnapshot>,
    /// The last load test's results and this node's load-test responder
    /// (`load_test:`).
    pub load_test: Option<crate::load::LoadTestSnapshot>,
    /// Active findings after this sample (rules over the history, with the
    /// hold time applied).
    pub findings: Vec<crate::finding::Finding>,
    /// Rules that panicked since start, with how many times (a rule that
    /// panics loses its findings for that sample only).
    pub rule_panics_total: Vec<(&'static str, u64)>,
    /// The server's basic-auth checks since start, as of this sample;
    /// `None` until basic auth checked a request.
    pub web_auth: Option<WebAuth>,
}

/// Basic-auth checks since start, by outcome, and the bcrypt verifications
/// they took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WebAuth {
    /// Right credentials (cached or verified).
    pub allowed: u64,
    /// Wrong or missing credentials: 401.
    pub denied: u64,
    /// Not checked: the source's share of the bcrypt queue, or the queue,
    /// was full (503).
    pub refused: u64,
    pub verifications: u64,
}

impl Snapshot {
    pub fn source(&self, name: &str) -> Option<&SourceStatus> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// The sample's time for measuring intervals: [`Self::monotonic`], or,
    /// for a snapshot made without a sampler (tests, fixtures), `taken_at`
    /// as time since the epoch.
    pub fn clock(&self) -> Option<Duration> {
        self.monotonic.or_else(|| {
            self.taken_at
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        })
    }

    /// How long ago the sample started: on the monotonic clock when it has
    /// a monotonic time, else on the wall clock (zero when that stepped
    /// back); `None` without either.
    pub fn age(&self) -> Option<Duration> {
        self.age_at(monotonic_now())
    }

    /// [`Self::age`] at `now` on the monotonic clock.
    pub fn age_at(&self, now: Duration) -> Option<Duration> {
        match self.monotonic {
            Some(m) => Some(now.saturating_sub(m)),
            None => self.taken_at.map(|t| t.elapsed().unwrap_or(Duration::ZERO)),
        }
    }

    /// Seconds since the epoch of `taken_at`, 0 when unknown.
    pub fn timestamp_seconds(&self) -> f64 {
        self.taken_at
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    }
}

/// Time on the monotonic clock: since a fixed instant taken once per
/// process, so that every sampler in the process measures on one scale.
pub fn monotonic_now() -> Duration {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed()
}

/// How one source fared in one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceStatus {
    /// The collector name (`rdma`, `netdev`, ...), the `collector` label.
    pub name: &'static str,
    pub state: SourceState,
    pub duration: Duration,
    /// Read errors in this sample (files, requests) that did not stop the
    /// source: the values concerned are absent, the rest was exported.
    pub errors: Vec<HostError>,
    /// Read errors since the exporter started, of every kind.
    pub errors_total: u64,
    /// Read errors since the exporter started by kind, in
    /// [`ErrorKind::ALL`]'s order (`roce_collector_errors_total`).
    pub errors_by_kind: [u64; ErrorKind::ALL.len()],
    /// What the sample asked of the kernel, for the sources that count it.
    pub kernel_requests: Option<KernelRequests>,
}

/// Requests one sample of a source made to the kernel: the cost it puts on
/// the host beside its own CPU time (on mlx5 each `counters/` read and each
/// netlink statistics request is a firmware command).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelRequests {
    /// `pread`s of sysfs attribute files (failed ones included).
    pub file_reads: u64,
    /// Netlink requests (RDMA statistics, ethtool pause, DCB).
    pub netlink: u64,
    /// `SIOCETHTOOL` ioctls.
    pub ioctls: u64,
}

/// The outcome of a source in one sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceState {
    /// Read everything it looked for (`errors` may still list single files).
    Ok,
    /// Nothing to read on this host (no RDMA device, no GPU, no NVML): not a
    /// failure, and said once, not per sample.
    Unavailable(String),
    /// Turned off by configuration or because the paths are not the running
    /// kernel's.
    Disabled(String),
    /// Could not run at all this sample.
    Failed(String),
}

impl SourceState {
    /// `roce_collector_success`: 0 only when the source failed.
    pub fn success(&self) -> bool {
        !matches!(self, SourceState::Failed(_))
    }

    pub fn label(&self) -> &'static str {
        match self {
            SourceState::Ok => "ok",
            SourceState::Unavailable(_) => "unavailable",
            SourceState::Disabled(_) => "disabled",
            SourceState::Failed(_) => "failed",
        }
    }

    pub fn detail(&self) -> Option<&str> {
        match self {
            SourceState::Ok => None,
            SourceState::Unavailable(s) | SourceState::Disabled(s) | SourceState::Failed(s) => {
                Some(s)
            }
        }
    }
}
