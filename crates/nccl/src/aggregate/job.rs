//! What jobs asked NCCL for and what NCCL found, over the window: the
//! settings they gave it (only those the rules judge), the nets that found
//! no device and the plugins that failed, the RDMA ports in NCCL's device
//! tables, the GID each RoCE queue pair used, the GPUs of the
//! communicators, and the nccl-tests runs read. Each map is capped; the
//! oldest entry gives way.

use std::collections::HashMap;
use std::time::Instant;

use super::bounded::insert_capped;
use super::resolve::label_safe;
use crate::log::{NcclLinkLayer, PluginEvent, QueuePair};
use crate::nccl_tests::TestsRun;

/// The settings kept: those the rules and `check` judge. Others are not
/// held (a hostile log cannot push these out with invented names).
pub const JUDGED_SETTINGS: &[&str] = &[
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_TC",
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_DMABUF_ENABLE",
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_MERGE_NICS",
    "NCCL_CROSS_NIC",
];

/// A setting a job gave NCCL, as NCCL's log reported it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Setting {
    pub name: String,
    pub value: String,
}

/// What NCCL said about its nets before choosing one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetNote {
    /// `NET/<net> : No device found.`
    NoDevice { net: String },
    /// A net plugin loaded (`Loaded net plugin <name>`).
    PluginLoaded { name: String },
    /// A plugin library could not be loaded, with NCCL's words.
    PluginLoadFailed { detail: String },
    /// `Failed to initialize NET plugin <name>`.
    PluginInitFailed { name: String },
}

/// An RDMA port in an NCCL device table (`NET/IB : Using [0]mlx5_0:1/RoCE`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeenIbPort {
    pub net: String,
    pub device: String,
    pub port: u16,
    pub link: NcclLinkLayer,
}

/// The GID a RoCE queue pair used on one port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GidUse {
    /// The RDMA device (`unknown` when NCCL's device table was not read).
    pub device: String,
    pub port: u16,
    pub gid_index: i64,
    /// The GID's 16 bytes, network order.
    pub gid: [u8; 16],
    /// `enum ibv_mtu` of the queue pair (5 = 4096).
    pub mtu: u8,
}

/// One nccl-tests run read from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct TestsSeen {
    /// The file's name (label-safe), and the run's place in it.
    pub file: String,
    pub index: u32,
    pub run: TestsRun,
}

/// The job-side summary over the window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobSummary {
    pub settings: Vec<Setting>,
    pub net_notes: Vec<NetNote>,
    pub ib_ports: Vec<SeenIbPort>,
    pub gids: Vec<GidUse>,
    /// PCI addresses of the communicators' GPUs (`0000:18:00.0`).
    pub gpus: Vec<String>,
    /// The most ranks of a communicator seen.
    pub max_ranks: u32,
    /// nccl-tests runs, the most recently read last.
    pub tests: Vec<TestsSeen>,
}

impl JobSummary {
    /// The last value seen of a setting (`None`: the logs never showed it).
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.as_str())
    }

    pub fn has_data(&self) -> bool {
        !self.settings.is_empty()
            || !self.net_notes.is_empty()
            || !self.ib_ports.is_empty()
            || !self.tests.is_empty()
    }
}

/// The state behind [`JobSummary`].
#[derive(Debug, Default)]
pub(super) struct JobState {
    settings: HashMap<Setting, Instant>,
    notes: HashMap<NetNote, Instant>,
    ib_ports: HashMap<SeenIbPort, Instant>,
    gids: HashMap<GidUse, Instant>,
    gpus: HashMap<String, Instant>,
    max_ranks: u32,
    /// (file, run in the file) -> the run and when it last changed.
    tests: HashMap<(String, u32), (TestsRun, Instant)>,
}

/// Runs of nccl-tests kept.
pub const MAX_TESTS_RUNS: usize = 32;

impl JobState {
    pub(super) fn setting(&mut self, name: &str, value: &str, now: Instant) {
        if !JUDGED_SETTINGS.contains(&name) {
            return;
        }
        // One value per name: the latest job's.
        self.settings.retain(|k, _| k.name != name);
        let key = Setting {
            name: name.to_string(),
            value: text_safe(value),
        };
        insert_capped(&mut self.settings, key, now, JUDGED_SETTINGS.len());
    }

    pub(super) fn plugin(&mut self, e: &PluginEvent, now: Instant) {
        let note = match e {
            PluginEvent::Loaded { name } => NetNote::PluginLoaded {
                name: label_safe(name),
            },
            PluginEvent::LoadFailed { detail } => NetNote::PluginLoadFailed {
                detail: detail.chars().take(crate::log::MAX_SETTING_VALUE).collect(),
            },
            PluginEvent::InitFailed { name } => NetNote::PluginInitFailed {
                name: label_safe(name),
            },
            PluginEvent::Internal => return,
        };
        insert_capped(&mut self.notes, note, now, 32);
    }

    pub(super) fn no_device(&mut self, net: &str, now: Instant) {
        let note = NetNote::NoDevice {
            net: label_safe(net),
        };
        insert_capped(&mut self.notes, note, now, 32);
    }

    pub(super) fn ib_port(
        &mut self,
        net: &str,
        device: &str,
        port: u16,
        link: NcclLinkLayer,
        now: Instant,
    ) {
        let key = SeenIbPort {
            net: label_safe(net),
            device: label_safe(device),
            port,
            link,
        };
        insert_capped(&mut self.ib_ports, key, now, 256);
    }

    pub(super) fn queue_pair(&mut self, device: &str, port: u16, qp: &QueuePair, now: Instant) {
        let key = GidUse {
            device: label_safe(device),
            port,
            gid_index: qp.gid_index,
            gid: qp.gid,
            mtu: qp.mtu,
        };
        insert_capped(&mut self.gids, key, now, 256);
    }

    pub(super) fn comm(&mut self, nranks: u32, bus_id: &str, now: Instant) {
        self.max_ranks = self.max_ranks.max(nranks);
        insert_capped(&mut self.gpus, label_safe(bus_id), now, 64);
    }

    pub(super) fn tests_run(&mut self, file: &str, index: u32, run: &TestsRun, now: Instant) {
        let key = (label_safe(file.rsplit('/').next().unwrap_or(file)), index);
        if !self.tests.contains_key(&key) && self.tests.len() >= MAX_TESTS_RUNS {
            if let Some(oldest) = self
                .tests
                .iter()
                .min_by_key(|(_, v)| v.1)
                .map(|(k, _)| k.clone())
            {
                self.tests.remove(&oldest);
            }
        }
        self.tests.insert(key, (run.clone(), now));
    }

    /// Drops what is older than the window and returns the summary.
    pub(super) fn summary(&mut self, fresh: impl Fn(Instant) -> bool) -> JobSummary {
        self.settings.retain(|_, t| fresh(*t));
        self.notes.retain(|_, t| fresh(*t));
        self.ib_ports.retain(|_, t| fresh(*t));
        self.gids.retain(|_, t| fresh(*t));
        self.gpus.retain(|_, t| fresh(*t));
        self.tests.retain(|_, v| fresh(v.1));
        if self.gpus.is_empty() {
            self.max_ranks = 0;
        }
        let mut tests: Vec<_> = self.tests.iter().collect();
        tests.sort_by_key(|(k, v)| (v.1, (*k).clone()));
        JobSummary {
            settings: sorted_keys(&self.settings),
            net_notes: sorted_keys(&self.notes),
            ib_ports: sorted_keys(&self.ib_ports),
            gids: sorted_keys(&self.gids),
            gpus: sorted_keys(&self.gpus),
            max_ranks: self.max_ranks,
            tests: tests
                .into_iter()
                .map(|((file, index), (run, _))| TestsSeen {
                    file: file.clone(),
                    index: *index,
                    run: run.clone(),
                })
                .collect(),
        }
    }
}

fn sorted_keys<K: Clone + Ord, V>(map: &HashMap<K, V>) -> Vec<K> {
    let mut v: Vec<K> = map.keys().cloned().collect();
    v.sort();
    v
}

/// A setting's value for texts: printable ASCII (NCCL_IB_HCA's `^`, `=`,
/// `,` and `:` kept), at most [`crate::log::MAX_SETTING_VALUE`]
/// characters; anything else becomes `_`.
fn text_safe(s: &str) -> String {
    s.chars()
        .take(crate::log::MAX_SETTING_VALUE)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
