//! Fuzz target: PCI config-space parsing (`crates/topology` acs.rs): the
//! extended-capability walk to ACS and its P2P Request Redirect bit, and the
//! capability-list walk to the PCI Express port type, on the bytes of a
//! sysfs `config` file of any length (64 bytes unprivileged, 256, 4096).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_topology::acs::{acs_state, port_type, AcsState};

fuzz_target!(|data: &[u8]| {
    let state = acs_state(data);
    if data.len() <= 64 {
        assert_eq!(state, AcsState::Unknown);
    }
    let _ = state.as_str();
    let _ = port_type(data);
});
