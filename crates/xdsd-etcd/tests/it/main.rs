//! xdsd-etcd's integration tests, one binary: a real etcd (`XDSD_ETCD`, else `/usr/bin/etcd`)
//! started per test on 127.0.0.1 with OS-picked ports and its own data directory.

mod auth;
mod harness;
mod history;
mod load;
mod push;
mod rollout;
mod source;
mod tls;
mod watch;
