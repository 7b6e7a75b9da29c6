//! The probe source: chooses the probe targets from the RDMA source's part
//! (handed over by the sampler): every active port, with the configured GID
//! index or, for `auto`, the RoCE v2 GID NCCL would pick, and the traffic
//! class of the port's RoCE DSCP (from the netdev part of the previous
//! sample). It copies the probe thread's
//! latest results into the snapshot. The rounds themselves run on the
//! probe's own thread (`roce_probe::runner`), so a sample never waits on a
//! device; a new configuration replaces the source and with it the thread.

use std::collections::BTreeMap;

use roce_probe::runner::Runner;
use roce_probe::{ProbeState, ProbeTarget};
use roce_rdma::{LinkLayer, Port, RdmaSnapshot};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::{Config, GidIndex};
use crate::host::HostPaths;
use crate::snapshot::{Snapshot, SourceState};

/// Why the probe thread is not running; the source says so as disabled.
#[derive(Debug, thiserror::Error)]
pub enum NotRunning {
    #[error("probes are off (probes.enabled, or --path.sysfs is not this host's /sys)")]
    Off,
    #[error("built without verbs probes (feature `probes`)")]
    NoVerbs,
    #[error("cannot start the probe thread: {0}")]
    Thread(std::io::Error),
}

pub struct ProbeSource {
    runner: Result<Runner, NotRunning>,
    chooser: TargetChooser,
    /// `expect.nccl_ib_tc`: with the netdev's configuration, the traffic
    /// class rounds carry (the RoCE priority, not priority 0).
    nccl_ib_tc: Option<u8>,
    /// Targets given to the runner last (kept when no RDMA part is handed
    /// over; when the RDMA source fails, the sampler hands over its last
    /// part, so a transient read failure neither frees the probe's
    /// resources nor resets its counters).
    targets: Vec<ProbeTarget>,
    /// Last failure reason logged per target (`None`: healthy), to log
    /// changes, not rounds.
    logged: BTreeMap<ProbeTarget, Option<&'static str>>,
}

impl ProbeSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let runner = if !config.probes.enabled.enabled(paths.is_live()) {
            Err(NotRunning::Off)
        } else {
            spawn(config)
        };
        ProbeSource {
            runner,
            chooser: TargetChooser::new(config.probes.gid_index),
            nccl_ib_tc: config.expect.nccl_ib_tc,
            targets: Vec::new(),
            logged: BTreeMap::new(),
        }
    }
}

/// Chooses what to probe from the RDMA source's reading: every active
/// port, with the configured GID index or the `auto` choice. A port keeps
/// its target when it goes down (the probe then reports `port_down`
/// instead of falling silent) and loses it when it disappears.
#[derive(Debug, Clone)]
pub struct TargetChooser {
    gid_index: GidIndex,
    /// GID index chosen per (device, port) while the port was active.
    chosen: BTreeMap<(String, u8), u32>,
}

impl TargetChooser {
    pub fn new(gid_index: GidIndex) -> Self {
        TargetChooser {
            gid_index,
            chosen: BTreeMap::new(),
        }
    }

    pub fn choose(&mut self, rdma: &RdmaSnapshot) -> Vec<ProbeTarget> {
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for dev in &rdma.devices {
            for port in &dev.ports {
                let Ok(number) = u8::try_from(port.number) else {
                    continue;
                };
                let key = (dev.name.clone(), number);
                if port.is_up() {
                    let gid = match self.gid_index {
                        GidIndex::Index(i) => Some(i),
                        GidIndex::Auto => auto_gid(port),
                    };
                    if let Some(g) = gid {
                        self.chosen.insert(key.clone(), g);
                    }
                }
                if let Some(g) = self.chosen.get(&key) {
                    out.push(ProbeTarget::loopback(dev.name.clone(), number, *g));
                    seen.push(key);
                }
            }
        }
        self.chosen.retain(|k, _| seen.contains(k));
        out
    }
}

#[cfg(feature = "probes")]
fn spawn(config: &Config) -> Result<Runner, NotRunning> {
    Runner::spawn(
        roce_probe::ibverbs::IbVerbs::new(),
        config.probes.interval,
        roce_probe::engine::Settings::default(),
    )
    .map_err(NotRunning::Thread)
}

#[cfg(not(feature = "probes"))]
fn spawn(_config: &Config) -> Result<Runner, NotRunning> {
    Err(NotRunning::NoVerbs)
}

/// The GID a probe uses when `gid_index` is `auto`: on RoCE, the RoCE v2
/// GID NCCL would pick (IPv4-mapped first, then global IPv6), the same
/// choice as `check`'s NCCL_IB_GID_INDEX; on InfiniBand, index 0.
pub(crate) fn auto_gid(port: &Port) -> Option<u32> {
    match port.link_layer {
        Some(LinkLayer::Ethernet) => port.routable_roce_v2_gid().map(|g| g.index),
        Some(LinkLayer::InfiniBand) => Some(0),
        _ => None,
    }
}

impl Source for ProbeSource {
    fn name(&self) -> &'static str {
        "probe"
    }

    fn needs_rdma(&self) -> bool {
        true
    }

    fn disabled(&self) -> Option<String> {
        self.runner.as_ref().err().map(|why| why.to_string())
    }

    fn sample(&mut self, input: &Input, _errors: &mut Vec<HostError>) -> Sampled {
        let runner = match &self.runner {
            Ok(r) => r,
            Err(why) => return Sampled::bare(SourceState::Disabled(why.to_string())),
        };
        if let Some(rdma) = &input.rdma {
            // The RoCE DSCP comes from the netdev part, which is read in
            // the same phase as this source: the previous sample's is the
            // latest there is.
            let empty = Snapshot::default();
            let last = input.previous.as_deref().unwrap_or(&empty);
            let tc = self.nccl_ib_tc;
            self.targets = self
                .chooser
                .choose(rdma)
                .into_iter()
                .map(|t| {
                    let class = crate::rules::fabric::port_traffic_class(
                        last,
                        &t.device,
                        u32::from(t.port),
                        tc,
                    );
                    t.with_traffic_class(class)
                })
                .collect();
            runner.set_targets(self.targets.clone());
        }
        let results = runner.results();
        let state = match &results.state {
            ProbeState::Unavailable(why) => SourceState::Unavailable(why.clone()),
            _ if self.targets.is_empty() => {
                SourceState::Unavailable("no active RDMA port to probe".into())
            }
            _ => SourceState::Ok,
        };
        for (target, stats) in &results.targets {
            let now = stats.last_failure.as_ref().map(|f| f.reason.as_str());
            let before = self.logged.insert(target.clone(), now);
            if before == Some(now) {
                continue;
            }
            match &stats.last_failure {
                Some(f) => {
                    tracing::warn!(target_port = %target, reason = f.reason.as_str(), "probe failing: {}", f.message)
                }
                None => tracing::info!(target_port = %target, "probe succeeding"),
            }
        }
        self.logged
            .retain(|t, _| results.targets.iter().any(|(r, _)| r == t));
        Sampled::new(state, Part::Probes(results))
    }
}
