//! Configuration values checked where they are parsed (`deserialize_with`
//! helpers), so that a refused value is reported with its line and column.
//! Shared by every section of the configuration file: the top-level ones in
//! the binary's `config` and the rules' own `rules:` section in roce-rules.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The longest duration any setting takes. humantime accepts up to
/// `u64::MAX` seconds, and the exporter adds its durations to each other and
/// to the monotonic clock (the sampler's next tick and history retention,
/// the probe schedule, hyper's header deadline, the netlink deadline): far
/// beyond this such a sum overflows, which panics. No interval, window or
/// timeout of the exporter has a use beyond a year.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// `5s`, `500ms`, `1m30s`; above zero and at most [`MAX_DURATION`].
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    let parsed = humantime::parse_duration(s.trim()).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {s:?} ({e}); write e.g. 5s, 500ms, 1m"
        ))
    })?;
    if parsed.is_zero() {
        return Err(serde::de::Error::custom("duration must be above zero"));
    }
    if parsed > MAX_DURATION {
        return Err(serde::de::Error::custom(format!(
            "duration {s:?} is above the longest supported, 365d"
        )));
    }
    Ok(parsed)
}

pub fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// The MTU range of an Ethernet netdev (`ETH_MIN_MTU`, `ETH_MAX_MTU` in
/// include/uapi/linux/if_ether.h).
pub const ETH_MTU: std::ops::RangeInclusive<u64> = 68..=65535;

/// Numbers are checked where they are parsed, so that a refused value is
/// reported with its line and column: `ok` or the error "expected
/// `expected`, found `value`". An absent or null value is `None`.
pub fn opt_number<'de, D, T>(
    d: D,
    ok: fn(&T) -> bool,
    expected: &str,
) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + std::fmt::Display,
{
    match Option::<T>::deserialize(d)? {
        Some(v) if !ok(&v) => Err(serde::de::Error::custom(format!(
            "expected {expected}, found {v}"
        ))),
        v => Ok(v),
    }
}

pub fn number<'de, D, T>(d: D, ok: fn(&T) -> bool, expected: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + std::fmt::Display,
{
    let v = T::deserialize(d)?;
    if !ok(&v) {
        return Err(serde::de::Error::custom(format!(
            "expected {expected}, found {v}"
        )));
    }
    Ok(v)
}

pub fn opt_link_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && *v > 0.0,
        "a link rate in Gb/s above 0 (e.g. 400)",
    )
}

pub fn opt_mtu<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    opt_number(
        d,
        |v: &u32| ETH_MTU.contains(&u64::from(*v)),
        "an Ethernet MTU, 68 to 65535 (e.g. 9000)",
    )
}

pub fn opt_min_mtu<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    opt_number(
        d,
        |v: &u64| ETH_MTU.contains(v),
        "an Ethernet MTU, 68 to 65535 (to turn the rule off, list it in rules.disabled)",
    )
}

pub fn opt_priority<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    opt_number(d, |v: &u8| *v <= 7, "a priority 0 to 7")
}

pub fn opt_per_second<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && *v >= 0.0,
        "a rate per second, a number >= 0",
    )
}

pub fn opt_ber<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && (0.0..=1.0).contains(v),
        "a bit error rate between 0 and 1 (e.g. 1e-12)",
    )
}

pub fn opt_share<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && (0.0..=1.0).contains(v),
        "a share between 0 and 1 (e.g. 0.2)",
    )
}

pub fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    opt_number(d, |_: &u64| true, "a count, an integer >= 0")
}

pub fn opt_factor<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && *v >= 1.0,
        "a factor, a number >= 1",
    )
}

pub fn at_least_one<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    number(d, |v: &usize| *v >= 1, "at least 1")
}

pub fn at_least_one_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    number(d, |v: &u64| *v >= 1, "at least 1")
}

pub fn share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    number(
        d,
        |v: &f64| v.is_finite() && *v > 0.0 && *v <= 1.0,
        "a share above 0 and at most 1 (e.g. 0.7)",
    )
}

/// A duration setting's allowed range, checked where it is parsed and named
/// in the error and in docs/limits.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationLimit {
    /// The setting's key as written in the file (`nccl.interval`).
    pub key: &'static str,
    pub min: Duration,
    pub max: Duration,
    /// Why the bounds are where they are.
    pub why: &'static str,
}

impl DurationLimit {
    /// `100ms to 1h`.
    pub fn range(&self) -> String {
        format!(
            "{} to {}",
            humantime::format_duration(self.min),
            humantime::format_duration(self.max)
        )
    }

    /// The value, refused outside the range with the range in the error.
    pub fn parse<'de, D: Deserializer<'de>>(&self, d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        let parsed = humantime::parse_duration(s.trim()).map_err(|e| {
            serde::de::Error::custom(format!(
                "{}: invalid duration {s:?} ({e}); write e.g. 5s, 500ms, 1m",
                self.key
            ))
        })?;
        self.check(parsed)
            .map_err(|found| serde::de::Error::custom(self.refusal(&found)))
    }

    /// The value when inside the range; else how it was found, for the
    /// error.
    pub fn check(&self, v: Duration) -> Result<Duration, String> {
        if v < self.min || v > self.max {
            return Err(humantime::format_duration(v).to_string());
        }
        Ok(v)
    }

    fn refusal(&self, found: &str) -> String {
        format!(
            "{}: expected a duration from {} ({}), found {found}",
            self.key,
            self.range(),
            self.why
        )
    }
}

/// A count or size setting's allowed range (see [`DurationLimit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountLimit {
    pub key: &'static str,
    pub min: u64,
    pub max: u64,
    /// `bytes`, or `` for a plain count.
    pub unit: &'static str,
    pub why: &'static str,
}

impl CountLimit {
    /// `1 to 65536`, `1024 to 1048576 bytes`.
    pub fn range(&self) -> String {
        let unit = if self.unit.is_empty() {
            String::new()
        } else {
            format!(" {}", self.unit)
        };
        format!("{} to {}{unit}", self.min, self.max)
    }

    /// The value, refused outside the range (or not a whole number) with
    /// the range in the error.
    pub fn parse<'de, D, T>(&self, d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<u64>,
    {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Whole(u64),
            Negative(i64),
            Fraction(f64),
            Text(String),
        }
        let found = match Raw::deserialize(d)? {
            Raw::Whole(n) if self.holds(n) => {
                if let Ok(v) = T::try_from(n) {
                    return Ok(v);
                }
                n.to_string()
            }
            Raw::Whole(n) => n.to_string(),
            Raw::Negative(n) => n.to_string(),
            Raw::Fraction(f) => f.to_string(),
            Raw::Text(t) => format!("{t:?}"),
        };
        Err(serde::de::Error::custom(format!(
            "{}: expected {} ({}), found {found}",
            self.key,
            self.range(),
            self.why
        )))
    }

    /// Whether `v` is inside the range.
    pub fn holds(&self, v: u64) -> bool {
        (self.min..=self.max).contains(&v)
    }
}

/// Declares the `deserialize_with` functions of limits:
/// `limit_parsers! { pub(super) nccl_interval: NCCL_INTERVAL as Duration, }`
/// makes `fn nccl_interval(d) -> Result<Duration, _>` parsing with
/// `NCCL_INTERVAL` (a [`DurationLimit`] or [`CountLimit`]).
#[macro_export]
macro_rules! limit_parsers {
    ($($vis:vis $name:ident: $limit:path as $t:ty),* $(,)?) => {$(
        $vis fn $name<'de, D: ::serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
            $limit.parse(d)
        }
    )*};
}
