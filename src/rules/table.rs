//! The rule table: every rule's typed id, the severities it reports, the
//! `rules:` section holding its thresholds and windows (defaults in
//! `RulesConfig::default`, the only place), the `expect:` keys it reads, and
//! the part of the fabric it judges. The exporter (`roce_finding{rule=…}`,
//! `/findings`), `check` and the generated alerts (through docs/rules.json,
//! `roce_exporter docs rules`) all read this one table; each rule's runbook
//! section is `## <id>` in docs/runbook.md.
//!
//! Adding a rule: one line in [`rule_table!`] below, the `Rule` entry next to
//! its function in its module, a `## <id>` runbook section, then regenerate
//! docs/rules.json and the alerts (tests name each step that is missing).

use serde::Serialize;

use super::settings::RulesConfig;
use super::Severity;

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
    PfcPriorityMismatch = "pfc_priority_mismatch", [Critical, Warning], Some("pfc_storm"), ["pfc_priority", "nccl_ib_tc"], NetdevConfig;
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
    LinkFlap = "link_flap", [Warning], Some("link_flap"), [], LinkErrors;
    SymbolErrors = "symbol_errors", [Warning], Some("symbol_errors"), [], LinkErrors;
    CounterSaturated = "counter_saturated", [Warning, Info], None, [], LinkErrors;
    Retransmissions = "retransmissions", [Warning], Some("retransmissions"), [], Transport;
    AckTimeouts = "ack_timeouts", [Warning, Critical], Some("ack_timeouts"), [], Transport;
    SequenceErrors = "sequence_errors", [Warning], Some("sequence_errors"), [], Transport;
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
    PcieDowntrained = "pcie_downtrained", [Warning], None, [], PcieLink;
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
    NcclGdrNotUsed = "nccl_gdr_not_used", [Warning], None, [], Nccl;
    NcclBusbwBelowLineRate = "nccl_busbw_below_line_rate", [Warning], None, [], Nccl;
    ModuleRxPowerLow = "module_rx_power_low", [Warning, Critical], None, [], LinkErrors;
    ModuleTemperatureHigh = "module_temperature_high", [Warning, Critical], None, [], LinkErrors;
    ModuleLaneImbalance = "module_lane_imbalance", [Warning], Some("module_lane_imbalance"), [], LinkErrors;
    FecBerHigh = "fec_ber_high", [Warning], Some("fec_ber"), [], LinkErrors;
    FecUncorrectable = "fec_uncorrectable", [Warning], Some("fec_uncorrectable"), [], LinkErrors;
    PcieAerErrors = "pcie_aer_errors", [Warning, Critical], Some("pcie_aer"), [], PcieLink;
    DevlinkReporterError = "devlink_reporter_error", [Critical, Warning], Some("devlink_health"), [], Port;
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

/// A piece of QoS configuration that must be the same on every RoCE
/// netdev of one NIC model in a fleet: the alert generator turns each into
/// a recording rule counting its distinct values per fleet, NIC model and
/// driver (and per `per` label) and the
/// `RoceQosConfigDrift` alert when there are more than one. One node can
/// be consistent with itself and still differ from the switches' standard
/// that the rest of the fleet follows; drift is what shows it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Drift {
    /// The `config` label of the recording rule and the alert.
    pub config: &'static str,
    /// The exposed family holding the setting.
    pub family: &'static str,
    /// Labels that name one comparable setting (a priority, a parameter).
    pub per: &'static [&'static str],
    /// Labels carrying the value (info families); empty: the sample value.
    pub values: &'static [&'static str],
    /// The node-level rule that judges the same setting.
    pub rule: RuleId,
}

/// The QoS settings compared across the fleet.
pub const DRIFT: &[Drift] = &[
    Drift {
        config: "pfc",
        family: "roce_pfc_enabled",
        per: &["priority"],
        values: &[],
        rule: RuleId::PfcPriorityMismatch,
    },
    Drift {
        config: "trust",
        family: "roce_qos_trust_info",
        per: &[],
        values: &["trust"],
        rule: RuleId::RoceTrustPcp,
    },
    Drift {
        config: "dscp_map",
        family: "roce_qos_dscp_priority",
        per: &["dscp"],
        values: &[],
        rule: RuleId::SwitchDscpMismatch,
    },
    Drift {
        config: "ets",
        family: "roce_qos_ets_info",
        per: &[],
        values: &["prio_tc", "tc_tsa", "tc_bw"],
        rule: RuleId::RoceTcShared,
    },
    Drift {
        config: "buffers",
        family: "roce_qos_buffer_info",
        per: &[],
        values: &["prio_buffer"],
        rule: RuleId::LosslessBufferNoHeadroom,
    },
    Drift {
        config: "dcbx",
        family: "roce_qos_dcbx_info",
        per: &[],
        values: &["mode"],
        rule: RuleId::SwitchViewUnavailable,
    },
    Drift {
        config: "dcqcn_enable",
        family: "roce_ecn_enabled",
        per: &["priority", "role"],
        values: &[],
        rule: RuleId::PfcWithoutEcn,
    },
    Drift {
        config: "dcqcn_parameters",
        family: "roce_dcqcn_parameter",
        per: &["role", "parameter", "source"],
        values: &[],
        rule: RuleId::PfcWithoutEcn,
    },
];

/// The table as JSON (`roce_exporter docs rules`, committed as
/// docs/rules.json): every rule with its severities, area, what it checks,
/// its `rules:` section with the default thresholds and windows, its
/// `expect:` keys and its runbook section; durations in seconds. The alert
/// generator reads this file, so alerts cannot drift from the exporter.
pub fn export() -> serde_json::Value {
    let defaults = defaults_json(&RulesConfig::default());
    let rules: Vec<serde_json::Value> = super::all()
        .iter()
        .map(|rule| {
            let spec = rule.id.spec();
            let config = spec.config.map(|section| {
                serde_json::json!({
                    "section": format!("rules.{section}"),
                    "defaults": defaults.get(section).cloned().unwrap_or(serde_json::Value::Null),
                })
            });
            serde_json::json!({
                "id": rule.id,
                "checks": rule.checks,
                "severity": spec.severities[0],
                "severities": spec.severities,
                "area": spec.area,
                "port_counters": spec.area.port_counters(),
                "config": config,
                "expect": spec.expect.iter().map(|k| format!("expect.{k}")).collect::<Vec<_>>(),
                "runbook": format!("docs/runbook.md#{}", rule.id),
            })
        })
        .collect();
    serde_json::json!({
        "comment": "Generated by `roce_exporter docs rules` from src/rules/table.rs and RulesConfig::default; durations in seconds.",
        "hold_seconds": defaults.get("hold").cloned().unwrap_or(serde_json::Value::Null),
        "rules": rules,
        "drift": DRIFT,
    })
}

/// `RulesConfig` as JSON, durations as seconds.
pub fn defaults_json(rules: &RulesConfig) -> serde_json::Map<String, serde_json::Value> {
    let value = serde_json::to_value(rules).unwrap_or(serde_json::Value::Null);
    match seconds(value) {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// serde writes a `Duration` as `{secs, nanos}`: one number of seconds reads
/// better and is what PromQL ranges are built from.
fn seconds(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            if map.len() == 2 {
                if let (Some(s), Some(n)) = (
                    map.get("secs").and_then(Value::as_u64),
                    map.get("nanos").and_then(Value::as_u64),
                ) {
                    return if n == 0 {
                        Value::from(s)
                    } else {
                        Value::from(s as f64 + n as f64 / 1e9)
                    };
                }
            }
            Value::Object(map.into_iter().map(|(k, v)| (k, seconds(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(seconds).collect()),
        other => other,
    }
}

/// docs/rules.json as `roce_exporter docs rules` prints it.
pub fn render() -> String {
    let mut text = serde_json::to_string_pretty(&export()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_entries_name_exposed_families_and_their_labels() {
        for d in DRIFT {
            let family = crate::exposition::families::find(d.family)
                .unwrap_or_else(|| panic!("{}: no family {}", d.config, d.family));
            for label in d.per.iter().chain(d.values) {
                assert!(
                    family.labels.contains(label),
                    "{}: {} has no label {label}",
                    d.config,
                    d.family
                );
            }
        }
    }

    #[test]
    fn every_id_is_evaluated_once_and_every_rule_is_in_the_table() {
        let evaluated: Vec<RuleId> = super::super::all().iter().map(|r| r.id).collect();
        for id in RuleId::ALL {
            assert_eq!(
                evaluated.iter().filter(|e| *e == id).count(),
                1,
                "{id}: must be in exactly one module's RULES"
            );
        }
        assert_eq!(evaluated.len(), RuleId::ALL.len());
    }

    #[test]
    fn ids_serialise_as_their_strings() {
        for id in RuleId::ALL {
            assert_eq!(
                serde_json::to_value(id).ok(),
                Some(serde_json::Value::from(id.as_str()))
            );
            assert_eq!(id.as_str().parse::<RuleId>().ok(), Some(*id));
        }
    }

    #[test]
    fn config_sections_exist_and_every_section_belongs_to_a_rule() {
        let defaults = defaults_json(&RulesConfig::default());
        for id in RuleId::ALL {
            if let Some(section) = id.spec().config {
                assert!(
                    defaults.get(section).is_some_and(|v| v.is_object()),
                    "{id}: rules.{section} is not a section of RulesConfig"
                );
            }
        }
        for section in defaults.keys() {
            if section == "hold" || section == "disabled" {
                continue;
            }
            assert!(
                RuleId::ALL
                    .iter()
                    .any(|id| id.spec().config == Some(section.as_str())),
                "rules.{section}: no rule in the table reads it"
            );
        }
    }

    #[test]
    fn durations_export_as_seconds() {
        let d = defaults_json(&RulesConfig::default());
        assert_eq!(d["hold"], serde_json::json!(60));
        assert_eq!(d["link_flap"]["window"], serde_json::json!(600));
    }
}
