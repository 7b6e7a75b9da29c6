//! Byte-level tests of the pure encoder and parsers, buffers laid out by
//! hand per `include/uapi/linux/netlink.h`.

use super::*;

/// `struct nlmsghdr` + payload, host byte order.
fn nlmsg(kind: u16, flags: u16, seq: u32, pid: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(&flags.to_ne_bytes());
    v.extend_from_slice(&seq.to_ne_bytes());
    v.extend_from_slice(&pid.to_ne_bytes());
    v.extend_from_slice(payload);
    v
}

/// `struct nlattr` + payload, padded to 4.
pub(crate) fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(payload);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

#[test]
fn builder_layout_matches_uapi() {
    let mut b = MessageBuilder::new(0x1411, NLM_F_DUMP);
    b.header(&[7, 8]).attr_u8(1, 0xab).attr_u16(2, 0x1234);
    let t = b.nest_begin(3);
    b.attr_u32(4, 0xdead_beef).attr_str(5, "rxe0");
    b.nest_end(t).attr_u64(6, 1 << 40).attr_flag(7);
    let got = b.finish().unwrap();

    let mut want = Vec::new();
    want.extend_from_slice(&[7, 8, 0, 0]);
    want.extend(nla(1, &[0xab]));
    want.extend(nla(2, &0x1234u16.to_ne_bytes()));
    let mut inner = nla(4, &0xdead_beefu32.to_ne_bytes());
    inner.extend(nla(5, b"rxe0\0"));
    want.extend(nla(3 | NLA_F_NESTED, &inner));
    want.extend(nla(6, &(1u64 << 40).to_ne_bytes()));
    want.extend(nla(7, &[]));
    assert_eq!(got, nlmsg(0x1411, NLM_F_DUMP, 0, 0, &want));
    assert_eq!(got.len() % 4, 0);
    // "rxe0\0" is 5 bytes: nla_len 9, padded to 12.
    assert_eq!(&want[32..34], &9u16.to_ne_bytes());
}

#[test]
fn builder_round_trips_through_parser() {
    let mut b = MessageBuilder::new(20, 0);
    let outer = b.nest_begin(1);
    let inner = b.nest_begin(2);
    b.attr_u64(3, u64::MAX - 1);
    b.nest_end(inner);
    b.nest_end(outer);
    let buf = b.finish().unwrap();
    let msgs: Vec<_> = messages(&buf).collect::<Result<_, _>>().unwrap();
    assert_eq!(msgs.len(), 1);
    let a = attrs(msgs[0].payload).next().unwrap().unwrap();
    assert_eq!((a.kind, a.nested), (1, true));
    let b2 = a.nested().next().unwrap().unwrap();
    assert_eq!(b2.kind, 2);
    let c = b2.nested().find(3).unwrap().unwrap();
    assert_eq!(c.as_u64().unwrap(), u64::MAX - 1);
}

#[test]
fn builder_reports_oversize_and_open_nests() {
    let big = vec![0u8; 65532];
    assert!(MessageBuilder::new(1, 0)
        .attr_bytes(1, &big)
        .finish()
        .is_err());
    assert!(MessageBuilder::new(1, 0)
        .attr_bytes(1, &big[..65531])
        .finish()
        .is_ok());
    let mut b = MessageBuilder::new(1, 0);
    let _open = b.nest_begin(1);
    assert!(matches!(b.finish(), Err(NlError::Malformed { .. })));
    let mut b = MessageBuilder::new(1, 0);
    let t = b.nest_begin(1);
    b.attr_bytes(2, &big[..65000]).attr_bytes(3, &big[..1000]);
    assert!(b.nest_end(t).finish().is_err());
    let mut b = MessageBuilder::new(1, 0);
    b.finish().unwrap();
    assert!(b.finish().is_err());
}

#[test]
fn several_messages_in_one_datagram() {
    let mut d = nlmsg(100, NLM_F_MULTI, 7, 42, &[1, 2, 3]); // len 19, padded
    d.extend_from_slice(&[0]);
    d.extend(nlmsg(NLMSG_DONE, NLM_F_MULTI, 7, 42, &0i32.to_ne_bytes()));
    let m: Vec<_> = messages(&d).collect::<Result<_, _>>().unwrap();
    assert_eq!(m.len(), 2);
    assert_eq!(
        (m[0].kind, m[0].flags, m[0].seq, m[0].pid, m[0].payload),
        (100, NLM_F_MULTI, 7, 42, &[1u8, 2, 3][..])
    );
    assert_eq!(m[1].kind, NLMSG_DONE);
    assert_eq!(parse_done(m[1].payload, m[1].flags).errno, 0);
}

#[test]
fn last_message_without_padding_is_accepted() {
    let d = nlmsg(100, 0, 1, 1, &[9]);
    assert_eq!(d.len(), 17);
    let m: Vec<_> = messages(&d).collect::<Result<_, _>>().unwrap();
    assert_eq!(m[0].payload, &[9]);
}

#[test]
fn malformed_messages_end_with_one_error() {
    // Truncated header.
    let r: Vec<_> = messages(&[1, 2, 3]).collect();
    assert_eq!(r.len(), 1);
    assert!(matches!(
        r[0],
        Err(NlError::Truncated {
            need: 16,
            have: 3,
            ..
        })
    ));
    // nlmsg_len 0 (would loop forever if trusted) and below the header.
    for len in [0u32, 15] {
        let mut d = nlmsg(100, 0, 1, 1, &[]);
        d[0..4].copy_from_slice(&len.to_ne_bytes());
        let r: Vec<_> = messages(&d).collect();
        assert_eq!(r.len(), 1);
        assert!(matches!(r[0], Err(NlError::Malformed { .. })));
    }
    // nlmsg_len beyond the datagram.
    let mut d = nlmsg(100, 0, 1, 1, &[0; 8]);
    d[0..4].copy_from_slice(&4000u32.to_ne_bytes());
    let r: Vec<_> = messages(&d).collect();
    assert!(matches!(
        r[..],
        [Err(NlError::Truncated {
            need: 4000,
            have: 24,
            ..
        })]
    ));
    // u32::MAX length.
    d[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert_eq!(messages(&d).count(), 1);
    // A good message followed by a torn one: one item, then the error.
    let mut d = nlmsg(100, 0, 1, 1, &[]);
    d.extend_from_slice(&[20, 0, 0]);
    let r: Vec<_> = messages(&d).collect();
    assert!(r[0].is_ok() && r[1].is_err() && r.len() == 2);
    assert_eq!(messages(&[]).count(), 0);
}

#[test]
fn error_reply_with_ext_ack_text() {
    // struct nlmsgerr { int error; struct nlmsghdr msg; } + capped + TLVs.
    let mut p = (-libc::EINVAL).to_ne_bytes().to_vec();
    p.extend(nlmsg(0x1411, 5, 3, 9, &[]));
    p.extend(nla(NLMSGERR_ATTR_MSG, b"Unknown device\0"));
    let e = parse_error(&p, NLM_F_CAPPED | NLM_F_ACK_TLVS).unwrap();
    assert_eq!(e.errno, libc::EINVAL);
    assert_eq!(e.message.as_deref(), Some("Unknown device"));

    // Not capped: the request's payload (8 bytes) is echoed before TLVs.
    let mut p = (-libc::ENODEV).to_ne_bytes().to_vec();
    p.extend(nlmsg(0x1411, 5, 3, 9, &[0; 8]));
    p.extend(nla(NLMSGERR_ATTR_MSG, b"gone\0"));
    let e = parse_error(&p, NLM_F_ACK_TLVS).unwrap();
    assert_eq!(
        (e.errno, e.message.as_deref()),
        (libc::ENODEV, Some("gone"))
    );

    // An ack: error 0, nothing else needed.
    let e = parse_error(&0i32.to_ne_bytes(), 0).unwrap();
    assert_eq!(
        e,
        ErrorReply {
            errno: 0,
            message: None
        }
    );
    // Truncated error field; damaged TLV tail loses only the text.
    assert!(parse_error(&[1, 2], 0).is_err());
    let mut p = (-libc::EPERM).to_ne_bytes().to_vec();
    p.extend_from_slice(&[0xff; 5]);
    let e = parse_error(&p, NLM_F_ACK_TLVS).unwrap();
    assert_eq!((e.errno, e.message), (libc::EPERM, None));
    // i32::MIN does not overflow.
    assert_eq!(
        parse_error(&i32::MIN.to_ne_bytes(), 0).unwrap().errno,
        i32::MAX
    );
}

#[test]
fn done_with_dump_error() {
    let e = parse_done(&(-libc::EMSGSIZE).to_ne_bytes(), 0);
    assert_eq!(e.errno, libc::EMSGSIZE);
    assert_eq!(parse_done(&[], 0).errno, 0);
}

#[test]
fn attribute_flags_are_masked_and_values_read() {
    let mut buf = nla(1 | NLA_F_NESTED, &nla(2, &[5]));
    buf.extend(nla(3 | NLA_F_NET_BYTEORDER, &0x0102u16.to_be_bytes()));
    buf.extend(nla(4 | NLA_F_NET_BYTEORDER, &0x0a00_0001u32.to_be_bytes()));
    buf.extend(nla(5, b"eth0\0\0\0"));
    buf.extend(nla(6, b"no-nul"));
    let a: Vec<_> = attrs(&buf).collect::<Result<_, _>>().unwrap();
    assert_eq!(a.len(), 5);
    assert_eq!((a[0].kind, a[0].nested), (1, true));
    assert_eq!(a[0].nested().next().unwrap().unwrap().as_u8().unwrap(), 5);
    assert_eq!((a[1].kind, a[1].net_byteorder), (3, true));
    assert_eq!(a[1].as_u16().unwrap(), 0x0102);
    assert_eq!(a[2].as_u32().unwrap(), 0x0a00_0001);
    assert_eq!(a[3].as_str().unwrap(), "eth0");
    assert_eq!(a[4].as_str().unwrap(), "no-nul");
}

#[test]
fn short_values_fail_cleanly() {
    let buf = nla(1, &[1, 2, 3]);
    let a = attrs(&buf).next().unwrap().unwrap();
    assert_eq!(a.payload, &[1, 2, 3]);
    assert!(a.as_u8().is_ok());
    assert!(a.as_u16().is_ok());
    assert!(matches!(
        a.as_u32(),
        Err(NlError::Truncated {
            need: 4,
            have: 3,
            ..
        })
    ));
    assert!(a.as_u64().is_err());
    let empty = nla(2, &[]);
    let a = attrs(&empty).next().unwrap().unwrap();
    assert!(a.as_u8().is_err());
    assert_eq!(a.as_str().unwrap(), "");
    assert_eq!(a.nested().count(), 0);
    let bad = nla(3, &[0xff, 0xfe, 0]);
    assert!(matches!(
        attrs(&bad).next().unwrap().unwrap().as_str(),
        Err(NlError::NotUtf8 { kind: 3 })
    ));
}

#[test]
fn malformed_attributes_end_with_one_error() {
    // nla_len 0 (a naive parser loops forever), 3 (below the header).
    for len in [0u16, 3] {
        let mut buf = nla(1, &[0; 4]);
        buf[0..2].copy_from_slice(&len.to_ne_bytes());
        let r: Vec<_> = attrs(&buf).collect();
        assert_eq!(r.len(), 1);
        assert!(matches!(r[0], Err(NlError::Malformed { .. })));
    }
    // nla_len past the end.
    let mut buf = nla(1, &[0; 4]);
    buf[0..2].copy_from_slice(&200u16.to_ne_bytes());
    assert!(matches!(
        attrs(&buf).collect::<Vec<_>>()[..],
        [Err(NlError::Truncated {
            need: 200,
            have: 8,
            ..
        })]
    ));
    // Trailing bytes too short for a header, after a good attribute.
    let mut buf = nla(1, &[7]);
    buf.extend_from_slice(&[1, 0]);
    let r: Vec<_> = attrs(&buf).collect();
    assert_eq!(r.len(), 2);
    assert!(r[0].is_ok());
    assert!(matches!(
        r[1],
        Err(NlError::Truncated {
            need: 4,
            have: 2,
            ..
        })
    ));
    // Last attribute without its padding (misaligned end) is fine.
    let mut buf = nla(1, &[7]);
    buf.truncate(5);
    assert_eq!(attrs(&buf).next().unwrap().unwrap().as_u8().unwrap(), 7);
    // Malformed nested payload: the error surfaces through nested().
    let outer = nla(1 | NLA_F_NESTED, &[0, 0, 9, 0]);
    let a = attrs(&outer).next().unwrap().unwrap();
    assert!(a.nested().next().unwrap().is_err());
    assert!(attrs(&outer).find(2).unwrap().is_none());
    assert!(attrs(&[0, 0, 1, 0]).find(1).is_err());
}

#[test]
fn attrs_after_family_header() {
    let mut p = vec![1, 2, 3, 4];
    p.extend(nla(9, &[1]));
    let m = NlMessage {
        kind: 1,
        flags: 0,
        seq: 1,
        payload: p,
    };
    assert_eq!(m.attrs(4).unwrap().next().unwrap().unwrap().kind, 9);
    // A 2-byte header is padded to 4, as nlmsg_attrdata does.
    assert_eq!(m.attrs(2).unwrap().next().unwrap().unwrap().kind, 9);
    assert!(m.attrs(100).is_err());
    assert_eq!(attrs_after(&[1, 2], 2).unwrap().count(), 0);
}

/// Walks every attribute and nest of `buf` (depth-limited like the kernel's
/// `MAX_POLICY_RECURSION_DEPTH`), reading every accessor.
fn walk(buf: &[u8], depth: u32) -> usize {
    let mut n = 0;
    for a in attrs(buf) {
        n += 1;
        let Ok(a) = a else { break };
        let _ = (a.as_u8(), a.as_u16(), a.as_u32(), a.as_u64(), a.as_str());
        if depth < 10 {
            n += walk(a.payload, depth + 1);
        }
    }
    n
}

#[test]
fn random_buffers_never_panic_or_loop() {
    // xorshift64: deterministic, no dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..20_000 {
        let len = (next() % 96) as usize;
        let mut buf: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Bias lengths toward plausible values so parsing goes deep.
        if len >= 4 && round % 2 == 0 {
            let l = (next() % (len as u64 + 8)) as u16;
            buf[0..2].copy_from_slice(&l.to_ne_bytes());
        }
        // Each attribute consumes at least 4 bytes and every level ends
        // after one error: the walk is bounded by the bytes times depth.
        assert!(walk(&buf, 0) <= (len / 4 + 1) * 11);
        let msgs = messages(&buf).count();
        assert!(msgs <= len / 16 + 1);
        for m in messages(&buf).flatten() {
            let _ = parse_error(m.payload, m.flags);
            let _ = parse_done(m.payload, m.flags);
            walk(m.payload, 0);
        }
        let _ = crate::rdma::parse_port_stats(&buf);
        let _ = crate::rdma::parse_device(&buf);
    }
}
