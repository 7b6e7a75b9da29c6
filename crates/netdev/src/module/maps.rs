//! The pure decoders of a module's half pages: which pages a map needs
//! ([`pages_needed`]) and the SFF-8636, CMIS and SFF-8472 maps to a
//! [`ModuleInfo`] ([`decode`]), in base units.

use super::{
    type_name, HalfPage, Lane, Medium, ModuleError, ModuleInfo, ModuleThresholds, Pages, Standard,
    Thresholds, HALF, I2C_A0, I2C_A2,
};

/// SFF-8636 upper page 00h byte 192, extended specification compliance
/// (SFF-8024 Table 4-4): the codes of parallel-fibre media. 02h 100GBASE-SR4,
/// 05h 100GBASE-SR10, 07h 100G PSM4, 11h 4 x 10GBASE-SR, 12h 40G PSM4,
/// 29h 100GBASE-SR1/200GBASE-SR2/400GBASE-SR4, 41h 50GBASE-SR/100GBASE-SR2/
/// 200GBASE-SR4, 42h 50GBASE-FR/200GBASE-DR4, 44h 200G PSM4, 47h
/// 400GBASE-DR4.
const SFF8636_PARALLEL: &[u8] = &[0x02, 0x05, 0x07, 0x11, 0x12, 0x29, 0x41, 0x42, 0x44, 0x47];
/// CMIS multimode media interface codes of parallel fibre (SFF-8024 Table
/// 4-6): 04h 40GBASE-SR4, 08h 100GBASE-SR10, 09h 100GBASE-SR4, 0Ch
/// 100GBASE-SR2, 0Eh 200GBASE-SR4, 0Fh 400GBASE-SR16, 10h 400GBASE-SR8,
/// 11h 400G-SR4, 12h 800G-SR8.
const CMIS_MMF_PARALLEL: &[u8] = &[0x04, 0x08, 0x09, 0x0C, 0x0E, 0x0F, 0x10, 0x11, 0x12];
/// CMIS single-mode media interface codes of parallel fibre (Table 4-7):
/// 0Fh 100G PSM4, 17h 200GBASE-DR4, 1Ch 400GBASE-DR4.
const CMIS_SMF_PARALLEL: &[u8] = &[0x0F, 0x17, 0x1C];

fn half(pages: &Pages, id: HalfPage) -> Result<&[u8], ModuleError> {
    pages
        .get(&id)
        .map(Vec::as_slice)
        .filter(|p| p.len() >= HALF)
        .ok_or(ModuleError::MissingPage(id))
}

/// A byte at an offset of the whole page (0-255) within a half page.
fn u16_at(half: &[u8], offset: usize) -> Option<u16> {
    let i = offset % HALF;
    Some(u16::from_be_bytes([*half.get(i)?, *half.get(i + 1)?]))
}

fn temp(raw: u16) -> f64 {
    f64::from(raw as i16) / 256.0
}

fn volts(raw: u16) -> f64 {
    f64::from(raw) / 10_000.0
}

fn amperes(raw: u16) -> f64 {
    f64::from(raw) / 500_000.0
}

fn watts(raw: u16) -> f64 {
    f64::from(raw) / 10_000_000.0
}

/// Printable ASCII of a field, trailing blanks and NULs cut.
fn ascii(half: &[u8], offset: usize, len: usize) -> String {
    let i = offset % HALF;
    let bytes = half.get(i..i + len).unwrap_or(&[]);
    let s: String = bytes
        .iter()
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                ' '
            }
        })
        .collect();
    s.trim().to_string()
}

/// Four u16 thresholds in the order every map uses: high alarm, low alarm,
/// high warning, low warning.
fn thresholds(half: &[u8], offset: usize, unit: impl Fn(u16) -> f64) -> Option<Thresholds> {
    Some(Thresholds {
        high_alarm: unit(u16_at(half, offset)?),
        low_alarm: unit(u16_at(half, offset + 2)?),
        high_warning: unit(u16_at(half, offset + 4)?),
        low_warning: unit(u16_at(half, offset + 6)?),
    })
}

/// The half pages to read after the lower page 0, given its bytes. Flat
/// memory modules have no pages beyond 0.
pub fn pages_needed(lower: &[u8]) -> Vec<HalfPage> {
    let Some(&id) = lower.first() else {
        return Vec::new();
    };
    match Standard::of(id) {
        // SFF-8636 rev 2.10a, page 00h byte 2 bit 2: Flat_mem.
        Some(Standard::Sff8636) => {
            let flat = lower.get(2).is_some_and(|b| b & 0x04 != 0);
            let mut v = vec![HalfPage::upper(0, 0)];
            if !flat {
                v.push(HalfPage::upper(3, 0));
            }
            v
        }
        // CMIS 5.2 Table 8-4, page 00h byte 2 bit 7: MemoryModel (1 = flat).
        Some(Standard::Cmis) => {
            let flat = lower.get(2).is_some_and(|b| b & 0x80 != 0);
            let mut v = vec![HalfPage::upper(0, 0)];
            if !flat {
                v.extend([
                    HalfPage::upper(1, 0),
                    HalfPage::upper(2, 0),
                    HalfPage::upper(0x11, 0),
                ]);
            }
            v
        }
        // SFF-8472 rev 12.4, A0h byte 92 bit 6: digital diagnostics
        // implemented (in A2h).
        Some(Standard::Sff8472) => {
            if lower.get(92).is_some_and(|b| b & 0x40 != 0) {
                vec![HalfPage::lower(I2C_A2)]
            } else {
                Vec::new()
            }
        }
        None => Vec::new(),
    }
}

/// Decodes the pages of one module (the lower page 0 and what
/// [`pages_needed`] asked for). Optional pages that are missing leave
/// their fields `None`.
pub fn decode(pages: &Pages) -> Result<ModuleInfo, ModuleError> {
    let lower = half(pages, HalfPage::lower(I2C_A0))?;
    let id = lower[0];
    match Standard::of(id) {
        Some(Standard::Sff8636) => decode_sff8636(pages, lower, id),
        Some(Standard::Cmis) => decode_cmis(pages, lower, id),
        Some(Standard::Sff8472) => Ok(decode_sff8472(pages, lower, id)),
        None => Err(ModuleError::UnknownIdentifier(id)),
    }
}

/// Upper page 00h when the module gave it, else nothing (identity fields
/// empty, media unknown): one missing page does not discard the rest.
fn upper0(pages: &Pages) -> &[u8] {
    pages
        .get(&HalfPage::upper(0, 0))
        .map(Vec::as_slice)
        .filter(|p| p.len() >= HALF)
        .unwrap_or(&[])
}

fn decode_sff8636(pages: &Pages, lower: &[u8], id: u8) -> Result<ModuleInfo, ModuleError> {
    let upper0 = upper0(pages);
    // Page 00h byte 2 bit 0: Data_Not_Ready; the monitors are not valid yet.
    let ready = lower.get(2).is_some_and(|b| b & 0x01 == 0);
    // Byte 2 bit 2: Flat_mem (no upper pages beyond 00h).
    let flat = lower.get(2).is_some_and(|b| b & 0x04 != 0);
    // Upper page 00h byte 220 (SFF-8636 rev 2.10a Table 6-24): bit 5
    // temperature monitoring implemented, bit 4 supply voltage monitoring
    // implemented, bit 3 Rx power type (1 average), bit 2 Tx power
    // measurement supported.
    let diag = upper0.get(220 - HALF).copied().unwrap_or(0);
    let tx_power = diag & 0x04 != 0;
    // Byte 147 bits 7-4, transmitter technology: 1010b and above are copper
    // cables (passive unequalized, passive equalized, active equalizers).
    let copper = upper0.get(147 - HALF).is_some_and(|b| *b >= 0xA0);
    // A copper cable or a flat-memory module implements a module monitor
    // only where byte 220 says so (a passive DAC reads all zeros there);
    // paged optics predating those bits (SFF-8436) report both anyway.
    let optics_paged = !copper && !flat;
    let temp_impl = diag & 0x20 != 0 || optics_paged;
    let vcc_impl = diag & 0x10 != 0 || optics_paged;
    // Byte 131 bit 7: the extended compliance code in byte 192 is valid
    // (ethtool's `SFF8636_ETHERNET_RSRVD`); bit 2 40GBASE-SR4.
    let compliance = upper0.get(131 - HALF).copied().unwrap_or(0);
    let extended = upper0.get(192 - HALF).copied().unwrap_or(0);
    let medium = if copper {
        Medium::Copper
    } else if compliance & 0x04 != 0
        || (compliance & 0x80 != 0 && SFF8636_PARALLEL.contains(&extended))
    {
        Medium::ParallelFibre
    } else if compliance != 0 {
        Medium::Optical
    } else {
        Medium::Unknown
    };
    // A copper cable has no optical lanes: no bias, Tx or Rx power.
    let lanes = (0..if copper { 0 } else { 4 })
        .map(|l| Lane {
            // Page 00h bytes 42-49 Tx bias, 50-57 Tx power, 34-41 Rx power.
            tx_bias_amperes: ready
                .then(|| u16_at(lower, 42 + 2 * l).map(amperes))
                .flatten(),
            tx_power_watts: (ready && tx_power)
                .then(|| u16_at(lower, 50 + 2 * l).map(watts))
                .flatten(),
            rx_power_watts: ready
                .then(|| u16_at(lower, 34 + 2 * l).map(watts))
                .flatten(),
        })
        .collect();
    // Upper page 03h: thresholds at 128 (temperature), 144 (Vcc), 176 (Rx
    // power), 184 (Tx bias), 192 (Tx power).
    // Thresholds only for the monitors the module has.
    let thresholds = match pages.get(&HalfPage::upper(3, 0)) {
        Some(p3) if p3.len() >= HALF => ModuleThresholds {
            temperature_celsius: temp_impl.then(|| thresholds(p3, 128, temp)).flatten(),
            supply_volts: vcc_impl.then(|| thresholds(p3, 144, volts)).flatten(),
            rx_power_watts: (!copper).then(|| thresholds(p3, 176, watts)).flatten(),
            tx_bias_amperes: (!copper).then(|| thresholds(p3, 184, amperes)).flatten(),
            tx_power_watts: (tx_power && !copper)
                .then(|| thresholds(p3, 192, watts))
                .flatten(),
        },
        _ => ModuleThresholds::default(),
    };
    Ok(ModuleInfo {
        standard: Standard::Sff8636,
        identifier: id,
        kind: type_name(id),
        // Upper page 00h: vendor 148-163, part 168-183, revision 184-185,
        // serial 196-211.
        vendor: ascii(upper0, 148, 16),
        part: ascii(upper0, 168, 16),
        revision: ascii(upper0, 184, 2),
        serial: ascii(upper0, 196, 16),
        // Page 00h bytes 22-23 temperature, 26-27 supply voltage.
        temperature_celsius: (ready && temp_impl)
            .then(|| u16_at(lower, 22).map(temp))
            .flatten(),
        supply_volts: (ready && vcc_impl)
            .then(|| u16_at(lower, 26).map(volts))
            .flatten(),
        lanes,
        rx_power_average: (!upper0.is_empty() && !copper).then_some(diag & 0x08 != 0),
        thresholds,
        medium,
    })
}

fn decode_cmis(pages: &Pages, lower: &[u8], id: u8) -> Result<ModuleInfo, ModuleError> {
    let upper0 = upper0(pages);
    let page1 = pages
        .get(&HalfPage::upper(1, 0))
        .filter(|p| p.len() >= HALF);
    let page2 = pages
        .get(&HalfPage::upper(2, 0))
        .filter(|p| p.len() >= HALF);
    let page11 = pages
        .get(&HalfPage::upper(0x11, 0))
        .filter(|p| p.len() >= HALF);
    // Page 01h byte 160 (CMIS 5.2 Table 8-45): bit 0 Tx bias, bit 1 Tx
    // power, bit 2 Rx power monitors supported; bits 4-3 scale the Tx bias
    // unit by 1, 2 or 4.
    let monitors = page1.and_then(|p| p.get(160 - HALF)).copied().unwrap_or(0);
    // Page 01h byte 159 (Table 8-44): bit 0 temperature, bit 1 supply
    // voltage monitor supported. A flat-memory module (a passive copper
    // cable) has no page 01h and so no monitors: absent, not 0.
    let module_monitors = page1.and_then(|p| p.get(159 - HALF)).copied().unwrap_or(0);
    let temp_impl = module_monitors & 0x01 != 0;
    let vcc_impl = module_monitors & 0x02 != 0;
    // Page 00h byte 85: module media type (SFF-8024 Table 4-5: 01h MMF,
    // 02h SMF, 03h passive copper, 04h active cable, 05h BASE-T); byte 87:
    // media interface code of the first application.
    let media_code = lower.get(87).copied().unwrap_or(0);
    let medium = match lower.get(85).copied().unwrap_or(0) {
        0x01 if CMIS_MMF_PARALLEL.contains(&media_code) => Medium::ParallelFibre,
        0x02 if CMIS_SMF_PARALLEL.contains(&media_code) => Medium::ParallelFibre,
        0x01 | 0x02 => Medium::Optical,
        0x03 => Medium::Copper,
        _ => Medium::Unknown,
    };
    let bias_scale = match (monitors >> 3) & 0x03 {
        1 => 2.0,
        2 => 4.0,
        _ => 1.0,
    };
    let bias = |raw: u16| amperes(raw) * bias_scale;
    // Page 00h byte 88 bits 3-0: media lane count of the first application
    // (CMIS 5.2 Table 8-24); lanes past it are not wired.
    let media_lanes = match lower.get(88).map(|b| b & 0x0f) {
        Some(n @ 1..=8) => usize::from(n),
        _ => 8,
    };
    let lanes = match page11 {
        Some(p) => (0..media_lanes)
            .map(|l| Lane {
                // Page 11h: Tx power from byte 154, Tx bias from 170, Rx
                // power from 186, two bytes per lane.
                tx_power_watts: (monitors & 0x02 != 0)
                    .then(|| u16_at(p, 154 + 2 * l).map(watts))
                    .flatten(),
                tx_bias_amperes: (monitors & 0x01 != 0)
                    .then(|| u16_at(p, 170 + 2 * l).map(bias))
                    .flatten(),
                rx_power_watts: (monitors & 0x04 != 0)
                    .then(|| u16_at(p, 186 + 2 * l).map(watts))
                    .flatten(),
            })
            .collect(),
        None => Vec::new(),
    };
    // Page 02h: temperature 128, Vcc 136, Tx power 176, Tx bias 184, Rx
    // power 192.
    // Thresholds only for the monitors page 01h advertises.
    let thresholds = match page2 {
        Some(p2) => ModuleThresholds {
            temperature_celsius: temp_impl.then(|| thresholds(p2, 128, temp)).flatten(),
            supply_volts: vcc_impl.then(|| thresholds(p2, 136, volts)).flatten(),
            tx_power_watts: (monitors & 0x02 != 0)
                .then(|| thresholds(p2, 176, watts))
                .flatten(),
            tx_bias_amperes: (monitors & 0x01 != 0)
                .then(|| thresholds(p2, 184, bias))
                .flatten(),
            rx_power_watts: (monitors & 0x04 != 0)
                .then(|| thresholds(p2, 192, watts))
                .flatten(),
        },
        None => ModuleThresholds::default(),
    };
    Ok(ModuleInfo {
        standard: Standard::Cmis,
        identifier: id,
        kind: type_name(id),
        // Upper page 00h: vendor 129-144, part 148-163, revision 164-165,
        // serial 166-181.
        vendor: ascii(upper0, 129, 16),
        part: ascii(upper0, 148, 16),
        revision: ascii(upper0, 164, 2),
        serial: ascii(upper0, 166, 16),
        // Page 00h bytes 14-15 temperature, 16-17 supply voltage.
        temperature_celsius: temp_impl.then(|| u16_at(lower, 14).map(temp)).flatten(),
        supply_volts: vcc_impl.then(|| u16_at(lower, 16).map(volts)).flatten(),
        lanes,
        // Page 01h byte 151 bit 4: Rx power measured as average (1) or OMA.
        rx_power_average: page1.and_then(|p| p.get(151 - HALF)).map(|b| b & 0x10 != 0),
        thresholds,
        medium,
    })
}

/// SFF-8472 external calibration constants (A2h bytes 56-91), applied as
/// ethtool's `sff8472_calibration` (`sfpdiag.c`) does, so that the values
/// agree with `ethtool -m`: temperature, Vcc, Tx bias and Tx power are
/// `raw * slope + offset` (slope unsigned 8.8 fixed point, offset s16,
/// the product truncated to the raw field's 16 bits); Rx power is
/// `RXPWR0 + x * (RXPWR1 + RXPWR2 + RXPWR3)` with big-endian IEEE-754
/// floats (ethtool's form; RXPWR4 unused), truncated to u16.
struct ExternalCal {
    txi: (f64, i16),
    txpwr: (f64, i16),
    temp: (f64, i16),
    volt: (f64, i16),
    rx: [f32; 4],
}

impl ExternalCal {
    fn read(a2: &[u8]) -> Option<ExternalCal> {
        let slope = |o: usize| -> Option<(f64, i16)> {
            let s = f64::from(*a2.get(o)?) + f64::from(*a2.get(o + 1)?) / 256.0;
            let off = u16_at(a2, o + 2)? as i16;
            Some((s, off))
        };
        let float = |o: usize| -> Option<f32> {
            let b = a2.get(o..o + 4)?;
            Some(f32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        Some(ExternalCal {
            txi: slope(76)?,
            txpwr: slope(80)?,
            temp: slope(84)?,
            volt: slope(88)?,
            rx: [float(72)?, float(68)?, float(64)?, float(60)?],
        })
    }

    /// Formula 1 on an unsigned field (Vcc, Tx bias, Tx power).
    fn unsigned(raw: u16, (slope, offset): (f64, i16)) -> u16 {
        ((f64::from(raw) * slope) as u16).wrapping_add(offset as u16)
    }

    /// Formula 1 on the signed temperature field.
    fn signed(raw: u16, (slope, offset): (f64, i16)) -> u16 {
        ((f64::from(raw as i16) * slope) as i16).wrapping_add(offset) as u16
    }

    /// Formula 2, Rx power.
    fn rx_power(&self, raw: u16) -> u16 {
        let x = f32::from(raw);
        let v = self.rx[0] + x * self.rx[1] + x * self.rx[2] + x * self.rx[3];
        if v.is_finite() {
            v as u16
        } else {
            0
        }
    }
}

fn decode_sff8472(pages: &Pages, a0: &[u8], id: u8) -> ModuleInfo {
    // A0h byte 92: bit 6 diagnostics implemented, bit 5 internally
    // calibrated, bit 4 externally calibrated, bit 3 Rx power average.
    let diag = a0.get(92).copied().unwrap_or(0);
    let implemented = diag & 0x40 != 0;
    let internal = diag & 0x20 != 0;
    let external = diag & 0x10 != 0;
    let a2 = pages
        .get(&HalfPage::lower(I2C_A2))
        .filter(|p| p.len() >= HALF && implemented && (internal || external));
    let mut info = ModuleInfo {
        standard: Standard::Sff8472,
        identifier: id,
        kind: type_name(id),
        // A0h: vendor 20-35, part 40-55, revision 56-59, serial 68-83.
        vendor: ascii(a0, 20, 16),
        part: ascii(a0, 40, 16),
        revision: ascii(a0, 56, 4),
        serial: ascii(a0, 68, 16),
        temperature_celsius: None,
        supply_volts: None,
        lanes: Vec::new(),
        rx_power_average: Some(diag & 0x08 != 0),
        thresholds: ModuleThresholds::default(),
        medium: Medium::Unknown,
    };
    let Some(a2) = a2 else {
        return info;
    };
    // Internal calibration wins when both bits are set: the raw values are
    // already in units.
    let cal = (external && !internal)
        .then(|| ExternalCal::read(a2))
        .flatten();
    if external && !internal && cal.is_none() {
        return info;
    }
    let t = |raw: u16| match &cal {
        Some(c) => temp(ExternalCal::signed(raw, c.temp)),
        None => temp(raw),
    };
    let v = |raw: u16| match &cal {
        Some(c) => volts(ExternalCal::unsigned(raw, c.volt)),
        None => volts(raw),
    };
    let bias = |raw: u16| match &cal {
        Some(c) => amperes(ExternalCal::unsigned(raw, c.txi)),
        None => amperes(raw),
    };
    let txp = |raw: u16| match &cal {
        Some(c) => watts(ExternalCal::unsigned(raw, c.txpwr)),
        None => watts(raw),
    };
    let rxp = |raw: u16| match &cal {
        Some(c) => watts(c.rx_power(raw)),
        None => watts(raw),
    };
    // A2h: temperature 96, Vcc 98, Tx bias 100, Tx power 102, Rx power
    // 104; thresholds from 0: temperature, Vcc, bias, Tx power, Rx power.
    info.temperature_celsius = u16_at(a2, 96).map(t);
    info.supply_volts = u16_at(a2, 98).map(v);
    info.lanes = vec![Lane {
        tx_bias_amperes: u16_at(a2, 100).map(bias),
        tx_power_watts: u16_at(a2, 102).map(txp),
        rx_power_watts: u16_at(a2, 104).map(rxp),
    }];
    info.thresholds = ModuleThresholds {
        temperature_celsius: thresholds(a2, 0, t),
        supply_volts: thresholds(a2, 8, v),
        tx_bias_amperes: thresholds(a2, 16, bias),
        tx_power_watts: thresholds(a2, 24, txp),
        rx_power_watts: thresholds(a2, 32, rxp),
    };
    info
}
