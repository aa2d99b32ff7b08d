//! The same content always encodes to the same bytes, so its content-hash version is stable.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use prost::Message;

use crate::support::parse;

const CLUSTER_WITH_MAPS: &str = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: meta
connect_timeout: 1s
metadata:
  filter_metadata:
    a: { one: 1, two: 2, three: 3, four: 4, five: 5, six: 6 }
    b: { x: "y", nested: { p: 1, q: 2, r: 3, s: 4 } }
    c: { k: true }
    d: { list: [1, 2, 3] }
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config: { http2_protocol_options: {} }
"#;

#[test]
fn map_fields_encode_the_same_every_time() {
    let first = parse("c.yaml", CLUSTER_WITH_MAPS)[0].value.clone();
    for _ in 0..20 {
        assert_eq!(
            parse("c.yaml", CLUSTER_WITH_MAPS)[0].value,
            first,
            "map entry order must not vary"
        );
    }
    let cluster = Cluster::decode(first).unwrap();
    let meta = cluster.metadata.unwrap();
    assert_eq!(meta.filter_metadata.len(), 4);
    assert_eq!(meta.filter_metadata["a"].fields.len(), 6);
    assert!(cluster
        .typed_extension_protocol_options
        .contains_key("envoy.extensions.upstreams.http.v3.HttpProtocolOptions"));
}

#[test]
fn maps_inside_any_payloads_encode_the_same_every_time() {
    let text = r#"
"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: l
address: { socket_address: { address: 127.0.0.1, port_value: 1 } }
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: s
      route_config:
        name: r
        virtual_hosts:
        - name: v
          domains: ["*"]
          metadata: { filter_metadata: { a: { x: 1 }, b: { y: 2 }, c: { z: 3 }, d: { w: 4 } } }
      http_filters:
      - name: envoy.filters.http.router
        typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
"#;
    let first = parse("l.yaml", text)[0].value.clone();
    for _ in 0..20 {
        assert_eq!(parse("l.yaml", text)[0].value, first);
    }
    assert_eq!(Listener::decode(first).unwrap().name, "l");
}
