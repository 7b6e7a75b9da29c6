//! Folds parsed NCCL log lines and Inspector records into what a node
//! exporter can show: per NIC, the transports and GPUDirect RDMA states NCCL
//! used in the last window; the NCCL versions seen; the GDR decisions that
//! explain a missing GDRDMA; and the bus bandwidth of large multi-node
//! collectives.
//!
//! Everything is bounded: processes, NIC/transport keys, versions, notes and
//! bandwidth samples each have a cap, and label values are cut to a safe
//! length and character set. Job identity (pid) is kept only when the
//! operator opts in ([`AggregatorConfig::job_labels`]).
//!
//! The device tables (which RDMA port or interface each of a process's net
//! device indexes is) are the state a hostile log could grow: they are kept
//! per source file and writer, so that the file's rotation, truncation or
//! deletion frees them; capped per process ([`MAX_NETS_PER_PROCESS`] nets,
//! [`MAX_DEVICES_PER_NET`] indexes per net, [`MAX_SOCKETS_PER_PROCESS`]
//! interfaces, [`MAX_MEMBERS_PER_DEVICE`] ports per merged device) and in
//! all ([`AggregatorConfig::max_device_entries`]); a process not heard from
//! for [`AggregatorConfig::process_expiry`] is dropped. What a cap refused
//! is counted in [`Dropped`].
//!
//! A log line carries no time of its own (NCCL's timestamps are off by
//! default), so "seen" means "read by the tailer" at the `now` given.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::inspector::{CollRecord, PromSample};
use crate::log::{Event, IbPort, Line, NcclLinkLayer, NetDevice, Via};

mod bounded;
mod job;
mod processes;
mod resolve;

pub use job::{
    GidUse, JobSummary, NetNote, SeenIbPort, Setting, TestsSeen, JUDGED_SETTINGS, MAX_TESTS_RUNS,
};

use bounded::{bump, evict_oldest, insert_capped};
use processes::Process;
pub use resolve::label_safe;
use resolve::{resolve, transport_of};

#[derive(Debug, Clone)]
pub struct AggregatorConfig {
    /// How long something seen stays in the summary.
    pub window: Duration,
    /// Collectives below this size are not bandwidth samples (small ones
    /// are latency-bound and say nothing about the fabric).
    pub busbw_min_bytes: u64,
    /// Keep the pid of the process that made a connection as a label.
    pub job_labels: bool,
    pub max_processes: usize,
    /// Device-table entries (net devices and socket interfaces) of all
    /// processes together; beyond, the least recently heard process goes.
    pub max_device_entries: usize,
    /// A process whose file has said nothing for this long is dropped.
    pub process_expiry: Duration,
    pub max_keys: usize,
    pub max_samples: usize,
}

/// Nets a process can name (NCCL loads one net plugin and NET/Socket; a
/// plugin such as nccl-rdma-sharp adds its `IBext` name and CollNet).
pub const MAX_NETS_PER_PROCESS: usize = 8;
/// Device indexes kept per net: NCCL's IB transport opens at most 32
/// devices (`MAX_IB_DEVS`), merged (virtual) devices add as many again.
pub const MAX_DEVICES_PER_NET: usize = 64;
/// Interfaces of NET/Socket per process (NCCL's `MAX_IFS` is 16).
pub const MAX_SOCKETS_PER_PROCESS: usize = 32;
/// Ports of one merged device (NCCL merges at most 4 per virtual NIC).
pub const MAX_MEMBERS_PER_DEVICE: usize = 8;

/// The default size floor: 256 MiB, where nccl-tests' bus bandwidth on a
/// multi-node ring or tree has reached its plateau.
pub const DEFAULT_BUSBW_MIN_BYTES: u64 = 256 << 20;

impl Default for AggregatorConfig {
    fn default() -> Self {
        AggregatorConfig {
            window: Duration::from_secs(900),
            busbw_min_bytes: DEFAULT_BUSBW_MIN_BYTES,
            job_labels: false,
            max_processes: 1024,
            max_device_entries: 16_384,
            process_expiry: Duration::from_secs(3600),
            max_keys: 512,
            max_samples: 4096,
        }
    }
}

/// The transport class of a NET connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// Verbs over an InfiniBand port.
    Ib,
    /// Verbs over an Ethernet port (NCCL selects RoCE v2 GIDs by default).
    Roce,
    /// TCP sockets: NET/Socket.
    Socket,
    /// Another net plugin (libfabric, TCPX, ...), or verbs on a device
    /// whose link layer NCCL did not print.
    Other,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Ib => "ib",
            Transport::Roce => "roce",
            Transport::Socket => "socket",
            Transport::Other => "other",
        }
    }
}

/// The key of one row of [`NcclSummary::connections`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnKey {
    /// RDMA device (`mlx5_0`; merged devices joined with `+`), socket
    /// interface (`eth0`), or `unknown` when the device table was not seen.
    pub device: String,
    /// RDMA port; 0 for sockets and unknown devices.
    pub port: u16,
    /// NCCL's net name (`IB`, `Socket`, `IBext_v8`, `AWS Libfabric`).
    pub net: String,
    pub transport: Transport,
    pub gdr: bool,
    /// The process id, when job labels are on.
    pub pid: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConnRow {
    pub key: ConnKey,
    /// Connection lines in the window.
    pub lines: u64,
}

/// Why GPUDirect RDMA was not used, as NCCL logged it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GdrNote {
    /// `GPU Direct RDMA Disabled for HCA n 'name'`: the NIC or driver
    /// (nvidia-peermem, DMA-BUF) cannot.
    HcaUnsupported { net: String, hca: String },
    /// `GPU Direct RDMA Disabled for GPU g / HCA h (distance d > t)`: the
    /// GPU-NIC path is longer than NCCL_NET_GDR_LEVEL allows.
    PathTooFar {
        gpu: String,
        hca: String,
        distance: Option<u32>,
        threshold: Option<u32>,
    },
}

/// Bandwidth of large multi-node collectives of one kind in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct BusBw {
    pub collective: String,
    pub samples: u64,
    pub min_gbs: f64,
    pub mean_gbs: f64,
    pub max_gbs: f64,
    pub largest_nnodes: u32,
}

/// What the aggregator knows now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NcclSummary {
    pub connections: Vec<ConnRow>,
    pub versions: Vec<String>,
    pub networks: Vec<String>,
    pub gdr_notes: Vec<GdrNote>,
    pub busbw: Vec<BusBw>,
    /// Log lines and Inspector records read in the window (any kind).
    pub log_lines: u64,
    pub inspector_records: u64,
    /// Processes whose device tables are held now.
    pub processes: usize,
    /// Bytes of device-table state held now (an estimate from the sizes of
    /// what is stored).
    pub state_bytes: usize,
    /// What the caps refused since start.
    pub dropped: Dropped,
    /// What jobs asked NCCL for and what it found (settings, nets without
    /// devices, plugins, GIDs, GPUs, nccl-tests runs).
    pub job: JobSummary,
}

/// Entries refused or evicted by a cap, since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Processes evicted to make room (process or device-entry cap).
    pub processes: u64,
    /// Nets beyond [`MAX_NETS_PER_PROCESS`].
    pub nets: u64,
    /// Device indexes beyond [`MAX_DEVICES_PER_NET`], and merged-device
    /// ports beyond [`MAX_MEMBERS_PER_DEVICE`].
    pub devices: u64,
    /// Interfaces beyond [`MAX_SOCKETS_PER_PROCESS`].
    pub sockets: u64,
}

impl NcclSummary {
    pub fn has_data(&self) -> bool {
        !self.connections.is_empty()
            || !self.versions.is_empty()
            || !self.busbw.is_empty()
            || !self.networks.is_empty()
            || self.job.has_data()
    }
}

/// A process writing to a file: the file, and the line prefix's
/// `host:pid` (empty when lines carry no prefix).
type ProcessKey = (String, String);

#[derive(Debug)]
struct Sample {
    at: Instant,
    collective: String,
    busbw_gbs: f64,
    nnodes: u32,
}

pub struct Aggregator {
    cfg: AggregatorConfig,
    processes: HashMap<ProcessKey, Process>,
    /// Device-table entries of all processes.
    device_entries: usize,
    dropped: Dropped,
    conns: HashMap<ConnKey, (u64, Instant)>,
    versions: HashMap<String, Instant>,
    networks: HashMap<String, Instant>,
    notes: HashMap<GdrNote, Instant>,
    samples: VecDeque<Sample>,
    /// (comm, rank, sn) of Prometheus-mode samples already counted: a
    /// rewritten file repeats the last collective of an idle communicator.
    prom_seen: VecDeque<(String, i64, u64)>,
    lines: VecDeque<(Instant, u64)>,
    records: VecDeque<(Instant, u64)>,
    job: job::JobState,
}

/// The collective names NCCL has (`ncclFuncToString`); others are `other`,
/// so the label set stays bounded.
const COLLECTIVES: &[&str] = &[
    "AllReduce",
    "AllGather",
    "ReduceScatter",
    "Broadcast",
    "Reduce",
    "AllToAll",
];

impl Aggregator {
    pub fn new(cfg: AggregatorConfig) -> Self {
        Aggregator {
            cfg,
            processes: HashMap::new(),
            device_entries: 0,
            dropped: Dropped::default(),
            conns: HashMap::new(),
            versions: HashMap::new(),
            networks: HashMap::new(),
            notes: HashMap::new(),
            samples: VecDeque::new(),
            prom_seen: VecDeque::new(),
            lines: VecDeque::new(),
            records: VecDeque::new(),
            job: job::JobState::default(),
        }
    }

    pub fn config(&self) -> &AggregatorConfig {
        &self.cfg
    }

    /// Forgets the device tables learnt from `source` (a file that was
    /// rotated, truncated or deleted: its next lines belong to a new
    /// process).
    pub fn forget_source(&mut self, source: &str) {
        let mut freed = 0;
        self.processes.retain(|k, p| {
            let keep = k.0 != source;
            if !keep {
                freed += p.entries();
            }
            keep
        });
        self.device_entries -= freed;
    }

    /// One log line. `source` identifies the writer when the line has no
    /// prefix (the file name).
    pub fn log_line(&mut self, source: &str, line: &Line<'_>, now: Instant) {
        bump(&mut self.lines, now);
        let (proc_key, pid) = match &line.prefix {
            Some(p) => (
                (
                    source.to_string(),
                    format!("{}:{}", label_safe(p.host), p.pid),
                ),
                Some(p.pid),
            ),
            None => ((source.to_string(), String::new()), None),
        };
        match &line.event {
            Event::Other => {}
            Event::Version { version, .. } => {
                insert_capped(&mut self.versions, label_safe(version), now, 16);
            }
            Event::Network { name } => {
                insert_capped(&mut self.networks, label_safe(name), now, 16);
            }
            Event::IbDevices { net, devices } => {
                let net = label_safe(net);
                let Some(p) = self.process(&proc_key, now) else {
                    return;
                };
                let mut added = 0;
                let mut refused = Dropped::default();
                if !p.nets.contains_key(&net) && p.nets.len() >= MAX_NETS_PER_PROCESS {
                    refused.nets += 1;
                } else {
                    let table = p.nets.entry(net.clone()).or_default();
                    for d in devices {
                        if !table.contains_key(&d.index) && table.len() >= MAX_DEVICES_PER_NET {
                            refused.devices += 1;
                            continue;
                        }
                        if d.members.len() > MAX_MEMBERS_PER_DEVICE {
                            refused.devices += 1;
                        }
                        let members = d
                            .members
                            .iter()
                            .take(MAX_MEMBERS_PER_DEVICE)
                            .map(|m| IbPort {
                                device: label_safe(&m.device),
                                port: m.port,
                                link: m.link,
                            })
                            .collect();
                        let entry = NetDevice {
                            index: d.index,
                            members,
                        };
                        if table.insert(d.index, entry).is_none() {
                            added += 1;
                        }
                    }
                }
                self.dropped.add(refused);
                self.device_entries += added;
                self.keep_entries_capped(&proc_key);
                for d in devices {
                    for m in d.members.iter().take(MAX_MEMBERS_PER_DEVICE) {
                        self.job.ib_port(&net, &m.device, m.port, m.link, now);
                    }
                }
            }
            Event::SocketDevices { ifaces } => {
                let Some(p) = self.process(&proc_key, now) else {
                    return;
                };
                let mut added = 0;
                let mut refused = Dropped::default();
                for i in ifaces {
                    if !p.sockets.contains_key(&i.index)
                        && p.sockets.len() >= MAX_SOCKETS_PER_PROCESS
                    {
                        refused.sockets += 1;
                        continue;
                    }
                    if p.sockets.insert(i.index, label_safe(&i.name)).is_none() {
                        added += 1;
                    }
                }
                self.dropped.add(refused);
                self.device_entries += added;
                self.keep_entries_capped(&proc_key);
            }
            Event::Connection {
                via: Via::Net { net, dev, gdr, .. },
                ..
            } => {
                let net = label_safe(net);
                let (device, port, transport) = match self.process(&proc_key, now) {
                    Some(p) => resolve(p, &net, *dev),
                    None => ("unknown".to_string(), 0, transport_of(&net, None)),
                };
                let key = ConnKey {
                    device,
                    port,
                    net,
                    transport,
                    gdr: *gdr,
                    pid: if self.cfg.job_labels { pid } else { None },
                };
                if self.conns.len() >= self.cfg.max_keys && !self.conns.contains_key(&key) {
                    evict_oldest(&mut self.conns, |v| v.1);
                }
                let e = self.conns.entry(key).or_insert((0, now));
                e.0 += 1;
                e.1 = now;
            }
            Event::Connection { .. } => {}
            Event::GdrHcaSupport {
                net,
                hca_name,
                enabled,
                ..
            } => {
                if !enabled {
                    let note = GdrNote::HcaUnsupported {
                        net: label_safe(net),
                        hca: label_safe(hca_name),
                    };
                    insert_capped(&mut self.notes, note, now, 64);
                }
            }
            Event::Env { name, value } => self.job.setting(name, value, now),
            Event::NetNoDevice { net } => self.job.no_device(net, now),
            Event::NetPlugin(e) => self.job.plugin(e, now),
            Event::CommInit { nranks, bus_id, .. } => self.job.comm(*nranks, bus_id, now),
            Event::QueuePair(qp) => {
                let net = label_safe(&qp.net);
                let (device, port) = match self.process(&proc_key, now) {
                    Some(p) => {
                        let (d, p, _) = resolve(p, &net, qp.ib_dev);
                        (d, p)
                    }
                    None => ("unknown".to_string(), 0),
                };
                // The QP line names the port itself.
                let port = if port == 0 { qp.port } else { port };
                self.job.queue_pair(&device, port, qp, now);
            }
            Event::GdrPath {
                enabled,
                gpu,
                hca,
                distance,
                threshold,
            } => {
                if !enabled {
                    let note = GdrNote::PathTooFar {
                        gpu: label_safe(gpu),
                        hca: label_safe(hca),
                        distance: *distance,
                        threshold: *threshold,
                    };
                    insert_capped(&mut self.notes, note, now, 64);
                }
            }
        }
    }

    /// The state of an nccl-tests run read from `file` (its `index`th in
    /// the file), replacing what was held for it.
    pub fn tests_run(
        &mut self,
        file: &str,
        index: u32,
        run: &crate::nccl_tests::TestsRun,
        now: Instant,
    ) {
        self.job.tests_run(file, index, run, now);
    }

    /// One Inspector JSON record.
    pub fn inspector_record(&mut self, rec: &CollRecord, now: Instant) {
        bump(&mut self.records, now);
        self.sample(
            &rec.coll,
            rec.msg_size_bytes,
            rec.nnodes,
            rec.busbw_gbs,
            now,
        );
    }

    /// One Inspector Prometheus-mode sample (only `nccl_bus_bandwidth_gbs`
    /// is used).
    pub fn prom_sample(&mut self, s: &PromSample, now: Instant) {
        if s.metric != "nccl_bus_bandwidth_gbs" {
            return;
        }
        bump(&mut self.records, now);
        if let (Some(sn), Some(rank)) = (s.coll_sn, s.rank) {
            let key = (s.comm_id.clone(), rank, sn);
            if self.prom_seen.contains(&key) {
                return;
            }
            if self.prom_seen.len() >= 1024 {
                self.prom_seen.pop_front();
            }
            self.prom_seen.push_back(key);
        }
        let (Some(size), Some(nnodes)) = (s.msg_size_bytes, s.n_nodes) else {
            return;
        };
        self.sample(&s.collective, size, nnodes, s.value, now);
    }

    fn sample(&mut self, coll: &str, size: u64, nnodes: u32, busbw_gbs: f64, now: Instant) {
        if nnodes < 2
            || size < self.cfg.busbw_min_bytes
            || !busbw_gbs.is_finite()
            || busbw_gbs < 0.0
        {
            return;
        }
        let collective = COLLECTIVES
            .iter()
            .find(|c| **c == coll)
            .map_or("other", |c| c)
            .to_string();
        if self.samples.len() >= self.cfg.max_samples {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            at: now,
            collective,
            busbw_gbs,
            nnodes,
        });
    }

    /// Drops what is older than the window and returns the summary.
    pub fn summary(&mut self, now: Instant) -> NcclSummary {
        let window = self.cfg.window;
        let fresh = |t: Instant| now.saturating_duration_since(t) <= window;
        self.conns.retain(|_, v| fresh(v.1));
        self.versions.retain(|_, t| fresh(*t));
        self.networks.retain(|_, t| fresh(*t));
        self.notes.retain(|_, t| fresh(*t));
        // Device tables are logged once, at init: they outlive the window
        // (a long job's later communicators refer to them) and go when the
        // process has been silent for `process_expiry`, or with its file.
        let expiry = self.cfg.process_expiry;
        let mut freed = 0;
        self.processes.retain(|_, p| {
            let keep = now.saturating_duration_since(p.last_seen) <= expiry;
            if !keep {
                freed += p.entries();
            }
            keep
        });
        self.device_entries -= freed;
        while self.samples.front().is_some_and(|s| !fresh(s.at)) {
            self.samples.pop_front();
        }
        while self.lines.front().is_some_and(|s| !fresh(s.0)) {
            self.lines.pop_front();
        }
        while self.records.front().is_some_and(|s| !fresh(s.0)) {
            self.records.pop_front();
        }
        let mut connections: Vec<ConnRow> = self
            .conns
            .iter()
            .map(|(k, v)| ConnRow {
                key: k.clone(),
                lines: v.0,
            })
            .collect();
        connections.sort_by(|a, b| a.key.cmp(&b.key));
        let mut versions: Vec<String> = self.versions.keys().cloned().collect();
        versions.sort();
        let mut networks: Vec<String> = self.networks.keys().cloned().collect();
        networks.sort();
        let mut gdr_notes: Vec<GdrNote> = self.notes.keys().cloned().collect();
        gdr_notes.sort();
        let mut by_coll: BTreeMap<&str, BusBw> = BTreeMap::new();
        for s in &self.samples {
            let e = by_coll.entry(&s.collective).or_insert_with(|| BusBw {
                collective: s.collective.clone(),
                samples: 0,
                min_gbs: f64::INFINITY,
                mean_gbs: 0.0,
                max_gbs: 0.0,
                largest_nnodes: 0,
            });
            e.samples += 1;
            e.min_gbs = e.min_gbs.min(s.busbw_gbs);
            e.max_gbs = e.max_gbs.max(s.busbw_gbs);
            e.mean_gbs += (s.busbw_gbs - e.mean_gbs) / e.samples as f64;
            e.largest_nnodes = e.largest_nnodes.max(s.nnodes);
        }
        NcclSummary {
            connections,
            versions,
            networks,
            gdr_notes,
            busbw: by_coll.into_values().collect(),
            log_lines: self.lines.iter().map(|l| l.1).sum(),
            inspector_records: self.records.iter().map(|l| l.1).sum(),
            processes: self.processes.len(),
            state_bytes: self.state_bytes(),
            dropped: self.dropped,
            job: self.job.summary(fresh),
        }
    }
}
