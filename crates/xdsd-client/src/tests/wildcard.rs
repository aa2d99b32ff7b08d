//! Which response answers a type's wildcard (`WildcardAnswer`): one test per rule. A response
//! names no request, so one sent before the server read the request that added the wildcard
//! answers only the names asked before it; the client says the wildcard is answered only when a
//! response must follow the server's reading of it, or at its timeout.

use super::*;

/// The wildcard answers reported.
fn answered(events: &[Event]) -> Vec<WildcardAnswer> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::WildcardAnswered { by, .. } => Some(*by),
            _ => None,
        })
        .collect()
}

/// A SotW stream holding cluster `a` by name (answered), then asking the wildcard too.
fn sotw_a_then_wildcard() -> Pair {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    p.sotw_request();
    p.news();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    let r = p.sotw_request();
    assert_eq!(r.resource_names, ["a", "*"]);
    p
}

/// The same over delta.
fn delta_a_then_wildcard() -> Pair {
    let mut p = Pair::delta();
    p.delta_holding_a();
    p.delta_request();
    p.news();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    assert_eq!(p.delta_request().resource_names_subscribe, ["*"]);
    p
}

#[test]
fn a_wildcard_in_the_streams_first_request_of_its_type_is_answered_by_its_first_response() {
    // Even a response of names asked with it, or an empty one: every response follows it.
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a", "*"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    let events = p.news();
    assert_eq!(answered(&events), [WildcardAnswer::FirstRequest]);
    assert!(
        matches!(events.last(), Some(Event::WildcardAnswered { .. })),
        "after the response's update: {events:?}"
    );

    let mut p = Pair::delta();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.delta_request();
    p.delta_in(delta(CLUSTER, "n1", vec![], &[]));
    assert_eq!(answered(&p.news()), [WildcardAnswer::FirstRequest]);
}

#[test]
fn a_response_of_only_the_names_asked_before_the_wildcard_does_not_answer_it() {
    // SotW: sent before the server read the wildcard's request (then stale), it is the state of
    // `a` alone, not the whole type.
    let mut p = sotw_a_then_wildcard();
    p.sotw_in(sotw(CLUSTER, "v2", "n2", vec![cluster("a", "2")]));
    assert_eq!(answered(&p.news()), []);
    // Delta: a push of a change of `a`.
    let mut p = delta_a_then_wildcard();
    p.delta_in(delta(
        CLUSTER,
        "n2",
        vec![wire("a", "2", Some(cluster("a", "2")))],
        &[],
    ));
    assert_eq!(answered(&p.news()), []);
}

#[test]
fn a_response_carrying_a_resource_no_name_asks_for_answers_the_wildcard() {
    let mut p = sotw_a_then_wildcard();
    p.sotw_in(sotw(CLUSTER, "v2", "n2", vec![cluster("a", "1")]));
    p.sotw_request();
    assert_eq!(answered(&p.news()), []);
    // The ACK carried the wildcard again; the server answers it with the whole type.
    p.sotw_in(sotw(
        CLUSTER,
        "v2",
        "n3",
        vec![cluster("a", "1"), cluster("b", "1"), cluster("c", "1")],
    ));
    let events = p.news();
    assert_eq!(added_names(&events), ["b", "c"]);
    assert_eq!(answered(&events), [WildcardAnswer::Unasked]);

    let mut p = delta_a_then_wildcard();
    p.delta_in(delta(
        CLUSTER,
        "n2",
        vec![
            wire("b", "1", Some(cluster("b", "1"))),
            wire("c", "1", Some(cluster("c", "1"))),
        ],
        &[],
    ));
    assert_eq!(answered(&p.news()), [WildcardAnswer::Unasked]);
}

#[test]
fn a_resource_asked_by_alias_glob_or_locator_is_asked_by_name() {
    let mut p = Pair::delta();
    p.client.connected();
    let glob = "xdstp://a/envoy.config.cluster.v3.Cluster/c1/*";
    let member = "xdstp://a/envoy.config.cluster.v3.Cluster/c1/m";
    p.client
        .subscribe(CLUSTER, ["alias", glob])
        .expect("subscribed");
    p.client
        .subscribe_locator(CLUSTER, "loc", params(&[("env", "prod")]))
        .expect("subscribed");
    p.delta_request();
    p.delta_in(delta(CLUSTER, "n1", vec![], &[]));
    p.delta_request();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.delta_request();
    p.news();
    let mut aliased = wire("real", "1", Some(cluster("real", "1")));
    aliased.aliases = vec!["alias".into()];
    p.delta_in(delta(
        CLUSTER,
        "n2",
        vec![
            aliased,
            wire(member, "1", Some(cluster(member, "1"))),
            variant("loc", "1", cluster("loc", "1"), env_is("prod")),
        ],
        &[],
    ));
    assert_eq!(answered(&p.news()), []);
}

#[test]
fn a_wildcard_no_response_answers_is_answered_at_its_timeout_with_what_is_held() {
    // Every cluster the server has is asked by name: its answer looks like theirs.
    let mut p = sotw_a_then_wildcard();
    p.sotw_in(sotw(CLUSTER, "v1", "n2", vec![cluster("a", "1")]));
    p.sotw_request();
    p.news();
    let due = p.client.poll_timeout().expect("the wildcard's timer runs");
    p.advance(due - p.now - Duration::from_millis(1));
    assert_eq!(answered(&p.news()), []);
    p.advance(Duration::from_millis(1));
    assert_eq!(answered(&p.news()), [WildcardAnswer::TimedOut]);
    assert_eq!(p.client.poll_timeout(), None);
    assert_eq!(p.names(CLUSTER), ["a"]);
}

#[test]
fn a_wildcard_is_answered_once_per_stream_and_its_wait_stops_while_disconnected() {
    let mut p = sotw_a_then_wildcard();
    p.client.disconnected("gone");
    assert_eq!(p.client.poll_timeout(), None, "no timer while disconnected");
    p.client.connected();
    // The new stream's first request carries the wildcard: its first response answers it.
    assert_eq!(p.sotw_request().resource_names, ["a", "*"]);
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    assert_eq!(answered(&p.news()), [WildcardAnswer::FirstRequest]);
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER,
        "v2",
        "n2",
        vec![cluster("a", "1"), cluster("b", "1")],
    ));
    assert_eq!(answered(&p.news()), [], "answered already on this stream");
}

#[test]
fn a_wildcard_asked_again_after_it_was_dropped_waits_for_its_answer_again() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a", "*"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER,
        "v1",
        "n1",
        vec![cluster("a", "1"), cluster("b", "1")],
    ));
    p.sotw_request();
    assert_eq!(answered(&p.news()), [WildcardAnswer::FirstRequest]);
    p.client.unsubscribe(CLUSTER, "*");
    p.sotw_request();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.sotw_request();
    p.news();
    // Not the stream's first request now: `a` alone does not answer it.
    p.sotw_in(sotw(CLUSTER, "v1", "n2", vec![cluster("a", "1")]));
    assert_eq!(answered(&p.news()), []);
}
