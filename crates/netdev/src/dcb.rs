//! rtnetlink DCB read back: the `RTM_GETDCB` / `DCB_CMD_IEEE_GET` (and
//! `DCB_CMD_CEE_GET`) request bytes and the pure decoder of the reply: PFC
//! enable bitmap, APP table, APP trust order, ETS (priority -> traffic
//! class, TSA, bandwidth share), the port buffers (priority -> buffer,
//! sizes), the DCBX mode and what the link partner (the switch port)
//! advertised through DCBX: its PFC bitmap, APP table and ETS / CEE
//! priority groups. No I/O here: the caller sends the request on a
//! `NETLINK_ROUTE` socket (`crate::live::NetlinkDcb`) and hands the reply
//! back. Every malformed or truncated reply becomes a [`DcbError`], never a
//! panic.
//!
//! Layouts and numbers from `include/uapi/linux/dcbnl.h` (`struct dcbmsg`,
//! `enum dcbnl_commands`, `enum dcbnl_attrs`, `enum ieee_attrs`,
//! `enum ieee_attrs_app`, `struct ieee_pfc`, `struct dcb_app`,
//! `IEEE_8021QAZ_APP_SEL_DSCP`, `DCB_APP_SEL_PCP`, `struct ieee_ets`,
//! `struct dcbnl_buffer`, `enum cee_attrs`, `enum peer_app_attr`,
//! `struct cee_pg`, `struct cee_pfc`, `DCB_CAP_DCBX_*`),
//! `include/uapi/linux/rtnetlink.h` (`RTM_GETDCB`) and
//! `include/uapi/linux/netlink.h` (`struct nlmsghdr`, `struct nlattr`,
//! `NLMSG_ERROR`). Errors as `net/dcb/dcbnl.c` `dcb_doit` returns them:
//! EOPNOTSUPP for a netdev without `dcbnl_ops`, ENODEV for no such netdev.

mod error;

pub use error::{DcbError, DcbFault, DcbPart};
use roce_host::Priorities;

pub const RTM_GETDCB: u16 = 78;
pub const DCB_CMD_IEEE_GET: u8 = 21;
pub const DCB_CMD_CEE_GET: u8 = 26;
pub const DCB_ATTR_IFNAME: u16 = 1;
pub const DCB_ATTR_IEEE: u16 = 13;
pub const DCB_ATTR_DCBX: u16 = 14;
pub const DCB_ATTR_CEE: u16 = 16;
pub const DCB_ATTR_IEEE_ETS: u16 = 1;
pub const DCB_ATTR_IEEE_PEER_ETS: u16 = 4;
pub const DCB_ATTR_IEEE_PEER_PFC: u16 = 5;
pub const DCB_ATTR_IEEE_PEER_APP: u16 = 6;
pub const DCB_ATTR_DCB_BUFFER: u16 = 10;
pub const DCB_ATTR_CEE_PEER_PG: u16 = 1;
pub const DCB_ATTR_CEE_PEER_PFC: u16 = 2;
pub const DCB_ATTR_CEE_PEER_APP_TABLE: u16 = 3;
pub const DCB_ATTR_CEE_PEER_APP: u16 = 2;
/// `DCB_CAP_DCBX_*` bits of the DCBX mode.
pub const DCB_CAP_DCBX_HOST: u8 = 0x01;
pub const DCB_CAP_DCBX_LLD_MANAGED: u8 = 0x02;
pub const DCB_CAP_DCBX_VER_CEE: u8 = 0x04;
pub const DCB_CAP_DCBX_VER_IEEE: u8 = 0x08;
pub const DCB_CAP_DCBX_STATIC: u8 = 0x10;
/// `IEEE_8021QAZ_TSA_*`.
pub const TSA_STRICT: u8 = 0;
pub const TSA_CB_SHAPER: u8 = 1;
pub const TSA_ETS: u8 = 2;
pub const TSA_VENDOR: u8 = 255;
pub const DCB_ATTR_IEEE_PFC: u16 = 2;
pub const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
pub const DCB_ATTR_DCB_APP_TRUST_TABLE: u16 = 11;
pub const DCB_ATTR_IEEE_APP: u16 = 1;
pub const DCB_ATTR_DCB_APP: u16 = 2;
pub const IEEE_8021QAZ_APP_SEL_DSCP: u8 = 5;
pub const DCB_APP_SEL_PCP: u8 = 255;

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_HDRLEN: usize = 16;
const NLA_HDRLEN: usize = 4;
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `sizeof(struct dcbmsg)`.
const DCBMSG_LEN: usize = 4;
/// `sizeof(struct dcb_app)`.
const DCB_APP_LEN: usize = 4;
/// `struct ieee_ets`: willing 0, ets_cap 1, cbs 2, tc_tx_bw 3..11,
/// tc_rx_bw 11..19, tc_tsa 19..27, prio_tc 27..35 (then the recommended
/// tables, not read).
const ETS_TX_BW: usize = 3;
const ETS_TSA: usize = 19;
const ETS_PRIO_TC: usize = 27;
const ETS_MIN_LEN: usize = 35;
/// `struct dcbnl_buffer`: prio2buffer 0..8, buffer_size (u32) 8..40,
/// total_size (u32) 40..44.
const BUFFER_LEN: usize = 44;
/// `struct cee_pg`: willing, error, pg_en, tcs_supported, pg_bw 4..12,
/// prio_pg 12..20.
const CEE_PG_LEN: usize = 20;
/// `struct cee_pfc`: willing, error, pfc_en, tcs_supported.
const CEE_PFC_LEN: usize = 4;

/// Which APP selector the port trusts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// 802.1p PCP (the default when no DSCP rule exists).
    Pcp,
    /// DSCP (selector 5).
    Dscp,
    /// An explicitly empty trust table: the port trusts no field.
    None,
    /// Another selector first in the trust table.
    Other(u8),
}

impl Trust {
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Pcp => "pcp",
            Trust::Dscp => "dscp",
            Trust::None => "none",
            Trust::Other(_) => "other",
        }
    }
}

/// One APP table entry (`struct dcb_app`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcbApp {
    pub selector: u8,
    pub priority: u8,
    pub protocol: u16,
}

/// ETS (`struct ieee_ets`), the parts that decide how priorities share
/// the link: indexed by traffic class except `prio_tc` (by priority).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ets {
    pub willing: bool,
    /// Traffic classes the device supports (`ets_cap`).
    pub ets_cap: u8,
    /// Transmit bandwidth share per traffic class in percent (`tc_tx_bw`);
    /// meaningful for ETS traffic classes only.
    pub tc_tx_bw: [u8; 8],
    /// Transmission selection algorithm per traffic class (`tc_tsa`,
    /// `TSA_*`).
    pub tc_tsa: [u8; 8],
    /// Traffic class of each priority (`prio_tc`).
    pub prio_tc: [u8; 8],
}

/// Name of a transmission selection algorithm as `dcb ets` prints it.
pub fn tsa_name(tsa: u8) -> &'static str {
    match tsa {
        TSA_STRICT => "strict",
        TSA_CB_SHAPER => "cbs",
        TSA_ETS => "ets",
        TSA_VENDOR => "vendor",
        _ => "reserved",
    }
}

/// The port's receive buffers (`struct dcbnl_buffer`, mlx5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Buffers {
    /// Buffer of each priority.
    pub prio2buffer: [u8; 8],
    /// Size of each buffer in bytes.
    pub buffer_size: [u32; 8],
    /// Total port buffer in bytes.
    pub total_size: u32,
}

impl Buffers {
    /// Size of the buffer priority `priority` lands in.
    pub fn size_for(&self, priority: u8) -> Option<u32> {
        let b = *self.prio2buffer.get(usize::from(priority))?;
        self.buffer_size.get(usize::from(b)).copied()
    }
}

/// Which DCBX flavour the peer information came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerStandard {
    Ieee,
    Cee,
}

impl PeerStandard {
    pub fn as_str(self) -> &'static str {
        match self {
            PeerStandard::Ieee => "ieee",
            PeerStandard::Cee => "cee",
        }
    }
}

/// What the link partner advertised through DCBX, as the driver or the
/// LLDP agent holds it. Each part is `None` where the driver does not
/// offer it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DcbPeer {
    pub standard: Option<PeerStandard>,
    /// Peer PFC enable set (`DCB_ATTR_IEEE_PEER_PFC` / `_CEE_PEER_PFC`).
    pub pfc_enabled: Option<Priorities>,
    /// Peer APP table (`DCB_ATTR_IEEE_PEER_APP` / `_CEE_PEER_APP_TABLE`).
    pub apps: Option<Vec<DcbApp>>,
    /// Peer priority -> traffic class (IEEE peer ETS) or priority group (CEE).
    pub prio_tc: Option<[u8; 8]>,
}

impl DcbPeer {
    /// Whether the peer told anything at all.
    pub fn is_empty(&self) -> bool {
        self.pfc_enabled.is_none() && self.apps.is_none() && self.prio_tc.is_none()
    }

    /// The peer's DSCP -> priority entries, in DSCP order.
    pub fn dscp_map(&self) -> Option<Vec<(u8, u8)>> {
        self.apps.as_deref().map(dscp_map)
    }
}

/// DCBX mode name from the `DCB_CAP_DCBX_*` bits: who runs DCBX (host LLDP
/// agent, firmware) and in which version; "off" when no bit is set.
///
/// Version bits without `DCB_CAP_DCBX_HOST` mean the device negotiates on
/// its own: mlx5 (`mlx5e_dcbnl_initialize` in
/// `drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c`) reports
/// `DCB_CAP_DCBX_VER_CEE | DCB_CAP_DCBX_VER_IEEE` (0x0c) when its firmware
/// runs DCBX and adds `DCB_CAP_DCBX_HOST` (0x0d) only in host mode; it never
/// sets `DCB_CAP_DCBX_LLD_MANAGED`. Both version bits name the mode
/// "firmware": the firmware answers whichever version the switch speaks.
pub fn dcbx_mode_name(mode: u8) -> &'static str {
    let ieee = mode & DCB_CAP_DCBX_VER_IEEE != 0;
    let cee = mode & DCB_CAP_DCBX_VER_CEE != 0;
    let managed = if mode & DCB_CAP_DCBX_HOST != 0 {
        "host"
    } else if mode & DCB_CAP_DCBX_LLD_MANAGED != 0 || ieee || cee {
        "firmware"
    } else if mode & DCB_CAP_DCBX_STATIC != 0 {
        return "static";
    } else {
        return "off";
    };
    match (managed, ieee, cee) {
        ("firmware", true, true) => "firmware",
        ("firmware", true, false) => "firmware_ieee",
        ("firmware", false, true) => "firmware_cee",
        ("firmware", false, false) => "firmware",
        (_, true, false) => "host_ieee",
        (_, false, true) => "host_cee",
        _ => "host",
    }
}

/// Whether CEE is the DCBX version in operation: the CEE bit without the
/// IEEE bit. A device that sets both (mlx5 always does) answers the IEEE
/// GET with everything it knows; its CEE GET costs the driver far more
/// (on mlx5 `dcbnl_cee_fill` calls `getpgbwgcfgtx` once per priority
/// group, each a full `ieee_getets`) and adds nothing.
pub fn cee_is_operating(mode: u8) -> bool {
    mode & DCB_CAP_DCBX_VER_CEE != 0 && mode & DCB_CAP_DCBX_VER_IEEE == 0
}

fn dscp_map(apps: &[DcbApp]) -> Vec<(u8, u8)> {
    let mut out: Vec<(u8, u8)> = apps
        .iter()
        .filter(|a| a.selector == IEEE_8021QAZ_APP_SEL_DSCP)
        .filter_map(|a| u8::try_from(a.protocol).ok().map(|d| (d, a.priority)))
        .collect();
    out.sort_unstable();
    out
}

/// The IEEE DCB configuration of one netdev.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DcbConfig {
    /// `ieee_pfc.pfc_cap`; `None` without a PFC attribute.
    pub pfc_cap: Option<u8>,
    /// `ieee_pfc.pfc_en`: the priorities with PFC on.
    pub pfc_enabled: Option<Priorities>,
    /// The APP table, in kernel order.
    pub apps: Vec<DcbApp>,
    /// The trust order (`DCB_ATTR_DCB_APP_TRUST_TABLE`), when the kernel
    /// and driver report one.
    pub trust_order: Option<Vec<u8>>,
    /// ETS (`DCB_ATTR_IEEE_ETS`), when the driver reports it.
    pub ets: Option<Ets>,
    /// Port buffers (`DCB_ATTR_DCB_BUFFER`), when the driver has them.
    pub buffers: Option<Buffers>,
    /// DCBX mode bits (`DCB_ATTR_DCBX`), when the driver reports them.
    pub dcbx: Option<u8>,
    /// What the switch port advertised through DCBX.
    pub peer: DcbPeer,
}

impl DcbConfig {
    /// Trust from the trust table when present, else inferred: DSCP when
    /// DSCP APP entries exist (that is how mlx5 and ice switch to DSCP
    /// trust), PCP otherwise.
    pub fn trust(&self) -> Trust {
        match &self.trust_order {
            Some(order) => match order.first() {
                None => Trust::None,
                Some(&IEEE_8021QAZ_APP_SEL_DSCP) => Trust::Dscp,
                Some(&DCB_APP_SEL_PCP) => Trust::Pcp,
                Some(&other) => Trust::Other(other),
            },
            None if self
                .apps
                .iter()
                .any(|a| a.selector == IEEE_8021QAZ_APP_SEL_DSCP) =>
            {
                Trust::Dscp
            }
            None => Trust::Pcp,
        }
    }

    /// Whether the trust came from the kernel's trust table.
    pub fn trust_reported(&self) -> bool {
        self.trust_order.is_some()
    }

    /// DSCP → priority rules, in DSCP order.
    pub fn dscp_map(&self) -> Vec<(u8, u8)> {
        dscp_map(&self.apps)
    }

    /// Traffic class of `priority` from ETS.
    pub fn tc_of(&self, priority: u8) -> Option<u8> {
        self.ets
            .as_ref()
            .and_then(|e| e.prio_tc.get(usize::from(priority)).copied())
    }
}

fn push_attr(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = NLA_HDRLEN + payload.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// The `RTM_GETDCB` `DCB_CMD_IEEE_GET` request for `ifname`, a whole
/// netlink message (header included).
pub fn request(ifname: &str, seq: u32) -> Vec<u8> {
    request_cmd(ifname, seq, DCB_CMD_IEEE_GET)
}

/// A `RTM_GETDCB` request with another get command (`DCB_CMD_CEE_GET`).
pub fn request_cmd(ifname: &str, seq: u32, cmd: u8) -> Vec<u8> {
    let mut body = vec![libc::AF_UNSPEC as u8, cmd, 0, 0];
    let mut name = ifname.as_bytes().to_vec();
    name.push(0);
    push_attr(&mut body, DCB_ATTR_IFNAME, &name);
    let mut out = Vec::with_capacity(NLMSG_HDRLEN + body.len());
    out.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
    out.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&body);
    out
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at + 2)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// Iterates the attributes of `buf`: (type without flags, payload).
fn attrs(buf: &[u8]) -> Result<Vec<(u16, &[u8])>, DcbError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let (Some(len), Some(kind)) = (u16_at(buf, at), u16_at(buf, at + 2)) else {
            return Err(DcbError::Truncated(DcbPart::AttributeHeader));
        };
        let len = len as usize;
        if len < NLA_HDRLEN {
            return Err(DcbError::Malformed(DcbFault::AttributeLength));
        }
        let Some(payload) = buf.get(at + NLA_HDRLEN..at + len) else {
            return Err(DcbError::Truncated(DcbPart::AttributePayload));
        };
        out.push((kind & NLA_TYPE_MASK, payload));
        at += len.div_ceil(4) * 4;
    }
    Ok(out)
}

/// Decodes one reply datagram (a `RTM_GETDCB` message, or `NLMSG_ERROR`).
pub fn decode_reply(datagram: &[u8]) -> Result<DcbConfig, DcbError> {
    let (Some(len), Some(kind)) = (u32_at(datagram, 0), u16_at(datagram, 4)) else {
        return Err(DcbError::Truncated(DcbPart::NetlinkHeader));
    };
    let len = len as usize;
    if len < NLMSG_HDRLEN {
        return Err(DcbError::Malformed(DcbFault::NetlinkLength));
    }
    let Some(body) = datagram.get(NLMSG_HDRLEN..len) else {
        return Err(DcbError::Truncated(DcbPart::NetlinkMessage));
    };
    match kind {
        NLMSG_ERROR => {
            // struct nlmsgerr { int error; struct nlmsghdr msg; }
            let Some(code) = u32_at(body, 0) else {
                return Err(DcbError::Truncated(DcbPart::NetlinkErrorCode));
            };
            let code = code as i32;
            if code == 0 {
                Err(DcbError::Malformed(DcbFault::Acknowledgement))
            } else {
                Err(DcbError::from_errno(code.saturating_neg()))
            }
        }
        RTM_GETDCB => decode_payload(body),
        _ => Err(DcbError::Malformed(DcbFault::MessageType)),
    }
}

/// Decodes the payload of a `RTM_GETDCB` reply: `struct dcbmsg`, then the
/// top-level attributes.
pub fn decode_payload(body: &[u8]) -> Result<DcbConfig, DcbError> {
    let Some(dcbmsg) = body.get(..DCBMSG_LEN) else {
        return Err(DcbError::Truncated(DcbPart::Dcbmsg));
    };
    if dcbmsg[1] != DCB_CMD_IEEE_GET {
        return Err(DcbError::Malformed(DcbFault::OtherCommand));
    }
    let top = attrs(&body[DCBMSG_LEN..])?;
    let Some((_, ieee)) = top.iter().find(|(k, _)| *k == DCB_ATTR_IEEE) else {
        return Err(DcbError::Malformed(DcbFault::NoIeee));
    };
    let mut config = DcbConfig {
        dcbx: dcbx_attr(&top)?,
        ..DcbConfig::default()
    };
    for (kind, payload) in attrs(ieee)? {
        match kind {
            DCB_ATTR_IEEE_ETS => config.ets = Some(decode_ets(payload)?),
            DCB_ATTR_IEEE_PEER_ETS => {
                config.peer.standard = Some(PeerStandard::Ieee);
                config.peer.prio_tc = Some(decode_ets(payload)?.prio_tc);
            }
            DCB_ATTR_DCB_BUFFER => config.buffers = Some(decode_buffer(payload)?),
            DCB_ATTR_IEEE_PEER_PFC => {
                let Some(&en) = payload.get(1) else {
                    return Err(DcbError::Truncated(DcbPart::PeerIeeePfc));
                };
                config.peer.standard = Some(PeerStandard::Ieee);
                config.peer.pfc_enabled = Some(Priorities::from_bits(en));
            }
            DCB_ATTR_IEEE_PEER_APP => {
                config.peer.standard = Some(PeerStandard::Ieee);
                config.peer.apps = Some(app_list(payload, &[DCB_ATTR_IEEE_APP])?);
            }
            DCB_ATTR_IEEE_PFC => {
                // struct ieee_pfc { u8 pfc_cap; u8 pfc_en; ... }: only the
                // first two bytes are used; the kernel sends all 136.
                let (Some(&cap), Some(&en)) = (payload.first(), payload.get(1)) else {
                    return Err(DcbError::Truncated(DcbPart::IeeePfc));
                };
                config.pfc_cap = Some(cap);
                config.pfc_enabled = Some(Priorities::from_bits(en));
            }
            DCB_ATTR_IEEE_APP_TABLE => {
                config
                    .apps
                    .extend(app_list(payload, &[DCB_ATTR_IEEE_APP, DCB_ATTR_DCB_APP])?);
            }
            DCB_ATTR_DCB_APP_TRUST_TABLE => {
                let mut order = Vec::new();
                for (sel_kind, sel) in attrs(payload)? {
                    if sel_kind != DCB_ATTR_IEEE_APP && sel_kind != DCB_ATTR_DCB_APP {
                        continue;
                    }
                    let Some(&selector) = sel.first() else {
                        return Err(DcbError::Truncated(DcbPart::TrustSelector));
                    };
                    order.push(selector);
                }
                config.trust_order = Some(order);
            }
            _ => {}
        }
    }
    Ok(config)
}

/// The `struct dcb_app` entries of an APP nest whose entry type is one of
/// `kinds` (other entries, such as the peer APP info, are skipped).
fn app_list(payload: &[u8], kinds: &[u16]) -> Result<Vec<DcbApp>, DcbError> {
    let mut out = Vec::new();
    for (app_kind, app) in attrs(payload)? {
        if !kinds.contains(&app_kind) {
            continue;
        }
        if app.len() < DCB_APP_LEN {
            return Err(DcbError::Truncated(DcbPart::DcbApp));
        }
        out.push(DcbApp {
            selector: app[0],
            priority: app[1],
            protocol: u16::from_ne_bytes([app[2], app[3]]),
        });
    }
    Ok(out)
}

fn array8(b: &[u8], at: usize) -> [u8; 8] {
    let mut out = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        out.copy_from_slice(s);
    }
    out
}

/// `struct ieee_ets` (the kernel sends all 59 bytes; the first 35 carry
/// what is read).
fn decode_ets(payload: &[u8]) -> Result<Ets, DcbError> {
    if payload.len() < ETS_MIN_LEN {
        return Err(DcbError::Truncated(DcbPart::IeeeEts));
    }
    let ets = Ets {
        willing: payload[0] != 0,
        ets_cap: payload[1],
        tc_tx_bw: array8(payload, ETS_TX_BW),
        tc_tsa: array8(payload, ETS_TSA),
        prio_tc: array8(payload, ETS_PRIO_TC),
    };
    if ets.prio_tc.iter().any(|&tc| tc > 7) {
        return Err(DcbError::Malformed(DcbFault::PrioTcAbove7));
    }
    Ok(ets)
}

/// `struct dcbnl_buffer`.
fn decode_buffer(payload: &[u8]) -> Result<Buffers, DcbError> {
    if payload.len() < BUFFER_LEN {
        return Err(DcbError::Truncated(DcbPart::DcbnlBuffer));
    }
    let mut b = Buffers {
        prio2buffer: array8(payload, 0),
        ..Buffers::default()
    };
    if b.prio2buffer.iter().any(|&x| x > 7) {
        return Err(DcbError::Malformed(DcbFault::Prio2BufferAbove7));
    }
    for (i, size) in b.buffer_size.iter_mut().enumerate() {
        *size = u32_at(payload, 8 + 4 * i).unwrap_or(0);
    }
    b.total_size = u32_at(payload, 40).unwrap_or(0);
    Ok(b)
}

/// `DCB_ATTR_DCBX` at the top level (a u8), when present.
fn dcbx_attr(top: &[(u16, &[u8])]) -> Result<Option<u8>, DcbError> {
    match top.iter().find(|(k, _)| *k == DCB_ATTR_DCBX) {
        None => Ok(None),
        Some((_, p)) => match p.first() {
            Some(&v) => Ok(Some(v)),
            None => Err(DcbError::Truncated(DcbPart::DcbxMode)),
        },
    }
}

/// The CEE part of a `DCB_CMD_CEE_GET` reply (after `struct dcbmsg`
/// and the top-level attributes, as in [`decode_payload`]): the peer's
/// priority groups, PFC and APP table, and the DCBX mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CeeReply {
    pub peer: DcbPeer,
    pub dcbx: Option<u8>,
}

/// Decodes the payload of a `RTM_GETDCB` `DCB_CMD_CEE_GET` reply.
pub fn decode_cee_payload(body: &[u8]) -> Result<CeeReply, DcbError> {
    let Some(dcbmsg) = body.get(..DCBMSG_LEN) else {
        return Err(DcbError::Truncated(DcbPart::Dcbmsg));
    };
    if dcbmsg[1] != DCB_CMD_CEE_GET {
        return Err(DcbError::Malformed(DcbFault::OtherCommand));
    }
    let top = attrs(&body[DCBMSG_LEN..])?;
    let mut out = CeeReply {
        dcbx: dcbx_attr(&top)?,
        ..CeeReply::default()
    };
    let Some((_, cee)) = top.iter().find(|(k, _)| *k == DCB_ATTR_CEE) else {
        return Ok(out);
    };
    for (kind, payload) in attrs(cee)? {
        match kind {
            DCB_ATTR_CEE_PEER_PG => {
                if payload.len() < CEE_PG_LEN {
                    return Err(DcbError::Truncated(DcbPart::CeePg));
                }
                let prio_pg = array8(payload, 12);
                // 15 is CEE's "no bandwidth limit" group; anything else
                // above 7 is not a group.
                if prio_pg.iter().any(|&g| g > 7 && g != 15) {
                    return Err(DcbError::Malformed(DcbFault::PrioPgAbove7));
                }
                out.peer.prio_tc = Some(prio_pg);
            }
            DCB_ATTR_CEE_PEER_PFC => {
                if payload.len() < CEE_PFC_LEN {
                    return Err(DcbError::Truncated(DcbPart::CeePfc));
                }
                out.peer.pfc_enabled = Some(Priorities::from_bits(payload[2]));
            }
            DCB_ATTR_CEE_PEER_APP_TABLE => {
                out.peer.apps = Some(app_list(payload, &[DCB_ATTR_CEE_PEER_APP])?);
            }
            _ => {}
        }
    }
    if !out.peer.is_empty() {
        out.peer.standard = Some(PeerStandard::Cee);
    }
    Ok(out)
}
