//! The relay's source against an in-process xdsd upstream on 127.0.0.1 (the xDS client's test
//! server): the upstream gone and back, a resource the relay cannot read; a name the upstream
//! answers late, answered downstream once and never told missing; TP2 resource locators
//! subscribed upstream as its plain name on the stream of its parameters; a legacy upstream that
//! varies a name's body by node, each group served its own, and a group store's refused change
//! reported; a wildcard client never sent the upstream's answer to names asked before the
//! wildcard.

mod legacy;
mod locators;
mod pending;
mod upstream;
mod wildcard;

use std::net::SocketAddr;
use std::sync::Arc;

use xdsd_core::store::ReferencePolicy;
use xdsd_core::{Feed, Source, Store, XdsServer};
use xdsd_relay::RelayObserver;

/// Serves what `source` (a relay's source, or one wrapping it) feeds, as `xdsd relay` does: a
/// store of its own (references not checked, an empty state allowed), the relay's `observer`
/// watching the server and picking each group's store, on 127.0.0.1. The store and the address
/// (both serve until the test ends).
async fn serve_relay<S: Source + Send + 'static>(
    mut source: S,
    observer: RelayObserver,
) -> (Store, SocketAddr) {
    let store = Store::with_reference_policy(ReferencePolicy::off());
    let feed = Feed::new(store.clone()).allow_empty(true);
    feed.first_load(&mut source).await.expect("first load");
    tokio::spawn(feed.follow(source));
    let observer = Arc::new(observer);
    let server = XdsServer::builder(store.clone())
        .observer(observer.clone())
        .store_picker(observer)
        .build()
        .expect("a server without TLS builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(server.serve(listener, std::future::pending::<()>()));
    (store, addr)
}
