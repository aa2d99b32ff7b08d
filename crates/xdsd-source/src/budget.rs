//! A bound on what a resource file expands to. YAML aliases repeat a node wherever they appear:
//! 10,000 aliases of a 10,000-item list are 10^8 nodes from a 140 KB file, and building them
//! would take all memory. The first read of a file counts the nodes as they are produced and
//! stops at [`MAX_NODES`], with an error naming the file.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Nodes (scalars, lists, mappings, aliases expanded) one file may have: far above any real
/// resource file (a 100,000-endpoint ClusterLoadAssignment is about 1,000,000 nodes), far below
/// what exhausts memory.
pub const MAX_NODES: usize = 4_000_000;

/// Reads a value, counting down `left` for each node; fails once it reaches zero.
pub(crate) struct Budgeted<'a> {
    pub(crate) left: &'a Cell<usize>,
}

impl Budgeted<'_> {
    fn take<E: serde::de::Error>(&self) -> Result<(), E> {
        match self.left.get() {
            0 => Err(E::custom(format_args!(
                "the file expands to more than {MAX_NODES} nodes (YAML aliases repeat what they \
                 refer to): refused"
            ))),
            n => {
                self.left.set(n - 1);
                Ok(())
            }
        }
    }

    fn again(&self) -> Budgeted<'_> {
        Budgeted { left: self.left }
    }
}

impl<'de> DeserializeSeed<'de> for Budgeted<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Budgeted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON/YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.take()?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.take()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.take()?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.again())? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(self.again())? {
            let key = match key {
                Value::String(s) => s,
                other => {
                    return Err(A::Error::custom(format_args!(
                        "a mapping key must be a string, found {other}"
                    )))
                }
            };
            let value = map.next_value_seed(self.again())?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}
