//! How to reach etcd and what to read there.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default largest value of one key: 32 MiB, like the directory source's `--max-file-bytes`.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 32 * 1024 * 1024;

/// The default largest number of operations in one push transaction: etcd's own default for
/// `--max-txn-ops` (128). The marker key every push writes counts as one.
pub const DEFAULT_MAX_TXN_OPS: usize = 128;

/// Where etcd is, how to authenticate to it, and which prefix holds the resources.
///
/// Built with [`EtcdOptions::new`] and the `with_*` setters:
///
/// ```
/// use std::time::Duration;
/// use xdsd_etcd::EtcdOptions;
///
/// let options = EtcdOptions::new(["https://10.0.0.1:2379", "https://10.0.0.2:2379"], "/xdsd/")
///     .with_ca("/etc/xdsd/etcd-ca.pem")
///     .with_client_cert("/etc/xdsd/etcd.pem", "/etc/xdsd/etcd-key.pem")
///     .with_connect_timeout(Duration::from_secs(3));
/// assert_eq!(options.prefix(), "/xdsd/");
/// ```
#[derive(Clone)]
pub struct EtcdOptions {
    pub(crate) endpoints: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) ca: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
    pub(crate) user: Option<(String, String)>,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) keep_alive: (Duration, Duration),
    pub(crate) max_value_bytes: usize,
    pub(crate) max_txn_ops: usize,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) capacity: usize,
}

impl EtcdOptions {
    /// Options for the etcd cluster at `endpoints` (URLs such as `http://127.0.0.1:2379` or
    /// `https://etcd-0:2379`; a bare `host:port` is `http`, or `https` once a CA or client
    /// certificate is set) and the resources under `prefix` (e.g. `/xdsd/`; a key `/xdsd/a.yaml`
    /// is the resource file `a.yaml`). Every other setting has a default, see the setters.
    pub fn new(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        prefix: impl Into<String>,
    ) -> EtcdOptions {
        EtcdOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: prefix.into(),
            ca: None,
            cert: None,
            key: None,
            user: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            keep_alive: (Duration::from_secs(10), Duration::from_secs(5)),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_txn_ops: DEFAULT_MAX_TXN_OPS,
            backoff: (Duration::from_millis(100), Duration::from_secs(5)),
            capacity: 16,
        }
    }

    /// Verifies etcd's server certificate with the CA certificates (PEM) in `path` rather than
    /// trusting nothing: TLS to etcd needs it (a system bundle such as
    /// `/etc/ssl/certs/ca-certificates.crt` works too).
    pub fn with_ca(mut self, path: impl Into<PathBuf>) -> EtcdOptions {
        self.ca = Some(path.into());
        self
    }

    /// Presents the client certificate chain `cert` with its private key `key` (PEM files) to
    /// etcd: mutual TLS (etcd's `--client-cert-auth`).
    pub fn with_client_cert(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> EtcdOptions {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }

    /// Authenticates as etcd user `user` with `password` (etcd's own users, `etcdctl user add`).
    /// The password is never printed (not even by `Debug`).
    pub fn with_user(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> EtcdOptions {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// How long one TCP (and TLS) connection attempt to an endpoint may take. Default 5 s.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> EtcdOptions {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request (a page of a read, a transaction, the creation of a watch) may wait
    /// for etcd's answer before it counts as unreachable. Default 30 s.
    pub fn with_request_timeout(mut self, timeout: Duration) -> EtcdOptions {
        self.request_timeout = timeout;
        self
    }

    /// HTTP/2 keep-alive pings every `interval`, the connection dropped when one is not answered
    /// within `timeout`: how a watch notices an etcd that vanished without closing the
    /// connection. Default 10 s and 5 s.
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> EtcdOptions {
        self.keep_alive = (interval, timeout);
        self
    }

    /// The largest value of one key, in bytes ([`DEFAULT_MAX_VALUE_BYTES`] by default): a larger
    /// value is not handed over but reported as [`KeyChange::Rejected`](crate::KeyChange) (or in
    /// [`Snapshot::rejected`](crate::Snapshot)), and [`Etcd::plan_push`](crate::Etcd) refuses it.
    pub fn with_max_value_bytes(mut self, bytes: usize) -> EtcdOptions {
        self.max_value_bytes = bytes.max(1);
        self
    }

    /// The largest number of operations one push may write in its transaction (puts, deletes and
    /// the marker key); it must not exceed the etcd cluster's `--max-txn-ops` (etcd's default,
    /// and ours: [`DEFAULT_MAX_TXN_OPS`]). A larger push is refused before anything is sent.
    pub fn with_max_txn_ops(mut self, ops: usize) -> EtcdOptions {
        self.max_txn_ops = ops.max(1);
        self
    }

    /// The watch's reconnection delays: the first retry after about `min`, each next one twice
    /// as late up to `max`, each delay drawn between half and all of it (jitter). Default 100 ms
    /// and 5 s.
    pub fn with_backoff(mut self, min: Duration, max: Duration) -> EtcdOptions {
        self.backoff = (min, max.max(min));
        self
    }

    /// How many events a [`Watch`](crate::Watch) holds for a consumer that has not taken them
    /// yet; when full, the watch stops reading from etcd until the consumer catches up. Default
    /// 16.
    pub fn with_event_capacity(mut self, events: usize) -> EtcdOptions {
        self.capacity = events.max(1);
        self
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The prefix whose keys are the resources.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The CA file, if any.
    pub fn ca(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The client certificate and key files, if any.
    pub fn client_cert(&self) -> Option<(&Path, &Path)> {
        Some((self.cert.as_deref()?, self.key.as_deref()?))
    }

    /// The etcd user name, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_ref().map(|(user, _)| user.as_str())
    }

    /// The largest value of one key, in bytes.
    pub fn max_value_bytes(&self) -> usize {
        self.max_value_bytes
    }

    /// The largest number of operations of one push transaction.
    pub fn max_txn_ops(&self) -> usize {
        self.max_txn_ops
    }

    /// The endpoints joined with commas, for messages.
    pub(crate) fn where_(&self) -> String {
        self.endpoints.join(",")
    }

    /// Whether TLS is configured.
    pub(crate) fn tls(&self) -> bool {
        self.ca.is_some() || self.cert.is_some()
    }
}

impl fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("user", &self.user())
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("keep_alive", &self.keep_alive)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("max_txn_ops", &self.max_txn_ops)
            .field("backoff", &self.backoff)
            .field("capacity", &self.capacity)
            .finish()
    }
}
