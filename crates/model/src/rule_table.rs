//! The rule table: every rule's typed id, the severities it reports, the
//! `rules:` section holding its thresholds and windows (defaults in
//! `RulesConfig::default`, the only place), the `expect:` keys it reads, and
//! the part of the fabric it judges. The exporter (`roce_finding{rule=…}`,
//! `/findings`), `check` and the generated alerts (through docs/rules.json,
//! `roce_exporter docs rules`) all read this one table; each rule's runbook
//! section is `## <id>` in docs/runbook.md.
//!
//! Adding a rule: one line in [`rule_table!`] below, the `Rule` entry next to
//! its function in its module of roce-rules, a `## <id>` runbook section,
//! then regenerate docs/rules.json and the alerts (tests name each step that
//! is missing).
//!
//! The ids live here, beside the snapshot, because a finding names its rule
//! and the snapshot carries the findings; the rules themselves (functions,
//! thresholds, the JSON export) are in roce-rules.

use serde::Serialize;

use crate::finding::Severity;

/// What part of the fabric a rule judges: `check` files findings under the
/// checklist line of that part, and Alertmanager's inhibit rules silence the
/// port-counter parts while the port is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    /// RDMA devices and ports: presence, state, rate and GID table.
    Port,
    /// Physical link errors (symbol errors, flaps).
    LinkErrors,
    /// Transport counters (retransmissions, sequence errors).
    Transport,
    /// Pauses, discards, CNPs, ECN marks, receive-buffer drops.
    Congestion,
    /// MTU, PFC, trust, ECN switches of the RoCE netdevs.
    NetdevConfig,
    /// Where GPUs sit relative to their NICs (path class).
    GpuPlacement,
    /// ACS request redirection on the PCIe bridges between GPUs and NICs.
    Acs,
    /// PCIe link training of GPUs and NICs.
    PcieLink,
    /// GPUDirect RDMA readiness.
    GpuDirect,
    /// The loopback verbs probes.
    Probe,
    /// The probes between hosts (`peer_probes:`).
    PeerProbe,
    /// What NCCL jobs on the host used (their logs and Inspector output).
    Nccl,
    /// The load test's bandwidth and streams (`check --load`).
    LoadTest,
    /// The exporter itself (its collectors).
    Exporter,
}

impl Area {
    /// Judges the growth of a port's counters: meaningless while the port
    /// is down, so a port-down alert inhibits these.
    pub fn port_counters(self) -> bool {
        matches!(
            self,
            Area::LinkErrors | Area::Transport | Area::Congestion | Area::Probe
        )
    }
}

/// One row of the table (everything but the rule function, which lives
/// with its module's `RULES`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spec {
    pub id: RuleId,
    /// The severities the rule reports, the default (most common) first.
    pub severities: &'static [Severity],
    /// Key under `rules:` holding its thresholds and windows, if any.
    pub config: Option<&'static str>,
    /// Keys under `expect:` it reads, if any.
    pub expect: &'static [&'static str],
    pub area: Area,
}

macro_rules! rule_table {
    ($( $variant:ident = $id:literal, [$($sev:ident),+], $config:expr, [$($expect:literal),*], $area:ident; )+) => {
        /// A rule's stable id. Serialises to the snake_case string used in
        /// `roce_finding{rule=…}`, `/findings` and `rules.disabled`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        pub enum RuleId {
            $( #[serde(rename = $id)] $variant, )+
        }

        impl RuleId {
            /// Every rule id, in table order.
            pub const ALL: &'static [RuleId] = &[$(RuleId::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $( RuleId::$variant => $id, )+
                }
            }

            /// Its row of the table.
            pub fn spec(self) -> Spec {
                match self {
                    $( RuleId::$variant => Spec {
                        id: RuleId::$variant,
                        severities: &[$(Severity::$sev),+],
                        config: $config,
                        expect: &[$($expect),*],
                        area: Area::$area,
                    }, )+
                }
            }
        }
    };
}

rule_table! {
    // variant = "id", [severities, default first], rules: section, [expect: keys], area;
    PortDown = "port_down", [Critical], None, [], Port;
    LinkRateBelowExpected = "link_rate_below_expected", [Warning], None, ["link_rate_gbps"], Port;
    Rocev2GidMissing = "rocev2_gid_missing", [Critical], None, [], Port;
    Rocev2GidLinkLocalOnly = "rocev2_gid_link_local_only", [Warning], None, [], Port;
    PfcWithoutEcn = "pfc_without_ecn", [Warning], None, [], NetdevConfig;
    PfcPriorityMismatch = "pfc_priority_mismatch", [Critical, Warning, Info], Some("pfc_storm"), ["pfc_priority", "nccl_ib_tc"], NetdevConfig;
    RoceTrustPcp = "roce_trust_pcp", [Warning], None, ["nccl_ib_tc"], NetdevConfig;
    CnpPriorityBestEffort = "cnp_priority_best_effort", [Warning], None, [], NetdevConfig;
    RoceTcShared = "roce_tc_shared", [Warning], None, [], NetdevConfig;
    RoceTcNoBandwidth = "roce_tc_no_bandwidth", [Warning], None, [], NetdevConfig;
    LosslessBufferNoHeadroom = "lossless_buffer_no_headroom", [Warning], None, [], NetdevConfig;
    SwitchPfcMismatch = "switch_pfc_mismatch", [Critical, Warning], None, [], NetdevConfig;
    SwitchDscpMismatch = "switch_dscp_mismatch", [Warning, Critical], None, [], NetdevConfig;
    SwitchViewUnavailable = "switch_view_unavailable", [Info], None, [], NetdevConfig;
    LldpNeighborMissing = "lldp_neighbor_missing", [Info], None, [], Port;
    LldpNeighborChanged = "lldp_neighbor_changed", [Warning], None, [], Port;
    LldpRailMismatch = "lldp_rail_mismatch", [Critical], None, ["rails"], Port;
    MtuBelowJumbo = "mtu_below_jumbo", [Critical, Warning], Some("mtu_below_jumbo"), ["mtu"], NetdevConfig;
    SwitchFrameBelowMtu = "switch_frame_below_mtu", [Critical, Warning], None, ["mtu"], NetdevConfig;
    LinkFlap = "link_flap", [Warning], Some("link_flap"), [], LinkErrors;
    SymbolErrors = "symbol_errors", [Warning], Some("symbol_errors"), [], LinkErrors;
    CounterSaturated = "counter_saturated", [Warning, Info], None, [], LinkErrors;
    Retransmissions = "retransmissions", [Warning], Some("retransmissions"), [], Transport;
    AckTimeouts = "ack_timeouts", [Warning, Critical], Some("ack_timeouts"), [], Transport;
    SequenceErrors = "sequence_errors", [Warning], Some("sequence_errors"), [], Transport;
    CompletionErrors = "completion_errors", [Warning], Some("completion_errors"), [], Transport;
    OutOfBuffer = "out_of_buffer", [Warning], Some("out_of_buffer"), [], Congestion;
    ReceiverCongested = "receiver_congested", [Warning], Some("receiver_congested"), [], Congestion;
    SenderThrottled = "sender_throttled", [Warning], Some("sender_throttled"), [], Congestion;
    CnpNotSent = "cnp_not_sent", [Warning], Some("cnp_not_sent"), [], Congestion;
    CnpIgnored = "cnp_ignored", [Warning], Some("cnp_ignored"), [], Congestion;
    PfcStorm = "pfc_storm", [Critical], Some("pfc_storm"), [], Congestion;
    PfcPauseReceived = "pfc_pause_received", [Warning], Some("pfc_pause_received"), [], Congestion;
    PfcPauseSent = "pfc_pause_sent", [Warning], Some("pfc_pause_sent"), [], Congestion;
    LosslessDiscards = "lossless_discards", [Critical], Some("lossless_discards"), [], Congestion;
    DiscardsGrowing = "discards_growing", [Info], Some("discards_growing"), [], Congestion;
    HostRingDrops = "host_ring_drops", [Info], Some("host_ring_drops"), [], Congestion;
    GpuNicPathFar = "gpu_nic_path_far", [Warning, Critical], None, [], GpuPlacement;
    GpudirectUnavailable = "gpudirect_unavailable", [Critical], None, [], GpuDirect;
    GpudirectNotUsed = "gpudirect_not_used", [Warning], None, [], GpuDirect;
    AcsOnGpuNicPath = "acs_on_gpu_nic_path", [Critical], None, [], Acs;
    PcieDowntrained = "pcie_downtrained", [Warning, Critical], None, [], PcieLink;
    ProbeFailures = "probe_failures", [Warning, Critical], Some("probe_failures"), [], Probe;
    ProbeLatencyRegression = "probe_latency_regression", [Warning], Some("probe_latency_regression"), [], Probe;
    PeerProbePortIsolated = "peer_probe_port_isolated", [Critical], None, [], PeerProbe;
    PeerProbePeerUnreachable = "peer_probe_peer_unreachable", [Warning], None, [], PeerProbe;
    PeerProbePathLoss = "peer_probe_path_loss", [Warning], None, [], PeerProbe;
    PeerProbePathMtu = "peer_probe_path_mtu", [Warning], None, [], PeerProbe;
    PeerProbeRttAboveBaseline = "peer_probe_rtt_above_baseline", [Warning], None, [], PeerProbe;
    PeerProbeNoPeerOnRail = "peer_probe_no_peer_on_rail", [Info], None, [], PeerProbe;
    RdmaDeviceMissing = "rdma_device_missing", [Critical], None, ["devices"], Port;
    RdmaDeviceGone = "rdma_device_gone", [Critical], None, ["devices"], Port;
    RdmaPortGone = "rdma_port_gone", [Critical], None, [], Port;
    NcclSocketTransport = "nccl_socket_transport", [Critical], None, [], Nccl;
    NcclGdrNotUsed = "nccl_gdr_not_used", [Critical, Warning], None, [], Nccl;
    NcclGidNotRocev2 = "nccl_gid_not_rocev2", [Critical, Warning], None, [], Nccl;
    NcclBusbwBelowLineRate = "nccl_busbw_below_line_rate", [Warning], None, [], Nccl;
    NcclRailsUnused = "nccl_rails_unused", [Warning], None, [], Nccl;
    NcclTestsWrong = "nccl_tests_wrong", [Critical], None, [], Nccl;
    ModuleRxPowerLow = "module_rx_power_low", [Warning, Critical], None, [], LinkErrors;
    ModuleTemperatureHigh = "module_temperature_high", [Warning, Critical], None, [], LinkErrors;
    ModuleLaneImbalance = "module_lane_imbalance", [Warning], Some("module_lane_imbalance"), [], LinkErrors;
    FecBerHigh = "fec_ber_high", [Warning], Some("fec_ber"), [], LinkErrors;
    FecUncorrectable = "fec_uncorrectable", [Warning], Some("fec_uncorrectable"), [], LinkErrors;
    FecLaneSkew = "fec_lane_skew", [Warning], Some("fec_lane_skew"), [], LinkErrors;
    PostFecErrors = "post_fec_errors", [Warning], Some("post_fec_errors"), [], LinkErrors;
    PcieAerErrors = "pcie_aer_errors", [Warning, Critical], Some("pcie_aer"), [], PcieLink;
    PcieBridgeAerErrors = "pcie_bridge_aer_errors", [Warning, Critical], Some("pcie_aer"), [], PcieLink;
    DevlinkReporterError = "devlink_reporter_error", [Critical, Warning], Some("devlink_health"), [], Port;
    LoadTestBelowLineRate = "load_test_below_line_rate", [Warning, Critical], Some("load_test"), [], LoadTest;
    LoadTestNodeBelowLineRate = "load_test_node_below_line_rate", [Warning, Critical], Some("load_test"), [], LoadTest;
    LoadTestAborted = "load_test_aborted", [Critical, Warning], None, [], LoadTest;
    CollectorFailing = "collector_failing", [Warning], None, [], Exporter;
}

impl std::fmt::Display for RuleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no rule's id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown rule {0:?}")]
pub struct UnknownRule(pub String);

impl std::str::FromStr for RuleId {
    type Err = UnknownRule;

    fn from_str(s: &str) -> Result<Self, UnknownRule> {
        RuleId::ALL
            .iter()
            .copied()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownRule(s.to_string()))
    }
}

impl PartialEq<str> for RuleId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for RuleId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
