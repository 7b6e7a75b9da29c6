//! The command line, in Prometheus exporter conventions (`--path.sysfs`,
//! `--web.listen-address`, ...). Parsing only: nothing here touches the host.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::exposition::groups::{Group, Groups};
use crate::sources::Switch;

/// Default port of roce_exporter.
pub const DEFAULT_LISTEN_ADDRESS: &str = ":9879";

#[derive(Debug, Parser)]
#[command(
    name = "roce_exporter",
    version,
    long_version = crate::VERSION_TEXT,
    about = "Prometheus exporter for RDMA fabrics (RoCEv2 and InfiniBand)",
    long_about = "Reads RDMA port state, counters and GID tables, the congestion counters and \
                  lossless-Ethernet settings of the netdevs behind them, the GPU-NIC PCIe topology \
                  and verbs loopback probes on a fixed interval, turns them into findings and \
                  serves them to Prometheus. Without a subcommand it runs the HTTP server."
)]
pub struct Cli {
    /// The collector switches given (`--collector.<source>` and
    /// `--no-collector.<source>`), kept to apply over a reloaded
    /// configuration too; filled from the matches by [`parse`].
    #[arg(skip)]
    pub switches: Vec<(Switch, bool)>,

    /// YAML configuration file (all keys optional; unknown keys are errors).
    #[arg(long = "config.file", value_name = "FILE", global = true)]
    pub config_file: Option<PathBuf>,

    /// Address to listen on, repeatable: ":9879", "0.0.0.0:9879", "[::1]:9879".
    #[arg(long = "web.listen-address", value_name = "ADDR", default_value = DEFAULT_LISTEN_ADDRESS)]
    pub listen_addresses: Vec<String>,

    /// Path under which the exposition is served ("/" replaces the landing
    /// page).
    #[arg(
        long = "web.telemetry-path",
        value_name = "PATH",
        default_value = crate::server::DEFAULT_TELEMETRY_PATH,
        value_parser = parse_telemetry_path
    )]
    pub telemetry_path: String,

    /// Leave out the metrics about the exporter's own process (process_*),
    /// as node_exporter's flag does; roce_exporter_build_info and the
    /// collector metrics stay.
    #[arg(long = "web.disable-exporter-metrics")]
    pub disable_exporter_metrics: bool,

    /// Serve on the listening sockets systemd passes (socket activation:
    /// LISTEN_PID, LISTEN_FDS) instead of --web.listen-address.
    #[arg(long = "web.systemd-socket", conflicts_with = "listen_addresses")]
    pub systemd_socket: bool,

    /// Web configuration (exporter-toolkit web-config.yml): TLS, mutual TLS,
    /// basic auth, response headers. Re-read when it or a file it names
    /// changes.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,

    /// Mount point of sysfs.
    #[arg(
        long = "path.sysfs",
        value_name = "DIR",
        default_value = "/sys",
        global = true
    )]
    pub sysfs: PathBuf,

    /// Mount point of procfs.
    #[arg(
        long = "path.procfs",
        value_name = "DIR",
        default_value = "/proc",
        global = true
    )]
    pub procfs: PathBuf,

    /// Least severe log level written: error, warn, info, debug, trace
    /// [default: info for the server, warn for once and check].
    #[arg(long = "log.level", value_name = "LEVEL", global = true)]
    pub log_level: Option<LogLevel>,

    /// Log line format.
    #[arg(
        long = "log.format",
        value_name = "FORMAT",
        default_value = "logfmt",
        global = true
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take one sample and print its exposition to stdout, then exit.
    Once {
        /// Exposition format.
        #[arg(long, default_value = "text")]
        format: OnceFormat,
    },
    /// One-shot fabric checklist: sample twice over --window, run the rules,
    /// print findings with Fix and Verify lines and the NCCL settings this
    /// host needs. Exit status 0 (no critical finding), 1 (critical
    /// findings), 2 (could not run).
    Check {
        /// Time between the two samples (counter growth is measured over it).
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        window: std::time::Duration,
        /// Output format.
        #[arg(long, default_value = "text")]
        format: CheckFormat,
        /// Load the fabric after the check: RDMA WRITE streams from every
        /// active port to a peer's load-test responder on its rail, every
        /// port at once, then each alone, DURATION per message size
        /// (load_test.per_size by default, at most 10s); the counters are
        /// judged over each run.
        #[arg(long, value_name = "DURATION", num_args = 0..=1, require_equals = true, value_parser = parse_load_duration)]
        load: Option<Option<std::time::Duration>>,
        /// A peer exporter to ask for a load-test session (host:port or
        /// https://host:port), repeatable; without it the peer probes' peers.
        #[arg(long = "peer", value_name = "HOST[:PORT]", requires = "load")]
        peers: Vec<String>,
        /// Load ports that already carry traffic (a responder refuses a
        /// port busier than load_test.max_busy_share otherwise).
        #[arg(long = "load-force", requires = "load")]
        load_force: bool,
    },
    /// Print generated documentation (the metric reference, the man page, the
    /// rule table) to stdout.
    #[command(hide = true)]
    Docs {
        #[arg(value_enum)]
        what: DocsTopic,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnceFormat {
    /// Prometheus text 0.0.4.
    Text,
    /// OpenMetrics 1.0.
    Openmetrics,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckFormat {
    Text,
    Json,
}

/// A duration argument that did not parse, with the form to write.
#[derive(Debug, thiserror::Error)]
#[error("{0} (write e.g. 10s, 1m)")]
pub struct DurationError(humantime::DurationError);

fn parse_duration(s: &str) -> Result<std::time::Duration, DurationError> {
    humantime::parse_duration(s).map_err(DurationError)
}

fn parse_telemetry_path(s: &str) -> Result<String, String> {
    crate::server::valid_telemetry_path(s)
        .map(|()| s.to_string())
        .map_err(|why| format!("{s:?} {why}"))
}

/// `--load=DURATION`: above zero and at most 10 s per message size.
fn parse_load_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 5s)"))?;
    if d.is_zero() || d > roce_fleet::load::MAX_PER_SIZE {
        return Err("the time per message size is above zero and at most 10s".into());
    }
    Ok(d)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DocsTopic {
    /// docs/metrics.md
    Metrics,
    /// docs/roce_exporter.1 (the man page)
    Man,
    /// docs/rules.json (the rule table with its default thresholds, windows
    /// and severities; alerts/generate.py reads it)
    Rules,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Logfmt,
    Json,
}

/// The command line: [`Cli`]; for every collector ([`Switch`]: a source)
/// `--collector.<source>` and `--no-collector.<source>`, which start and
/// stop it; and for every group of series ([`Group`]) that is not also a
/// source, `--collector.<group>` and `--no-collector.<group>`, which choose
/// what is exported. Built from the two tables (node_exporter's spelling;
/// the last one given wins).
pub fn command() -> clap::Command {
    use clap::{Arg, ArgAction, CommandFactory};
    let mut cmd = Cli::command();
    for s in Switch::ALL {
        let with_group = if s.group().is_some() {
            " and its metric group"
        } else {
            ""
        };
        cmd = cmd
            .arg(
                Arg::new(s.on_flag())
                    .long(s.on_flag())
                    .action(ArgAction::SetTrue)
                    .global(true)
                    .overrides_with(s.off_flag())
                    .help(format!(
                        "Run the {} collector: {} [config: {}]",
                        s.name(),
                        s.help(),
                        s.config_key()
                    )),
            )
            .arg(
                Arg::new(s.off_flag())
                    .long(s.off_flag())
                    .action(ArgAction::SetTrue)
                    .global(true)
                    .overrides_with(s.on_flag())
                    .help(format!(
                        "Stop the {} collector{with_group}: it reads nothing",
                        s.name()
                    )),
            );
    }
    for g in Group::ALL.into_iter().filter(|g| !is_source(*g)) {
        let default = if g.default_on() { "on" } else { "off" };
        cmd = cmd
            .arg(
                Arg::new(g.on_flag())
                    .long(g.on_flag())
                    .action(ArgAction::SetTrue)
                    .global(true)
                    .overrides_with(g.off_flag())
                    .help(format!("Export {} [default: {default}]", g.help())),
            )
            .arg(
                Arg::new(g.off_flag())
                    .long(g.off_flag())
                    .action(ArgAction::SetTrue)
                    .global(true)
                    .overrides_with(g.on_flag())
                    .help(format!("Do not export the {} group", g.name())),
            );
    }
    cmd
}

/// Parses the process's arguments (exits with clap's message on an error).
pub fn parse() -> (Cli, clap::ArgMatches) {
    use clap::FromArgMatches;
    let matches = command().get_matches();
    match Cli::from_arg_matches(&matches) {
        Ok(mut cli) => {
            cli.switches = switches(&matches);
            (cli, matches)
        }
        Err(e) => e.exit(),
    }
}

/// Whether a group's name is a collector's: its flags are the collector's.
fn is_source(g: Group) -> bool {
    Switch::ALL.iter().any(|s| s.group() == Some(g))
}

/// The collector switches given, in table order.
pub fn switches(matches: &clap::ArgMatches) -> Vec<(Switch, bool)> {
    let mut out = Vec::new();
    for s in Switch::ALL {
        if matches.get_flag(s.on_flag()) {
            out.push((s, true));
        }
        if matches.get_flag(s.off_flag()) {
            out.push((s, false));
        }
    }
    out
}

/// The groups of `metrics:` with the group flags given applied over them
/// (the collector switches have been applied to the configuration's groups
/// already: [`crate::config::Config::switch_collectors`]).
pub fn groups(matches: &clap::ArgMatches, mut groups: Groups) -> Groups {
    for g in Group::ALL.into_iter().filter(|g| !is_source(*g)) {
        if matches.get_flag(g.on_flag()) {
            groups.set(g, true);
        }
        if matches.get_flag(g.off_flag()) {
            groups.set(g, false);
        }
    }
    groups
}

impl Cli {
    /// The log level: as given, else info for the server and warn for the
    /// one-shot commands (their output is the point, not the log).
    pub fn effective_log_level(&self) -> LogLevel {
        self.log_level.unwrap_or(match self.command {
            None => LogLevel::Info,
            Some(_) => LogLevel::Warn,
        })
    }
}

impl LogLevel {
    pub fn as_filter(self) -> tracing::level_filters::LevelFilter {
        use tracing::level_filters::LevelFilter;
        match self {
            LogLevel::Error => LevelFilter::ERROR,
            LogLevel::Warn => LevelFilter::WARN,
            LogLevel::Info => LevelFilter::INFO,
            LogLevel::Debug => LevelFilter::DEBUG,
            LogLevel::Trace => LevelFilter::TRACE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_style_flags_parse() {
        let cli = Cli::try_parse_from([
            "roce_exporter",
            "--web.listen-address=:9999",
            "--web.listen-address",
            "[::1]:9999",
            "--path.sysfs=/tmp/sys",
            "--log.format=json",
        ])
        .unwrap();
        assert_eq!(cli.listen_addresses, vec![":9999", "[::1]:9999"]);
        assert_eq!(cli.sysfs, PathBuf::from("/tmp/sys"));
        assert_eq!(cli.log_format, LogFormat::Json);
        assert!(cli.command.is_none());
    }

    #[test]
    fn once_takes_global_paths() {
        let cli = Cli::try_parse_from([
            "roce_exporter",
            "once",
            "--path.sysfs",
            "x",
            "--format",
            "openmetrics",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Once {
                format: OnceFormat::Openmetrics
            })
        ));
        assert_eq!(cli.sysfs, PathBuf::from("x"));
    }

    #[test]
    fn node_exporter_web_flags_parse() {
        let cli = Cli::try_parse_from(["roce_exporter"]).unwrap();
        assert_eq!(cli.telemetry_path, "/metrics");
        assert!(!cli.disable_exporter_metrics && !cli.systemd_socket);
        let cli = Cli::try_parse_from([
            "roce_exporter",
            "--web.telemetry-path=/prom",
            "--web.disable-exporter-metrics",
            "--web.systemd-socket",
        ])
        .unwrap();
        assert_eq!(cli.telemetry_path, "/prom");
        assert!(cli.disable_exporter_metrics && cli.systemd_socket);
        for bad in [
            &["roce_exporter", "--web.telemetry-path=metrics"][..],
            &["roce_exporter", "--web.telemetry-path=/healthz"],
            &[
                "roce_exporter",
                "--web.systemd-socket",
                "--web.listen-address=:1",
            ],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn collector_flags_switch_groups_over_the_config() {
        let m = command()
            .try_get_matches_from([
                "roce_exporter",
                "--no-collector.hw_stat",
                "once",
                "--collector.pcie_hops",
                "--collector.gids",
                "--no-collector.gids",
            ])
            .unwrap();
        let mut config = Groups::default();
        config.set(Group::Qos, false);
        let g = groups(&m, config);
        assert!(!g.is_on(Group::HwStat));
        assert!(g.is_on(Group::PcieHops));
        assert!(!g.is_on(Group::Gids), "the last flag wins");
        assert!(
            !g.is_on(Group::Qos),
            "the config stays where no flag is given"
        );
        assert!(g.is_on(Group::Topology));
        let m = command()
            .try_get_matches_from(["roce_exporter", "--no-collector.gids", "--collector.gids"])
            .unwrap();
        assert!(groups(&m, Groups::default()).is_on(Group::Gids));
    }

    #[test]
    fn collector_flags_of_sources_switch_the_sources_and_their_groups() {
        use crate::config::{Config, Toggle};
        for s in Switch::ALL {
            assert_eq!(s.on_flag(), format!("collector.{}", s.name()));
            assert_eq!(s.off_flag(), format!("no-collector.{}", s.name()));
        }
        let m = command()
            .try_get_matches_from([
                "roce_exporter",
                "--no-collector.phys",
                "--no-collector.probe",
                "--collector.qos",
                "--no-collector.rdma",
                "--collector.rdma",
            ])
            .unwrap();
        let mut config = Config::parse("collectors: {qos: false}\n", "t").unwrap();
        assert!(
            !config.metrics.is_on(Group::Qos),
            "a source off in the file hides its group"
        );
        config.switch_collectors(&switches(&m));
        assert!(!config.collectors.phys);
        assert!(
            !config.metrics.is_on(Group::Phys),
            "the source switch hides its group"
        );
        assert_eq!(config.probes.enabled, Toggle::Off);
        assert!(config.collectors.qos, "the flag wins over the file");
        assert!(config.metrics.is_on(Group::Qos));
        assert!(config.collectors.rdma, "the last flag wins");
        assert!(config.collectors.topology && config.collectors.netdev);
        // The groups that are not sources keep their own flags.
        assert!(!groups(&m, config.metrics).is_on(Group::Phys));
    }
}
