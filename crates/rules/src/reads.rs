//! What each rule reads, as the exposed families that carry the same data:
//! the link from a metric to the rules that judge it. docs/metrics.md's
//! "judged by" column and docs/rules.json's `reads` field are generated from
//! [`reads`]; a test fails when a family named here is not exposed.
//!
//! The match is exhaustive, so a new rule does not compile until it says
//! what it reads.

use roce_model::RuleId;

/// The families whose data `rule` judges.
pub fn reads(rule: RuleId) -> &'static [&'static str] {
    use RuleId::*;
    match rule {
        PortDown => &["roce_port_up", "roce_port_info"],
        LinkRateBelowExpected => &["roce_port_rate_bytes_per_second", "roce_port_up"],
        Rocev2GidMissing | Rocev2GidLinkLocalOnly => &["roce_gid_info", "roce_port_up"],
        PfcWithoutEcn => &["roce_pfc_enabled", "roce_ecn_info"],
        PfcPriorityMismatch => &["roce_pfc_enabled", "roce_qos_info"],
        RoceTrustPcp => &["roce_qos_info"],
        CnpPriorityBestEffort => &["roce_dcqcn_parameters_info", "roce_qos_info"],
        RoceTcShared | RoceTcNoBandwidth => &["roce_qos_info"],
        LosslessBufferNoHeadroom => &["roce_qos_info", "roce_pfc_enabled"],
        SwitchPfcMismatch => &[
            "roce_qos_peer_info",
            "roce_lldp_switch_qos_info",
            "roce_qos_info",
        ],
        SwitchDscpMismatch => &[
            "roce_qos_peer_dscp_priority",
            "roce_lldp_switch_qos_info",
            "roce_qos_info",
        ],
        SwitchViewUnavailable => &["roce_qos_info", "roce_qos_peer_info"],
        MtuBelowJumbo => &["roce_netdev_mtu_bytes", "roce_port_info"],
        SwitchFrameBelowMtu => &["roce_netdev_mtu_bytes", "roce_lldp_neighbor_info"],
        LinkFlap => &[
            "roce_port_link_downed_total",
            "roce_netdev_carrier_transitions_total",
            "roce_netdev_link_down_events_total",
        ],
        SymbolErrors => &[
            "roce_port_symbol_errors_total",
            "roce_port_link_error_recovery_total",
        ],
        CounterSaturated => &["roce_port_stat_total"],
        Retransmissions => &[
            "roce_retransmissions_total",
            "roce_port_packets_transmitted_total",
        ],
        AckTimeouts => &[
            "roce_local_ack_timeout_errors_total",
            "roce_transport_retries_exceeded_errors_total",
        ],
        SequenceErrors => &[
            "roce_out_of_sequence_packets_total",
            "roce_packet_sequence_errors_total",
            "roce_implied_nak_sequence_errors_total",
        ],
        CompletionErrors => &[
            "roce_completion_errors_total",
            "roce_completion_flush_errors_total",
            "roce_remote_access_errors_total",
            "roce_remote_invalid_request_errors_total",
            "roce_local_length_errors_total",
        ],
        OutOfBuffer => &["roce_out_of_buffer_drops_total"],
        ReceiverCongested => &[
            "roce_ecn_marked_packets_total",
            "roce_port_packets_received_total",
        ],
        SenderThrottled => &[
            "roce_cnp_handled_total",
            "roce_port_packets_transmitted_total",
        ],
        CnpNotSent => &["roce_ecn_marked_packets_total", "roce_cnp_sent_total"],
        CnpIgnored => &["roce_cnp_ignored_total", "roce_cnp_received_total"],
        PfcStorm => &[
            "roce_pfc_pause_frames_total",
            "roce_pfc_pause_duration_seconds_total",
            "roce_pause_storm_events_total",
        ],
        PfcPauseReceived | PfcPauseSent => &[
            "roce_pfc_pause_frames_total",
            "roce_pfc_pause_duration_seconds_total",
        ],
        LosslessDiscards => &["roce_netdev_priority_discards_total", "roce_pfc_enabled"],
        DiscardsGrowing => &["roce_netdev_discards_total"],
        HostRingDrops => &["roce_netdev_discards_total"],
        GpuNicPathFar => &["roce_gpu_nic_path_info"],
        GpudirectUnavailable | GpudirectNotUsed => &[
            "roce_gpudirect_rdma_ready",
            "roce_gpudirect_rdma_available",
            "roce_gpudirect_rdma_prerequisite",
        ],
        AcsOnGpuNicPath => &["roce_pcie_acs_request_redirect", "roce_gpu_nic_path_info"],
        PcieDowntrained => &["roce_pcie_link_downtrained", "roce_pcie_link_info"],
        ProbeFailures => &["roce_probe_failures_total", "roce_probe_requests_total"],
        ProbeLatencyRegression => &["roce_probe_rtt_seconds"],
        PeerProbePortIsolated | PeerProbePeerUnreachable => &[
            "roce_peer_probe_peer_lost",
            "roce_peer_probe_sent_total",
            "roce_peer_probe_answered_total",
        ],
        PeerProbePathLoss => &[
            "roce_peer_probe_sent_total",
            "roce_peer_probe_answered_total",
        ],
        PeerProbePathMtu => &[
            "roce_peer_probe_sent_total",
            "roce_peer_probe_answered_total",
        ],
        PeerProbeRttAboveBaseline => &[
            "roce_peer_probe_rtt_seconds",
            "roce_peer_probe_baseline_rtt_seconds",
        ],
        PeerProbeNoPeerOnRail => &["roce_peer_probe_peers", "roce_peer_probe_endpoint_info"],
        RdmaDeviceMissing | RdmaDeviceGone => &["roce_device_info"],
        RdmaPortGone => &["roce_port_info"],
        NcclSocketTransport => &["roce_nccl_connections"],
        NcclGdrNotUsed => &[
            "roce_nccl_gdr_active",
            "roce_nccl_gdr_disabled_info",
            "roce_gpudirect_rdma_ready",
        ],
        NcclGidNotRocev2 => &["roce_nccl_connections", "roce_gid_info"],
        NcclRailsUnused => &[
            "roce_nccl_connections",
            "roce_gpu_nic_path_info",
            "roce_port_up",
        ],
        // nccl-tests' table is read for the rule, not exposed.
        NcclTestsWrong => &[],
        NcclBusbwBelowLineRate => &[
            "roce_nccl_busbw_mean_bytes_per_second",
            "roce_nccl_busbw_min_bytes_per_second",
            "roce_port_rate_bytes_per_second",
        ],
        ModuleRxPowerLow => &["roce_module_rx_power_watts", "roce_module_threshold"],
        ModuleTemperatureHigh => &["roce_module_temperature_celsius", "roce_module_threshold"],
        ModuleLaneImbalance => &["roce_module_rx_power_watts", "roce_module_info"],
        FecBerHigh => &["roce_fec_corrected_bits_total", "roce_fec_mode_info"],
        FecUncorrectable => &["roce_fec_uncorrectable_blocks_total"],
        FecLaneSkew => &["roce_phy_errors_total", "roce_fec_corrected_bits_total"],
        PostFecErrors => &[
            "roce_phy_errors_total",
            "roce_fec_uncorrectable_blocks_total",
        ],
        PcieAerErrors => &[
            "roce_pcie_aer_errors_total",
            "roce_pcie_aer_error_kinds_total",
        ],
        PcieBridgeAerErrors => &[
            "roce_pcie_bridge_aer_errors_total",
            "roce_pcie_aer_error_kinds_total",
            "roce_gpu_nic_path_info",
        ],
        DevlinkReporterError => &[
            "roce_devlink_reporter_healthy",
            "roce_devlink_reporter_errors_total",
        ],
        LldpNeighborMissing => &[
            "roce_lldp_neighbors",
            "roce_lldp_last_frame_age_seconds",
            "roce_port_up",
        ],
        LldpNeighborChanged => &["roce_lldp_neighbor_info"],
        LldpRailMismatch => &["roce_lldp_neighbor_info", "roce_nic_nearest_gpus_info"],
        LoadTestBelowLineRate => &[
            "roce_load_test_bandwidth_bytes_per_second",
            "roce_load_test_expected_bytes_per_second",
        ],
        LoadTestNodeBelowLineRate => &[
            "roce_load_test_node_bandwidth_bytes_per_second",
            "roce_load_test_node_expected_bytes_per_second",
        ],
        LoadTestAborted => &["roce_load_test_outcome_info"],
        CollectorFailing => &["roce_collector_success", "roce_collector_errors_total"],
    }
}

/// The rules that read `family`, in table order.
pub fn judged_by(family: &str) -> Vec<RuleId> {
    RuleId::ALL
        .iter()
        .copied()
        .filter(|r| reads(*r).contains(&family))
        .collect()
}
