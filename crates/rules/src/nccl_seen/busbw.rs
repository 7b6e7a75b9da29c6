//! The bandwidth jobs reached and what limited them:
//! - `nccl_busbw_below_line_rate`: a measured bus bandwidth
//!   ([`crate::measured`]: the NCCL Inspector's, nccl-tests') below
//!   `nccl.min_line_rate_fraction` of what the node's NICs give;
//! - `nccl_rails_unused`: NCCL's device table of a job leaves out ACTIVE
//!   rails of its GPUs (`NCCL_IB_HCA` named where the log shows it);
//! - `nccl_tests_wrong`: nccl-tests found wrong elements (`#wrong`, `Out
//!   of bounds values`).
//!
//! NCCL lines read: `NET/IB : Using [n]dev:port/LL ...`, `NCCL_IB_HCA set
//! to %s`, the communicators' `busId`; nccl-tests' rank list, result table
//! and footer; the Inspector's records.

use super::rails::rails;
use super::transport::hca_admits;
use super::window_text;
use crate::measured::{expected_for, measurements, size_text};
use crate::snapshot::Snapshot;
use crate::{Finding, RuleId, Severity, Subject};

pub fn busbw_below_line_rate(s: &Snapshot) -> Vec<Finding> {
    let Some(n) = s.nccl.as_ref() else {
        return vec![];
    };
    let mut out = Vec::new();
    for m in measurements(n) {
        if m.not_judged.is_some() {
            continue;
        }
        let Some(expected) = expected_for(s, &m) else {
            continue;
        };
        let floor = n.min_line_rate_fraction * expected.bytes_per_second;
        // NVLS and CollNet (SHARP) results above the NIC sum are above
        // any floor here: quiet by construction.
        if m.gbs * 1e9 >= floor {
            continue;
        }
        out.push(Finding {
            rule: RuleId::NcclBusbwBelowLineRate,
            severity: Severity::Warning,
            subject: Subject::default(),
            finding: format!(
                "{} is {:.1} GB/s, below {:.0}% of the {:.1} GB/s this node's NICs should give",
                m.finding_prefix(),
                m.gbs,
                n.min_line_rate_fraction * 100.0,
                expected.bytes_per_second / 1e9,
            ),
            evidence: format!(
                "{}: {:.1} GB/s in the last {}; expected at least {:.1} GB/s ({} x {:.1} GB/s: {})",
                m.what,
                m.gbs,
                window_text(n),
                floor / 1e9,
                n.min_line_rate_fraction,
                expected.bytes_per_second / 1e9,
                expected.basis
            ),
            fix: "Find what slows the fabric for these jobs: NICs the jobs leave out (nccl_rails_unused), the transport and GPUDirect RDMA findings, the congestion and port findings of this host and its peers (PFC storms, ECN/CNP spikes, retransmissions, link errors), a GPU-NIC placement where each rank uses its nearest NIC".into(),
            verify: "all_reduce_perf -b 1G -e 8G -f 2 across two nodes, all GPUs of each (alltoall_perf for AllToAll): busbw at 8G near the expected figure".into(),
        });
    }
    out
}

pub fn rails_unused(s: &Snapshot) -> Vec<Finding> {
    let Some(n) = s.nccl.as_ref() else {
        return vec![];
    };
    let sum = &n.summary;
    let job = &sum.job;
    if job.ib_ports.is_empty() {
        return vec![];
    }
    // Without the GPU-NIC topology there are no rails to judge against.
    let Some(rails) = rails(s, sum).filter(|r| r.from_topology) else {
        return vec![];
    };
    let listed = |d: &str, p: u32| {
        job.ib_ports
            .iter()
            .any(|x| x.device == d && u32::from(x.port) == p)
    };
    // Down rails are port_down's; only ACTIVE ones NCCL could have used.
    let left_out: Vec<_> = rails
        .ports
        .iter()
        .filter(|p| p.active && !listed(&p.device, p.port))
        .collect();
    if left_out.is_empty() {
        return vec![];
    }
    let used: Vec<_> = rails
        .ports
        .iter()
        .filter(|p| listed(&p.device, p.port))
        .collect();
    let hca = job.setting("NCCL_IB_HCA");
    let cause = match hca {
        Some(v) if left_out.iter().any(|p| !hca_admits(v, &p.device, p.port)) => format!(
            "the job's NCCL_IB_HCA={v} leaves them out (NCCL_IB_HCA set to {v})"
        ),
        Some(v) => format!(
            "the job's NCCL_IB_HCA={v} admits them, so the job does not see them (its container's devices)"
        ),
        None => "NCCL_IB_HCA was not logged: the job does not see them (its container's devices), or set NCCL_IB_HCA where NCCL_DEBUG_SUBSYS has no ENV".to_string(),
    };
    let fix = match hca {
        Some(v) => format!(
            "Unset NCCL_IB_HCA={v} for jobs that use all GPUs of the node (NCCL matches each GPU with its nearest NIC itself), or list every rail: NCCL_IB_HCA={}",
            rails.devices().join(",")
        ),
        None => "Give the job every RDMA device of the node (in containers: all of /dev/infiniband) and do not restrict NCCL_IB_HCA".to_string(),
    };
    vec![Finding {
        rule: RuleId::NcclRailsUnused,
        severity: Severity::Warning,
        subject: Subject::default(),
        finding: format!(
            "NCCL jobs use {} of the {} rails of their GPUs on this node: {cause}, so their inter-node bandwidth is at most {}/{} of the node's",
            used.len(),
            rails.ports.len(),
            used.len(),
            rails.ports.len()
        ),
        evidence: format!(
            "NCCL's device table (NET/IB : Using) in the last {}: {}; ACTIVE rails left out: {}; rails: {} ({}: {})",
            window_text(n),
            job.ib_ports
                .iter()
                .map(|p| format!("{}:{}", p.device, p.port))
                .collect::<Vec<_>>()
                .join(", "),
            left_out.iter().map(|p| p.describe()).collect::<Vec<_>>().join(", "),
            rails.basis,
            rails.gpus_basis,
            rails
                .gpus
                .iter()
                .map(|g| format!("GPU {g}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        fix,
        verify: "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET all_reduce_perf -b 1G -e 8G -f 2 2>&1 | grep -E 'NCCL_IB_HCA|NET/IB : Using'".into(),
    }]
}

pub fn tests_wrong(s: &Snapshot) -> Vec<Finding> {
    let Some(n) = s.nccl.as_ref() else {
        return vec![];
    };
    let mut out = Vec::new();
    for t in &n.summary.job.tests {
        let r = &t.run;
        let oob = r.out_of_bounds.unwrap_or(0);
        if r.wrong == 0 && oob == 0 {
            continue;
        }
        let first = r.first_wrong.as_ref().map_or(String::new(), |w| {
            format!(
                "; first at {} ({} {} {}): #wrong {} out of place, {} in place",
                size_text(w.size),
                w.dtype,
                w.redop,
                w.count,
                w.out_of_place
                    .and_then(|c| c.wrong)
                    .map_or("N/A".into(), |v| v.to_string()),
                w.in_place
                    .and_then(|c| c.wrong)
                    .map_or("N/A".into(), |v| v.to_string())
            )
        });
        out.push(Finding {
            rule: RuleId::NcclTestsWrong,
            severity: Severity::Critical,
            subject: Subject::default(),
            finding: format!(
                "nccl-tests {} computed wrong results: {} wrong element(s) in {} row(s): data is corrupted on the way (GPU memory, PCIe, NIC, or a buggy NCCL/driver pairing)",
                r.program.as_deref().unwrap_or("run"),
                r.wrong,
                r.wrong_rows
            ),
            evidence: format!(
                "{} run {} over {} rank(s) on {} host(s) ({}), NCCL {}: Out of bounds values {}{first}; expected #wrong 0 everywhere",
                t.file,
                t.index + 1,
                r.ranks,
                r.hosts.len(),
                r.hosts.join(", "),
                r.nccl_version.as_deref().unwrap_or("not printed"),
                r.out_of_bounds.map_or("not printed".into(), |v| v.to_string())
            ),
            fix: "Find the component that corrupts data: rerun on subsets of the hosts and GPUs (-g 1 per GPU, pairs of nodes) until one GPU, NIC or link keeps failing; check the GPUs' ECC and Xid errors (nvidia-smi -q -d ECC; dmesg | grep -i xid), the PCIe AER findings, and that NCCL, the CUDA driver and the NIC firmware are a supported combination".into(),
            verify: "all_reduce_perf -b 8 -e 8G -f 2 -c 1 across the same hosts: #wrong 0 in every row, Out of bounds values : 0 OK".into(),
        });
    }
    out
}
