//! Families about the exporter itself: build, per-collector success,
//! duration and errors, the time of the sample being served, how many
//! samples were taken and how many scheduled ones were missed, and rules
//! that panicked.

use super::groups::Group;
use super::labels::{label_set, CollectorKindLabels, CollectorLabels, NoLabels};
use super::{BuildInfo, Fam, Family, FamilySamples, FamilyUnit, MetricKind, Row, Samples};
use crate::snapshot::{Snapshot, SourceState};
use roce_host::ErrorKind;

label_set! {
    /// The build of the running exporter.
    pub struct BuildLabels { version, revision, branch, rustversion }
}

label_set! {
    /// A collector and its state.
    pub struct CollectorStateLabels { collector, state }
}

label_set! {
    /// A rule.
    pub struct RuleLabels { rule }
}

label_set! {
    /// How a basic-auth check ended.
    pub struct AuthOutcomeLabels { outcome }
}

pub const BUILD_INFO: Fam<BuildLabels> = Fam::new(Row {
    base: "roce_exporter_build_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Build of the running roce_exporter (value 1): version, git revision and branch, rustc version.",
    source: "build",
});
pub const COLLECTOR_SUCCESS: Fam<CollectorLabels> = Fam::new(Row {
    base: "roce_collector_success",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when the collector ran in the last sample (also when it found nothing to read on this host), 0 when it failed.",
    source: "sampler",
});
pub const COLLECTOR_DURATION: Fam<CollectorLabels> = Fam::new(Row {
    base: "roce_collector_duration",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Time the collector took in the last sample.",
    source: "sampler",
});
pub const COLLECTOR_ERRORS: Fam<CollectorKindLabels> = Fam::new(Row {
    base: "roce_collector_errors",
    kind: MetricKind::Counter,
    unit: None,
    help: "Single reads (files, netlink requests, ioctls) that failed since start, by kind: absent (the file or device went away: ENOENT, ENODEV, ENXIO), permission (EACCES, EPERM), malformed (read, but did not parse), busy (EBUSY, EAGAIN, EINTR, ETIMEDOUT), failed (any other errno, a refused request), timeout (a read or request that did not return within its per-item deadline: counted once when it sticks, its value absent until it returns), refused (not read because of what it is: not a regular file, a name that is not UTF-8, past a per-port cap); the values concerned are absent, the rest is exported. A kind appears with its first failed read (every kind, zeros included, with the collector_error_kinds group); not exported for a disabled collector.",
    source: "sampler",
});
pub const COLLECTOR_KERNEL_REQUESTS: Fam<CollectorKindLabels> = Fam::new(Row {
    base: "roce_collector_kernel_requests",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Requests the collector's last sample made to the kernel, by kind: file_read (sysfs pread), netlink, ioctl (SIOCETHTOOL). On mlx5 each counters/ read and each netlink statistics request is a firmware command. Only the rdma and netdev collectors count them.",
    source: "sampler",
});
pub const COLLECTOR_STATE: Fam<CollectorStateLabels> = Fam::new(Row {
    base: "roce_collector_state_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "State of the collector in the last sample (value 1): ok, unavailable (nothing to read on this host), disabled, failed.",
    source: "sampler",
});
pub const SAMPLE_TIMESTAMP: Fam<NoLabels> = Fam::new(Row {
    base: "roce_sample_timestamp",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Unix time at which the served sample was taken.",
    source: "sampler",
});
pub const SAMPLES: Fam<NoLabels> = Fam::new(Row {
    base: "roce_samples",
    kind: MetricKind::Counter,
    unit: None,
    help: "Samples taken since start, the one being served included. Below elapsed time / sample_interval when ticks were missed.",
    source: "sampler",
});
pub const SAMPLE_TICKS_MISSED: Fam<NoLabels> = Fam::new(Row {
    base: "roce_sample_ticks_missed",
    kind: MetricKind::Counter,
    unit: None,
    help: "Scheduled sample ticks skipped since start, in whole intervals, because a sample or the host's scheduling of the sampler overran sample_interval (skipped, not run late). Counted after the sample that overran. Nonzero: the sources are too slow for sample_interval, or the host is overloaded.",
    source: "sampler",
});
pub const SAMPLE_INTERVAL: Fam<NoLabels> = Fam::new(Row {
    base: "roce_sample_interval",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Configured time between samples.",
    source: "config",
});

pub const RULE_PANICS: Fam<RuleLabels> = Fam::new(Row {
    base: "roce_rule_panics",
    kind: MetricKind::Counter,
    unit: None,
    help: "Evaluations of the rule that panicked since start (a bug; the log has the message). That rule's findings are missing for those samples; the other rules and the sampler go on. Present only for rules that panicked.",
    source: "sampler",
});

pub const WEB_AUTH_CHECKS: Fam<AuthOutcomeLabels> = Fam::new(Row {
    base: "roce_web_auth_checks",
    kind: MetricKind::Counter,
    unit: None,
    help: "Basic-auth checks of requests since start, by outcome: allowed (right credentials, cached or verified), denied (wrong or missing: 401), refused (not checked: the client address's share of the bcrypt queue, or the queue, was full: 503). A refused count rising while allowed does not: a flood of wrong passwords, which a scraper that sends none still passes. Present once basic auth checked a request; as of the sample.",
    source: "server (--web.config.file basic_auth_users)",
});
pub const WEB_BCRYPT_VERIFICATIONS: Fam<NoLabels> = Fam::new(Row {
    base: "roce_web_bcrypt_verifications",
    kind: MetricKind::Counter,
    unit: None,
    help: "bcrypt verifications run since start (credentials not in the cache of outcomes), on the server's one bcrypt thread. Present once basic auth checked a request; as of the sample.",
    source: "server (--web.config.file basic_auth_users)",
});

pub static FAMILIES: &[Family] = &[
    BUILD_INFO.family,
    COLLECTOR_SUCCESS.family,
    COLLECTOR_DURATION.family,
    COLLECTOR_ERRORS.family,
    COLLECTOR_KERNEL_REQUESTS.family,
    COLLECTOR_STATE.family,
    SAMPLE_TIMESTAMP.family,
    SAMPLES.family,
    SAMPLE_TICKS_MISSED.family,
    SAMPLE_INTERVAL.family,
    RULE_PANICS.family,
    WEB_AUTH_CHECKS.family,
    WEB_BCRYPT_VERIFICATIONS.family,
];

pub fn collect(snapshot: &Snapshot, build: &BuildInfo, out: &mut Vec<FamilySamples>) {
    let mut build_info = Samples::new(&BUILD_INFO);
    let labels = BuildLabels {
        version: build.version,
        revision: build.revision,
        branch: build.branch,
        rustversion: build.rustversion,
    };
    build_info.push(labels, 1u64);
    out.push(build_info.into());

    let mut success = Samples::new(&COLLECTOR_SUCCESS);
    let mut duration = Samples::new(&COLLECTOR_DURATION);
    let mut errors = Samples::new(&COLLECTOR_ERRORS);
    let mut requests = Samples::new(&COLLECTOR_KERNEL_REQUESTS);
    let mut state = Samples::new(&COLLECTOR_STATE);
    for s in &snapshot.sources {
        let collector = s.name;
        success.push(CollectorLabels { collector }, s.state.success());
        duration.push(CollectorLabels { collector }, s.duration.as_secs_f64());
        if !matches!(s.state, SourceState::Disabled(_)) {
            // A kind at zero says what roce_collector_success already
            // does: it appears with its first failed read unless the
            // collector_error_kinds group is on.
            let zeros = build.groups.is_on(Group::CollectorErrorKinds);
            for (kind, n) in ErrorKind::ALL.iter().zip(s.errors_by_kind) {
                if n == 0 && !zeros {
                    continue;
                }
                let kind = kind.as_str();
                errors.push(CollectorKindLabels { collector, kind }, n);
            }
        }
        if let Some(k) = s.kernel_requests {
            for (kind, n) in [
                ("file_read", k.file_reads),
                ("netlink", k.netlink),
                ("ioctl", k.ioctls),
            ] {
                requests.push(CollectorKindLabels { collector, kind }, n);
            }
        }
        let labels = CollectorStateLabels {
            collector,
            state: s.state.label(),
        };
        state.push(labels, 1u64);
    }
    out.extend([
        success.into(),
        duration.into(),
        errors.into(),
        requests.into(),
        state.into(),
    ]);

    if snapshot.taken_at.is_some() {
        let mut ts = Samples::new(&SAMPLE_TIMESTAMP);
        ts.push(NoLabels, snapshot.timestamp_seconds());
        out.push(ts.into());
    }
    let mut samples = Samples::new(&SAMPLES);
    samples.push(NoLabels, snapshot.sequence);
    let mut missed = Samples::new(&SAMPLE_TICKS_MISSED);
    missed.push(NoLabels, snapshot.ticks_missed_total);
    out.extend([samples.into(), missed.into()]);
    let mut interval = Samples::new(&SAMPLE_INTERVAL);
    interval.push(NoLabels, build.sample_interval.as_secs_f64());
    out.push(interval.into());
    let mut panics = Samples::new(&RULE_PANICS);
    for (rule, n) in &snapshot.rule_panics_total {
        panics.push(RuleLabels { rule }, *n);
    }
    out.push(panics.into());
    if let Some(a) = snapshot.web_auth {
        let mut checks = Samples::new(&WEB_AUTH_CHECKS);
        for (outcome, n) in [
            ("allowed", a.allowed),
            ("denied", a.denied),
            ("refused", a.refused),
        ] {
            checks.push(AuthOutcomeLabels { outcome }, n);
        }
        let mut runs = Samples::new(&WEB_BCRYPT_VERIFICATIONS);
        runs.push(NoLabels, a.verifications);
        out.extend([checks.into(), runs.into()]);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{encode, Format};

    #[test]
    fn rule_panics_are_exported_per_rule_and_absent_without_one() {
        let build = BuildInfo::current(Duration::from_secs(5));
        let quiet = encode(Arc::new(Snapshot::default()), &build, Format::Text);
        assert!(!quiet.contains("roce_rule_panics_total"), "{quiet}");
        let snapshot = Snapshot {
            sequence: 3,
            rule_panics_total: vec![("pfc_storm", 2)],
            ..Snapshot::default()
        };
        let text = encode(Arc::new(snapshot), &build, Format::Text);
        assert!(
            text.lines()
                .any(|l| l == r#"roce_rule_panics_total{rule="pfc_storm"} 2"#),
            "{text}"
        );
    }
}
