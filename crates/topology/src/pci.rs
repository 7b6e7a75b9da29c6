//! PCI addresses and the values of the sysfs PCI attributes this crate
//! reads (`class`, `vendor`, `numa_node`, `*_link_speed`, `*_link_width`).
//! Pure parsing, no I/O.

use std::fmt;

/// A PCI function address, `domain:bus:device.function`, normalised to the
/// kernel's sysfs spelling (lower-case hex, domain at least 4 digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddress {
    /// Parses `0000:17:00.0`, NVML's `00000000:17:00.0`, upper or lower
    /// case, with or without surrounding blanks; a missing domain means 0.
    pub fn parse(text: &str) -> Option<PciAddress> {
        let text = text.trim();
        let (rest, function) = text.rsplit_once('.')?;
        let mut parts = rest.rsplit(':');
        let device = parts.next()?;
        let bus = parts.next()?;
        let domain = parts.next().unwrap_or("0");
        if parts.next().is_some() || device.len() > 2 || bus.len() > 2 || domain.len() > 8 {
            return None;
        }
        let address = PciAddress {
            domain: u32::from_str_radix(domain, 16).ok()?,
            bus: u8::from_str_radix(bus, 16).ok()?,
            device: u8::from_str_radix(device, 16).ok()?,
            function: u8::from_str_radix(function, 16).ok()?,
        };
        // PCI: 32 devices per bus, 8 functions per device.
        if address.device > 0x1f || address.function > 7 || function.len() != 1 {
            return None;
        }
        Some(address)
    }

    /// The address as NVML writes `nvmlPciInfo_t.busId`
    /// (`NVML_DEVICE_PCI_BUS_ID_FMT`, `%08X:%02X:%02X.0`) and dcgm-exporter
    /// labels its series (`pci_bus_id="00000000:1B:00.0"`): an 8-digit
    /// domain and upper-case hex, which PromQL cannot derive from the
    /// kernel's form (it has no case conversion).
    pub fn nvml_bus_id(&self) -> String {
        format!(
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// A PCIe link speed, in mega-transfers per second per lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkSpeed(pub u32);

impl LinkSpeed {
    pub fn transfers_per_second(self) -> f64 {
        f64::from(self.0) * 1e6
    }
}

/// Why a PCI attribute's text did not parse; each variant carries the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PciParseError {
    #[error("unexpected link speed {0:?}")]
    LinkSpeed(String),
    #[error("unexpected link width {0:?}")]
    LinkWidth(String),
    #[error("expected hex, got {0:?}")]
    Hex(String),
    #[error("unexpected numa_node {0:?}")]
    NumaNode(String),
}

/// Result of parsing a `*_link_speed` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeedText {
    Speed(LinkSpeed),
    /// The kernel knows no speed ("Unknown", "Unknown speed") or the bus is
    /// not PCIe ("33 MHz PCI", "8x AGP", ...): absent, not an error.
    Unknown,
}

/// Parses `current_link_speed`/`max_link_speed`.
///
/// Kernels since 5.7 print `pci_speed_string()` (drivers/pci/probe.c):
/// "2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe",
/// "32.0 GT/s PCIe", "64.0 GT/s PCIe", the PCI/PCI-X/AGP names for older
/// buses, and "Unknown". Older kernels printed `PCIE_SPEED2STR()`
/// (drivers/pci/pci.h): "2.5 GT/s", "5 GT/s", "8 GT/s", "16 GT/s",
/// "32 GT/s" or "Unknown speed". Any "<number> GT/s" is accepted so that a
/// later generation parses without a change here.
pub fn parse_link_speed(text: &str) -> Result<SpeedText, PciParseError> {
    let text = text.trim();
    let Some(number) = text
        .strip_suffix(" GT/s PCIe")
        .or_else(|| text.strip_suffix(" GT/s"))
    else {
        if text.starts_with("Unknown") || text.contains("MHz") || text.contains("AGP") {
            return Ok(SpeedText::Unknown);
        }
        return Err(PciParseError::LinkSpeed(text.to_string()));
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, "0"));
    let whole: u32 = whole
        .parse()
        .map_err(|_| PciParseError::LinkSpeed(text.to_string()))?;
    // One decimal at most in every kernel string ("2.5", "16.0").
    let tenths: u32 = match frac {
        "" => 0,
        f if f.len() == 1 => f
            .parse()
            .map_err(|_| PciParseError::LinkSpeed(text.to_string()))?,
        _ => return Err(PciParseError::LinkSpeed(text.to_string())),
    };
    let mts = whole
        .checked_mul(1000)
        .and_then(|w| w.checked_add(tenths * 100))
        .ok_or_else(|| PciParseError::LinkSpeed(text.to_string()))?;
    if mts == 0 {
        return Ok(SpeedText::Unknown);
    }
    Ok(SpeedText::Speed(LinkSpeed(mts)))
}

/// Parses `current_link_width`/`max_link_width` ("16"); 0 (what the kernel
/// prints when the width field is empty) means unknown.
pub fn parse_link_width(text: &str) -> Result<Option<u32>, PciParseError> {
    let text = text.trim();
    let width: u32 = text
        .parse()
        .map_err(|_| PciParseError::LinkWidth(text.to_string()))?;
    Ok((width > 0).then_some(width))
}

/// Parses a hex attribute (`0x10de`, `0x030200`).
pub fn parse_hex(text: &str) -> Result<u32, PciParseError> {
    let text = text.trim();
    let digits = text
        .strip_prefix("0x")
        .ok_or_else(|| PciParseError::Hex(text.to_string()))?;
    u32::from_str_radix(digits, 16).map_err(|_| PciParseError::Hex(text.to_string()))
}

/// Parses `numa_node`: -1 (no NUMA information) is `None`.
pub fn parse_numa_node(text: &str) -> Result<Option<u32>, PciParseError> {
    let text = text.trim();
    let node: i64 = text
        .parse()
        .map_err(|_| PciParseError::NumaNode(text.to_string()))?;
    Ok(u32::try_from(node).ok())
}

/// PCI vendor IDs of GPU makers this crate recognises.
pub const VENDOR_NVIDIA: u32 = 0x10de;
pub const VENDOR_AMD: u32 = 0x1002;

/// True for the base class/subclass of a GPU: 0x0300 (VGA compatible) or
/// 0x0302 (3D controller), from the 24-bit `class` value (include/linux/pci_ids.h
/// PCI_CLASS_DISPLAY_VGA, PCI_CLASS_DISPLAY_3D).
pub fn is_gpu_class(class: u32) -> bool {
    matches!(class >> 8, 0x0300 | 0x0302)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_normalise() {
        let a = PciAddress::parse("00000000:1A:00.0").unwrap();
        assert_eq!(a.to_string(), "0000:1a:00.0");
        assert_eq!(PciAddress::parse(" 0000:1a:00.0\n"), Some(a));
        assert_eq!(PciAddress::parse("1a:00.0"), Some(a));
        assert_eq!(
            PciAddress::parse("10000:e1:00.1").unwrap().to_string(),
            "10000:e1:00.1"
        );
        assert_eq!(a.nvml_bus_id(), "00000000:1A:00.0");
        assert_eq!(
            PciAddress::parse("10000:e1:00.1").unwrap().nvml_bus_id(),
            "00010000:E1:00.1"
        );
        assert_eq!(PciAddress::parse("0000:1a:20.0"), None);
        assert_eq!(PciAddress::parse("0000:1a:00.8"), None);
        assert_eq!(PciAddress::parse("pci0000:00"), None);
        assert_eq!(PciAddress::parse(""), None);
    }

    #[test]
    fn kernel_speed_strings() {
        let s = |t| parse_link_speed(t).unwrap();
        assert_eq!(s("2.5 GT/s PCIe"), SpeedText::Speed(LinkSpeed(2500)));
        assert_eq!(s("5.0 GT/s PCIe"), SpeedText::Speed(LinkSpeed(5000)));
        assert_eq!(s("8.0 GT/s PCIe\n"), SpeedText::Speed(LinkSpeed(8000)));
        assert_eq!(s("16.0 GT/s PCIe"), SpeedText::Speed(LinkSpeed(16000)));
        assert_eq!(s("32.0 GT/s PCIe"), SpeedText::Speed(LinkSpeed(32000)));
        assert_eq!(s("64.0 GT/s PCIe"), SpeedText::Speed(LinkSpeed(64000)));
        assert_eq!(s("5 GT/s"), SpeedText::Speed(LinkSpeed(5000)));
        assert_eq!(s("2.5 GT/s"), SpeedText::Speed(LinkSpeed(2500)));
        assert_eq!(s("Unknown"), SpeedText::Unknown);
        assert_eq!(s("Unknown speed"), SpeedText::Unknown);
        assert_eq!(s("133 MHz PCI-X 533"), SpeedText::Unknown);
        assert_eq!(s("8x AGP"), SpeedText::Unknown);
        assert!(parse_link_speed("fast").is_err());
        assert!(parse_link_speed("1.25.0 GT/s").is_err());
        assert_eq!(
            parse_link_speed("fast\n").unwrap_err().to_string(),
            "unexpected link speed \"fast\""
        );
        assert_eq!(
            parse_hex("10de").unwrap_err().to_string(),
            "expected hex, got \"10de\""
        );
    }

    #[test]
    fn widths_classes_numa() {
        assert_eq!(parse_link_width("16\n"), Ok(Some(16)));
        assert_eq!(parse_link_width("0"), Ok(None));
        assert!(parse_link_width("x16").is_err());
        assert_eq!(parse_hex("0x030200\n"), Ok(0x030200));
        assert!(is_gpu_class(0x030200));
        assert!(is_gpu_class(0x030000));
        assert!(!is_gpu_class(0x020000));
        assert!(!is_gpu_class(0x068000));
        assert_eq!(parse_numa_node("-1"), Ok(None));
        assert_eq!(parse_numa_node("1\n"), Ok(Some(1)));
    }
}
