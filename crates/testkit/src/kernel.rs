//! Names and formats the kernel uses, from its sources (cited per list),
//! in one place for every tree this crate builds and for the tests that
//! check what the readers make of them.

/// drivers/infiniband/core/sysfs.c `pma_attrs_ext`: the extended-width PMA
/// counters under `ports/N/counters/`, in the kernel's order.
pub const PMA_EXT: &[&str] = &[
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_xmit_wait",
    "port_rcv_packets",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
];

/// drivers/infiniband/hw/mlx5/counters.c, the groups in the order mlx5
/// fills `hw_counters/`: `basic_q_cnts`, `out_of_seq_q_cnts`,
/// `retrans_q_cnts`, `extended_err_cnts` (every port), then on RoCE ports
/// `roce_accl_cnts`, `cong_cnts` and `ext_ppcnt_cnts`. The optional op
/// counters are left out.
pub mod mlx5 {
    pub const BASIC_Q: &[&str] = &[
        "rx_write_requests",
        "rx_read_requests",
        "rx_atomic_requests",
        "rx_dct_connect",
        "out_of_buffer",
    ];
    pub const OUT_OF_SEQ: &[&str] = &["out_of_sequence"];
    pub const RETRANS: &[&str] = &[
        "duplicate_request",
        "rnr_nak_retry_err",
        "packet_seq_err",
        "implied_nak_seq_err",
        "local_ack_timeout_err",
    ];
    pub const EXT_ERR: &[&str] = &[
        "resp_local_length_error",
        "resp_cqe_error",
        "req_cqe_error",
        "req_remote_invalid_request",
        "req_remote_access_errors",
        "resp_remote_access_errors",
        "resp_cqe_flush_error",
        "req_cqe_flush_error",
        "req_transport_retries_exceeded",
        "req_rnr_retries_exceeded",
    ];
    pub const ROCE_ACCL: &[&str] = &[
        "roce_adp_retrans",
        "roce_adp_retrans_to",
        "roce_slow_restart",
        "roce_slow_restart_cnps",
        "roce_slow_restart_trans",
    ];
    pub const CONG: &[&str] = &[
        "rp_cnp_ignored",
        "rp_cnp_handled",
        "np_ecn_marked_roce_packets",
        "np_cnp_sent",
    ];
    pub const EXT_PPCNT: &[&str] = &["rx_icrc_encapsulated"];

    /// `hw_counters/` of an InfiniBand port.
    pub fn ib_hw() -> Vec<&'static str> {
        [BASIC_Q, OUT_OF_SEQ, RETRANS, EXT_ERR].concat()
    }

    /// What a RoCE port adds to [`ib_hw`].
    pub fn roce_extra_hw() -> Vec<&'static str> {
        [ROCE_ACCL, CONG, EXT_PPCNT].concat()
    }

    /// `hw_counters/` of a RoCE port (ConnectX-7 in Ethernet mode).
    pub fn roce_hw() -> Vec<&'static str> {
        [ib_hw(), roce_extra_hw()].concat()
    }
}

/// drivers/infiniband/hw/bnxt_re/hw_counters.c `bnxt_re_stat_descs`.
pub const BNXT_RE_HW: &[&str] = &[
    "active_pds",
    "active_ahs",
    "active_qps",
    "active_srqs",
    "active_cqs",
    "active_mrs",
    "active_mws",
    "rx_pkts",
    "rx_bytes",
    "tx_pkts",
    "tx_bytes",
    "recoverable_errors",
    "rx_roce_errors",
    "rx_roce_discards",
    "to_retransmits",
    "seq_err_naks_rcvd",
    "max_retry_exceeded",
    "rnr_naks_rcvd",
    "missing_resp",
    "unrecoverable_err",
    "bad_resp_err",
    "local_qp_op_err",
    "local_protection_err",
    "mem_mgmt_op_err",
    "remote_invalid_req_err",
    "remote_access_err",
    "remote_op_err",
    "dup_req",
    "res_exceed_max",
    "res_length_mismatch",
    "res_exceeds_wqe",
    "res_opcode_err",
    "res_rx_invalid_rkey",
    "res_rx_domain_err",
    "res_rx_no_perm",
    "res_rx_range_err",
    "res_tx_invalid_rkey",
    "res_tx_domain_err",
    "res_tx_no_perm",
    "res_tx_range_err",
    "res_irrq_oflow",
    "res_unsup_opcode",
    "res_unaligned_atomic",
    "res_rem_inv_err",
    "res_mem_err",
    "res_srq_err",
    "res_cmp_err",
    "res_invalid_dup_rkey",
    "res_wqe_format_err",
    "res_cq_load_err",
    "res_srq_load_err",
    "res_tx_pci_err",
    "res_rx_pci_err",
    "oos_drop_count",
    "tx_atomic_req",
    "tx_read_req",
    "tx_read_resp",
    "tx_write_req",
    "tx_send_req",
    "rx_atomic_req",
    "rx_read_req",
    "rx_read_resp",
    "rx_write_req",
    "rx_send_req",
    "rx_roce_good_pkts",
    "rx_roce_good_bytes",
    "rx_out_of_buffer",
];

/// What `counters/*` reads on a port whose device has no PMA
/// (drivers/infiniband/core/sysfs.c `show_pma_counter`).
pub const NO_PMA: &str = "N/A (no PMA)";

/// An empty GID table slot as `gids/N` prints it (%pI6 of zeros); its
/// `gid_attrs/{types,ndevs}/N` fail with EINVAL.
pub const ZERO_GID: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

/// GID types as `ib_cache_gid_type_str` names them.
pub const ROCE_V1: &str = "IB/RoCE v1";
pub const ROCE_V2: &str = "RoCE v2";

/// The port GID of an InfiniBand port: the subnet prefix fe80::/64 and the
/// port GUID (`xxxx:xxxx:xxxx:xxxx` as `node_guid` prints it).
pub fn guid_gid(guid: &str) -> String {
    format!("fe80:0000:0000:0000:{guid}")
}

/// An IPv4-mapped GID (::ffff:a.b.c.d) as %pI6 prints it.
pub fn v4_gid(ip: [u8; 4]) -> String {
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        ip[0], ip[1], ip[2], ip[3]
    )
}

/// The link-local GID of a RoCE port: fe80::/64 with the modified EUI-64 of
/// the MAC (U/L bit flipped, ff:fe inserted).
pub fn link_local_gid(mac: [u8; 6]) -> String {
    let e = [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    format!(
        "fe80:0000:0000:0000:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]
    )
}

/// A MAC from its `address` spelling ("b8:ce:f6:a1:b2:c4").
pub fn mac(text: &str) -> [u8; 6] {
    let mut out = [0u8; 6];
    for (slot, part) in out.iter_mut().zip(text.split(':')) {
        *slot = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    out
}

/// `address` of a net device.
pub fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// PCI link speeds as drivers/pci/probe.c `pci_speed_string` prints them.
pub const GEN3: &str = "8.0 GT/s PCIe";
pub const GEN4: &str = "16.0 GT/s PCIe";
pub const GEN5: &str = "32.0 GT/s PCIe";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_as_the_kernel_prints_them() {
        assert_eq!(
            link_local_gid(mac("b8:ce:f6:a1:b2:c4")),
            "fe80:0000:0000:0000:bace:f6ff:fea1:b2c4"
        );
        assert_eq!(
            v4_gid([10, 0, 1, 11]),
            "0000:0000:0000:0000:0000:ffff:0a00:010b"
        );
        assert_eq!(mlx5::roce_hw().len(), 31);
        assert_eq!(mlx5::ib_hw().len(), 21);
    }
}
