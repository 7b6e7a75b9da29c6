//! The LLDP source: the neighbour of each netdev behind an RDMA port (the
//! switch port it is cabled to) and what that switch port advertises in
//! its IEEE 802.1Qaz DCBX TLVs (PFC, APP priority, ETS), through
//! `roce-lldp`. `lldp.mode` picks where it comes from:
//!
//! - `lldpd`: `lldpcli -f json0 show neighbors details` (lldpd running on
//!   the host), or the same JSON from `lldp.json_file`;
//! - `capture`: passive AF_PACKET capture of ethertype 0x88cc on the RDMA
//!   netdevs (receive only; needs `CAP_NET_RAW`, and says so without it);
//! - `auto` (the default): `lldpd` when the paths are the running kernel's
//!   and lldpcli is installed (or `json_file` is set), else off. Capture is
//!   never chosen by `auto`: it needs a privilege the exporter does not
//!   otherwise ask for.
//! - `off`.
//!
//! Either way the neighbours go through one neighbour table, aged by each
//! neighbour's TTL from the last time it was heard (a frame, or lldpd
//! listing it in a sample), bounded per port.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use roce_lldp::capture::{CaptureError, FrameSource, PacketCapture};
use roce_lldp::NeighbourTable;
use serde::Deserialize;

pub use roce_model::lldp::{LldpPort, LldpSnapshot};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::SourceState;

/// How long lldpcli may run.
const LLDPCLI_TIMEOUT: Duration = Duration::from_secs(3);
/// Where lldpcli is looked for when `lldp.lldpcli` is not set.
const LLDPCLI_PATHS: &[&str] = &[
    "/usr/sbin/lldpcli",
    "/usr/bin/lldpcli",
    "/usr/local/sbin/lldpcli",
];

/// `lldp:` in the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LldpConfig {
    pub mode: LldpMode,
    /// lldpcli to run (default: the first of /usr/sbin, /usr/bin,
    /// /usr/local/sbin that exists).
    pub lldpcli: Option<PathBuf>,
    /// lldpd's control socket (`lldpcli -u`), when not the default.
    pub lldpd_socket: Option<PathBuf>,
    /// Read `lldpcli -f json0 show neighbors details` output from this file
    /// instead of running lldpcli (lldpd in another container, fixtures).
    pub json_file: Option<PathBuf>,
    /// The most frames read per sample in capture mode (the rest wait for
    /// the next sample, within the socket's bounded buffer).
    pub max_frames_per_sample: usize,
}

impl Default for LldpConfig {
    fn default() -> Self {
        LldpConfig {
            mode: LldpMode::Auto,
            lldpcli: None,
            lldpd_socket: None,
            json_file: None,
            max_frames_per_sample: 256,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LldpMode {
    Auto,
    Off,
    Lldpd,
    Capture,
}

/// Opens the capture on a set of netdevs: the capture and the netdevs it
/// could not open, or why it could not open at all.
pub type CaptureOpener =
    fn(&[String]) -> Result<(Box<dyn FrameSource>, Vec<CaptureError>), CaptureError>;

enum Backend {
    Off(SourceState),
    Lldpd {
        lldpcli: Option<PathBuf>,
        socket: Option<PathBuf>,
        file: Option<PathBuf>,
        auto: bool,
    },
    Capture {
        open: Option<Box<dyn FrameSource>>,
        open_for: Vec<String>,
        /// Set when opening failed for want of CAP_NET_RAW.
        denied: Option<String>,
    },
}

pub struct LldpSource {
    backend: Backend,
    table: NeighbourTable,
    watched_since: BTreeMap<String, Duration>,
    rejected: BTreeMap<String, (u64, String)>,
    max_frames: usize,
    /// Opens the capture for a set of netdevs (injected by tests).
    opener: CaptureOpener,
}

fn open_packet_capture(
    netdevs: &[String],
) -> Result<(Box<dyn FrameSource>, Vec<CaptureError>), CaptureError> {
    PacketCapture::open(netdevs).map(|(c, e)| (Box::new(c) as Box<dyn FrameSource>, e))
}

fn find_lldpcli(config: &LldpConfig) -> Option<PathBuf> {
    if let Some(p) = &config.lldpcli {
        return Some(p.clone());
    }
    LLDPCLI_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

impl LldpSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let c = &config.lldp;
        let live = paths.is_live();
        let backend = match c.mode {
            LldpMode::Off => Backend::Off(SourceState::Disabled("lldp.mode is off".into())),
            LldpMode::Capture => Backend::Capture {
                open: None,
                open_for: Vec::new(),
                denied: None,
            },
            LldpMode::Lldpd => Backend::Lldpd {
                lldpcli: find_lldpcli(c),
                socket: c.lldpd_socket.clone(),
                file: c.json_file.clone(),
                auto: false,
            },
            LldpMode::Auto => match (&c.json_file, live.then(|| find_lldpcli(c)).flatten()) {
                (Some(file), _) => Backend::Lldpd {
                    lldpcli: None,
                    socket: None,
                    file: Some(file.clone()),
                    auto: true,
                },
                (None, Some(cli)) => Backend::Lldpd {
                    lldpcli: Some(cli),
                    socket: c.lldpd_socket.clone(),
                    file: None,
                    auto: true,
                },
                (None, None) => Backend::Off(SourceState::Disabled(if live {
                    "lldp.mode auto: lldpcli not found (install lldpd, or set lldp.mode: capture, which needs CAP_NET_RAW)".into()
                } else {
                    "lldp.mode auto: the paths are not the running kernel's".into()
                })),
            },
        };
        LldpSource {
            backend,
            table: NeighbourTable::new(),
            watched_since: BTreeMap::new(),
            rejected: BTreeMap::new(),
            max_frames: c.max_frames_per_sample.max(1),
            opener: open_packet_capture,
        }
    }

    /// A capture source over frames from `opener` (tests).
    pub fn with_capture(opener: CaptureOpener) -> Self {
        LldpSource {
            backend: Backend::Capture {
                open: None,
                open_for: Vec::new(),
                denied: None,
            },
            table: NeighbourTable::new(),
            watched_since: BTreeMap::new(),
            rejected: BTreeMap::new(),
            max_frames: 256,
            opener,
        }
    }

    /// An lldpd source reading lldpcli's JSON from `file` (tests).
    pub fn with_json_file(file: PathBuf) -> Self {
        LldpSource {
            backend: Backend::Lldpd {
                lldpcli: None,
                socket: None,
                file: Some(file),
                auto: false,
            },
            table: NeighbourTable::new(),
            watched_since: BTreeMap::new(),
            rejected: BTreeMap::new(),
            max_frames: 256,
            opener: open_packet_capture,
        }
    }

    /// Reads the lldpd neighbours into the table; the state to report.
    fn read_lldpd(&mut self, now_ms: u64, errors: &mut Vec<HostError>) -> SourceState {
        let Backend::Lldpd {
            lldpcli,
            socket,
            file,
            auto,
        } = &self.backend
        else {
            return SourceState::Ok;
        };
        let doc = match (file, lldpcli) {
            (Some(path), _) => match read_json_file(path) {
                Ok(d) => d,
                Err(e) => {
                    errors.push(HostError::request("lldp.json_file", e));
                    return SourceState::Failed(format!("{}: unreadable", path.display()));
                }
            },
            (None, Some(cli)) => match run_lldpcli(cli, socket.as_deref()) {
                Ok(d) => d,
                Err(e) if *auto => {
                    return SourceState::Unavailable(format!(
                        "lldp.mode auto: lldpd not answering ({e}); set lldp.mode: capture (needs CAP_NET_RAW) or run lldpd"
                    ))
                }
                Err(e) => return SourceState::Failed(format!("lldpcli: {e}")),
            },
            (None, None) => {
                return SourceState::Failed(
                    "lldp.mode lldpd: lldpcli not found (set lldp.lldpcli or lldp.json_file)".into(),
                )
            }
        };
        match roce_lldp::lldpd::parse_json0(&doc) {
            Ok(neighbours) => {
                for n in neighbours {
                    self.table.observe(&n.interface, n.pdu, now_ms);
                }
                SourceState::Ok
            }
            Err(e) => SourceState::Failed(format!("lldpcli output: {e}")),
        }
    }

    /// Drains the capture into the table; the state to report.
    fn read_capture(
        &mut self,
        netdevs: &[String],
        now_ms: u64,
        errors: &mut Vec<HostError>,
    ) -> SourceState {
        let opener = self.opener;
        let max_frames = self.max_frames;
        let Backend::Capture {
            open,
            open_for,
            denied,
        } = &mut self.backend
        else {
            return SourceState::Ok;
        };
        if open.is_none() || open_for != netdevs {
            *open = None;
            match opener(netdevs) {
                Ok((cap, open_errors)) => {
                    for e in open_errors {
                        errors.push(HostError::request(
                            "lldp capture",
                            std::io::Error::other(e.to_string()),
                        ));
                    }
                    *open = Some(cap);
                    *open_for = netdevs.to_vec();
                    *denied = None;
                }
                Err(CaptureError::Permission(e)) => {
                    *denied = Some(format!(
                        "lldp.mode capture needs CAP_NET_RAW (AmbientCapabilities=CAP_NET_RAW in the unit): {e}"
                    ));
                }
                Err(e) => return SourceState::Failed(format!("lldp capture: {e}")),
            }
        }
        if let Some(why) = denied {
            return SourceState::Disabled(why.clone());
        }
        let Some(cap) = open.as_mut() else {
            return SourceState::Failed("lldp capture not open".into());
        };
        let table = &mut self.table;
        let rejected = &mut self.rejected;
        let result = cap.drain(
            max_frames,
            &mut |netdev, frame| match roce_lldp::parse_frame(frame) {
                Ok(pdu) => table.observe(netdev, pdu, now_ms),
                Err(e) => {
                    let r = rejected
                        .entry(netdev.to_string())
                        .or_insert((0, String::new()));
                    r.0 = r.0.saturating_add(1);
                    r.1 = e.to_string();
                }
            },
        );
        match result {
            Ok(_) => SourceState::Ok,
            Err(e) => {
                // Reopen next sample (the netdev may have been re-created).
                *open = None;
                SourceState::Failed(format!("lldp capture: {e}"))
            }
        }
    }
}

/// Reads `lldp.json_file` as every file a user names is read
/// (`roce_host::named`: regular files only, opened without blocking, at
/// most the largest document the parser accepts, under a deadline).
fn read_json_file(path: &std::path::Path) -> Result<Vec<u8>, roce_host::named::NamedFileError> {
    roce_host::named::read_bytes(
        path,
        roce_host::named::Limits {
            max_bytes: roce_lldp::lldpd::MAX_DOCUMENT as u64,
            deadline: LLDPCLI_TIMEOUT,
        },
    )
}

/// Why `lldpcli` gave no document.
#[derive(Debug, thiserror::Error)]
enum LldpcliError {
    /// The program could not be started (absent, not executable).
    #[error("{}: {error}", cli.display())]
    Start { cli: PathBuf, error: std::io::Error },
    /// The child came without the pipe asked for (`stdout` or `stderr`).
    #[error("no {0}")]
    NoPipe(Pipe),
    /// Killed past [`LLDPCLI_TIMEOUT`].
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
    /// Waiting for the child, or reading its output, failed.
    #[error("{0}")]
    Io(std::io::Error),
    #[error("reader panicked")]
    ReaderPanicked,
    /// A failed exit, with the start of what it wrote to stderr.
    #[error("exit {status}: {stderr}")]
    Exit {
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// A pipe to the child.
#[derive(Debug, Clone, Copy)]
enum Pipe {
    Stdout,
    Stderr,
}

impl std::fmt::Display for Pipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pipe::Stdout => "stdout",
            Pipe::Stderr => "stderr",
        })
    }
}

/// Runs `lldpcli [-u socket] -f json0 show neighbors details`, bounded in
/// output and time (killed past [`LLDPCLI_TIMEOUT`]).
fn run_lldpcli(
    cli: &std::path::Path,
    socket: Option<&std::path::Path>,
) -> Result<Vec<u8>, LldpcliError> {
    let mut cmd = Command::new(cli);
    if let Some(s) = socket {
        cmd.arg("-u").arg(s);
    }
    cmd.args(["-f", "json0", "show", "neighbors", "details"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|error| LldpcliError::Start {
        cli: cli.to_path_buf(),
        error,
    })?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or(LldpcliError::NoPipe(Pipe::Stdout))?;
    let mut stderr = child
        .stderr
        .take()
        .ok_or(LldpcliError::NoPipe(Pipe::Stderr))?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let r = (&mut stdout)
            .take(roce_lldp::lldpd::MAX_DOCUMENT as u64 + 1)
            .read_to_end(&mut buf);
        // Drain the rest so lldpcli is not blocked on a full pipe.
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        r.map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut stderr).take(4096).read_to_end(&mut buf);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        buf
    });
    let deadline = std::time::Instant::now() + LLDPCLI_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LldpcliError::TimedOut(LLDPCLI_TIMEOUT));
            }
            Err(e) => return Err(LldpcliError::Io(e)),
        }
    };
    let out = reader
        .join()
        .map_err(|_| LldpcliError::ReaderPanicked)?
        .map_err(LldpcliError::Io)?;
    let err = err_reader.join().unwrap_or_default();
    if !status.success() {
        return Err(LldpcliError::Exit {
            status,
            stderr: roce_lldp::tlv::sanitize_text(&err),
        });
    }
    Ok(out)
}

impl Source for LldpSource {
    fn name(&self) -> &'static str {
        "lldp"
    }

    fn needs_rdma(&self) -> bool {
        true
    }

    fn disabled(&self) -> Option<String> {
        match &self.backend {
            Backend::Off(SourceState::Disabled(why)) => Some(why.clone()),
            _ => None,
        }
    }

    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        if let Backend::Off(state) = &self.backend {
            return Sampled::bare(state.clone());
        }
        let targets: Vec<(String, Option<(String, u32)>)> =
            super::netdev::targets(input.rdma.as_deref(), &[])
                .into_iter()
                .map(|t| (t.name, t.rdma.map(|r| (r.device, r.port))))
                .collect();
        if targets.is_empty() {
            return Sampled::bare(SourceState::Unavailable(
                "no netdev behind an RDMA port".into(),
            ));
        }
        let now = crate::snapshot::monotonic_now();
        let now_ms = now.as_millis() as u64;
        let names: Vec<String> = targets.iter().map(|(n, _)| n.clone()).collect();
        self.table.retain(&names);
        self.watched_since.retain(|k, _| names.contains(k));
        self.rejected.retain(|k, _| names.contains(k));
        for n in &names {
            self.table.watch(n);
            self.watched_since.entry(n.clone()).or_insert(now);
        }
        let (state, via) = if matches!(self.backend, Backend::Lldpd { .. }) {
            (self.read_lldpd(now_ms, errors), "lldpd")
        } else {
            (self.read_capture(&names, now_ms, errors), "capture")
        };
        self.table.expire(now_ms);
        if !matches!(state, SourceState::Ok) {
            return Sampled::bare(state);
        }
        let ports = targets
            .into_iter()
            .map(|(netdev, rdma)| {
                let p = self.table.port(&netdev).cloned().unwrap_or_default();
                let (rejected_total, last_rejection) = self
                    .rejected
                    .get(&netdev)
                    .map(|(n, why)| (*n, Some(why.clone())))
                    .unwrap_or((0, None));
                LldpPort {
                    neighbour: p.current().map(|n| n.pdu.clone()),
                    neighbours: p.neighbours.len(),
                    heard_age: p
                        .last_heard_ms
                        .map(|t| Duration::from_millis(now_ms.saturating_sub(t))),
                    last_ttl: p.last_ttl,
                    watched_for: now
                        .saturating_sub(self.watched_since.get(&netdev).copied().unwrap_or(now)),
                    changed: p.changed().map(|(a, b)| (a.clone(), b)),
                    frames_total: p.frames,
                    rejected_total,
                    last_rejection,
                    netdev,
                    rdma,
                }
            })
            .collect();
        Sampled::new(state, Part::Lldp(Box::new(LldpSnapshot { via, ports })))
    }
}
