//! roce_exporter's entry point: parse, load, wire, serve. Nothing else.

use std::process::ExitCode;
use std::sync::{mpsc, Arc};

use clap::Parser;

use roce_exporter::app::App;
use roce_exporter::cli::{CheckFormat, Cli, Command, DocsTopic, OnceFormat};
use roce_exporter::config::Config;
use roce_exporter::exposition::{self, BuildInfo, Format};
use roce_exporter::host::HostPaths;
use roce_exporter::sampler::{Control, Sampler};
use roce_exporter::{check, logging, server, sources};

/// Exit status for a configuration or usage error.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.effective_log_level(), cli.log_format);

    let config = match &cli.config_file {
        None => Config::default(),
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("roce_exporter: invalid configuration: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    roce_exporter::host::raise_open_file_limit();
    let paths = HostPaths {
        sysfs: cli.sysfs.clone(),
        procfs: cli.procfs.clone(),
    };
    let build = BuildInfo::current(config.sample_interval);

    match cli.command {
        Some(Command::Docs {
            what: DocsTopic::Metrics,
        }) => {
            print!("{}", exposition::families::reference_markdown());
            ExitCode::SUCCESS
        }
        Some(Command::Docs {
            what: DocsTopic::Rules,
        }) => {
            print!("{}", roce_exporter::rules::table::render());
            ExitCode::SUCCESS
        }
        Some(Command::Docs {
            what: DocsTopic::Man,
        }) => match roce_exporter::manpage::render() {
            Ok(page) => {
                print!("{page}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("roce_exporter: cannot render the man page: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Once { format }) => {
            let mut sampler = Sampler::new(sources::all(&config, &paths), &config);
            let snapshot = sampler.sample();
            let format = match format {
                OnceFormat::Text => Format::Text,
                OnceFormat::Openmetrics => Format::OpenMetrics,
            };
            print!("{}", exposition::encode(snapshot, &build, format));
            ExitCode::SUCCESS
        }
        Some(Command::Check { window, format }) => {
            match check::run(&config, &paths, window, true) {
                Ok(report) => {
                    match format {
                        CheckFormat::Text => print!("{}", check::render_text(&report)),
                        CheckFormat::Json => match serde_json::to_string_pretty(&report) {
                            Ok(json) => println!("{json}"),
                            Err(e) => {
                                eprintln!("roce_exporter: cannot encode the report: {e}");
                                return ExitCode::from(EXIT_USAGE);
                            }
                        },
                    }
                    ExitCode::from(report.exit_code())
                }
                Err(e) => {
                    eprintln!("roce_exporter check: could not run: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            }
        }
        None => run_server(&cli, config, paths, build),
    }
}

fn run_server(cli: &Cli, config: Config, paths: HostPaths, build: BuildInfo) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("roce_exporter: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Checked before anything listens, so a bad file never serves in the
    // clear by accident.
    let web_config = match &cli.web_config_file {
        None => None,
        Some(path) => match roce_exporter::webconfig::WebConfigWatcher::load(path) {
            Ok(w) => Some(Arc::new(w)),
            Err(e) => {
                eprintln!("roce_exporter: invalid web configuration: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    runtime.block_on(async move {
        let listeners = match server::bind(&cli.listen_addresses).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen");
                return ExitCode::from(EXIT_USAGE);
            }
        };

        // The first sample is taken before serving, so that the first scrape
        // already has data.
        let mut sampler = Sampler::new(sources::all(&config, &paths), &config);
        let first = sampler.sample();
        let app = Arc::new(App::new(build, first));
        let (control_tx, control_rx) = mpsc::channel::<Control>();
        let publisher = app.clone();
        let interval = config.sample_interval;
        let sampler_thread = std::thread::Builder::new().name("roce-sampler".into()).spawn(move || {
            sampler.run(interval, control_rx, |_, snapshot| publisher.publish(snapshot));
        });
        let sampler_thread = match sampler_thread {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the sampler thread");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(version = app.build().version, listen = ?cli.listen_addresses, sysfs = %paths.sysfs.display(), "roce_exporter started");

        let reload = tokio::spawn(reload_on_sighup(cli.config_file.clone(), paths.clone(), control_tx));
        let mut options = server::ServeOptions::new(config.web.clone());
        options.web_config = web_config;
        let result = server::serve_with(listeners, app, options, shutdown_signal()).await;
        // Dropping the reload task drops the control sender, which stops the
        // sampler after its current sample.
        reload.abort();
        let _ = reload.await;
        let _ = sampler_thread.join();
        match result {
            Ok(()) => {
                tracing::info!("stopped");
                ExitCode::SUCCESS
            }
            Err(e) => {
                tracing::error!(error = %e, "server failed");
                ExitCode::FAILURE
            }
        }
    })
}

/// Re-reads the configuration on SIGHUP. A configuration that does not
/// parse is refused and the running one kept. Listen addresses and web
/// limits are not reloaded (they need a restart).
async fn reload_on_sighup(
    file: Option<std::path::PathBuf>,
    paths: HostPaths,
    control: mpsc::Sender<Control>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot watch SIGHUP; configuration reload disabled");
        return;
    };
    while hup.recv().await.is_some() {
        let Some(path) = &file else {
            tracing::info!("SIGHUP: no --config.file, nothing to reload");
            continue;
        };
        match Config::load(path) {
            Ok(config) => {
                let sources = sources::all(&config, &paths);
                if control
                    .send(Control::Reload {
                        sources,
                        config: Box::new(config),
                    })
                    .is_err()
                {
                    return;
                }
                tracing::info!(file = %path.display(), "configuration reloaded");
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration reload refused; keeping the running configuration")
            }
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
    }
}
