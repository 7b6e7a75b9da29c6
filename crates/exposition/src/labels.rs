//! Label sets: one struct per set of label names, with a named `&str` field
//! per label. A family's type names its set ([`Fam<PortLabels>`](crate::Fam)),
//! its row in the reference takes the names from the set
//! ([`LabelSet::NAMES`]), and a sample is pushed as the set's struct, so a
//! label is never matched to a value by position: a missing field, another
//! set or a bare array does not compile.
//!
//! [`label_set!`] declares a set: the struct, its names (the field names,
//! or a literal after `=` where the label is a Rust keyword) and its
//! [`LabelSet`] and prometheus-client [`EncodeLabelSet`] impls. The sets
//! that several families share are declared here; a set only one family
//! carries is declared beside it.

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};

/// A set of labels: its names, in the order the exposition writes them, and
/// its values, one `&str` per name.
pub trait LabelSet: EncodeLabelSet {
    /// The label names, in field order.
    const NAMES: &'static [&'static str];
    /// The set with values borrowed for `'a`: a family's type names its set
    /// with any lifetime (elided in a constant's type, `Fam<PortLabels>`;
    /// `'static` where a field's type must name one), its samples are
    /// pushed with the lifetime of the data they are read from.
    type Of<'a>: LabelSet;

    /// Calls `f` with each value, in the order of [`LabelSet::NAMES`].
    fn each_value(&self, f: &mut impl FnMut(&str));
}

/// Writes `name="value"` pairs through prometheus-client's encoder: the
/// encoding of every label set, typed or as stored in a family's samples.
pub fn encode_pairs<'v>(
    encoder: &mut LabelSetEncoder,
    pairs: impl Iterator<Item = (&'static str, &'v str)>,
) -> Result<(), std::fmt::Error> {
    for (name, value) in pairs {
        let mut label = encoder.encode_label();
        let mut key = label.encode_label_key()?;
        key.write_str(name)?;
        let mut val = key.encode_label_value()?;
        val.write_str(value)?;
        val.finish()?;
    }
    Ok(())
}

/// Declares a label set: a struct with one `pub &'a str` field per label,
/// [`LabelSet`] with the field names as [`LabelSet::NAMES`] (`field =
/// "name"` where the name is a Rust keyword), and [`EncodeLabelSet`].
macro_rules! label_set {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($field:ident $(= $label:literal)?),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name<'a> {
            $(pub $field: &'a str,)+
        }

        impl $crate::labels::LabelSet for $name<'_> {
            const NAMES: &'static [&'static str] =
                &[$($crate::labels::label_set!(@name $field $($label)?)),+];
            type Of<'a> = $name<'a>;

            fn each_value(&self, f: &mut impl FnMut(&str)) {
                $(f(self.$field);)+
            }
        }

        impl prometheus_client::encoding::EncodeLabelSet for $name<'_> {
            fn encode(
                &self,
                encoder: &mut prometheus_client::encoding::LabelSetEncoder,
            ) -> Result<(), std::fmt::Error> {
                let names = <Self as $crate::labels::LabelSet>::NAMES;
                $crate::labels::encode_pairs(
                    encoder,
                    names.iter().copied().zip([$(self.$field),+]),
                )
            }
        }
    };
    (@name $field:ident) => {
        stringify!($field)
    };
    (@name $field:ident $label:literal) => {
        $label
    };
}
pub(crate) use label_set;

/// The empty set, of a family with one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NoLabels;

impl LabelSet for NoLabels {
    const NAMES: &'static [&'static str] = &[];
    type Of<'a> = NoLabels;

    fn each_value(&self, _: &mut impl FnMut(&str)) {}
}

impl EncodeLabelSet for NoLabels {
    fn encode(&self, _: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        Ok(())
    }
}

label_set! {
    /// An RDMA port: its device and port number.
    pub struct PortLabels { device, port }
}

label_set! {
    /// A counter of an RDMA port without a mapped meaning, under its
    /// kernel name.
    pub struct PortStatLabels { device, port, stat }
}

label_set! {
    /// Something of an RDMA port that happened for a reason.
    pub struct PortReasonLabels { device, port, reason }
}

label_set! {
    /// A netdev and the RDMA port it backs (`device` and `port` empty for a
    /// netdev of `netdevs.extra`).
    pub struct NetdevLabels { netdev, device, port }
}

label_set! {
    /// One priority (0-7) of a netdev.
    pub struct NetdevPriorityLabels { netdev, device, port, priority }
}

label_set! {
    /// One direction (rx, tx) of a netdev.
    pub struct NetdevDirectionLabels { netdev, device, port, direction }
}

label_set! {
    /// One priority of a netdev in one direction.
    pub struct NetdevPriorityDirectionLabels { netdev, device, port, priority, direction }
}

label_set! {
    /// One lane of a netdev's link or module (`lane` empty for the total).
    pub struct NetdevLaneLabels { netdev, device, port, lane }
}

label_set! {
    /// A collector of the sampler.
    pub struct CollectorLabels { collector }
}

label_set! {
    /// A collector's count by kind.
    pub struct CollectorKindLabels { collector, kind }
}

label_set! {
    /// A reason, of a family that counts by reason alone.
    pub struct ReasonLabels { reason }
}

impl<'a> NetdevLabels<'a> {
    /// The netdev's set with a priority.
    pub fn priority(self, priority: &'a str) -> NetdevPriorityLabels<'a> {
        let NetdevLabels {
            netdev,
            device,
            port,
        } = self;
        NetdevPriorityLabels {
            netdev,
            device,
            port,
            priority,
        }
    }

    /// The netdev's set with a direction.
    pub fn direction(self, direction: &'a str) -> NetdevDirectionLabels<'a> {
        let NetdevLabels {
            netdev,
            device,
            port,
        } = self;
        NetdevDirectionLabels {
            netdev,
            device,
            port,
            direction,
        }
    }

    /// The netdev's set with a lane.
    pub fn lane(self, lane: &'a str) -> NetdevLaneLabels<'a> {
        let NetdevLabels {
            netdev,
            device,
            port,
        } = self;
        NetdevLaneLabels {
            netdev,
            device,
            port,
            lane,
        }
    }
}

impl<'a> NetdevPriorityLabels<'a> {
    /// The priority's set with a direction.
    pub fn direction(self, direction: &'a str) -> NetdevPriorityDirectionLabels<'a> {
        let NetdevPriorityLabels {
            netdev,
            device,
            port,
            priority,
        } = self;
        NetdevPriorityDirectionLabels {
            netdev,
            device,
            port,
            priority,
            direction,
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family as ClientFamily;
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::{Fam, FamilySamples, MetricKind, Row, Samples};

    static GID: Fam<crate::rdma::GidLabels> = Fam::new(Row {
        base: "roce_example_gid",
        kind: MetricKind::Counter,
        unit: None,
        help: "Example.",
        source: "test",
    });

    fn sample_lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    /// The struct's own encoding (prometheus-client's families) and the
    /// encoding of the values as a family's samples store them agree,
    /// names from the set's constant, a keyword label included.
    #[test]
    fn a_set_encodes_alike_typed_and_stored() {
        let gid = crate::rdma::GidLabels {
            device: "mlx5_0",
            port: "1",
            index: "3",
            gid: "0000:0000:0000:0000:0000:ffff:0a00:0001",
            r#type: "RoCE v2",
            netdev: "ens1np0",
            family: "ipv4_mapped",
        };
        assert_eq!(
            crate::rdma::GidLabels::NAMES,
            ["device", "port", "index", "gid", "type", "netdev", "family"]
        );

        let mut registry = Registry::default();
        let typed = ClientFamily::<crate::rdma::GidLabels<'static>, Counter>::default();
        typed.get_or_create(&gid).inc_by(7);
        registry.register("roce_example_gid", "Example.", typed);
        let mut direct = String::new();
        assert!(encode(&mut direct, &registry).is_ok());

        let mut samples = Samples::new(&GID);
        samples.push(gid, 7u64);
        let stored: FamilySamples = samples.into();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(One(stored)));
        let mut ours = String::new();
        assert!(encode(&mut ours, &registry).is_ok());

        let line = r#"roce_example_gid_total{device="mlx5_0",port="1",index="3",gid="0000:0000:0000:0000:0000:ffff:0a00:0001",type="RoCE v2",netdev="ens1np0",family="ipv4_mapped"} 7"#;
        assert_eq!(sample_lines(&direct), [line]);
        assert_eq!(sample_lines(&ours), [line]);
    }

    #[derive(Debug)]
    struct One(FamilySamples);

    impl prometheus_client::collector::Collector for One {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::DescriptorEncoder,
        ) -> Result<(), std::fmt::Error> {
            self.0
                .encode(&mut encoder, std::time::Duration::from_secs(5))
        }
    }
}
