//! The common push's short way (`DeltaMachine::poll_changed`) against the general way
//! (`collect` and `emit`): two machines driven alike, one made to take the general way always,
//! must send the same responses and then hold the same.

use std::cell::Cell;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

use super::*;
use crate::protocol::test_support::{remove, set, store_with, views};
use crate::store::Store;
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

thread_local! {
    /// Set: `poll_response` never takes the short way (this thread's machines).
    pub(super) static GENERAL_ONLY: Cell<bool> = const { Cell::new(false) };
    /// How many responses the short way made (or found owed nothing) on this thread.
    pub(super) static SHORT_WAY: Cell<usize> = const { Cell::new(0) };
}

/// One store, and a machine of each way subscribed to it.
struct Pair {
    store: Store,
    type_url: &'static str,
    short: (DeltaMachine, NonceGen),
    general: (DeltaMachine, NonceGen),
}

impl Pair {
    fn new(type_url: &'static str, resources: &[(&str, &str)]) -> Pair {
        let machine = || (DeltaMachine::new(type_url.into()), NonceGen::default());
        Pair {
            store: store_with(type_url, resources),
            type_url,
            short: machine(),
            general: machine(),
        }
    }

    fn machines(&mut self) -> [(&mut (DeltaMachine, NonceGen), bool); 2] {
        [(&mut self.short, false), (&mut self.general, true)]
    }

    fn request(&mut self, subscribe: &[&str], unsubscribe: &[&str], nonce: &str) {
        let req = DeltaDiscoveryRequest {
            type_url: self.type_url.to_string(),
            resource_names_subscribe: subscribe.iter().map(|n| n.to_string()).collect(),
            resource_names_unsubscribe: unsubscribe.iter().map(|n| n.to_string()).collect(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
        let snap = self.store.snapshot();
        let type_url = self.type_url;
        for ((m, _), _) in self.machines() {
            m.handle_request(&(&req).into(), snap.get(type_url));
        }
    }

    fn set(&mut self, name: &str, content: &str) {
        set(&self.store, self.type_url, name, content);
        self.mark(name);
    }

    fn remove(&mut self, name: &str) {
        remove(&self.store, self.type_url, name);
        self.mark(name);
    }

    fn mark(&mut self, name: &str) {
        let name: Arc<str> = Arc::from(name);
        for ((m, _), _) in self.machines() {
            m.mark_changed([&name]);
        }
    }

    /// The warming resend of `name` (what the session asks of a cluster's endpoints).
    fn resend(&mut self, name: &str) {
        let name: Arc<str> = Arc::from(name);
        for ((m, _), _) in self.machines() {
            m.resend(&name);
        }
    }

    /// Polls both machines until neither owes anything; the responses must be the same, and
    /// so must what each machine then believes the client holds of `names`. Returns the
    /// responses' nonces (to ACK with) and how many the short way made.
    fn poll(&mut self, names: &[&str]) -> (Vec<String>, usize) {
        let snap = self.store.snapshot();
        let views = views(&snap, self.type_url);
        let mut nonces = Vec::new();
        let before = SHORT_WAY.get();
        loop {
            let [short, general] = self.machines().map(|((m, n), general_only)| {
                GENERAL_ONLY.set(general_only);
                let r = m.poll_response(&views, n);
                GENERAL_ONLY.set(false);
                r
            });
            match (short, general) {
                (None, None) => break,
                (Some(short), Some(general)) => {
                    let (short, general) = (seen(&short), seen(&general));
                    assert_eq!(
                        short, general,
                        "the short way's response is the general way's"
                    );
                    nonces.push(short.2);
                }
                (short, general) => {
                    panic!("one way answered, the other not: {short:?} against {general:?}")
                }
            }
        }
        for name in names {
            assert_eq!(
                self.short.0.client_version(name),
                self.general.0.client_version(name),
                "what the client holds of {name}, as each machine believes"
            );
        }
        (nonces, SHORT_WAY.get() - before)
    }
}

/// Everything a response says (its resources by name and version, and the very resources).
type Seen = (
    String,
    String,
    String,
    Vec<(String, String, usize)>,
    Option<bytes::Bytes>,
    String,
    bool,
    Option<usize>,
);

fn seen(r: &DeltaResponse) -> Seen {
    (
        r.type_url.to_string(),
        r.system_version_info.to_string(),
        r.nonce.as_str().to_string(),
        r.resources
            .iter()
            .map(|x| {
                (
                    x.name().to_string(),
                    x.version().to_string(),
                    Arc::as_ptr(x) as usize,
                )
            })
            .collect(),
        r.whole.clone(),
        format!(
            "removed {:?} {:?} heartbeats {:?} unresolved {:?} encoding {:?}",
            r.removed, r.removed_variants, r.heartbeats, r.unresolved, r.encoding
        ),
        r.control_plane,
        r.oversized,
    )
}

#[test]
fn the_common_push_sends_what_the_general_way_sends_and_records_the_same() {
    let names = ["a", "b", "c", "d"];
    let mut p = Pair::new(CLUSTER, &[("a", "1"), ("b", "1"), ("c", "1")]);
    p.request(&["a", "b", "c", "d"], &[], "");
    let (nonces, short) = p.poll(&names);
    assert_eq!(
        (nonces.len(), short),
        (1, 0),
        "a first response goes the general way"
    );
    p.request(&[], &[], &nonces[0]);
    // One name changed, then two at once (sent in name order), then one set to what the
    // client already holds (nothing owed).
    p.set("b", "2");
    let (nonces, short) = p.poll(&names);
    assert_eq!((nonces.len(), short), (1, 1));
    p.request(&[], &[], &nonces[0]);
    p.set("c", "2");
    p.set("a", "2");
    assert_eq!(p.poll(&names).1, 1);
    p.set("a", "2");
    let (nonces, short) = p.poll(&names);
    assert_eq!((nonces.len(), short), (0, 1), "held already: nothing owed");
    // A subscribed name that appears; one sent again whether held or not (warming).
    p.set("d", "1");
    assert_eq!(p.poll(&names).1, 1);
    p.resend("a");
    let (nonces, short) = p.poll(&names);
    assert_eq!((nonces.len(), short), (1, 1), "sent again, though held");
    p.resend("a");
    p.set("b", "3");
    let (nonces, short) = p.poll(&names);
    assert_eq!(
        (nonces.len(), short),
        (1, 1),
        "a resend and a change, in one response"
    );
    // A removal goes the general way; so does a change of a name not held.
    p.remove("c");
    let (nonces, short) = p.poll(&names);
    assert_eq!((nonces.len(), short), (1, 0));
    p.set("e", "1");
    assert_eq!(
        p.poll(&names),
        (Vec::new(), 0),
        "not subscribed: nothing owed"
    );
}

#[test]
fn the_common_push_to_a_wildcard_client_sends_what_the_general_way_sends() {
    let names = ["a", "b", "c"];
    let mut p = Pair::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    p.request(&["*"], &[], "");
    let (nonces, _) = p.poll(&names);
    p.request(&[], &[], &nonces[0]);
    p.set("a", "2");
    p.set("c", "1");
    let (nonces, short) = p.poll(&names);
    assert_eq!((nonces.len(), short), (1, 1), "a change and a new name");
    p.resend("b");
    p.resend("c");
    assert_eq!(p.poll(&names).1, 1);
    p.remove("a");
    assert_eq!(p.poll(&names).1, 0, "a removal goes the general way");
}

#[test]
fn the_common_push_of_one_resource_holds_it_without_a_vector() {
    let mut p = Pair::new(CLUSTER, &[("a", "1"), ("b", "1")]);
    p.request(&["a", "b"], &[], "");
    let (nonces, _) = p.poll(&["a", "b"]);
    p.request(&[], &[], &nonces[0]);
    let one = |p: &mut Pair| {
        let snap = p.store.snapshot();
        let views = views(&snap, p.type_url);
        let (m, n) = &mut p.short;
        m.poll_response(&views, n).expect("a push")
    };
    p.set("a", "2");
    let r = one(&mut p);
    assert!(
        matches!(r.resources.0, super::Slots::One(_)),
        "one, held so"
    );
    assert_eq!(r.resources.len(), 1);
    assert_eq!(&**r.resources[0].name(), "a");
    p.set("a", "3");
    p.set("b", "2");
    let mut r = one(&mut p);
    assert!(matches!(r.resources.0, super::Slots::Many(_)));
    let names: Vec<&str> = r.resources.iter().map(|x| &**x.name()).collect();
    assert_eq!(names, ["a", "b"]);
    r.resources[1] = r.resources[0].clone();
    let names: Vec<&str> = r.resources.iter().map(|x| &**x.name()).collect();
    assert_eq!(names, ["a", "a"], "written through the slice");
}
