//! ACS (Access Control Services) from a function's config space (the sysfs
//! `config` file): whether P2P Request Redirect is on, which sends
//! peer-to-peer traffic (GPUDirect RDMA between a GPU and a NIC under one
//! switch) up through the root complex. Pure parsing of the bytes.
//!
//! Layout from include/uapi/linux/pci_regs.h: extended capabilities start
//! at PCI_CFG_SPACE_SIZE (0x100); each header holds the ID in bits 15:0 and
//! the next offset in bits 31:20 (`PCI_EXT_CAP_ID`, `PCI_EXT_CAP_NEXT`,
//! mask 0xffc); the ACS capability is PCI_EXT_CAP_ID_ACS (0x0d) with its
//! control register at PCI_ACS_CTRL (0x06), P2P Request Redirect being
//! PCI_ACS_RR (0x0004). The walk stops after (4096 - 256) / 8 headers, as
//! `pci_find_next_ext_capability()` (drivers/pci/pci.c) does.
//!
//! The same bytes also give a function's PCI Express port type (root port,
//! switch upstream or downstream port) from the PCI Express capability
//! (PCI_CAP_ID_EXP 0x10 in the list at PCI_CAPABILITY_LIST 0x34, type in
//! bits 7:4 of PCI_EXP_FLAGS, +2), walked at most PCI_FIND_CAP_TTL (48)
//! times as `__pci_find_next_cap_ttl()` does.
//!
//! `config` reads return only the first 64 bytes to readers without
//! CAP_SYS_ADMIN (`pci_read_config()`, drivers/pci/pci-sysfs.c): a short
//! read is [`AcsState::Unknown`], not an error.

const EXT_CAP_START: usize = 0x100;
const EXT_CAP_ID_ACS: u32 = 0x000d;
const ACS_CTRL: usize = 0x06;
const ACS_RR: u16 = 0x0004;
const CONFIG_SPACE_SIZE: usize = 256;
const HEADER_LIMIT: usize = (4096 - 256) / 8;

/// ACS state of one bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcsState {
    /// ACS capability present, P2P Request Redirect enabled.
    RedirectEnabled,
    /// ACS capability present, P2P Request Redirect disabled.
    RedirectDisabled,
    /// No ACS capability (nothing to redirect).
    NoAcs,
    /// The extended config space could not be read (short read without
    /// CAP_SYS_ADMIN, or the file is absent).
    Unknown,
}

impl AcsState {
    pub fn as_str(self) -> &'static str {
        match self {
            AcsState::RedirectEnabled => "enabled",
            AcsState::RedirectDisabled => "disabled",
            AcsState::NoAcs => "absent",
            AcsState::Unknown => "unknown",
        }
    }
}

fn u32_at(config: &[u8], pos: usize) -> Option<u32> {
    let bytes = config.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

fn u16_at(config: &[u8], pos: usize) -> Option<u16> {
    let bytes = config.get(pos..pos.checked_add(2)?)?;
    Some(u16::from_le_bytes([bytes[0], bytes[1]]))
}

/// The ACS state from the bytes of a `config` file.
pub fn acs_state(config: &[u8]) -> AcsState {
    if config.len() <= 64 {
        return AcsState::Unknown;
    }
    if config.len() <= CONFIG_SPACE_SIZE {
        // A conventional (256-byte) config space has no extended
        // capabilities.
        return AcsState::NoAcs;
    }
    let mut pos = EXT_CAP_START;
    for _ in 0..HEADER_LIMIT {
        let Some(header) = u32_at(config, pos) else {
            return AcsState::Unknown;
        };
        // 0: no extended capability at all; all ones: the device did not
        // answer the config read.
        if header == 0 {
            return AcsState::NoAcs;
        }
        if header == u32::MAX {
            return AcsState::Unknown;
        }
        if header & 0xffff == EXT_CAP_ID_ACS {
            return match u16_at(config, pos + ACS_CTRL) {
                Some(ctrl) if ctrl & ACS_RR != 0 => AcsState::RedirectEnabled,
                Some(_) => AcsState::RedirectDisabled,
                None => AcsState::Unknown,
            };
        }
        let next = ((header >> 20) & 0xffc) as usize;
        if next < EXT_CAP_START {
            return AcsState::NoAcs;
        }
        pos = next;
    }
    AcsState::NoAcs
}

const STATUS: usize = 0x06;
const STATUS_CAP_LIST: u16 = 0x10;
const CAPABILITY_LIST: usize = 0x34;
const CAP_ID_EXP: u8 = 0x10;
const EXP_FLAGS: usize = 0x02;
const FIND_CAP_TTL: usize = 48;

/// PCI Express device/port type (PCI_EXP_TYPE_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortType {
    /// PCI_EXP_TYPE_ROOT_PORT (0x4).
    RootPort,
    /// PCI_EXP_TYPE_UPSTREAM (0x5): a switch's upstream port.
    SwitchUpstream,
    /// PCI_EXP_TYPE_DOWNSTREAM (0x6): a switch's downstream port.
    SwitchDownstream,
    /// Any other type (endpoints, PCIe-to-PCI bridges, ...), by its value.
    Other(u8),
}

/// The PCI Express port type from config space; `None` when the
/// capability is not within the bytes read (a 64-byte unprivileged read,
/// or a conventional PCI function).
pub fn port_type(config: &[u8]) -> Option<PortType> {
    let status = u16_at(config, STATUS)?;
    if status & STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut pos = usize::from(*config.get(CAPABILITY_LIST)? & 0xfc);
    for _ in 0..FIND_CAP_TTL {
        // Capabilities live after the 64-byte standard header.
        if pos < 0x40 {
            return None;
        }
        let id = *config.get(pos)?;
        if id == 0xff {
            return None;
        }
        if id == CAP_ID_EXP {
            let flags = u16_at(config, pos + EXP_FLAGS)?;
            // Masked to 4 bits: the value fits a u8.
            let kind = ((flags & 0x00f0) >> 4) as u8;
            return Some(match kind {
                0x4 => PortType::RootPort,
                0x5 => PortType::SwitchUpstream,
                0x6 => PortType::SwitchDownstream,
                other => PortType::Other(other),
            });
        }
        pos = usize::from(*config.get(pos + 1)? & 0xfc);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(caps: &[(usize, u32, u16)]) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        for (i, (pos, id, ctrl)) in caps.iter().enumerate() {
            let next = caps.get(i + 1).map(|n| n.0 as u32).unwrap_or(0);
            let header = id | (1 << 16) | (next << 20);
            c[*pos..pos + 4].copy_from_slice(&header.to_le_bytes());
            c[pos + 6..pos + 8].copy_from_slice(&ctrl.to_le_bytes());
        }
        c
    }

    #[test]
    fn walks_the_list() {
        // AER (0x0001) then ACS with SV|RR|CR|UF (0x001d).
        let c = config(&[(0x100, 0x0001, 0), (0x148, 0x000d, 0x001d)]);
        assert_eq!(acs_state(&c), AcsState::RedirectEnabled);
        let c = config(&[(0x100, 0x0001, 0), (0x148, 0x000d, 0x0001)]);
        assert_eq!(acs_state(&c), AcsState::RedirectDisabled);
        let c = config(&[(0x100, 0x0001, 0)]);
        assert_eq!(acs_state(&c), AcsState::NoAcs);
        assert_eq!(acs_state(&[0u8; 64]), AcsState::Unknown);
        assert_eq!(acs_state(&[0u8; 256]), AcsState::NoAcs);
        assert_eq!(acs_state(&[0xffu8; 4096]), AcsState::Unknown);
        // A truncated file ending inside the list.
        let c = config(&[(0x100, 0x0001, 0), (0x148, 0x000d, 0x0004)]);
        assert_eq!(acs_state(&c[..0x14a]), AcsState::Unknown);
    }

    #[test]
    fn port_types() {
        let mut c = vec![0u8; 256];
        c[0x06] = 0x10; // capability list present
        c[0x34] = 0x40;
        c[0x40] = 0x01; // power management, next 0x60
        c[0x41] = 0x60;
        c[0x60] = 0x10; // PCI Express, flags: version 2, downstream port
        c[0x62] = 0x62;
        assert_eq!(port_type(&c), Some(PortType::SwitchDownstream));
        c[0x62] = 0x52;
        assert_eq!(port_type(&c), Some(PortType::SwitchUpstream));
        c[0x62] = 0x42;
        assert_eq!(port_type(&c), Some(PortType::RootPort));
        c[0x62] = 0x02;
        assert_eq!(port_type(&c), Some(PortType::Other(0)));
        // The unprivileged 64-byte read cannot reach the capability.
        assert_eq!(port_type(&c[..64]), None);
        c[0x06] = 0;
        assert_eq!(port_type(&c), None);
    }

    #[test]
    fn a_loop_ends() {
        // A capability whose next pointer is itself.
        let mut c = vec![0u8; 4096];
        let header: u32 = 0x0001 | (0x100 << 20);
        c[0x100..0x104].copy_from_slice(&header.to_le_bytes());
        assert_eq!(acs_state(&c), AcsState::NoAcs);
    }
}
