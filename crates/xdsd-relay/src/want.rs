//! What the table is keyed by: a [`Want`] — an upstream subscription in a group's stream, a
//! type and a name — and its type's small key.

use std::sync::Arc;

use crate::group::GroupKey;

/// A type URL as the table keys it: one of the well-known xDS types by its place in
/// [`xdsd_core::types::WELL_KNOWN`] (compared, hashed and copied as a number), any other as its
/// text, shared. Every want carries one: as an owned string it was copied into each want and
/// compared byte by byte (68 bytes for EDS) at each level of the table's lookups.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TypeKey {
    /// A well-known type, by its place.
    Known(u8),
    /// Any other type.
    Other(Arc<str>),
}

impl TypeKey {
    /// The key of `type_url`.
    pub(crate) fn of(type_url: &str) -> TypeKey {
        match xdsd_core::types::WELL_KNOWN
            .iter()
            .position(|t| t.len() == type_url.len() && *t == type_url)
        {
            Some(i) => TypeKey::Known(i as u8),
            None => TypeKey::Other(type_url.into()),
        }
    }

    /// The type URL.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            TypeKey::Known(i) => xdsd_core::types::WELL_KNOWN[*i as usize],
            TypeKey::Other(t) => t,
        }
    }
}

impl std::ops::Deref for TypeKey {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for TypeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for TypeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for TypeKey {
    fn from(type_url: &str) -> TypeKey {
        TypeKey::of(type_url)
    }
}

impl From<&String> for TypeKey {
    fn from(type_url: &String) -> TypeKey {
        TypeKey::of(type_url)
    }
}

impl From<&TypeKey> for TypeKey {
    fn from(key: &TypeKey) -> TypeKey {
        key.clone()
    }
}

/// One upstream subscription: in a group's stream, a type and a name (`*`: the wildcard). A
/// downstream resource locator is the plain name in the stream of the locator's parameters
/// ([`GroupKey::with_params`]): upstream the relay subscribes names only.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Want {
    /// The upstream stream (group) it is subscribed on.
    pub group: GroupKey,
    /// The type URL.
    pub(crate) type_url: TypeKey,
    /// The name, or `*` for every resource of the type: shared, so that the observer's copy
    /// of a stream's name, the want, the table's row and route and the upstream action are one
    /// allocation (a stream subscribing 100,000 names made each name five times over).
    pub name: Name,
}

/// A want's name, shared.
pub type Name = Arc<str>;

impl Want {
    /// The resource `name` of `type_url` in `group`.
    pub(crate) fn named(
        group: GroupKey,
        type_url: impl Into<TypeKey>,
        name: impl Into<Name>,
    ) -> Want {
        Want {
            group,
            type_url: type_url.into(),
            name: name.into(),
        }
    }

    /// Whether it is a type's wildcard.
    pub fn is_wildcard(&self) -> bool {
        &*self.name == xdsd_client::WILDCARD
    }

    /// The wildcard of `type_url` in `group`: its name one allocation for every wildcard (a
    /// plain name's want looks its group's wildcard up: the table's `State::covered`).
    pub(crate) fn wildcard(group: GroupKey, type_url: impl Into<TypeKey>) -> Want {
        static WILDCARD: std::sync::LazyLock<Name> =
            std::sync::LazyLock::new(|| Name::from(xdsd_client::WILDCARD));
        Want::named(group, type_url, WILDCARD.clone())
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}
