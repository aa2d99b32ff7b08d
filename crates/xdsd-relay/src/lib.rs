//! `xdsd relay`: a caching xDS proxy (xRFC TP2's third kind of xDS node) as a source of xdsd's
//! store.
//!
//! The relay is xdsd downstream and an xDS client upstream, with no second server: its
//! [`RelaySource`] feeds the store that an ordinary [`xdsd_core::XdsServer`] serves, and its
//! [`RelayObserver`], an observer of that server's streams, tells the source what the downstream
//! clients ask for. The first downstream stream asking for a name of a type (its wildcard, or a TP2
//! resource locator, subscribed upstream as a locator) subscribes it upstream, on the upstream
//! stream of the client's group (see [`group`]); the last one leaving, or no longer asking,
//! unsubscribes it after a linger ([`demand`]); until the upstream answers it, the name is
//! pending in the store ([`xdsd_core::store::PendingNames`]), so that its clients are answered
//! with the upstream's answer, never told first that it does not exist. What the upstream sends
//! is checked ([`validate`]: a resource the relay cannot read is NACKed upstream and the last
//! good one kept), cached with its TP2 constraints and TTL ([`cache`]), and committed to the
//! store, whose content-derived versions make two relays of one upstream answer alike. While the
//! upstream is unreachable the cache keeps being served; [`RelayMetrics`] say so, on the
//! server's `/metrics`.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use envoy_types::pb::envoy::config::core::v3::Node;
//! use xdsd_core::{Feed, Store, XdsServer};
//! use xdsd_relay::{relay, RelayOptions};
//!
//! let node = Node { id: "relay-1".into(), ..Default::default() };
//! let (mut source, observer, _metrics) =
//!     relay(RelayOptions::new(xdsd_client::Options::new("10.0.0.1:18000"), node));
//! let store = Store::with_reference_policy(xdsd_core::store::ReferencePolicy::off());
//! let feed = Feed::new(store.clone()).allow_empty(true);
//! feed.first_load(&mut source).await?;
//! let observer = std::sync::Arc::new(observer);
//! // The observer picks each client's store too (`--aggregate-by`: a store per group).
//! let server = XdsServer::builder(store)
//!     .observer(observer.clone())
//!     .store_picker(observer)
//!     .build()?;
//! tokio::spawn(feed.follow(source));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:18000").await?;
//! server.serve(listener, std::future::pending()).await?;
//! # Ok(()) }
//! ```
//!
//! docs/relay.md has the design, the failure modes and the TP2 notes.

#![warn(missing_docs)]

pub mod cache;
pub mod group;
mod metrics;
mod observer;
mod source;
mod stores;
mod table;
pub mod validate;
mod vecset;
mod want;

pub use group::{AggregateBy, GroupKey};
pub use metrics::RelayMetrics;
pub use observer::RelayObserver;
pub use source::{relay, RelayOptions, RelaySource, DEFAULT_MAX_PENDING};
pub use table::DEFAULT_LINGER;
