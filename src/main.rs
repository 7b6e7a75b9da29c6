//! roce_exporter's entry point: parse, load, wire, serve. Nothing else.

use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use roce_exporter::app::App;
use roce_exporter::cli::{CheckFormat, Cli, Command, DocsTopic, OnceFormat};
use roce_exporter::config::{Config, WebLimits};
use roce_exporter::exposition::{self, BuildInfo, Format};
use roce_exporter::host::HostPaths;
use roce_exporter::sampler::{Control, Sampler};
use roce_exporter::{check, logging, server, sources};

/// Exit status for a configuration or usage error.
const EXIT_USAGE: u8 = 2;

/// After SIGTERM or SIGINT the process ends within this time, whatever a
/// source or a connection does: past it, it exits at once (status 1).
/// Normally it ends sooner: connections get `close_grace` (5 s) to finish,
/// the sampler [`SAMPLER_STOP_WAIT`].
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);
/// How long a stopping server waits for the sampler to finish its sample;
/// a sample that takes longer (a source stuck in the kernel) is abandoned.
const SAMPLER_STOP_WAIT: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let (cli, matches) = roce_exporter::cli::parse();
    logging::init(cli.effective_log_level(), cli.log_format);
    // Taken before any thread starts: reading them clears systemd's
    // variables from the environment.
    let inherited = match (cli.systemd_socket, &cli.command) {
        (true, None) => match server::systemd_listeners() {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("roce_exporter: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
        _ => None,
    };
    // The server's signal handlers come first, before the configuration is
    // read: a SIGHUP from `systemctl reload` right after start is a reload
    // request (handled once serving), not the default action that kills,
    // and a SIGTERM during start-up bounds the process's life at once.
    let server = match cli.command {
        None => match Server::start() {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("roce_exporter: cannot start the runtime: {e}");
                return ExitCode::FAILURE;
            }
        },
        Some(_) => None,
    };

    let config = match &cli.config_file {
        None => Ok(Config::default()),
        Some(path) => Config::load(path),
    }
    .and_then(|c| c.with_switches(&cli.switches));
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("roce_exporter: invalid configuration: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    roce_exporter::host::raise_open_file_limit();
    let paths = HostPaths {
        sysfs: cli.sysfs.clone(),
        procfs: cli.procfs.clone(),
    };
    let mut build = roce_exporter::build_info(config.sample_interval);
    build.groups = roce_exporter::cli::groups(&matches, config.metrics);
    build.process_metrics = !cli.disable_exporter_metrics;

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
        Some(Command::Check {
            window,
            format,
            load,
            peers,
            load_force,
        }) => {
            let ran = check::run_keeping(&config, &paths, window, true).map(
                |(mut report, mut sampler)| {
                    if let Some(per_size) = load {
                        let args = roce_exporter::load::LoadArgs {
                            per_size: per_size.unwrap_or(config.load_test.per_size),
                            peers,
                            force: load_force,
                        };
                        roce_exporter::load::run(&config, &mut sampler, &mut report, &args);
                    }
                    report
                },
            );
            match ran {
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
        None => match server {
            Some(server) => server.run(&cli, inherited, config, paths, build),
            None => ExitCode::FAILURE,
        },
    }
}

/// The server's runtime and its signals, set up before anything else.
struct Server {
    runtime: tokio::runtime::Runtime,
    /// SIGHUP, registered at start: one that arrives before the reload task
    /// polls it is kept and seen at the first poll.
    hup: Option<tokio::signal::unix::Signal>,
    /// `true` once SIGTERM or SIGINT came: watched from the start, so the
    /// shutdown limit holds while the configuration is still being read.
    stop: tokio::sync::watch::Receiver<bool>,
}

/// Signal streams, each registered at start.
struct Signals {
    hup: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Server {
    fn start() -> std::io::Result<Server> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let Signals { hup, term, int } = {
            let _entered = runtime.enter();
            Signals::install()
        };
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        runtime.spawn(async move {
            shutdown_signal(term, int).await;
            let _ = stop_tx.send(true);
        });
        Ok(Server { runtime, hup, stop })
    }

    fn run(
        self,
        cli: &Cli,
        inherited: Option<Vec<std::net::TcpListener>>,
        config: Config,
        paths: HostPaths,
        build: BuildInfo,
    ) -> ExitCode {
        let Server { runtime, hup, stop } = self;
        if *stop.borrow() {
            tracing::info!("stopped before serving");
            return ExitCode::SUCCESS;
        }
        let listen = Listen { cli, inherited };
        let code = run_server(&runtime, hup, stop, listen, config, paths, build);
        // Blocking tasks still running (a password check) are not waited
        // for beyond this.
        runtime.shutdown_timeout(SAMPLER_STOP_WAIT);
        code
    }
}

impl Signals {
    fn install() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        let one = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(signal = name, error = %e, "cannot watch the signal");
                None
            }
        };
        Signals {
            hup: one(SignalKind::hangup(), "SIGHUP"),
            term: one(SignalKind::terminate(), "SIGTERM"),
            int: one(SignalKind::interrupt(), "SIGINT"),
        }
    }
}

/// Where the server listens: the sockets systemd passed
/// (`--web.systemd-socket`), else `--web.listen-address`.
struct Listen<'a> {
    cli: &'a Cli,
    inherited: Option<Vec<std::net::TcpListener>>,
}

fn run_server(
    runtime: &tokio::runtime::Runtime,
    hup: Option<tokio::signal::unix::Signal>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    listen: Listen<'_>,
    config: Config,
    paths: HostPaths,
    build: BuildInfo,
) -> ExitCode {
    let Listen { cli, inherited } = listen;
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
        let stopped = async move {
            let _ = stop.wait_for(|stop| *stop).await;
        };
        let listeners = match inherited {
            Some(sockets) => server::adopt(sockets),
            None => server::bind(&cli.listen_addresses).await,
        };
        let listeners = match listeners {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen");
                return ExitCode::from(EXIT_USAGE);
            }
        };

        let responder = load_responder(&config, web_config.as_deref());
        let handle = responder_handle(&config, &responder);
        // The first sample is taken before serving, so that the first scrape
        // already has data.
        let mut sampler = Sampler::new(sources::with_responder(&config, &paths, handle), &config);
        tracing::info!("taking the first sample before serving");
        let first = sampler.sample();
        let mut app = App::new(build, first.clone()).with_telemetry_path(&cli.telemetry_path);
        if let Some(r) = &responder {
            r.observe(&first);
            let r = r.clone();
            app = app.with_actions(Arc::new(move |a: &server::Action| r.action(a)));
        }
        let app = Arc::new(app);
        let (control_tx, control_rx) = mpsc::channel::<Control>();
        let publisher = app.clone();
        let observer = responder.clone();
        let interval = config.sample_interval;
        // Dropped when the sampler thread ends: how main learns it did.
        let (ended_tx, ended) = mpsc::channel::<()>();
        let sampler_thread = std::thread::Builder::new().name("roce-sampler".into()).spawn(move || {
            let _ended = ended_tx;
            sampler.run(interval, control_rx, |_, snapshot| {
                if let Some(r) = &observer {
                    r.observe(&snapshot);
                }
                publisher.publish(snapshot)
            });
        });
        let sampler_thread = match sampler_thread {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the sampler thread");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(version = app.build().version, listen = ?cli.listen_addresses, sysfs = %paths.sysfs.display(), "roce_exporter started");

        let reload = tokio::spawn(reload_on_sighup(
            hup,
            cli.config_file.clone(),
            paths.clone(),
            config.web.clone(),
            config.metrics,
            cli.switches.clone(),
            Reloaded {
                sampler: control_tx,
                responder: responder.clone(),
            },
        ));
        let mut options = server::ServeOptions::new(config.web.clone());
        options.web_config = web_config;
        options.telemetry_path = Arc::from(cli.telemetry_path.as_str());
        let result = server::serve_with(listeners, app, options, stopped).await;
        if let Some(r) = &responder {
            r.stop_all();
        }
        // Dropping the reload task drops the control sender, which stops the
        // sampler after its current sample; a sample held up by a source
        // stuck in the kernel is not waited for.
        reload.abort();
        let _ = reload.await;
        match ended.recv_timeout(SAMPLER_STOP_WAIT) {
            Err(mpsc::RecvTimeoutError::Timeout) => {
                tracing::warn!(waited = ?SAMPLER_STOP_WAIT, "the sampler is still in a sample; not waiting for it")
            }
            _ => {
                let _ = sampler_thread.join();
            }
        }
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

/// What a reloaded configuration goes to: the sampler (its sources and
/// settings) and the load-test responder (its running sessions end).
struct Reloaded {
    sampler: mpsc::Sender<Control>,
    responder: Option<Arc<Responder>>,
}

/// Re-reads the configuration on SIGHUP (also one received before the
/// server was ready). A configuration that does not parse is refused and the
/// running one kept. Listen addresses, web limits and `metrics:` are not
/// reloaded (they need a restart): a change to them is named in a warning.
async fn reload_on_sighup(
    hup: Option<tokio::signal::unix::Signal>,
    file: Option<std::path::PathBuf>,
    paths: HostPaths,
    running_web: WebLimits,
    running_metrics: roce_exporter::exposition::groups::Groups,
    switches: Vec<(roce_exporter::sources::Switch, bool)>,
    to: Reloaded,
) {
    let Reloaded {
        sampler: control,
        responder,
    } = to;
    let Some(mut hup) = hup else {
        tracing::warn!("cannot watch SIGHUP; configuration reload disabled");
        return;
    };
    while hup.recv().await.is_some() {
        let Some(path) = &file else {
            tracing::info!("SIGHUP: no --config.file, nothing to reload");
            continue;
        };
        // Read off the runtime's workers: the file is the user's to make a
        // FIFO or put on a hung mount (the read is bounded in time anyway).
        let owned = path.clone();
        let switches = switches.clone();
        let loaded = match tokio::task::spawn_blocking(move || {
            Config::load(&owned).and_then(|c| c.with_switches(&switches))
        })
        .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "configuration reload failed; keeping the running configuration");
                continue;
            }
        };
        match loaded {
            Ok(config) => {
                let mut restart = web_keys_changed(&running_web, &config.web);
                if config.metrics != running_metrics {
                    restart.push("metrics");
                }
                if let Some(r) = &responder {
                    r.reconfigure(&config);
                }
                let sources =
                    sources::with_responder(&config, &paths, responder_handle(&config, &responder));
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
                if !restart.is_empty() {
                    tracing::warn!(
                        file = %path.display(),
                        keys = %restart.join(","),
                        "changed keys need a restart to apply; still running with their values at start"
                    );
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration reload refused; keeping the running configuration")
            }
        }
    }
}

#[cfg(feature = "probes")]
type Responder = roce_exporter::load_responder::ServerResponder;
#[cfg(not(feature = "probes"))]
type Responder = roce_exporter::load_responder::Responder<roce_exporter::load_responder::NoVerbs>;

/// The load-test responder: always there with verbs (off, it refuses and
/// counts), so that a reload can turn it on. Says once at start when it is
/// on behind a server that authenticates nobody over TLS.
#[cfg(feature = "probes")]
fn load_responder(
    config: &Config,
    web: Option<&roce_exporter::webconfig::WebConfigWatcher>,
) -> Option<Arc<Responder>> {
    if config.load_test.responder {
        let web = web.map(|w| w.current());
        let secure = web.is_some_and(|w| w.tls().is_some() && w.authenticates());
        if !secure {
            tracing::warn!("load_test.responder is on, but the web server does not authenticate its clients over TLS (--web.config.file with tls_server_config and basic_auth_users or a required client certificate): every load-test request is refused");
        }
    }
    Some(roce_exporter::load_responder::start(
        config,
        roce_exporter::load_responder::node_name(),
    ))
}

#[cfg(not(feature = "probes"))]
fn load_responder(
    _config: &Config,
    _web: Option<&roce_exporter::webconfig::WebConfigWatcher>,
) -> Option<Arc<Responder>> {
    None
}

/// The responder's counts for the load-test source, while it is on.
fn responder_handle(
    config: &Config,
    responder: &Option<Arc<Responder>>,
) -> Option<roce_exporter::sources::load_test::ResponderHandle> {
    let r = responder
        .as_ref()
        .filter(|_| config.load_test.responder)?
        .clone();
    Some(Arc::new(move || r.view()))
}

/// The `web:` keys that differ between the limits in force and a reloaded
/// file's; `web` alone when they differ in a key not named here.
fn web_keys_changed(running: &WebLimits, new: &WebLimits) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if running.max_requests != new.max_requests {
        keys.push("web.max_requests");
    }
    if running.max_connections != new.max_connections {
        keys.push("web.max_connections");
    }
    if running.header_read_timeout != new.header_read_timeout {
        keys.push("web.header_read_timeout");
    }
    if running.max_request_bytes != new.max_request_bytes {
        keys.push("web.max_request_bytes");
    }
    if running.write_stall_timeout != new.write_stall_timeout {
        keys.push("web.write_stall_timeout");
    }
    if keys.is_empty() && running != new {
        keys.push("web");
    }
    keys
}

/// Resolves on SIGTERM or SIGINT, and from then on bounds the rest of the
/// process's life to [`SHUTDOWN_LIMIT`].
async fn shutdown_signal(
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
) {
    async fn next(s: Option<tokio::signal::unix::Signal>) {
        match s {
            Some(mut s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = next(term) => tracing::info!("SIGTERM received, shutting down"),
        _ = next(int) => tracing::info!("SIGINT received, shutting down"),
    }
    // On a thread of its own, so that nothing the runtime or a source does
    // can hold it up.
    let watchdog = std::thread::Builder::new()
        .name("roce-shutdown".into())
        .spawn(|| {
            std::thread::sleep(SHUTDOWN_LIMIT);
            tracing::error!(limit = ?SHUTDOWN_LIMIT, "shutdown did not finish in time; exiting now");
            std::process::exit(1);
        });
    if let Err(e) = watchdog {
        tracing::warn!(error = %e, "cannot bound the shutdown time");
    }
}
