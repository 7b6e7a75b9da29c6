//! DCB decoding from netlink message bytes laid out per
//! `include/uapi/linux/dcbnl.h` (`struct dcbmsg`, `DCB_ATTR_IEEE` nest with
//! `struct ieee_pfc`, `DCB_ATTR_IEEE_APP_TABLE` of `struct dcb_app`,
//! `DCB_ATTR_DCB_APP_TRUST_TABLE`) and `netlink.h` (`nlmsghdr`, `nlattr`,
//! `NLMSG_ERROR`), including truncated and malformed replies.

use roce_netdev::dcb::{decode_reply, request, DcbApp, DcbError, Trust};

const NLA_F_NESTED: u16 = 0x8000;

fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    out
}

fn message(kind: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&7u32.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(body);
    out
}

/// `struct ieee_pfc` (136 bytes): pfc_cap, pfc_en, mbc, pad, delay (u16),
/// pad, requests[8], indications[8].
fn ieee_pfc(cap: u8, en: u8) -> Vec<u8> {
    let mut b = vec![0u8; 136];
    b[0] = cap;
    b[1] = en;
    b[4..6].copy_from_slice(&32u16.to_ne_bytes());
    b[8..16].copy_from_slice(&5u64.to_ne_bytes());
    b
}

fn dcb_app(selector: u8, priority: u8, protocol: u16) -> Vec<u8> {
    let mut b = vec![selector, priority];
    b.extend_from_slice(&protocol.to_ne_bytes());
    b
}

/// A `RTM_GETDCB` reply as `dcbnl_ieee_fill` builds it.
fn reply(trust: Option<&[(u16, u8)]>) -> Vec<u8> {
    let mut apps = Vec::new();
    apps.extend(attr(1, &dcb_app(5, 3, 26))); // DSCP 26 -> prio 3
    apps.extend(attr(1, &dcb_app(5, 3, 24))); // DSCP 24 -> prio 3
    apps.extend(attr(1, &dcb_app(1, 4, 0x8915))); // ethertype
    let mut ieee = Vec::new();
    ieee.extend(attr(1, &[0u8; 59])); // DCB_ATTR_IEEE_ETS (struct ieee_ets)
    ieee.extend(attr(2, &ieee_pfc(8, 0b0000_1000))); // DCB_ATTR_IEEE_PFC
    ieee.extend(attr(3 | NLA_F_NESTED, &apps)); // DCB_ATTR_IEEE_APP_TABLE
    if let Some(order) = trust {
        let mut t = Vec::new();
        for &(kind, sel) in order {
            t.extend(attr(kind, &[sel]));
        }
        ieee.extend(attr(11 | NLA_F_NESTED, &t)); // DCB_ATTR_DCB_APP_TRUST_TABLE
    }
    let mut body = vec![0u8, 21, 0, 0]; // dcbmsg: AF_UNSPEC, DCB_CMD_IEEE_GET
    body.extend(attr(1, b"ens1f0np0\0")); // DCB_ATTR_IFNAME
    body.extend(attr(13 | NLA_F_NESTED, &ieee)); // DCB_ATTR_IEEE
    body.extend(attr(14, &[0x08])); // DCB_ATTR_DCBX
    message(78, &body)
}

#[test]
fn pfc_bitmap_app_table_and_inferred_dscp_trust() {
    let c = decode_reply(&reply(None)).unwrap();
    assert_eq!(c.pfc_cap, Some(8));
    assert_eq!(c.pfc_enabled, Some(0b0000_1000));
    assert_eq!(
        c.apps,
        vec![
            DcbApp {
                selector: 5,
                priority: 3,
                protocol: 26
            },
            DcbApp {
                selector: 5,
                priority: 3,
                protocol: 24
            },
            DcbApp {
                selector: 1,
                priority: 4,
                protocol: 0x8915
            },
        ]
    );
    assert_eq!(c.trust(), Trust::Dscp);
    assert!(!c.trust_reported());
    assert_eq!(c.dscp_map(), vec![(24, 3), (26, 3)]);
}

#[test]
fn trust_table_wins_over_inference() {
    // DCB_ATTR_DCB_APP (2) carries the non-IEEE PCP selector 255.
    let c = decode_reply(&reply(Some(&[(2, 255), (1, 5)]))).unwrap();
    assert_eq!(c.trust_order, Some(vec![255, 5]));
    assert_eq!(c.trust(), Trust::Pcp);
    let c = decode_reply(&reply(Some(&[(1, 5)]))).unwrap();
    assert_eq!(c.trust(), Trust::Dscp);
    let c = decode_reply(&reply(Some(&[]))).unwrap();
    assert_eq!(c.trust(), Trust::None);
}

#[test]
fn no_dscp_entries_means_pcp() {
    let mut ieee = Vec::new();
    ieee.extend(attr(2, &ieee_pfc(8, 0)));
    let mut body = vec![0u8, 21, 0, 0];
    body.extend(attr(13 | NLA_F_NESTED, &ieee));
    let c = decode_reply(&message(78, &body)).unwrap();
    assert_eq!(c.trust(), Trust::Pcp);
    assert_eq!(c.pfc_enabled, Some(0));
}

fn error(errno: i32) -> Vec<u8> {
    let mut body = (-errno).to_ne_bytes().to_vec();
    body.extend_from_slice(&[0u8; 16]);
    message(2, &body)
}

#[test]
fn kernel_errors() {
    assert_eq!(
        decode_reply(&error(libc::EOPNOTSUPP)),
        Err(DcbError::Unsupported)
    );
    assert_eq!(decode_reply(&error(libc::ENODEV)), Err(DcbError::NoDevice));
    assert_eq!(
        decode_reply(&error(libc::EPERM)),
        Err(DcbError::Errno { errno: libc::EPERM })
    );
    assert!(matches!(
        decode_reply(&error(0)),
        Err(DcbError::Malformed { .. })
    ));
}

#[test]
fn every_truncation_is_a_clear_error() {
    let full = reply(Some(&[(1, 5)]));
    for cut in 0..full.len() {
        let r = decode_reply(&full[..cut]);
        assert!(
            matches!(
                r,
                Err(DcbError::Truncated { .. }) | Err(DcbError::Malformed { .. })
            ),
            "cut at {cut}: {r:?}"
        );
    }
    // A consistent but short message: nlmsg_len matches, attributes cut.
    let body_cut = &full[16..40];
    let r = decode_reply(&message(78, body_cut));
    assert!(r.is_err(), "{r:?}");
}

#[test]
fn malformed_attributes() {
    // attribute length below its header
    let mut body = vec![0u8, 21, 0, 0];
    body.extend_from_slice(&2u16.to_ne_bytes());
    body.extend_from_slice(&13u16.to_ne_bytes());
    assert!(matches!(
        decode_reply(&message(78, &body)),
        Err(DcbError::Malformed { .. })
    ));
    // ieee_pfc of one byte
    let mut body = vec![0u8, 21, 0, 0];
    body.extend(attr(13 | NLA_F_NESTED, &attr(2, &[8])));
    assert_eq!(
        decode_reply(&message(78, &body)),
        Err(DcbError::Truncated { what: "ieee_pfc" })
    );
    // dcb_app of three bytes
    let mut body = vec![0u8, 21, 0, 0];
    body.extend(attr(13 | NLA_F_NESTED, &attr(3, &attr(1, &[5, 3, 26]))));
    assert_eq!(
        decode_reply(&message(78, &body)),
        Err(DcbError::Truncated { what: "dcb_app" })
    );
    // reply to another command, another message type, no IEEE nest
    assert!(matches!(
        decode_reply(&message(78, &[0, 7, 0, 0])),
        Err(DcbError::Malformed { .. })
    ));
    assert!(matches!(
        decode_reply(&message(16, &[0, 21, 0, 0])),
        Err(DcbError::Malformed { .. })
    ));
    assert!(matches!(
        decode_reply(&message(78, &[0, 21, 0, 0])),
        Err(DcbError::Malformed { .. })
    ));
    // nlmsg_len below the header
    let mut m = reply(None);
    m[0..4].copy_from_slice(&8u32.to_ne_bytes());
    assert!(matches!(decode_reply(&m), Err(DcbError::Malformed { .. })));
}

#[test]
fn garbage_never_panics() {
    let full = reply(Some(&[(2, 255)]));
    let mut state = 0x2545_f491_u64;
    for _ in 0..5000 {
        let mut m = full.clone();
        for _ in 0..4 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (state >> 33) as usize % m.len();
            m[i] = (state >> 17) as u8;
        }
        let _ = decode_reply(&m);
    }
}

#[test]
fn request_layout() {
    let r = request("eth0", 9);
    assert_eq!(
        u32::from_ne_bytes([r[0], r[1], r[2], r[3]]) as usize,
        r.len()
    );
    assert_eq!(u16::from_ne_bytes([r[4], r[5]]), 78); // RTM_GETDCB
    assert_eq!(u16::from_ne_bytes([r[6], r[7]]), 1); // NLM_F_REQUEST
    assert_eq!(&r[16..20], &[0, 21, 0, 0]); // dcbmsg
    assert_eq!(u16::from_ne_bytes([r[20], r[21]]), 9); // nla_len: 4 + "eth0\0"
    assert_eq!(u16::from_ne_bytes([r[22], r[23]]), 1); // DCB_ATTR_IFNAME
    assert_eq!(&r[24..29], b"eth0\0");
    assert_eq!(r.len(), 32);
}
