//! Pure netlink encoding and decoding: constants, the [`MessageBuilder`],
//! and the iterators over a datagram's messages and a payload's attributes.
//!
//! Layout and constants from `include/uapi/linux/netlink.h`: a message is a
//! 16-byte `struct nlmsghdr` (`nlmsg_len` u32 including the header, type
//! u16, flags u16, seq u32, pid u32) followed by its payload, the next
//! message starting at the length rounded up to 4 (`NLMSG_ALIGN`). An
//! attribute is a 4-byte `struct nlattr` (`nla_len` u16 including the
//! header, `nla_type` u16 whose two top bits are `NLA_F_NESTED` and
//! `NLA_F_NET_BYTEORDER`) followed by its payload, padded to 4
//! (`NLA_ALIGN`). Integers are in host byte order unless
//! `NLA_F_NET_BYTEORDER` says otherwise.
//!
//! Nothing here does I/O, so every function can be fed arbitrary bytes
//! (tests, fuzzing); a malformed buffer yields one error item and ends the
//! iteration, never a panic or a loop that does not advance.

use crate::error::NlError;

/// `sizeof(struct nlmsghdr)`.
pub const NLMSG_HDRLEN: usize = 16;
/// `sizeof(struct nlattr)`.
pub const NLA_HDRLEN: usize = 4;

pub const NLMSG_NOOP: u16 = 0x1;
pub const NLMSG_ERROR: u16 = 0x2;
pub const NLMSG_DONE: u16 = 0x3;
pub const NLMSG_OVERRUN: u16 = 0x4;
/// Types below this are control messages.
pub const NLMSG_MIN_TYPE: u16 = 0x10;

pub const NLM_F_REQUEST: u16 = 0x01;
pub const NLM_F_MULTI: u16 = 0x02;
pub const NLM_F_ACK: u16 = 0x04;
pub const NLM_F_ECHO: u16 = 0x08;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_DUMP_FILTERED: u16 = 0x20;
pub const NLM_F_ROOT: u16 = 0x100;
pub const NLM_F_MATCH: u16 = 0x200;
pub const NLM_F_DUMP: u16 = NLM_F_ROOT | NLM_F_MATCH;
/// On `NLMSG_ERROR`: the original request's payload was left out.
pub const NLM_F_CAPPED: u16 = 0x100;
/// On `NLMSG_ERROR`: extended-ack attributes follow.
pub const NLM_F_ACK_TLVS: u16 = 0x200;

pub const NLA_F_NESTED: u16 = 1 << 15;
pub const NLA_F_NET_BYTEORDER: u16 = 1 << 14;
pub const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);

/// `enum nlmsgerr_attrs`: the extended-ack text.
pub const NLMSGERR_ATTR_MSG: u16 = 1;

/// `NLMSG_ALIGN` / `NLA_ALIGN`.
pub const fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// One netlink message, owned (what [`crate::Socket::request`] returns).
/// `payload` is everything after the `nlmsghdr`: the family header (if the
/// family has one) and then the attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlMessage {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub payload: Vec<u8>,
}

impl NlMessage {
    /// The attributes after a family header of `header_len` bytes (0 for
    /// RDMA nldev, 4 for `struct genlmsghdr`, `struct dcbmsg`, ...).
    pub fn attrs(&self, header_len: usize) -> Result<Attrs<'_>, NlError> {
        attrs_after(&self.payload, header_len)
    }
}

/// The attributes of `payload` after a family header of `header_len` bytes
/// (rounded up to 4, as `nlmsg_attrdata` does).
pub fn attrs_after(payload: &[u8], header_len: usize) -> Result<Attrs<'_>, NlError> {
    let start = align4(header_len);
    if header_len > payload.len() {
        return Err(NlError::Truncated {
            what: "family header",
            need: header_len,
            have: payload.len(),
        });
    }
    // A header ending within the last 3 bytes leaves no attributes.
    Ok(attrs(payload.get(start..).unwrap_or(&[])))
}

/// One message borrowed from a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawMessage<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
    pub payload: &'a [u8],
}

impl RawMessage<'_> {
    pub fn to_message(&self) -> NlMessage {
        NlMessage {
            kind: self.kind,
            flags: self.flags,
            seq: self.seq,
            payload: self.payload.to_vec(),
        }
    }
}

/// What is left of `buf` from `pos`: `None`, and `done` from then on, once
/// nothing is.
fn unread<'a>(buf: &'a [u8], pos: usize, done: &mut bool) -> Option<&'a [u8]> {
    if *done {
        return None;
    }
    let rest = buf.get(pos..).unwrap_or(&[]);
    if rest.is_empty() {
        *done = true;
        return None;
    }
    Some(rest)
}

/// Iterates the messages of one datagram.
pub fn messages(buf: &[u8]) -> Messages<'_> {
    Messages {
        buf,
        pos: 0,
        done: false,
    }
}

#[derive(Debug, Clone)]
pub struct Messages<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<RawMessage<'a>, NlError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = unread(self.buf, self.pos, &mut self.done)?;
        let fail = |this: &mut Self, e| {
            this.done = true;
            Some(Err(e))
        };
        let (Some(len), Some(kind), Some(flags), Some(seq), Some(pid)) = (
            read_u32(rest, 0),
            read_u16(rest, 4),
            read_u16(rest, 6),
            read_u32(rest, 8),
            read_u32(rest, 12),
        ) else {
            return fail(
                self,
                NlError::Truncated {
                    what: "netlink message header",
                    need: NLMSG_HDRLEN,
                    have: rest.len(),
                },
            );
        };
        let len = len as usize;
        if len < NLMSG_HDRLEN {
            return fail(
                self,
                NlError::Malformed {
                    what: "netlink message",
                    detail: format!("nlmsg_len {len} is below the header size {NLMSG_HDRLEN}"),
                },
            );
        }
        let Some(payload) = rest.get(NLMSG_HDRLEN..len) else {
            return fail(
                self,
                NlError::Truncated {
                    what: "netlink message",
                    need: len,
                    have: rest.len(),
                },
            );
        };
        // The last message of a datagram may lack its padding.
        self.pos = self.pos.saturating_add(align4(len).min(rest.len()));
        Some(Ok(RawMessage {
            kind,
            flags,
            seq,
            pid,
            payload,
        }))
    }
}

/// What an `NLMSG_ERROR` (or an `NLMSG_DONE` with a status) says: `errno`
/// is positive (0 for an ack), `message` is the extended-ack text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    pub errno: i32,
    pub message: Option<String>,
}

/// Parses the payload of an `NLMSG_ERROR` message (`struct nlmsgerr`: an
/// `int error`, the request's `nlmsghdr`, its payload unless
/// `NLM_F_CAPPED`, then extended-ack attributes if `NLM_F_ACK_TLVS`).
/// Only the error field is required; a damaged ack tail loses the text.
pub fn parse_error(payload: &[u8], flags: u16) -> Result<ErrorReply, NlError> {
    let Some(raw) = read_u32(payload, 0) else {
        return Err(NlError::Truncated {
            what: "nlmsgerr",
            need: 4,
            have: payload.len(),
        });
    };
    let error = raw as i32;
    let errno = error.checked_neg().unwrap_or(i32::MAX);
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        let echoed = if flags & NLM_F_CAPPED != 0 {
            Some(NLMSG_HDRLEN)
        } else {
            read_u32(payload, 4).map(|l| align4(l as usize))
        };
        if let Some(tlvs) = echoed.and_then(|e| payload.get(4usize.saturating_add(e)..)) {
            message = ext_ack_message(tlvs);
        }
    }
    Ok(ErrorReply { errno, message })
}

/// The status an `NLMSG_DONE` carries at the end of a dump (the dump's
/// error, 0 when it completed), with its extended-ack text.
pub fn parse_done(payload: &[u8], flags: u16) -> ErrorReply {
    let errno = read_u32(payload, 0)
        .map(|raw| (raw as i32).checked_neg().unwrap_or(i32::MAX))
        .unwrap_or(0);
    let message = if flags & NLM_F_ACK_TLVS != 0 {
        payload.get(4..).and_then(ext_ack_message)
    } else {
        None
    };
    ErrorReply { errno, message }
}

fn ext_ack_message(tlvs: &[u8]) -> Option<String> {
    attrs(tlvs)
        .map_while(Result::ok)
        .find(|a| a.kind == NLMSGERR_ATTR_MSG)
        .and_then(|a| a.as_str().ok().map(str::to_owned))
}

/// Iterates the attributes in `buf` (a message's attribute area or a
/// nested attribute's payload).
pub fn attrs(buf: &[u8]) -> Attrs<'_> {
    Attrs {
        buf,
        pos: 0,
        done: false,
    }
}

#[derive(Debug, Clone)]
pub struct Attrs<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Attrs<'a> {
    /// The first attribute of this type, or `None`; a malformed attribute
    /// before it is an error.
    pub fn find(self, kind: u16) -> Result<Option<Attr<'a>>, NlError> {
        for a in self {
            let a = a?;
            if a.kind == kind {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, NlError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = unread(self.buf, self.pos, &mut self.done)?;
        self.done = true;
        let (Some(len), Some(raw_kind)) = (read_u16(rest, 0), read_u16(rest, 2)) else {
            return Some(Err(NlError::Truncated {
                what: "attribute header",
                need: NLA_HDRLEN,
                have: rest.len(),
            }));
        };
        let len = usize::from(len);
        if len < NLA_HDRLEN {
            return Some(Err(NlError::Malformed {
                what: "attribute",
                detail: format!(
                    "nla_len {len} of type {} is below the header size {NLA_HDRLEN}",
                    raw_kind & NLA_TYPE_MASK
                ),
            }));
        }
        let Some(payload) = rest.get(NLA_HDRLEN..len) else {
            return Some(Err(NlError::Truncated {
                what: "attribute",
                need: len,
                have: rest.len(),
            }));
        };
        self.done = false;
        // The last attribute of a buffer may lack its padding.
        self.pos = self.pos.saturating_add(align4(len).min(rest.len()));
        Some(Ok(Attr {
            kind: raw_kind & NLA_TYPE_MASK,
            nested: raw_kind & NLA_F_NESTED != 0,
            net_byteorder: raw_kind & NLA_F_NET_BYTEORDER != 0,
            payload,
        }))
    }
}

/// One attribute, borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    /// The type with `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER` masked off.
    pub kind: u16,
    /// `NLA_F_NESTED` was set. Many families (RDMA nldev, DCB) nest without
    /// it, so [`Attr::nested`] does not require it.
    pub nested: bool,
    /// `NLA_F_NET_BYTEORDER` was set: integers are big-endian.
    pub net_byteorder: bool,
    pub payload: &'a [u8],
}

impl<'a> Attr<'a> {
    fn fixed<const N: usize>(&self) -> Result<[u8; N], NlError> {
        self.payload
            .get(..N)
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .ok_or(NlError::Truncated {
                what: "attribute value",
                need: N,
                have: self.payload.len(),
            })
    }

    pub fn as_u8(&self) -> Result<u8, NlError> {
        Ok(self.fixed::<1>()?[0])
    }

    /// The payload as an integer of `N` bytes, in network byte order where
    /// the attribute says so (`NLA_F_NET_BYTEORDER`), else the host's.
    fn int<const N: usize, T>(
        &self,
        be: fn([u8; N]) -> T,
        ne: fn([u8; N]) -> T,
    ) -> Result<T, NlError> {
        let b = self.fixed::<N>()?;
        Ok(if self.net_byteorder { be(b) } else { ne(b) })
    }

    pub fn as_u16(&self) -> Result<u16, NlError> {
        self.int(u16::from_be_bytes, u16::from_ne_bytes)
    }

    pub fn as_u32(&self) -> Result<u32, NlError> {
        self.int(u32::from_be_bytes, u32::from_ne_bytes)
    }

    pub fn as_u64(&self) -> Result<u64, NlError> {
        self.int(u64::from_be_bytes, u64::from_ne_bytes)
    }

    /// A string attribute, up to its first NUL (the kernel writes strings
    /// NUL-terminated; a missing NUL is accepted).
    pub fn as_str(&self) -> Result<&'a str, NlError> {
        let end = self
            .payload
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.payload.len());
        let bytes = self.payload.get(..end).unwrap_or(&[]);
        std::str::from_utf8(bytes).map_err(|_| NlError::NotUtf8 { kind: self.kind })
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> Attrs<'a> {
        attrs(self.payload)
    }
}

/// Opaque handle from [`MessageBuilder::nest_begin`], given back to
/// [`MessageBuilder::nest_end`].
#[derive(Debug)]
#[must_use = "a nest must be closed with nest_end"]
pub struct NestToken {
    offset: usize,
}

/// Builds one request: `nlmsghdr`, optional family header, attributes.
/// Sequence number and port id are left 0: [`crate::Socket::request`] sets
/// them. Errors (an attribute over 64 KiB, an unclosed nest) are kept and
/// reported by [`MessageBuilder::finish`], so calls chain.
#[derive(Debug, Clone)]
pub struct MessageBuilder {
    buf: Vec<u8>,
    open_nests: usize,
    err: Option<NlError>,
}

impl MessageBuilder {
    pub fn new(nlmsg_type: u16, flags: u16) -> Self {
        let mut buf = vec![0u8; NLMSG_HDRLEN];
        buf[4..6].copy_from_slice(&nlmsg_type.to_ne_bytes());
        buf[6..8].copy_from_slice(&flags.to_ne_bytes());
        MessageBuilder {
            buf,
            open_nests: 0,
            err: None,
        }
    }

    fn pad(&mut self) {
        let aligned = align4(self.buf.len());
        self.buf.resize(aligned, 0);
    }

    /// The family header (`struct genlmsghdr`, `struct dcbmsg`, ...),
    /// padded to 4 bytes.
    pub fn header(&mut self, header: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(header);
        self.pad();
        self
    }

    pub fn attr_bytes(&mut self, kind: u16, data: &[u8]) -> &mut Self {
        let Some(len) = data
            .len()
            .checked_add(NLA_HDRLEN)
            .and_then(|l| u16::try_from(l).ok())
        else {
            self.err.get_or_insert(NlError::Malformed {
                what: "attribute",
                detail: format!("type {kind}: {} bytes do not fit nla_len", data.len()),
            });
            return self;
        };
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.pad();
        self
    }

    pub fn attr_u8(&mut self, kind: u16, v: u8) -> &mut Self {
        self.attr_bytes(kind, &[v])
    }

    pub fn attr_u16(&mut self, kind: u16, v: u16) -> &mut Self {
        self.attr_bytes(kind, &v.to_ne_bytes())
    }

    pub fn attr_u32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.attr_bytes(kind, &v.to_ne_bytes())
    }

    pub fn attr_u64(&mut self, kind: u16, v: u64) -> &mut Self {
        self.attr_bytes(kind, &v.to_ne_bytes())
    }

    /// A NUL-terminated string (accepted by both `NLA_STRING` and
    /// `NLA_NUL_STRING` policies).
    pub fn attr_str(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut data = Vec::with_capacity(s.len() + 1);
        data.extend_from_slice(s.as_bytes());
        data.push(0);
        self.attr_bytes(kind, &data)
    }

    /// A zero-length attribute (`NLA_FLAG`).
    pub fn attr_flag(&mut self, kind: u16) -> &mut Self {
        self.attr_bytes(kind, &[])
    }

    /// Opens a nested attribute. `NLA_F_NESTED` is set, as `nla_nest_start`
    /// does: strict policies (ethtool genetlink) require it and liberal ones
    /// mask it off.
    pub fn nest_begin(&mut self, kind: u16) -> NestToken {
        let offset = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self.open_nests = self.open_nests.saturating_add(1);
        NestToken { offset }
    }

    pub fn nest_end(&mut self, token: NestToken) -> &mut Self {
        self.open_nests = self.open_nests.saturating_sub(1);
        let len = self.buf.len().saturating_sub(token.offset);
        match (
            u16::try_from(len).ok(),
            self.buf
                .get_mut(token.offset..token.offset.saturating_add(2)),
        ) {
            (Some(len), Some(slot)) if len as usize >= NLA_HDRLEN => {
                slot.copy_from_slice(&len.to_ne_bytes())
            }
            _ => {
                self.err.get_or_insert(NlError::Malformed {
                    what: "nested attribute",
                    detail: format!("{len} bytes do not fit nla_len, or a foreign token"),
                });
            }
        }
        self
    }

    /// The finished message with `nlmsg_len` set.
    pub fn finish(&mut self) -> Result<Vec<u8>, NlError> {
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        if self.open_nests != 0 {
            return Err(NlError::Malformed {
                what: "message",
                detail: format!("{} nested attribute(s) left open", self.open_nests),
            });
        }
        let len = u32::try_from(self.buf.len()).map_err(|_| NlError::Malformed {
            what: "message",
            detail: "longer than 4 GiB".into(),
        })?;
        match self.buf.get_mut(0..4) {
            Some(slot) if len as usize >= NLMSG_HDRLEN => slot.copy_from_slice(&len.to_ne_bytes()),
            _ => {
                return Err(NlError::Malformed {
                    what: "message",
                    detail: "finish called twice".into(),
                })
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }
}

#[cfg(test)]
pub(crate) mod tests;
