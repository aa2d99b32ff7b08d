//! The relay's own metrics: the upstream connection, its reconnects and NACKs, the upstream
//! subscriptions, the cache's size, the names held pending for the upstream's answer and which
//! upstream (of `--upstream A,B`) its streams are on, on the server's `/metrics`
//! ([`RelayMetrics::series`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use xdsd_core::MetricSeries;

/// The relay's metrics; cheap to clone, shared with whoever serves them.
#[derive(Debug, Clone, Default)]
pub struct RelayMetrics {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    connected: AtomicU64,
    reconnects: AtomicU64,
    rejected: AtomicU64,
    subscriptions: AtomicU64,
    streams: AtomicU64,
    entries: AtomicU64,
    pending: AtomicU64,
    expired: AtomicU64,
    /// The upstreams in the order they are tried, and the streams connected to each.
    upstreams: OnceLock<(Vec<String>, xdsd_client::ServerConnections)>,
}

impl RelayMetrics {
    /// All at zero.
    pub fn new() -> RelayMetrics {
        RelayMetrics::default()
    }

    /// Whether every upstream stream is up (`xdsd_relay_upstream_connected`, 0 or 1).
    pub fn upstream_connected(&self) -> bool {
        self.inner.connected.load(Ordering::Relaxed) == 1
    }

    /// Upstream reconnections so far (`xdsd_relay_upstream_reconnects_total`).
    pub fn upstream_reconnects(&self) -> u64 {
        self.inner.reconnects.load(Ordering::Relaxed)
    }

    /// Upstream subscriptions held (`xdsd_relay_upstream_subscriptions`).
    pub fn upstream_subscriptions(&self) -> u64 {
        self.inner.subscriptions.load(Ordering::Relaxed)
    }

    /// Upstream streams open or being opened (`xdsd_relay_upstream_streams`).
    pub fn upstream_streams(&self) -> u64 {
        self.inner.streams.load(Ordering::Relaxed)
    }

    /// Resource variants cached (`xdsd_relay_cache_entries`).
    pub fn cache_entries(&self) -> u64 {
        self.inner.entries.load(Ordering::Relaxed)
    }

    /// Upstream responses the relay NACKed (`xdsd_relay_upstream_rejected_total`).
    pub fn upstream_rejected(&self) -> u64 {
        self.inner.rejected.load(Ordering::Relaxed)
    }

    /// Names (or types) held pending for the upstream's answer now (`xdsd_relay_pending`).
    pub fn pending(&self) -> u64 {
        self.inner.pending.load(Ordering::Relaxed)
    }

    /// Names (or types) given up after `--upstream-wait` without the upstream's answer
    /// (`xdsd_relay_pending_expired_total`).
    pub fn pending_expired(&self) -> u64 {
        self.inner.expired.load(Ordering::Relaxed)
    }

    /// Reports which of `upstream`'s servers the relay's upstream streams are on
    /// (`xdsd_relay_upstream{address}`): give it the options the relay's upstream streams are
    /// started with (their [`xdsd_client::Options::connected`] is shared by the clones). Once.
    pub fn follow_upstream(&self, upstream: &xdsd_client::Options) {
        // The default's servers, then each authority's (`--upstream-for`).
        let servers = upstream
            .servers()
            .map(str::to_owned)
            .chain(upstream.authorities.values().flatten().cloned())
            .collect();
        let _ = self
            .inner
            .upstreams
            .set((servers, upstream.connected.clone()));
    }

    /// The upstream streams connected to each upstream now, in the order they are tried
    /// (empty until [`RelayMetrics::follow_upstream`]).
    pub fn upstreams(&self) -> Vec<(String, u64)> {
        match self.inner.upstreams.get() {
            Some((servers, connected)) => servers
                .iter()
                .map(|s| (s.clone(), connected.on(s)))
                .collect(),
            None => Vec::new(),
        }
    }

    pub(crate) fn set_pending(&self, pending: usize) {
        self.inner.pending.store(pending as u64, Ordering::Relaxed);
    }

    pub(crate) fn expired(&self, count: usize) {
        self.inner
            .expired
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    pub(crate) fn set_connected(&self, up: bool) {
        self.inner.connected.store(u64::from(up), Ordering::Relaxed);
    }

    pub(crate) fn reconnected(&self) {
        self.inner.reconnects.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn rejected(&self) {
        self.inner.rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_sizes(&self, subscriptions: usize, streams: usize, entries: usize) {
        self.inner
            .subscriptions
            .store(subscriptions as u64, Ordering::Relaxed);
        self.inner.streams.store(streams as u64, Ordering::Relaxed);
        self.inner.entries.store(entries as u64, Ordering::Relaxed);
    }

    /// The metrics as series of the server's metrics ([`xdsd_core::Metrics::add_series`],
    /// which prefixes `xdsd_` and suffixes a counter's name `_total`): the relay's source adds
    /// them to the metrics its feed counts in, so the relay's `/metrics` shows them.
    pub fn series(&self) -> Vec<MetricSeries> {
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut series = vec![
            MetricSeries::gauge(
                "relay_upstream_connected",
                "1 while every upstream stream is up, else 0 (the cache keeps being served).",
                i64::from(self.upstream_connected()),
            ),
            MetricSeries::counter(
                "relay_upstream_reconnects",
                "Upstream streams opened again after a loss.",
                self.upstream_reconnects(),
            ),
            MetricSeries::counter(
                "relay_upstream_rejected",
                "Upstream responses NACKed (a resource the relay cannot read).",
                self.upstream_rejected(),
            ),
            MetricSeries::gauge(
                "relay_upstream_subscriptions",
                "Upstream subscriptions held (type and name or wildcard, per upstream stream).",
                gauge(self.upstream_subscriptions()),
            ),
            MetricSeries::gauge(
                "relay_upstream_streams",
                "Upstream streams (one per group of downstream clients).",
                gauge(self.upstream_streams()),
            ),
            MetricSeries::gauge(
                "relay_cache_entries",
                "Resource variants cached and served.",
                gauge(self.cache_entries()),
            ),
            MetricSeries::gauge(
                "relay_pending",
                "Names (or types) downstream clients asked for, held pending for the upstream's answer.",
                gauge(self.pending()),
            ),
            MetricSeries::counter(
                "relay_pending_expired",
                "Names (or types) the upstream did not answer within --upstream-wait: answered with what the relay has.",
                self.pending_expired(),
            ),
        ];
        if self.inner.upstreams.get().is_some() {
            series.push(MetricSeries::gauges(
                "relay_upstream",
                "Upstream streams connected to each upstream (--upstream, in the order tried): which one the relay is on.",
                "address",
                self.upstreams()
                    .into_iter()
                    .map(|(s, n)| (s, gauge(n)))
                    .collect(),
            ));
        }
        series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_are_on_the_server_s_metrics_with_help_type_and_value() {
        let m = RelayMetrics::new();
        let server = xdsd_core::Metrics::new();
        let read = m.clone();
        server.add_series(move || read.series());
        m.set_connected(true);
        m.reconnected();
        m.set_sizes(3, 1, 7);
        let store = xdsd_core::Store::new();
        let text = server.encode(&store.snapshot());
        for line in [
            "# TYPE xdsd_relay_upstream_connected gauge",
            "xdsd_relay_upstream_connected 1",
            "xdsd_relay_upstream_reconnects_total 1",
            "xdsd_relay_upstream_subscriptions 3",
            "xdsd_relay_upstream_streams 1",
            "xdsd_relay_cache_entries 7",
            "xdsd_relay_upstream_rejected_total 0",
            "xdsd_relay_pending 0",
            "xdsd_relay_pending_expired_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
        }
        assert!(
            !text.contains("xdsd_relay_upstream{"),
            "no upstreams followed yet:\n{text}"
        );
        m.set_connected(false);
        assert!(server
            .encode(&store.snapshot())
            .lines()
            .any(|l| l == "xdsd_relay_upstream_connected 0"));
    }

    #[test]
    fn every_upstream_is_listed_with_the_streams_on_it() {
        let m = RelayMetrics::new();
        let server = xdsd_core::Metrics::new();
        let read = m.clone();
        server.add_series(move || read.series());
        let upstream = xdsd_client::Options::with_servers(["a:1", "b:2"]).expect("two upstreams");
        m.follow_upstream(&upstream);
        let store = xdsd_core::Store::new();
        let text = server.encode(&store.snapshot());
        for line in [
            "# TYPE xdsd_relay_upstream gauge",
            r#"xdsd_relay_upstream{address="a:1"} 0"#,
            r#"xdsd_relay_upstream{address="b:2"} 0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
        }
        assert_eq!(m.upstreams(), vec![("a:1".into(), 0), ("b:2".into(), 0)]);
    }
}
