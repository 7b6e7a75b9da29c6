//! Pure parsers for the text the kernel prints in `/sys/class/infiniband`,
//! and the device-name glob. No I/O: every function takes the file content
//! (or a name) and returns a value or a [`ParseError`] saying why it did not
//! parse.

use std::net::Ipv6Addr;

use crate::types::{GidType, LinkLayer, PhysState, PortState};

/// Why an attribute's text did not parse; each variant carries the text
/// (shortened to 64 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not an unsigned counter: {0:?}")]
    Counter(String),
    #[error("expected \"N: NAME\": {0:?}")]
    IdAndName(String),
    #[error("expected \"<n> Gb/sec ...\": {0:?}")]
    Rate(String),
    #[error("not a hex number: {0:?}")]
    Hex(String),
    #[error("not a GID: {0:?}")]
    Gid(String),
    #[error("not a NUMA node: {0:?}")]
    NumaNode(String),
}

/// What a counter file held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterText {
    Value(u64),
    /// The kernel says the value does not exist here: `show_pma_counter` in
    /// older `drivers/infiniband/core/sysfs.c` prints "N/A (no PMA)" when the
    /// device has no performance management agent.
    NotAvailable,
}

/// A counter file (`counters/*`, `hw_counters/*`): one unsigned decimal
/// number (`%u`/`%llu` in sysfs.c), or the "N/A (no PMA)" quirk.
pub fn counter(text: &str) -> Result<CounterText, ParseError> {
    let t = text.trim();
    if t.starts_with("N/A") {
        return Ok(CounterText::NotAvailable);
    }
    t.parse::<u64>()
        .map(CounterText::Value)
        .map_err(|_| ParseError::Counter(shorten(t)))
}

/// [`counter`] on the raw bytes of the file: the plain decimal every counter
/// file holds is parsed in place (no text conversion, no allocation); any
/// other content goes through [`counter`], so the results are the same.
pub fn counter_bytes(raw: &[u8]) -> Result<CounterText, ParseError> {
    let digits = raw.trim_ascii();
    // Up to 19 digits cannot overflow a u64; 20-digit values (above 10^19)
    // take the checked path below.
    if (1..=19).contains(&digits.len()) {
        let mut value: u64 = 0;
        let mut plain = true;
        for &d in digits {
            let v = d.wrapping_sub(b'0');
            plain &= v < 10;
            // Garbage when not `plain`, and then discarded.
            value = value.wrapping_mul(10).wrapping_add(u64::from(v));
        }
        if plain {
            return Ok(CounterText::Value(value));
        }
    }
    counter(&String::from_utf8_lossy(raw))
}

/// Splits the "N: NAME" form of `state_show`, `phys_state_show` and
/// `node_type_show` (drivers/infiniband/core/sysfs.c).
fn id_and_name(text: &str) -> Result<(u32, &str), ParseError> {
    let t = text.trim();
    let (id, name) = t
        .split_once(':')
        .ok_or_else(|| ParseError::IdAndName(shorten(t)))?;
    let id = id
        .trim()
        .parse::<u32>()
        .map_err(|_| ParseError::IdAndName(shorten(t)))?;
    Ok((id, name.trim()))
}

/// `state`: "%d: %s" with the names of `ib_port_state_to_str`
/// (include/rdma/ib_verbs.h): NOP, DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER.
pub fn port_state(text: &str) -> Result<PortState, ParseError> {
    let (id, name) = id_and_name(text)?;
    Ok(match id {
        0 => PortState::Nop,
        1 => PortState::Down,
        2 => PortState::Init,
        3 => PortState::Armed,
        4 => PortState::Active,
        5 => PortState::ActiveDefer,
        _ => PortState::Other(id, name.to_string()),
    })
}

/// `phys_state`: "%u: %s" with `phys_state_to_str` (sysfs.c): Sleep,
/// Polling, Disabled, PortConfigurationTraining, LinkUp, LinkErrorRecovery,
/// Phy Test; anything else is `"<unknown>"`.
pub fn phys_state(text: &str) -> Result<PhysState, ParseError> {
    let (id, name) = id_and_name(text)?;
    Ok(match id {
        1 => PhysState::Sleep,
        2 => PhysState::Polling,
        3 => PhysState::Disabled,
        4 => PhysState::PortConfigurationTraining,
        5 => PhysState::LinkUp,
        6 => PhysState::LinkErrorRecovery,
        7 => PhysState::PhyTest,
        _ => PhysState::Other(id, name.to_string()),
    })
}

/// `node_type` ("1: CA", "2: switch", "4: RNIC", ...) without its number.
pub fn node_type(text: &str) -> Result<String, ParseError> {
    let (_, name) = id_and_name(text)?;
    Ok(name.to_string())
}

/// `rate` to bytes per second. `rate_show` (sysfs.c) prints
/// "%d%s Gb/sec (%dX%s)": the rate in Gb/s (speed per lane from
/// `ib_speed` × lanes from `ib_width_enum_to_int`, include/rdma/ib_verbs.h),
/// ".5" when the deci-Gb/s value is odd, then width and speed name. Only the
/// leading number matters; "2.5 Gb/sec" without the parenthesis parses too.
pub fn rate_bytes_per_second(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    let bad = || ParseError::Rate(shorten(t));
    let (number, rest) = t.split_once(' ').ok_or_else(bad)?;
    if !rest.trim_start().starts_with("Gb/sec") {
        return Err(bad());
    }
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty()
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
        || frac_part.len() > 9
    {
        return Err(bad());
    }
    let gbit: u64 = int_part.parse().map_err(|_| bad())?;
    // Fraction of a Gb/s in bit/s: "5" → 500_000_000.
    let mut frac_bits: u64 = 0;
    let mut scale: u64 = 100_000_000;
    for b in frac_part.bytes() {
        frac_bits += u64::from(b - b'0') * scale;
        scale /= 10;
    }
    let bits = gbit
        .checked_mul(1_000_000_000)
        .and_then(|v| v.checked_add(frac_bits))
        .ok_or_else(bad)?;
    Ok(bits / 8)
}

/// `lid`, `sm_lid`: "0x%x".
pub fn hex_u32(text: &str) -> Result<u32, ParseError> {
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    u32::from_str_radix(digits, 16).map_err(|_| ParseError::Hex(shorten(t)))
}

/// `link_layer`: "InfiniBand", "Ethernet" or "Unknown" (sysfs.c
/// `link_layer_show`).
pub fn link_layer(text: &str) -> LinkLayer {
    match text.trim() {
        "InfiniBand" => LinkLayer::InfiniBand,
        "Ethernet" => LinkLayer::Ethernet,
        other => LinkLayer::Other(other.to_string()),
    }
}

/// `gids/N`: "%pI6", eight groups of four hex digits.
pub fn gid(text: &str) -> Result<Ipv6Addr, ParseError> {
    let t = text.trim();
    t.parse::<Ipv6Addr>()
        .map_err(|_| ParseError::Gid(shorten(t)))
}

/// [`gid`] on the raw bytes of the file. The kernel's form (eight groups of
/// four hex digits, 39 bytes) is parsed in place; anything else goes through
/// [`gid`], so the results are the same.
pub fn gid_bytes(raw: &[u8]) -> Result<Ipv6Addr, ParseError> {
    let t = raw.trim_ascii();
    if t.len() == 39 {
        let mut groups = [0u16; 8];
        let mut ok = true;
        for (g, chunk) in groups.iter_mut().zip(t.chunks(5)) {
            let (hex, sep) = chunk.split_at(4.min(chunk.len()));
            ok &= sep.is_empty() || sep == b":";
            for &h in hex {
                let v = match h {
                    b'0'..=b'9' => h - b'0',
                    b'a'..=b'f' => h - b'a' + 10,
                    b'A'..=b'F' => h - b'A' + 10,
                    _ => {
                        ok = false;
                        0
                    }
                };
                *g = (*g << 4) | u16::from(v);
            }
        }
        if ok {
            let [a, b, c, d, e, f, g, h] = groups;
            return Ok(Ipv6Addr::new(a, b, c, d, e, f, g, h));
        }
    }
    gid(&String::from_utf8_lossy(raw))
}

/// `gid_attrs/types/N`: `ib_cache_gid_type_str` (core/cache.c) prints
/// "IB/RoCE v1" or "RoCE v2".
pub fn gid_type(text: &str) -> GidType {
    match text.trim() {
        "IB/RoCE v1" => GidType::IbRoceV1,
        "RoCE v2" => GidType::RoceV2,
        other => GidType::Other(other.to_string()),
    }
}

/// `numa_node` of a PCI function: a decimal int, -1 when unknown.
pub fn numa_node(text: &str) -> Result<Option<u32>, ParseError> {
    let t = text.trim();
    let n: i64 = t.parse().map_err(|_| ParseError::NumaNode(shorten(t)))?;
    Ok(u32::try_from(n).ok())
}

/// A one-line text attribute (`fw_ver`, `board_id`, `parent`, ...): trimmed,
/// `None` when empty (rxe prints an empty `fw_ver`).
pub fn text(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// A PCI function name as sysfs spells it: `dddd:bb:dd.f` (lower-case hex).
pub fn is_pci_address(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
        && matches!(b[11], b'0'..=b'7')
}

/// Shell-style match with `*` (any run) and `?` (one character).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn shorten(t: &str) -> String {
    t.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rate_the_kernel_prints() {
        // (text, bytes/s): Gb/s × 10^9 / 8. Speeds per lane from rate_show in
        // drivers/infiniband/core/sysfs.c; widths 1X, 2X, 4X, 8X, 12X.
        let table: &[(&str, u64)] = &[
            ("2.5 Gb/sec (1X SDR)", 312_500_000),
            ("5 Gb/sec (1X DDR)", 625_000_000),
            ("10 Gb/sec (1X QDR)", 1_250_000_000),
            ("10 Gb/sec (1X FDR10)", 1_250_000_000),
            ("14 Gb/sec (1X FDR)", 1_750_000_000),
            ("25 Gb/sec (1X EDR)", 3_125_000_000),
            ("50 Gb/sec (1X HDR)", 6_250_000_000),
            ("100 Gb/sec (1X NDR)", 12_500_000_000),
            ("200 Gb/sec (1X XDR)", 25_000_000_000),
            ("5 Gb/sec (2X SDR)", 625_000_000),
            ("10 Gb/sec (4X SDR)", 1_250_000_000),
            ("20 Gb/sec (8X SDR)", 2_500_000_000),
            ("30 Gb/sec (12X SDR)", 3_750_000_000),
            ("20 Gb/sec (4X DDR)", 2_500_000_000),
            ("60 Gb/sec (12X DDR)", 7_500_000_000),
            ("40 Gb/sec (4X QDR)", 5_000_000_000),
            ("40 Gb/sec (4X FDR10)", 5_000_000_000),
            ("28 Gb/sec (2X FDR)", 3_500_000_000),
            ("56 Gb/sec (4X FDR)", 7_000_000_000),
            ("168 Gb/sec (12X FDR)", 21_000_000_000),
            ("50 Gb/sec (2X EDR)", 6_250_000_000),
            ("100 Gb/sec (4X EDR)", 12_500_000_000),
            ("300 Gb/sec (12X EDR)", 37_500_000_000),
            ("100 Gb/sec (2X HDR)", 12_500_000_000),
            ("200 Gb/sec (4X HDR)", 25_000_000_000),
            ("400 Gb/sec (8X HDR)", 50_000_000_000),
            ("600 Gb/sec (12X HDR)", 75_000_000_000),
            ("200 Gb/sec (2X NDR)", 25_000_000_000),
            ("400 Gb/sec (4X NDR)", 50_000_000_000),
            ("800 Gb/sec (8X NDR)", 100_000_000_000),
            ("1200 Gb/sec (12X NDR)", 150_000_000_000),
            ("400 Gb/sec (2X XDR)", 50_000_000_000),
            ("800 Gb/sec (4X XDR)", 100_000_000_000),
            ("1600 Gb/sec (8X XDR)", 200_000_000_000),
            ("2400 Gb/sec (12X XDR)", 300_000_000_000),
            ("2.5 Gb/sec", 312_500_000),
            ("2.5 Gb/sec (1X SDR)\n", 312_500_000),
        ];
        for (text, want) in table {
            assert_eq!(rate_bytes_per_second(text), Ok(*want), "{text:?}");
        }
    }

    #[test]
    fn bad_rates_are_errors() {
        for text in [
            "",
            "fast",
            "Gb/sec",
            "x Gb/sec",
            "10 Mb/sec",
            "-1 Gb/sec",
            "1.2.3 Gb/sec",
        ] {
            assert!(rate_bytes_per_second(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn states() {
        assert_eq!(port_state("4: ACTIVE\n"), Ok(PortState::Active));
        assert_eq!(port_state("1: DOWN"), Ok(PortState::Down));
        assert_eq!(port_state("0: NOP"), Ok(PortState::Nop));
        assert_eq!(port_state("5: ACTIVE_DEFER"), Ok(PortState::ActiveDefer));
        assert_eq!(
            port_state("9: <unknown>"),
            Ok(PortState::Other(9, "<unknown>".into()))
        );
        assert!(port_state("ACTIVE").is_err());
        assert_eq!(phys_state("5: LinkUp\n"), Ok(PhysState::LinkUp));
        assert_eq!(phys_state("3: Disabled"), Ok(PhysState::Disabled));
        assert_eq!(phys_state("7: Phy Test"), Ok(PhysState::PhyTest));
        assert_eq!(
            phys_state("0: <unknown>"),
            Ok(PhysState::Other(0, "<unknown>".into()))
        );
        assert_eq!(node_type("1: CA\n"), Ok("CA".to_string()));
    }

    #[test]
    fn counters() {
        assert_eq!(counter("12345\n"), Ok(CounterText::Value(12345)));
        assert_eq!(
            counter("18446744073709551615\n"),
            Ok(CounterText::Value(u64::MAX))
        );
        assert_eq!(counter("N/A (no PMA)\n"), Ok(CounterText::NotAvailable));
        assert!(counter("12abc").is_err());
        assert!(counter("").is_err());
        assert!(counter("-1").is_err());
    }

    #[test]
    fn gids_from_bytes_match_text() {
        assert_eq!(
            gid_bytes(b"fe80:0000:0000:0000:ba3f:d2ff:fe00:0001\n"),
            Ok("fe80::ba3f:d2ff:fe00:1".parse::<Ipv6Addr>().unwrap())
        );
        assert_eq!(
            gid_bytes(b"0000:0000:0000:0000:0000:ffff:0a00:020f\n"),
            Ok(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x020f))
        );
        for t in [
            "FE80:0000:0000:0000:BA3F:D2FF:FE00:0001",
            "fe80:0000:0000:0000:ba3f:d2ff:fe00:000g",
            "fe80:0000:0000:0000:ba3f:d2ff:fe00-0001",
            "fe80:0000:0000:0000:ba3f:d2ff:fe00:00001",
            "fe80:0000:0000:0000:ba3f:d2ff:fe0::0001",
            "fe80::1",
            "",
            "garbage",
        ] {
            assert_eq!(gid_bytes(t.as_bytes()), gid(t), "{t:?}");
        }
    }

    #[test]
    fn counters_from_bytes_match_text() {
        assert_eq!(counter_bytes(b"12345\n"), Ok(CounterText::Value(12345)));
        assert_eq!(counter_bytes(b"0\n"), Ok(CounterText::Value(0)));
        assert_eq!(
            counter_bytes(b"18446744073709551615\n"),
            Ok(CounterText::Value(u64::MAX))
        );
        assert_eq!(
            counter_bytes(b"N/A (no PMA)\n"),
            Ok(CounterText::NotAvailable)
        );
        for t in [
            "18446744073709551616\n",
            "99999999999999999999999\n",
            "12abc",
            "",
            "\n",
            "-1",
            "+7\n",
            " 42 \n",
            "4\u{a0}2",
            "\u{a0}42",
        ] {
            assert_eq!(counter_bytes(t.as_bytes()), counter(t), "{t:?}");
        }
        assert_eq!(
            counter_bytes(b"\xff1"),
            counter(&String::from_utf8_lossy(b"\xff1"))
        );
    }

    #[test]
    fn small_values() {
        assert_eq!(hex_u32("0x0\n"), Ok(0));
        assert_eq!(hex_u32("0x1a"), Ok(26));
        assert!(hex_u32("zz").is_err());
        assert_eq!(numa_node("-1\n"), Ok(None));
        assert_eq!(numa_node("1\n"), Ok(Some(1)));
        assert!(numa_node("x").is_err());
        assert_eq!(text("\n"), None);
        assert_eq!(text("28.39.1002\n"), Some("28.39.1002".into()));
        assert_eq!(
            gid("fe80:0000:0000:0000:5054:00ff:fe00:0001\n"),
            Ok("fe80::5054:ff:fe00:1".parse().unwrap())
        );
        assert_eq!(gid_type("RoCE v2\n"), GidType::RoceV2);
        assert_eq!(gid_type("IB/RoCE v1\n"), GidType::IbRoceV1);
        assert_eq!(link_layer("Ethernet\n"), LinkLayer::Ethernet);
    }

    #[test]
    fn messages_name_the_format_and_the_text() {
        let msg = |r: Result<(), ParseError>| r.unwrap_err().to_string();
        assert_eq!(
            msg(counter("12abc").map(drop)),
            "not an unsigned counter: \"12abc\""
        );
        assert_eq!(
            msg(port_state("ACTIVE").map(drop)),
            "expected \"N: NAME\": \"ACTIVE\""
        );
        assert_eq!(
            msg(rate_bytes_per_second("fast").map(drop)),
            "expected \"<n> Gb/sec ...\": \"fast\""
        );
        assert_eq!(msg(hex_u32("zz").map(drop)), "not a hex number: \"zz\"");
        assert_eq!(msg(gid("garbage").map(drop)), "not a GID: \"garbage\"");
        assert_eq!(msg(numa_node("x").map(drop)), "not a NUMA node: \"x\"");
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_address("0000:17:00.0"));
        assert!(is_pci_address("0000:00:1f.3"));
        assert!(!is_pci_address("virtio0"));
        assert!(!is_pci_address("pci0000:00"));
        assert!(!is_pci_address("0000:17:00.8"));
    }

    #[test]
    fn no_content_panics() {
        // Deterministic pseudo-random strings from the characters the
        // formats use, plus every prefix of real values.
        let alphabet: Vec<char> = "0123456789abcdefxX:. -/()GbsecN/A\n\u{fffd}é*?"
            .chars()
            .collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut inputs: Vec<String> = Vec::new();
        for real in [
            "400 Gb/sec (4X NDR)",
            "4: ACTIVE",
            "fe80:0000:0000:0000:5054:00ff:fe00:0001",
            "18446744073709551616",
            "0x1a",
        ] {
            for i in 0..=real.len() {
                inputs.push(real.get(..i).unwrap_or("").to_string());
            }
        }
        for _ in 0..5000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 59) as usize;
            let mut t = String::new();
            for k in 0..len {
                let idx = ((seed >> (k % 50)) as usize) % alphabet.len();
                t.push(alphabet[idx]);
            }
            inputs.push(t);
        }
        for t in &inputs {
            assert_eq!(counter_bytes(t.as_bytes()), counter(t), "{t:?}");
            assert_eq!(gid_bytes(t.as_bytes()), gid(t), "{t:?}");
            let _ = port_state(t);
            let _ = phys_state(t);
            let _ = node_type(t);
            let _ = rate_bytes_per_second(t);
            let _ = hex_u32(t);
            let _ = gid(t);
            let _ = numa_node(t);
            let _ = glob_match(t, "mlx5_0");
            let _ = glob_match("mlx5_*", t);
            let _ = is_pci_address(t);
            let _ = (link_layer(t), gid_type(t), text(t));
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("mlx5_*", "mlx5_0"));
        assert!(glob_match("*", "rxe0"));
        assert!(glob_match("mlx5_?", "mlx5_1"));
        assert!(!glob_match("mlx5_?", "mlx5_10"));
        assert!(glob_match("*_1*", "mlx5_10"));
        assert!(!glob_match("rxe", "rxe0"));
        assert!(glob_match("rxe0", "rxe0"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
    }
}
