//! A view: one type as a client with given parameters sees it (at most one variant per name),
//! with the encodings it shares across the streams that send it.

use std::sync::{Arc, Mutex, OnceLock};

use bytes::{Bytes, BytesMut};

use super::table::{version_of, Entries, Table};
use super::wire::{field_len, put_length_delimited, string_field, string_len};
use super::{Encoding, Resource};
use crate::hash::HashMap as FastMap;

/// One type as a client with given parameters sees it: at most one variant per name.
#[derive(Debug)]
pub struct View {
    type_url: Arc<str>,
    version: Arc<str>,
    data: ViewData,
    /// Every resource as an encoded `DiscoveryResponse.resources` entry, one after the other: the
    /// body of a SotW wildcard response, built on first use and then shared by every stream that
    /// sends this view. Plain, and named by `resource_name` (TP2 clients).
    sotw_bodies: [OnceLock<Bytes>; 4],
    /// The same as `DeltaDiscoveryResponse.resources` entries, with where each ends: the
    /// resources of a first delta response that sends the view whole or in parts (a client
    /// subscribed to every name, or a wildcard), shared by every stream that sends them.
    delta_bodies: [OnceLock<(Bytes, Box<[usize]>)>; 4],
    /// The last delta push of resources alone made from this view, encoded (see
    /// [`View::delta_push`]): every stream that gets the same change sends the same fields.
    last_push: Mutex<Option<LastPush>>,
}

/// A delta push's fields, encoded once (see [`View::delta_push`]).
#[derive(Debug)]
struct LastPush {
    encoding: Encoding,
    resources: Box<[Arc<Resource>]>,
    fields: Bytes,
}

#[derive(Debug)]
enum ViewData {
    /// A type without variants: its table, read as it is.
    Plain(Arc<Table>),
    /// The variants a parameter set resolves to.
    Resolved {
        /// In name order.
        resources: Vec<Arc<Resource>>,
        /// Name → position in `resources`.
        index: FastMap<Arc<str>, u32>,
        aliases: FastMap<Arc<str>, Arc<str>>,
        /// Whether a resource has a TTL: when none has, the TTL encodings are the plain ones.
        has_ttl: bool,
    },
}

impl View {
    /// A view of `resources` (in name order, one per name).
    pub(super) fn resolved(type_url: Arc<str>, resources: Vec<Arc<Resource>>) -> View {
        let digest = resources
            .iter()
            .fold(0u128, |sum, r| sum.wrapping_add(r.digest()));
        let version = version_of(digest, resources.len());
        let aliases = resources
            .iter()
            .flat_map(|r| r.aliases().iter().map(|a| (a.clone(), r.name().clone())))
            .collect();
        let has_ttl = resources.iter().any(|r| r.ttl().is_some());
        let index = resources
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name().clone(), i as u32))
            .collect();
        View {
            type_url,
            version,
            data: ViewData::Resolved {
                resources,
                index,
                aliases,
                has_ttl,
            },
            sotw_bodies: Default::default(),
            delta_bodies: Default::default(),
            last_push: Mutex::new(None),
        }
    }

    /// The view of a type without variants: its table, read as it is.
    pub(super) fn plain(type_url: Arc<str>, version: Arc<str>, table: Arc<Table>) -> View {
        View {
            type_url,
            version,
            data: ViewData::Plain(table),
            sotw_bodies: Default::default(),
            delta_bodies: Default::default(),
            last_push: Mutex::new(None),
        }
    }

    /// A view of nothing, for a type the store has no resources of.
    pub fn empty(type_url: Arc<str>) -> View {
        View::resolved(type_url, Vec::new())
    }

    /// The type URL.
    pub fn type_url(&self) -> &Arc<str> {
        &self.type_url
    }

    /// The version of what this view holds: what SotW sends as `version_info`. Never empty.
    pub fn version(&self) -> &Arc<str> {
        &self.version
    }

    /// The resource of that name, or else of that alias.
    pub fn get(&self, name: &str) -> Option<&Arc<Resource>> {
        match &self.data {
            ViewData::Plain(t) => {
                let variants = match t.get(name) {
                    Some((_, v)) => v,
                    None => t.get(t.aliases.get(name)?)?.1,
                };
                variants.first()
            }
            ViewData::Resolved {
                resources,
                index,
                aliases,
                ..
            } => {
                let at = index
                    .get(name)
                    .or_else(|| aliases.get(name).and_then(|n| index.get(n)))?;
                resources.get(*at as usize)
            }
        }
    }

    /// How many resources.
    pub fn len(&self) -> usize {
        match &self.data {
            ViewData::Plain(t) => t.names,
            ViewData::Resolved { resources, .. } => resources.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether some resource of this view has an alias.
    pub fn has_aliases(&self) -> bool {
        match &self.data {
            ViewData::Plain(t) => !t.aliases.is_empty(),
            ViewData::Resolved { aliases, .. } => !aliases.is_empty(),
        }
    }

    /// Whether a resource of this view has a TTL.
    pub fn has_ttl(&self) -> bool {
        match &self.data {
            ViewData::Plain(t) => t.with_ttl > 0,
            ViewData::Resolved { has_ttl, .. } => *has_ttl,
        }
    }

    /// The members of the glob collection `glob` (canonical; see [`crate::xdstp`]), in name
    /// order: a walk of the names under its path, not of the view.
    pub fn members<'a>(&'a self, glob: &'a str) -> impl Iterator<Item = &'a Arc<Resource>> + 'a {
        let (prefix, query) = crate::xdstp::glob_parts(glob).unwrap_or(("\u{0}", ""));
        // The names under the glob's path, each compared with the prefix once.
        let member = move |name: &str| {
            name.strip_prefix(prefix)
                .map(|rest| crate::xdstp::is_member_rest(query, rest))
        };
        let from: Box<dyn Iterator<Item = &'a Arc<Resource>> + 'a> = match &self.data {
            ViewData::Plain(t) => Box::new(
                t.entries_from(prefix)
                    .map_while(move |e| Some((member(&e.name)?, e)))
                    .filter_map(|(is, e)| is.then(|| e.variants.first()).flatten()),
            ),
            ViewData::Resolved { resources, .. } => {
                let start = resources.partition_point(|r| &**r.name() < prefix);
                Box::new(
                    resources[start..]
                        .iter()
                        .map_while(move |r| Some((member(r.name())?, r)))
                        .filter_map(|(is, r)| is.then_some(r)),
                )
            }
        };
        from
    }

    /// Resources in name order.
    pub fn iter(&self) -> ViewIter<'_> {
        ViewIter(match &self.data {
            ViewData::Plain(t) => ViewIterInner::Plain(t.entries()),
            ViewData::Resolved { resources, .. } => ViewIterInner::Resolved(resources.iter()),
        })
    }

    /// All resources encoded as consecutive `DiscoveryResponse.resources` (field 2) entries, in
    /// an encoding (see [`Resource::sotw_entry`]).
    pub fn sotw_body(&self, mut encoding: Encoding) -> Bytes {
        // A type without a name field goes wrapped to clients that take wrappers (see
        // `Resource::sotw_entry`), TTLs or not.
        encoding.ttl &= self.has_ttl() || self.iter().next().is_some_and(|r| r.is_nameless());
        self.sotw_bodies[encoding_index(encoding)]
            .get_or_init(|| self.encode_all(encoding, Resource::sotw_entry, None))
            .clone()
    }

    /// The resources from the `start`th (in name order) to before the `end`th, encoded as
    /// consecutive `DeltaDiscoveryResponse.resources` (field 2) entries in an encoding (see
    /// [`Resource::delta_entry`]): a slice of the view's whole encoding, built on first use.
    /// `None` past the view's end.
    pub fn delta_run(&self, mut encoding: Encoding, start: usize, end: usize) -> Option<Bytes> {
        encoding.ttl &= self.has_ttl();
        let (body, ends) = self.delta_bodies[encoding_index(encoding)].get_or_init(|| {
            let mut ends = Vec::with_capacity(self.len());
            let body = self.encode_all(encoding, Resource::delta_entry, Some(&mut ends));
            (body, ends.into_boxed_slice())
        });
        let from = match start {
            0 => 0,
            s => *ends.get(s - 1)?,
        };
        let to = *ends.get(end.checked_sub(1)?)?;
        (from <= to).then(|| body.slice(from..to))
    }

    /// The fields of a `DeltaDiscoveryResponse` that sends `resources` and nothing else, but
    /// its nonce and `control_plane`: this view's version as `system_version_info`, each
    /// resource's entry, the type URL. Encoded once for every stream that sends the same push
    /// (the resources of a change, to every stream subscribed to them): the last push asked of
    /// the view is kept, and a stream that asks for it again shares its bytes.
    pub(crate) fn delta_push(&self, resources: &[Arc<Resource>], encoding: Encoding) -> Bytes {
        let mut last = self.last_push.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(push) = last.as_ref().filter(|p| {
            p.encoding == encoding
                && p.resources.len() == resources.len()
                && p.resources
                    .iter()
                    .zip(resources)
                    .all(|(a, b)| Arc::ptr_eq(a, b))
        }) {
            return push.fields.clone();
        }
        let len = string_len(&self.version)
            + resources
                .iter()
                .map(|r| field_len(r.delta_entry(encoding).len()))
                .sum::<usize>()
            + string_len(&self.type_url);
        let mut buf = BytesMut::with_capacity(len);
        // `DeltaDiscoveryResponse` fields 1 (system_version_info), 2 (resources), 4 (type_url).
        string_field(1, &self.version, &mut buf);
        for r in resources {
            put_length_delimited(&mut buf, 2, r.delta_entry(encoding));
        }
        string_field(4, &self.type_url, &mut buf);
        let fields = buf.freeze();
        *last = Some(LastPush {
            encoding,
            resources: resources.into(),
            fields: fields.clone(),
        });
        fields
    }

    /// Every resource's `entry` as field 2, in name order; with where each ends in `ends`.
    fn encode_all(
        &self,
        encoding: Encoding,
        entry: fn(&Resource, Encoding) -> &Bytes,
        mut ends: Option<&mut Vec<usize>>,
    ) -> Bytes {
        let len: usize = self
            .iter()
            .map(|r| field_len(entry(r, encoding).len()))
            .sum();
        let mut buf = BytesMut::with_capacity(len);
        for resource in self.iter() {
            put_length_delimited(&mut buf, 2, entry(resource, encoding));
            if let Some(ends) = ends.as_deref_mut() {
                ends.push(buf.len());
            }
        }
        buf.freeze()
    }
}

/// Where a body in `encoding` is kept among a view's four.
fn encoding_index(encoding: Encoding) -> usize {
    usize::from(encoding.named) | usize::from(encoding.ttl) << 1
}

/// The resources of a [`View`] in name order.
pub struct ViewIter<'a>(ViewIterInner<'a>);

enum ViewIterInner<'a> {
    Plain(Entries<'a>),
    Resolved(std::slice::Iter<'a, Arc<Resource>>),
}

impl<'a> Iterator for ViewIter<'a> {
    type Item = &'a Arc<Resource>;

    fn next(&mut self) -> Option<&'a Arc<Resource>> {
        match &mut self.0 {
            ViewIterInner::Plain(entries) => entries.next().and_then(|e| e.variants.first()),
            ViewIterInner::Resolved(resources) => resources.next(),
        }
    }
}
