//! Store set-up shared by the state machines' tests.

use bytes::Bytes;

use crate::store::{Change, ResourceInput, Store};

/// A resource whose encoded message is `content`'s bytes: the machines never decode it.
pub(crate) fn input(type_url: &str, name: &str, content: &str) -> ResourceInput {
    ResourceInput::new(type_url, name, Bytes::copy_from_slice(content.as_bytes()))
}

/// A store holding `resources` (name, content) of one type.
pub(crate) fn store_with(type_url: &str, resources: &[(&str, &str)]) -> Store {
    let store = Store::new();
    store
        .replace_all(resources.iter().map(|(n, c)| input(type_url, n, c)))
        .unwrap();
    store
}

pub(crate) fn set(store: &Store, type_url: &str, name: &str, content: &str) {
    store
        .apply([Change::Set(input(type_url, name, content))])
        .unwrap();
}

pub(crate) fn remove(store: &Store, type_url: &str, name: &str) {
    store
        .apply([Change::Remove {
            type_url: type_url.into(),
            name: name.into(),
        }])
        .unwrap();
}

/// What a client with no parameters sees of `type_url` in `snapshot`.
pub(crate) fn views(snapshot: &crate::store::Snapshot, type_url: &str) -> crate::protocol::Views {
    let params = crate::params::ParamSet::new();
    crate::protocol::Views::new(&type_url.into(), snapshot.get(type_url), [&params])
}
