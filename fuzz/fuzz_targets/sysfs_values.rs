//! Fuzz target: every parser of a single sysfs value. RDMA (`crates/rdma`
//! parse.rs: counters incl. "N/A (no PMA)", rate, state, phys_state,
//! node_type, hex lid, link_layer, GID text and bytes, GID type, numa_node,
//! PCI function names, device globs) and PCI (`crates/topology` pci.rs:
//! addresses, link speed and width, hex ids, numa_node). The byte fast paths
//! must agree with the text parsers they shortcut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_rdma::parse;
use roce_topology::pci;

fuzz_target!(|data: &[u8]| {
    // The fast paths take the raw file; the text parsers get what the reader
    // gives them (lossy UTF-8).
    let text = String::from_utf8_lossy(data);
    let t: &str = &text;

    assert_eq!(parse::counter_bytes(data), parse::counter(t), "{t:?}");
    assert_eq!(parse::gid_bytes(data), parse::gid(t), "{t:?}");
    if let Ok(parse::CounterText::Value(v)) = parse::counter(t) {
        // Whatever parses as a value is the decimal it printed as.
        assert_eq!(t.trim().trim_start_matches('+').trim_start_matches('0'), {
            let s = v.to_string();
            if v == 0 {
                String::new()
            } else {
                s
            }
        });
    }
    if let Ok(rate) = parse::rate_bytes_per_second(t) {
        // Gb/s as printed: never above u64::MAX bit/s, so / 8 fits.
        assert!(rate <= u64::MAX / 8);
    }
    let _ = parse::port_state(t);
    let _ = parse::phys_state(t);
    let _ = parse::node_type(t);
    let _ = parse::hex_u32(t);
    let _ = parse::link_layer(t);
    let _ = parse::gid_type(t);
    let _ = parse::numa_node(t);
    let _ = parse::text(t);
    let _ = parse::is_pci_address(t);

    // Globs: the pattern and the name both come from outside (config and
    // kernel); split the input in two at the first NUL.
    let (pattern, name) = t.split_once('\0').unwrap_or((t, "mlx5_0"));
    let _ = parse::glob_match(pattern, name);
    let _ = parse::glob_match(name, pattern);

    if let Some(a) = pci::PciAddress::parse(t) {
        // The normalised spelling parses back to the same address.
        assert_eq!(pci::PciAddress::parse(&a.to_string()), Some(a));
    }
    let _ = pci::parse_link_speed(t);
    let _ = pci::parse_link_width(t);
    let _ = pci::parse_hex(t);
    let _ = pci::parse_numa_node(t);
});
