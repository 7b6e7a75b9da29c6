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
pub trait LabelSet {
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
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
