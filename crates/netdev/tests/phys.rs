//! Physical layer and device health decoded from recorded replies
//! (`tests/fixtures/phys`, written by its generate.py byte by byte from the
//! specifications and the kernel uapi) played through the replay readers,
//! checked field by field with the specification's page and offset; the
//! requests' layout; BER arithmetic; carrier counters from sysfs.

use std::path::PathBuf;

use roce_netdev::devlink::{DevlinkReplay, HealthRead, ReporterState};
use roce_netdev::fec::{fec_ber, fec_request, FecInfo, FecMode, FecRead, FecReplay};
use roce_netdev::module::{
    decode, eeprom_request, parse_eeprom_replay, read_module, EepromRead, EepromReplay, HalfPage,
    ModuleError, Pages, Standard, I2C_A0,
};
use roce_netdev::reader::{NetdevToRead, ReaderOptions};
use roce_netdev::{CarrierCounts, NetdevReader};
use roce_netlink::{attrs, messages};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/phys")
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() <= b.abs() * 1e-9 + 1e-12)
}

macro_rules! assert_close {
    ($a:expr, $b:expr) => {
        assert!(close($a, $b), "{:?} != {}", $a, $b)
    };
}

#[test]
fn sff8636_qsfp28_field_by_field() {
    let mut io = EepromReplay::new(fixtures());
    let m = read_module(&mut io, "ens1np0").unwrap().unwrap();
    assert_eq!(m.standard, Standard::Sff8636);
    // SFF-8636 rev 2.10a, page 00h byte 0: identifier 11h = QSFP28.
    assert_eq!((m.identifier, m.kind), (0x11, "QSFP28"));
    // Upper page 00h bytes 148-163 vendor name, 168-183 part number,
    // 184-185 revision, 196-211 serial number (ASCII, space padded).
    assert_eq!(m.vendor, "Mellanox");
    assert_eq!(m.part, "MMA1B00-C100D");
    assert_eq!(m.revision, "A2");
    assert_eq!(m.serial, "MT2031FT04567");
    // Page 00h bytes 22-23: temperature, s16 in 1/256 degC: 0x2380 = 35.5.
    assert_close!(m.temperature_celsius, 35.5);
    // Bytes 26-27: supply voltage in 100 uV: 33000 = 3.3 V.
    assert_close!(m.supply_volts, 3.3);
    assert_eq!(m.lanes.len(), 4);
    // Bytes 34-41 Rx power (0.1 uW), 42-49 Tx bias (2 uA), 50-57 Tx power.
    for (lane, mw) in m.lanes.iter().zip([0.8, 0.78, 0.82, 0.04]) {
        assert_close!(lane.rx_power_watts, mw * 1e-3);
    }
    assert_close!(m.lanes[0].tx_bias_amperes, 14e-3);
    assert_close!(m.lanes[3].tx_bias_amperes, 14.4e-3);
    assert_close!(m.lanes[2].tx_power_watts, 1e-3);
    // Upper page 00h byte 220 bit 3: Rx power is average power.
    assert_eq!(m.rx_power_average, Some(true));
    // Upper page 03h: thresholds, high alarm / low alarm / high warning /
    // low warning: temperature at 128, Vcc 144, Rx power 176, Tx bias 184,
    // Tx power 192.
    let t = m.thresholds.temperature_celsius.unwrap();
    assert_eq!(
        (t.high_alarm, t.low_alarm, t.high_warning, t.low_warning),
        (75.0, -5.0, 70.0, 0.0)
    );
    let v = m.thresholds.supply_volts.unwrap();
    assert_close!(Some(v.high_alarm), 3.63);
    assert_close!(Some(v.low_warning), 3.135);
    let r = m.thresholds.rx_power_watts.unwrap();
    assert_close!(Some(r.low_alarm), 0.05e-3);
    assert_close!(Some(r.low_warning), 0.1e-3);
    assert_close!(Some(r.high_warning), 2.7e-3);
    let b = m.thresholds.tx_bias_amperes.unwrap();
    assert_close!(Some(b.high_alarm), 16e-3);
    let p = m.thresholds.tx_power_watts.unwrap();
    assert_close!(Some(p.low_warning), 0.16e-3);
}

#[test]
fn cmis_osfp_field_by_field() {
    let mut io = EepromReplay::new(fixtures());
    let m = read_module(&mut io, "ens2np0").unwrap().unwrap();
    assert_eq!(m.standard, Standard::Cmis);
    // CMIS 5.0, page 00h byte 0: identifier 19h = OSFP.
    assert_eq!((m.identifier, m.kind), (0x19, "OSFP"));
    // Upper page 00h: vendor 129-144, part 148-163, revision 164-165,
    // serial 166-181.
    assert_eq!(m.vendor, "NVIDIA");
    assert_eq!(m.part, "MMS4X00-NS");
    assert_eq!(m.revision, "A1");
    assert_eq!(m.serial, "MT2330FT01234");
    // Page 00h bytes 14-15 temperature (0x2A00 = 42 degC), 16-17 Vcc.
    assert_close!(m.temperature_celsius, 42.0);
    assert_close!(m.supply_volts, 3.3056);
    // Page 00h byte 88 bits 3-0: 8 media lanes.
    assert_eq!(m.lanes.len(), 8);
    // Page 11h: Tx power from byte 154, Tx bias from 170, Rx power from
    // 186; page 01h byte 160 bits 4-3 = 01b scale the bias unit by 2:
    // raw 2500 x 2 uA x 2 = 10 mA.
    for (i, lane) in m.lanes.iter().enumerate() {
        assert_close!(lane.tx_power_watts, 2e-3);
        assert_close!(lane.tx_bias_amperes, 10e-3);
        let rx = if i == 5 { 0.5e-3 } else { 1.5e-3 };
        assert_close!(lane.rx_power_watts, rx);
    }
    // Page 01h byte 151 bit 4: average Rx power.
    assert_eq!(m.rx_power_average, Some(true));
    // Page 02h: temperature 128, Vcc 136, Tx power 176, Tx bias 184 (same
    // scale as the monitor), Rx power 192.
    let t = m.thresholds.temperature_celsius.unwrap();
    assert_eq!(
        (t.high_alarm, t.low_alarm, t.high_warning, t.low_warning),
        (80.0, -10.0, 75.0, -5.0)
    );
    assert_close!(m.thresholds.supply_volts.map(|v| v.high_warning), 3.4);
    assert_close!(m.thresholds.tx_power_watts.map(|v| v.low_alarm), 0.2e-3);
    assert_close!(m.thresholds.tx_bias_amperes.map(|v| v.high_alarm), 24e-3);
    assert_close!(m.thresholds.rx_power_watts.map(|v| v.low_warning), 0.2e-3);
    assert_close!(m.thresholds.rx_power_watts.map(|v| v.high_alarm), 5e-3);
}

#[test]
fn sff8472_sfp28_field_by_field() {
    let mut io = EepromReplay::new(fixtures());
    let m = read_module(&mut io, "ens3np0").unwrap().unwrap();
    assert_eq!(m.standard, Standard::Sff8472);
    assert_eq!((m.identifier, m.kind), (0x03, "SFP"));
    // SFF-8472 rev 12.4, A0h: vendor 20-35, part 40-55, revision 56-59,
    // serial 68-83.
    assert_eq!(m.vendor, "FINISAR CORP.");
    assert_eq!(m.part, "FTLF8536P4BCL");
    assert_eq!(m.revision, "A");
    assert_eq!(m.serial, "PXA1B2C");
    // A2h bytes 96-105: temperature, Vcc, Tx bias, Tx power, Rx power.
    assert_close!(m.temperature_celsius, 31.5);
    assert_close!(m.supply_volts, 3.33);
    assert_eq!(m.lanes.len(), 1);
    assert_close!(m.lanes[0].tx_bias_amperes, 8e-3);
    assert_close!(m.lanes[0].tx_power_watts, 0.6e-3);
    assert_close!(m.lanes[0].rx_power_watts, 0.5e-3);
    // A2h bytes 0-39: thresholds, temperature first, Rx power at 32.
    let t = m.thresholds.temperature_celsius.unwrap();
    assert_eq!(
        (t.high_alarm, t.low_alarm, t.high_warning, t.low_warning),
        (78.0, -13.0, 73.0, -8.0)
    );
    assert_close!(m.thresholds.tx_bias_amperes.map(|v| v.high_warning), 11e-3);
    assert_close!(m.thresholds.rx_power_watts.map(|v| v.low_warning), 0.02e-3);
}

/// Records every half page asked for.
struct Counting {
    inner: EepromReplay,
    asked: Vec<HalfPage>,
}

impl EepromRead for Counting {
    fn read_half(
        &mut self,
        netdev: &str,
        page: HalfPage,
    ) -> Result<Option<Vec<u8>>, roce_netdev::NetdevError> {
        self.asked.push(page);
        self.inner.read_half(netdev, page)
    }
}

#[test]
fn only_the_pages_a_map_needs_are_read() {
    let mut io = Counting {
        inner: EepromReplay::new(fixtures()),
        asked: Vec::new(),
    };
    read_module(&mut io, "ens1np0").unwrap().unwrap();
    assert_eq!(
        io.asked,
        vec![
            HalfPage::lower(I2C_A0),
            HalfPage::upper(0, 0),
            HalfPage::upper(3, 0)
        ]
    );
    io.asked.clear();
    read_module(&mut io, "ens2np0").unwrap().unwrap();
    assert_eq!(io.asked.len(), 5);
    io.asked.clear();
    // No file: no module on this netdev; nothing more is asked.
    assert_eq!(read_module(&mut io, "ens9np0").unwrap(), None);
    assert_eq!(io.asked, vec![HalfPage::lower(I2C_A0)]);
}

#[test]
fn flat_memory_and_missing_pages_leave_fields_absent() {
    let text = std::fs::read_to_string(fixtures().join("ens1np0.eeprom")).unwrap();
    let mut pages = parse_eeprom_replay(&text).unwrap();
    // SFF-8636 byte 2 bit 2: Flat_mem; without page 03h there are no
    // thresholds, and that is absent, not 0.
    pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap()[2] = 0x04;
    pages.remove(&HalfPage::upper(3, 0));
    let m = decode(&pages).unwrap();
    assert_eq!(m.thresholds.rx_power_watts, None);
    // Upper page 00h byte 220 (0x0c here): bits 5 and 4, temperature and
    // supply voltage monitoring implemented, are clear, so a flat-memory
    // module has neither: absent, not 0.
    assert_eq!(m.temperature_celsius, None);
    assert_eq!(m.supply_volts, None);
    pages.get_mut(&HalfPage::upper(0, 0)).unwrap()[220 - 128] = 0x3c;
    let m = decode(&pages).unwrap();
    assert!(m.temperature_celsius.is_some() && m.supply_volts.is_some());
    // Data_Not_Ready (byte 2 bit 0): the monitors are not valid.
    pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap()[2] = 0x05;
    let m = decode(&pages).unwrap();
    assert_eq!(m.temperature_celsius, None);
    assert_eq!(m.lanes[0].rx_power_watts, None);
    // A short page or an unknown identifier is an error, never a panic.
    let mut short = Pages::new();
    short.insert(HalfPage::lower(I2C_A0), vec![0x11; 20]);
    assert!(matches!(decode(&short), Err(ModuleError::MissingPage(_))));
    let mut unknown = Pages::new();
    unknown.insert(HalfPage::lower(I2C_A0), vec![0x42; 128]);
    assert_eq!(decode(&unknown), Err(ModuleError::UnknownIdentifier(0x42)));
}

#[test]
fn eeprom_request_asks_one_half_page() {
    let msg = eeprom_request(28, "ens1np0", HalfPage::upper(0x11, 0)).unwrap();
    let m = messages(&msg).next().unwrap().unwrap();
    assert_eq!(m.kind, 28);
    // genlmsghdr: ETHTOOL_MSG_MODULE_EEPROM_GET 31, version 1.
    assert_eq!(&m.payload[..2], &[31, 1]);
    let body = &m.payload[4..];
    let get = |k| attrs(body).find(k).unwrap().unwrap();
    assert_eq!(get(2).as_u32().unwrap(), 128); // OFFSET: the upper half
    assert_eq!(get(3).as_u32().unwrap(), 128); // LENGTH
    assert_eq!(get(4).as_u8().unwrap(), 0x11); // PAGE
    assert_eq!(get(5).as_u8().unwrap(), 0); // BANK
    assert_eq!(get(6).as_u8().unwrap(), 0x50); // I2C_ADDRESS
    let header = get(1);
    assert!(header.nested);
    assert_eq!(
        header.nested().find(2).unwrap().unwrap().as_str().unwrap(),
        "ens1np0"
    );
}

#[test]
fn fec_rs_with_lanes_field_by_field() {
    let mut io = FecReplay::new(fixtures());
    let f = io.read_fec("ens1np0").unwrap().unwrap();
    // ETHTOOL_A_FEC_ACTIVE 50 = ETHTOOL_LINK_MODE_FEC_RS_BIT.
    assert_eq!(f.active, Some(FecMode::Rs));
    assert_eq!(f.auto, Some(false));
    // ETHTOOL_A_FEC_STAT_CORRECTED / _UNCORR: totals only.
    let c = f.corrected_blocks.unwrap();
    assert_eq!((c.total, c.lanes.len()), (123_456_789, 0));
    assert_eq!(f.uncorrectable_blocks.unwrap().total, 42);
    // ETHTOOL_A_FEC_STAT_CORR_BITS: total, then 4 lanes summing to it.
    let bits = f.corrected_bits.unwrap();
    assert_eq!(bits.total, 987_654_321);
    assert_eq!(
        bits.lanes,
        vec![246_913_580, 246_913_580, 246_913_581, 246_913_580]
    );
}

#[test]
fn fec_statistics_the_driver_does_not_set_are_absent() {
    let mut io = FecReplay::new(fixtures());
    let f = io.read_fec("ens2np0").unwrap().unwrap();
    assert_eq!(f.active, Some(FecMode::Off));
    assert_eq!(f.corrected_blocks, None);
    assert_eq!(f.uncorrectable_blocks, None);
    assert_eq!(f.corrected_bits, None);
    // No recording: a driver without FEC_GET.
    assert_eq!(io.read_fec("ens3np0").unwrap(), None);
}

#[test]
fn fec_request_asks_for_statistics() {
    let msg = fec_request(28, "ens1np0").unwrap();
    let m = messages(&msg).next().unwrap().unwrap();
    assert_eq!(&m.payload[..2], &[29, 1]); // ETHTOOL_MSG_FEC_GET
    let header = attrs(&m.payload[4..]).find(1).unwrap().unwrap();
    let flags = header.nested().find(3).unwrap().unwrap().as_u32().unwrap();
    assert_eq!(flags & (1 << 2), 1 << 2); // ETHTOOL_FLAG_STATS
}

#[test]
fn ber_from_two_readings() {
    let mut io = FecReplay::new(fixtures());
    let prev = io.read_fec("ens1np0").unwrap().unwrap();
    let mut cur = prev.clone();
    // 100 Gb/s for 60 s is 6e12 bits; 6e6 corrected bits is a raw BER of
    // 1e-6, 1.5e6 on each of 4 lanes of 25 Gb/s is 1e-6 per lane too.
    let bits = cur.corrected_bits.as_mut().unwrap();
    bits.total += 6_000_000;
    for l in &mut bits.lanes {
        *l += 1_500_000;
    }
    cur.uncorrectable_blocks.as_mut().unwrap().total += 6;
    // RS-FEC on 4 lanes of 25 Gb/s is RS(528,514): corrected bits are
    // counted at its line rate, 103.125 Gb/s, not the 100 Gb/s MAC rate.
    let ber = fec_ber(&prev, &cur, 60.0, 100_000);
    let line = 60.0 * 103.125e9;
    assert_close!(ber.pre_fec, 6e6 / line);
    assert_eq!(ber.pre_fec_lanes.len(), 4);
    assert_close!(ber.pre_fec_lanes.first().copied(), 1.5e6 / (line / 4.0));
    assert_close!(ber.post_fec, 6.0 / line);
    // A counter that went back (driver reload) gives no rate.
    let reset = fec_ber(&cur, &prev, 60.0, 100_000);
    assert_eq!((reset.pre_fec, reset.post_fec), (None, None));
    // Without corrected bits there is no pre-FEC BER.
    let none = FecInfo::default();
    assert_eq!(fec_ber(&none, &none, 60.0, 100_000).pre_fec, None);
}

#[test]
fn devlink_health_dump_field_by_field() {
    let mut io = DevlinkReplay::new(fixtures());
    let mut errors = Vec::new();
    let r = io.read_reporters(&mut errors).unwrap().unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(r.len(), 4);
    assert_eq!(
        r.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["fw", "fw_fatal", "tx", "rx"]
    );
    assert!(r
        .iter()
        .all(|r| r.bus == "pci" && r.device == "0000:17:00.0"));
    assert_eq!(r[0].port, None);
    let tx = &r[2];
    assert_eq!(tx.port, Some(65535));
    assert_eq!(tx.state, ReporterState::Error);
    assert_eq!((tx.errors, tx.recoveries), (3, 2));
    assert_eq!((r[1].errors, r[1].recoveries), (1, 1));
    assert_eq!(r[3].state, ReporterState::Healthy);
    // DEVLINK_ATTR_HEALTH_REPORTER_AUTO_RECOVER only where the reporter can
    // recover: mlx5's fw reporter has no recover op.
    assert_eq!(r[0].auto_recover, None);
    assert_eq!(tx.auto_recover, Some(true));
    // No recording: a kernel without devlink.
    let mut none = DevlinkReplay::new(fixtures().join("missing"));
    assert_eq!(none.read_reporters(&mut errors).unwrap(), None);
}

#[test]
fn carrier_counters_from_sysfs_and_absent_files() {
    let dir = std::env::temp_dir().join(format!("roce-netdev-carrier-{}", std::process::id()));
    let net = dir.join("class/net");
    std::fs::create_dir_all(net.join("eth0")).unwrap();
    std::fs::create_dir_all(net.join("eth1")).unwrap();
    std::fs::create_dir_all(net.join("eth2")).unwrap();
    // a kernel before 4.16: carrier_changes only
    std::fs::write(net.join("eth2/carrier_changes"), "5\n").unwrap();
    for (f, v) in [
        ("carrier_changes", "7"),
        ("carrier_up_count", "4"),
        ("carrier_down_count", "3"),
    ] {
        std::fs::write(net.join("eth0").join(f), format!("{v}\n")).unwrap();
    }
    let mut reader = NetdevReader::new(ReaderOptions {
        sysfs: dir.clone(),
        raw_ethtool: vec![],
        qos_interval: std::time::Duration::ZERO,
    });
    let targets = ["eth0", "eth1", "eth2"].map(|n| NetdevToRead {
        name: n.into(),
        rdma: None,
    });
    let mut errors = Vec::new();
    let snap = reader.read(&targets, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        snap.netdevs[0].carrier,
        CarrierCounts {
            changes: None,
            up: Some(4),
            down: Some(3)
        }
    );
    assert_eq!(snap.netdevs[0].carrier.transitions(), Some(7));
    // Absent is not 0.
    assert_eq!(snap.netdevs[1].carrier, CarrierCounts::default());
    assert_eq!(snap.netdevs[1].carrier.transitions(), None);
    assert_eq!(snap.netdevs[2].carrier.changes, Some(5));
    assert_eq!(snap.netdevs[2].carrier.transitions(), Some(5));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sysfs tree with `ens1np0` on PCI function 0000:17:00.0 (AER files,
/// as aer.c prints them) and a GPU at 0000:18:00.0 without AER files.
fn phys_tree(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-phys-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let nic = dir.join("devices/pci0000:16/0000:16:01.0/0000:17:00.0");
    let gpu = dir.join("devices/pci0000:16/0000:16:02.0/0000:18:00.0");
    std::fs::create_dir_all(&nic).unwrap();
    std::fs::create_dir_all(&gpu).unwrap();
    std::fs::write(
        nic.join("aer_dev_correctable"),
        "RxErr 0\nBadTLP 3\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 4\n",
    )
    .unwrap();
    std::fs::write(nic.join("aer_dev_fatal"), "DLP 0\nTOTAL_ERR_FATAL 0\n").unwrap();
    let net = dir.join("class/net/ens1np0");
    std::fs::create_dir_all(&net).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:16/0000:16:01.0/0000:17:00.0",
        net.join("device"),
    )
    .unwrap();
    let pci = dir.join("bus/pci/devices");
    std::fs::create_dir_all(&pci).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:16/0000:16:02.0/0000:18:00.0",
        pci.join("0000:18:00.0"),
    )
    .unwrap();
    dir
}

fn phys_reader(sysfs: PathBuf) -> roce_netdev::phys::PhysReader {
    use roce_netdev::phys::{PhysOptions, PhysReader};
    PhysReader::new(PhysOptions {
        sysfs,
        module_interval: std::time::Duration::from_secs(300),
    })
    .with_fec(Box::new(FecReplay::new(fixtures())))
    .with_eeprom(Box::new(EepromReplay::new(fixtures())))
    .with_health(Box::new(DevlinkReplay::new(fixtures())))
}

#[test]
fn phys_reader_joins_every_part_of_a_netdev() {
    let dir = phys_tree("join");
    let mut reader = phys_reader(dir.clone());
    let targets = [NetdevToRead {
        name: "ens1np0".into(),
        rdma: Some(roce_netdev::RdmaPortRef {
            device: "mlx5_0".into(),
            port: 1,
        }),
    }];
    let mut errors = Vec::new();
    let snap = reader.read(
        &targets,
        &["0000:18:00.0".to_string()],
        std::time::Duration::ZERO,
        &mut errors,
    );
    assert!(errors.is_empty(), "{errors:?}");
    let n = &snap.netdevs[0];
    assert_eq!(n.pci.as_deref(), Some("0000:17:00.0"));
    assert_eq!(n.aer.correctable.as_ref().unwrap().total, Some(4));
    assert_eq!(n.aer.fatal.as_ref().unwrap().total, Some(0));
    // No aer_dev_nonfatal file: absent, not 0.
    assert_eq!(n.aer.nonfatal, None);
    assert_eq!(n.fec.as_ref().unwrap().active, Some(FecMode::Rs));
    assert_eq!(n.module.as_ref().unwrap().serial, "MT2031FT04567");
    // The GPU has no AER capability here: all absent.
    assert_eq!(snap.gpus.len(), 1);
    assert!(snap.gpus[0].aer.is_empty());
    // The four reporters of 0000:17:00.0 belong to ens1np0.
    let reporters = snap.reporters.unwrap();
    assert_eq!(reporters.len(), 4);
    assert!(reporters.iter().all(|r| r.netdev == "ens1np0"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn modules_are_read_on_their_own_cadence() {
    use std::time::Duration;
    let dir = phys_tree("cadence");
    let mut reader = phys_reader(dir.clone());
    let targets = [NetdevToRead {
        name: "ens1np0".into(),
        rdma: None,
    }];
    let mut errors = Vec::new();
    let at = |s| Duration::from_secs(s);
    let first = reader.read(&targets, &[], at(0), &mut errors);
    // Lower page 0, upper page 0, page 03h.
    assert_eq!(reader.last_calls().eeprom, 3);
    let again = reader.read(&targets, &[], at(299), &mut errors);
    assert_eq!(reader.last_calls().eeprom, 0);
    // Between reads the last reading is kept, not dropped.
    assert_eq!(again.netdevs[0].module, first.netdevs[0].module);
    reader.read(&targets, &[], at(300), &mut errors);
    assert_eq!(reader.last_calls().eeprom, 3);
    // FEC is read every sample.
    assert_eq!(reader.last_calls().fec, 1);
    assert!(errors.is_empty(), "{errors:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// virtio-net's netdev hangs off `virtio0`, a device of the virtio bus
/// below the PCI function: the AER files are the function's, one level up.
#[test]
fn virtio_net_aer_is_read_from_the_pci_function_above_it() {
    let dir = std::env::temp_dir().join(format!("roce-phys-virtio-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let function = dir.join("devices/pci0000:00/0000:00:01.0/0000:01:00.0");
    std::fs::create_dir_all(function.join("virtio0")).unwrap();
    std::fs::write(
        function.join("aer_dev_correctable"),
        "RxErr 0\nBadTLP 1\nTOTAL_ERR_COR 1\n",
    )
    .unwrap();
    let net = dir.join("class/net/eth0");
    std::fs::create_dir_all(&net).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/virtio0",
        net.join("device"),
    )
    .unwrap();
    let mut reader = roce_netdev::phys::PhysReader::new(roce_netdev::phys::PhysOptions {
        sysfs: dir.clone(),
        module_interval: std::time::Duration::from_secs(300),
    });
    let mut errors = Vec::new();
    let snap = reader.read(
        &[NetdevToRead {
            name: "eth0".into(),
            rdma: None,
        }],
        &[],
        std::time::Duration::ZERO,
        &mut errors,
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(snap.netdevs[0].pci.as_deref(), Some("0000:01:00.0"));
    assert_eq!(
        snap.netdevs[0].aer.correctable.as_ref().unwrap().total,
        Some(1)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn fixture_pages(name: &str) -> Pages {
    let text = std::fs::read_to_string(fixtures().join(name)).unwrap();
    parse_eeprom_replay(&text).unwrap()
}

/// A passive QSFP28 DAC as its EEPROM reads: SFF-8636 flat memory (page
/// 00h byte 2 bit 2), transmitter technology 1010b "copper cable
/// unequalized" (upper page 00h byte 147, 0xA0), extended compliance 0Bh
/// 100GBASE-CR4 (byte 192, byte 131 bit 7), no monitor implemented (byte
/// 220 0), the monitor bytes 22-57 all zero and no page 03h.
fn passive_dac() -> Pages {
    let mut pages = fixture_pages("ens1np0.eeprom");
    pages.remove(&HalfPage::upper(3, 0));
    let lower = pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap();
    lower[2] = 0x04;
    lower[22..58].fill(0);
    let upper = pages.get_mut(&HalfPage::upper(0, 0)).unwrap();
    upper[131 - 128] = 0x80;
    upper[147 - 128] = 0xA0;
    upper[192 - 128] = 0x0B;
    upper[220 - 128] = 0x00;
    pages
}

#[test]
fn passive_dac_exports_no_monitor_it_does_not_have() {
    use roce_netdev::module::Medium;
    let m = decode(&passive_dac()).unwrap();
    assert_eq!(m.medium, Medium::Copper);
    // Not 0 degC, 0 V, 0 W, 0 A: absent.
    assert_eq!(m.temperature_celsius, None);
    assert_eq!(m.supply_volts, None);
    assert!(m.lanes.is_empty(), "{:?}", m.lanes);
    assert_eq!(m.thresholds, Default::default());
    assert_eq!(m.vendor, "Mellanox");
}

#[test]
fn active_copper_has_its_module_monitors_but_no_optical_lanes() {
    use roce_netdev::module::Medium;
    // An SFF-8636 active copper cable (byte 147 1100b: near and far end
    // limiting active equalizers), paged, temperature and Vcc monitors
    // implemented (byte 220 bits 5 and 4) and page 03h thresholds,
    // including programmed Rx power ones.
    let mut pages = fixture_pages("ens1np0.eeprom");
    let lower = pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap();
    lower[34..58].fill(0);
    let upper = pages.get_mut(&HalfPage::upper(0, 0)).unwrap();
    upper[147 - 128] = 0xC0;
    upper[192 - 128] = 0x08; // 100G ACC
    upper[220 - 128] = 0x30;
    let m = decode(&pages).unwrap();
    assert_eq!(m.medium, Medium::Copper);
    assert_close!(m.temperature_celsius, 35.5);
    assert_close!(m.supply_volts, 3.3);
    assert!(m.lanes.is_empty());
    assert!(m.thresholds.temperature_celsius.is_some());
    assert_eq!(m.thresholds.rx_power_watts, None);
    assert_eq!(m.thresholds.tx_bias_amperes, None);
    assert_eq!(m.thresholds.tx_power_watts, None);
}

#[test]
fn media_codes_tell_parallel_fibre_from_wdm() {
    use roce_netdev::module::Medium;
    // The recorded SR4 (byte 192 02h) and SR8 OSFP (MMF, media code 10h).
    assert_eq!(
        decode(&fixture_pages("ens1np0.eeprom")).unwrap().medium,
        Medium::ParallelFibre
    );
    assert_eq!(
        decode(&fixture_pages("ens2np0.eeprom")).unwrap().medium,
        Medium::ParallelFibre
    );
    // 100G CWDM4 (06h) and 100GBASE-LR4 (03h): lanes share one fibre.
    for code in [0x06, 0x03] {
        let mut pages = fixture_pages("ens1np0.eeprom");
        pages.get_mut(&HalfPage::upper(0, 0)).unwrap()[192 - 128] = code;
        assert_eq!(decode(&pages).unwrap().medium, Medium::Optical, "{code:#x}");
    }
    // CMIS SMF: 400GBASE-DR4 (1Ch) parallel, 400G-FR4 (1Dh) WDM.
    let mut pages = fixture_pages("ens2np0.eeprom");
    let lower = pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap();
    lower[85] = 0x02;
    lower[87] = 0x1C;
    assert_eq!(decode(&pages).unwrap().medium, Medium::ParallelFibre);
    pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap()[87] = 0x1D;
    assert_eq!(decode(&pages).unwrap().medium, Medium::Optical);
}

#[test]
fn cmis_monitors_follow_the_page_01h_support_bits() {
    use roce_netdev::module::Medium;
    // Page 01h byte 159 0: no temperature or Vcc monitor, so neither the
    // value nor its thresholds.
    let mut pages = fixture_pages("ens2np0.eeprom");
    pages.get_mut(&HalfPage::upper(1, 0)).unwrap()[159 - 128] = 0;
    let m = decode(&pages).unwrap();
    assert_eq!((m.temperature_celsius, m.supply_volts), (None, None));
    assert_eq!(m.thresholds.temperature_celsius, None);
    assert!(m.thresholds.rx_power_watts.is_some());
    // A CMIS passive copper cable: flat memory (byte 2 bit 7), module type
    // 03h, no page 01h: nothing monitored.
    let mut pages = fixture_pages("ens2np0.eeprom");
    for p in [1, 2, 0x11] {
        pages.remove(&HalfPage::upper(p, 0));
    }
    let lower = pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap();
    lower[2] = 0x80;
    lower[14..18].fill(0);
    lower[85] = 0x03;
    lower[87] = 0x01;
    let m = decode(&pages).unwrap();
    assert_eq!(m.medium, Medium::Copper);
    assert_eq!((m.temperature_celsius, m.supply_volts), (None, None));
    assert!(m.lanes.is_empty());
    assert_eq!(m.thresholds, Default::default());
}

/// Answers from recorded pages, with some pages missing (the driver
/// answered EIO or EINVAL: absent).
struct Missing {
    pages: Pages,
}

impl EepromRead for Missing {
    fn read_half(
        &mut self,
        _netdev: &str,
        page: HalfPage,
    ) -> Result<Option<Vec<u8>>, roce_netdev::NetdevError> {
        Ok(self.pages.get(&page).cloned())
    }
}

#[test]
fn a_missing_page_or_an_empty_cage_is_absent_not_an_error() {
    use roce_netdev::module::eeprom_errno_is_absent;
    // mlx5 answers an empty cage, or a page the module does not answer,
    // with EIO (mlx5_query_mcia: MCIA status != 0 -> -EIO).
    assert!(eeprom_errno_is_absent(libc::EIO, HalfPage::lower(I2C_A0)));
    assert!(eeprom_errno_is_absent(libc::EIO, HalfPage::upper(3, 0)));
    assert!(eeprom_errno_is_absent(libc::EINVAL, HalfPage::upper(3, 0)));
    assert!(eeprom_errno_is_absent(
        libc::EOPNOTSUPP,
        HalfPage::lower(I2C_A0)
    ));
    assert!(!eeprom_errno_is_absent(
        libc::EINVAL,
        HalfPage::lower(I2C_A0)
    ));
    assert!(!eeprom_errno_is_absent(
        libc::ETIMEDOUT,
        HalfPage::upper(0, 0)
    ));
    // An empty cage: no module.
    let mut io = Missing {
        pages: Pages::new(),
    };
    assert_eq!(read_module(&mut io, "ens1np0"), Ok(None));
    // Upper page 00h missing: the monitors of the lower page are kept,
    // the identity is empty.
    let mut pages = fixture_pages("ens1np0.eeprom");
    pages.remove(&HalfPage::upper(0, 0));
    let m = read_module(&mut Missing { pages }, "ens1np0")
        .unwrap()
        .unwrap();
    assert_close!(m.temperature_celsius, 35.5);
    assert_eq!(m.lanes.len(), 4);
    assert_eq!(m.vendor, "");
    assert!(m.thresholds.rx_power_watts.is_some());
}

#[test]
fn fec_line_rate_follows_the_code() {
    use roce_netdev::fec::line_rate;
    // 400GBASE-R with RS(544,514): 8 lanes of 53.125 GBd PAM4 or 4 of
    // 106.25: 425 Gb/s on the wire.
    let (r, code) = line_rate(Some(FecMode::Rs), 400_000, 8);
    assert_eq!(code.as_str(), "RS(544,514)");
    assert!((r - 425e9).abs() < 1.0, "{r}");
    assert!((line_rate(Some(FecMode::Rs), 400_000, 0).0 - 425e9).abs() < 1.0);
    // 100GBASE-SR4/CR4, RS(528,514) on 4 x 25.78125 Gb/s NRZ.
    let (r, code) = line_rate(Some(FecMode::Rs), 100_000, 4);
    assert_eq!(code.as_str(), "RS(528,514)");
    assert!((r - 103.125e9).abs() < 1.0, "{r}");
    // 100G on 2 PAM4 lanes is RS(544,514): 106.25 Gb/s.
    assert!((line_rate(Some(FecMode::Rs), 100_000, 2).0 - 106.25e9).abs() < 1.0);
    // BASE-R keeps 64b/66b; no FEC: the MAC rate.
    assert!((line_rate(Some(FecMode::BaseR), 25_000, 0).0 - 25.78125e9).abs() < 1.0);
    assert_eq!(line_rate(Some(FecMode::Off), 100_000, 0).0, 100e9);
    assert_eq!(line_rate(None, 100_000, 0).0, 100e9);
}

/// An externally calibrated SFP (A0h byte 92 bit 4, SFF-8472 rev 12.4
/// section 9.3): the A2h readings are raw A/D values and the constants at
/// A2h 56-91 convert them, as ethtool's `sff8472_calibration`
/// (`sfpdiag.c`) applies them.
#[test]
fn sff8472_external_calibration_is_applied_as_ethtool_does() {
    let mut pages = fixture_pages("ens3np0.eeprom");
    // DDM implemented, externally calibrated, Rx power average.
    pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap()[92] = 0x58;
    let a2 = pages.get_mut(&HalfPage::lower(0x51)).unwrap();
    // Rx_PWR(4..0), big-endian IEEE-754: 0, 0, 0, 1.0, 0.
    a2[56..76].fill(0);
    a2[68..72].copy_from_slice(&1.0f32.to_be_bytes());
    // Slopes (unsigned 8.8) and offsets (s16): Tx_I x2 +0, Tx_PWR x1
    // +100 (0.01 mW), T x1 +256 (+1 degC), V x1 +0.
    a2[76..92].copy_from_slice(&[
        0x02, 0x00, 0x00, 0x00, // Tx_I
        0x01, 0x00, 0x00, 0x64, // Tx_PWR
        0x01, 0x00, 0x01, 0x00, // T
        0x01, 0x00, 0x00, 0x00, // V
    ]);
    let m = decode(&pages).unwrap();
    // Raw 0x1F80 (31.5) + 1 degC; raw bias 4000 x 2 x 2 uA; Tx power
    // 6000 + 100 in 0.1 uW; Rx power 5000 x 1.0.
    assert_close!(m.temperature_celsius, 32.5);
    assert_close!(m.supply_volts, 3.33);
    assert_close!(m.lanes[0].tx_bias_amperes, 16e-3);
    assert_close!(m.lanes[0].tx_power_watts, 0.61e-3);
    assert_close!(m.lanes[0].rx_power_watts, 0.5e-3);
    // Thresholds are calibrated the same way: temperature high alarm
    // raw 78 degC + 1.
    let t = m.thresholds.temperature_celsius.unwrap();
    assert_eq!(t.high_alarm, 79.0);
    assert_close!(m.thresholds.tx_bias_amperes.map(|b| b.high_warning), 22e-3);
    // Diagnostics not implemented: nothing, whatever the calibration.
    pages.get_mut(&HalfPage::lower(I2C_A0)).unwrap()[92] = 0x18;
    let m = decode(&pages).unwrap();
    assert_eq!(m.temperature_celsius, None);
    assert!(m.lanes.is_empty());
}

/// `aer_dev_correctable` of a device that replayed `bad_dllp` DLLPs and saw
/// `rx_err` receiver errors, as aer.c prints it.
fn correctable(rx_err: u64, bad_dllp: u64) -> String {
    format!(
        "RxErr {rx_err}\nBadTLP 0\nBadDLLP {bad_dllp}\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {}\n",
        rx_err + bad_dllp
    )
}

/// A DGX-like PCIe branch: root port 0000:15:01.0, a switch (upstream port
/// 0000:16:00.0, downstream ports 0000:17:00.0 and 0000:17:01.0), the NIC
/// of `ens1np0` (0000:18:00.0) below the first, the GPU 0000:19:00.0 below
/// the second; a second root port 0000:80:01.0 with a GPU 0000:81:00.0
/// directly below it. Every port has the AER files but the second root
/// port, which has none; the NIC's upstream port counted RxErr on the
/// NIC's writes. `bus/pci/devices` and the netdev's `device` link point
/// into `devices/` as the kernel's do.
fn bridge_tree(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-bridges-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let root = "devices/pci0000:15/0000:15:01.0";
    let usp = format!("{root}/0000:16:00.0");
    let nic_dsp = format!("{usp}/0000:17:00.0");
    let gpu_dsp = format!("{usp}/0000:17:01.0");
    let nic = format!("{nic_dsp}/0000:18:00.0");
    let gpu = format!("{gpu_dsp}/0000:19:00.0");
    let root2 = "devices/pci0000:80/0000:80:01.0";
    let gpu2 = format!("{root2}/0000:81:00.0");
    for d in [&nic, &gpu, &gpu2] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for (d, cor) in [
        (root.to_string(), correctable(0, 0)),
        (usp.clone(), correctable(0, 0)),
        (nic_dsp.clone(), correctable(17, 2)),
        (gpu_dsp.clone(), correctable(0, 0)),
        (nic.clone(), correctable(0, 0)),
    ] {
        std::fs::write(dir.join(&d).join("aer_dev_correctable"), cor).unwrap();
        std::fs::write(
            dir.join(&d).join("aer_dev_nonfatal"),
            "CmpltTO 0\nTOTAL_ERR_NONFATAL 0\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(&d).join("aer_dev_fatal"),
            "DLP 0\nTOTAL_ERR_FATAL 0\n",
        )
        .unwrap();
    }
    let net = dir.join("class/net/ens1np0");
    std::fs::create_dir_all(&net).unwrap();
    std::os::unix::fs::symlink(format!("../../../{nic}"), net.join("device")).unwrap();
    let pci = dir.join("bus/pci/devices");
    std::fs::create_dir_all(&pci).unwrap();
    for (addr, d) in [("0000:19:00.0", &gpu), ("0000:81:00.0", &gpu2)] {
        std::os::unix::fs::symlink(format!("../../../{d}"), pci.join(addr)).unwrap();
    }
    dir
}

#[test]
fn bridge_ports_on_nic_and_gpu_paths_are_read_once_with_what_they_serve() {
    let dir = bridge_tree("serve");
    let mut reader = roce_netdev::phys::PhysReader::new(roce_netdev::phys::PhysOptions {
        sysfs: dir.clone(),
        module_interval: std::time::Duration::from_secs(300),
    });
    let targets = [NetdevToRead {
        name: "ens1np0".into(),
        rdma: None,
    }];
    let gpus = ["0000:19:00.0".to_string(), "0000:81:00.0".to_string()];
    let mut errors = Vec::new();
    let snap = reader.read(&targets, &gpus, std::time::Duration::ZERO, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let addresses: Vec<&str> = snap.bridges.iter().map(|b| b.pci.as_str()).collect();
    // The root port and the switch's upstream port, shared by the NIC's and
    // the GPU's paths, appear once.
    assert_eq!(
        addresses,
        [
            "0000:15:01.0",
            "0000:16:00.0",
            "0000:17:00.0",
            "0000:17:01.0",
            "0000:80:01.0"
        ]
    );
    let b = |a: &str| snap.bridges.iter().find(|b| b.pci == a).unwrap();
    assert_eq!(b("0000:15:01.0").netdevs, ["ens1np0"]);
    assert_eq!(b("0000:15:01.0").gpus, ["0000:19:00.0"]);
    assert!(!b("0000:15:01.0").endpoint_link);
    assert!(!b("0000:16:00.0").endpoint_link);
    // The NIC's upstream port: its link is the NIC's, and it counted the
    // errors of what the NIC sent.
    let up = b("0000:17:00.0");
    assert_eq!(
        (up.netdevs.as_slice(), up.gpus.len()),
        (&["ens1np0".to_string()][..], 0)
    );
    assert!(up.endpoint_link);
    let cor = up.aer.correctable.as_ref().unwrap();
    assert_eq!(cor.total, Some(19));
    assert_eq!(cor.kinds[0], ("RxErr".to_string(), 17));
    assert_eq!(b("0000:17:01.0").gpus, ["0000:19:00.0"]);
    assert!(b("0000:17:01.0").endpoint_link);
    // A root port without the AER capability: absent, not 0.
    let bare = b("0000:80:01.0");
    assert!(bare.aer.is_empty());
    assert_eq!(bare.gpus, ["0000:81:00.0"]);
    assert!(bare.endpoint_link);
    // Three files on each of four ports and on the NIC.
    assert_eq!(reader.last_calls().aer_files, 15);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bridge_layout_is_learned_once_and_refreshed() {
    use std::time::Duration;
    let dir = bridge_tree("learn");
    let mut reader = roce_netdev::phys::PhysReader::new(roce_netdev::phys::PhysOptions {
        sysfs: dir.clone(),
        module_interval: Duration::from_secs(300),
    });
    let gpus = ["0000:81:00.0".to_string()];
    let mut errors = Vec::new();
    let first = reader.read(&[], &gpus, Duration::ZERO, &mut errors);
    assert!(first.bridges[0].aer.is_empty());
    // The files appear (a kernel with AER now): remembered absent until the
    // layout is learned again, then read.
    let root2 = dir.join("devices/pci0000:80/0000:80:01.0");
    std::fs::write(root2.join("aer_dev_correctable"), correctable(0, 4)).unwrap();
    let steady = reader.read(&[], &gpus, Duration::from_secs(10), &mut errors);
    assert!(steady.bridges[0].aer.is_empty());
    assert_eq!(reader.last_calls().aer_files, 0);
    let later = reader.read(&[], &gpus, roce_netdev::LAYOUT_REFRESH, &mut errors);
    assert_eq!(
        later.bridges[0].aer.correctable.as_ref().unwrap().total,
        Some(4)
    );
    // Its counts follow in place (pread on the kept file).
    std::fs::write(root2.join("aer_dev_correctable"), correctable(0, 6)).unwrap();
    let next = reader.read(
        &[],
        &gpus,
        roce_netdev::LAYOUT_REFRESH + Duration::from_secs(10),
        &mut errors,
    );
    assert_eq!(
        next.bridges[0].aer.correctable.as_ref().unwrap().total,
        Some(6)
    );
    assert_eq!(reader.last_calls().aer_files, 1);
    // A GPU no longer read takes its bridges with it.
    let none = reader.read(
        &[],
        &[],
        roce_netdev::LAYOUT_REFRESH + Duration::from_secs(20),
        &mut errors,
    );
    assert!(none.bridges.is_empty());
    assert!(errors.is_empty(), "{errors:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
