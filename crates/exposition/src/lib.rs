//! Exposition: the only place that names metrics. It turns the latest
//! [`Snapshot`] into Prometheus text 0.0.4 or OpenMetrics 1.0, through
//! `prometheus-client`'s collector interface.
//!
//! Every family is declared once, as a [`Fam`] constant whose type names
//! its label set ([`labels`]), and listed in a per-source table
//! (`families::all`); the metric reference `docs/metrics.md` is generated
//! from those rows and a test keeps it in step. A family's label names are
//! its set's and a sample's label values are the set's struct, each value
//! under its label's name ([`Samples::push`]), so a sample cannot carry a
//! label the reference does not name, miss one, or take its values by
//! position: none of these compiles.

use std::fmt::Write as _;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::marker::PhantomData;

use labels::LabelSet;
use roce_model::{load, meaning, snapshot};
use roce_rules as rules;
use snapshot::Snapshot;

pub mod exporter;
pub mod families;
pub mod findings;
pub mod groups;
pub mod hw_counters;
pub mod labels;
pub mod lldp;
pub mod load_test;
pub mod nccl;
pub mod netdev;
pub mod peer_probes;
pub mod phys;
pub mod probes;
pub mod process;
pub mod rdma;
pub mod topology;

/// Wire format of an exposition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Prometheus text format 0.0.4 (the default).
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Facts about the running exporter that the exposition reports beside the
/// snapshot.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
    /// The git branch it was built from.
    pub branch: &'static str,
    /// rustc's version (node_exporter's `goversion`).
    pub rustversion: &'static str,
    /// Sampling interval, quoted in HELP texts.
    pub sample_interval: std::time::Duration,
    /// The groups of series exported (`metrics:`, `--collector.<group>`).
    pub groups: groups::Groups,
    /// Whether the exporter's own process families (`process_*`) are
    /// exported; `--web.disable-exporter-metrics` turns them off, as it
    /// does node_exporter's `process_*` and `go_*`.
    pub process_metrics: bool,
}

impl BuildInfo {
    /// This build's facts as the binary's build script recorded them
    /// (`ROCE_EXPORTER_*`, passed in by [`BuildInfo::with_build`]); without
    /// them (tests of this crate) revision, branch and compiler are
    /// "unknown".
    pub fn current(sample_interval: std::time::Duration) -> BuildInfo {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            revision: "unknown",
            branch: "unknown",
            rustversion: "unknown",
            sample_interval,
            groups: groups::Groups::default(),
            process_metrics: true,
        }
    }

    /// `self` with the revision, branch and compiler version the binary
    /// was built with.
    pub fn with_build(
        mut self,
        revision: &'static str,
        branch: &'static str,
        rustversion: &'static str,
    ) -> BuildInfo {
        self.revision = revision;
        self.branch = branch;
        self.rustversion = rustversion;
        self
    }
}

/// Metric type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric family: the single declaration of its name, type, unit,
/// labels, help and source.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// Base name as registered with prometheus-client: without the unit
    /// suffix and without `_total` (both are appended by the encoder).
    pub base: &'static str,
    pub kind: MetricKind,
    pub unit: Option<FamilyUnit>,
    pub labels: &'static [&'static str],
    pub help: &'static str,
    /// Where the value comes from (kernel file, netlink message, ...).
    pub source: &'static str,
}

/// Units this project uses (base units only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyUnit {
    Bytes,
    Seconds,
    Ratio,
    BytesPerSecond,
    TransfersPerSecond,
    Lanes,
    Celsius,
    Volts,
    Amperes,
    Watts,
}

impl FamilyUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            FamilyUnit::Bytes => "bytes",
            FamilyUnit::Seconds => "seconds",
            FamilyUnit::Ratio => "ratio",
            FamilyUnit::BytesPerSecond => "bytes_per_second",
            FamilyUnit::TransfersPerSecond => "transfers_per_second",
            FamilyUnit::Lanes => "lanes",
            FamilyUnit::Celsius => "celsius",
            FamilyUnit::Volts => "volts",
            FamilyUnit::Amperes => "amperes",
            FamilyUnit::Watts => "watts",
        }
    }

    fn to_unit(self) -> Unit {
        match self {
            FamilyUnit::Bytes => Unit::Bytes,
            FamilyUnit::Seconds => Unit::Seconds,
            // Not `Unit::Ratios`: prometheus-client spells that "ratios",
            // and the contract (and `exposed_name`) says `_ratio`.
            other => Unit::Other(other.as_str().to_string()),
        }
    }
}

impl Family {
    /// The name as it appears in the exposition (unit and `_total` added).
    pub fn exposed_name(&self) -> String {
        let mut name = self.base.to_string();
        if let Some(unit) = self.unit {
            name.push('_');
            name.push_str(unit.as_str());
        }
        if self.kind == MetricKind::Counter {
            name.push_str("_total");
        }
        name
    }

    /// The HELP text as exposed: the row's help, its source and, for values
    /// read from the host, the sampling interval. Characters that
    /// prometheus-client writes unescaped into an OpenMetrics HELP line (`"`,
    /// `\\`, newline) are replaced, so no row can break the format.
    pub fn help_line(&self, sample_interval: std::time::Duration) -> String {
        let mut line = format!("{} Source: {}", self.help, self.source);
        match self.source {
            "build" | "config" => line.push('.'),
            // the exporter's own process (process.rs), read when encoded
            s if s.starts_with("/proc/self") => line.push_str("; read at each scrape."),
            _ => {
                let _ = write!(
                    line,
                    "; sampled every {}.",
                    humantime::format_duration(sample_interval)
                );
            }
        }
        if line.contains(['"', '\\', '\n']) {
            line = line.replace('"', "'").replace('\\', "/").replace('\n', " ");
        }
        line
    }

    fn metric_type(&self) -> MetricType {
        match self.kind {
            MetricKind::Counter => MetricType::Counter,
            MetricKind::Gauge => MetricType::Gauge,
            MetricKind::Histogram => MetricType::Histogram,
        }
    }
}

/// A family's row without its labels, which come from its label set
/// ([`Fam::new`]).
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// As [`Family::base`].
    pub base: &'static str,
    pub kind: MetricKind,
    pub unit: Option<FamilyUnit>,
    pub help: &'static str,
    pub source: &'static str,
}

/// A family with its label set in its type: its row's label names are the
/// set's ([`LabelSet::NAMES`]), and the only ways to add samples to it
/// ([`Samples::push`], [`push_into`]) take the set's struct, whose fields
/// name each value. A positional array, a missing label or another set
/// does not compile:
///
/// ```compile_fail,E0308
/// use roce_exposition::labels::PortLabels;
/// use roce_exposition::{Fam, MetricKind, Row, Samples};
/// static UP: Fam<PortLabels> = Fam::new(Row {
///     base: "roce_example_up",
///     kind: MetricKind::Gauge,
///     unit: None,
///     help: "",
///     source: "",
/// });
/// let mut s = Samples::new(&UP);
/// // values by position, as `[device, port]` or swapped: does not compile
/// s.push(["1", "mlx5_0"], 1u64);
/// ```
///
/// ```compile_fail,E0063
/// # use roce_exposition::labels::PortLabels;
/// # use roce_exposition::{Fam, MetricKind, Row, Samples};
/// # static UP: Fam<PortLabels> = Fam::new(Row {
/// #     base: "roce_example_up",
/// #     kind: MetricKind::Gauge,
/// #     unit: None,
/// #     help: "",
/// #     source: "",
/// # });
/// let mut s = Samples::new(&UP);
/// // the port forgotten: does not compile
/// s.push(PortLabels { device: "mlx5_0" }, 1u64);
/// ```
///
/// ```compile_fail,E0308
/// # use roce_exposition::labels::{NetdevLabels, PortLabels};
/// # use roce_exposition::{Fam, MetricKind, Row, Samples};
/// # static UP: Fam<PortLabels> = Fam::new(Row {
/// #     base: "roce_example_up",
/// #     kind: MetricKind::Gauge,
/// #     unit: None,
/// #     help: "",
/// #     source: "",
/// # });
/// let mut s = Samples::new(&UP);
/// // another family's set: does not compile
/// s.push(NetdevLabels { netdev: "eth0", device: "mlx5_0", port: "1" }, 1u64);
/// ```
///
/// ```
/// use roce_exposition::labels::{LabelSet, PortLabels};
/// use roce_exposition::{Fam, MetricKind, Row, Samples};
/// static UP: Fam<PortLabels> = Fam::new(Row {
///     base: "roce_example_up",
///     kind: MetricKind::Gauge,
///     unit: None,
///     help: "",
///     source: "",
/// });
/// assert_eq!(UP.labels, PortLabels::NAMES);
/// let mut s = Samples::new(&UP);
/// let port = 1.to_string();
/// s.push(PortLabels { port: &port, device: "mlx5_0" }, 1u64);
/// assert_eq!(s.len(), 1);
/// ```
pub struct Fam<L> {
    pub family: Family,
    set: PhantomData<fn() -> L>,
}

impl<L: LabelSet> Fam<L> {
    /// The family of `row`, labelled by `L`'s names.
    pub const fn new(row: Row) -> Self {
        Fam {
            family: Family {
                base: row.base,
                kind: row.kind,
                unit: row.unit,
                labels: L::NAMES,
                help: row.help,
                source: row.source,
            },
            set: PhantomData,
        }
    }
}

impl<L> Clone for Fam<L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for Fam<L> {}

impl<L> std::fmt::Debug for Fam<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.family.fmt(f)
    }
}

impl<L> std::ops::Deref for Fam<L> {
    type Target = Family;

    fn deref(&self) -> &Family {
        &self.family
    }
}

/// A sample value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    U64(u64),
    F64(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::U64(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::F64(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::U64(u64::from(v))
    }
}

/// The label values of one sample, borrowed from its [`FamilySamples`]:
/// values sit back to back in one buffer per family, so that adding a
/// sample costs no allocation of its own.
struct LabelsRef<'a> {
    names: &'static [&'static str],
    buf: &'a str,
    /// End offset in `buf` of each of this sample's values.
    ends: &'a [usize],
    /// Offset in `buf` where this sample's first value starts.
    start: usize,
}

impl EncodeLabelSet for LabelsRef<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let mut start = self.start;
        let values = self.ends.iter().map(|&end| {
            let value = self.buf.get(start..end).unwrap_or("");
            start = end;
            value
        });
        labels::encode_pairs(encoder, self.names.iter().copied().zip(values))
    }
}

/// Histogram data of one sample: the count of each bucket by upper bound
/// (not cumulative: prometheus-client's encoder adds them up itself).
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramValue {
    pub sum: f64,
    pub count: u64,
    /// (upper bound, count in this bucket only), the last bound being +Inf.
    pub buckets: Vec<(f64, u64)>,
}

#[derive(Debug)]
enum Sample {
    Value(Value),
    Histogram(HistogramValue),
}

/// The samples of one family, collected before anything is written so that a
/// family without samples is left out entirely.
#[derive(Debug)]
pub struct FamilySamples {
    family: &'static Family,
    /// Every label value of every sample, back to back.
    label_buf: String,
    /// End offset in `label_buf` of each value: sample `i` owns entries
    /// `i * n .. (i + 1) * n`, `n` being the family's label count.
    label_ends: Vec<usize>,
    samples: Vec<Sample>,
}

impl FamilySamples {
    /// Samples of a family known only by its row (a table of families
    /// filled by [`push_into`]).
    pub fn new(family: &'static Family) -> Self {
        FamilySamples {
            family,
            label_buf: String::new(),
            label_ends: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// The family these samples belong to.
    pub fn family(&self) -> &'static Family {
        self.family
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Appends one sample. Callers pass the label set of the [`Fam`] they
    /// hold, one value per label of the family, so sample `i` always owns
    /// the same slots of `label_ends`.
    fn push_sample<L: LabelSet>(&mut self, labels: &L, sample: Sample) {
        labels.each_value(&mut |value| {
            self.label_buf.push_str(value);
            self.label_ends.push(self.label_buf.len());
        });
        self.samples.push(sample);
    }

    fn labels_of(&self, sample: usize) -> LabelsRef<'_> {
        let n = self.family.labels.len();
        let first = sample * n;
        let ends = self.label_ends.get(first..first + n).unwrap_or(&[]);
        let start = match first.checked_sub(1) {
            Some(prev) => self.label_ends.get(prev).copied().unwrap_or(0),
            None => 0,
        };
        LabelsRef {
            names: self.family.labels,
            buf: &self.label_buf,
            ends,
            start,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Writes the family (descriptor and samples) unless it is empty.
    pub fn encode(
        &self,
        encoder: &mut DescriptorEncoder,
        sample_interval: std::time::Duration,
    ) -> Result<(), std::fmt::Error> {
        if self.is_empty() {
            return Ok(());
        }
        let unit = self.family.unit.map(FamilyUnit::to_unit);
        let help = self.family.help_line(sample_interval);
        let mut metric = encoder.encode_descriptor(
            self.family.base,
            &help,
            unit.as_ref(),
            self.family.metric_type(),
        )?;
        for (i, sample) in self.samples.iter().enumerate() {
            let labels = self.labels_of(i);
            let mut m = metric.encode_family(&labels)?;
            match (self.family.kind, sample) {
                (_, Sample::Histogram(h)) => {
                    m.encode_histogram::<LabelsRef>(h.sum, h.count, &h.buckets, None)?;
                }
                (MetricKind::Counter, Sample::Value(Value::U64(v))) => {
                    m.encode_counter::<LabelsRef, _, u64>(v, None)?;
                }
                (MetricKind::Counter, Sample::Value(Value::F64(v))) => {
                    m.encode_counter::<LabelsRef, _, f64>(v, None)?;
                }
                (_, Sample::Value(Value::U64(v))) => {
                    // Gauges are encoded as i64 or f64 by prometheus-client;
                    // values above i64::MAX only occur for garbage input.
                    let v = i64::try_from(*v).unwrap_or(i64::MAX);
                    m.encode_gauge(&v)?;
                }
                (_, Sample::Value(Value::F64(v))) => m.encode_gauge(v)?,
            }
        }
        Ok(())
    }
}

/// The samples of one family under construction, typed by its label set.
#[derive(Debug)]
pub struct Samples<L>(FamilySamples, PhantomData<fn() -> L>);

impl<L: LabelSet> Samples<L> {
    pub fn new(family: &'static Fam<L>) -> Self {
        Samples(FamilySamples::new(&family.family), PhantomData)
    }

    /// Adds a sample.
    pub fn push<V: Into<Value>>(&mut self, labels: L::Of<'_>, value: V) {
        self.0.push_sample(&labels, Sample::Value(value.into()));
    }

    /// Adds a histogram sample.
    pub fn push_histogram(&mut self, labels: L::Of<'_>, histogram: HistogramValue) {
        self.0.push_sample(&labels, Sample::Histogram(histogram));
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<L> From<Samples<L>> for FamilySamples {
    fn from(s: Samples<L>) -> FamilySamples {
        s.0
    }
}

/// Adds a sample to `family`'s entry of a table of families (one built
/// with [`FamilySamples::new`] from a source's `FAMILIES`); nothing when
/// the table lacks the family.
pub fn push_into<L: LabelSet, V: Into<Value>>(
    out: &mut [FamilySamples],
    family: &Fam<L>,
    labels: L::Of<'_>,
    value: V,
) {
    if let Some(s) = out.iter_mut().find(|s| s.family.base == family.base) {
        s.push_sample(&labels, Sample::Value(value.into()));
    }
}

/// Everything a scrape needs to write one exposition.
#[derive(Debug)]
struct SnapshotCollector {
    snapshot: std::sync::Arc<Snapshot>,
    build: BuildInfo,
}

impl prometheus_client::collector::Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in collect(&self.snapshot, &self.build) {
            family.encode(&mut encoder, self.build.sample_interval)?;
        }
        Ok(())
    }
}

/// The samples of every family for one snapshot, in exposition order.
pub fn collect(snapshot: &Snapshot, build: &BuildInfo) -> Vec<FamilySamples> {
    let mut out = Vec::new();
    exporter::collect(snapshot, build, &mut out);
    if build.process_metrics {
        process::collect(&mut out);
    }
    rdma::collect(snapshot, &build.groups, &mut out);
    netdev::collect(snapshot, &build.groups, &mut out);
    phys::collect(snapshot, &build.groups, &mut out);
    topology::collect(snapshot, &build.groups, &mut out);
    probes::collect(snapshot, &mut out);
    peer_probes::collect(snapshot, &mut out);
    nccl::collect(snapshot, &mut out);
    lldp::collect(snapshot, &mut out);
    load_test::collect(snapshot, &mut out);
    findings::collect(snapshot, &mut out);
    let switched = groups::Group::ALL
        .into_iter()
        .any(|g| !build.groups.is_on(g) && !g.families().is_empty());
    if switched {
        out.retain(|f| build.groups.exports(f.family));
    }
    out
}

/// Encodes one snapshot.
pub fn encode(snapshot: std::sync::Arc<Snapshot>, build: &BuildInfo, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector {
        snapshot,
        build: build.clone(),
    }));
    let mut out = String::with_capacity(64 * 1024);
    // Writing into a String cannot fail; an error here would be a bug in a
    // label value encoder, and an empty exposition is the safe answer.
    let result = match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry),
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
    };
    if result.is_err() {
        out.clear();
    }
    out
}
