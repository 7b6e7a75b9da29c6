//! The control exchange of a load test, over the exporter's HTTP server:
//!
//! - `POST /load-test/session?gid=…&lid=…&qpn=…,…&psn=…&mtu=…&seconds=…&bytes=…&message=…&force=0|1`:
//!   the requester's queue pairs and what it asks for; the answer (200) is
//!   a [`Grant`]: the responder's port, queue pairs, the window to write
//!   into, the time and bytes granted and the session's id;
//! - `POST /load-test/end?session=…`: ends the session at once; the answer
//!   is the responder's own count ([`EndReport`]).
//!
//! A refusal is a JSON [`Refused`] with an HTTP status per reason. Every
//! query is hostile: a bounded number of parameters, each parsed with its
//! bound, duplicates and unknown keys refused.

use std::net::Ipv6Addr;

use serde::{Deserialize, Serialize};

use roce_probe::load::{QpSet, Window, MAX_MESSAGE_BYTES, MAX_QPS, MIN_MESSAGE_BYTES};

use super::LoadRefusal;

pub const SESSION_PATH: &str = "/load-test/session";
pub const END_PATH: &str = "/load-test/end";
/// Version of the answers' format.
pub const VERSION: u32 = 1;
/// Largest answer read by the requester.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// What a requester asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    pub qps: QpSet,
    /// Time asked for, seconds.
    pub seconds: u32,
    /// Bytes the requester will write at most.
    pub bytes: u64,
    /// Its largest message.
    pub message: u64,
    /// Start even though the port carries traffic.
    pub force: bool,
}

/// What the responder grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub version: u32,
    /// Random: names the session in the end request.
    pub session: String,
    pub node: String,
    pub device: String,
    pub port: u8,
    pub qps: QpSet,
    pub window: Window,
    pub seconds: u32,
    pub bytes: u64,
    /// Where the responder's buffer lives (`host` or `gpu`).
    pub memory: String,
}

/// The responder's count of a session, at its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndReport {
    pub version: u32,
    pub bytes: u64,
    pub messages: u64,
    /// Why the session ended (`stopped`, `idle`, `deadline`, `byte_cap`,
    /// `failed`).
    pub ended: String,
    pub active_seconds: f64,
}

/// A refusal's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub refused: String,
    pub message: String,
}

impl Refused {
    pub fn json(reason: LoadRefusal, message: impl Into<String>) -> String {
        let r = Refused {
            refused: reason.as_str().to_string(),
            message: message.into(),
        };
        serde_json::to_string(&r).unwrap_or_default() + "\n"
    }
}

/// The query of a session request.
pub fn session_query(r: &SessionRequest) -> String {
    let qpns: Vec<String> = r.qps.qpns.iter().map(u32::to_string).collect();
    format!(
        "gid={}&lid={}&qpn={}&psn={}&mtu={}&seconds={}&bytes={}&message={}&force={}",
        crate::peer_http::query_escape(&r.qps.gid.to_string()),
        r.qps.lid,
        qpns.join("%2C"),
        r.qps.psn,
        r.qps.mtu,
        r.seconds,
        r.bytes,
        r.message,
        u8::from(r.force)
    )
}

/// Most parameters in a query.
const MAX_PARAMS: usize = 16;

/// `key=value` pairs, percent-decoded, each key once; `None` on anything
/// else.
fn pairs(query: &str) -> Option<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        if out.len() >= MAX_PARAMS {
            return None;
        }
        let (k, v) = part.split_once('=')?;
        let (k, v) = (unescape(k)?, unescape(v)?);
        if out.iter().any(|(o, _)| *o == k) {
            return None;
        }
        out.push((k, v));
    }
    Some(out)
}

fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                // Two hex digits exactly (`from_str_radix` alone would take
                // a sign: `%+1`).
                let hex = b.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A session request from a query; the error says what is wrong.
pub fn parse_session(query: &str) -> Result<SessionRequest, String> {
    let pairs = pairs(query).ok_or("not a query of unique key=value pairs")?;
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .ok_or(format!("{k} missing"))
    };
    if let Some((k, _)) = pairs.iter().find(|(k, _)| {
        ![
            "gid", "lid", "qpn", "psn", "mtu", "seconds", "bytes", "message", "force",
        ]
        .contains(&k.as_str())
    }) {
        return Err(format!("unknown parameter {k:?}"));
    }
    fn num<T: std::str::FromStr>(v: &str, what: &str) -> Result<T, String> {
        if v.len() > 20 {
            return Err(format!("{what} too long"));
        }
        v.parse().map_err(|_| format!("{what} is not a number"))
    }
    let gid: Ipv6Addr = get("gid")?
        .parse()
        .map_err(|_| "gid is not an IPv6 address".to_string())?;
    let qpn_text = get("qpn")?;
    let qpns: Vec<u32> = qpn_text
        .split(',')
        .map(|q| num::<u32>(q, "qpn"))
        .collect::<Result<_, _>>()?;
    if qpns.is_empty() || qpns.len() > MAX_QPS as usize {
        return Err(format!("1 to {MAX_QPS} queue pairs"));
    }
    if qpns.iter().any(|q| !(2..=0xFF_FFFF).contains(q)) {
        return Err("a qpn outside 2..=0xFFFFFF".into());
    }
    let psn: u32 = num(get("psn")?, "psn")?;
    if psn > 0xFF_FFFF {
        return Err("psn above 24 bits".into());
    }
    let mtu: u32 = num(get("mtu")?, "mtu")?;
    if ![256, 512, 1024, 2048, 4096].contains(&mtu) {
        return Err("mtu is no IB MTU".into());
    }
    let message: u64 = num(get("message")?, "message")?;
    if !(MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES).contains(&message) {
        return Err(format!(
            "message size {message} outside {MIN_MESSAGE_BYTES}..={MAX_MESSAGE_BYTES}"
        ));
    }
    let force = match get("force").unwrap_or("0") {
        "0" => false,
        "1" => true,
        _ => return Err("force is 0 or 1".into()),
    };
    let seconds: u32 = num(get("seconds")?, "seconds")?;
    let bytes: u64 = num(get("bytes")?, "bytes")?;
    if seconds == 0 || bytes == 0 {
        // Nothing is set up for a session that cannot carry a message.
        return Err("seconds and bytes are at least 1".into());
    }
    Ok(SessionRequest {
        qps: QpSet {
            gid,
            lid: num(get("lid").unwrap_or("0"), "lid")?,
            qpns,
            psn,
            mtu,
        },
        seconds,
        bytes,
        message,
        force,
    })
}

/// The session id of an end request.
pub fn parse_end(query: &str) -> Result<String, String> {
    let pairs = pairs(query).ok_or("not a query of unique key=value pairs")?;
    match pairs.as_slice() {
        [(k, v)] if k == "session" && v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(v.to_ascii_lowercase())
        }
        _ => Err("expected only session=<32 hex digits>".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> SessionRequest {
        SessionRequest {
            qps: QpSet {
                gid: "::ffff:10.0.2.15".parse().unwrap(),
                lid: 0,
                qpns: vec![17, 18, 19, 20],
                psn: 0x12345,
                mtu: 1024,
            },
            seconds: 20,
            bytes: 1 << 40,
            message: 8 << 20,
            force: false,
        }
    }

    #[test]
    fn a_request_survives_its_query() {
        let r = request();
        assert_eq!(parse_session(&session_query(&r)), Ok(r));
    }

    #[test]
    fn hostile_queries_are_refused_with_what_is_wrong() {
        let good = session_query(&request());
        let cases = [
            ("", "gid missing"),
            ("gid=x", "IPv6"),
            (&format!("{good}&gid=::1"), "unique"),
            (&format!("{good}&evil=1"), "unknown"),
            (
                &good.replace("qpn=17%2C18%2C19%2C20", "qpn=1"),
                "qpn outside",
            ),
            (
                &good.replace("qpn=17%2C18%2C19%2C20", "qpn=99999999999999999999999"),
                "too long",
            ),
            (&good.replace("mtu=1024", "mtu=1000"), "IB MTU"),
            (
                &good.replace("message=8388608", "message=1"),
                "message size",
            ),
            (&good.replace("psn=74565", "psn=16777216"), "24 bits"),
            (&good.replace("force=0", "force=yes"), "force"),
            ("gid=%zz", "unique"),
            // A sign is no hex digit; a byte that is no UTF-8.
            (&good.replace("gid=", "gid=%+3a"), "unique"),
            (&good.replace("gid=", "gid=%ff"), "unique"),
            (&good.replace("seconds=20", "seconds=0"), "at least 1"),
            (
                &good.replace("bytes=1099511627776", "bytes=0"),
                "at least 1",
            ),
            (&good.replace("seconds=20", "seconds=-1"), "not a number"),
            (
                &good.replace("seconds=20", "seconds=4294967296"),
                "not a number",
            ),
            (&good.replace("lid=0", "lid=65536"), "not a number"),
            (&"a=1&".repeat(40), "unique"),
        ];
        for (q, want) in cases {
            let e = parse_session(q).expect_err(q);
            assert!(e.contains(want), "{q}: {e}");
        }
        let many: Vec<String> = (2..40).map(|q| q.to_string()).collect();
        let q = good.replace("17%2C18%2C19%2C20", &many.join(","));
        assert!(parse_session(&q).unwrap_err().contains("queue pairs"));
    }

    #[test]
    fn an_end_names_one_session_only() {
        let id = "0123456789abcdef0123456789ABCDEF";
        assert_eq!(
            parse_end(&format!("session={id}")),
            Ok(id.to_ascii_lowercase())
        );
        for q in [
            "",
            "session=1",
            &format!("session={id}&x=1"),
            "session=../../etc",
        ] {
            assert!(parse_end(q).is_err(), "{q}");
        }
    }
}
