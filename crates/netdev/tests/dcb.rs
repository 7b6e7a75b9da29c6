//! DCB decoding from netlink message bytes laid out per
//! `include/uapi/linux/dcbnl.h` (`struct dcbmsg`, `DCB_ATTR_IEEE` nest with
//! `struct ieee_pfc`, `DCB_ATTR_IEEE_APP_TABLE` of `struct dcb_app`,
//! `DCB_ATTR_DCB_APP_TRUST_TABLE`) and `netlink.h` (`nlmsghdr`, `nlattr`,
//! `NLMSG_ERROR`), including truncated and malformed replies.

use roce_host::Priorities;
use roce_netdev::dcb::{decode_reply, request, DcbApp, DcbError, DcbPart, Trust};

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
    assert_eq!(c.pfc_enabled, Some(Priorities::one(3)));
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
    assert_eq!(c.pfc_enabled, Some(Priorities::NONE));
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
        Err(DcbError::Truncated(DcbPart::IeeePfc))
    );
    // dcb_app of three bytes
    let mut body = vec![0u8, 21, 0, 0];
    body.extend(attr(13 | NLA_F_NESTED, &attr(3, &attr(1, &[5, 3, 26]))));
    assert_eq!(
        decode_reply(&message(78, &body)),
        Err(DcbError::Truncated(DcbPart::DcbApp))
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

/// `struct ieee_ets` (59 bytes): willing 0, ets_cap 1, cbs 2,
/// tc_tx_bw[8] at 3, tc_rx_bw[8] at 11, tc_tsa[8] at 19, prio_tc[8] at 27,
/// then tc_reco_bw, tc_reco_tsa, reco_prio_tc (27 + 8 .. 59).
fn ieee_ets(tx_bw: [u8; 8], tsa: [u8; 8], prio_tc: [u8; 8]) -> Vec<u8> {
    let mut b = vec![0u8; 59];
    b[1] = 8;
    b[3..11].copy_from_slice(&tx_bw);
    b[11..19].copy_from_slice(&[0xEE; 8]); // tc_rx_bw: not read
    b[19..27].copy_from_slice(&tsa);
    b[27..35].copy_from_slice(&prio_tc);
    b[35..59].copy_from_slice(&[0xDD; 24]); // recommendation tables: not read
    b
}

/// `struct dcbnl_buffer` (44 bytes): prio2buffer[8] at 0, buffer_size
/// (u32)[8] at 8, total_size (u32) at 40.
fn dcbnl_buffer(prio2buffer: [u8; 8], sizes: [u32; 8], total: u32) -> Vec<u8> {
    let mut b = prio2buffer.to_vec();
    for s in sizes {
        b.extend_from_slice(&s.to_ne_bytes());
    }
    b.extend_from_slice(&total.to_ne_bytes());
    assert_eq!(b.len(), 44);
    b
}

/// A `dcbnl_ieee_fill` reply of an mlx5-like NIC whose peer (through a
/// driver with `ieee_peer_getpfc` and `peer_getapptable`) advertises PFC
/// on 4 and DSCP 26 -> 4.
fn full_reply(ets: &[u8], buffer: &[u8]) -> Vec<u8> {
    let mut apps = Vec::new();
    apps.extend(attr(1, &dcb_app(5, 3, 26)));
    let mut peer_apps = Vec::new();
    peer_apps.extend(attr(1, &dcb_app(5, 4, 26)));
    peer_apps.extend(attr(1, &dcb_app(5, 6, 48)));
    let mut ieee = Vec::new();
    ieee.extend(attr(1, ets)); // DCB_ATTR_IEEE_ETS
    ieee.extend(attr(2, &ieee_pfc(8, 0b0000_1000))); // DCB_ATTR_IEEE_PFC
    ieee.extend(attr(10, buffer)); // DCB_ATTR_DCB_BUFFER
    ieee.extend(attr(3 | NLA_F_NESTED, &apps)); // DCB_ATTR_IEEE_APP_TABLE
    ieee.extend(attr(5, &ieee_pfc(8, 0b0001_0000))); // DCB_ATTR_IEEE_PEER_PFC
    ieee.extend(attr(6 | NLA_F_NESTED, &peer_apps)); // DCB_ATTR_IEEE_PEER_APP
    let mut body = vec![0u8, 21, 0, 0];
    body.extend(attr(1, b"ens1f0np0\0"));
    body.extend(attr(13 | NLA_F_NESTED, &ieee));
    body.extend(attr(14, &[0x0a])); // DCB_ATTR_DCBX: LLD_MANAGED | VER_IEEE
    message(78, &body)
}

#[test]
fn ets_buffer_peer_and_dcbx_decode_at_uapi_offsets() {
    use roce_netdev::dcb::{dcbx_mode_name, PeerStandard, TSA_ETS, TSA_STRICT};
    let ets = ieee_ets(
        [0, 0, 0, 50, 0, 0, 0, 50],
        [2, 2, 2, 2, 2, 2, 0, 2],
        [0, 0, 0, 3, 0, 0, 6, 0],
    );
    let buffer = dcbnl_buffer(
        [0, 0, 0, 1, 0, 0, 0, 0],
        [130_944, 130_944, 0, 0, 0, 0, 0, 0],
        262_144,
    );
    let c = decode_reply(&full_reply(&ets, &buffer)).unwrap();
    let e = c.ets.unwrap();
    assert_eq!(e.ets_cap, 8);
    assert_eq!(e.tc_tx_bw, [0, 0, 0, 50, 0, 0, 0, 50]);
    assert_eq!(e.tc_tsa[6], TSA_STRICT);
    assert_eq!(e.tc_tsa[3], TSA_ETS);
    assert_eq!(c.tc_of(3), Some(3));
    assert_eq!(c.tc_of(6), Some(6));
    let b = c.buffers.unwrap();
    assert_eq!(b.prio2buffer, [0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(b.size_for(3), Some(130_944));
    assert_eq!(b.total_size, 262_144);
    assert_eq!(c.peer.standard, Some(PeerStandard::Ieee));
    assert_eq!(c.peer.pfc_enabled, Some(Priorities::one(4)));
    assert_eq!(c.peer.dscp_map(), Some(vec![(26, 4), (48, 6)]));
    // The peer's table is not mixed into the local one.
    assert_eq!(c.dscp_map(), vec![(26, 3)]);
    assert_eq!(c.dcbx, Some(0x0a));
    assert_eq!(dcbx_mode_name(0x0a), "firmware_ieee");
    assert_eq!(dcbx_mode_name(0x05), "host_cee");
    assert_eq!(dcbx_mode_name(0), "off");
}

#[test]
fn without_peer_ets_or_buffer_ops_those_parts_are_absent() {
    let c = decode_reply(&reply(None)).unwrap();
    assert!(c.peer.is_empty());
    assert_eq!(c.peer.standard, None);
    assert_eq!(c.buffers, None);
    assert_eq!(c.dcbx, Some(0x08));
}

#[test]
fn short_or_out_of_range_ets_and_buffer_are_errors() {
    let buffer = dcbnl_buffer([0; 8], [0; 8], 0);
    let short = decode_reply(&full_reply(&[0u8; 34], &buffer)).unwrap_err();
    assert!(
        matches!(short, DcbError::Truncated(DcbPart::IeeeEts)),
        "{short:?}"
    );
    let ets = ieee_ets([0; 8], [0; 8], [0, 0, 0, 9, 0, 0, 0, 0]);
    assert!(matches!(
        decode_reply(&full_reply(&ets, &buffer)).unwrap_err(),
        DcbError::Malformed { .. }
    ));
    let ets = ieee_ets([0; 8], [0; 8], [0; 8]);
    assert!(matches!(
        decode_reply(&full_reply(&ets, &buffer[..43])).unwrap_err(),
        DcbError::Truncated(DcbPart::DcbnlBuffer)
    ));
    let bad = dcbnl_buffer([8, 0, 0, 0, 0, 0, 0, 0], [0; 8], 0);
    assert!(matches!(
        decode_reply(&full_reply(&ets, &bad)).unwrap_err(),
        DcbError::Malformed { .. }
    ));
}

/// A `dcbnl_cee_fill` reply: `DCB_ATTR_CEE` nest with the peer's
/// `struct cee_pg` (willing, error, pg_en, tcs_supported, pg_bw[8] at 4,
/// prio_pg[8] at 12), `struct cee_pfc` (willing, error, pfc_en at 2,
/// tcs_supported) and the peer APP table (`DCB_ATTR_CEE_PEER_APP_INFO`
/// = `struct dcb_peer_app_info`, then `DCB_ATTR_CEE_PEER_APP` entries),
/// then `DCB_ATTR_DCBX`.
#[test]
fn cee_peer_attributes_decode() {
    use roce_netdev::dcb::{decode_cee_payload, request_cmd, PeerStandard, DCB_CMD_CEE_GET};
    let mut pg = vec![1u8, 0, 1, 8];
    pg.extend_from_slice(&[50, 50, 0, 0, 0, 0, 0, 0]);
    pg.extend_from_slice(&[0, 0, 0, 1, 0, 0, 15, 0]);
    let pfc = [1u8, 0, 0b0000_1000, 8];
    let mut papps = Vec::new();
    papps.extend(attr(1, &[1, 0])); // DCB_ATTR_CEE_PEER_APP_INFO
    papps.extend(attr(2, &dcb_app(5, 3, 26))); // DCB_ATTR_CEE_PEER_APP
    let mut cee = Vec::new();
    cee.extend(attr(1, &pg));
    cee.extend(attr(2, &pfc));
    cee.extend(attr(3 | NLA_F_NESTED, &papps));
    let mut body = vec![0u8, DCB_CMD_CEE_GET, 0, 0];
    body.extend(attr(1, b"eth2\0"));
    body.extend(attr(16 | NLA_F_NESTED, &cee));
    body.extend(attr(14, &[0x05])); // HOST | VER_CEE
    let r = decode_cee_payload(&body).unwrap();
    assert_eq!(r.peer.standard, Some(PeerStandard::Cee));
    assert_eq!(r.peer.pfc_enabled, Some(Priorities::one(3)));
    assert_eq!(r.peer.prio_tc, Some([0, 0, 0, 1, 0, 0, 15, 0]));
    assert_eq!(r.peer.dscp_map(), Some(vec![(26, 3)]));
    assert_eq!(r.dcbx, Some(0x05));
    // Truncated cee_pfc, and an IEEE reply handed to the CEE decoder.
    let mut cee = Vec::new();
    cee.extend(attr(2, &pfc[..3]));
    let mut body = vec![0u8, DCB_CMD_CEE_GET, 0, 0];
    body.extend(attr(16 | NLA_F_NESTED, &cee));
    assert!(decode_cee_payload(&body).is_err());
    assert!(decode_cee_payload(&[0u8, 21, 0, 0]).is_err());
    let req = request_cmd("eth2", 3, DCB_CMD_CEE_GET);
    assert_eq!(req[17], DCB_CMD_CEE_GET);
}

/// What upstream mlx5 answers with its firmware running DCBX, as
/// `dcbnl_ieee_fill` (`net/dcb/dcbnl.c`) builds it from `mlx5e_dcbnl_ops`
/// (`drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c`): ETS, PFC,
/// buffers and the DSCP APP table, no peer attribute (the ops have no
/// `ieee_peer_*` or `peer_getapp*` callbacks), and `DCB_ATTR_DCBX` 0x0c
/// (`DCB_CAP_DCBX_VER_CEE | DCB_CAP_DCBX_VER_IEEE`, set by
/// `mlx5e_dcbnl_initialize`; `DCB_CAP_DCBX_HOST` is added in host mode).
fn mlx5_firmware_dcbx_reply(dcbx: u8) -> Vec<u8> {
    let ets = ieee_ets(
        [13, 12, 13, 12, 13, 12, 13, 12],
        [2; 8],
        [1, 0, 2, 3, 4, 5, 6, 7],
    );
    let buffer = dcbnl_buffer(
        [0, 0, 0, 1, 0, 0, 0, 0],
        [130_944, 130_944, 0, 0, 0, 0, 0, 0],
        262_144,
    );
    let mut apps = Vec::new();
    apps.extend(attr(1, &dcb_app(5, 3, 26)));
    apps.extend(attr(1, &dcb_app(5, 6, 48)));
    let mut ieee = Vec::new();
    ieee.extend(attr(1, &ets));
    ieee.extend(attr(2, &ieee_pfc(8, 0b0000_1000)));
    ieee.extend(attr(10, &buffer));
    ieee.extend(attr(3 | NLA_F_NESTED, &apps));
    let mut body = vec![0u8, 21, 0, 0];
    body.extend(attr(1, b"ens1f0np0\0"));
    body.extend(attr(13 | NLA_F_NESTED, &ieee));
    body.extend(attr(14, &[dcbx]));
    message(78, &body)
}

#[test]
fn mlx5_firmware_dcbx_is_named_firmware_and_sends_no_cee_get() {
    use roce_netdev::dcb::{cee_is_operating, dcbx_mode_name};
    let c = decode_reply(&mlx5_firmware_dcbx_reply(0x0c)).unwrap();
    assert_eq!(c.dcbx, Some(0x0c));
    assert!(c.peer.is_empty());
    assert_eq!(dcbx_mode_name(0x0c), "firmware");
    assert_ne!(dcbx_mode_name(0x0c), "off");
    // Host mode on mlx5 (`dcb dcbx set dev ... host`).
    let c = decode_reply(&mlx5_firmware_dcbx_reply(0x0d)).unwrap();
    assert_eq!(dcbx_mode_name(c.dcbx.unwrap()), "host");
    // mlx5 sets both version bits in either mode: the CEE GET would
    // return no peer data, so it is not sent.
    assert!(!cee_is_operating(0x0c));
    assert!(!cee_is_operating(0x0d));
    // A CEE-only DCBX engine (lldpad in CEE mode, a qede port set to CEE)
    // keeps the peer's view in the CEE attributes: asked for.
    assert!(cee_is_operating(0x05));
    assert!(cee_is_operating(0x06));
    assert!(!cee_is_operating(0x0a));
    assert!(!cee_is_operating(0));
    assert_eq!(dcbx_mode_name(0x0e), "firmware");
    assert_eq!(dcbx_mode_name(0x10), "static");
}
