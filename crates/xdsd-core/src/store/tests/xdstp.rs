//! `xdstp://` names in the store (xRFC TP1): kept canonical, checked, and a member's change
//! reaching the watchers of its glob collection.

use super::*;

const EP: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";

#[test]
fn xdstp_names_are_kept_canonical() {
    let store = Store::new();
    let name = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1?z=1&k=v";
    store.replace_all([input(EP, name, b"1")]).unwrap();
    let snap = store.snapshot();
    let canonical = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1?k=v&z=1";
    assert!(snap.resource(EP, canonical).is_some());
    assert!(snap.resource(EP, name).is_none());
    // A removal by either spelling removes it.
    store
        .apply([Change::Remove {
            type_url: EP.into(),
            name: name.into(),
        }])
        .unwrap();
    assert!(store.snapshot().resource(EP, canonical).is_none());
}

#[test]
fn the_same_xdstp_name_in_two_spellings_is_a_duplicate() {
    let store = Store::new();
    let err = store
        .replace_all([
            input(
                EP,
                "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c/e?x=1&y=2",
                b"1",
            ),
            input(
                EP,
                "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c/e?y=2&x=1",
                b"2",
            ),
        ])
        .unwrap_err();
    assert!(matches!(err, StoreError::Duplicate { .. }), "{err}");
}

#[test]
fn a_malformed_xdstp_name_is_refused_with_what_is_wrong() {
    let store = Store::new();
    let err = store
        .replace_all([
            input(EP, "xdstp://a/envoy.config.cluster.v3.Cluster/c", b"1")
                .with_origin("eps.yaml (resource #1)"),
        ])
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::BadName { .. }), "{text}");
    assert!(text.contains("eps.yaml (resource #1)"), "{text}");
    assert!(text.contains("not the resource's type"), "{text}");
    // Other names are opaque: nothing is checked.
    store
        .replace_all([input(EP, "xdstp-ish ?b&a", b"1")])
        .unwrap();
}

/// The collection of the member tests below.
const C1: &str = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";

/// A store holding the member `C1/e1`, the endpoints' type URL, and a watcher of `C1/*`.
fn a_member_and_its_globs_watcher() -> (Store, Arc<str>, Watcher) {
    let store = Store::new();
    store
        .replace_all([input(EP, &format!("{C1}/e1"), b"1")])
        .unwrap();
    let ep = arc(EP);
    let mut glob = store.watcher();
    glob.watch(&ep, [&arc(&format!("{C1}/*"))]);
    (store, ep, glob)
}

/// The names of type `ep` that changed for `w` since it last took its changes.
fn changed_names(w: &mut Watcher, ep: &Arc<str>) -> Vec<String> {
    let changes = w.take_changes().into_sets();
    changes[ep].iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_member_change_wakes_the_watchers_of_its_collection_with_its_name() {
    let (store, ep, mut glob) = a_member_and_its_globs_watcher();
    let mut other = store.watcher();
    other.watch(
        &ep,
        [&arc("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/*")],
    );
    store
        .apply([Change::Set(input(EP, &format!("{C1}/e2"), b"1"))])
        .unwrap();
    assert_eq!(changed_names(&mut glob, &ep), [format!("{C1}/e2")]);
    assert!(other.take_changes().into_sets().is_empty());
    // Below the glob's path: not a member.
    store
        .apply([Change::Set(input(EP, &format!("{C1}/sub/e3"), b"1"))])
        .unwrap();
    assert!(glob.take_changes().into_sets().is_empty());
}

#[test]
fn a_member_change_reaches_its_collections_watchers_through_the_collection_its_resource_carries() {
    // The commit works the member's collection out once, when it builds its resource; the
    // watch index reads it there, not out of the name again.
    let (store, ep, mut glob) = a_member_and_its_globs_watcher();
    crate::xdstp::WORKED_OUT.with(|w| w.set(0));
    store
        .apply([Change::Set(input(EP, &format!("{C1}/e2"), b"1"))])
        .unwrap();
    assert_eq!(
        crate::xdstp::WORKED_OUT.with(|w| w.get()),
        1,
        "once, building its resource"
    );
    assert_eq!(changed_names(&mut glob, &ep), [format!("{C1}/e2")]);
    // Removed: its collection as its old resource carried it.
    store
        .apply([Change::Remove {
            type_url: EP.into(),
            name: format!("{C1}/e2"),
        }])
        .unwrap();
    let changes = glob.take_changes().into_sets();
    assert_eq!(changes[&ep].len(), 1);
}
