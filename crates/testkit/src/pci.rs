//! PCI functions as sysfs shows them: the attribute files of
//! drivers/pci/pci-sysfs.c (class "0x%06x", vendor/device "0x%04x",
//! numa_node "%d", link widths "%u", link speeds from `pci_speed_string`)
//! and the `config` file, a 4096-byte config space as root reads it (a
//! reader without CAP_SYS_ADMIN gets the first 64 bytes). Register offsets
//! and IDs: include/uapi/linux/pci_regs.h.

use std::io;

use crate::tree::Tree;

/// PCI_EXP_TYPE_*: the device/port type in the PCI Express capability.
pub const ENDPOINT: u8 = 0x0;
pub const ROOT_PORT: u8 = 0x4;
pub const UPSTREAM: u8 = 0x5;
pub const DOWNSTREAM: u8 = 0x6;

/// PCI_ACS_* capability and control bits.
pub const ACS_SV: u16 = 0x0001;
pub const ACS_RR: u16 = 0x0004;
pub const ACS_CR: u16 = 0x0008;
pub const ACS_UF: u16 = 0x0010;

pub const CLASS_BRIDGE: u32 = 0x060400;

/// A config space, built register by register.
pub struct ConfigSpace(Vec<u8>);

impl ConfigSpace {
    /// Header: IDs, revision, class code, header type (1 for bridges).
    pub fn new(vendor: u16, device: u16, class: u32, revision: u8, header_type: u8) -> Self {
        let mut c = ConfigSpace(vec![0; 4096]);
        c.u16(0x00, vendor).u16(0x02, device);
        c.0[0x08] = revision;
        c.0[0x09..0x0c].copy_from_slice(&class.to_le_bytes()[..3]);
        c.0[0x0e] = header_type;
        c
    }

    pub fn u16(&mut self, at: usize, v: u16) -> &mut Self {
        self.0[at..at + 2].copy_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_le_bytes());
        self
    }

    pub fn command(&mut self, v: u16) -> &mut Self {
        self.u16(0x04, v)
    }

    /// Primary, secondary and subordinate bus numbers of a bridge.
    pub fn buses(&mut self, buses: [u8; 3]) -> &mut Self {
        self.0[0x18..0x1b].copy_from_slice(&buses);
        self
    }

    /// PCI_STATUS_CAP_LIST and PCI_CAPABILITY_LIST pointing at `first`.
    pub fn capability_list(&mut self, first: u8) -> &mut Self {
        self.u16(0x06, 0x0010);
        self.0[0x34] = first;
        self
    }

    /// Power management capability (version 3) at `at`.
    pub fn power_management(&mut self, at: usize, next: u8) -> &mut Self {
        self.0[at] = 0x01;
        self.0[at + 1] = next;
        self.u16(at + 2, 0x0003)
    }

    /// PCI Express capability (version 2) at `at` with the device/port
    /// type; `slot` sets "slot implemented" (root and downstream ports).
    pub fn express(&mut self, at: usize, next: u8, port_type: u8, slot: bool) -> &mut Self {
        self.0[at] = 0x10;
        self.0[at + 1] = next;
        let flags = 0x0002 | (u16::from(port_type) << 4) | if slot { 0x0100 } else { 0 };
        self.u16(at + 2, flags)
    }

    /// Link Capabilities, Link Status and Link Capabilities 2 (2.5 to
    /// 32 GT/s supported) of the PCI Express capability at `at`;
    /// `speed` is the PCI_EXP_LNKCAP_SLS code (5 = 32 GT/s).
    pub fn express_link(&mut self, at: usize, speed: u8, width: u8) -> &mut Self {
        let link = u32::from(speed) | (u32::from(width) << 4);
        self.u32(at + 0x0c, link);
        self.u16(at + 0x12, link as u16);
        self.u32(at + 0x2c, 0x3e)
    }

    /// An extended capability header at `at` (0x100 and above).
    pub fn extended(&mut self, at: usize, id: u16, version: u8, next: u16) -> &mut Self {
        let v = u32::from(id) | (u32::from(version) << 16) | (u32::from(next) << 20);
        self.u32(at, v)
    }

    /// Advanced Error Reporting (version 2) at `at`.
    pub fn aer(&mut self, at: usize, next: u16) -> &mut Self {
        self.extended(at, 0x0001, 2, next)
    }

    /// Access Control Services at `at` with its capability and control
    /// registers.
    pub fn acs(&mut self, at: usize, next: u16, caps: u16, ctrl: u16) -> &mut Self {
        self.extended(at, 0x000d, 1, next);
        self.u16(at + 4, caps).u16(at + 6, ctrl)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// What a reader without CAP_SYS_ADMIN gets.
    pub fn unprivileged(&self) -> &[u8] {
        &self.0[..64]
    }
}

/// The link attributes: current speed and width, max speed and width.
#[derive(Clone, Copy)]
pub struct Link {
    pub speed: &'static str,
    pub width: u32,
    pub max_speed: &'static str,
    pub max_width: u32,
}

impl Link {
    pub const fn same(speed: &'static str, width: u32) -> Link {
        Link {
            speed,
            width,
            max_speed: speed,
            max_width: width,
        }
    }
}

/// A PCI function's sysfs attributes.
pub struct Function<'a> {
    pub vendor: u16,
    pub device: u16,
    pub class: u32,
    pub numa: i32,
    /// `revision`, written when set.
    pub revision: Option<u8>,
    pub link: Option<Link>,
    pub driver: Option<&'a str>,
    pub config: Option<Vec<u8>>,
    /// Bridges: `secondary_bus_number` and `subordinate_bus_number`.
    pub bus_numbers: Option<(u8, u8)>,
}

impl<'a> Function<'a> {
    pub fn new(vendor: u16, device: u16, class: u32, numa: i32) -> Self {
        Function {
            vendor,
            device,
            class,
            numa,
            revision: None,
            link: None,
            driver: None,
            config: None,
            bus_numbers: None,
        }
    }

    /// Writes the function at `rel` (a path under `devices/`, ending in its
    /// address), its `driver` link into bus/pci/drivers/, and the
    /// bus/pci/devices/<address> link.
    pub fn write(&self, t: &Tree, rel: &str) -> io::Result<()> {
        t.attr(
            &format!("{rel}/vendor"),
            format_args!("0x{:04x}", self.vendor),
        )?;
        t.attr(
            &format!("{rel}/device"),
            format_args!("0x{:04x}", self.device),
        )?;
        t.attr(
            &format!("{rel}/class"),
            format_args!("0x{:06x}", self.class),
        )?;
        if let Some(rev) = self.revision {
            t.attr(&format!("{rel}/revision"), format_args!("0x{rev:02x}"))?;
        }
        t.attr(&format!("{rel}/numa_node"), self.numa)?;
        if let Some(l) = self.link {
            t.attr(&format!("{rel}/current_link_speed"), l.speed)?;
            t.attr(&format!("{rel}/current_link_width"), l.width)?;
            t.attr(&format!("{rel}/max_link_speed"), l.max_speed)?;
            t.attr(&format!("{rel}/max_link_width"), l.max_width)?;
        }
        if let Some((secondary, subordinate)) = self.bus_numbers {
            t.attr(&format!("{rel}/secondary_bus_number"), secondary)?;
            t.attr(&format!("{rel}/subordinate_bus_number"), subordinate)?;
        }
        if let Some(config) = &self.config {
            t.write(&format!("{rel}/config"), config)?;
        }
        if let Some(driver) = self.driver {
            t.mkdir(&format!("bus/pci/drivers/{driver}"))?;
            t.link(
                &format!("{rel}/driver"),
                &format!("bus/pci/drivers/{driver}"),
            )?;
        }
        let address = rel.rsplit('/').next().unwrap_or(rel);
        t.link(&format!("bus/pci/devices/{address}"), rel)
    }
}
