//! The per-type state machine of a flavor (SotW or delta), as the session drives it: one per
//! type on a stream. What both flavors keep (the type, the wildcard, the parameter sets, what is
//! owed, the latest response, the encoding and size limit) is the subscription core
//! ([`Core`]); the trait's setters and getters of it are provided once, here. The rest is each
//! flavor's own: its messages, what a request changes, what a response carries.

use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::ResourceLocator;

use super::node::ClientNode;
use super::subscription::Core;
use super::{Nonce, NonceGen, ParamSetId, RequestKind, Subscribe, SubscriptionChange, Text, Views};
use crate::store::{Resource, TypeSnapshot};

/// What the session needs of a flavor's per-type state machine.
pub trait Machine: Send + 'static {
    /// The request message it reads.
    type Request: Send + 'static;
    /// The response it produces.
    type Response: Send;
    /// The flavor's name, for logs and metrics.
    const NAME: &'static str;

    /// A machine for `type_url`, nothing subscribed.
    fn new(type_url: Arc<str>) -> Self;
    /// The subscription core it keeps.
    #[doc(hidden)]
    fn core(&self) -> &Core;
    /// The subscription core it keeps, to change.
    #[doc(hidden)]
    fn core_mut(&mut self) -> &mut Core;

    /// Its type URL.
    fn type_url(&self) -> &Arc<str> {
        &self.core().type_url
    }
    /// Resources go out named by `resource_name` from now on (xRFC TP2 clients), and delta's
    /// removals by `removed_resource_names`.
    fn set_named(&mut self, named: bool) {
        self.core_mut().encoding.named = named;
    }
    /// Responses larger than this are split into parts where the protocol allows it (delta,
    /// and SotW types but the full-state ones: listeners, clusters, scoped routes, whose every
    /// response must hold every resource).
    fn set_max_response_bytes(&mut self, bytes: usize) {
        self.core_mut().max_response_bytes = bytes;
    }
    /// Resources go out with their TTLs (a client that takes them; in SotW, wrapped in
    /// `Resource`).
    fn set_ttl(&mut self, ttl: bool) {
        self.core_mut().encoding.ttl = ttl;
    }
    /// Whether responses carry TTLs (`set_ttl`).
    fn ttl(&self) -> bool {
        self.core().encoding.ttl
    }
    /// Whether the client is subscribed to every resource of the type.
    fn is_wildcard(&self) -> bool {
        self.core().wildcard.is_on()
    }
    /// The version of the latest response sent, if any.
    fn last_version(&self) -> Option<&Arc<str>> {
        self.core().last_version.as_ref()
    }

    /// The size of a response over the size limit that could not be split, the first time.
    fn oversized(response: &Self::Response) -> Option<usize>;
    /// Whether resources go out with their TTLs to this client.
    fn takes_ttl(node: &ClientNode) -> bool;
    /// The request's node as received, encoded (empty without one): decoded only when it
    /// differs from the session's (Envoy repeats it on every request).
    fn node(request: &Self::Request) -> &[u8];
    /// The request's type URL.
    fn request_type_url(request: &Self::Request) -> &Text;
    /// (subscribe, unsubscribe) resource locators of a request.
    fn locators(request: &Self::Request) -> (&[ResourceLocator], &[ResourceLocator]);
    /// How many resources a reconnecting client says it already has.
    fn initial_versions(request: &Self::Request) -> usize;
    /// (version, resources, removed names, nonce) of a response, for logs.
    fn describe(response: &Self::Response) -> (&str, usize, usize, Nonce);
    /// The resources of a response that are new or changed for the client.
    fn updated(response: &Self::Response) -> &[Arc<Resource>];
    /// Every resource a response carries with a TTL (renewals included).
    fn with_ttl(response: &Self::Response) -> Vec<Arc<Resource>>;

    /// Takes in a request: how it relates to the responses sent, and what it changed of the
    /// subscription. Its plain names use `subscribe.default`; `subscribe.locators` and
    /// `unsubscribe` are its resource locators, resolved to parameter sets by the session.
    fn handle(
        &mut self,
        request: &Self::Request,
        subscribe: &Subscribe<'_>,
        unsubscribe: &[(String, ParamSetId)],
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange);
    /// Records names the store changed (added, modified or removed): owed to the client if it
    /// holds or asks for them.
    fn mark_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>);
    /// Told that `count` changed names (repeats included) are coming: true when the machine
    /// does not need them one by one (`mark_changed` is then not called).
    fn skips_changes(&mut self, _count: usize) -> bool {
        false
    }
    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    fn resend(&mut self, name: &Arc<str>);
    /// Renews the TTL of `name` with the next response, if the client holds it.
    fn heartbeat(&mut self, name: &Arc<str>);
    /// How many keys (name and parameter set) are subscribed.
    fn key_count(&self) -> usize;
    /// Whether a response is owed.
    fn has_pending(&self) -> bool;
    /// Whether the next response is the rest of one that goes out in parts.
    fn in_parts(&self) -> bool;
    /// The next response owed, if any, read from `views` (the store as this client sees it).
    fn poll_response(&mut self, views: &Views, nonces: &mut NonceGen) -> Option<Self::Response>;
    /// Whether the client was sent `name` as the store holds it now.
    fn has_sent(&self, name: &Arc<str>, views: &Views) -> bool;
    /// The subscribed resources the client was not sent as the store holds them now.
    fn unsent(&self, views: &Views) -> Vec<Arc<Resource>>;

    /// Whether anything it keeps is keyed by parameter set `pid`: its subscription (names,
    /// wildcard, keys owed or waiting) or the flavor's own record ([`Machine::holds_param_set`]).
    /// A parameter set no machine of a session uses is reclaimed by the session.
    fn uses_param_set(&self, pid: ParamSetId) -> bool {
        let core = self.core();
        core.pids.contains(&pid)
            || core.wildcard.pid() == Some(pid)
            || core.forced.iter().any(|k| k.1 == pid)
            || core.waiting.keys().any(|k| k.1 == pid)
            // A response going out in parts is read with the sets it began with.
            || self.in_parts()
            || self.holds_param_set(pid)
    }
    /// Whether the flavor's own record (what the client holds, keys to check again) has a key
    /// of parameter set `pid`, beyond the subscription core.
    fn holds_param_set(&self, _pid: ParamSetId) -> bool {
        false
    }
}
