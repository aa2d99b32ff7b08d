//! `xdsd serve`: the wiring of a source (a directory or an etcd prefix) to the store, the gRPC
//! server, the admin API, the files written for Envoy and a gated rollout, until a signal; the
//! downstream half it shares with `relay` (`serve_downstream`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tracing::{info, warn};
use xdsd_core::rollout::Rollout;
use xdsd_core::source::{Feed, Source};
use xdsd_core::store::Store;
use xdsd_core::{Metrics, ServerOptions, XdsServer, XdsServerBuilder};
use xdsd_etcd::{EtcdOptions, EtcdSource};
use xdsd_source::{Descriptors, DirectorySource};

use crate::cli::*;
use crate::files::{FileUpdates, FileWriter};
use crate::tls_args::TlsArgs;
use crate::{admin, files, memory, rest_json};

/// Where `serve` reads its resources.
pub(crate) enum ResourcesFrom {
    Directory(PathBuf),
    Etcd(Box<EtcdOptions>),
}

impl ServeArgs {
    /// The source the arguments name: exactly one of a directory and an etcd prefix.
    pub(crate) fn from(&self) -> Result<ResourcesFrom, String> {
        match (&self.resources, self.etcd.given()) {
            (Some(_), true) => Err(
                "--resources and --etcd-endpoints are exclusive: serve either a directory or an \
                 etcd prefix (XDSD_RESOURCES and XDSD_ETCD_ENDPOINTS count too)"
                    .into(),
            ),
            (None, false) => Err(
                "no resources: give --resources DIR, or --etcd-endpoints URL[,URL...] with \
                 --etcd-prefix PREFIX"
                    .into(),
            ),
            (Some(dir), false) => {
                if self.etcd.etcd_prefix.is_some() {
                    return Err("--etcd-prefix needs --etcd-endpoints".into());
                }
                Ok(ResourcesFrom::Directory(dir.clone()))
            }
            (None, true) => self
                .etcd
                .options(self.rules.max_file_bytes)
                .map(|options| ResourcesFrom::Etcd(Box::new(options))),
        }
    }
}

/// With replicas on etcd, the rollout's state is shared under the prefix (`<prefix>.rollout`):
/// a replica starting takes up the rollout in flight (the stable state as the record says, the
/// source loaded at the record's candidate revision), then shares its decisions and follows the
/// others'.
pub(crate) async fn share_rollout(
    rollout: &Arc<Rollout>,
    mut source: EtcdSource,
    options: &EtcdOptions,
) -> anyhow::Result<EtcdSource> {
    let etcd = xdsd_etcd::Etcd::connect(options)
        .await
        .context("cannot connect to etcd for the rollout's shared state")?;
    let (resume, after) = xdsd_etcd::rollout::resume(&etcd, &source)
        .await
        .context("cannot read the rollout's shared state")?;
    if let Some(resume) = resume {
        source = source.starting_at(resume.record.load_revision());
        rollout
            .resume_from(resume.record, resume.stable)
            .context("cannot load the rollout's stable state")?;
    }
    // One connection for both: the source reads and watches through it too.
    let source = source.with_connection(etcd.clone());
    let shared = xdsd_etcd::rollout::SharedRollout::start(etcd, rollout.clone(), after);
    rollout.share(Arc::new(shared));
    Ok(source)
}

impl DownstreamArgs {
    /// Binds the xDS port and the admin API's (none when off), before anything is loaded: a
    /// second process with the same flags fails here.
    pub(crate) async fn bind(
        &self,
    ) -> anyhow::Result<(tokio::net::TcpListener, Option<tokio::net::TcpListener>)> {
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .map_err(|e| bind_error(e, self.listen, "--listen"))?;
        let admin_listener = admin::bind(self.admin_listen).await?;
        Ok((listener, admin_listener))
    }

    /// The server's options these arguments set (a warning logged when make-before-break is
    /// off).
    pub(crate) fn server_options(&self) -> ServerOptions {
        ServerOptions::default()
            .max_request_bytes(self.max_request_bytes)
            .max_response_bytes(self.max_response_bytes)
            .max_names_per_stream(self.max_names_per_stream)
            .max_names(self.max_names_per_connection, self.max_names_total)
            .max_connections(self.max_connections)
            .max_streams_per_connection(self.max_streams_per_connection)
            .preface_timeout(self.preface_timeout)
            .max_connection_age(self.max_connection_age, self.max_connection_age_grace)
            .max_buffered_request_bytes(
                self.max_buffered_request_bytes,
                self.max_buffered_request_bytes_total,
            )
            .allow_plaintext_secrets(self.tls.allow_plaintext_secrets)
            .make_before_break(make_before_break(self.make_before_break))
            .ack_wait(self.ack_wait)
            .rest_hold(self.rest_hold)
            .max_held_polls(self.max_held_polls)
    }

    /// Where the server listens, from the listeners [`DownstreamArgs::bind`] made; `history`
    /// is the etcd prefix served, if any, and `peers` the other replicas of it (`--peers`).
    pub(crate) fn downstream(
        &self,
        (listener, admin_listener): (tokio::net::TcpListener, Option<tokio::net::TcpListener>),
        history: Option<xdsd_etcd::EtcdOptions>,
        peers: Vec<String>,
    ) -> Downstream {
        Downstream {
            listener,
            admin_listener,
            admin_tls: self.admin_tls,
            history,
            peers,
        }
    }

    /// Returns a burst's freed memory to the system from now on, when asked to
    /// (`--release-memory`): after the first load, whose leftovers go first.
    pub(crate) fn start_releasing_memory(&self) {
        if self.release_memory == OnOff::On {
            memory::start();
        }
    }
}

pub(crate) async fn serve(args: ServeArgs, from: ResourcesFrom) -> anyhow::Result<()> {
    // Both ports first: a second xdsd with the same flags fails here, before it loads or serves
    // anything.
    let listeners = args.downstream.bind().await?;

    let descriptors = Descriptors::envoy().context("loading the Envoy proto descriptors")?;
    let store = Store::with_reference_policy(args.rules.reference_policy());
    let mut files = match &args.write_files {
        Some(out) => {
            if let ResourcesFrom::Directory(dir) = &from {
                files::check_outside(out, dir)?;
            }
            std::fs::create_dir_all(out)
                .with_context(|| format!("--write-files {}: cannot create it", out.display()))?;
            let writer = FileWriter::new(
                out.clone(),
                &file_formats(&args.write_format),
                descriptors.clone(),
            );
            let (updates, pending) = files::file_updates();
            Some((writer, updates, pending))
        }
        None => None,
    };
    let metrics = Metrics::new();
    memory::add_metrics(&metrics);
    let rollout = args.rollout.rollout(&store);
    let mut feed = match &rollout {
        Some(rollout) => Feed::new(rollout.clone()),
        None => Feed::new(store.clone()),
    }
    .metrics(metrics.clone())
    .allow_empty(args.allow_empty);
    if let Some((_, updates, _)) = &files {
        let updates: FileUpdates = updates.clone();
        feed = feed.on_applied(move |_| updates.changed());
    }
    // The admin API's `/history` reads the etcd prefix being served.
    let history = match &from {
        ResourcesFrom::Etcd(options) => Some((**options).clone()),
        ResourcesFrom::Directory(_) => None,
    };
    let mut source: Box<dyn xdsd_core::DynSource> = match from {
        ResourcesFrom::Directory(dir) => Box::new(
            DirectorySource::new(descriptors.clone(), dir, args.rules.limits())
                .incremental(args.reload == ReloadMode::Incremental),
        ),
        ResourcesFrom::Etcd(options) => {
            let mut source = EtcdSource::new(descriptors.clone(), (*options).clone());
            if let Some(rollout) = &rollout {
                source = share_rollout(rollout, source, &options).await?;
            }
            Box::new(source)
        }
    };
    feed.first_load(&mut source)
        .await
        .with_context(|| format!("cannot load resources from {}", source.describe()))?;
    // The first files, before serving; later ones from the writer's thread.
    if let Some((writer, _, _)) = files.as_mut() {
        let snapshot = store.snapshot();
        files::log_round(&writer.write_changed(&snapshot), snapshot.generation());
    }
    // What parsing the descriptors and the first load left behind is returned before serving.
    args.downstream.start_releasing_memory();
    if let Some((writer, _, pending)) = files {
        info!(
            dir = %writer.dir().display(),
            "writing discovery response files after each change"
        );
        pending.start(store.clone(), writer)?;
    }

    let addr = listeners
        .0
        .local_addr()
        .context("reading the bound address")?;
    info!("xDS gRPC server listening on {addr}");
    args.downstream.tls.log(addr);

    let options = args.downstream.server_options();
    let mut server = XdsServer::builder(store).metrics(metrics);
    if let Some(rollout) = rollout {
        server = server.rollout(rollout);
    }
    let downstream = args
        .downstream
        .downstream(listeners, history, args.peers.clone());
    serve_downstream(
        server,
        options,
        &descriptors,
        &args.downstream.tls,
        downstream,
        feed,
        source,
    )
    .await
}

/// `--make-before-break` as the server's option, with a warning when it is off (`serve` and
/// `relay`).
pub(crate) fn make_before_break(flag: OnOff) -> bool {
    if flag == OnOff::Off {
        warn!(
            "make-before-break ordering is off: a change that moves traffic between clusters may \
             fail requests while clients apply it"
        );
    }
    flag == OnOff::On
}

/// Where the downstream side listens: the xDS gRPC server, the admin API (none when off), and
/// whether the admin API takes the gRPC server's TLS (`--admin-tls`).
pub(crate) struct Downstream {
    pub(crate) listener: tokio::net::TcpListener,
    pub(crate) admin_listener: Option<tokio::net::TcpListener>,
    pub(crate) admin_tls: bool,
    /// The etcd prefix served, whose history `/history` and the status page read.
    pub(crate) history: Option<xdsd_etcd::EtcdOptions>,
    /// The other replicas (`--peers`), whose served revisions the status page shows.
    pub(crate) peers: Vec<String>,
}

/// What `serve` and `relay` share once their source is loaded: the gRPC server `builder` (its
/// store, metrics, a rollout or observers set) with `options`, REST's JSON through the Envoy
/// descriptors and the downstream TLS; `feed` following `source` (ready, gRPC health and
/// /readyz, while the source is healthy); the admin API; serving until SIGTERM or SIGINT, then
/// ending open streams within the grace period.
pub(crate) async fn serve_downstream(
    builder: XdsServerBuilder,
    options: ServerOptions,
    descriptors: &Descriptors,
    tls: &TlsArgs,
    downstream: Downstream,
    feed: Feed,
    source: Box<dyn xdsd_core::DynSource>,
) -> anyhow::Result<()> {
    let shutdown = ShutdownSignal::listen();
    let rest = rest_json::DescriptorJson::new(descriptors)?;
    let mut server = builder.options(options).rest_json(Arc::new(rest));
    if let Some(tls) = tls.options() {
        server = server.tls(tls);
    }
    let server = server.build().context("cannot set up TLS")?;
    let handle = server.handle();
    let described = source.describe();
    // Not ready from the start when the source is not healthy after its first load (a relay
    // whose upstream has not answered): the feed's first report may come after the first
    // /readyz.
    let readiness = handle.readiness();
    if !xdsd_core::DynSource::healthy(&*source) {
        readiness.set(false);
    }
    tokio::spawn(feed.ready(readiness).follow(source));
    let admin_tls = match (downstream.admin_tls, tls.options()) {
        (true, Some(options)) => Some(options),
        _ => None,
    };
    let admin = admin::start(
        downstream.admin_listener,
        admin_tls,
        handle,
        described,
        downstream.history,
        downstream.peers,
    )?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut serving = tokio::spawn(server.serve(downstream.listener, async move {
        let _ = stopped.await;
    }));
    tokio::select! {
        result = &mut serving => {
            return match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e).context("the gRPC server failed"),
                Err(e) => Err(e).context("the gRPC server task failed"),
            };
        }
        signal = shutdown.recv() => info!("{signal} received: shutting down, ending open streams"),
    }
    let _ = stop.send(());
    // `serve` returns within its grace period (SHUTDOWN_GRACE), also when a client stopped
    // reading.
    match serving.await {
        Ok(Ok(())) => info!("stopped"),
        Ok(Err(e)) => warn!("the gRPC server ended with an error while stopping: {e}"),
        Err(e) => warn!("the gRPC server task ended abnormally while stopping: {e}"),
    }
    if let Some(admin) = admin {
        admin.stop().await;
    }
    Ok(())
}

/// A listening address that cannot be bound, with the flag that sets it.
pub(crate) fn bind_error(e: std::io::Error, addr: SocketAddr, flag: &str) -> anyhow::Error {
    let why = match e.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "{addr} is already in use (another xdsd, or another program, listens there): give \
             {flag} another address, or port 0 for any free port"
        ),
        std::io::ErrorKind::AddrNotAvailable => {
            format!("{addr} is not an address of this machine: give {flag} one of its addresses")
        }
        _ => format!("{e}"),
    };
    anyhow::anyhow!("cannot listen on {addr} ({flag}): {why}")
}

/// SIGTERM and SIGINT, listened for from the moment it is made: made before the server starts,
/// so that a signal that arrives while the server starts (or while the first stream is served)
/// stops it cleanly rather than killing the process (the default action until a handler is
/// registered, which tokio does on the first poll of `ctrl_c` or `signal`).
struct ShutdownSignal {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignal {
    fn listen() -> ShutdownSignal {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let term = signal(SignalKind::terminate())
                .map_err(|e| warn!("cannot listen for SIGTERM ({e}); only SIGINT stops xdsd"))
                .ok();
            let int = signal(SignalKind::interrupt())
                .map_err(|e| warn!("cannot listen for SIGINT ({e})"))
                .ok();
            ShutdownSignal { term, int }
        }
        #[cfg(not(unix))]
        ShutdownSignal {}
    }

    /// The name of the first signal received.
    async fn recv(self) -> &'static str {
        #[cfg(unix)]
        {
            let ShutdownSignal { term, int } = self;
            async fn next(signal: Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = next(term) => "SIGTERM",
                _ = next(int) => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
