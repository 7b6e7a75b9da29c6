//! Builds LLDP frames byte by byte (IEEE 802.1AB TLV headers: 7-bit type,
//! 9-bit length; 802.1Qaz DCBX information strings as [`crate::tlv`]
//! decodes them). For tests and for the harness that plays the switch;
//! the exporter itself never transmits.

use roce_host::Priorities;

use crate::tlv::{dot1, tlv_type, AdvertisedEts, AppEntry, Pfc, ETH_P_LLDP, OUI_DOT1, OUI_DOT3};

/// An LLDPDU under construction.
#[derive(Debug, Clone, Default)]
pub struct FrameBuilder {
    tlvs: Vec<u8>,
}

impl FrameBuilder {
    /// Starts with the three mandatory TLVs: a MAC chassis ID (subtype 4),
    /// an interface-name port ID (subtype 5) and the TTL.
    pub fn new(chassis_mac: [u8; 6], port_ifname: &str, ttl: u16) -> Self {
        let mut b = FrameBuilder::default();
        let mut chassis = vec![4u8];
        chassis.extend_from_slice(&chassis_mac);
        b = b.raw_tlv(tlv_type::CHASSIS_ID, &chassis);
        let mut port = vec![5u8];
        port.extend_from_slice(port_ifname.as_bytes());
        b = b.raw_tlv(tlv_type::PORT_ID, &port);
        b.raw_tlv(tlv_type::TTL, &ttl.to_be_bytes())
    }

    /// Appends one TLV with the given type and value (no checks: tests
    /// build lying frames with it).
    pub fn raw_tlv(mut self, tlv: u8, value: &[u8]) -> Self {
        let len = value.len().min(0x1ff) as u16;
        let header = (u16::from(tlv) << 9) | len;
        self.tlvs.extend_from_slice(&header.to_be_bytes());
        self.tlvs.extend_from_slice(&value[..usize::from(len)]);
        self
    }

    pub fn port_description(self, text: &str) -> Self {
        self.raw_tlv(tlv_type::PORT_DESCR, text.as_bytes())
    }

    pub fn system_name(self, text: &str) -> Self {
        self.raw_tlv(tlv_type::SYSTEM_NAME, text.as_bytes())
    }

    pub fn system_description(self, text: &str) -> Self {
        self.raw_tlv(tlv_type::SYSTEM_DESCR, text.as_bytes())
    }

    /// System capabilities: bridge and router available, bridge enabled.
    pub fn bridge_capabilities(self) -> Self {
        self.raw_tlv(tlv_type::SYSTEM_CAP, &[0x00, 0x14, 0x00, 0x04])
    }

    /// An IPv4 management address with an ifIndex interface number.
    pub fn management_ipv4(self, addr: [u8; 4], ifindex: u32) -> Self {
        let mut v = vec![5u8, 1];
        v.extend_from_slice(&addr);
        v.push(2); // interface subtype: ifIndex
        v.extend_from_slice(&ifindex.to_be_bytes());
        v.push(0); // OID string length
        self.raw_tlv(tlv_type::MGMT_ADDR, &v)
    }

    /// An organizationally specific TLV.
    pub fn org(self, oui: [u8; 3], subtype: u8, info: &[u8]) -> Self {
        let mut v = oui.to_vec();
        v.push(subtype);
        v.extend_from_slice(info);
        self.raw_tlv(tlv_type::ORG, &v)
    }

    pub fn pvid(self, vid: u16) -> Self {
        self.org(OUI_DOT1, dot1::PVID, &vid.to_be_bytes())
    }

    pub fn max_frame_size(self, mfs: u16) -> Self {
        self.org(OUI_DOT3, crate::tlv::DOT3_MFS, &mfs.to_be_bytes())
    }

    pub fn ets_configuration(self, ets: &AdvertisedEts) -> Self {
        let flags = (u8::from(ets.willing) << 7)
            | (u8::from(ets.cbs) << 6)
            | (if ets.max_tcs >= 8 { 0 } else { ets.max_tcs & 7 });
        self.org(OUI_DOT1, dot1::ETS_CONFIGURATION, &ets_info(flags, ets))
    }

    pub fn ets_recommendation(self, ets: &AdvertisedEts) -> Self {
        self.org(OUI_DOT1, dot1::ETS_RECOMMENDATION, &ets_info(0, ets))
    }

    pub fn pfc(self, pfc: &Pfc) -> Self {
        let flags = (u8::from(pfc.willing) << 7) | (u8::from(pfc.mbc) << 6) | (pfc.cap & 0x0f);
        self.org(
            OUI_DOT1,
            dot1::PFC_CONFIGURATION,
            &[flags, pfc.enable.bits()],
        )
    }

    pub fn app(self, entries: &[AppEntry]) -> Self {
        let mut v = vec![0u8];
        for e in entries {
            v.push((e.priority << 5) | (e.selector & 0x07));
            v.extend_from_slice(&e.protocol.to_be_bytes());
        }
        self.org(OUI_DOT1, dot1::APPLICATION_PRIORITY, &v)
    }

    /// The LLDPDU with its End TLV.
    pub fn pdu(&self) -> Vec<u8> {
        let mut v = self.tlvs.clone();
        v.extend_from_slice(&[0, 0]);
        v
    }

    /// The whole Ethernet frame to the nearest-bridge address, padded to
    /// the 60-byte minimum.
    pub fn frame(&self, source_mac: [u8; 6]) -> Vec<u8> {
        let mut f = vec![0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];
        f.extend_from_slice(&source_mac);
        f.extend_from_slice(&ETH_P_LLDP.to_be_bytes());
        f.extend_from_slice(&self.pdu());
        if f.len() < 60 {
            f.resize(60, 0);
        }
        f
    }
}

fn ets_info(flags: u8, ets: &AdvertisedEts) -> Vec<u8> {
    let mut v = vec![flags];
    for pair in ets.prio_tc.chunks_exact(2) {
        v.push((pair[0] << 4) | (pair[1] & 0x0f));
    }
    v.extend_from_slice(&ets.tc_bw);
    v.extend_from_slice(&ets.tsa);
    v
}

/// The switch of the tests and of the harness: PFC on `pfc_priority`,
/// DSCP `dscp` to `app_priority`, ETS with two classes (priority
/// `pfc_priority` in TC 1 at 50%, the rest in TC 0).
pub fn switch_frame(
    system_name: &str,
    port: &str,
    pfc_priority: u8,
    dscp: u16,
    app_priority: u8,
) -> FrameBuilder {
    let mut prio_tc = [0u8; 8];
    prio_tc[usize::from(pfc_priority & 7)] = 1;
    let ets = AdvertisedEts {
        willing: false,
        cbs: false,
        max_tcs: 8,
        prio_tc,
        tc_bw: [50, 50, 0, 0, 0, 0, 0, 0],
        tsa: [2, 2, 0, 0, 0, 0, 0, 0],
    };
    FrameBuilder::new([0x1c, 0x34, 0xda, 0x5a, 0x01, 0x00], port, 120)
        .port_description(&format!("{system_name} {port}"))
        .system_name(system_name)
        .system_description("Cumulus Linux version 5.9.1 running on Nvidia SN5600")
        .bridge_capabilities()
        .management_ipv4([10, 0, 0, 11], 2)
        .pvid(1)
        .max_frame_size(9216)
        .ets_configuration(&ets)
        .ets_recommendation(&ets)
        .pfc(&Pfc {
            willing: false,
            mbc: false,
            cap: 8,
            enable: Priorities::one(pfc_priority & 7),
        })
        .app(&[AppEntry {
            selector: crate::tlv::app_selector::DSCP,
            protocol: dscp,
            priority: app_priority,
        }])
}
