//! The JSON of REST-JSON polling, through the Envoy proto descriptors: a `DiscoveryRequest` read
//! from proto3 JSON, a `DiscoveryResponse` written as proto3 JSON (its resources as `Any` with
//! `@type`, resolved in the same descriptors).

use prost::Message as _;
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor};
use xdsd_core::JsonCodec;
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
        let value: serde_json::Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        // A misspelled field of the request itself (`resourceName` for `resourceNames`) would
        // silently turn a named request into a wildcard one: refused, as proto3 JSON parsers
        // do by default.
        if let Some(object) = value.as_object() {
            if let Some(unknown) = object.keys().find(|key| {
                self.request.get_field_by_json_name(key).is_none()
                    && self.request.get_field_by_name(key).is_none()
            }) {
                let known: Vec<String> = self
                    .request
                    .fields()
                    .map(|f| f.json_name().to_owned())
                    .collect();
                return Err(format!(
                    "unknown field `{unknown}` (a DiscoveryRequest has {})",
                    known.join(", ")
                ));
            }
        }
        // A newer Envoy may send node fields these descriptors do not know: skipped, as a
        // protobuf decoder skips unknown fields.
        let options = DeserializeOptions::new().deny_unknown_fields(false);
        let message =
            DynamicMessage::deserialize_with_options(self.request.clone(), value, &options)
                .map_err(|e| e.to_string())?;
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
    fn an_unknown_field_of_the_request_is_an_error_naming_it() {
        let json = br#"{"resourceName":["c1"],
            "typeUrl":"type.googleapis.com/envoy.config.cluster.v3.Cluster"}"#;
        let error = codec().request_from_json(json).unwrap_err();
        assert!(error.contains("unknown field `resourceName`"), "{error}");
        // Both spellings proto3 JSON allows are known.
        let json = br#"{"resource_names":["c1"],"type_url":"t"}"#;
        codec().request_from_json(json).unwrap();
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
