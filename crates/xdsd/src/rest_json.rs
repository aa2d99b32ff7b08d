//! The JSON of REST-JSON polling, through the Envoy proto descriptors: a `DiscoveryRequest` read
//! from proto3 JSON, a `DiscoveryResponse` written as proto3 JSON (its resources as `Any` with
//! `@type`, resolved in the same descriptors).

use prost::Message as _;
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor};
use xdsd_core::transport::rest::JsonCodec;
use xdsd_source::Descriptors;

const REQUEST: &str = "envoy.service.discovery.v3.DiscoveryRequest";
const RESPONSE: &str = "envoy.service.discovery.v3.DiscoveryResponse";

pub struct DescriptorJson {
    request: MessageDescriptor,
    response: MessageDescriptor,
}

impl DescriptorJson {
    pub fn new(descriptors: &Descriptors) -> anyhow::Result<DescriptorJson> {
        let get = |name: &str| {
            descriptors
                .pool()
                .get_message_by_name(name)
                .ok_or_else(|| anyhow::anyhow!("the Envoy descriptors have no {name}"))
        };
        Ok(DescriptorJson {
            request: get(REQUEST)?,
            response: get(RESPONSE)?,
        })
    }
}

impl JsonCodec for DescriptorJson {
    fn request_from_json(&self, json: &[u8]) -> Result<Vec<u8>, String> {
        let mut de = serde_json::Deserializer::from_slice(json);
        // A newer Envoy may send node fields these descriptors do not know: skipped, as a
        // protobuf decoder skips unknown fields.
        let options = DeserializeOptions::new().deny_unknown_fields(false);
        let message =
            DynamicMessage::deserialize_with_options(self.request.clone(), &mut de, &options)
                .map_err(|e| e.to_string())?;
        de.end().map_err(|e| e.to_string())?;
        Ok(message.encode_to_vec())
    }

    fn response_to_json(&self, encoded: &[u8]) -> Result<Vec<u8>, String> {
        let message =
            DynamicMessage::decode(self.response.clone(), encoded).map_err(|e| e.to_string())?;
        serde_json::to_vec(&message).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> DescriptorJson {
        DescriptorJson::new(&Descriptors::envoy().unwrap()).unwrap()
    }

    #[test]
    fn an_envoy_rest_request_reads_with_its_node_and_names() {
        let json = br#"{"versionInfo":"v1","node":{"id":"n","cluster":"c","userAgentName":"envoy",
            "someFutureField":1},"resourceNames":["a","b"],
            "typeUrl":"type.googleapis.com/envoy.config.cluster.v3.Cluster"}"#;
        let encoded = codec().request_from_json(json).unwrap();
        let request = envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest::decode(
            encoded.as_slice(),
        )
        .unwrap();
        assert_eq!(request.version_info, "v1");
        assert_eq!(request.resource_names, ["a", "b"]);
        assert_eq!(request.node.unwrap().id, "n");
    }

    #[test]
    fn malformed_json_is_an_error_not_a_panic() {
        for bad in [&b"{"[..], b"[]", b"{\"resourceNames\": 3}", b"{} trailing"] {
            assert!(
                codec().request_from_json(bad).is_err(),
                "{:?}",
                std::str::from_utf8(bad)
            );
        }
    }
}
