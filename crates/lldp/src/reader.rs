//! The LLDP reader: the neighbour of each netdev behind an RDMA port (the
//! switch port it is cabled to) and what that switch port advertises in
//! its IEEE 802.1Qaz DCBX TLVs (PFC, APP priority, ETS). `lldp.mode` picks
//! where it comes from:
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
//! Either way the neighbours go through one [`NeighbourTable`], aged by
//! each neighbour's TTL from the last time it was heard (a frame, or lldpd
//! listing it in a sample), bounded per port.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use roce_host::HostError;
use serde::Deserialize;

use crate::capture::{CaptureError, FrameSource, PacketCapture};
use crate::table::Identity;
use crate::tlv::Lldpdu;
use crate::NeighbourTable;

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
    /// the next sample, within the socket's bounded buffer): 1 to
    /// [`MAX_FRAMES_PER_SAMPLE`].
    #[serde(deserialize_with = "frames_per_sample")]
    pub max_frames_per_sample: usize,
}

/// The ceiling of `lldp.max_frames_per_sample`.
pub const MAX_FRAMES_PER_SAMPLE: usize = 65536;
/// Why: said in the refusal and in docs/limits.md.
pub const MAX_FRAMES_PER_SAMPLE_WHY: &str =
    "frames decoded per sample, all netdevs together; the rest wait in the socket's buffer";

fn frames_per_sample<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Whole(u64),
        Other(serde::de::IgnoredAny),
    }
    let found = match Raw::deserialize(d)? {
        Raw::Whole(n) if (1..=MAX_FRAMES_PER_SAMPLE as u64).contains(&n) => {
            return usize::try_from(n).map_err(serde::de::Error::custom)
        }
        Raw::Whole(n) => n.to_string(),
        Raw::Other(_) => "something else".to_string(),
    };
    Err(serde::de::Error::custom(format!(
        "lldp.max_frames_per_sample: expected 1 to {MAX_FRAMES_PER_SAMPLE} ({MAX_FRAMES_PER_SAMPLE_WHY}), found {found}"
    )))
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

/// Why the reader is off for as long as it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LldpOff {
    #[error("lldp.mode is off")]
    ModeOff,
    #[error("lldp.mode auto: lldpcli not found (install lldpd, or set lldp.mode: capture, which needs CAP_NET_RAW)")]
    NoLldpcli,
    #[error("lldp.mode auto: the paths are not the running kernel's")]
    NotLive,
}

/// Why a sample has no LLDP part.
#[derive(Debug, thiserror::Error)]
pub enum LldpError {
    /// No netdev to watch.
    #[error("no netdev behind an RDMA port")]
    NoNetdev,
    /// `lldp.json_file` could not be read, and why: absent, not a regular
    /// file (a FIFO, a device), over the size cap, not read in time, a read
    /// error (the error itself is among the sample's errors too).
    #[error("lldp.json_file {}: {cause}", path.display())]
    JsonFile { path: PathBuf, cause: String },
    /// lldpcli, found by `auto`, gave no document.
    #[error("lldp.mode auto: lldpd not answering ({0}); set lldp.mode: capture (needs CAP_NET_RAW) or run lldpd")]
    NotAnswering(LldpcliError),
    /// lldpcli, asked for by `lldpd`, gave no document.
    #[error("lldpcli: {0}")]
    Lldpcli(LldpcliError),
    #[error("lldp.mode lldpd: lldpcli not found (set lldp.lldpcli or lldp.json_file)")]
    NoLldpcli,
    /// lldpcli's document does not parse.
    #[error("lldpcli output: {0}")]
    Output(crate::lldpd::LldpdError),
    /// The capture cannot open without `CAP_NET_RAW`.
    #[error(
        "lldp.mode capture needs CAP_NET_RAW (AmbientCapabilities=CAP_NET_RAW in the unit): {0}"
    )]
    Denied(Arc<CaptureError>),
    /// The capture failed to open or to read (reopened next sample).
    #[error("lldp capture: {0}")]
    Capture(CaptureError),
}

enum Backend {
    Off(LldpOff),
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
        denied: Option<Arc<CaptureError>>,
    },
}

/// Reads the neighbours of the watched netdevs, sample after sample.
pub struct LldpReader {
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

impl LldpReader {
    /// The reader `config` asks for; `live` when the paths are the running
    /// kernel's.
    pub fn new(config: &LldpConfig, live: bool) -> Self {
        let c = config;
        let backend = match c.mode {
            LldpMode::Off => Backend::Off(LldpOff::ModeOff),
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
                (None, None) => Backend::Off(if live {
                    LldpOff::NoLldpcli
                } else {
                    LldpOff::NotLive
                }),
            },
        };
        LldpReader::with_backend(backend, c.max_frames_per_sample.max(1), open_packet_capture)
    }

    fn with_backend(backend: Backend, max_frames: usize, opener: CaptureOpener) -> Self {
        LldpReader {
            backend,
            table: NeighbourTable::new(),
            watched_since: BTreeMap::new(),
            rejected: BTreeMap::new(),
            max_frames,
            opener,
        }
    }

    /// A capture reader over frames from `opener` (tests).
    pub fn with_capture(opener: CaptureOpener) -> Self {
        let backend = Backend::Capture {
            open: None,
            open_for: Vec::new(),
            denied: None,
        };
        LldpReader::with_backend(backend, 256, opener)
    }

    /// An lldpd reader reading lldpcli's JSON from `file` (tests).
    pub fn with_json_file(file: PathBuf) -> Self {
        let backend = Backend::Lldpd {
            lldpcli: None,
            socket: None,
            file: Some(file),
            auto: false,
        };
        LldpReader::with_backend(backend, 256, open_packet_capture)
    }

    /// Why the reader is off, or `None` when it reads.
    pub fn off(&self) -> Option<LldpOff> {
        match &self.backend {
            Backend::Off(why) => Some(*why),
            _ => None,
        }
    }

    /// Reads the neighbours of `targets` (each netdev with the RDMA device
    /// and port behind it) at `now` (monotonic). Problems that did not stop
    /// it go into `errors`.
    pub fn read(
        &mut self,
        targets: Vec<(String, Option<(String, u32)>)>,
        now: Duration,
        errors: &mut Vec<HostError>,
    ) -> Result<LldpSnapshot, LldpError> {
        if targets.is_empty() {
            return Err(LldpError::NoNetdev);
        }
        let now_ms = now.as_millis() as u64;
        let names: Vec<String> = targets.iter().map(|(n, _)| n.clone()).collect();
        self.table.retain(&names);
        self.watched_since.retain(|k, _| names.contains(k));
        self.rejected.retain(|k, _| names.contains(k));
        for n in &names {
            self.table.watch(n);
            self.watched_since.entry(n.clone()).or_insert(now);
        }
        let (read, via) = if matches!(self.backend, Backend::Lldpd { .. }) {
            (self.read_lldpd(now_ms, errors), "lldpd")
        } else {
            (self.read_capture(&names, now_ms, errors), "capture")
        };
        self.table.expire(now_ms);
        read?;
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
        Ok(LldpSnapshot { via, ports })
    }

    /// Reads the lldpd neighbours into the table.
    fn read_lldpd(&mut self, now_ms: u64, errors: &mut Vec<HostError>) -> Result<(), LldpError> {
        let Backend::Lldpd {
            lldpcli,
            socket,
            file,
            auto,
        } = &self.backend
        else {
            return Ok(());
        };
        let doc = match (file, lldpcli) {
            (Some(path), _) => match read_json_file(path) {
                Ok(d) => d,
                Err(e) => {
                    let cause = e.kind.to_string();
                    errors.push(HostError::request("lldp.json_file", e));
                    return Err(LldpError::JsonFile {
                        path: path.clone(),
                        cause,
                    });
                }
            },
            (None, Some(cli)) => match run_lldpcli(cli, socket.as_deref()) {
                Ok(d) => d,
                Err(e) if *auto => return Err(LldpError::NotAnswering(e)),
                Err(e) => return Err(LldpError::Lldpcli(e)),
            },
            (None, None) => return Err(LldpError::NoLldpcli),
        };
        let neighbours = crate::lldpd::parse_json0(&doc).map_err(LldpError::Output)?;
        for n in neighbours {
            self.table.observe(&n.interface, n.pdu, now_ms);
        }
        Ok(())
    }

    /// Drains the capture into the table.
    fn read_capture(
        &mut self,
        netdevs: &[String],
        now_ms: u64,
        errors: &mut Vec<HostError>,
    ) -> Result<(), LldpError> {
        let opener = self.opener;
        let max_frames = self.max_frames;
        let Backend::Capture {
            open,
            open_for,
            denied,
        } = &mut self.backend
        else {
            return Ok(());
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
                Err(e @ CaptureError::Permission(_)) => *denied = Some(Arc::new(e)),
                Err(e) => return Err(LldpError::Capture(e)),
            }
        }
        if let Some(why) = denied {
            return Err(LldpError::Denied(why.clone()));
        }
        let Some(cap) = open.as_mut() else {
            return Ok(());
        };
        let table = &mut self.table;
        let rejected = &mut self.rejected;
        let result = cap.drain(
            max_frames,
            &mut |netdev, frame| match crate::parse_frame(frame) {
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
        result.map(|_| ()).map_err(|e| {
            // Reopen next sample (the netdev may have been re-created).
            *open = None;
            LldpError::Capture(e)
        })
    }
}

/// Reads `lldp.json_file` as every file a user names is read
/// (`roce_host::named`: regular files only, opened without blocking, at
/// most the largest document the parser accepts, under a deadline).
fn read_json_file(path: &std::path::Path) -> Result<Vec<u8>, roce_host::named::NamedFileError> {
    roce_host::named::read_bytes(
        path,
        roce_host::named::Limits {
            max_bytes: crate::lldpd::MAX_DOCUMENT as u64,
            deadline: LLDPCLI_TIMEOUT,
        },
    )
}

/// Why `lldpcli` gave no document.
#[derive(Debug, thiserror::Error)]
pub enum LldpcliError {
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
pub enum Pipe {
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
            .take(crate::lldpd::MAX_DOCUMENT as u64 + 1)
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
            stderr: crate::tlv::sanitize_text(&err),
        });
    }
    Ok(out)
}

/// What the source hands over.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LldpSnapshot {
    /// `lldpd` or `capture`.
    pub via: &'static str,
    pub ports: Vec<LldpPort>,
}

/// One RDMA netdev's view of its link partner.
#[derive(Debug, Clone, PartialEq)]
pub struct LldpPort {
    pub netdev: String,
    /// The RDMA device and port behind the netdev.
    pub rdma: Option<(String, u32)>,
    /// The neighbour heard most recently and still within its TTL.
    pub neighbour: Option<Lldpdu>,
    /// Live neighbours (more than one: a hub, or a second agent).
    pub neighbours: usize,
    /// Since the last LLDPDU was heard (capture) or lldpd last listed a
    /// neighbour (lldpd), even if it expired since.
    pub heard_age: Option<Duration>,
    /// The TTL of the last LLDPDU heard.
    pub last_ttl: Option<u16>,
    /// How long the source has watched this port.
    pub watched_for: Duration,
    /// `(first, current)` when the port's neighbour is another remote
    /// port than the first heard since start (recabled).
    pub changed: Option<(Identity, Identity)>,
    /// LLDPDUs accepted and rejected on the port since start.
    pub frames_total: u64,
    pub rejected_total: u64,
    /// Why the last rejected frame was rejected.
    pub last_rejection: Option<String>,
}
