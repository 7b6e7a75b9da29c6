//! Fuzz target: the physical-layer decoders of `crates/netdev`: the
//! ethtool-netlink FEC reply (fec.rs) and module EEPROM reply (module.rs),
//! the module EEPROM memory-map decoders (SFF-8636, CMIS, SFF-8472) over
//! half pages cut from the input, the devlink health reporter reply
//! (devlink.rs), the AER sysfs text (aer.rs), and the hex replay formats
//! (genl.rs, module.rs). The input is read as a payload, as a datagram of
//! messages, as pages and as text, so seeds of any kind work.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_netdev::module::{self, HalfPage, Pages, I2C_A0, I2C_A2};
use roce_netdev::{aer, devlink, fec, genl};
use roce_netlink::messages;

const LAYOUT: [HalfPage; 7] = [
    HalfPage::lower(I2C_A0),
    HalfPage::upper(0, 0),
    HalfPage::upper(1, 0),
    HalfPage::upper(2, 0),
    HalfPage::upper(3, 0),
    HalfPage::upper(0x11, 0),
    HalfPage::lower(I2C_A2),
];

fn payload(p: &[u8]) {
    if let Ok(f) = fec::parse_fec_reply(p) {
        for c in [&f.corrected_blocks, &f.uncorrectable_blocks, &f.corrected_bits]
            .into_iter()
            .flatten()
        {
            assert!(c.lanes.len() <= 8);
        }
        let ber = fec::fec_ber(&f, &f, 1.0, 100_000);
        assert!(ber.pre_fec.is_none_or(|b| b == 0.0));
    }
    let _ = module::parse_eeprom_reply(p);
    let _ = devlink::parse_reporter(p);
}

fn pages(data: &[u8]) {
    let mut pages = Pages::new();
    for (id, chunk) in LAYOUT.iter().zip(data.chunks(module::HALF)) {
        pages.insert(*id, chunk.to_vec());
    }
    let _ = module::pages_needed(data);
    if let Ok(m) = module::decode(&pages) {
        assert!(m.lanes.len() <= 8);
        assert!(m.vendor.len() <= 16 && m.serial.len() <= 16);
    }
}

fuzz_target!(|data: &[u8]| {
    payload(data);
    for m in messages(data) {
        let Ok(m) = m else { break };
        payload(m.payload);
    }
    pages(data);
    let text = String::from_utf8_lossy(data);
    let _ = aer::parse_aer(&text);
    let _ = genl::parse_hex_messages(&text);
    if let Ok(p) = module::parse_eeprom_replay(&text) {
        let _ = module::decode(&p);
    }
});
