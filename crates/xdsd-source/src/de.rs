//! Second pass over a file: streams each resource straight from the text into a
//! `DynamicMessage`, so the YAML/JSON parser attaches line and column to decoding errors (the
//! field path comes from serde_yaml_ng itself, or from `crate::path` for JSON). The first pass
//! (a plain `serde_json::Value`) already established the file's layout and each resource's
//! message type, which drive the seeds here.

use std::cell::Cell;
use std::fmt;

use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor};
use serde::de::{
    self, Deserialize, DeserializeSeed, Deserializer, Error as _, IgnoredAny, IntoDeserializer,
    MapAccess, SeqAccess, Visitor,
};

use crate::plan::{DocPlan, Layout, META_KEYS};

pub(crate) struct DocSeed<'a> {
    pub plan: &'a DocPlan,
    pub options: &'a DeserializeOptions,
    pub out: &'a mut Vec<DynamicMessage>,
    /// Position in `plan.resources` of the resource being decoded, for error attribution.
    pub current: &'a Cell<usize>,
}

impl<'de> DeserializeSeed<'de> for DocSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.plan.layout {
            Layout::Empty => {
                IgnoredAny::deserialize(deserializer)?;
                Ok(())
            }
            Layout::Single => {
                self.current.set(0);
                let plan = self.plan.resources.first().ok_or_else(|| {
                    D::Error::custom("internal error: single resource without a plan")
                })?;
                let message = ResourceSeed {
                    desc: &plan.desc,
                    options: self.options,
                }
                .deserialize(deserializer)?;
                self.out.push(message);
                Ok(())
            }
            Layout::List => deserializer.deserialize_seq(ListVisitor(self)),
            Layout::Wrapper => deserializer.deserialize_map(WrapperVisitor(self)),
        }
    }
}

struct ListVisitor<'a>(DocSeed<'a>);

impl<'de> Visitor<'de> for ListVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of resources")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let seed = self.0;
        for (position, plan) in seed.plan.resources.iter().enumerate() {
            seed.current.set(position);
            let message = seq
                .next_element_seed(ResourceSeed {
                    desc: &plan.desc,
                    options: seed.options,
                })?
                .ok_or_else(|| A::Error::custom("internal error: fewer resources than planned"))?;
            seed.out.push(message);
        }
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(A::Error::custom(
                "internal error: more resources than planned",
            ));
        }
        Ok(())
    }
}

struct ListSeed<'a>(DocSeed<'a>);

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(ListVisitor(self.0))
    }
}

struct WrapperVisitor<'a>(DocSeed<'a>);

impl<'de> Visitor<'de> for WrapperVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping with a `resources` list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seed = Some(self.0);
        while let Some(key) = map.next_key::<String>()? {
            if key == "resources" {
                // The first pass saw only the last of repeated keys; decoding both would
                // not match its plan.
                let seed = seed
                    .take()
                    .ok_or_else(|| A::Error::custom("duplicate key `resources`"))?;
                map.next_value_seed(ListSeed(seed))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

struct ResourceSeed<'a> {
    desc: &'a MessageDescriptor,
    options: &'a DeserializeOptions,
}

impl<'de> DeserializeSeed<'de> for ResourceSeed<'_> {
    type Value = DynamicMessage;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<DynamicMessage, D::Error> {
        let wrapped = WithoutTypeKey {
            inner: Keyed(deserializer),
            desc: self.desc,
        };
        DynamicMessage::deserialize_with_options(self.desc.clone(), wrapped, self.options)
    }
}

/// Presents a resource mapping to the message decoder without its `"@type"` entry, which
/// names the message rather than being one of its fields.
///
/// Only mappings reach here (the first pass checked), so every request becomes
/// `deserialize_map`.
///
/// It also rejects unknown top-level fields itself, while positioned at their value: the
/// decoder rejects them right after reading the key, where a YAML error only gets the position
/// of the enclosing mapping, and for the top-level mapping that is usually no position at all.
struct WithoutTypeKey<'a, D> {
    inner: D,
    desc: &'a MessageDescriptor,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for WithoutTypeKey<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(WithoutTypeKeyVisitor {
            inner: visitor,
            desc: self.desc,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct WithoutTypeKeyVisitor<'a, V> {
    inner: V,
    desc: &'a MessageDescriptor,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for WithoutTypeKeyVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(WithoutTypeKeyMap {
            inner: map,
            desc: self.desc,
            seen_type: false,
        })
    }
}

struct WithoutTypeKeyMap<'a, A> {
    inner: A,
    desc: &'a MessageDescriptor,
    seen_type: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for WithoutTypeKeyMap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<String>()? else {
                return Ok(None);
            };
            if key == "@type" {
                if self.seen_type {
                    return Err(A::Error::custom("duplicate key \"@type\""));
                }
                self.seen_type = true;
            }
            if META_KEYS.contains(&key.as_str()) {
                // Read in the first pass (`parse`): not a field of the message.
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            if !is_known_field(self.desc, &key) {
                let message = format!("unrecognized field name '{key}'");
                return Err(match self.inner.next_value_seed(Reject(message.clone())) {
                    Err(positioned) => positioned,
                    Ok(never) => match never {},
                });
            }
            let key: de::value::StringDeserializer<A::Error> = key.into_deserializer();
            return seed.deserialize(key).map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.inner.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// The same lookup prost-reflect's decoder does for a key.
fn is_known_field(desc: &MessageDescriptor, key: &str) -> bool {
    desc.get_field_by_json_name(key).is_some()
        || desc.get_field_by_name(key).is_some()
        || desc.get_extension_by_json_name(key).is_some()
}

/// Fails while the parser is positioned at a value, so the error gets that value's position
/// (and, in YAML, its path).
struct Reject(String);

enum Never {}

impl<'de> DeserializeSeed<'de> for Reject {
    type Value = Never;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Never, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reject {
    type Value = Never;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Never, E> {
        Err(E::custom(self.0))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Never, E> {
        Err(E::custom(self.0))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Never, E> {
        Err(E::custom(self.0))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Never, E> {
        Err(E::custom(self.0))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Never, E> {
        Err(E::custom(self.0))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Never, E> {
        Err(E::custom(self.0))
    }
    fn visit_none<E: de::Error>(self) -> Result<Never, E> {
        Err(E::custom(self.0))
    }
    fn visit_seq<S: SeqAccess<'de>>(self, _: S) -> Result<Never, S::Error> {
        Err(S::Error::custom(self.0))
    }
    fn visit_map<M: MapAccess<'de>>(self, _: M) -> Result<Never, M::Error> {
        Err(M::Error::custom(self.0))
    }
}

/// Puts an error raised right after a mapping's key was read (an unknown field, a repeated oneof
/// member...) at that key's value, at every depth.
///
/// The message decoder rejects an unknown key as soon as it has read it, from inside the
/// mapping's visitor, so the YAML parser gives the error the position of the enclosing mapping
/// (often lines above the key). This wrapper passes everything through unchanged, remembers
/// the last key of each mapping until its value is read, and when the visitor fails in between,
/// fails once more while positioned at that value, so the parser attaches the key's own line.
struct Keyed<D>(D);

/// [`Keyed`] for the seed of a nested value.
struct KeyedSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for KeyedSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Keyed(deserializer))
    }
}

macro_rules! keyed_forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
                self.0.$method($($arg,)* KeyedVisitor(visitor))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Keyed<D> {
    type Error = D::Error;

    keyed_forward! {
        deserialize_any(); deserialize_bool(); deserialize_i8(); deserialize_i16();
        deserialize_i32(); deserialize_i64(); deserialize_i128(); deserialize_u8();
        deserialize_u16(); deserialize_u32(); deserialize_u64(); deserialize_u128();
        deserialize_f32(); deserialize_f64(); deserialize_char(); deserialize_str();
        deserialize_string(); deserialize_bytes(); deserialize_byte_buf(); deserialize_option();
        deserialize_unit(); deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str); deserialize_seq();
        deserialize_tuple(len: usize); deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map(); deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier(); deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

struct KeyedVisitor<V>(V);

macro_rules! visit_forward {
    ($($method:ident($ty:ty);)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.0.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for KeyedVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    visit_forward! {
        visit_bool(bool); visit_i8(i8); visit_i16(i16); visit_i32(i32); visit_i64(i64);
        visit_i128(i128); visit_u8(u8); visit_u16(u16); visit_u32(u32); visit_u64(u64);
        visit_u128(u128); visit_f32(f32); visit_f64(f64); visit_char(char); visit_str(&str);
        visit_borrowed_str(&'de str); visit_string(String); visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]); visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Keyed(deserializer))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Keyed(deserializer))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(KeyedSeq(seq))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(data)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let mut keyed = KeyedMap {
            inner: map,
            key_read: false,
        };
        match self.0.visit_map(&mut keyed) {
            Ok(value) => Ok(value),
            Err(error) if keyed.key_read => {
                match keyed.inner.next_value_seed(Reject(error.to_string())) {
                    Err(positioned) => Err(positioned),
                    Ok(never) => match never {},
                }
            }
            Err(error) => Err(error),
        }
    }
}

struct KeyedSeq<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for KeyedSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(KeyedSeed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

struct KeyedMap<A> {
    inner: A,
    /// A key was read and its value was not yet.
    key_read: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for KeyedMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let key = self.inner.next_key_seed(seed)?;
        self.key_read = key.is_some();
        Ok(key)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.key_read = false;
        self.inner.next_value_seed(KeyedSeed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}
