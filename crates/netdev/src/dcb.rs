//! rtnetlink DCB read back: the `RTM_GETDCB` / `DCB_CMD_IEEE_GET` request
//! bytes and the pure decoder of the reply (PFC enable bitmap, APP table,
//! APP trust order). No I/O here: the caller sends the request on a
//! `NETLINK_ROUTE` socket (`crate::live::NetlinkDcb`) and hands the reply
//! back. Every malformed or truncated reply becomes a [`DcbError`], never a
//! panic.
//!
//! Layouts and numbers from `include/uapi/linux/dcbnl.h` (`struct dcbmsg`,
//! `enum dcbnl_commands`, `enum dcbnl_attrs`, `enum ieee_attrs`,
//! `enum ieee_attrs_app`, `struct ieee_pfc`, `struct dcb_app`,
//! `IEEE_8021QAZ_APP_SEL_DSCP`, `DCB_APP_SEL_PCP`),
//! `include/uapi/linux/rtnetlink.h` (`RTM_GETDCB`) and
//! `include/uapi/linux/netlink.h` (`struct nlmsghdr`, `struct nlattr`,
//! `NLMSG_ERROR`). Errors as `net/dcb/dcbnl.c` `dcb_doit` returns them:
//! EOPNOTSUPP for a netdev without `dcbnl_ops`, ENODEV for no such netdev.

pub const RTM_GETDCB: u16 = 78;
pub const DCB_CMD_IEEE_GET: u8 = 21;
pub const DCB_ATTR_IFNAME: u16 = 1;
pub const DCB_ATTR_IEEE: u16 = 13;
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

/// Why DCB could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DcbError {
    /// The netdev has no DCB support (EOPNOTSUPP): not a failure.
    #[error("DCB not supported")]
    Unsupported,
    #[error("no such netdev")]
    NoDevice,
    #[error("kernel error: {}", std::io::Error::from_raw_os_error(*errno))]
    Errno { errno: i32 },
    #[error("truncated reply: {what}")]
    Truncated { what: &'static str },
    #[error("malformed reply: {what}")]
    Malformed { what: &'static str },
    #[error("netlink: {0}")]
    Transport(String),
}

impl DcbError {
    /// Classifies a netlink error code (positive errno).
    pub fn from_errno(errno: i32) -> DcbError {
        match errno {
            libc::EOPNOTSUPP => DcbError::Unsupported,
            libc::ENODEV => DcbError::NoDevice,
            errno => DcbError::Errno { errno },
        }
    }
}

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

/// The IEEE DCB configuration of one netdev.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DcbConfig {
    /// `ieee_pfc.pfc_cap`; `None` without a PFC attribute.
    pub pfc_cap: Option<u8>,
    /// `ieee_pfc.pfc_en`: bit N set = PFC on priority N.
    pub pfc_enabled: Option<u8>,
    /// The APP table, in kernel order.
    pub apps: Vec<DcbApp>,
    /// The trust order (`DCB_ATTR_DCB_APP_TRUST_TABLE`), when the kernel
    /// and driver report one.
    pub trust_order: Option<Vec<u8>>,
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
        let mut out: Vec<(u8, u8)> = self
            .apps
            .iter()
            .filter(|a| a.selector == IEEE_8021QAZ_APP_SEL_DSCP)
            .filter_map(|a| u8::try_from(a.protocol).ok().map(|d| (d, a.priority)))
            .collect();
        out.sort_unstable();
        out
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
    let mut body = vec![libc::AF_UNSPEC as u8, DCB_CMD_IEEE_GET, 0, 0];
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
            return Err(DcbError::Truncated {
                what: "attribute header",
            });
        };
        let len = len as usize;
        if len < NLA_HDRLEN {
            return Err(DcbError::Malformed {
                what: "attribute length below its header",
            });
        }
        let Some(payload) = buf.get(at + NLA_HDRLEN..at + len) else {
            return Err(DcbError::Truncated {
                what: "attribute payload",
            });
        };
        out.push((kind & NLA_TYPE_MASK, payload));
        at += len.div_ceil(4) * 4;
    }
    Ok(out)
}

/// Decodes one reply datagram (a `RTM_GETDCB` message, or `NLMSG_ERROR`).
pub fn decode_reply(datagram: &[u8]) -> Result<DcbConfig, DcbError> {
    let (Some(len), Some(kind)) = (u32_at(datagram, 0), u16_at(datagram, 4)) else {
        return Err(DcbError::Truncated {
            what: "netlink header",
        });
    };
    let len = len as usize;
    if len < NLMSG_HDRLEN {
        return Err(DcbError::Malformed {
            what: "netlink length below its header",
        });
    }
    let Some(body) = datagram.get(NLMSG_HDRLEN..len) else {
        return Err(DcbError::Truncated {
            what: "netlink message",
        });
    };
    match kind {
        NLMSG_ERROR => {
            // struct nlmsgerr { int error; struct nlmsghdr msg; }
            let Some(code) = u32_at(body, 0) else {
                return Err(DcbError::Truncated {
                    what: "netlink error code",
                });
            };
            let code = code as i32;
            if code == 0 {
                Err(DcbError::Malformed {
                    what: "acknowledgement instead of a DCB reply",
                })
            } else {
                Err(DcbError::from_errno(code.saturating_neg()))
            }
        }
        RTM_GETDCB => decode_payload(body),
        _ => Err(DcbError::Malformed {
            what: "unexpected message type",
        }),
    }
}

/// Decodes the payload of a `RTM_GETDCB` reply: `struct dcbmsg`, then the
/// top-level attributes.
pub fn decode_payload(body: &[u8]) -> Result<DcbConfig, DcbError> {
    let Some(dcbmsg) = body.get(..DCBMSG_LEN) else {
        return Err(DcbError::Truncated { what: "dcbmsg" });
    };
    if dcbmsg[1] != DCB_CMD_IEEE_GET {
        return Err(DcbError::Malformed {
            what: "reply to another DCB command",
        });
    }
    let top = attrs(&body[DCBMSG_LEN..])?;
    let Some((_, ieee)) = top.iter().find(|(k, _)| *k == DCB_ATTR_IEEE) else {
        return Err(DcbError::Malformed {
            what: "no DCB_ATTR_IEEE",
        });
    };
    let mut config = DcbConfig::default();
    for (kind, payload) in attrs(ieee)? {
        match kind {
            DCB_ATTR_IEEE_PFC => {
                // struct ieee_pfc { u8 pfc_cap; u8 pfc_en; ... }: only the
                // first two bytes are used; the kernel sends all 136.
                let (Some(&cap), Some(&en)) = (payload.first(), payload.get(1)) else {
                    return Err(DcbError::Truncated { what: "ieee_pfc" });
                };
                config.pfc_cap = Some(cap);
                config.pfc_enabled = Some(en);
            }
            DCB_ATTR_IEEE_APP_TABLE => {
                for (app_kind, app) in attrs(payload)? {
                    if app_kind != DCB_ATTR_IEEE_APP && app_kind != DCB_ATTR_DCB_APP {
                        continue;
                    }
                    if app.len() < DCB_APP_LEN {
                        return Err(DcbError::Truncated { what: "dcb_app" });
                    }
                    config.apps.push(DcbApp {
                        selector: app[0],
                        priority: app[1],
                        protocol: u16::from_ne_bytes([app[2], app[3]]),
                    });
                }
            }
            DCB_ATTR_DCB_APP_TRUST_TABLE => {
                let mut order = Vec::new();
                for (sel_kind, sel) in attrs(payload)? {
                    if sel_kind != DCB_ATTR_IEEE_APP && sel_kind != DCB_ATTR_DCB_APP {
                        continue;
                    }
                    let Some(&selector) = sel.first() else {
                        return Err(DcbError::Truncated {
                            what: "trust selector",
                        });
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
