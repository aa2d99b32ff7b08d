//! What each connected client was sent, ACKed and NACKed, type by type: what CSDS and the admin
//! API show. Each stream has its own record, fed by the events of the stream (the record is an
//! observer of the streams: see `stats`), and dropped with the stream. It is bounded: one entry per type the session serves
//! (the session bounds those), at most [`MAX_TRACKED_RESOURCES`] resources of the last response
//! of each, a NACK message cut to [`MAX_NACK_MESSAGE_BYTES`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::observer::Sent as SentResponse;
use crate::metrics::{Metrics, TypeMetrics};
use crate::protocol::session::ClientNode;
use crate::protocol::sotw::{ResourceList, SotwResources};
use crate::protocol::Nonce;
use crate::store::{Resource, View};
use crate::types::TypeMap;

/// The resources of a type's last response a stream keeps (names, versions, origins): a response
/// with more is summed up by its count.
pub const MAX_TRACKED_RESOURCES: usize = 100;

/// A NACK's error message is kept up to this many bytes.
pub const MAX_NACK_MESSAGE_BYTES: usize = 4096;

/// The origins (resource files) a NACK is traced to, at most.
pub const MAX_NACK_ORIGINS: usize = 8;

/// One connected client (one stream) as an operator sees it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientStatus {
    /// The stream's id, unique in this server's lifetime (it appears in the logs).
    pub stream: u64,
    /// Aggregated (ADS), or a per-type service.
    pub ads: bool,
    /// "SotW" or "delta".
    pub flavor: &'static str,
    /// The client's address, when known.
    pub peer: Option<SocketAddr>,
    /// When the stream opened.
    pub connected_at: SystemTime,
    /// The client's node, once a request carried one.
    pub node: Option<ClientNode>,
    /// The stream's counts.
    pub counters: super::StreamCounters,
    /// Every type the client requested, by type URL.
    pub types: Vec<TypeStatus>,
}

/// Where a client stands with one type.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TypeStatus {
    /// The type URL.
    pub type_url: Arc<str>,
    /// The last response sent.
    pub last_sent: Option<Sent>,
    /// The last ACK.
    pub last_ack: Option<Ack>,
    /// The last NACK (boxed: most clients never NACK, and every stream keeps a record per type).
    pub last_nack: Option<Box<Nack>>,
    /// Whether the last answer (ACK or NACK) was a NACK.
    pub nacked: bool,
    /// Whether the last response sent awaits its ACK or NACK.
    pub pending: bool,
    /// What the client said it holds when it subscribed (a client reconnecting, perhaps from
    /// another replica: versions are content hashes, the same wherever the same resources are
    /// served). With nothing sent since, the session found it holds what it is owed: a client
    /// holding anything else is sent it at once, and is STALE until it ACKs.
    pub held: Option<Held>,
}

/// What a reconnecting client said it holds of a type, on its first request for it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Held {
    /// SotW's `version_info` (empty for delta, whose resources each have theirs).
    pub version: Arc<str>,
    /// How many resources a delta client listed in `initial_resource_versions` (0 for SotW).
    pub resources: usize,
}

impl TypeStatus {
    /// The version the client runs: its last ACKed, else the one it said it held.
    pub fn running_version(&self) -> Option<&Arc<str>> {
        match (&self.last_ack, &self.held) {
            (Some(ack), _) => Some(&ack.version),
            (None, Some(held)) if !held.version.is_empty() => Some(&held.version),
            _ => None,
        }
    }
}

/// A response as it was sent.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Sent {
    /// The response's version: the type's for SotW, `system_version_info` for delta.
    pub version: Arc<str>,
    /// Its nonce.
    pub nonce: Nonce,
    /// When it was sent.
    pub at: SystemTime,
    /// How many resources it carried.
    pub resource_count: usize,
    /// How many names it removed (delta).
    pub removed: usize,
    /// Its first [`MAX_TRACKED_RESOURCES`] resources.
    pub resources: SentResources,
}

/// The resources of a response as a record keeps them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SentResources {
    /// A whole view (a wildcard response): the view itself, shared with the store and every
    /// stream sent it, not a list of it per stream.
    View(Arc<View>),
    /// A selection: its first [`MAX_TRACKED_RESOURCES`].
    List(ResourceList),
    /// A response of one resource (nearly every delta push): the resource itself, no list made
    /// for it (and none freed when the next response's record replaces it).
    One(Arc<Resource>),
}

impl SentResources {
    /// The first [`MAX_TRACKED_RESOURCES`] resources of a list.
    pub fn list<'a>(resources: impl Iterator<Item = &'a Arc<Resource>>) -> SentResources {
        SentResources::List(capped_list(resources))
    }

    /// A response's own list, shared when it is short enough to be kept whole.
    pub fn shared(list: &ResourceList) -> SentResources {
        SentResources::List(capped(list))
    }

    /// The resources kept: at most [`MAX_TRACKED_RESOURCES`], in the response's order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        let (view, list) = match self {
            SentResources::View(view) => (Some(view.iter().take(MAX_TRACKED_RESOURCES)), &[][..]),
            SentResources::List(list) => (None, &list[..]),
            SentResources::One(r) => (None, std::slice::from_ref(r)),
        };
        view.into_iter().flatten().chain(list.iter())
    }

    /// How many resources are kept.
    pub fn len(&self) -> usize {
        match self {
            SentResources::View(view) => view.len().min(MAX_TRACKED_RESOURCES),
            SentResources::List(list) => list.len(),
            SentResources::One(_) => 1,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The resources a response carries, as the record of its client keeps them; a delta
/// response's list of several is shared through `lists` with the records of the other streams
/// sent the same resources.
pub(crate) fn carried(response: SentResponse<'_>, lists: &SharedLists) -> SentResources {
    match response {
        SentResponse::Sotw(r) => match &r.resources {
            SotwResources::All(view) => SentResources::View(view.clone()),
            SotwResources::Some(list) => SentResources::shared(list),
        },
        SentResponse::Delta(r) => match &r.resources[..] {
            [one] => SentResources::One(one.clone()),
            all => SentResources::List(lists.list(all)),
        },
    }
}

/// The last list of resources a record kept of a delta response, shared by the records of every
/// stream sent the same resources (a first response of a whole view goes to every stream
/// subscribed to it): one list, not one per stream, made and later dropped (100 counts taken
/// and given back on resources every stream shares).
#[derive(Debug, Default)]
pub(crate) struct SharedLists(std::sync::Mutex<Option<ResourceList>>);

impl SharedLists {
    /// The first [`MAX_TRACKED_RESOURCES`] of `resources`: the last list made, when it holds the
    /// very same resources, else a new one (kept for the next).
    pub(crate) fn list(&self, resources: &[Arc<Resource>]) -> ResourceList {
        let kept = &resources[..resources.len().min(MAX_TRACKED_RESOURCES)];
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = last
            .as_ref()
            .filter(|l| l.len() == kept.len() && l.iter().zip(kept).all(|(a, b)| Arc::ptr_eq(a, b)))
        {
            return list.clone();
        }
        let list: ResourceList = kept.iter().cloned().collect();
        *last = Some(list.clone());
        list
    }
}

/// The resources of a response new or changed for the client, as the record keeps them; `None`
/// when they are the resources it carries (a delta response carries only what is new or
/// changed): the record keeps those once.
pub(crate) fn updated(response: SentResponse<'_>) -> Option<ResourceList> {
    match response {
        SentResponse::Sotw(r) => Some(capped(&r.updated)),
        SentResponse::Delta(_) => None,
    }
}

/// The first [`MAX_TRACKED_RESOURCES`] of `resources`.
pub(crate) fn capped_list<'a>(resources: impl Iterator<Item = &'a Arc<Resource>>) -> ResourceList {
    resources.take(MAX_TRACKED_RESOURCES).cloned().collect()
}

/// `list` itself when it has at most [`MAX_TRACKED_RESOURCES`], else its first ones.
pub(crate) fn capped(list: &ResourceList) -> ResourceList {
    if list.len() <= MAX_TRACKED_RESOURCES {
        list.clone()
    } else {
        capped_list(list.iter())
    }
}

#[derive(Debug, Clone)]
#[non_exhaustive]
/// An ACK as it was received.
pub struct Ack {
    /// The version of the response ACKed.
    pub version: Arc<str>,
    /// The nonce of the response ACKed.
    pub nonce: String,
    /// When it came.
    pub at: SystemTime,
}

#[derive(Debug, Clone)]
#[non_exhaustive]
/// A NACK as it was received.
pub struct Nack {
    /// The nonce of the response rejected.
    pub nonce: String,
    /// The version of the response rejected.
    pub version: Option<Arc<str>>,
    /// The client's `error_detail` message (cut to [`MAX_NACK_MESSAGE_BYTES`]).
    pub message: String,
    /// When it came.
    pub at: SystemTime,
    /// Where the rejected resources came from ("file (resource #N)"), when they can be told: the
    /// resources of the rejected response that the message names, else its new or changed ones
    /// if there are few; at most [`MAX_NACK_ORIGINS`].
    pub origins: Vec<Arc<str>>,
}

impl TypeStatus {
    pub(crate) fn new(type_url: Arc<str>) -> TypeStatus {
        TypeStatus {
            type_url,
            last_sent: None,
            last_ack: None,
            last_nack: None,
            nacked: false,
            pending: false,
            held: None,
        }
    }
}

/// One type of one stream, as tracked.
struct TypeTrack {
    status: TypeStatus,
    /// The metrics of this type, labelled by its type URL, or "other" for a type neither well
    /// known nor in the store when the client first asked for it (a client can name any type
    /// URL).
    metrics: TypeMetrics,
    /// When the last response went out, and when the last ACK came: the records' wall-clock
    /// times (`Sent::at`, `Ack::at`) are worked out from these when read ([`Track::types`]),
    /// not read from the clock at every response and ACK.
    sent_instant: Option<Instant>,
    ack_instant: Option<Instant>,
    /// The new or changed resources of the last response (capped; the response's own list
    /// when short enough); `None`: the resources it carried, as `last_sent` keeps them.
    updated: Option<ResourceList>,
}

/// The record of one stream.
pub(crate) struct Track {
    /// Shared with the stream's session.
    pub(crate) node: Option<Arc<ClientNode>>,
    /// Per type (every response and ACK looks one up). Boxed: the records are large and the
    /// list grows by doubling.
    types: TypeMap<Box<TypeTrack>>,
    metrics: Metrics,
}

/// The type URLs xdsd knows by name: each is its own metrics label.
fn well_known(type_url: &str) -> bool {
    use crate::types::*;
    PER_TYPE_SERVICES.iter().any(|(_, t)| *t == type_url) || type_url == TYPED_EXTENSION_CONFIG
}

/// The metrics label of a type: its type URL, or "other".
fn label(type_url: &str, in_store: bool) -> &str {
    if in_store || well_known(type_url) {
        type_url
    } else {
        "other"
    }
}

impl Track {
    pub(crate) fn new(metrics: Metrics) -> Track {
        Track {
            node: None,
            types: TypeMap::default(),
            metrics,
        }
    }

    /// The type's record, made on the first request for it; `in_store`: the store had the type
    /// then; `held`: what the client said it holds, on its first request for the type.
    pub(crate) fn requested(&mut self, type_url: &Arc<str>, in_store: bool, held: Option<Held>) {
        let t = self.track(type_url, in_store);
        if held.is_some() {
            t.status.held = held;
        }
    }

    /// The type's record, made if it is the first time.
    fn track(&mut self, type_url: &Arc<str>, in_store: bool) -> &mut TypeTrack {
        let metrics = &self.metrics;
        self.types.get_or_insert_with(type_url, || {
            Box::new(TypeTrack {
                status: TypeStatus::new(type_url.clone()),
                metrics: metrics.for_type(label(type_url, in_store)),
                sent_instant: None,
                ack_instant: None,
                updated: None,
            })
        })
    }

    /// A response of `bytes` went out at `now`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sent(
        &mut self,
        type_url: &Arc<str>,
        version: &Arc<str>,
        nonce: Nonce,
        resources: SentResources,
        resource_count: usize,
        removed: usize,
        updated: Option<ResourceList>,
        bytes: usize,
        now: Instant,
    ) {
        let t = self.track(type_url, true);
        t.metrics.sent(resource_count, bytes);
        t.status.last_sent = Some(Sent {
            version: version.clone(),
            nonce,
            // Worked out when read, from `sent_instant`.
            at: SystemTime::UNIX_EPOCH,
            resource_count,
            removed,
            resources,
        });
        t.status.pending = true;
        t.sent_instant = Some(now);
        t.updated = updated;
    }

    /// The client ACKed (`nack` None) or NACKed the response with `nonce`, at `now`. Returns
    /// the time since that response went out, when it is the latest.
    pub(crate) fn answered(
        &mut self,
        type_url: &Arc<str>,
        nonce: &str,
        nack: Option<(Option<Arc<str>>, &str)>,
        now: Instant,
    ) -> Option<Duration> {
        let t = self.track(type_url, true);
        let latest = t
            .status
            .last_sent
            .as_ref()
            .filter(|s| s.nonce.as_bytes() == nonce.as_bytes());
        let latency = match (latest, t.sent_instant) {
            (Some(_), Some(at)) if t.status.pending => Some(now.saturating_duration_since(at)),
            _ => None,
        };
        if latest.is_some() {
            t.status.pending = false;
        }
        t.metrics.answered(nack.is_none(), latency);
        match nack {
            None => {
                let version = latest
                    .map(|s| s.version.clone())
                    .unwrap_or_else(|| Arc::from(""));
                match &mut t.status.last_ack {
                    // Written over in place: every ACK of a stream is one, and its nonce a
                    // string as long as the last.
                    Some(ack) => {
                        ack.version = version;
                        ack.nonce.clear();
                        ack.nonce.push_str(nonce);
                    }
                    None => {
                        // Room for any nonce xdsd sends (a number of up to 20 digits): written
                        // over at every ACK, it is not grown as the nonces get longer.
                        let mut held = String::with_capacity(nonce.len().max(20));
                        held.push_str(nonce);
                        t.status.last_ack = Some(Ack {
                            version,
                            nonce: held,
                            // Worked out when read, from `ack_instant`.
                            at: SystemTime::UNIX_EPOCH,
                        })
                    }
                }
                t.ack_instant = Some(now);
                t.status.nacked = false;
            }
            Some((version, message)) => {
                let origins = latest
                    .map(|s| {
                        let updated: &[Arc<Resource>] = match (&t.updated, &s.resources) {
                            (Some(updated), _) => &updated[..],
                            (None, SentResources::List(list)) => &list[..],
                            (None, SentResources::One(r)) => std::slice::from_ref(r),
                            (None, SentResources::View(_)) => &[],
                        };
                        origins(&s.resources, updated, message)
                    })
                    .unwrap_or_default();
                t.status.last_nack = Some(Box::new(Nack {
                    nonce: nonce.to_owned(),
                    version,
                    message: cut(message, MAX_NACK_MESSAGE_BYTES).to_owned(),
                    at: SystemTime::now(),
                    origins,
                }));
                t.status.nacked = true;
            }
        }
        latency
    }

    pub(crate) fn types(&self) -> Vec<TypeStatus> {
        // The wall-clock times of the last response and ACK, from their instants and one
        // reading of both clocks.
        let (now, wall) = (Instant::now(), SystemTime::now());
        let at = |instant: Instant| {
            wall.checked_sub(now.saturating_duration_since(instant))
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        let mut types: Vec<TypeStatus> = self
            .types
            .values()
            .map(|t| {
                let mut status = t.status.clone();
                if let (Some(sent), Some(instant)) = (&mut status.last_sent, t.sent_instant) {
                    sent.at = at(instant);
                }
                if let (Some(ack), Some(instant)) = (&mut status.last_ack, t.ack_instant) {
                    ack.at = at(instant);
                }
                status
            })
            .collect();
        types.sort_by(|a, b| a.type_url.cmp(&b.type_url));
        types
    }
}

/// The origins of the resources a NACK `message` is about, among a response's `resources` and its
/// new or changed ones, `updated`: those the message names, else the changed ones (or all, for a
/// first response, which has none) when there are few enough to be told apart by hand.
fn origins(resources: &SentResources, updated: &[Arc<Resource>], message: &str) -> Vec<Arc<str>> {
    let named: Vec<&Arc<Resource>> = updated
        .iter()
        .chain(resources.iter())
        .filter(|r| !r.name().is_empty() && message.contains(&**r.name()))
        .collect();
    let candidates: Vec<&Arc<Resource>> = if !named.is_empty() {
        named
    } else if !updated.is_empty() {
        updated.iter().collect()
    } else {
        resources.iter().collect()
    };
    if candidates.len() > MAX_NACK_ORIGINS
        && !candidates.iter().any(|r| message.contains(&**r.name()))
    {
        return Vec::new();
    }
    let mut out: Vec<Arc<str>> = Vec::new();
    for origin in candidates.iter().filter_map(|r| r.origin()) {
        if out.len() == MAX_NACK_ORIGINS {
            break;
        }
        if !out.contains(origin) {
            out.push(origin.clone());
        }
    }
    out
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn resource(name: &str, origin: &str) -> Arc<Resource> {
        Arc::new(
            Resource::new(crate::types::CLUSTER, name, Bytes::from_static(b"x"))
                .with_origin(Some(origin.into())),
        )
    }

    #[test]
    fn a_nack_is_traced_to_the_resource_it_names_else_to_the_changed_ones() {
        let all = [
            resource("good", "a.yaml (resource #1)"),
            resource("bad", "b.yaml (resource #1)"),
        ];
        let sent = SentResources::list(all.iter());
        let named = origins(
            &sent,
            &[],
            "Error adding/updating cluster(s) bad: no eds config",
        );
        assert_eq!(named, vec![Arc::<str>::from("b.yaml (resource #1)")]);
        let changed = origins(&sent, &all[..1], "something is wrong");
        assert_eq!(changed, vec![Arc::<str>::from("a.yaml (resource #1)")]);
    }

    #[test]
    fn the_record_shares_a_short_response_list_and_keeps_the_first_of_a_long_one() {
        let short: ResourceList = (0..3).map(|i| resource(&format!("r{i}"), "f")).collect();
        let SentResources::List(kept) = SentResources::shared(&short) else {
            panic!("a list")
        };
        assert!(Arc::ptr_eq(&kept, &short), "the response's own list");
        let long: ResourceList = (0..MAX_TRACKED_RESOURCES + 1)
            .map(|i| resource(&format!("r{i}"), "f"))
            .collect();
        let SentResources::List(kept) = SentResources::shared(&long) else {
            panic!("a list")
        };
        assert_eq!(kept.len(), MAX_TRACKED_RESOURCES);
        assert!(Arc::ptr_eq(&kept[0], &long[0]));
    }

    #[test]
    fn records_of_the_same_delta_resources_share_one_list_of_the_first_ones() {
        let lists = SharedLists::default();
        let all: Vec<Arc<Resource>> = (0..MAX_TRACKED_RESOURCES + 5)
            .map(|i| resource(&format!("r{i}"), "f"))
            .collect();
        let first = lists.list(&all);
        assert_eq!(first.len(), MAX_TRACKED_RESOURCES);
        assert!(first.iter().zip(&all).all(|(a, b)| Arc::ptr_eq(a, b)));
        assert!(Arc::ptr_eq(&lists.list(&all), &first), "shared");
        let other = lists.list(&all[1..]);
        assert!(
            !Arc::ptr_eq(&other, &first),
            "other resources, another list"
        );
        assert!(Arc::ptr_eq(&other[0], &all[1]));
        let changed: Vec<Arc<Resource>> = std::iter::once(resource("r0", "f"))
            .chain(all[1..].iter().cloned())
            .collect();
        let third = lists.list(&changed);
        assert!(
            !Arc::ptr_eq(&third[0], &all[0]),
            "the same names, a resource changed"
        );
        assert_eq!(lists.list(&all[..2]).len(), 2);
    }

    #[test]
    fn the_track_follows_send_nack_send_ack() {
        let mut track = Track::new(Metrics::new());
        let t: Arc<str> = crate::types::CLUSTER.into();
        track.requested(&t, false, None);
        let all = [resource("bad", "b.yaml (resource #1)")];
        track.sent(
            &t,
            &Arc::from("v1"),
            Nonce::from(1),
            SentResources::list(all.iter()),
            1,
            0,
            Some(all.iter().cloned().collect()),
            10,
            Instant::now(),
        );
        assert!(track.types()[0].pending);
        let latency = track.answered(
            &t,
            "1",
            Some((Some("v1".into()), "bad is bad")),
            Instant::now(),
        );
        assert!(latency.is_some());
        let status = &track.types()[0];
        assert!(status.nacked && !status.pending);
        let nack = status.last_nack.as_ref().expect("a NACK");
        assert_eq!(nack.origins, vec![Arc::<str>::from("b.yaml (resource #1)")]);
        track.sent(
            &t,
            &Arc::from("v2"),
            Nonce::from(2),
            SentResources::list(all.iter()),
            1,
            0,
            Some(all.iter().cloned().collect()),
            10,
            Instant::now(),
        );
        let latency = track.answered(&t, "2", None, Instant::now());
        assert!(latency.is_some());
        let status = &track.types()[0];
        assert!(!status.nacked && !status.pending);
        assert_eq!(&*status.last_ack.as_ref().expect("an ACK").version, "v2");
        assert!(status.last_nack.is_some(), "the last NACK stays on record");
    }

    #[test]
    fn a_record_s_times_are_its_response_s_and_ack_s_and_the_latency_the_time_between() {
        let metrics = Metrics::new();
        let mut track = Track::new(metrics.clone());
        let t: Arc<str> = crate::types::CLUSTER.into();
        track.requested(&t, true, None);
        let ago = Duration::from_secs(30);
        let sent_at = Instant::now().checked_sub(ago).expect("a clock past 30 s");
        let acked_at = sent_at + Duration::from_millis(250);
        let before = SystemTime::now();
        track.sent(
            &t,
            &Arc::from("v1"),
            Nonce::from(1),
            SentResources::list(std::iter::empty()),
            0,
            0,
            None,
            10,
            sent_at,
        );
        let latency = track.answered(&t, "1", None, acked_at);
        assert_eq!(latency, Some(Duration::from_millis(250)));
        let status = &track.types()[0];
        let after = SystemTime::now();
        let sent = status.last_sent.as_ref().expect("a response").at;
        let acked = status.last_ack.as_ref().expect("an ACK").at;
        assert!(
            sent >= before - ago - Duration::from_secs(1) && sent <= after - ago,
            "the response's time is when it went out, 30 s ago: {sent:?} ({before:?}..{after:?})"
        );
        assert_eq!(
            acked.duration_since(sent).ok(),
            Some(Duration::from_millis(250)),
            "the ACK's, 250 ms later"
        );
        // The histogram took the latency of the one answer.
        let store = crate::store::Store::new();
        let text = metrics.encode(&store.snapshot());
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix) && l.contains(crate::types::CLUSTER))
                .unwrap_or_else(|| panic!("no {prefix} in:\n{text}"))
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .expect("a value")
        };
        assert_eq!(line("xdsd_push_ack_latency_seconds_count"), 1.0);
        assert!((line("xdsd_push_ack_latency_seconds_sum") - 0.25).abs() < 1e-9);
    }

    #[test]
    fn an_unknown_type_is_labelled_other() {
        assert_eq!(label("type.googleapis.com/made.up.Type", false), "other");
        assert_eq!(
            label("type.googleapis.com/made.up.Type", true),
            "type.googleapis.com/made.up.Type"
        );
        assert_eq!(label(crate::types::CLUSTER, false), crate::types::CLUSTER);
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let text = "é".repeat(MAX_NACK_MESSAGE_BYTES);
        let cut = cut(&text, MAX_NACK_MESSAGE_BYTES + 1);
        assert!(cut.len() <= MAX_NACK_MESSAGE_BYTES + 1);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
