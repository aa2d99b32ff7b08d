//! What operators' tools read of a running server, and how they show it: the admin HTTP API
//! (`/clients`, `/config`, `/metrics`, `/rollout` and its levers) with its status page, and the
//! fleet view of a CSDS answer — one row per client, one state per type, a gated rollout and
//! which state each client holds — that `xdsd status` and the status page share.
//!
//! The `xdsd` binary reads the server through this module only, never through the transport's
//! own modules. An embedder that brings its own admin surface needs none of it.

pub use crate::transport::admin::{
    clients_json, config_json, router, router_with_page, serve, serve_with, serve_with_page,
    AdminTls,
};
pub use crate::transport::fleet::{
    client_row, client_rows, columns, row_json, rows_json, short_type, short_version,
    split_details, ClientRow, Holds, NackInfo, ResourceRow, RolloutView, Summary, TypeRow,
    TypeState,
};
pub use crate::transport::page::{escape, PageInfo, MAX_GRAPH_NODES, PAGE_SIZE};
