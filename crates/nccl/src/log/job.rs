//! The lines of an NCCL debug log that say what the job asked for and what
//! NCCL found before it chose a network: the environment settings NCCL
//! reports, the net plugins it loaded or failed to load, an IB transport
//! that found no device, each communicator's GPU (its PCI bus id), and the
//! GID and MTU of each RoCE queue pair.
//!
//! Formats, from NCCL's source (2.18 to 2.28):
//! - `"%s set by environment to %lld."` (`ncclLoadParam`, src/misc/param.cc:
//!   every integer `NCCL_PARAM`, e.g. `NCCL_IB_GID_INDEX`, `NCCL_IB_TC`,
//!   `NCCL_IB_DISABLE`, `NCCL_DMABUF_ENABLE`), `"%s set by environment to
//!   %s"` (strings: `NCCL_NET_GDR_LEVEL` in src/graph/paths.cc
//!   `ncclGetLevel`, `NCCL_SOCKET_IFNAME` in src/misc/socket.cc,
//!   `NCCL_IB_ADDR_FAMILY` in net_ib.cc, `NCCL_NET_PLUGIN` in
//!   src/plugin/net.cc), `"NCCL_IB_HCA set to %s"` (net_ib.cc
//!   `ncclIbInitDevices`), `"NCCL_SOCKET_IFNAME set to %s"` and `"Comm
//!   config netName reset to NCCL_NET=%s"` (src/init.cc, 2.2x+);
//! - `"NET/IB : No device found."` (net_ib.cc), and from 2.2x the device
//!   table printed after it with no device (`"NET/IB : Using ; OOB ..."`);
//! - the plugin lines: `"NET/Plugin: Loaded net plugin %s (v%d)"`
//!   (src/net.cc, later src/plugin/net/net_v*.cc), the load failures
//!   `"NET/Plugin : Plugin load (%s) returned %d : %s"` (2.18),
//!   `"NET/Plugin: Plugin load returned %d : %s when loading %s"` (2.21),
//!   `"NET/Plugin: %s: %s"` (dlopen's error, src/plugin/plugin_open.cc,
//!   2.23+), `"External network plugin %s is unsupported"` and `"Failed to
//!   initialize NET plugin %s"` (src/plugin/net.cc, 2.27+), and the ones
//!   that say the internal IB/Socket code is used (`"No plugin found"`,
//!   `"Could not find:%s"`, `"Using internal network plugin."`);
//! - `"%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx ..."`
//!   (src/init.cc, `ncclCommInitRank` and its relatives): the GPU by its
//!   PCI address (`int64ToBusId`: `%04lx:%02lx:%02lx.%01lx`);
//! - the RoCE queue pair lines of net_ib.cc (NCCL_DEBUG_SUBSYS=NET):
//!   `"NET/IB: Dev %d Port %d qpn %d mtu %d GID %ld (%lX/%lX)"` (2.18),
//!   the same with `query_ece={...}` before `GID` (2.19), and
//!   `"NET/IB: %s %d IbDev %d Port %d qpn %d mtu %d [query_ece={...}] GID
//!   %ld (%lX/%lX) fifoRkey=0x%x fifoLkey=0x%x"` (2.20 to 2.28, `%s` being
//!   `NCCL Dev` or `NCCL MergedDev`). `Dev`/`IbDev` is the index of the
//!   `[n]` of the `NET/IB : Using` table; the GID index is the one the QP
//!   uses (the `NCCL_IB_GID_INDEX` parameter before 2.21, NCCL's own
//!   choice after); the two hex numbers are the GID's subnet prefix and
//!   interface id as the 8 bytes in memory print as a little-endian `%lX`.

use super::Event;

/// The longest setting value kept (NCCL's own buffers are 1024 bytes; the
/// settings judged here are short lists of device names).
pub const MAX_SETTING_VALUE: usize = 256;

/// What NCCL said about a net plugin.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PluginEvent {
    /// `Loaded net plugin <name> (vN)`, `Successfully loaded external
    /// network plugin <path>`.
    Loaded { name: String },
    /// A plugin library that exists but could not be loaded or is not a
    /// net plugin, with NCCL's words (dlopen's error).
    LoadFailed { detail: String },
    /// `Failed to initialize NET plugin <name>`: the net found no usable
    /// device or its init failed (the internal `IB` one included).
    InitFailed { name: String },
    /// No external plugin: NCCL uses its internal IB and Socket code.
    Internal,
}

/// One RoCE queue pair of a connection (`NET/IB: ... GID 3 (0/B00000AFFFF0000)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePair {
    /// The net's name (`IB`, or a plugin's built from the same code).
    pub net: String,
    /// Index into the net's device table (`[n]` of `NET/IB : Using`).
    pub ib_dev: u32,
    pub port: u16,
    /// `enum ibv_mtu`: 1 = 256 ... 5 = 4096.
    pub mtu: u8,
    pub gid_index: i64,
    /// The GID's 16 bytes, in network order.
    pub gid: [u8; 16],
}

/// The events of this module, or `None` for a line it does not know.
pub(super) fn parse(body: &str) -> Option<Event> {
    if let Some(e) = env(body) {
        return Some(e);
    }
    if let Some(rest) = body.strip_prefix("NET/Plugin") {
        return plugin(rest.trim_start_matches([' ', ':']).trim());
    }
    if let Some(name) = body.strip_prefix("Failed to initialize NET plugin ") {
        return Some(Event::NetPlugin(PluginEvent::InitFailed {
            name: bounded(name.trim(), 64)?,
        }));
    }
    if let Some(path) = body.strip_prefix("Successfully loaded external network plugin ") {
        return Some(Event::NetPlugin(PluginEvent::Loaded {
            name: bounded(path.trim(), MAX_SETTING_VALUE)?,
        }));
    }
    if let Some(path) = body.strip_prefix("External network plugin ") {
        let path = path.strip_suffix(" is unsupported")?;
        return Some(Event::NetPlugin(PluginEvent::LoadFailed {
            detail: bounded(
                &format!("{path} is not a net plugin NCCL supports"),
                MAX_SETTING_VALUE,
            )?,
        }));
    }
    if body.contains(" busId ") && body.contains(" nranks ") {
        return comm_init(body);
    }
    if let Some(rest) = body.strip_prefix("NET/") {
        if let Some((net, what)) = rest.split_once(':') {
            let net = net.trim();
            let what = what.trim();
            if what == "No device found." && !net.is_empty() && net.len() <= 64 {
                return Some(Event::NetNoDevice {
                    net: net.to_string(),
                });
            }
            if what.contains(" qpn ") && what.contains(" GID ") {
                return queue_pair(net, what);
            }
        }
    }
    None
}

/// `X set by environment to V[.]`, `X set to V`, `Comm config netName
/// reset to NCCL_NET=V`.
fn env(body: &str) -> Option<Event> {
    if let Some(v) = body.strip_prefix("Comm config netName reset to NCCL_NET=") {
        return setting("NCCL_NET", v);
    }
    if !body.starts_with("NCCL_") {
        return None;
    }
    let (name, value) = body
        .split_once(" set by environment to ")
        .or_else(|| body.split_once(" set to "))?;
    // param.cc ends the integer form with a full stop.
    let value = value.strip_suffix('.').unwrap_or(value);
    setting(name, value)
}

fn setting(name: &str, value: &str) -> Option<Event> {
    let plausible = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !plausible {
        return None;
    }
    Some(Event::Env {
        name: name.to_string(),
        value: bounded(value.trim(), MAX_SETTING_VALUE)?,
    })
}

fn plugin(rest: &str) -> Option<Event> {
    if let Some(r) = rest.strip_prefix("Loaded net plugin ") {
        // `%s (v%d)`: the name may hold spaces ("NCCL RDMA Plugin").
        let name = r.rsplit_once(" (v").map_or(r, |(n, _)| n);
        return Some(Event::NetPlugin(PluginEvent::Loaded {
            name: bounded(name, 64)?,
        }));
    }
    const INTERNAL: [&str; 4] = [
        "No plugin found",
        "Could not find:",
        "Using internal network plugin",
        "dlerror=",
    ];
    if INTERNAL.iter().any(|p| rest.starts_with(p)) {
        // 2.19 "dlerror=%s No plugin found (%s), using internal
        // implementation" is ENOENT as well.
        return Some(Event::NetPlugin(PluginEvent::Internal));
    }
    const NOT_A_FAILURE: [&str; 5] = [
        "Loaded coll",
        "Loaded collnet",
        "Loaded gin",
        "Closing",
        "Plugin name set by env",
    ];
    if NOT_A_FAILURE.iter().any(|p| rest.starts_with(p)) || rest.starts_with("Failed to find") {
        // A missing symbol of one plugin version: NCCL tries the others
        // and says "Loaded net plugin" when one fits.
        return Some(Event::Other);
    }
    if rest.starts_with("Plugin load") || rest.starts_with("Most recent plugin load") {
        // `Plugin load (%s) returned %d : %s` and its 2.21 forms: the
        // plugin library not installed is the ordinary case, not a failure.
        if plugin_itself_missing(rest) {
            return Some(Event::NetPlugin(PluginEvent::Internal));
        }
        return Some(Event::NetPlugin(PluginEvent::LoadFailed {
            detail: bounded(rest, MAX_SETTING_VALUE)?,
        }));
    }
    // plugin_open.cc: "%s/Plugin: %s: %s", the library and dlopen's error
    // for anything but the library itself missing.
    if rest.contains(".so") && rest.contains(": ") {
        return Some(Event::NetPlugin(PluginEvent::LoadFailed {
            detail: bounded(rest, MAX_SETTING_VALUE)?,
        }));
    }
    Some(Event::Other)
}

/// dlopen's "libnccl-net.so: cannot open shared object file: No such file
/// or directory" names the plugin itself; a missing dependency of an
/// existing plugin names that dependency first.
fn plugin_itself_missing(text: &str) -> bool {
    let Some(at) = text.find(": cannot open shared object file") else {
        return false;
    };
    let lib = text[..at].rsplit([' ', '(', ':']).next().unwrap_or("");
    lib.starts_with("libnccl-net")
}

/// `ncclCommInitRank comm 0x5581 rank 0 nranks 16 cudaDev 0 nvmlDev 0
/// busId 18000 commId 0x1a2b - Init START`.
fn comm_init(body: &str) -> Option<Event> {
    let mut rank = None;
    let mut nranks = None;
    let mut cuda_dev = None;
    let mut bus = None;
    let mut words = body.split_ascii_whitespace();
    while let Some(w) = words.next() {
        match w {
            "rank" => rank = words.next().and_then(|v| v.parse::<u32>().ok()),
            "nranks" => nranks = words.next().and_then(|v| v.parse::<u32>().ok()),
            "cudaDev" => cuda_dev = words.next().and_then(|v| v.parse::<i32>().ok()),
            "busId" => bus = words.next().and_then(|v| i64::from_str_radix(v, 16).ok()),
            _ => {}
        }
    }
    let id = bus.filter(|b| *b >= 0)?;
    Some(Event::CommInit {
        rank: rank?,
        nranks: nranks?,
        cuda_dev: cuda_dev?,
        bus_id: format!(
            "{:04x}:{:02x}:{:02x}.{:01x}",
            id >> 20,
            (id & 0xff000) >> 12,
            (id & 0xff0) >> 4,
            id & 0xf
        ),
    })
}

/// `Dev 0 Port 1 qpn 1234 mtu 5 GID 3 (0/B00000AFFFF0000)` and the 2.20+
/// `NCCL Dev 0 IbDev 0 Port 1 qpn ... GID ...`.
fn queue_pair(net: &str, what: &str) -> Option<Event> {
    if net.is_empty() || net.len() > 64 {
        return None;
    }
    let mut dev = None;
    let mut ib_dev = None;
    let mut port = None;
    let mut mtu = None;
    let mut gid_index = None;
    let mut gid = None;
    let mut words = what.split_ascii_whitespace();
    while let Some(w) = words.next() {
        match w {
            "Dev" => dev = words.next().and_then(|v| v.parse::<u32>().ok()),
            "IbDev" => ib_dev = words.next().and_then(|v| v.parse::<u32>().ok()),
            "Port" => port = words.next().and_then(|v| v.parse::<u16>().ok()),
            "mtu" => mtu = words.next().and_then(|v| v.parse::<u8>().ok()),
            "GID" => {
                gid_index = words.next().and_then(|v| v.parse::<i64>().ok());
                gid = words.next().and_then(gid_bytes);
            }
            _ => {}
        }
    }
    Some(Event::QueuePair(QueuePair {
        net: net.to_string(),
        ib_dev: ib_dev.or(dev)?,
        port: port?,
        mtu: mtu?,
        gid_index: gid_index?,
        gid: gid?,
    }))
}

/// `(0/B00000AFFFF0000)`: the subnet prefix and interface id, each the
/// GID's 8 bytes read as a little-endian `uint64_t` and printed `%lX`.
fn gid_bytes(s: &str) -> Option<[u8; 16]> {
    let (prefix, iid) = s.strip_prefix('(')?.strip_suffix(')')?.split_once('/')?;
    let parse = |h: &str| {
        (!h.is_empty() && h.len() <= 16)
            .then(|| u64::from_str_radix(h, 16).ok())
            .flatten()
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&parse(prefix)?.to_le_bytes());
    out[8..].copy_from_slice(&parse(iid)?.to_le_bytes());
    Some(out)
}

/// `s` when it is at most `max` bytes of printable text.
fn bounded(s: &str, max: usize) -> Option<String> {
    (!s.is_empty() && s.len() <= max && !s.chars().any(char::is_control)).then(|| s.to_string())
}
