//! An xDS client, for any xDS server: what a proxy with a given node would be sent.
//!
//! Two layers, as the server's:
//!
//! - [`Client`], the protocol as a sans-I/O state machine: subscriptions in ([`Client::subscribe`],
//!   [`Client::subscribe_locator`], the wildcard, [`Client::unsubscribe`]), requests out
//!   ([`Client::poll_request`]); responses ([`Client::handle_sotw`], [`Client::handle_delta`]) and
//!   time ([`Client::handle_timeout`]) in, [`Event`]s out ([`Client::poll_event`]). State of the
//!   World and delta, every type on one aggregated stream (ADS) or one stream per type; ACK, or
//!   NACK with the reason a [`Validator`] gives (what was held before is kept); xRFC TP2 dynamic
//!   parameters on the node and per subscription, variants kept with their constraints and
//!   matched by them; resume after a reconnect (`version_info`, `initial_resource_versions`) so
//!   nothing is resent; TTLs and heartbeats; the spec's does-not-exist rules (a name left out of
//!   a full-state SotW response, in delta `removed_resources`, or unanswered for
//!   [`Config::does_not_exist_timeout`]); bounds on what a server can make it hold
//!   ([`Limits`]).
//! - [`XdsClient`], a tokio driver over tonic: one connection, reconnected with exponential
//!   backoff and jitter, TLS and mutual TLS (rustls), events as a stream ([`Events`]).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use xdsd_client::{types, Config, Event, Options, XdsClient};
//! use envoy_types::pb::envoy::config::core::v3::Node;
//!
//! let node = Node { id: "node-1".into(), cluster: "edge".into(), ..Default::default() };
//! let (client, mut events) = XdsClient::start(Options::new("127.0.0.1:18000"), Config::new(node), None)?;
//! client.subscribe(types::CLUSTER, vec!["*".into()]);
//! while let Some(event) = events.next().await {
//!     if let Event::Update(update) = event {
//!         for r in update.added.iter().chain(&update.changed) {
//!             println!("{} {}", r.name, r.version);
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! docs/client.md has more.

#![warn(missing_docs)]

mod authority;
mod constraints;
mod driver;
mod machine;
pub mod types;

pub use constraints::{matches, Params};
pub use driver::{
    Events, Options, ServerConnections, StartError, Tls, XdsClient, DEFAULT_MAX_RESPONSE_BYTES,
};
pub use machine::{
    Client, Config, Event, Flavor, Key, Limits, Request, Resource, SubscribeError, Update,
    Validator, WildcardAnswer, DEFAULT_DOES_NOT_EXIST_TIMEOUT, FEATURE_RESOURCE_IN_SOTW,
    FEATURE_RESOURCE_TTL, RESOURCE_WRAPPER, WILDCARD,
};

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

/// docs/client.md, whose examples the doc tests compile.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/client.md")]
pub struct ClientDocs;
