//! nldev replies laid out by hand per `include/uapi/rdma/rdma_netlink.h`
//! and `drivers/infiniband/core/nldev.c`.

use super::*;
use crate::msg::tests::nla;
use crate::msg::{messages, NLA_F_NESTED};

fn entry(name: &str, value: u64, pad: bool) -> Vec<u8> {
    let mut name_z = name.as_bytes().to_vec();
    name_z.push(0);
    let mut inner = nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, &name_z);
    if pad {
        // nla_put_u64_64bit on architectures that align u64 attributes.
        inner.extend(nla(RDMA_NLDEV_ATTR_PAD, &[]));
    }
    inner.extend(nla(
        RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE,
        &value.to_ne_bytes(),
    ));
    nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY | NLA_F_NESTED, &inner)
}

/// The rxe counters of `captures/virtio-net/rdma-tool-after.txt`, in the
/// order `rdma statistic show` printed them (the kernel's order).
const RXE_AFTER: [(&str, u64); 15] = [
    ("sent_pkts", 180690),
    ("rcvd_pkts", 180690),
    ("duplicate_request", 1025),
    ("out_of_seq_request", 0),
    ("rcvd_rnr_err", 0),
    ("send_rnr_err", 0),
    ("rcvd_seq_err", 0),
    ("ack_deferred", 1),
    ("retry_exceeded_err", 0),
    ("retry_rnr_exceeded_err", 0),
    ("completer_retry_err", 38),
    ("send_err", 0),
    ("link_downed", 0),
    ("rdma_sends", 6045),
    ("rdma_recvs", 6045),
];

fn stat_reply(dev: u32, port: u32, entries: &[u8]) -> Vec<u8> {
    let mut p = nla(RDMA_NLDEV_ATTR_DEV_INDEX, &dev.to_ne_bytes());
    p.extend(nla(RDMA_NLDEV_ATTR_DEV_NAME, b"rxe0\0"));
    p.extend(nla(RDMA_NLDEV_ATTR_PORT_INDEX, &port.to_ne_bytes()));
    p.extend(nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTERS | NLA_F_NESTED, entries));
    p
}

#[test]
fn message_types_match_rdma_nl_get_type() {
    assert_eq!(nldev_type(RDMA_NLDEV_CMD_GET), 5121);
    assert_eq!(nldev_type(RDMA_NLDEV_CMD_STAT_GET), 5137);
}

#[test]
fn requests_are_laid_out_like_rdma_tool() {
    let r = stat_get_request(3, 1).unwrap();
    let m: Vec<_> = messages(&r).collect::<Result<_, _>>().unwrap();
    assert_eq!((m.len(), m[0].kind, m[0].flags), (1, 5137, 0));
    let mut want = nla(RDMA_NLDEV_ATTR_DEV_INDEX, &3u32.to_ne_bytes());
    want.extend(nla(RDMA_NLDEV_ATTR_PORT_INDEX, &1u32.to_ne_bytes()));
    assert_eq!(m[0].payload, &want[..]);
    assert_eq!(r.len(), 32);

    let r = get_devices_request().unwrap();
    let m: Vec<_> = messages(&r).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        (m[0].kind, m[0].flags, m[0].payload.len()),
        (5121, NLM_F_DUMP, 0)
    );
}

#[test]
fn rxe_counter_set_from_capture() {
    let mut entries = Vec::new();
    for (i, (n, v)) in RXE_AFTER.iter().enumerate() {
        entries.extend(entry(n, *v, i % 2 == 1));
    }
    let stats = parse_port_stats(&stat_reply(0, 1, &entries)).unwrap();
    assert_eq!((stats.dev_index, stats.port), (Some(0), Some(1)));
    let got: Vec<(&str, u64)> = stats
        .counters
        .iter()
        .map(|c| (c.name.as_str(), c.value))
        .collect();
    assert_eq!(got, RXE_AFTER.to_vec());
}

#[test]
fn empty_table_and_unknown_attributes() {
    // A device whose counters are all disabled sends an empty nest.
    let stats = parse_port_stats(&stat_reply(1, 2, &[])).unwrap();
    assert!(stats.counters.is_empty());
    // Unknown attributes (INDEX, DYNAMIC from newer kernels, garbage
    // types) inside an entry and in the table are ignored.
    let mut inner = nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, b"x\0");
    inner.extend(nla(
        RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX,
        &7u32.to_ne_bytes(),
    ));
    inner.extend(nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC, &[1]));
    inner.extend(nla(
        RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE,
        &u64::MAX.to_ne_bytes(),
    ));
    let mut table = nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY, &inner);
    table.extend(nla(999, &[1, 2, 3]));
    let stats = parse_port_stats(&stat_reply(1, 2, &table)).unwrap();
    assert_eq!(
        stats.counters,
        vec![HwCounter {
            name: "x".into(),
            value: u64::MAX
        }]
    );
}

#[test]
fn malformed_stat_replies_are_errors() {
    // No table at all.
    let p = nla(RDMA_NLDEV_ATTR_DEV_INDEX, &0u32.to_ne_bytes());
    assert!(matches!(
        parse_port_stats(&p),
        Err(NlError::MissingAttr { .. })
    ));
    // Entry without a value, entry without a name.
    let e = nla(
        RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY,
        &nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, b"a\0"),
    );
    assert!(parse_port_stats(&stat_reply(0, 1, &e)).is_err());
    let e = nla(
        RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY,
        &nla(
            RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE,
            &1u64.to_ne_bytes(),
        ),
    );
    assert!(parse_port_stats(&stat_reply(0, 1, &e)).is_err());
    // A 4-byte value where a u64 belongs.
    let mut inner = nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, b"a\0");
    inner.extend(nla(
        RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE,
        &1u32.to_ne_bytes(),
    ));
    let e = nla(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY, &inner);
    assert!(matches!(
        parse_port_stats(&stat_reply(0, 1, &e)),
        Err(NlError::Truncated {
            need: 8,
            have: 4,
            ..
        })
    ));
    // The good reply cut at every length: never a panic, and never a
    // silently shorter counter list.
    let mut entries = Vec::new();
    for (n, v) in RXE_AFTER {
        entries.extend(entry(n, v, false));
    }
    let full = stat_reply(0, 1, &entries);
    for cut in 0..full.len() {
        if let Ok(s) = parse_port_stats(&full[..cut]) {
            panic!("cut at {cut} parsed as {} counters", s.counters.len());
        }
    }
    // Corrupt every length byte in turn: errors or a full parse, no panic.
    for i in 0..full.len() {
        let mut b = full.clone();
        b[i] ^= 0xff;
        let _ = parse_port_stats(&b);
    }
}

#[test]
fn device_list_entries() {
    let mut p = nla(RDMA_NLDEV_ATTR_DEV_INDEX, &4u32.to_ne_bytes());
    p.extend(nla(RDMA_NLDEV_ATTR_DEV_NAME, b"mlx5_0\0"));
    p.extend(nla(RDMA_NLDEV_ATTR_PORT_INDEX, &2u32.to_ne_bytes()));
    p.extend(nla(4, &0u64.to_ne_bytes())); // CAP_FLAGS, ignored
    assert_eq!(
        parse_device(&p).unwrap(),
        RdmaDevice {
            index: 4,
            name: "mlx5_0".into(),
            port_count: 2
        }
    );
    let p = nla(RDMA_NLDEV_ATTR_DEV_NAME, b"x\0");
    assert!(matches!(parse_device(&p), Err(NlError::MissingAttr { .. })));
    let mut p = nla(RDMA_NLDEV_ATTR_DEV_INDEX, &[1, 0]);
    p.extend(nla(RDMA_NLDEV_ATTR_DEV_NAME, b"x\0"));
    assert!(parse_device(&p).is_err());
}
