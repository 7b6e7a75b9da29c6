//! Fuzz target: every netlink reply decoder (`crates/netlink` msg.rs: the
//! message and attribute iterators, NLMSG_ERROR / NLMSG_DONE with extended
//! ack, typed attribute reads; rdma.rs: RDMA nldev device and
//! `RDMA_NLDEV_CMD_STAT_GET` hardware-counter replies), the DCB reply
//! decoders (IEEE and CEE get, ETS, buffers, peer) (`crates/netdev` dcb.rs) and the ethtool-netlink pause reply
//! (live.rs). The input is read both as a whole datagram and as the payload
//! of each message in it, so seeds of either kind work.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_netlink::msg::{self, attrs, messages, Attrs, NLMSG_DONE, NLMSG_ERROR};
use roce_netlink::rdma;

/// Walks attributes and their nests (nldev and DCB nest without
/// NLA_F_NESTED, so every payload is tried as a nest), reading each value
/// as every type.
fn walk(a: Attrs<'_>, depth: usize) -> usize {
    let mut n = 0;
    for attr in a {
        let Ok(attr) = attr else {
            return n;
        };
        n += 1;
        let _ = (attr.as_u8(), attr.as_u16(), attr.as_u32(), attr.as_u64());
        let _ = attr.as_str();
        if depth < 4 {
            n += walk(attr.nested(), depth + 1);
        }
    }
    n
}

fn payload_decoders(payload: &[u8]) {
    if let Ok(stats) = rdma::parse_port_stats(payload) {
        for c in &stats.counters {
            assert!(!c.name.contains('\0'));
        }
    }
    let _ = rdma::parse_device(payload);
    let _ = roce_netdev::live::parse_pause_reply(payload);
    if let Ok(config) = roce_netdev::dcb::decode_payload(payload) {
        let _ = (config.trust(), config.dscp_map());
        for p in 0u8..8 {
            // Decoded ETS and buffers only hold in-range indices.
            assert!(config.tc_of(p).is_none_or(|tc| tc <= 7));
            if let Some(b) = &config.buffers {
                assert!(b.size_for(p).is_some());
            }
        }
        let _ = config.peer.dscp_map();
        let _ = config.dcbx.map(roce_netdev::dcb::dcbx_mode_name);
    }
    if let Ok(cee) = roce_netdev::dcb::decode_cee_payload(payload) {
        let _ = cee.peer.dscp_map();
    }
    let _ = walk(attrs(payload), 0);
    for header in [0, 4, 16] {
        if let Ok(a) = msg::attrs_after(payload, header) {
            let _ = walk(a, 0);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut count = 0usize;
    for m in messages(data) {
        let Ok(m) = m else {
            break;
        };
        count += 1;
        // Every message takes at least its 16-byte header: the iteration
        // always advances.
        assert!(count <= data.len() / msg::NLMSG_HDRLEN);
        match m.kind {
            NLMSG_ERROR => {
                let _ = msg::parse_error(m.payload, m.flags);
            }
            NLMSG_DONE => {
                let _ = msg::parse_done(m.payload, m.flags);
            }
            _ => {}
        }
        let owned = m.to_message();
        let _ = owned.attrs(4).map(|a| walk(a, 0));
        payload_decoders(m.payload);
    }
    if let Ok(config) = roce_netdev::dcb::decode_reply(data) {
        let _ = (config.trust(), config.dscp_map());
    }
    let _ = msg::parse_error(data, msg::NLM_F_ACK_TLVS);
    let _ = msg::parse_error(data, msg::NLM_F_ACK_TLVS | msg::NLM_F_CAPPED);
    let _ = msg::parse_done(data, msg::NLM_F_ACK_TLVS);
    payload_decoders(data);
    // Attributes cannot outnumber their 4-byte headers either.
    assert!(walk(attrs(data), 4) <= data.len() / msg::NLA_HDRLEN);
});
