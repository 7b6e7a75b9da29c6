//! DCB and standard pause statistics against the running kernel, on
//! netdevs every Linux host has: `lo` has no DCB (`dcbnl_ops`) and no pause
//! support, which must read as "unsupported" / "none", not as failures; a
//! missing netdev is a clear error.

use std::time::Duration;

use roce_netdev::dcb::DcbError;
use roce_netdev::live::{EthtoolPause, NetlinkDcb};
use roce_netdev::reader::{DcbRead, PauseRead};

#[test]
fn loopback_has_no_dcb_and_that_is_not_an_error() {
    let mut dcb = NetlinkDcb::new(Duration::from_secs(2));
    assert_eq!(dcb.read_dcb("lo"), Err(DcbError::Unsupported));
    assert_eq!(dcb.read_dcb("nosuchif0"), Err(DcbError::NoDevice));
    // the socket survives the refusals
    assert_eq!(dcb.read_dcb("lo"), Err(DcbError::Unsupported));
}

#[test]
fn loopback_has_no_pause_statistics() {
    let mut pause = EthtoolPause::new(Duration::from_secs(2));
    assert_eq!(pause.read_pause("lo"), Ok(None));
    assert!(pause.read_pause("nosuchif0").is_err());
}

fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    out
}

#[test]
fn pause_reply_decoding() {
    use roce_netdev::live::parse_pause_reply;
    use roce_netdev::PauseStats;
    // genlmsghdr, ETHTOOL_A_PAUSE_HEADER, ..._AUTONEG/RX/TX, ..._STATS nest
    let mut stats = nla(1, &[]); // ETHTOOL_A_PAUSE_STAT_PAD
    stats.extend(nla(2, &41u64.to_ne_bytes()));
    stats.extend(nla(3, &42u64.to_ne_bytes()));
    let mut p = vec![22u8, 1, 0, 0];
    p.extend(nla(1 | 0x8000, &nla(2, b"eth0\0")));
    p.extend(nla(2, &[0]));
    p.extend(nla(3, &[1]));
    p.extend(nla(4, &[1]));
    p.extend(nla(5 | 0x8000, &stats));
    assert_eq!(
        parse_pause_reply(&p),
        Ok(Some(PauseStats {
            tx_frames: Some(41),
            rx_frames: Some(42)
        }))
    );
    // a driver without pause statistics: empty nest
    let mut q = vec![22u8, 1, 0, 0];
    q.extend(nla(5 | 0x8000, &[]));
    assert_eq!(parse_pause_reply(&q), Ok(None));
    // truncated
    assert!(parse_pause_reply(&p[..2]).is_err());
    assert!(parse_pause_reply(&p[..p.len() - 3]).is_err());
}

/// `lo` has no `get_fecparam` (EOPNOTSUPP) and no module (no
/// `get_module_eeprom_by_page`, EOPNOTSUPP): both read as absent. A
/// missing netdev is an error.
#[test]
fn loopback_has_no_fec_and_no_module() {
    use roce_netdev::fec::{EthtoolFec, FecRead};
    use roce_netdev::module::{read_module, EthtoolEeprom};
    let mut fec = EthtoolFec::new(Duration::from_secs(2));
    assert_eq!(fec.read_fec("lo"), Ok(None));
    assert!(fec.read_fec("nosuchif0").is_err());
    let mut eeprom = EthtoolEeprom::new(Duration::from_secs(2));
    assert_eq!(read_module(&mut eeprom, "lo"), Ok(None));
}

/// The devlink dump works on any host: a kernel without devlink (no
/// family) is `None`, one with it answers a (possibly empty) list.
#[test]
fn devlink_health_dump_of_the_running_kernel() {
    use roce_netdev::devlink::{DevlinkHealth, HealthRead};
    let mut health = DevlinkHealth::new(Duration::from_secs(2));
    let mut errors = Vec::new();
    let got = health.read_reporters(&mut errors);
    assert!(got.is_ok(), "{got:?}");
    assert!(errors.is_empty(), "{errors:?}");
}
