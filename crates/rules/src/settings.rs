//! The rules' settings: `rules:` (each rule's section, merged over the
//! rule's defaults) and `expect:` (what the operator intends the fabric to
//! be), as the rules read them and as the configuration file spells them.
//!
//! A rule's section is a struct next to its rule (or here, when several
//! rules share its shape) with [`section!`] naming its keys and the check
//! each value passes; [`RulesConfig`] lists the sections once
//! (`rules_config!`), and its reader reports a key a rule does not take at
//! that key's line and column.

use std::fmt;
use std::time::Duration;

use roce_netdev::fec::FecCode;
use serde::de::{DeserializeSeed, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::congestion::PfcStormRule;
use super::fabric::{MtuRule, ROCE_4096_MIN_NETDEV_MTU};
use super::fec::{LaneSkewRule, PostFecRule};
use super::load_test::LoadTestRule;
use super::phys::LaneRule;
use super::probes::{ProbeFailureRule, ProbeLatencyRule};
use super::rates::{RateRule, TrafficRatioRule};
use crate::values::{opt_link_rate, opt_mtu, opt_priority};

/// One rule's section under `rules:`: keys read one by one over the rule's
/// defaults. Implemented with [`section!`].
pub trait Section {
    /// The keys the section takes, for the error on any other.
    const KEYS: &'static [&'static str];
    /// Reads the value of `key` from `map` into its field; `false` when the
    /// section has no such key (the value is then left unread).
    fn set<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error>;
}

/// Implements [`Section`] for a settings struct: each key with its type and
/// the `crate::values` check its value passes (one returning an `Option`: a
/// null value keeps the default).
///
/// ```ignore
/// section!(RateRule {
///     window: Duration = "crate::values::opt_duration",
///     per_second: f64 = "crate::values::opt_per_second",
/// });
/// ```
macro_rules! section {
    ($ty:ident { $($key:ident: $t:ty = $check:literal),+ $(,)? }) => {
        impl $crate::settings::Section for $ty {
            const KEYS: &'static [&'static str] = &[$(stringify!($key)),+];

            fn set<'de, A: serde::de::MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<bool, A::Error> {
                match key {
                    $(stringify!($key) => {
                        #[derive(serde::Deserialize)]
                        #[serde(transparent)]
                        struct Value(#[serde(deserialize_with = $check)] Option<$t>);
                        if let Some(v) = map.next_value::<Value>()?.0 {
                            self.$key = v;
                        }
                    })+
                    _ => return Ok(false),
                }
                Ok(true)
            }
        }
    };
}
pub(crate) use section;

/// Reads one rule's section (a mapping, or null for the defaults) into the
/// rule's settings.
struct SectionSeed<'a, T> {
    rule: &'static str,
    into: &'a mut T,
}

impl<'de, T: Section> DeserializeSeed<'de> for SectionSeed<'_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, T: Section> Visitor<'de> for SectionSeed<'_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the settings of rule {}", self.rule)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let rule = self.rule;
        while let Some(key) = map.next_key_seed(SectionKey::<T>::new(rule))? {
            if !self.into.set(&key, &mut map)? {
                return Err(A::Error::custom(not_a_setting::<T>(rule, &key)));
            }
        }
        Ok(())
    }
}

/// A key of one rule's section, refused while it is read when the rule
/// does not take it: the error then carries the key's own line and column.
struct SectionKey<T> {
    rule: &'static str,
    section: std::marker::PhantomData<T>,
}

impl<T> SectionKey<T> {
    fn new(rule: &'static str) -> Self {
        SectionKey {
            rule,
            section: std::marker::PhantomData,
        }
    }
}

impl<'de, T: Section> DeserializeSeed<'de> for SectionKey<T> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        let key = String::deserialize(d)?;
        if !T::KEYS.contains(&key.as_str()) {
            return Err(D::Error::custom(not_a_setting::<T>(self.rule, &key)));
        }
        Ok(key)
    }
}

fn not_a_setting<T: Section>(rule: &str, key: &str) -> String {
    format!(
        "rules.{rule}.{key} is not a setting of this rule (it takes: {})",
        T::KEYS.join(", ")
    )
}

/// Declares [`RulesConfig`]: `hold`, `disabled` and one field per rule
/// section, and the reader that sends each section to its struct.
macro_rules! rules_config {
    ($( $(#[$doc:meta])* $name:ident: $ty:ty, )+) => {
        /// Thresholds of the rules. Every rule has a default; a window is how much
        /// history a rate rule looks at. Any key may be given alone: `rules:
        /// {retransmissions: {per_second: 50}}` keeps that rule's default window.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub struct RulesConfig {
            /// A finding clears only after its condition stayed false this long.
            pub hold: Duration,
            /// Rule ids to turn off.
            pub disabled: Vec<String>,
            $( $(#[$doc])* pub $name: $ty, )+
        }

        impl RulesConfig {
            /// Every key of `rules:`.
            const KEYS: &'static [&'static str] = &["hold", "disabled", $(stringify!($name)),+];

            /// Reads the section of rule `name` over its defaults; `false`
            /// when there is no such section.
            fn read_section<'de, A: MapAccess<'de>>(
                &mut self,
                name: &str,
                map: &mut A,
            ) -> Result<bool, A::Error> {
                match name {
                    $(stringify!($name) => map.next_value_seed(SectionSeed {
                        rule: stringify!($name),
                        into: &mut self.$name,
                    })?,)+
                    _ => return Ok(false),
                }
                Ok(true)
            }
        }
    };
}

rules_config! {
    /// `link_downed` increments within the window.
    link_flap: WindowRule,
    /// Symbol errors above this bit error rate over the window.
    symbol_errors: BerRule,
    /// Retransmissions per second (ACK timeouts are `ack_timeouts`).
    retransmissions: RateRule,
    /// ACK timeouts: any within the window is a warning (each one stalls a
    /// QP for the whole timeout, about 4 s at NCCL's default
    /// NCCL_IB_TIMEOUT=20); above `per_second` over the window and in both
    /// of its halves, critical.
    ack_timeouts: RateRule,
    /// Out-of-sequence and sequence-error NAKs per second.
    sequence_errors: RateRule,
    /// Work requests completed in error (flushes excepted), remote access,
    /// invalid request and length errors within the window.
    completion_errors: WindowRule,
    /// Receive drops for lack of buffers or WQEs per second.
    out_of_buffer: RateRule,
    /// Notification point role: ECN-marked RoCE packets per RoCE packet
    /// received.
    receiver_congested: TrafficRatioRule,
    /// Reaction point role: CNPs handled per RoCE packet sent.
    sender_throttled: TrafficRatioRule,
    /// ECN-marked RoCE packets arriving (above `per_second`) while no CNP is
    /// sent: the notification point is off.
    cnp_not_sent: RateRule,
    /// Share of the CNPs received that the reaction point ignored.
    cnp_ignored: TrafficRatioRule,
    /// Smallest netdev MTU of a RoCE netdev when `expect.mtu` is not set.
    mtu_below_jumbo: MtuRule,
    /// A storm: a priority paused for nearly the whole window, or the NIC's
    /// storm detector stopping its pause frames.
    pfc_storm: PfcStormRule,
    /// Share of the window a priority may be paused by the link partner.
    pfc_pause_received: PfcStormRule,
    /// Share of the window this NIC may pause a priority of its partner.
    pfc_pause_sent: PfcStormRule,
    /// Discards on a PFC-enabled (lossless) priority per second.
    lossless_discards: RateRule,
    /// Other NIC discards (port-wide, lossy traffic) per second.
    discards_growing: RateRule,
    /// Drops in the host's receive rings (rx_out_of_buffer, rx_ring) per
    /// second.
    host_ring_drops: RateRule,
    /// Share of failed probe rounds over the window.
    probe_failures: ProbeFailureRule,
    /// Mean probe RTT over the window against the mean before it.
    probe_latency_regression: ProbeLatencyRule,
    /// Pre-FEC bit error rate (FEC corrected bits over the bits the link
    /// carried) above the active FEC code's limit over the window.
    fec_ber: FecBerRule,
    /// Uncorrectable FEC codewords within the window.
    fec_uncorrectable: WindowRule,
    /// One lane holding at least `share` of the bits FEC corrected since
    /// the link came up, once they number `min_bits`.
    fec_lane_skew: LaneSkewRule,
    /// Bit errors past FEC since the link came up (or the counters
    /// started), from `min_errors` on.
    post_fec_errors: PostFecRule,
    /// AER errors on a NIC's or GPU's PCIe link within the window.
    pcie_aer: WindowRule,
    /// devlink health reporter errors within the window.
    devlink_health: WindowRule,
    /// A module lane whose Rx power is below its siblings' median divided
    /// by `factor` (2 = 3 dB).
    module_lane_imbalance: LaneRule,
    /// The load test's bandwidth at the largest message size, as a share
    /// of the line rate: below `min_fraction` a warning, below
    /// `critical_fraction` critical.
    load_test: LoadTestRule,
}

impl<'de> Deserialize<'de> for RulesConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RulesVisitor)
    }
}

/// `rules:` as written: every key optional, merged over the defaults.
struct RulesVisitor;

impl<'de> Visitor<'de> for RulesVisitor {
    type Value = RulesConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the rules' settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RulesConfig, A::Error> {
        #[derive(Deserialize)]
        #[serde(transparent)]
        struct Hold(#[serde(deserialize_with = "crate::values::duration")] Duration);

        let mut c = RulesConfig::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "hold" => c.hold = map.next_value::<Hold>()?.0,
                "disabled" => {
                    if let Some(d) = map.next_value::<Option<Vec<String>>>()? {
                        c.disabled = d;
                    }
                }
                name => {
                    if !c.read_section(name, &mut map)? {
                        return Err(A::Error::unknown_field(name, RulesConfig::KEYS));
                    }
                }
            }
        }
        Ok(c)
    }
}

impl Default for RulesConfig {
    fn default() -> Self {
        let minute = Duration::from_secs(60);
        RulesConfig {
            hold: Duration::from_secs(60),
            disabled: Vec::new(),
            link_flap: WindowRule {
                window: Duration::from_secs(600),
            },
            symbol_errors: BerRule {
                window: Duration::from_secs(300),
                max_ber: 1e-12,
            },
            retransmissions: RateRule {
                window: minute,
                per_second: 10.0,
            },
            ack_timeouts: RateRule {
                window: Duration::from_secs(300),
                per_second: 0.1,
            },
            sequence_errors: RateRule {
                window: minute,
                per_second: 10.0,
            },
            completion_errors: WindowRule {
                window: Duration::from_secs(300),
            },
            out_of_buffer: RateRule {
                window: minute,
                per_second: 1.0,
            },
            // Switches mark with a probability that reaches its maximum (often
            // 10-20 %) at the queue's upper threshold: a third of the traffic
            // marked over a minute means the queue stays above it, DCQCN
            // does not bring the senders down to the drain rate.
            receiver_congested: TrafficRatioRule {
                window: minute,
                max_ratio: 0.3,
                min_packets_per_second: 1000.0,
            },
            // The notification point sends at most one CNP per QP per CNP
            // interval (mlx5 ecn/roce_np/min_time_between_cnps): healthy
            // incast stays around 1 % of the packets sent.
            sender_throttled: TrafficRatioRule {
                window: minute,
                max_ratio: 0.05,
                min_packets_per_second: 1000.0,
            },
            cnp_not_sent: RateRule {
                window: minute,
                per_second: 10.0,
            },
            cnp_ignored: TrafficRatioRule {
                window: minute,
                max_ratio: 0.1,
                min_packets_per_second: 1.0,
            },
            mtu_below_jumbo: MtuRule {
                min_mtu: ROCE_4096_MIN_NETDEV_MTU,
            },
            pfc_storm: PfcStormRule {
                window: Duration::from_secs(30),
                pause_ratio: 0.9,
            },
            pfc_pause_received: PfcStormRule {
                window: minute,
                pause_ratio: 0.2,
            },
            pfc_pause_sent: PfcStormRule {
                window: minute,
                pause_ratio: 0.05,
            },
            lossless_discards: RateRule {
                window: minute,
                per_second: 0.0,
            },
            fec_ber: FecBerRule {
                window: Duration::from_secs(300),
                max_ber_rs544: 1e-5,
                max_ber_rs528: 2e-6,
                max_ber_base_r: 1e-8,
                max_ber: 1e-5,
            },
            fec_uncorrectable: WindowRule {
                window: Duration::from_secs(600),
            },
            // A healthy RS-FEC link corrects bits on every lane at similar
            // rates; one lane with nine tenths of a million corrected bits
            // is no burst at bring-up but a lane far worse than the others.
            fec_lane_skew: LaneSkewRule {
                share: 0.9,
                min_bits: 1_000_000,
            },
            // A link at IEEE 802.3's frame loss target (post-FEC BER about
            // 1e-15) loses an error every few hours at 100G: a hundred is
            // weeks of that, or a link that lost frames in earnest.
            post_fec_errors: PostFecRule { min_errors: 100 },
            pcie_aer: WindowRule {
                window: Duration::from_secs(600),
            },
            devlink_health: WindowRule {
                window: Duration::from_secs(600),
            },
            module_lane_imbalance: LaneRule { factor: 2.0 },
            load_test: LoadTestRule::default(),
            discards_growing: RateRule {
                window: minute,
                per_second: 100.0,
            },
            host_ring_drops: RateRule {
                window: minute,
                per_second: 100.0,
            },
            probe_failures: ProbeFailureRule {
                window: minute,
                max_ratio: 0.2,
            },
            probe_latency_regression: ProbeLatencyRule {
                window: Duration::from_secs(300),
                factor: 3.0,
            },
        }
    }
}

impl RulesConfig {
    /// The longest window any rule looks at: how much history to keep.
    pub fn longest_window(&self) -> Duration {
        [
            self.link_flap.window,
            self.symbol_errors.window,
            self.retransmissions.window,
            self.ack_timeouts.window,
            self.sequence_errors.window,
            self.completion_errors.window,
            self.out_of_buffer.window,
            self.receiver_congested.window,
            self.sender_throttled.window,
            self.cnp_not_sent.window,
            self.cnp_ignored.window,
            self.pfc_storm.window,
            self.pfc_pause_received.window,
            self.pfc_pause_sent.window,
            self.lossless_discards.window,
            self.discards_growing.window,
            self.host_ring_drops.window,
            self.probe_failures.window,
            // The latency baseline is the probe's own cumulative mean, so
            // its window needs no more history than itself.
            self.probe_latency_regression.window,
            self.hold,
        ]
        .into_iter()
        .max()
        .unwrap_or(Duration::from_secs(60))
    }
}

/// A rule that counts events within a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowRule {
    pub window: Duration,
}

section!(WindowRule {
    window: Duration = "crate::values::opt_duration",
});

/// A bit error rate over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BerRule {
    pub window: Duration,
    /// Bit error rate above which the rule fires (1e-12: IBTA's floor).
    pub max_ber: f64,
}

section!(BerRule {
    window: Duration = "crate::values::opt_duration",
    max_ber: f64 = "crate::values::opt_ber",
});

/// The pre-FEC bit error rate above which `fec_ber_high` fires, by the FEC
/// code the link runs: each about 25 times below the input error rate its
/// IEEE 802.3 PMDs are specified to (2.4e-4 for RS(544,514) on PAM4 lanes,
/// 5e-5 for RS(528,514) on 25G NRZ lanes); BASE-R FEC links (10G/25G KR and
/// CR) are specified to 1e-12 with or without FEC, so any steady correction
/// there is a link far from its specification.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FecBerRule {
    pub window: Duration,
    /// RS(544,514) "KP4", 50G PAM4 lanes and up (200G, 400G, 800G).
    pub max_ber_rs544: f64,
    /// RS(528,514) "KR4", 25G NRZ lanes (100G).
    pub max_ber_rs528: f64,
    /// BASE-R "Firecode" (Clause 74).
    pub max_ber_base_r: f64,
    /// Any other code (low-latency RS, a mode this exporter does not know).
    pub max_ber: f64,
}

section!(FecBerRule {
    window: Duration = "crate::values::opt_duration",
    max_ber_rs544: f64 = "crate::values::opt_ber",
    max_ber_rs528: f64 = "crate::values::opt_ber",
    max_ber_base_r: f64 = "crate::values::opt_ber",
    max_ber: f64 = "crate::values::opt_ber",
});

impl FecBerRule {
    /// The limit for the code [`roce_netdev::fec::line_rate`] found.
    pub fn max_ber_for(&self, code: FecCode) -> f64 {
        match code {
            FecCode::Rs544 => self.max_ber_rs544,
            FecCode::Rs528 => self.max_ber_rs528,
            FecCode::BaseR => self.max_ber_base_r,
            FecCode::MacRate => self.max_ber,
        }
    }
}

/// What the operator intends the fabric to be. Unset facts are not checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Expectations {
    /// Netdev MTU of every RoCE netdev (e.g. 9000).
    #[serde(deserialize_with = "opt_mtu")]
    pub mtu: Option<u32>,
    /// The priority RoCE traffic uses, with PFC on it (e.g. 3).
    #[serde(deserialize_with = "opt_priority")]
    pub pfc_priority: Option<u8>,
    /// Link rate of every active port, in Gb/s (e.g. 400).
    #[serde(deserialize_with = "opt_link_rate")]
    pub link_rate_gbps: Option<f64>,
    /// The `NCCL_IB_TC` the jobs on this host set (the whole IP traffic
    /// class byte, DSCP << 2, e.g. 106): the DSCP of their RoCE traffic.
    /// Unset: MLNX_OFED's global traffic class of the port
    /// (`/sys/class/infiniband/<dev>/tc/<port>/traffic_class`) where it is
    /// set, else NCCL's default 0 (an assumption: findings on it stay info).
    pub nccl_ib_tc: Option<u8>,
    /// The RDMA devices this host should have: a count (`8`) or the names
    /// (`[mlx5_0, mlx5_1]`). Devices seen since start are expected anyway.
    pub devices: Option<ExpectedDevices>,
    /// The rail cabling: which switch each RoCE NIC's LLDP neighbour must
    /// be (`lldp_rail_mismatch`).
    pub rails: Option<crate::lldp::ExpectedRails>,
}

/// `expect.devices`: how many RDMA devices, or which.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ExpectedDevices {
    Count(usize),
    Names(Vec<String>),
}
