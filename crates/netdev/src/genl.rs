//! Generic netlink plumbing shared by the physical-layer readers (FEC and
//! module EEPROM over the "ethtool" family, health reporters over the
//! "devlink" family): family id resolution, the `genlmsghdr` split, and the
//! hex text format of recorded replies for trees that are not the running
//! kernel.
//!
//! Numbers from `include/uapi/linux/genetlink.h`: `GENL_ID_CTRL` 0x10,
//! `CTRL_CMD_GETFAMILY` 3, `CTRL_ATTR_FAMILY_ID` 1, `CTRL_ATTR_FAMILY_NAME`
//! 2, `GENL_HDRLEN` 4 (`struct genlmsghdr`: cmd u8, version u8, reserved
//! u16).

use std::time::Duration;

use roce_netlink::{attrs, Attrs, MessageBuilder, NlError, Protocol, Socket};

pub const GENL_ID_CTRL: u16 = 0x10;
pub const CTRL_CMD_GETFAMILY: u8 = 3;
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;
pub const GENL_HDRLEN: usize = 4;

/// The command byte and the attributes of a generic netlink payload (what
/// follows the `nlmsghdr`).
pub fn split(payload: &[u8]) -> Result<(u8, Attrs<'_>), NlError> {
    match (payload.first(), payload.get(GENL_HDRLEN..)) {
        (Some(&cmd), Some(body)) => Ok((cmd, attrs(body))),
        _ => Err(NlError::Truncated {
            what: "genlmsghdr",
            need: GENL_HDRLEN,
            have: payload.len(),
        }),
    }
}

/// A generic netlink socket bound to one family, resolved by name on first
/// use. A kernel without the family (ENOENT: ethtool netlink before 5.6, no
/// devlink) is remembered, so it is asked once.
pub struct GenlClient {
    name: &'static str,
    socket: Option<Socket>,
    timeout: Duration,
    family: Option<Option<u16>>,
}

impl GenlClient {
    pub fn new(name: &'static str, timeout: Duration) -> Self {
        GenlClient {
            name,
            socket: None,
            timeout,
            family: None,
        }
    }

    fn socket(&mut self) -> Result<&mut Socket, NlError> {
        if self.socket.is_none() {
            self.socket = Some(Socket::open(Protocol::Generic, self.timeout)?);
        }
        self.socket.as_mut().ok_or(NlError::Timeout)
    }

    /// The family id; `None` when the kernel has no such family.
    pub fn family(&mut self) -> Result<Option<u16>, NlError> {
        if let Some(f) = self.family {
            return Ok(f);
        }
        let name = self.name;
        let socket = self.socket()?;
        let mut b = MessageBuilder::new(GENL_ID_CTRL, 0);
        b.header(&[CTRL_CMD_GETFAMILY, 1, 0, 0])
            .attr_str(CTRL_ATTR_FAMILY_NAME, name);
        let found = match socket.request(b.finish()?) {
            Ok(replies) => {
                let mut id = None;
                for m in &replies {
                    if let Some(a) = m.attrs(GENL_HDRLEN)?.find(CTRL_ATTR_FAMILY_ID)? {
                        id = Some(a.as_u16()?);
                    }
                }
                id
            }
            Err(NlError::Kernel { errno, .. }) if errno == libc::ENOENT => None,
            Err(e) => return Err(e),
        };
        self.family = Some(found);
        Ok(found)
    }

    /// Sends one request built by `build` (given the family id) and returns
    /// the payloads of the family's messages in the answer; `Ok(None)` when
    /// the kernel has no such family.
    pub fn request(
        &mut self,
        build: impl FnOnce(u16) -> Result<Vec<u8>, NlError>,
    ) -> Result<Option<Vec<Vec<u8>>>, NlError> {
        let Some(family) = self.family()? else {
            return Ok(None);
        };
        let msg = build(family)?;
        let replies = self.socket()?.request(msg)?;
        Ok(Some(
            replies
                .into_iter()
                .filter(|m| m.kind == family)
                .map(|m| m.payload)
                .collect(),
        ))
    }
}

/// A line of a replay file (recorded replies, a DCB or EEPROM replay) that
/// did not parse: its number (from 1), what it lacks, and the text found
/// there (empty where the whole line is the fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {fault}{}", if found.is_empty() { String::new() } else { format!(": {found:?}") })]
pub struct ReplayError {
    pub line: usize,
    pub fault: ReplayFault,
    pub found: String,
}

impl ReplayError {
    /// The fault of line `line` (from 1), with the text found there.
    pub fn new(line: usize, fault: ReplayFault, found: impl Into<String>) -> Self {
        ReplayError {
            line,
            fault,
            found: found.into(),
        }
    }
}

/// What a line of a replay file lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplayFault {
    #[error("not a hex byte")]
    HexByte,
    #[error("expected [i2c 0xNN page 0xNN bank N lower|upper]")]
    SectionHeader,
    #[error("bytes before a [section] header")]
    BytesBeforeSection,
    #[error("expected key: value")]
    KeyValue,
    #[error("unknown key")]
    UnknownKey,
    #[error("bad priority")]
    Priority,
    #[error("priority above 7")]
    PriorityAbove7,
    #[error("trust is pcp or dscp")]
    Trust,
    #[error("expected: app: dscp <value> <priority>")]
    App,
    #[error("expected: peer_app: dscp <value> <priority>")]
    PeerApp,
    #[error("only dscp APP entries are replayed")]
    AppSelector,
    #[error("bad dscp")]
    Dscp,
    #[error("dscp above 63 or priority above 7")]
    AppRange,
    #[error("expected 8 numbers 0..7")]
    EightPriorities,
    #[error("expected 8 percentages")]
    EightPercentages,
    #[error("expected 8 algorithms")]
    EightAlgorithms,
    #[error("algorithm is strict, ets, cbs or vendor")]
    Algorithm,
    #[error("bad size")]
    Size,
    #[error("expected 8 sizes")]
    EightSizes,
    #[error("unknown dcbx mode")]
    DcbxMode,
    #[error("peer is ieee or cee")]
    PeerStandard,
}

/// Parses the hex text of recorded replies: byte pairs separated by white
/// space, `#` comments, an optional `0x0000:`-style offset before a colon on
/// each line (as `ethtool -m ... hex on` and `xxd` print), and lines of
/// `---` separating messages. Returns one byte vector per message.
pub fn parse_hex_messages(text: &str) -> Result<Vec<Vec<u8>>, ReplayError> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line == "---" {
            out.push(std::mem::take(&mut current));
            continue;
        }
        let data = match line.split_once(':') {
            Some((_, rest)) => rest,
            None => line,
        };
        for word in data.split_whitespace() {
            let byte = u8::from_str_radix(word, 16)
                .ok()
                .filter(|_| word.len() == 2)
                .ok_or_else(|| ReplayError::new(n + 1, ReplayFault::HexByte, word))?;
            current.push(byte);
        }
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    Ok(out)
}

/// Where recorded replies of a netdev live (`<dir>/<netdev>.<ext>`), or
/// `None` for a name that would leave the folder.
pub fn replay_path(dir: &std::path::Path, netdev: &str, ext: &str) -> Option<std::path::PathBuf> {
    if netdev.is_empty() || netdev.contains('/') || netdev.starts_with('.') {
        return None;
    }
    Some(dir.join(format!("{netdev}.{ext}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_messages_with_offsets_comments_and_separators() {
        let text = "# a reply\n0x0000: 1e 01 00 00\n0x0004: ff\n---\nab cd # two\n";
        let msgs = parse_hex_messages(text).unwrap();
        assert_eq!(msgs, vec![vec![0x1e, 1, 0, 0, 0xff], vec![0xab, 0xcd]]);
        assert!(parse_hex_messages("0x00: 1g").is_err());
        assert!(parse_hex_messages("123").is_err());
        assert_eq!(parse_hex_messages("").unwrap(), vec![Vec::<u8>::new()]);
    }

    #[test]
    fn split_needs_the_genl_header() {
        assert!(split(&[1, 1, 0]).is_err());
        let (cmd, mut a) = split(&[30, 1, 0, 0]).unwrap();
        assert_eq!(cmd, 30);
        assert!(a.next().is_none());
    }

    #[test]
    fn replay_paths_stay_in_the_folder() {
        let dir = std::path::Path::new("/r");
        assert_eq!(
            replay_path(dir, "ens1np0", "fec"),
            Some(std::path::PathBuf::from("/r/ens1np0.fec"))
        );
        assert_eq!(replay_path(dir, "../x", "fec"), None);
        assert_eq!(replay_path(dir, ".hidden", "fec"), None);
        assert_eq!(replay_path(dir, "", "fec"), None);
    }
}
