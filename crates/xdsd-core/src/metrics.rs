//! Prometheus metrics of a server: its streams, what they were sent, their ACKs and NACKs, and
//! the loads of its source. Every label value comes from a bounded set: flavors, results, and
//! type URLs that are well known or in the store (any other type a client names counts as
//! "other").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::store::Snapshot;

/// The content type of [`Metrics::encode`]'s text (OpenMetrics, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bounds of the push-to-ACK latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

type Labels = Vec<(&'static str, String)>;

fn type_label(type_url: &str) -> Labels {
    vec![("type_url", type_url.to_owned())]
}

/// The states of a gated rollout, as [`crate::rollout::State::name`] gives them.
const ROLLOUT_STATES: [&str; 4] = ["idle", "soaking", "waiting for canaries", "halted"];

/// How a load of the source ended, for [`Metrics::reload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reload {
    /// Applied: the store changed.
    Applied,
    /// Read and valid, but nothing changed.
    Unchanged,
    /// Rejected: the previous state is still served.
    Rejected,
}

impl Reload {
    const fn label(self) -> &'static str {
        match self {
            Reload::Applied => "applied",
            Reload::Unchanged => "unchanged",
            Reload::Rejected => "rejected",
        }
    }
}

/// The `result` label values of `xdsd_reloads_total`.
const RELOAD_RESULTS: [&str; 3] = [
    Reload::Applied.label(),
    Reload::Unchanged.label(),
    Reload::Rejected.label(),
];

/// The `flavor` label values of the stream metrics (as the transports name them).
const STREAM_FLAVORS: [&str; 2] = [
    <crate::protocol::sotw::SotwMachine as crate::protocol::session::Machine>::NAME,
    <crate::protocol::delta::DeltaMachine as crate::protocol::session::Machine>::NAME,
];

/// A server's metrics. Cheap to clone; the binary counts its source's loads through
/// [`Metrics::reload`].
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    /// Locked to add an embedder's series ([`Metrics::add_series`]) and to encode.
    registry: Mutex<Registry>,
    streams: Family<Labels, Gauge>,
    streams_opened: Family<Labels, Counter>,
    responses: Family<Labels, Counter>,
    resources_sent: Family<Labels, Counter>,
    bytes_sent: Family<Labels, Counter>,
    acks: Family<Labels, Counter>,
    nacks: Family<Labels, Counter>,
    ack_latency: Family<Labels, Histogram, fn() -> Histogram>,
    reloads: Family<Labels, Counter>,
    tls_reloads: Family<Labels, Counter>,
    resources: Family<Labels, Gauge>,
    generation: Gauge,
    source_healthy: Gauge,
    source_revision: Gauge,
    rollout_state: Family<Labels, Gauge>,
    rollout_promotions: Counter,
    rollout_halts: Counter,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics of their own, all at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("xdsd");
        let streams = Family::<Labels, Gauge>::default();
        let streams_opened = Family::<Labels, Counter>::default();
        let responses = Family::<Labels, Counter>::default();
        let resources_sent = Family::<Labels, Counter>::default();
        let bytes_sent = Family::<Labels, Counter>::default();
        let acks = Family::<Labels, Counter>::default();
        let nacks = Family::<Labels, Counter>::default();
        let ack_latency: Family<Labels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let reloads = Family::<Labels, Counter>::default();
        let tls_reloads = Family::<Labels, Counter>::default();
        let resources = Family::<Labels, Gauge>::default();
        let generation = Gauge::default();
        let source_healthy = Gauge::default();
        source_healthy.set(1);
        registry.register(
            "source_healthy",
            "1 while the source can be read and watched (the last load, good or rejected, read it), 0 while it cannot",
            source_healthy.clone(),
        );
        let source_revision = Gauge::default();
        registry.register(
            "source_revision",
            "The source's revision (etcd's) of the last change applied (0: none yet, or a source without revisions)",
            source_revision.clone(),
        );
        let build = Family::<Labels, Gauge>::default();
        build
            .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION").to_owned())])
            .set(1);
        registry.register(
            "build_info",
            "xdsd's version (the value is always 1)",
            build,
        );
        registry.register(
            "connected_streams",
            "Open xDS streams, by flavor (sotw, delta) and service (ads, per_type)",
            streams.clone(),
        );
        registry.register(
            "streams_opened",
            "xDS streams opened, by flavor and service",
            streams_opened.clone(),
        );
        registry.register(
            "responses",
            "Responses (pushes) sent, by type URL",
            responses.clone(),
        );
        registry.register(
            "resources_sent",
            "Resources sent in responses, by type URL",
            resources_sent.clone(),
        );
        registry.register_with_unit(
            "response",
            "Bytes of the responses sent, by type URL",
            Unit::Bytes,
            bytes_sent.clone(),
        );
        registry.register("acks", "ACKs received, by type URL", acks.clone());
        registry.register("nacks", "NACKs received, by type URL", nacks.clone());
        registry.register_with_unit(
            "push_ack_latency",
            "Time from a response to its ACK or NACK, by type URL",
            Unit::Seconds,
            ack_latency.clone(),
        );
        registry.register(
            "reloads",
            "Loads of the resource source after the first, by result (applied, unchanged, rejected)",
            reloads.clone(),
        );
        registry.register(
            "tls_reloads",
            "Reads of the TLS files after they changed, by result (applied; rejected: the previous certificate kept)",
            tls_reloads.clone(),
        );
        registry.register(
            "resources",
            "Resources (variants) the store holds, by type URL",
            resources.clone(),
        );
        registry.register(
            "store_generation",
            "The store's generation: how many changes it took",
            generation.clone(),
        );
        let rollout_state = Family::<Labels, Gauge>::default();
        for state in ROLLOUT_STATES {
            rollout_state
                .get_or_create(&vec![("state", state.to_owned())])
                .set(i64::from(state == "idle"));
        }
        let rollout_promotions = Counter::default();
        let rollout_halts = Counter::default();
        registry.register(
            "rollout_state",
            "The gated rollout's state (--canary): 1 for the current one of idle, soaking, waiting for canaries, halted",
            rollout_state.clone(),
        );
        registry.register(
            "rollout_promotions",
            "Changes promoted from the canary cohort to every client",
            rollout_promotions.clone(),
        );
        registry.register(
            "rollout_halts",
            "Rollouts halted by a canary's NACK (the canaries rolled back)",
            rollout_halts.clone(),
        );
        // Every counter's known label sets exist from the start, at 0: an alert on an increase
        // (`increase(xdsd_reloads_total{result="rejected"}[5m]) > 0`) works on a fresh server,
        // and a dashboard shows 0 rather than no data. The per-type series are made for the
        // types the store holds when they are scraped ([`Metrics::encode`]).
        for result in RELOAD_RESULTS {
            drop(reloads.get_or_create(&vec![("result", result.to_owned())]));
        }
        for result in ["applied", "rejected"] {
            drop(tls_reloads.get_or_create(&vec![("result", result.to_owned())]));
        }
        for flavor in STREAM_FLAVORS {
            for ads in [true, false] {
                let labels = Metrics::stream_labels(flavor, ads);
                drop(streams.get_or_create(&labels));
                drop(streams_opened.get_or_create(&labels));
            }
        }
        Metrics {
            inner: Arc::new(Inner {
                rollout_state,
                rollout_promotions,
                rollout_halts,
                registry: Mutex::new(registry),
                streams,
                streams_opened,
                responses,
                resources_sent,
                bytes_sent,
                acks,
                nacks,
                ack_latency,
                reloads,
                tls_reloads,
                resources,
                generation,
                source_healthy,
                source_revision,
            }),
        }
    }

    /// Counts a load of the source (after the first).
    pub fn reload(&self, result: Reload) {
        let result = result.label();
        self.inner
            .reloads
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
    }

    /// Counts a read of the TLS files after they changed: `applied`, or not (the previous
    /// certificate kept).
    pub(crate) fn tls_reload(&self, applied: bool) {
        let result = if applied { "applied" } else { "rejected" };
        self.inner
            .tls_reloads
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
    }

    /// Sets the gated rollout's state (see [`crate::rollout::State::name`]).
    pub fn rollout_state(&self, state: &str) {
        for s in ROLLOUT_STATES {
            self.inner
                .rollout_state
                .get_or_create(&vec![("state", s.to_owned())])
                .set(i64::from(s == state));
        }
    }

    /// Counts a promotion of a rollout.
    pub fn rollout_promoted(&self) {
        self.inner.rollout_promotions.inc();
    }

    /// Counts a halt of a rollout.
    pub fn rollout_halted(&self) {
        self.inner.rollout_halts.inc();
    }

    /// Sets whether the source can be read and watched.
    pub fn set_source_healthy(&self, healthy: bool) {
        self.inner.source_healthy.set(i64::from(healthy));
    }

    /// Sets the source's revision of the last change applied (an etcd revision).
    pub fn set_source_revision(&self, revision: i64) {
        self.inner.source_revision.set(revision);
    }

    /// The metrics in the OpenMetrics text format ([`CONTENT_TYPE`]), with the store's
    /// resources counted from `snapshot`.
    pub fn encode(&self, snapshot: &Snapshot) -> String {
        let i = &self.inner;
        i.resources.clear();
        for t in snapshot.types() {
            i.resources
                .get_or_create(&type_label(t.type_url()))
                .set(i64::try_from(t.len()).unwrap_or(i64::MAX));
            // The type's counters, at 0 until a client asks for it.
            let _ = self.for_type(t.type_url());
        }
        i.generation
            .set(i64::try_from(snapshot.generation()).unwrap_or(i64::MAX));
        let mut text = String::new();
        let registry = i.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing to a String does not fail.
        let _ = encode(&mut text, &registry);
        text
    }

    /// Adds series of an embedder's (a source's, such as the relay's) to these metrics:
    /// `collect` is called on each scrape and gives each series' current value. Their names are
    /// prefixed `xdsd_` as the server's own, and a counter's suffixed `_total`; a name must not
    /// be one of the server's (nor given twice).
    pub fn add_series(&self, collect: impl Fn() -> Vec<MetricSeries> + Send + Sync + 'static) {
        let mut registry = self
            .inner
            .registry
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        registry.register_collector(Box::new(Extra(Box::new(collect))));
    }

    fn stream_labels(flavor: &str, ads: bool) -> Labels {
        vec![
            ("flavor", flavor.to_ascii_lowercase()),
            ("service", if ads { "ads" } else { "per_type" }.to_owned()),
        ]
    }

    pub(crate) fn stream_opened(&self, flavor: &str, ads: bool) {
        let labels = Metrics::stream_labels(flavor, ads);
        self.inner.streams.get_or_create(&labels).inc();
        self.inner.streams_opened.get_or_create(&labels).inc();
    }

    pub(crate) fn stream_closed(&self, flavor: &str, ads: bool) {
        let labels = Metrics::stream_labels(flavor, ads);
        self.inner.streams.get_or_create(&labels).dec();
    }

    /// The metrics of one type, labelled `label`: taken once per stream and type, so that
    /// counting a push or an answer looks nothing up.
    pub(crate) fn for_type(&self, label: &str) -> TypeMetrics {
        let labels = type_label(label);
        let i = &self.inner;
        TypeMetrics {
            responses: i.responses.get_or_create_owned(&labels),
            resources_sent: i.resources_sent.get_or_create_owned(&labels),
            bytes_sent: i.bytes_sent.get_or_create_owned(&labels),
            acks: i.acks.get_or_create_owned(&labels),
            nacks: i.nacks.get_or_create_owned(&labels),
            ack_latency: i.ack_latency.get_or_create_owned(&labels),
        }
    }
}

/// One series an embedder adds to the server's metrics ([`Metrics::add_series`]): a name
/// (without the `xdsd_` prefix), its help text (written as given: end it with a period as the
/// server's own) and its value now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricSeries {
    name: &'static str,
    help: &'static str,
    value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Gauge(i64),
    Counter(u64),
    /// A gauge per value of one label.
    Gauges(&'static str, Vec<(String, i64)>),
}

impl MetricSeries {
    /// A gauge: a value that goes up and down.
    pub fn gauge(name: &'static str, help: &'static str, value: i64) -> MetricSeries {
        MetricSeries {
            name,
            help,
            value: Value::Gauge(value),
        }
    }

    /// A counter: a total that only grows (named with `_total`).
    pub fn counter(name: &'static str, help: &'static str, value: u64) -> MetricSeries {
        MetricSeries {
            name,
            help,
            value: Value::Counter(value),
        }
    }

    /// A gauge per value of the label `label` (`name{label="value"} n`), under one name: an
    /// empty `values` writes the name's help and type only.
    pub fn gauges(
        name: &'static str,
        help: &'static str,
        label: &'static str,
        values: Vec<(String, i64)>,
    ) -> MetricSeries {
        MetricSeries {
            name,
            help,
            value: Value::Gauges(label, values),
        }
    }
}

/// The series an embedder added, read on each scrape.
struct Extra(Box<dyn Fn() -> Vec<MetricSeries> + Send + Sync>);

impl std::fmt::Debug for Extra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Extra")
    }
}

impl Collector for Extra {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for series in (self.0)() {
            match series.value {
                Value::Gauge(v) => {
                    let metric = ConstGauge::new(v);
                    let e = encoder.encode_descriptor(
                        series.name,
                        series.help,
                        None,
                        MetricType::Gauge,
                    )?;
                    metric.encode(e)?;
                }
                Value::Counter(v) => {
                    let metric = ConstCounter::new(v);
                    let e = encoder.encode_descriptor(
                        series.name,
                        series.help,
                        None,
                        MetricType::Counter,
                    )?;
                    metric.encode(e)?;
                }
                Value::Gauges(label, values) => {
                    let mut e = encoder.encode_descriptor(
                        series.name,
                        series.help,
                        None,
                        MetricType::Gauge,
                    )?;
                    for (value, n) in values {
                        let labels = [(label, value)];
                        ConstGauge::new(n).encode(e.encode_family(&labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The metrics of one type URL (see [`Metrics::for_type`]).
#[derive(Clone, Debug)]
pub(crate) struct TypeMetrics {
    responses: Counter,
    resources_sent: Counter,
    bytes_sent: Counter,
    acks: Counter,
    nacks: Counter,
    ack_latency: Histogram,
}

impl TypeMetrics {
    pub(crate) fn sent(&self, resources: usize, bytes: usize) {
        self.responses.inc();
        self.resources_sent.inc_by(resources as u64);
        self.bytes_sent.inc_by(bytes as u64);
    }

    pub(crate) fn answered(&self, ack: bool, latency: Option<Duration>) {
        if ack {
            self.acks.inc();
        } else {
            self.nacks.inc();
        }
        if let Some(latency) = latency {
            self.ack_latency.observe(latency.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Change, ResourceInput, Store};
    use crate::types::CLUSTER_LOAD_ASSIGNMENT;

    #[test]
    fn every_counter_s_known_series_exist_at_zero_from_the_start() {
        let store = Store::new();
        let text = Metrics::new().encode(&store.snapshot());
        for line in [
            r#"xdsd_reloads_total{result="applied"} 0"#,
            r#"xdsd_reloads_total{result="unchanged"} 0"#,
            r#"xdsd_reloads_total{result="rejected"} 0"#,
            r#"xdsd_streams_opened_total{flavor="sotw",service="ads"} 0"#,
            r#"xdsd_streams_opened_total{flavor="sotw",service="per_type"} 0"#,
            r#"xdsd_streams_opened_total{flavor="delta",service="ads"} 0"#,
            r#"xdsd_streams_opened_total{flavor="delta",service="per_type"} 0"#,
            r#"xdsd_connected_streams{flavor="delta",service="per_type"} 0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
        assert!(!text.contains("xdsd_nacks_total{"), "no type yet:\n{text}");
    }

    #[test]
    fn an_embedder_s_series_are_read_on_each_scrape_with_the_server_s_prefix() {
        let store = Store::new();
        let metrics = Metrics::new();
        let value = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let read = value.clone();
        metrics.add_series(move || {
            let v = read.load(std::sync::atomic::Ordering::Relaxed);
            vec![
                MetricSeries::gauge("extra_up", "Whether it is up.", v),
                MetricSeries::counter("extra_events", "Events.", 7),
                MetricSeries::gauges(
                    "extra_on",
                    "Streams on each server.",
                    "address",
                    vec![("a:1".to_owned(), v), ("b:2".to_owned(), 1 - v)],
                ),
            ]
        });
        let text = metrics.encode(&store.snapshot());
        for line in [
            "# TYPE xdsd_extra_up gauge",
            "# HELP xdsd_extra_up Whether it is up.",
            "xdsd_extra_up 0",
            "xdsd_extra_events_total 7",
            "# TYPE xdsd_extra_on gauge",
            r#"xdsd_extra_on{address="a:1"} 0"#,
            r#"xdsd_extra_on{address="b:2"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
        assert_eq!(text.lines().last(), Some("# EOF"), "{text}");
        value.store(1, std::sync::atomic::Ordering::Relaxed);
        let text = metrics.encode(&store.snapshot());
        assert!(text.lines().any(|l| l == "xdsd_extra_up 1"), "{text}");
        assert!(
            text.lines()
                .any(|l| l == r#"xdsd_extra_on{address="a:1"} 1"#),
            "{text}"
        );
        assert_eq!(
            text.matches("# TYPE xdsd_extra_on gauge").count(),
            1,
            "one family: {text}"
        );
    }

    #[test]
    fn a_type_s_counters_exist_at_zero_once_the_store_holds_it() {
        let store = Store::new();
        let metrics = Metrics::new();
        let nacks = format!(r#"xdsd_nacks_total{{type_url="{CLUSTER_LOAD_ASSIGNMENT}"}} 0"#);
        assert!(!metrics.encode(&store.snapshot()).contains(&nacks));
        store
            .apply([Change::Set(ResourceInput::new(
                CLUSTER_LOAD_ASSIGNMENT,
                "a",
                bytes::Bytes::from_static(b"a"),
            ))])
            .unwrap();
        let text = metrics.encode(&store.snapshot());
        for family in [
            "nacks",
            "acks",
            "responses",
            "resources_sent",
            "response_bytes",
        ] {
            let line = format!(r#"xdsd_{family}_total{{type_url="{CLUSTER_LOAD_ASSIGNMENT}"}} 0"#);
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
    }
}
