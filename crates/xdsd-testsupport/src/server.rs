//! An in-process xdsd on 127.0.0.1 (port from the OS), and waiting for the client's events.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
use prost::Message;
use xdsd_client::{Event, Events};
use xdsd_core::params::Constraints;
use xdsd_core::{Change, ResourceInput, Store, XdsServer};

/// How long a test waits for an event.
pub const WAIT: Duration = Duration::from_secs(20);

/// An xdsd serving a store of its own on 127.0.0.1, stopped by [`Server::stop`] or when dropped.
pub struct Server {
    /// The store it serves.
    pub store: Store,
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Plaintext gRPC on a port from the OS.
    pub async fn start() -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        Server::serve(Store::new(), listener).await
    }

    /// Plaintext gRPC on a port from the OS, serving `store` (another server's, for a second
    /// replica of the same content).
    pub async fn start_with(store: Store) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        Server::serve(store, listener).await
    }

    /// Serves TLS with `tls`.
    pub async fn start_tls(tls: xdsd_core::TlsOptions) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let store = Store::new();
        let server = XdsServer::builder(store.clone())
            .tls(tls)
            .build()
            .expect("TLS options load");
        Server::serve_with(store, listener, server).await
    }

    async fn serve(store: Store, listener: tokio::net::TcpListener) -> Server {
        let server = XdsServer::builder(store.clone())
            .build()
            .expect("a server without TLS builds");
        Server::serve_with(store, listener, server).await
    }

    async fn serve_with(
        store: Store,
        listener: tokio::net::TcpListener,
        server: XdsServer,
    ) -> Server {
        let addr = listener.local_addr().expect("local address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .serve(listener, async move {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
        });
        Server {
            store,
            addr,
            stop: Some(stop),
            task,
        }
    }

    /// Stops serving (every stream and connection ends) and serves the same store on the same
    /// address again.
    pub async fn restart(mut self) -> Server {
        let (store, addr) = (self.store.clone(), self.addr);
        self.stop_now().await;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind again");
        Server::serve(store, listener).await
    }

    async fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(WAIT, &mut self.task)
            .await
            .expect("serve returns")
            .expect("serve task");
    }

    /// Stops the server and waits for its task.
    pub async fn stop(mut self) {
        self.stop_now().await;
    }

    /// Sets one resource.
    pub fn set(&self, input: ResourceInput) {
        self.store
            .apply([Change::Set(input)])
            .expect("store change");
    }

    /// Removes one resource.
    pub fn remove(&self, type_url: &str, name: &str) {
        self.store
            .apply([Change::Remove {
                type_url: type_url.into(),
                name: name.into(),
            }])
            .expect("store change");
    }
}

/// A cluster `name`, its `alt_stat_name` a tag that tells versions apart.
pub fn cluster(name: &str, tag: &str) -> ResourceInput {
    ResourceInput::new(xdsd_client::types::CLUSTER, name, cluster_bytes(name, tag))
}

/// The encoded cluster of [`cluster`].
pub fn cluster_bytes(name: &str, tag: &str) -> Bytes {
    Cluster {
        name: name.into(),
        alt_stat_name: tag.into(),
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

/// A `ClusterLoadAssignment` for `name`, tagged with one named endpoint `tag`.
pub fn endpoints(name: &str, tag: &str) -> ResourceInput {
    let mut cla = ClusterLoadAssignment {
        cluster_name: name.into(),
        ..Default::default()
    };
    cla.named_endpoints.insert(tag.into(), Default::default());
    ResourceInput::new(
        xdsd_client::types::CLUSTER_LOAD_ASSIGNMENT,
        name,
        cla.encode_to_vec().into(),
    )
}

/// A RTDS `Runtime` layer `name`.
pub fn runtime(name: &str) -> ResourceInput {
    let runtime = envoy_types::pb::envoy::service::runtime::v3::Runtime {
        name: name.into(),
        ..Default::default()
    };
    ResourceInput::new(
        xdsd_client::types::RUNTIME,
        name,
        runtime.encode_to_vec().into(),
    )
}

/// `input` as a TP2 variant with constraints `c`.
pub fn variant(input: ResourceInput, c: DynamicParameterConstraints) -> ResourceInput {
    input.with_constraints(Some(Constraints::new(c).expect("valid constraints")))
}

/// The TP2 constraint `env` = `value`.
pub fn env_is(value: &str) -> DynamicParameterConstraints {
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
        SingleConstraint, Type,
    };
    DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: Some(ConstraintType::Value(value.into())),
        })),
    }
}

/// The next event for which `pick` returns something, the events before it skipped.
pub async fn wait_for<T>(events: &mut Events, mut pick: impl FnMut(&Event) -> Option<T>) -> T {
    let found = tokio::time::timeout(WAIT, async {
        loop {
            match events.next().await {
                Some(event) => {
                    if let Some(t) = pick(&event) {
                        return t;
                    }
                }
                None => panic!("the driver stopped"),
            }
        }
    })
    .await;
    found.expect("the event came in time")
}

/// The next event other than Connected and WildcardAnswered (neither says what changed), or a
/// panic after WAIT.
pub async fn next_news(events: &mut Events) -> Event {
    wait_for(events, |e| {
        (!matches!(e, Event::Connected | Event::WildcardAnswered { .. })).then(|| e.clone())
    })
    .await
}

/// The names of an update's added and changed resources.
pub fn update_names(event: &Event) -> (Vec<String>, Vec<String>) {
    match event {
        Event::Update(u) => (
            u.added.iter().map(|r| r.name.clone()).collect(),
            u.changed.iter().map(|r| r.name.clone()).collect(),
        ),
        other => panic!("an update: {other:?}"),
    }
}
