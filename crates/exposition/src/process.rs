//! Families about the exporter's own process under Prometheus' standard
//! names (`process_*`, as every client library exports them), so the usual
//! dashboards and alerts on exporter CPU, memory and file descriptors work.
//! They describe the running exporter, so they are read from `/proc/self` at
//! encode time, never from `--path.procfs` (the host tree the sources read,
//! which can be a fixture). A value that cannot be read is absent.

use super::labels::NoLabels;
use super::{Fam, Family, FamilySamples, FamilyUnit, MetricKind, Row, Samples};

pub const START_TIME: Fam<NoLabels> = Fam::new(Row {
    base: "process_start_time",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Start time of the exporter process since the Unix epoch.",
    source: "/proc/self/stat starttime, /proc/stat btime",
});
pub const CPU: Fam<NoLabels> = Fam::new(Row {
    base: "process_cpu",
    kind: MetricKind::Counter,
    unit: Some(FamilyUnit::Seconds),
    help: "User and system CPU time the exporter process spent.",
    source: "/proc/self/stat utime, stime",
});
pub const RESIDENT_MEMORY: Fam<NoLabels> = Fam::new(Row {
    base: "process_resident_memory",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Bytes),
    help: "Resident memory of the exporter process.",
    source: "/proc/self/stat rss",
});
pub const OPEN_FDS: Fam<NoLabels> = Fam::new(Row {
    base: "process_open_fds",
    kind: MetricKind::Gauge,
    unit: None,
    help: "File descriptors the exporter process has open.",
    source: "/proc/self/fd",
});
pub const MAX_FDS: Fam<NoLabels> = Fam::new(Row {
    base: "process_max_fds",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Limit of open file descriptors of the exporter process (soft RLIMIT_NOFILE).",
    source: "/proc/self/limits",
});

pub static FAMILIES: &[Family] = &[
    START_TIME.family,
    CPU.family,
    RESIDENT_MEMORY.family,
    OPEN_FDS.family,
    MAX_FDS.family,
];

/// What `/proc/self/stat` says about the process, in kernel units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// utime + stime, clock ticks.
    pub cpu_ticks: u64,
    /// Start time after boot, clock ticks.
    pub start_ticks: u64,
    /// Resident set size, pages.
    pub rss_pages: u64,
}

/// Parses `/proc/<pid>/stat` (proc(5)): the command name in field 2 is in
/// parentheses and may hold spaces and parentheses, so fields are counted
/// after the last `)`. Fields 14, 15 (utime, stime), 22 (starttime), 24 (rss).
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state).
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        start_ticks: field(22)?,
        rss_pages: field(24)?,
    })
}

/// `btime` of `/proc/stat`: boot time, seconds since the epoch.
pub fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of "Max open files" in `/proc/<pid>/limits`; none when
/// "unlimited" or unreadable.
pub fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[allow(unsafe_code)]
fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf takes an integer and returns one; no memory is shared.
    let v = unsafe { libc::sysconf(name) };
    u64::try_from(v).ok().filter(|v| *v > 0)
}

pub fn collect(out: &mut Vec<FamilySamples>) {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let stat = read("/proc/self/stat").and_then(|t| parse_stat(&t));
    let ticks = sysconf(libc::_SC_CLK_TCK);
    let page = sysconf(libc::_SC_PAGESIZE);

    let mut start = Samples::new(&START_TIME);
    let btime = read("/proc/stat").and_then(|t| parse_btime(&t));
    if let (Some(s), Some(hz), Some(boot)) = (stat, ticks, btime) {
        start.push(NoLabels, boot as f64 + s.start_ticks as f64 / hz as f64);
    }
    let mut cpu = Samples::new(&CPU);
    if let (Some(s), Some(hz)) = (stat, ticks) {
        cpu.push(NoLabels, s.cpu_ticks as f64 / hz as f64);
    }
    let mut rss = Samples::new(&RESIDENT_MEMORY);
    if let (Some(s), Some(page)) = (stat, page) {
        rss.push(NoLabels, s.rss_pages.saturating_mul(page));
    }
    let mut open = Samples::new(&OPEN_FDS);
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        // read_dir's own descriptor is among the entries.
        let n = dir.filter(|e| e.is_ok()).count().saturating_sub(1);
        open.push(NoLabels, n as u64);
    }
    let mut max = Samples::new(&MAX_FDS);
    if let Some(n) = read("/proc/self/limits").and_then(|t| parse_max_open_files(&t)) {
        max.push(NoLabels, n);
    }
    out.extend([
        start.into(),
        cpu.into(),
        rss.into(),
        open.into(),
        max.into(),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    // A line of /proc/<pid>/stat as Linux 6.x writes it (52 fields), with
    // a command name holding a space and a parenthesis.
    const STAT: &str = "4242 (roce ex)porter) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
        250 75 0 0 20 0 9 0 123456 45678592 2048 18446744073709551615 1 1 0 0 0 0 0 \
        4096 1260 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        assert_eq!(
            parse_stat(STAT),
            Some(Stat {
                cpu_ticks: 325,
                start_ticks: 123456,
                rss_pages: 2048
            })
        );
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn btime_and_open_files_limit_parse() {
        assert_eq!(
            parse_btime("cpu  1 2 3\nbtime 1764720000\nprocesses 9\n"),
            Some(1764720000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
        assert_eq!(
            parse_max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
    }

    #[test]
    fn own_process_is_exported_under_the_standard_names() {
        let text = crate::encode(
            std::sync::Arc::new(crate::snapshot::Snapshot::default()),
            &crate::BuildInfo::current(std::time::Duration::from_secs(5)),
            crate::Format::Text,
        );
        for name in [
            "process_start_time_seconds ",
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.lines().any(|l| l.starts_with(name)), "{name}\n{text}");
        }
    }
}
