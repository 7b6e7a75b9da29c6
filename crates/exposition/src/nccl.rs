//! Families of the NCCL source: the transports and GPUDirect RDMA state per
//! NIC that NCCL jobs on this host used in the window, the versions and
//! networks they reported, the reasons NCCL gave for not using GPUDirect
//! RDMA, the bus bandwidth of large multi-node collectives, and the
//! source's own reading of its directories.
//!
//! Labels are bounded: NIC, net and transport come from the host's devices
//! and NCCL's names (each cut to 64 safe characters, at most 512 rows);
//! collective is one of NCCL's collective names or `other`; the process id
//! appears only in `roce_nccl_job_connections`, filled when `nccl.job_labels`
//! is on.

use super::labels::{label_set, NoLabels, PortLabels};
use super::{Fam, Family, FamilySamples, FamilyUnit, MetricKind, Row, Samples};
use crate::snapshot::Snapshot;

label_set! {
    /// NET connections of NCCL jobs on one NIC over one net and transport,
    /// with GPUDirect RDMA on or off.
    pub struct ConnectionLabels { device, port, net, transport, gdr }
}

label_set! {
    /// NET connections of one NCCL process on one NIC.
    pub struct JobConnectionLabels { device, port, transport, gdr, pid }
}

label_set! {
    /// An NCCL version.
    pub struct VersionLabels { version }
}

label_set! {
    /// An NCCL network (IB, Socket, a plugin).
    pub struct NetworkLabels { network }
}

label_set! {
    /// NCCL's reason for not using GPUDirect RDMA between a GPU and a NIC.
    pub struct GdrReasonLabels { reason, gpu, hca }
}

label_set! {
    /// A collective.
    pub struct CollectiveLabels { collective }
}

label_set! {
    /// One of the source's directories (logs, inspector).
    pub struct DirLabels { dir }
}

label_set! {
    /// Files of one directory skipped for one reason.
    pub struct DirReasonLabels { dir, reason }
}

label_set! {
    /// What a cap of the device table refused.
    pub struct WhatLabels { what }
}

const LOGS: &str = "NCCL debug logs in nccl.log_dir (NCCL_DEBUG=INFO, NCCL_DEBUG_FILE): channel connection lines (via NET/...), device tables (NET/IB : Using ...), GDR decisions; kept for nccl.window";
const INSPECTOR: &str = "NCCL Inspector output in nccl.inspector_dir (coll_perf records, or nccl_bus_bandwidth_gbs in its Prometheus mode) of collectives of at least nccl.busbw_min_bytes over 2 or more nodes, in nccl.window";
const SOURCE: &str = "NCCL source (nccl.log_dir, nccl.inspector_dir)";

pub const CONNECTIONS: Fam<ConnectionLabels> = Fam::new(Row {
    base: "roce_nccl_connections",
    kind: MetricKind::Gauge,
    unit: None,
    help: "NET channel connections NCCL set up in the window, by NIC (device and port; a socket interface with port 0 for NET/Socket; unknown when the device table was not seen), NCCL's net name (IB, Socket, a plugin's), transport (ib, roce, socket, other) and whether the connection used GPUDirect RDMA (gdr=on: via .../GDRDMA).",
    source: LOGS,
});
pub const JOB_CONNECTIONS: Fam<JobConnectionLabels> = Fam::new(Row {
    base: "roce_nccl_job_connections",
    kind: MetricKind::Gauge,
    unit: None,
    help: "As roce_nccl_connections, per NCCL process id; only with nccl.job_labels on (one series set per job).",
    source: LOGS,
});
pub const GDR: Fam<PortLabels> = Fam::new(Row {
    base: "roce_nccl_gdr_active",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when some NET connection NCCL set up on the NIC in the window used GPUDirect RDMA, 0 when connections on it were seen and none did (send-side connections without GDRDMA alone are NCCL's default on GPUs where it does not enable GDR reads).",
    source: LOGS,
});
pub const VERSION: Fam<VersionLabels> = Fam::new(Row {
    base: "roce_nccl_version_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "NCCL versions that logged on this host in the window (NCCL version line), value 1.",
    source: LOGS,
});
pub const NETWORK: Fam<NetworkLabels> = Fam::new(Row {
    base: "roce_nccl_network_info",
    kind: MetricKind::Gauge,
    unit: None,
    help:
        "Networks NCCL chose in the window (Using network IB, Socket or a plugin's name), value 1.",
    source: LOGS,
});
pub const GDR_REASON: Fam<GdrReasonLabels> = Fam::new(Row {
    base: "roce_nccl_gdr_disabled_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Why NCCL did not use GPUDirect RDMA, as it logged it in the window, value 1: reason=hca_unsupported (GPU Direct RDMA Disabled for HCA: no nvidia-peermem or DMA-BUF for that NIC; gpu empty) or path_too_far (Disabled for GPU / HCA (distance d > t): the GPU-NIC path is beyond NCCL_NET_GDR_LEVEL).",
    source: LOGS,
});
pub const BUSBW_MEAN: Fam<CollectiveLabels> = Fam::new(Row {
    base: "roce_nccl_busbw_mean",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::BytesPerSecond),
    help: "Mean bus bandwidth (NCCL busbw, GB/s times 1e9) of the large multi-node collectives this host took part in, per collective.",
    source: INSPECTOR,
});
pub const BUSBW_MIN: Fam<CollectiveLabels> = Fam::new(Row {
    base: "roce_nccl_busbw_min",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::BytesPerSecond),
    help: "Lowest bus bandwidth of those collectives, per collective.",
    source: INSPECTOR,
});
pub const BUSBW_SAMPLES: Fam<CollectiveLabels> = Fam::new(Row {
    base: "roce_nccl_busbw_samples",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Number of those collectives (samples behind the bus bandwidth figures), per collective.",
    source: INSPECTOR,
});
pub const FILES: Fam<DirLabels> = Fam::new(Row {
    base: "roce_nccl_files",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Files the NCCL source tracks now (dir=logs or inspector): written within nccl.idle_expiry, at most nccl.max_files each.",
    source: SOURCE,
});
pub const READ_BYTES: Fam<NoLabels> = Fam::new(Row {
    base: "roce_nccl_read",
    kind: MetricKind::Counter,
    unit: Some(FamilyUnit::Bytes),
    help: "Bytes the NCCL source read from its directories since the exporter started.",
    source: SOURCE,
});
pub const REJECTED: Fam<NoLabels> = Fam::new(Row {
    base: "roce_nccl_rejected",
    kind: MetricKind::Counter,
    unit: None,
    help: "Inspector objects that were not valid records and lines longer than the source keeps, since the exporter started.",
    source: SOURCE,
});
pub const LAST_READ: Fam<NoLabels> = Fam::new(Row {
    base: "roce_nccl_last_read_timestamp",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Unix time the NCCL source last read its directories (every nccl.interval).",
    source: SOURCE,
});

pub const FILES_SKIPPED: Fam<DirReasonLabels> = Fam::new(Row {
    base: "roce_nccl_files_skipped",
    kind: MetricKind::Counter,
    unit: None,
    help: "Files the NCCL source passed over since the exporter started, by reason: over_cap (written within nccl.idle_expiry but no free slot under nccl.max_files; counted each time the directory's listing meets one), unreadable (open or read failed; the file and errno are in the source's errors), too_large (a rewritten .prom file over 16 MiB), cut (a rewritten file changed again before it was read to its end).",
    source: SOURCE,
});
pub const BUDGET_EXHAUSTED: Fam<DirLabels> = Fam::new(Row {
    base: "roce_nccl_read_budget_exhausted",
    kind: MetricKind::Counter,
    unit: None,
    help: "Reads of a directory that ended on nccl.max_bytes_per_read with more to read; the next read goes on from there. Rising every read: the jobs write faster than the source reads.",
    source: SOURCE,
});
pub const PROCESSES: Fam<NoLabels> = Fam::new(Row {
    base: "roce_nccl_processes",
    kind: MetricKind::Gauge,
    unit: None,
    help: "NCCL processes whose device tables the source holds (per log file and writer; at most 1,024, dropped with their file or after an hour of silence).",
    source: LOGS,
});
pub const STATE_BYTES: Fam<NoLabels> = Fam::new(Row {
    base: "roce_nccl_state",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Bytes),
    help: "Bytes of device-table state the NCCL source holds (estimated from the sizes of what it stores; bounded by 16,384 entries in all).",
    source: LOGS,
});
pub const STATE_DROPPED: Fam<WhatLabels> = Fam::new(Row {
    base: "roce_nccl_state_dropped",
    kind: MetricKind::Counter,
    unit: None,
    help: "Device-table entries a cap refused or evicted since the exporter started: process (evicted, least recently heard first), net (over 8 per process), device (over 64 indexes per net or 8 ports per merged device), socket (over 32 interfaces per process). Non-zero on a healthy node means a log is not NCCL's or is hostile.",
    source: LOGS,
});

pub const FAMILIES: &[Family] = &[
    CONNECTIONS.family,
    JOB_CONNECTIONS.family,
    GDR.family,
    VERSION.family,
    NETWORK.family,
    GDR_REASON.family,
    BUSBW_MEAN.family,
    BUSBW_MIN.family,
    BUSBW_SAMPLES.family,
    FILES.family,
    READ_BYTES.family,
    REJECTED.family,
    LAST_READ.family,
    FILES_SKIPPED.family,
    BUDGET_EXHAUSTED.family,
    PROCESSES.family,
    STATE_BYTES.family,
    STATE_DROPPED.family,
];

pub fn collect(snapshot: &Snapshot, out: &mut Vec<FamilySamples>) {
    let Some(n) = &snapshot.nccl else {
        return;
    };
    let s = &n.summary;
    let mut conns = Samples::new(&CONNECTIONS);
    let mut jobs = Samples::new(&JOB_CONNECTIONS);
    let mut gdr = Samples::new(&GDR);
    // Rows differing only in pid are summed for the unlabelled family.
    let mut per_nic: std::collections::BTreeMap<(&str, u16, &str, &str, bool), u64> =
        std::collections::BTreeMap::new();
    let mut gdr_nic: std::collections::BTreeMap<(&str, u16), bool> =
        std::collections::BTreeMap::new();
    for row in &s.connections {
        let k = &row.key;
        *per_nic
            .entry((&k.device, k.port, &k.net, k.transport.as_str(), k.gdr))
            .or_default() += row.lines;
        if let Some(pid) = k.pid {
            let labels = JobConnectionLabels {
                device: &k.device,
                port: &k.port.to_string(),
                transport: k.transport.as_str(),
                gdr: on_off(k.gdr),
                pid: &pid.to_string(),
            };
            jobs.push(labels, row.lines);
        }
        if k.transport != roce_nccl::aggregate::Transport::Socket {
            let e = gdr_nic.entry((&k.device, k.port)).or_default();
            *e |= k.gdr;
        }
    }
    for ((device, port, net, transport, g), lines) in per_nic {
        let labels = ConnectionLabels {
            device,
            port: &port.to_string(),
            net,
            transport,
            gdr: on_off(g),
        };
        conns.push(labels, lines);
    }
    for ((device, port), on) in gdr_nic {
        let labels = PortLabels {
            device,
            port: &port.to_string(),
        };
        gdr.push(labels, on);
    }
    let mut version = Samples::new(&VERSION);
    for v in &s.versions {
        version.push(VersionLabels { version: v }, 1u64);
    }
    let mut network = Samples::new(&NETWORK);
    for v in &s.networks {
        network.push(NetworkLabels { network: v }, 1u64);
    }
    let mut reason = Samples::new(&GDR_REASON);
    for note in &s.gdr_notes {
        let labels = match note {
            roce_nccl::aggregate::GdrNote::HcaUnsupported { hca, .. } => GdrReasonLabels {
                reason: "hca_unsupported",
                gpu: "",
                hca,
            },
            roce_nccl::aggregate::GdrNote::PathTooFar { gpu, hca, .. } => GdrReasonLabels {
                reason: "path_too_far",
                gpu,
                hca,
            },
        };
        reason.push(labels, 1u64);
    }
    let mut mean = Samples::new(&BUSBW_MEAN);
    let mut min = Samples::new(&BUSBW_MIN);
    let mut samples = Samples::new(&BUSBW_SAMPLES);
    for b in &s.busbw {
        let labels = CollectiveLabels {
            collective: &b.collective,
        };
        mean.push(labels, b.mean_gbs * 1e9);
        min.push(labels, b.min_gbs * 1e9);
        samples.push(labels, b.samples);
    }
    let mut files = Samples::new(&FILES);
    if n.log_dir.is_some() {
        files.push(DirLabels { dir: "logs" }, n.log_files as u64);
    }
    if n.inspector_dir.is_some() {
        files.push(DirLabels { dir: "inspector" }, n.inspector_files as u64);
    }
    let mut skipped = Samples::new(&FILES_SKIPPED);
    let mut budget = Samples::new(&BUDGET_EXHAUSTED);
    for (dir, on, k) in [
        ("logs", n.log_dir.is_some(), &n.log_skipped),
        ("inspector", n.inspector_dir.is_some(), &n.inspector_skipped),
    ] {
        if !on {
            continue;
        }
        for (reason, n) in [
            ("over_cap", k.over_cap),
            ("unreadable", k.unreadable),
            ("too_large", k.too_large),
            ("cut", k.cut),
        ] {
            skipped.push(DirReasonLabels { dir, reason }, n);
        }
        budget.push(DirLabels { dir }, k.budget_exhausted);
    }
    let mut processes = Samples::new(&PROCESSES);
    let mut state = Samples::new(&STATE_BYTES);
    let mut dropped = Samples::new(&STATE_DROPPED);
    if n.log_dir.is_some() {
        processes.push(NoLabels, s.processes as u64);
        state.push(NoLabels, s.state_bytes as u64);
        let d = &s.dropped;
        for (what, n) in [
            ("process", d.processes),
            ("net", d.nets),
            ("device", d.devices),
            ("socket", d.sockets),
        ] {
            dropped.push(WhatLabels { what }, n);
        }
    }
    let mut read = Samples::new(&READ_BYTES);
    read.push(NoLabels, n.bytes_read_total);
    let mut rejected = Samples::new(&REJECTED);
    rejected.push(NoLabels, n.rejected_total);
    let mut last = Samples::new(&LAST_READ);
    if let Some(t) = n
        .last_read
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
    {
        last.push(NoLabels, t.as_secs_f64());
    }
    out.extend([
        conns.into(),
        jobs.into(),
        gdr.into(),
        version.into(),
        network.into(),
        reason.into(),
        mean.into(),
        min.into(),
        samples.into(),
        files.into(),
        read.into(),
        rejected.into(),
        last.into(),
        skipped.into(),
        budget.into(),
        processes.into(),
        state.into(),
        dropped.into(),
    ]);
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}
