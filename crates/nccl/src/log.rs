//! One line of an NCCL debug log (`NCCL_DEBUG=INFO`, `NCCL_DEBUG_FILE`) into
//! a typed event, for the few lines that say what NCCL chose: its version,
//! the network, the devices of that network, each channel connection's
//! transport, and the GPUDirect RDMA decisions.
//!
//! Formats, all from NCCL's source:
//! - the prefix, `src/debug.cc`: an optional timestamp
//!   (`NCCL_DEBUG_TIMESTAMP_FORMAT`, default `[%F %T] `), then
//!   `"%s:%d:%d "` (hostname, pid, tid), then `"[%d] NCCL INFO "` (CUDA
//!   device) or, for warnings, `"[%d] %s:%d NCCL WARN "` (a newline first);
//! - `"NCCL version " MAJOR "." MINOR "." PATCH SUFFIX "+cuda" ...`
//!   (`VERSION_STRING`, `src/init.cc`);
//! - `"Using network %s"` (`src/init.cc`);
//! - `"NET/IB : Using%s %s; OOB %s:%s"` with one `" [%d]%s:%d/%s"` per device
//!   (`NCCL_IB_LLSTR`: `IB`, `RoCE` or `UNSPECIFIED`) or, for a merged
//!   device, `" [%d]={"` `"[%d] %s:%d/%s"` ... `"}"`
//!   (`src/transport/net_ib.cc`, later `net_ib/init.cc`); net plugins built
//!   from the same code print their own name (`NET/IBext_v8 : Using ...`);
//! - `"NET/Socket : Using%s"` with `" [%d]%s:%s"` per interface
//!   (`src/transport/net_socket.cc`);
//! - the connection lines of `src/transport/net.cc`:
//!   `"Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s"`
//!   (`/GDRDMA`, `(PCI)`, `/Shared`), the proxied variant with `(%d)` after
//!   the device, `[receive]`, and the older `"Channel %02d : %d[%lx] -> ..."`;
//! - `"NET/%s : GPU Direct RDMA %s for HCA %d '%s'"` (`src/graph/topo.cc`:
//!   whether the NIC and driver support it) and
//!   `"GPU Direct RDMA Disabled for GPU %d / HCA %lx (distance %d > %d)"`,
//!   `"... Enabled for GPU ... (distance %d <= %d), read %d mode %s"`
//!   (`src/graph/paths.cc`; older releases put `NET/%s : ` in front and
//!   compared with `>=`/`<`).
//!
//! What the job asked for and what NCCL found before it chose a network
//! (environment settings, net plugins, an IB transport without devices,
//! each communicator's GPU, each RoCE queue pair's GID) is parsed by
//! [`job`], whose header names those formats.
//!
//! Anything else is [`Event::Other`]: parsing never fails and never
//! allocates more than the line's own pieces.

mod job;

pub use job::{PluginEvent, QueuePair, MAX_SETTING_VALUE};

/// The longest line considered; NCCL formats into a 1024-byte buffer, so a
/// longer line is not NCCL's (or was cut by a writer) and is ignored.
pub const MAX_LINE: usize = 4096;

/// Hostname, pid and CUDA device NCCL puts in front of each line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefix<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub tid: u32,
    pub cuda_dev: i32,
    pub level: Level,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

/// Link layer of an NCCL IB device, as `NCCL_IB_LLSTR` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NcclLinkLayer {
    Ib,
    Roce,
    Unspecified,
}

/// One device of an IB-style net (`[0]mlx5_0:1/RoCE`); a merged device
/// (`[0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE}`) has several members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetDevice {
    pub index: u32,
    pub members: Vec<IbPort>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbPort {
    pub device: String,
    pub port: u16,
    pub link: NcclLinkLayer,
}

/// One interface of NET/Socket (`[0]eth0:10.0.0.1<0>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketIface {
    pub index: u32,
    pub name: String,
}

/// The transport a channel connection uses (`via ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// `NET/<net>/<dev>[(<proxy>)][/GDRDMA][(PCI)][/Shared]`.
    Net {
        net: String,
        dev: u32,
        proxy_rank: Option<u32>,
        gdr: bool,
        shared: bool,
    },
    /// Anything intra-node or not a NET transport (`P2P/IPC`, `SHM/...`,
    /// `CollNet/...`): the first path element.
    Local(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelDirection {
    Send,
    Receive,
    Unknown,
}

/// A parsed line.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `NCCL version 2.21.5+cuda12.4`.
    Version {
        version: String,
        cuda: Option<String>,
    },
    /// `Using network IB` (or `Socket`, or a plugin's name).
    Network {
        name: String,
    },
    /// `NET/IB : Using [0]mlx5_0:1/RoCE ...; OOB eth0:10.0.0.1<0>`.
    IbDevices {
        net: String,
        devices: Vec<NetDevice>,
    },
    /// `NET/Socket : Using [0]eth0:10.0.0.1<0>`.
    SocketDevices {
        ifaces: Vec<SocketIface>,
    },
    /// A channel connection line.
    Connection {
        channel: u32,
        direction: ChannelDirection,
        via: Via,
    },
    /// `NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'`: the NIC or
    /// its driver (nvidia-peermem, DMA-BUF) cannot do GPUDirect RDMA.
    GdrHcaSupport {
        net: String,
        hca_index: u32,
        hca_name: String,
        enabled: bool,
    },
    /// `GPU Direct RDMA Disabled for GPU 0 / HCA 1 (distance 5 > 4)`: the
    /// topology decision for one GPU and NIC.
    GdrPath {
        enabled: bool,
        gpu: String,
        hca: String,
        distance: Option<u32>,
        threshold: Option<u32>,
    },
    /// `NCCL_IB_HCA set to mlx5_0,mlx5_1`, `NCCL_IB_GID_INDEX set by
    /// environment to 3.`, `Comm config netName reset to NCCL_NET=Socket`:
    /// a setting the job gave NCCL.
    Env {
        name: String,
        value: String,
    },
    /// `NET/IB : No device found.` (and the empty `NET/IB : Using ; OOB`
    /// table that follows it from 2.2x): the net found no usable port.
    NetNoDevice {
        net: String,
    },
    /// A net plugin loaded, failed or absent.
    NetPlugin(PluginEvent),
    /// `ncclCommInitRank comm ... rank 0 nranks 16 cudaDev 0 nvmlDev 0
    /// busId 18000 ...`: a communicator's rank and its GPU's PCI address.
    CommInit {
        rank: u32,
        nranks: u32,
        cuda_dev: i32,
        /// `0000:18:00.0`.
        bus_id: String,
    },
    /// The GID index and GID of a RoCE queue pair.
    QueuePair(QueuePair),
    Other,
}

/// A line: its prefix when it has one, and the event.
#[derive(Debug, Clone, PartialEq)]
pub struct Line<'a> {
    pub prefix: Option<Prefix<'a>>,
    pub event: Event,
}

/// Parses one line (without its newline). Never fails.
pub fn parse_line(line: &str) -> Line<'_> {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.len() > MAX_LINE {
        return Line {
            prefix: None,
            event: Event::Other,
        };
    }
    let (prefix, body) = split_prefix(line);
    let event = match prefix.as_ref().map(|p| p.level) {
        Some(Level::Warn) => Event::Other,
        _ => parse_body(body),
    };
    Line { prefix, event }
}

const INFO_MARKER: &str = " NCCL INFO ";
const WARN_MARKER: &str = " NCCL WARN ";

/// Splits `[ts] host:pid:tid [dev] NCCL INFO body`; a line without the
/// marker is all body (NCCL prints the version line bare on stdout).
fn split_prefix(line: &str) -> (Option<Prefix<'_>>, &str) {
    let (at, level, marker) = match line.find(INFO_MARKER) {
        Some(at) => (at, Level::Info, INFO_MARKER),
        None => match line.find(WARN_MARKER) {
            Some(at) => (at, Level::Warn, WARN_MARKER),
            None => return (None, line),
        },
    };
    let head = &line[..at];
    let body = &line[at + marker.len()..];
    // The pair `host:pid:tid [dev]`, searched from the right so that a
    // timestamp in front cannot be mistaken for it.
    let tokens: Vec<&str> = head.split_ascii_whitespace().collect();
    for i in (1..tokens.len()).rev() {
        let Some(dev) = bracketed_int(tokens[i]) else {
            continue;
        };
        if let Some((host, pid, tid)) = host_pid_tid(tokens[i - 1]) {
            return (
                Some(Prefix {
                    host,
                    pid,
                    tid,
                    cuda_dev: dev,
                    level,
                }),
                body,
            );
        }
    }
    (None, body)
}

fn bracketed_int(token: &str) -> Option<i32> {
    token.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

fn host_pid_tid(token: &str) -> Option<(&str, u32, u32)> {
    let mut parts = token.rsplitn(3, ':');
    let tid = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    let host = parts.next()?;
    if host.is_empty() {
        return None;
    }
    Some((host, pid, tid))
}

fn parse_body(body: &str) -> Event {
    let body = body.trim();
    if let Some(rest) = body.strip_prefix("NCCL version ") {
        return parse_version(rest);
    }
    if let Some(rest) = body.strip_prefix("Using network ") {
        let name = rest.trim();
        if name.is_empty() {
            return Event::Other;
        }
        return Event::Network {
            name: name.to_string(),
        };
    }
    if let Some(event) = job::parse(body) {
        return event;
    }
    if body.contains("GPU Direct RDMA ") {
        return parse_gdr(body).unwrap_or(Event::Other);
    }
    if let Some(at) = body.find(" via ") {
        return parse_connection(&body[..at], &body[at + " via ".len()..]).unwrap_or(Event::Other);
    }
    if let Some(rest) = body.strip_prefix("NET/") {
        if let Some(at) = rest.find(" : Using") {
            let net = &rest[..at];
            let list = &rest[at + " : Using".len()..];
            if net.is_empty() {
                return Event::Other;
            }
            if net == "Socket" {
                return Event::SocketDevices {
                    ifaces: parse_socket_list(list),
                };
            }
            let devices = parse_ib_list(list);
            if devices.is_empty() {
                // 2.2x prints the table after "No device found" too:
                // `NET/IB : Using ; OOB eth0:10.0.0.1<0>`.
                let empty = list
                    .split("; OOB")
                    .next()
                    .is_some_and(|l| list.contains("; OOB") && matches!(l.trim(), "" | "[RO]"));
                return if empty && net.len() <= 64 {
                    Event::NetNoDevice {
                        net: net.to_string(),
                    }
                } else {
                    Event::Other
                };
            }
            return Event::IbDevices {
                net: net.to_string(),
                devices,
            };
        }
    }
    Event::Other
}

fn parse_version(rest: &str) -> Event {
    let token = rest.split_ascii_whitespace().next().unwrap_or("");
    let (version, cuda) = match token.split_once("+cuda") {
        Some((v, c)) => (v, Some(c)),
        None => (token, None),
    };
    let plausible = |s: &str| {
        !s.is_empty()
            && s.len() <= 32
            && s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    if !plausible(version) || !version.contains('.') {
        return Event::Other;
    }
    Event::Version {
        version: version.to_string(),
        cuda: cuda.filter(|c| plausible(c)).map(str::to_string),
    }
}

/// ` [0]mlx5_0:1/RoCE [1]={[2] mlx5_2:1/RoCE, [3] mlx5_3:1/RoCE} [RO]; OOB ...`.
fn parse_ib_list(list: &str) -> Vec<NetDevice> {
    let list = match list.find("; OOB") {
        Some(at) => &list[..at],
        None => list,
    };
    let mut out = Vec::new();
    let mut rest = list;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']') else { break };
        let Ok(index) = rest[..close].parse::<u32>() else {
            rest = &rest[close + 1..];
            continue;
        };
        rest = &rest[close + 1..];
        if let Some(merged) = rest.strip_prefix("={") {
            let end = merged.find('}').unwrap_or(merged.len());
            let members = merged[..end]
                .split(", ")
                .filter_map(|m| {
                    let m = m.trim();
                    let after = m.find(']').map(|i| &m[i + 1..]).unwrap_or(m);
                    parse_ib_port(after.trim())
                })
                .collect::<Vec<_>>();
            if !members.is_empty() {
                out.push(NetDevice { index, members });
            }
            rest = &merged[(end + 1).min(merged.len())..];
        } else {
            let end = rest
                .find(|c: char| c.is_ascii_whitespace())
                .unwrap_or(rest.len());
            if let Some(port) = parse_ib_port(&rest[..end]) {
                out.push(NetDevice {
                    index,
                    members: vec![port],
                });
            }
            rest = &rest[end..];
        }
    }
    out
}

/// `mlx5_0:1/RoCE`; the SHARP-capable devices of the nccl-rdma-sharp
/// plugins print `/SHARP` after it (`" [%d]%s:%d/%s%s"`).
fn parse_ib_port(s: &str) -> Option<IbPort> {
    let s = s.strip_suffix("/SHARP").unwrap_or(s);
    let (name_port, ll) = s.rsplit_once('/')?;
    let (name, port) = name_port.rsplit_once(':')?;
    let link = match ll {
        "IB" => NcclLinkLayer::Ib,
        "RoCE" => NcclLinkLayer::Roce,
        "UNSPECIFIED" => NcclLinkLayer::Unspecified,
        _ => return None,
    };
    if name.is_empty() || name.len() > 64 {
        return None;
    }
    Some(IbPort {
        device: name.to_string(),
        port: port.parse().ok()?,
        link,
    })
}

/// ` [0]eth0:10.0.0.1<0> [1]ib0:fe80::1%ib0<0>`.
fn parse_socket_list(list: &str) -> Vec<SocketIface> {
    list.split_ascii_whitespace()
        .filter_map(|tok| {
            let tok = tok.strip_prefix('[')?;
            let (index, rest) = tok.split_once(']')?;
            let name = rest.split(':').next()?;
            if name.is_empty() || name.len() > 64 {
                return None;
            }
            Some(SocketIface {
                index: index.parse().ok()?,
                name: name.to_string(),
            })
        })
        .collect()
}

/// `Channel 00/0 : 0[0] -> 8[0] [send]` + `NET/IB/0/GDRDMA`.
fn parse_connection(head: &str, via: &str) -> Option<Event> {
    let head = head.trim();
    let channel = head
        .strip_prefix("Channel ")
        .and_then(|r| r.split(['/', ' ']).next())
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if !head.contains("->") {
        return None;
    }
    let direction = if head.ends_with("[send]") {
        ChannelDirection::Send
    } else if head.ends_with("[receive]") {
        ChannelDirection::Receive
    } else {
        ChannelDirection::Unknown
    };
    let via = via.trim();
    let via = match via.strip_prefix("NET/") {
        Some(net) => parse_net_via(net)?,
        None => {
            let first = via.split('/').next().unwrap_or("");
            if first.is_empty() || first.contains(' ') {
                return None;
            }
            Via::Local(first.to_string())
        }
    };
    Some(Event::Connection {
        channel,
        direction,
        via,
    })
}

/// `IB/0/GDRDMA`, `IB/1(3)/GDRDMA(PCI)/Shared`, `Socket/0`,
/// `AWS Libfabric/2/GDRDMA`: the net's name is everything before the first
/// element that starts with the device number.
fn parse_net_via(s: &str) -> Option<Via> {
    let parts: Vec<&str> = s.split('/').collect();
    let dev_at = parts
        .iter()
        .position(|p| p.starts_with(|c: char| c.is_ascii_digit()))?;
    if dev_at == 0 {
        return None;
    }
    let net = parts[..dev_at].join("/");
    let dev_part = parts[dev_at];
    let (dev, proxy_rank) = match dev_part.split_once('(') {
        Some((d, p)) => (
            d.parse().ok()?,
            p.strip_suffix(')').and_then(|p| p.parse().ok()),
        ),
        None => (dev_part.parse().ok()?, None),
    };
    let mut gdr = false;
    let mut shared = false;
    for flag in &parts[dev_at + 1..] {
        if flag.starts_with("GDRDMA") {
            gdr = true;
        } else if *flag == "Shared" {
            shared = true;
        }
    }
    if net.len() > 64 {
        return None;
    }
    Some(Via::Net {
        net,
        dev,
        proxy_rank,
        gdr,
        shared,
    })
}

fn parse_gdr(body: &str) -> Option<Event> {
    let at = body.find("GPU Direct RDMA ")?;
    let before = body[..at].trim();
    let after = &body[at + "GPU Direct RDMA ".len()..];
    let (enabled, rest) = if let Some(r) = after.strip_prefix("Enabled for ") {
        (true, r)
    } else if let Some(r) = after.strip_prefix("Disabled for ") {
        (false, r)
    } else {
        return None;
    };
    let net = before
        .strip_prefix("NET/")
        .and_then(|r| r.strip_suffix(" :"))
        .unwrap_or("")
        .to_string();
    if let Some(hca) = rest.strip_prefix("HCA ") {
        // topo.cc: `HCA %d '%s'`.
        let (index, name) = hca.split_once(' ')?;
        let name = name.trim().strip_prefix('\'')?.strip_suffix('\'')?;
        if name.len() > 64 {
            return None;
        }
        return Some(Event::GdrHcaSupport {
            net,
            hca_index: index.parse().ok()?,
            hca_name: name.to_string(),
            enabled,
        });
    }
    // paths.cc: `GPU %d / HCA %lx (distance %d > %d)...`.
    let gpu_rest = rest.strip_prefix("GPU ")?;
    let (gpu, hca_rest) = gpu_rest.split_once(" / HCA ")?;
    let (hca, dist) = match hca_rest.split_once(" (distance ") {
        Some((h, d)) => (h, Some(d)),
        None => (hca_rest.split_whitespace().next().unwrap_or(""), None),
    };
    let (distance, threshold) = match dist {
        Some(d) => {
            let inner = d.split(')').next().unwrap_or("");
            let mut it = inner.split_ascii_whitespace();
            let a = it.next().and_then(|v| v.parse().ok());
            let _op = it.next();
            let b = it.next().and_then(|v| v.parse().ok());
            (a, b)
        }
        None => (None, None),
    };
    if gpu.len() > 32 || hca.len() > 32 || gpu.is_empty() || hca.is_empty() {
        return None;
    }
    Some(Event::GdrPath {
        enabled,
        gpu: gpu.to_string(),
        hca: hca.to_string(),
        distance,
        threshold,
    })
}
