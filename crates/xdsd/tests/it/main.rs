//! xdsd's integration tests, one binary: the real binary (`CARGO_BIN_EXE_xdsd`), real Envoy 1.40
//! and real gRPC clients over loopback, a module per subject, the shared harness in `support`.

mod support;

mod admin_config;
mod bad_directory;
mod cli_check;
mod cli_render;
mod envoy_ads;
mod envoy_churn;
mod envoy_csds;
mod envoy_delta;
mod envoy_files;
mod envoy_git;
mod envoy_leds;
mod envoy_mbb;
mod envoy_per_type;
mod envoy_rollout;
mod envoy_tls;
mod envoy_ttl;
mod envoy_variants;
mod envoy_vhds;
mod etcd;
mod etcd_rollout;
mod examples_basic;
mod get;
mod grpc_proxyless;
mod harness;
mod history;
mod hostile_files;
mod install;
mod lifecycle;
mod max_connection_age;
mod missing_directory;
mod references;
mod relay;
mod replicas;
mod rest;
mod serve_source;
mod sizes;
mod slow_clients;
mod status_cli;
mod status_page;
mod status_reconnect;
mod status_rollout;
mod watch;
mod write_files;
