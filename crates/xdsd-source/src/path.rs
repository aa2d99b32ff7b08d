//! Field paths for JSON decoding errors.
//!
//! serde_json reports only line and column; serde_yaml_ng already prefixes its errors with the
//! path (`filter_chains[0].filters[0]: ...`). This wrapper gives JSON errors the same prefix by
//! tracking where the decoder is and remembering the innermost path at which an error arose.
//! Keys are taken as strings, which is all proto3 JSON has.

use std::cell::RefCell;
use std::fmt;

use serde::de::{
    self, value::StringDeserializer, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess,
    SeqAccess, Visitor,
};

/// Where the first (innermost) error was seen.
#[derive(Default)]
pub(crate) struct Track {
    path: RefCell<Option<String>>,
}

impl Track {
    fn trigger(&self, chain: &Chain<'_>) {
        let mut path = self.path.borrow_mut();
        if path.is_none() {
            *path = Some(chain.to_string());
        }
    }

    /// The path of the failed value, if any error was seen away from the root.
    pub fn path(&self) -> Option<String> {
        self.path.borrow().clone().filter(|p| !p.is_empty())
    }
}

pub(crate) enum Chain<'a> {
    Root,
    Key(&'a Chain<'a>, String),
    Index(&'a Chain<'a>, usize),
}

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Chain::Root => Ok(()),
            Chain::Key(Chain::Root, key) => f.write_str(key),
            Chain::Key(parent, key) => write!(f, "{parent}.{key}"),
            Chain::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

pub(crate) struct Tracked<'a, 'b, D> {
    pub de: D,
    pub chain: &'a Chain<'a>,
    pub track: &'b Track,
}

macro_rules! forward_deserialize {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            let (chain, track) = (self.chain, self.track);
            self.de
                .$method(TrackedVisitor { inner: visitor, chain, track })
                .inspect_err(|_| track.trigger(chain))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Tracked<'_, '_, D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let (chain, track) = (self.chain, self.track);
        let visitor = TrackedVisitor {
            inner: visitor,
            chain,
            track,
        };
        self.de
            .deserialize_unit_struct(name, visitor)
            .inspect_err(|_| track.trigger(chain))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let (chain, track) = (self.chain, self.track);
        let visitor = TrackedVisitor {
            inner: visitor,
            chain,
            track,
        };
        self.de
            .deserialize_newtype_struct(name, visitor)
            .inspect_err(|_| track.trigger(chain))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let (chain, track) = (self.chain, self.track);
        let visitor = TrackedVisitor {
            inner: visitor,
            chain,
            track,
        };
        self.de
            .deserialize_tuple(len, visitor)
            .inspect_err(|_| track.trigger(chain))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let (chain, track) = (self.chain, self.track);
        let visitor = TrackedVisitor {
            inner: visitor,
            chain,
            track,
        };
        self.de
            .deserialize_tuple_struct(name, len, visitor)
            .inspect_err(|_| track.trigger(chain))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let (chain, track) = (self.chain, self.track);
        let visitor = TrackedVisitor {
            inner: visitor,
            chain,
            track,
        };
        self.de
            .deserialize_struct(name, fields, visitor)
            .inspect_err(|_| track.trigger(chain))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        // Proto3 JSON has no serde enums; variants are passed through untracked.
        let (chain, track) = (self.chain, self.track);
        self.de
            .deserialize_enum(name, variants, visitor)
            .inspect_err(|_| track.trigger(chain))
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

struct TrackedVisitor<'a, 'b, V> {
    inner: V,
    chain: &'a Chain<'a>,
    track: &'b Track,
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty))*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for TrackedVisitor<'_, '_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool) visit_i8(i8) visit_i16(i16) visit_i32(i32) visit_i64(i64)
        visit_i128(i128) visit_u8(u8) visit_u16(u16) visit_u32(u32) visit_u64(u64)
        visit_u128(u128) visit_f32(f32) visit_f64(f64) visit_char(char) visit_str(&str)
        visit_borrowed_str(&'de str) visit_string(String) visit_bytes(&[u8])
        visit_borrowed_bytes(&'de [u8]) visit_byte_buf(Vec<u8>)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Tracked {
            de,
            chain: self.chain,
            track: self.track,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Tracked {
            de,
            chain: self.chain,
            track: self.track,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(TrackedSeq {
            inner: seq,
            chain: self.chain,
            track: self.track,
            index: 0,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(TrackedMap {
            inner: map,
            chain: self.chain,
            track: self.track,
            key: None,
        })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

struct TrackedSeed<'a, 'b, S> {
    inner: S,
    chain: &'a Chain<'a>,
    track: &'b Track,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for TrackedSeed<'_, '_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Tracked {
            de,
            chain: self.chain,
            track: self.track,
        })
    }
}

struct TrackedSeq<'a, 'b, A> {
    inner: A,
    chain: &'a Chain<'a>,
    track: &'b Track,
    index: usize,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for TrackedSeq<'_, '_, A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        let chain = Chain::Index(self.chain, self.index);
        self.index += 1;
        let track = self.track;
        self.inner
            .next_element_seed(TrackedSeed {
                inner: seed,
                chain: &chain,
                track,
            })
            .inspect_err(|_| track.trigger(&chain))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

struct TrackedMap<'a, 'b, A> {
    inner: A,
    chain: &'a Chain<'a>,
    track: &'b Track,
    key: Option<String>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for TrackedMap<'_, '_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self
            .inner
            .next_key::<String>()
            .inspect_err(|_| self.track.trigger(self.chain))?
        else {
            return Ok(None);
        };
        self.key = Some(key.clone());
        let key: StringDeserializer<A::Error> = key.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        let chain = Chain::Key(self.chain, self.key.take().unwrap_or_default());
        let track = self.track;
        self.inner
            .next_value_seed(TrackedSeed {
                inner: seed,
                chain: &chain,
                track,
            })
            .inspect_err(|_| track.trigger(&chain))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}
