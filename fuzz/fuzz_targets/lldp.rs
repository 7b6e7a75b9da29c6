//! Fuzz target: what the LLDP source reads from the wire and from lldpd
//! (`crates/lldp`): the input as an Ethernet frame through the LLDPDU
//! decoder (tlv.rs), and as lldpd's `lldpcli -f json0` document (lldpd.rs);
//! every neighbour either accepts goes into the neighbour table (table.rs).
//! The decoder's bounds (text, APP entries, management addresses) and the
//! table's (neighbours per port) must hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_lldp::table::MAX_PER_PORT;
use roce_lldp::tlv::{MAX_APP, MAX_MGMT, MAX_TEXT};
use roce_lldp::{Lldpdu, NeighbourTable};

fn bounded(pdu: &Lldpdu) {
    for text in [
        &pdu.port_description,
        &pdu.system_name,
        &pdu.system_description,
    ]
    .into_iter()
    .flatten()
    {
        assert!(text.len() <= MAX_TEXT, "{} bytes", text.len());
    }
    // An ID of at most 255 bytes, as text or as aa:bb:.. hex.
    assert!(pdu.chassis_id.value.len() <= 3 * 256);
    assert!(pdu.port_id.value.len() <= 3 * 256);
    assert!(pdu.management_addresses.len() <= MAX_MGMT);
    assert!(pdu.app.as_ref().is_none_or(|a| a.len() <= MAX_APP));
}

fuzz_target!(|data: &[u8]| {
    let mut table = NeighbourTable::new();
    table.watch("eth0");
    if let Ok(pdu) = roce_lldp::parse_frame(data) {
        bounded(&pdu);
        table.observe("eth0", pdu, 1_000);
    }
    if let Ok(neighbours) = roce_lldp::lldpd::parse_json0(data) {
        for n in neighbours {
            bounded(&n.pdu);
            table.watch(&n.interface);
            table.observe(&n.interface, n.pdu, 2_000);
        }
    }
    for (_, port) in table.ports() {
        assert!(port.neighbours.len() <= MAX_PER_PORT);
    }
    table.expire(u64::MAX / 2);
    for (_, port) in table.ports() {
        assert!(port.neighbours.is_empty());
    }
});
