//! The decoders against real bytes: a ConnectX NIC's own LLDP frame (from
//! lldpd's test captures), frames built by tests/send_lldp.py (written apart
//! from the Rust decoder), real `lldpcli -f json0` output of lldpd 1.0.16
//! that heard that frame, and hostile frames: every truncation, lying TLV
//! lengths and random corruption never panic and never yield a neighbour
//! without its mandatory TLVs.

use roce_host::Priorities;
use roce_lldp::build::{switch_frame, FrameBuilder};
use roce_lldp::lldpd::parse_json0;
use roce_lldp::tlv::{app_selector, parse_frame, tlv_type, FrameError, MAX_APP, MAX_TEXT};
use roce_lldp::{AppEntry, Pfc};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn hex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The one packet of a classic pcap file (24-byte global header, 16-byte
/// record header).
fn pcap_first_packet(pcap: &[u8]) -> Vec<u8> {
    let incl = u32::from_le_bytes(pcap[32..36].try_into().unwrap()) as usize;
    pcap[40..40 + incl].to_vec()
}

#[test]
fn connectx_firmware_frame_from_lldpd_captures() {
    let frame = pcap_first_packet(&fixture("connectx-lldpd-tests.pcap"));
    let pdu = parse_frame(&frame).unwrap();
    assert_eq!(pdu.chassis_id.subtype, 4);
    assert_eq!(pdu.chassis_id.value, "50:6b:4b:f6:1e:b3");
    assert_eq!(pdu.port_id.subtype, 3);
    assert_eq!(pdu.port_id.value, "50:6b:4b:f6:1e:b1");
    assert_eq!(pdu.ttl, 48);
    // TLV header 0x081d: type 4, the port description.
    assert_eq!(
        pdu.port_description.as_deref(),
        Some("ConnectX-4 Lx, 25G/10G/1G SFP")
    );
    assert_eq!(pdu.system_name, None);
    assert_eq!(pdu.system_description, None);
    assert_eq!(pdu.pfc, None);
    assert_eq!(pdu.app, None);
}

#[test]
fn python_built_switch_frame() {
    let frame = hex(&String::from_utf8(fixture("switch-pfc4-dscp26.hex")).unwrap());
    let pdu = parse_frame(&frame).unwrap();
    assert_eq!(pdu.chassis_id.value, "1c:34:da:5a:01:00");
    assert_eq!(pdu.port_id.subtype, 5);
    assert_eq!(pdu.port_id.value, "swp17");
    assert_eq!(pdu.ttl, 120);
    assert_eq!(pdu.system_name.as_deref(), Some("leaf-r3-a"));
    assert_eq!(pdu.port_description.as_deref(), Some("leaf-r3-a swp17"));
    assert_eq!(pdu.management_addresses, vec!["10.0.0.11".to_string()]);
    assert_eq!(pdu.pvid, Some(1));
    assert_eq!(pdu.max_frame_size, Some(9216));
    let pfc = pdu.pfc.unwrap();
    assert_eq!(pfc.enable, Priorities::one(4));
    assert_eq!(pfc.cap, 8);
    assert!(!pfc.willing);
    assert_eq!(
        pdu.app,
        Some(vec![AppEntry {
            selector: app_selector::DSCP,
            protocol: 26,
            priority: 4
        }])
    );
    let ets = pdu.ets_configuration.unwrap();
    assert_eq!(ets.prio_tc, [0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(ets.tc_bw, [50, 50, 0, 0, 0, 0, 0, 0]);
    assert_eq!(ets.tsa, [2, 2, 0, 0, 0, 0, 0, 0]);
    assert_eq!(ets.max_tcs, 8);
    assert_eq!(pdu.ets_recommendation.unwrap().prio_tc, ets.prio_tc);
    assert_eq!(pdu.skipped_tlvs, 0);
    assert_eq!(pdu.malformed_org_tlvs, 0);
    // The Rust builder writes the same bytes as the Python one.
    let rust =
        switch_frame("leaf-r3-a", "swp17", 4, 26, 4).frame([0x1c, 0x34, 0xda, 0x5a, 0x01, 0x00]);
    assert_eq!(rust, frame);
}

#[test]
fn lldpd_json0_carries_the_same_neighbour() {
    let doc = fixture("lldpcli-json0-neighbors-dcbx.json");
    let ns = parse_json0(&doc).unwrap();
    assert_eq!(ns.len(), 1);
    let n = &ns[0];
    assert_eq!(n.interface, "lv-host");
    assert_eq!(n.age_seconds, Some(1));
    let frame = hex(&String::from_utf8(fixture("switch-pfc4-dscp26.hex")).unwrap());
    let from_wire = parse_frame(&frame).unwrap();
    let mut from_lldpd = n.pdu.clone();
    // lldpd does not pass the system capabilities' raw bits on; all the
    // rest agrees field for field.
    from_lldpd.skipped_tlvs = from_wire.skipped_tlvs;
    assert_eq!(from_lldpd, from_wire);
}

#[test]
fn lldpd_json0_without_neighbours() {
    let ns = parse_json0(&fixture("lldpcli-json0-no-neighbors.json")).unwrap();
    assert!(ns.is_empty());
}

#[test]
fn lldpd_hostile_documents() {
    assert!(parse_json0(b"").is_err());
    assert!(parse_json0(b"{\"lldp\": 3}").is_err());
    assert!(parse_json0(b"[1,2]").is_err());
    let big = vec![b' '; roce_lldp::lldpd::MAX_DOCUMENT + 1];
    assert!(parse_json0(&big).is_err());
    // Lying custom TLVs: bad hex, wrong lengths; the neighbour stays, the
    // DCBX fields stay absent, the lies are counted.
    let doc = String::from_utf8(fixture("lldpcli-json0-neighbors-dcbx.json"))
        .unwrap()
        .replace("\"08,10\"", "\"08\"")
        .replace("\"00,85,00,1A\"", "\"00,85,00\"")
        .replace(
            "\"00,00,00,10,00,32,32,00,00,00,00,00,00,02,02,00,00,00,00,00,00\"",
            "\"ZZ\"",
        );
    let ns = parse_json0(doc.as_bytes()).unwrap();
    assert_eq!(ns.len(), 1);
    assert_eq!(ns[0].pdu.pfc, None);
    assert_eq!(ns[0].pdu.app, None);
    assert_eq!(ns[0].pdu.ets_configuration, None);
    assert_eq!(ns[0].pdu.malformed_org_tlvs, 4);
    // Escapes and control characters in names come out sanitized.
    let doc = String::from_utf8(fixture("lldpcli-json0-neighbors-dcbx.json"))
        .unwrap()
        .replace("\"leaf-r3-a\"", "\"leaf\\u001b[2J\\nevil\"");
    let ns = parse_json0(doc.as_bytes()).unwrap();
    assert_eq!(ns[0].pdu.system_name.as_deref(), Some("leaf?[2J?evil"));
}

#[test]
fn every_truncation_is_rejected_without_panic() {
    let frame = switch_frame("leaf-r3-a", "swp17", 4, 26, 4).frame([2; 6]);
    let full = switch_frame("leaf-r3-a", "swp17", 4, 26, 4).pdu().len() + 14;
    for cut in 0..full {
        assert!(parse_frame(&frame[..cut]).is_err(), "cut at {cut} accepted");
    }
    assert!(parse_frame(&frame[..full]).is_ok());
}

#[test]
fn lying_lengths_and_order() {
    let base = || FrameBuilder::new([2; 6], "swp1", 120);
    // A TLV claiming more than the frame holds.
    let mut f = base().system_name("leaf").frame([2; 6]);
    let at = 14 + f[14..].windows(4).position(|w| w == b"leaf").unwrap() - 2;
    f[at] = (tlv_type::SYSTEM_NAME << 1) | 1;
    f[at + 1] = 0xff; // 511 bytes claimed
    assert!(matches!(
        parse_frame(&f),
        Err(FrameError::TruncatedTlv { .. })
    ));
    // Port ID before chassis ID.
    let pdu = FrameBuilder::default()
        .raw_tlv(tlv_type::PORT_ID, b"\x05swp1")
        .raw_tlv(tlv_type::CHASSIS_ID, b"\x04\x02\x02\x02\x02\x02\x02")
        .raw_tlv(tlv_type::TTL, &[0, 120]);
    assert_eq!(
        parse_frame(&pdu.frame([2; 6])),
        Err(FrameError::OutOfOrder(2))
    );
    // A second TTL.
    let f = base().raw_tlv(tlv_type::TTL, &[0, 1]).frame([2; 6]);
    assert_eq!(parse_frame(&f), Err(FrameError::Duplicate(3)));
    // Bad ID subtype and a one-byte ID.
    let pdu = FrameBuilder::default().raw_tlv(tlv_type::CHASSIS_ID, b"\x09abc");
    assert!(matches!(
        parse_frame(&pdu.frame([2; 6])),
        Err(FrameError::BadSubtype { .. })
    ));
    let pdu = FrameBuilder::default().raw_tlv(tlv_type::CHASSIS_ID, b"\x04");
    assert!(matches!(
        parse_frame(&pdu.frame([2; 6])),
        Err(FrameError::BadLength { .. })
    ));
    // Missing End TLV: lldpd rejects it, so do we.
    let mut f = base().pdu();
    f.truncate(f.len() - 2);
    assert_eq!(
        roce_lldp::tlv::parse_pdu(&f),
        Err(FrameError::MissingMandatory)
    );
    // End TLV with a length.
    let mut f = base().pdu();
    let n = f.len();
    f[n - 1] = 1;
    f.push(0);
    assert!(roce_lldp::tlv::parse_pdu(&f).is_err());
    // Not LLDP: wrong destination, wrong ethertype, oversized.
    let mut f = base().frame([2; 6]);
    f[5] = 0x01;
    assert_eq!(parse_frame(&f), Err(FrameError::NotLldpDestination));
    let mut f = base().frame([2; 6]);
    f[12] = 0x08;
    f[13] = 0x00;
    assert_eq!(parse_frame(&f), Err(FrameError::NotLldp(0x0800)));
    assert!(matches!(
        parse_frame(&vec![0u8; 10_000]),
        Err(FrameError::TooLong(_))
    ));
}

#[test]
fn lying_dcbx_tlvs_are_dropped_alone() {
    let oui = [0x00, 0x80, 0xc2];
    let f = FrameBuilder::new([2; 6], "swp1", 120)
        .system_name("leaf")
        .org(oui, 11, &[0x08]) // PFC one byte short
        .org(oui, 12, &[0x00, 0x85, 0x00]) // APP entry cut
        .org(oui, 9, &[0u8; 20]) // ETS one byte short
        .org(oui, 10, &[0u8; 30]) // ETS recommendation too long
        .frame([2; 6]);
    let pdu = parse_frame(&f).unwrap();
    assert_eq!(pdu.system_name.as_deref(), Some("leaf"));
    assert_eq!(
        (
            pdu.pfc,
            pdu.app,
            pdu.ets_configuration,
            pdu.ets_recommendation
        ),
        (None, None, None, None)
    );
    assert_eq!(pdu.malformed_org_tlvs, 4);
    // A second PFC TLV does not override the first.
    let f = FrameBuilder::new([2; 6], "swp1", 120)
        .pfc(&Pfc {
            willing: false,
            mbc: false,
            cap: 8,
            enable: Priorities::from_bits(0x08),
        })
        .pfc(&Pfc {
            willing: false,
            mbc: false,
            cap: 8,
            enable: Priorities::from_bits(0x10),
        })
        .frame([2; 6]);
    assert_eq!(
        parse_frame(&f).unwrap().pfc.unwrap().enable,
        Priorities::one(3)
    );
}

#[test]
fn bounded_text_app_and_addresses() {
    let long = "x".repeat(500);
    let entries: Vec<AppEntry> = (0..160)
        .map(|i| AppEntry {
            selector: 5,
            protocol: i,
            priority: (i % 8) as u8,
        })
        .collect();
    let mut b = FrameBuilder::new([2; 6], "swp1", 120)
        .system_name(&long)
        .system_description("a\u{7}b\u{0}")
        .app(&entries);
    for i in 0..10 {
        b = b.management_ipv4([10, 0, 0, i], 1);
    }
    let pdu = parse_frame(&b.frame([2; 6])).unwrap();
    assert_eq!(pdu.system_name.unwrap().len(), MAX_TEXT);
    assert_eq!(pdu.system_description.as_deref(), Some("a?b"));
    assert_eq!(pdu.app.unwrap().len(), MAX_APP);
    assert_eq!(pdu.management_addresses.len(), roce_lldp::tlv::MAX_MGMT);
}

/// A small deterministic generator (xorshift), so the corruption test
/// needs no dependency and repeats exactly.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn random_corruption_never_panics_and_keeps_mandatory_tlvs() {
    let good = switch_frame("leaf-r3-a", "swp17", 4, 26, 4).frame([2; 6]);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let mut f = good.clone();
        for _ in 0..(1 + rng.next() % 4) {
            let i = 14 + (rng.next() as usize) % (f.len() - 14);
            f[i] = rng.next() as u8;
        }
        if rng.next().is_multiple_of(4) {
            let cut = 14 + (rng.next() as usize) % (f.len() - 14);
            f.truncate(cut);
        }
        if let Ok(pdu) = parse_frame(&f) {
            accepted += 1;
            assert!((1..=7).contains(&pdu.chassis_id.subtype));
            assert!((1..=7).contains(&pdu.port_id.subtype));
            assert!(pdu.system_name.as_ref().is_none_or(|s| s.len() <= MAX_TEXT));
            assert!(pdu.app.as_ref().is_none_or(|a| a.len() <= MAX_APP));
        }
    }
    // Corrupting values (not headers) leaves frames acceptable: the test
    // exercises both paths.
    assert!(accepted > 100, "{accepted}");
}
