//! The one-shot answer's rules and REST's, one test each.

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use futures::FutureExt as _;

use super::*;
use crate::protocol::test_support::{set, store_with};
use crate::store::Store;
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

fn request(type_url: &str, names: &[&str], version: &str) -> SotwRequest {
    (&DiscoveryRequest {
        type_url: type_url.into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        version_info: version.into(),
        ..Default::default()
    })
        .into()
}

fn answer(store: &Store, type_url: &str, names: &[&str], version: &str) -> Answer {
    let snapshot = store.snapshot();
    let session = Session::new(Some(type_url.into()));
    Pending::new(session, &request(type_url, names, version), &snapshot)
        .expect("a valid request")
        .answer(&snapshot)
}

fn names(response: &SotwResponse) -> Vec<String> {
    response.names().iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_one_shot_answer_is_the_whole_state_whatever_version_the_client_has() {
    let store = store_with(CLUSTER, &[("a", "1"), ("b", "2")]);
    let first = answer(&store, CLUSTER, &[], "");
    let current = first.response.version_info.to_string();
    // A stream would send nothing to a client at the current version; a one-shot answers all.
    let again = answer(&store, CLUSTER, &[], &current);
    assert_eq!(names(&again.response), ["a", "b"]);
    assert_eq!(&*again.response.version_info, current);
}

#[test]
fn parts_concatenate_in_order_at_the_last_version() {
    let store = Store::new();
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "a", "a");
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "b", "b");
    let before = store.snapshot();
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "c", "c");
    let after = store.snapshot();
    let t = before.get(CLUSTER_LOAD_ASSIGNMENT).unwrap();
    let part = |resources, version: &str| SotwResponse {
        type_url: t.type_url().clone(),
        version_info: version.into(),
        nonce: Nonce::default(),
        resources,
        encoding: Encoding::default(),
        updated: Default::default(),
        oversized: None,
        control_plane: true,
    };
    let c = after.resource(CLUSTER_LOAD_ASSIGNMENT, "c").unwrap();
    let whole = concatenate(
        part(SotwResources::All(t.view(&ParamSet::new())), "1"),
        part(SotwResources::Some(vec![c.clone()].into()), "2"),
    );
    assert_eq!(names(&whole), ["a", "b", "c"]);
    assert_eq!(&*whole.version_info, "2");
}

#[test]
fn nothing_owed_is_answered_empty_at_the_types_version() {
    let store = store_with(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    let answer = answer(&store, CLUSTER_LOAD_ASSIGNMENT, &["missing"], "");
    assert!(names(&answer.response).is_empty());
    let snapshot = store.snapshot();
    let version = snapshot
        .get(CLUSTER_LOAD_ASSIGNMENT)
        .unwrap()
        .view(&ParamSet::new())
        .version()
        .clone();
    assert_eq!(answer.response.version_info, version);
    assert!(!version.is_empty());
}

#[test]
fn the_rest_version_changes_with_the_answers_resources_only() {
    let store = store_with(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    let v1 = rest_version(&answer(&store, CLUSTER_LOAD_ASSIGNMENT, &["a"], "").response);
    assert_eq!(v1.len(), 16);
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "b", "2");
    let v2 = rest_version(&answer(&store, CLUSTER_LOAD_ASSIGNMENT, &["a"], "").response);
    assert_eq!(v1, v2, "a resource not asked for changed the version");
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "a", "2");
    let v3 = rest_version(&answer(&store, CLUSTER_LOAD_ASSIGNMENT, &["a"], "").response);
    assert_ne!(v1, v3);
}

#[test]
fn a_rest_poll_at_the_current_version_is_held_when_polls_are_held() {
    let hold = Duration::from_secs(30);
    assert!(rest_holds("v1", "v1", hold));
    assert!(!rest_holds("v0", "v1", hold));
    assert!(!rest_holds("", "v1", hold));
    assert!(!rest_holds("v1", "v1", Duration::ZERO));
}

#[test]
fn an_unchanged_rest_version_is_not_modified() {
    assert!(!rest_modified("v1", "v1"));
    assert!(rest_modified("v1", "v2"));
    assert!(rest_modified("", "v2"));
}

#[test]
fn a_rest_answer_carries_its_rest_version_and_no_nonce() {
    let store = store_with(CLUSTER, &[("a", "1")]);
    let answer = answer(&store, CLUSTER, &[], "");
    let version = rest_version(&answer.response);
    let response = answer.into_rest(version.clone());
    assert_eq!(&*response.version_info, version);
    assert!(response.nonce.as_str().is_empty());
    assert_eq!(names(&response), ["a"]);
}

#[test]
fn a_held_poll_watches_what_its_request_subscribes_to() {
    let store = store_with(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    let answer = answer(&store, CLUSTER_LOAD_ASSIGNMENT, &["a"], "");
    let mut watcher = store.watcher();
    answer.watch(&mut watcher);
    assert!(
        watcher.params_len().is_some(),
        "the parameter sets go first"
    );
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "b", "2");
    assert!(
        watcher.changed().now_or_never().is_none(),
        "a name not asked for woke the poll"
    );
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "a", "2");
    assert!(watcher.changed().now_or_never().is_some());
    let changes = watcher.take_changes();
    assert_eq!(
        changes
            .names(CLUSTER_LOAD_ASSIGNMENT)
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
        ["a"]
    );
}

#[test]
fn a_one_shot_answer_waits_for_an_asked_name_pending_and_absent_until_its_time() {
    use crate::store::{PendingName, WHOLE_TYPE};
    let store = store_with(CLUSTER_LOAD_ASSIGNMENT, &[("b", "1")]);
    let until = Instant::now() + Duration::from_secs(10);
    let pending = store.pending_names();
    for name in ["a", "b", WHOLE_TYPE] {
        pending
            .declare(PendingName::new(CLUSTER_LOAD_ASSIGNMENT, name), until)
            .expect("room");
    }
    let taken = |names: &[&str]| {
        let session = Session::new(Some(CLUSTER_LOAD_ASSIGNMENT.into()));
        Pending::new(
            session,
            &request(CLUSTER_LOAD_ASSIGNMENT, names, ""),
            &store.snapshot(),
        )
        .expect("a valid request")
    };
    assert_eq!(taken(&["a"]).waits_until(&store.snapshot()), Some(until));
    assert_eq!(
        taken(&["b"]).waits_until(&store.snapshot()),
        None,
        "the store has it"
    );
    assert_eq!(
        taken(&[]).waits_until(&store.snapshot()),
        Some(until),
        "the wildcard waits for the whole type"
    );
    pending.resolve([&PendingName::new(CLUSTER_LOAD_ASSIGNMENT, "a")]);
    assert_eq!(taken(&["a"]).waits_until(&store.snapshot()), None);
}

#[test]
fn a_one_shot_answer_to_a_glob_collection_is_its_members() {
    const T: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
    let c1 = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";
    let (e1, e2, deeper) = (format!("{c1}/e1"), format!("{c1}/e2"), format!("{c1}/x/e3"));
    let store = store_with(T, &[(&e1, "1"), (&e2, "1"), (&deeper, "1")]);
    let glob = format!("{c1}/*");
    let answer = answer(&store, T, &[&glob], "");
    assert_eq!(names(&answer.response), [e1, e2]);
}
