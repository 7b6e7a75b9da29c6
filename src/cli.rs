//! The command line, in Prometheus exporter conventions (`--path.sysfs`,
//! `--web.listen-address`, ...). Parsing only: nothing here touches the host.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::exposition::groups::{Group, Groups};

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
    /// YAML configuration file (all keys optional; unknown keys are errors).
    #[arg(long = "config.file", value_name = "FILE", global = true)]
    pub config_file: Option<PathBuf>,

    /// Address to listen on, repeatable: ":9879", "0.0.0.0:9879", "[::1]:9879".
    #[arg(long = "web.listen-address", value_name = "ADDR", default_value = DEFAULT_LISTEN_ADDRESS)]
    pub listen_addresses: Vec<String>,

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

/// The command line: [`Cli`] and, for every group of series
/// ([`Group`]), `--collector.<group>` and `--no-collector.<group>`, built from
/// the group table (node_exporter's spelling; the last one given wins).
pub fn command() -> clap::Command {
    use clap::{Arg, ArgAction, CommandFactory};
    let mut cmd = Cli::command();
    for g in Group::ALL {
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
        Ok(cli) => (cli, matches),
        Err(e) => e.exit(),
    }
}

/// The groups of `metrics:` with the flags given applied over them.
pub fn groups(matches: &clap::ArgMatches, mut groups: Groups) -> Groups {
    for g in Group::ALL {
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
}
