//! Fuzz target: the recorded-data formats replayed for trees that are not
//! the running kernel (`netdevs.replay`): `ethtool -S` text
//! (`crates/netdev` ethtool.rs `parse_ethtool_s`, then the name→meaning
//! table) and the DCB replay format (reader.rs `parse_dcb_replay`, then
//! trust and the DSCP map as the rules read them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_netdev::ethtool::parse_ethtool_s;
use roce_netdev::mapping::Resolved;
use roce_netdev::reader::parse_dcb_replay;

fuzz_target!(|data: &[u8]| {
    // Both are read with read_to_string: only valid UTF-8 reaches them.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };

    let stats = parse_ethtool_s(text);
    for (name, _) in &stats {
        assert!(!name.is_empty());
        assert!(!name.contains('\n'));
    }
    let names: Vec<String> = stats.iter().map(|(n, _)| n.clone()).collect();
    let values: Vec<u64> = stats.iter().map(|(_, v)| *v).collect();
    let wanted: Vec<String> = names.iter().take(2).cloned().collect();
    let (_, raw) = Resolved::new(&names, &wanted).apply(&values);
    assert!(raw.len() >= wanted.len().min(1) || names.is_empty());

    if let Ok(config) = parse_dcb_replay(text) {
        let _ = config.trust();
        let _ = config.trust_reported();
        for (dscp, priority) in config.dscp_map() {
            assert!(dscp <= 63 && priority <= 7);
        }
        if let Some(pfc) = config.pfc_enabled {
            assert!(pfc.iter().all(|p| p <= 7));
        }
        for p in 0u8..8 {
            assert!(config.tc_of(p).is_none_or(|tc| tc <= 7));
        }
        if let Some(map) = config.peer.dscp_map() {
            assert!(map.iter().all(|&(d, p)| d <= 63 && p <= 7));
        }
    }
});
