//! The downstream demand, as the server's streams show it: an observer of the relay's own
//! server that tells the relay's source what each downstream stream asks for — the wildcard of
//! a type or names of it, in the group of the client's node — and what it no longer asks for.
//!
//! What a request asks is read from the request in place ([`xdsd_core::Asked`]); the observer
//! keeps per stream and type the wildcard and the names held. A SotW request that repeats its
//! stream's list (every ACK) is passed over untouched when the session says so
//! ([`xdsd_core::Asked::repeats`]), else known by its digest; nothing is sent for it. What it
//! keeps is bounded by what the server lets a stream subscribe (its limit on names) times the
//! streams it admits.
//!
//! A resource locator (a name with dynamic parameters of its own, xRFC TP2) is asked upstream
//! as its plain name on the stream of its parameters ([`crate::group::GroupKey::with_params`]);
//! so is a plain `xdstp://AUTHORITY/...` name of an authority given a parameter set of its own
//! ([`crate::RelayOptions::authority_params`], `--param-for`), on the stream of that set, which
//! the server matches it with too ([`xdsd_core::protocol::session::SessionOptions::authority_params`]).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::ResourceLocator;
use tokio::sync::mpsc;
use tonic::Status;
use xdsd_core::ClientNode;
use xdsd_core::{Asked, OneShotDone, PickStore, RequestSeen, Store, StreamClosed, StreamObserver};

use crate::group::{group_of, AggregateBy, GroupKey};

mod lists;
use crate::stores::Stores;
use crate::table::{Name, Routed, Table, TypeKey, Want};
pub(crate) use lists::Lists;
use lists::{Listed, NameSet};

/// What the observer tells the source.
#[derive(Debug)]
pub(crate) enum Demanded {
    /// A stream asks for wants: all those of one request at once, so that they are subscribed
    /// upstream in one request and answered in one response (and so downstream in one).
    Acquire {
        stream: u64,
        wants: Vec<Want>,
        /// Their narrowings, as the observer looked them up declaring them.
        routed: Routed,
        node: Option<Arc<ClientNode>>,
    },
    /// A stream asks for the wants of a list that other streams may have asked alike (one
    /// `Arc` for them all: [`Lists`]), held once for them ([`Table::acquire_list`]).
    AcquireList {
        stream: u64,
        list: Arc<[Want]>,
        routed: Routed,
        node: Option<Arc<ClientNode>>,
    },
    /// A stream no longer asks for a want.
    Drop { stream: u64, want: Want },
    /// A one-shot request without an id asked for a want: held for the linger.
    Touch {
        want: Want,
        node: Option<Arc<ClientNode>>,
    },
    /// A stream ended, or a one-shot request is over (its id in place of a stream's).
    Release { stream: u64 },
}

/// What one stream asks of one type.
#[derive(Debug)]
struct TypeWants {
    group: GroupKey,
    /// The type, keyed once for all its wants.
    type_key: TypeKey,
    /// The parameter set of each authority that has one of its own (`--param-for`).
    authorities: Authorities,
    wildcard: bool,
    /// Resource locators held (delta: subscribed and not unsubscribed).
    locators: BTreeSet<Locator>,
    /// The names held, hashed (a request of N names costs N lookups, not N descents of a
    /// B-tree comparing names), each shared with its want; one set for the streams that asked
    /// the same lists of names ([`Lists`]), a stream's own once it changes it otherwise.
    names: Arc<NameSet>,
    /// The digest of the last request that stated the whole subscription (SotW): a request
    /// with the same one (every ACK) changes nothing and is not read name by name.
    last: Option<u64>,
}

/// A resource locator: a name and its dynamic parameters.
type Locator = (String, xdsd_client::Params);

/// The parameter set of each authority that has one of its own (xRFC TP2 "Client
/// Configuration", `xdsd relay --param-for`).
pub(crate) type Authorities = Arc<std::collections::BTreeMap<String, xdsd_client::Params>>;

/// The want of plain `name` (canonical) of a client of `group`: in `group`, or for an xdstp
/// name of an authority with a parameter set of its own, in the group of the same nodes
/// presenting that set (the set the server matches the name with). Names that are not xdstp
/// cost a comparison of six bytes, and only when some authority has a set.
fn name_want(group: &GroupKey, authorities: &Authorities, type_url: &TypeKey, name: Name) -> Want {
    let own = (!authorities.is_empty() && xdsd_core::xdstp::is_xdstp(&name))
        .then(|| xdsd_core::xdstp::XdstpName::parse(&name).ok())
        .flatten()
        .and_then(|n| authorities.get(n.authority()));
    match own {
        Some(params) => Want::named(group.with_params(params.clone()), type_url, name),
        None => Want::named(group.clone(), type_url, name),
    }
}

fn locator(l: &ResourceLocator) -> Locator {
    (
        l.name.clone(),
        l.dynamic_parameters
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// What a request changes of a stream's wants of a type ([`TypeWants::update`]).
#[derive(Debug, Default)]
struct Changed {
    added: Vec<Want>,
    dropped: Vec<Want>,
    /// The list of names the stream's first request names (its wants are added): another
    /// stream's, taken whole, or made by this one for those that ask alike.
    list: Option<Arc<[Want]>>,
}

/// What [`TypeWants::asked_alike`] found.
enum Alike<'a> {
    /// The list and its set of names.
    Found(Listed),
    /// None: the lists, locked while this stream makes the list, so that a stream asking alike
    /// meanwhile (a fleet's streams ask at once) waits for it rather than making its own.
    First(std::sync::MutexGuard<'a, Lists>),
    /// The request is not a first request of a list's length.
    No,
}

impl TypeWants {
    fn wants_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The list another stream asked alike (and that stream's set of its names, if it holds
    /// those and no more), when `asked` names at least [`LIST_FROM`] plain names and nothing
    /// else (no locators, nothing unsubscribed, no authority of its own parameter set), and is
    /// the stream's first request of the type or a delta request (which adds what it names): a
    /// fleet's streams take one list (and, first, one set), and the request costs a comparison
    /// of its names with the list's, not a want made per name. A delta stream's later requests
    /// are lists too: a server sends a large type in parts (xdsd: of 1 MiB), and a client
    /// subscribes to what each part names (the EDS names of each part of CDS).
    fn asked_alike<'l>(&self, asked: &Asked<'_>, lists: &'l Mutex<Lists>) -> Alike<'l> {
        let names = || {
            asked
                .names()
                .filter(|n| *n != xdsd_client::WILDCARD)
                .map(canonical)
        };
        if (asked.is_whole() && !self.names.is_empty())
            || !self.locators.is_empty()
            || !self.authorities.is_empty()
            || !asked.locators().is_empty()
            || !asked.unsubscribed_locators().is_empty()
            || asked.unsubscribed_names().next().is_some()
            || names().take(LIST_FROM).count() < LIST_FROM
        {
            return Alike::No;
        }
        let lists = lists.lock().unwrap_or_else(|p| p.into_inner());
        match lists.find(&self.group, &self.type_key, asked.names_encoded(), names) {
            Some(listed) => Alike::Found(listed),
            None => Alike::First(lists),
        }
    }

    fn locator_want(&self, (name, params): Locator) -> Want {
        Want::named(self.group.with_params(params), &self.type_key, name)
    }

    fn name_want(&self, name: &Name) -> Want {
        name_want(&self.group, &self.authorities, &self.type_key, name.clone())
    }

    /// Takes in what a request asks of its type: the wants it adds and those it drops.
    fn update(&mut self, asked: &Asked<'_>, lists: &Mutex<Lists>) -> Changed {
        let mut changed = Changed::default();
        let had_wildcard = self.wants_wildcard();
        if let Some(on) = asked.wildcard() {
            self.wildcard = on;
        }
        if asked.is_whole() {
            let digest = asked.digest();
            if self.last.replace(digest) == Some(digest) {
                return changed;
            }
        }
        match self.asked_alike(asked, lists) {
            Alike::Found((list, Some(names))) if self.names.is_empty() => {
                self.names = names;
                changed.list = Some(list);
            }
            Alike::Found((list, _)) => self.add_list(list, asked, lists, &mut changed),
            Alike::First(mut lists) => {
                // Kept for the streams that ask alike, with the stream's set of its names if
                // those are the list's and no more (its first request named them).
                let fresh = self.names.is_empty();
                self.names_asked(asked, &mut changed);
                if changed.added.len() >= LIST_FROM {
                    let wants = std::mem::take(&mut changed.added);
                    let names = fresh.then_some(&self.names);
                    // The request's names are the list's, and no more, when each made a want.
                    let sent = (wants.len() == asked.names_sent()).then(|| asked.names_encoded());
                    changed.list = Some(lists.intern(wants, names, sent));
                }
            }
            Alike::No => self.names_asked(asked, &mut changed),
        }
        let Changed { added, dropped, .. } = &mut changed;
        match (had_wildcard, self.wants_wildcard()) {
            (false, true) => added.push(Want::wildcard(self.group.clone(), &self.type_key)),
            (true, false) => dropped.push(Want::wildcard(self.group.clone(), &self.type_key)),
            _ => {}
        }
        changed
    }

    /// Takes in `list`, which `asked` names and no more: the list's wants are what it adds when
    /// the stream holds none of its names yet, and the stream's names become those with the
    /// list's. The streams of a fleet ask the same lists in turn (a delta stream subscribes to
    /// what each part of CDS names): a stream that held what another held before taking the
    /// list takes the set that one made ([`Lists::union`]), with no name looked up or copied
    /// (ten streams of 100,000 names each made their own set, part by part). Otherwise the
    /// names are taken in one by one.
    fn add_list(
        &mut self,
        list: Arc<[Want]>,
        asked: &Asked<'_>,
        lists: &Mutex<Lists>,
        changed: &mut Changed,
    ) {
        let lock = || lists.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = lock().union(&list, self.names.mark) {
            self.names = set;
            changed.list = Some(list);
            return;
        }
        if list.iter().any(|w| self.names.contains(&*w.name)) {
            self.names_asked(asked, changed);
            return;
        }
        let before = self.names.mark;
        let own = NameSet::edit(&mut self.names);
        own.reserve(list.len());
        own.extend(list.iter().map(|w| w.name.clone()));
        lock().add_union(&list, before, &self.names);
        changed.list = Some(list);
    }

    /// Takes in the names and locators `asked` adds and drops, one by one.
    fn names_asked(&mut self, asked: &Asked<'_>, changed: &mut Changed) {
        let Changed { added, dropped, .. } = changed;
        let names = || {
            asked
                .names()
                .filter(|n| *n != xdsd_client::WILDCARD)
                .map(canonical)
        };
        if asked.is_whole() {
            // No locators before or now (the common case): nothing made. Otherwise the set
            // compared, as the request's own decoding already made its locators.
            let none = asked.locators().is_empty() && self.locators.is_empty();
            let locators: BTreeSet<Locator> = if none {
                BTreeSet::new()
            } else {
                asked.locators().iter().map(locator).collect()
            };
            if !none && locators != self.locators {
                let old = std::mem::replace(&mut self.locators, locators);
                for gone in old.difference(&self.locators) {
                    dropped.push(self.locator_want(gone.clone()));
                }
                for new in self.locators.difference(&old) {
                    added.push(self.locator_want(new.clone()));
                }
            }
            // Unchanged (every ACK repeats the list): a lookup per name, nothing made.
            let mut count = 0;
            let same = names().all(|n| {
                count += 1;
                self.names.contains(n.as_ref())
            }) && count == self.names.len();
            if !same {
                let new: BTreeSet<Cow<'_, str>> = names().collect();
                for gone in self.names.iter().filter(|n| !new.contains(&***n)) {
                    dropped.push(self.name_want(gone));
                }
                NameSet::edit(&mut self.names).retain(|n| new.contains(&**n));
                for name in new {
                    if !self.names.contains(name.as_ref()) {
                        let name = Name::from(name);
                        NameSet::edit(&mut self.names).insert(name.clone());
                        added.push(self.name_want(&name));
                    }
                }
            }
        } else {
            for l in asked.locators().iter().map(locator) {
                if self.locators.insert(l.clone()) {
                    added.push(self.locator_want(l));
                }
            }
            for l in asked.unsubscribed_locators().iter().map(locator) {
                if self.locators.remove(&l) {
                    dropped.push(self.locator_want(l));
                }
            }
            // Room for the request's names made at once, when it adds any (a request of a
            // large type's part adds thousands: grown by doubling, each doubling rehashed).
            let mut room = asked.names_sent();
            for name in names() {
                if !self.names.contains(name.as_ref()) {
                    let name = Name::from(name);
                    let own = NameSet::edit(&mut self.names);
                    own.reserve(std::mem::take(&mut room));
                    own.insert(name.clone());
                    added.push(self.name_want(&name));
                }
            }
            for name in asked.unsubscribed_names().map(canonical) {
                if !self.names.contains(name.as_ref()) {
                    continue;
                }
                if let Some(name) = NameSet::edit(&mut self.names).take(name.as_ref()) {
                    dropped.push(self.name_want(&name));
                }
            }
        }
    }
}

/// A name as the relay subscribes it upstream: an xdstp name (xRFC TP1) canonical (context
/// parameters sorted, percent-encoding normalized), so that two spellings are one want and the
/// upstream's members, sent canonical, are matched to their glob; every other name (and a
/// malformed xdstp one, which the upstream answers as it will) as it is, with no copy.
fn canonical(name: &str) -> Cow<'_, str> {
    match xdsd_core::xdstp::canonical(name) {
        Some(c) => Cow::Owned(c.to_string()),
        None => Cow::Borrowed(name),
    }
}

/// The wants of a one-shot request (a `Fetch*` call, a REST poll): its names and locators, or
/// the wildcard.
fn one_shot_wants(
    group: &GroupKey,
    authorities: &Authorities,
    type_url: &str,
    asked: &Asked<'_>,
) -> Vec<Want> {
    let type_url = TypeKey::of(type_url);
    let type_url = &type_url;
    let mut wants: Vec<Want> = asked
        .names()
        .filter(|n| *n != xdsd_client::WILDCARD)
        .map(|n| name_want(group, authorities, type_url, canonical(n).into()))
        .collect();
    wants.extend(asked.locators().iter().map(|l| {
        let (name, params) = locator(l);
        Want::named(group.with_params(params), type_url, name)
    }));
    if asked.wildcard() == Some(true) || wants.is_empty() {
        wants.push(Want::wildcard(group.clone(), type_url));
    }
    wants
}

/// What each stream asks, by type.
type Streams = HashMap<u64, HashMap<Arc<str>, TypeWants>>;

/// Requests that add fewer wants than this are held want by want ([`Demanded::Acquire`]).
const LIST_FROM: usize = 64;

/// How many locks the streams' subscriptions are split under: every request of every stream
/// takes one, and a single lock for all was the relay's most contended (S10, 10,000 streams).
const SHARDS: usize = 16;

/// The relay's observer of its downstream streams; give it to the server's builder
/// ([`xdsd_core::XdsServerBuilder::observer`]), and as its store picker
/// ([`xdsd_core::XdsServerBuilder::store_picker`]): with `--aggregate-by cluster|node` each
/// group of nodes reads a store of its own ([`crate::stores`]).
pub struct RelayObserver {
    by: AggregateBy,
    /// The partitions' stores.
    stores: Arc<Stores>,
    /// The relay's table: a want asked before the upstream answered it is pending in the store.
    table: Arc<Table>,
    tx: mpsc::UnboundedSender<Demanded>,
    /// What each stream asks, by type.
    seen: Box<[Mutex<Streams>]>,
    /// The parameter set of each authority that has one of its own (`--param-for`).
    authorities: Authorities,
    /// The latest lists asked, found again for the streams that ask alike.
    lists: Mutex<Lists>,
}

impl std::fmt::Debug for RelayObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayObserver")
            .field("by", &self.by)
            .finish_non_exhaustive()
    }
}

impl RelayObserver {
    pub(crate) fn new(
        by: AggregateBy,
        tx: mpsc::UnboundedSender<Demanded>,
        table: Arc<Table>,
        stores: Arc<Stores>,
        authorities: Authorities,
    ) -> RelayObserver {
        RelayObserver {
            by,
            authorities,
            stores,
            table,
            tx,
            seen: (0..SHARDS).map(|_| Mutex::default()).collect(),
            lists: Mutex::default(),
        }
    }

    /// The shard of `seen` that holds `stream`.
    fn shard(&self, stream: u64) -> &Mutex<Streams> {
        &self.seen[(stream % SHARDS as u64) as usize]
    }

    fn send(&self, demanded: Demanded) {
        // A relay whose source stopped has nobody to tell.
        let _ = self.tx.send(demanded);
    }

    /// Declares `wants` pending in the store unless the upstream answered them: the request is
    /// answered by the server once the upstream answers (see [`crate::table`]), not told first that
    /// nothing exists. Nothing waits here.
    fn hold_for(&self, wants: &[Want], node: Option<&ClientNode>) -> Routed {
        self.table.ask_all(wants, node, Instant::now())
    }

    /// `stream` holds `list`: asked of the table (pending where not answered), then handed to
    /// the source to hold.
    fn acquire_list(&self, stream: u64, list: Arc<[Want]>, node: Option<&Arc<ClientNode>>) {
        let routed = self
            .table
            .ask_list(&list, node.map(|n| &**n), Instant::now());
        self.send(Demanded::AcquireList {
            stream,
            list,
            routed,
            node: node.cloned(),
        });
    }
}

/// The store a client reads: its partition's (`None`: the server's, the shared partition's).
impl PickStore for RelayObserver {
    fn store_for(&self, node: &[u8]) -> Option<Store> {
        self.stores.pick(node)
    }
}

impl StreamObserver for RelayObserver {
    fn request(&self, event: &RequestSeen<'_>) -> Result<(), Status> {
        let node = event.node;
        let type_url = event.type_url;
        if node.is_none() && event.stream != 0 && self.by != AggregateBy::None {
            // Which group's content a stream gets depends on its node, which the protocol
            // asks of a stream's first request: without it the relay could only serve the
            // shared partition's, which is no group's, and move the stream to its group's
            // store later. (A one-shot without a node is answered as the relay's own node
            // would be, from the shared partition.)
            return Err(Status::invalid_argument(format!(
                "this relay groups its clients by {} (--aggregate-by): a stream's first \
                 request must carry the node (with an id or a cluster)",
                match self.by {
                    AggregateBy::Node => "node id",
                    _ => "node cluster",
                }
            )));
        }
        if event.stream == 0 {
            let group = group_of(self.by, node.map(|n| &**n), type_url);
            let wants = one_shot_wants(&group, &self.authorities, type_url, &event.asked);
            let routed = self.hold_for(&wants, node.map(|n| &**n));
            if event.one_shot != 0 {
                // Held while the request is in hand (a REST poll held for a change, a request
                // waiting for the upstream's answer), as a stream holds what it asks (one-shot
                // and stream ids are one count), then for the linger: a poll held past the
                // linger keeps its names subscribed and served.
                self.send(Demanded::Acquire {
                    stream: event.one_shot,
                    wants,
                    routed,
                    node: node.cloned(),
                });
                return Ok(());
            }
            for want in wants {
                self.send(Demanded::Touch {
                    want,
                    node: node.cloned(),
                });
            }
            return Ok(());
        }
        if event.asked.repeats() {
            // The session found the stream's last list of the type again (every SotW ACK):
            // what the stream asks is what it asked, and nothing is looked up (S10: the relay's
            // costliest work of its own per change, a request per stream).
            return Ok(());
        }
        let changed = {
            let mut seen = self
                .shard(event.stream)
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let types = seen.entry(event.stream).or_default();
            let wants = match types.get_mut(type_url) {
                Some(wants) => wants,
                None => types.entry(type_url.clone()).or_insert_with(|| TypeWants {
                    group: group_of(self.by, node.map(|n| &**n), type_url),
                    type_key: TypeKey::of(type_url),
                    authorities: self.authorities.clone(),
                    wildcard: false,
                    locators: BTreeSet::new(),
                    names: Arc::default(),
                    last: None,
                }),
            };
            wants.update(&event.asked, &self.lists)
        };
        let Changed {
            added,
            dropped,
            list,
        } = changed;
        for want in dropped {
            self.send(Demanded::Drop {
                stream: event.stream,
                want,
            });
        }
        if let Some(list) = list {
            // A stream's first list: asked alike by the streams of a fleet, held once.
            self.acquire_list(event.stream, list, node);
        }
        if added.len() >= LIST_FROM {
            // Asked alike by other streams, likely: one list for them all.
            let list = self
                .lists
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .intern(added, None, None);
            self.acquire_list(event.stream, list, node);
        } else if !added.is_empty() {
            // Answered when the upstream answers, not told first that nothing exists: pending
            // before the server answers this request.
            let routed = self.hold_for(&added, node.map(|n| &**n));
            self.send(Demanded::Acquire {
                stream: event.stream,
                wants: added,
                routed,
                node: node.cloned(),
            });
        }
        Ok(())
    }

    fn one_shot_done(&self, event: &OneShotDone) {
        // (A one-shot the relay acquired nothing for is nobody's: the source passes it over.)
        self.send(Demanded::Release {
            stream: event.one_shot,
        });
    }

    fn stream_closed(&self, event: &StreamClosed<'_>) {
        let held = {
            let mut seen = self
                .shard(event.stream)
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            seen.remove(&event.stream)
        };
        if held.is_some() {
            self.send(Demanded::Release {
                stream: event.stream,
            });
        }
    }
}
