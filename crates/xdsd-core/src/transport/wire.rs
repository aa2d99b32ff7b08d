//! Responses written from pre-encoded pieces. Protobuf lets a message's fields come in any order
//! and a repeated field is its elements one after another, so a `DiscoveryResponse` is the
//! resources' shared bytes (encoded once in the store) plus this stream's few fields: no resource
//! is encoded per stream. Decoding is never needed on this side: these types only encode.

use bytes::{Buf, BufMut};
use prost::encoding::{skip_field, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::protocol::delta::DeltaResponse;
use crate::protocol::sotw::{SotwResources, SotwResponse};
use crate::store::{field_len, put_length_delimited};

/// `envoy.service.discovery.v3.DiscoveryResponse` on the wire.
#[derive(Debug, Default)]
pub struct SotwWire(Option<SotwResponse>);

impl From<SotwResponse> for SotwWire {
    fn from(response: SotwResponse) -> SotwWire {
        SotwWire(Some(response))
    }
}

// DiscoveryResponse field numbers.
const VERSION_INFO: u32 = 1;
const RESOURCES: u32 = 2;
const TYPE_URL: u32 = 4;
const NONCE: u32 = 5;

fn string_field(tag: u32, value: &str, buf: &mut impl BufMut) {
    if !value.is_empty() {
        put_length_delimited(buf, tag, value.as_bytes());
    }
}

fn string_len(value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        field_len(value.len())
    }
}

impl Message for SotwWire {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        let Some(r) = &self.0 else { return };
        string_field(VERSION_INFO, &r.version_info, buf);
        match &r.resources {
            SotwResources::All(t) => buf.put_slice(&t.sotw_body()),
            SotwResources::Some(list) => {
                for resource in list {
                    put_length_delimited(buf, RESOURCES, resource.any_bytes());
                }
            }
        }
        string_field(TYPE_URL, &r.type_url, buf);
        string_field(NONCE, &r.nonce, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let Some(r) = &self.0 else { return 0 };
        let resources = match &r.resources {
            SotwResources::All(t) => t.sotw_body().len(),
            SotwResources::Some(list) => list.iter().map(|x| field_len(x.any_bytes().len())).sum(),
        };
        string_len(&r.version_info) + resources + string_len(&r.type_url) + string_len(&r.nonce)
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

/// `envoy.service.discovery.v3.DeltaDiscoveryResponse` on the wire.
#[derive(Debug, Default)]
pub struct DeltaWire(Option<DeltaResponse>);

impl From<DeltaResponse> for DeltaWire {
    fn from(response: DeltaResponse) -> DeltaWire {
        DeltaWire(Some(response))
    }
}

// DeltaDiscoveryResponse field numbers.
const SYSTEM_VERSION_INFO: u32 = 1;
const DELTA_RESOURCES: u32 = 2;
const DELTA_TYPE_URL: u32 = 4;
const DELTA_NONCE: u32 = 5;
const REMOVED_RESOURCES: u32 = 6;

impl Message for DeltaWire {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        let Some(r) = &self.0 else { return };
        string_field(SYSTEM_VERSION_INFO, &r.system_version_info, buf);
        for resource in &r.resources {
            put_length_delimited(buf, DELTA_RESOURCES, resource.delta_bytes());
        }
        string_field(DELTA_TYPE_URL, &r.type_url, buf);
        string_field(DELTA_NONCE, &r.nonce, buf);
        for name in &r.removed {
            // A repeated string keeps empty elements; names are never empty anyway.
            put_length_delimited(buf, REMOVED_RESOURCES, name.as_bytes());
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let Some(r) = &self.0 else { return 0 };
        string_len(&r.system_version_info)
            + r.resources
                .iter()
                .map(|x| field_len(x.delta_bytes().len()))
                .sum::<usize>()
            + string_len(&r.type_url)
            + string_len(&r.nonce)
            + r.removed.iter().map(|n| field_len(n.len())).sum::<usize>()
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}
