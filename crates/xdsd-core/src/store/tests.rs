use super::*;
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER};

fn input(type_url: &str, name: &str, value: &[u8]) -> ResourceInput {
    ResourceInput::new(type_url, name, Bytes::copy_from_slice(value))
}

fn arc(s: &str) -> Arc<str> {
    s.into()
}

#[test]
fn unchanged_content_keeps_the_same_encoded_bytes_and_versions() {
    let store = Store::new();
    store
        .replace_all([input(CLUSTER, "a", b"\x0a\x01a")])
        .unwrap();
    let before = store.snapshot();
    let summary = store
        .replace_all([input(CLUSTER, "a", b"\x0a\x01a")])
        .unwrap();
    assert_eq!(summary.changed, 0);
    let after = store.snapshot();
    let (b, a) = (
        before.resource(CLUSTER, "a").unwrap(),
        after.resource(CLUSTER, "a").unwrap(),
    );
    assert!(
        Arc::ptr_eq(a, b),
        "an unchanged resource is shared, not re-encoded"
    );
    assert_eq!(
        before.get(CLUSTER).unwrap().version(),
        after.get(CLUSTER).unwrap().version()
    );
}

#[test]
fn type_version_changes_when_any_resource_of_the_type_changes() {
    let store = Store::new();
    store
        .replace_all([input(CLUSTER, "a", b"1"), input(LISTENER, "l", b"1")])
        .unwrap();
    let s1 = store.snapshot();
    store
        .replace_all([input(CLUSTER, "a", b"2"), input(LISTENER, "l", b"1")])
        .unwrap();
    let s2 = store.snapshot();
    assert_ne!(
        s1.get(CLUSTER).unwrap().version(),
        s2.get(CLUSTER).unwrap().version()
    );
    assert_eq!(
        s1.get(LISTENER).unwrap().version(),
        s2.get(LISTENER).unwrap().version()
    );
    assert_ne!(
        s1.resource(CLUSTER, "a").unwrap().version(),
        s2.resource(CLUSTER, "a").unwrap().version()
    );
}

#[test]
fn duplicate_names_reject_the_whole_update() {
    let store = Store::new();
    store.replace_all([input(CLUSTER, "a", b"1")]).unwrap();
    let err = store
        .replace_all([input(CLUSTER, "b", b"1"), input(CLUSTER, "b", b"2")])
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Duplicate {
            type_url: CLUSTER.into(),
            name: "b".into(),
            first: None,
            second: None,
        }
    );
    assert!(
        store.snapshot().resource(CLUSTER, "a").is_some(),
        "the last good state is kept"
    );
    assert!(store.snapshot().resource(CLUSTER, "b").is_none());
}

#[test]
fn bad_type_url_and_empty_name_are_rejected() {
    let store = Store::new();
    assert!(matches!(
        store.replace_all([input("Cluster", "a", b"1")]),
        Err(StoreError::BadTypeUrl { .. })
    ));
    assert!(matches!(
        store.replace_all([input(CLUSTER, "", b"1")]),
        Err(StoreError::EmptyName { .. })
    ));
}

#[test]
fn notifications_reach_only_the_watchers_of_the_changed_name() {
    let store = Store::new();
    store
        .replace_all([input(CLUSTER, "a", b"1"), input(CLUSTER, "b", b"1")])
        .unwrap();
    let mut watch_a = store.watcher();
    let mut watch_b = store.watcher();
    let mut wildcard = store.watcher();
    let cluster = arc(CLUSTER);
    watch_a.watch(&cluster, [&arc("a")]);
    watch_b.watch(&cluster, [&arc("b")]);
    wildcard.set_wildcard(&cluster, true);

    store
        .apply([Change::Set(input(CLUSTER, "a", b"2"))])
        .unwrap();
    let changes = watch_a.take_changes().into_sets();
    assert_eq!(
        changes[&cluster].iter().map(|n| &**n).collect::<Vec<_>>(),
        ["a"]
    );
    assert!(
        watch_b.take_changes().into_sets().is_empty(),
        "b's watcher is not touched by a change to a"
    );
    assert_eq!(wildcard.take_changes().into_sets()[&cluster].len(), 1);
}

/// The order in which `watchers` are woken by one commit, as indexes into `watchers`.
fn wake_order(store: &Store, watchers: &[Watcher], commit: Change) -> Vec<usize> {
    use std::future::Future;
    use std::sync::Mutex;
    use std::task::{Context, Wake, Waker};
    struct Record(usize, Arc<Mutex<Vec<usize>>>);
    impl Wake for Record {
        fn wake(self: Arc<Self>) {
            self.1.lock().unwrap().push(self.0);
        }
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiting: Vec<_> = watchers.iter().map(|w| Box::pin(w.changed())).collect();
    for (i, future) in waiting.iter_mut().enumerate() {
        let waker = Waker::from(Arc::new(Record(i, order.clone())));
        assert!(future
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    store.apply([commit]).unwrap();
    let order = order.lock().unwrap().clone();
    order
}

#[test]
fn a_change_wakes_the_watchers_of_one_connection_one_after_another() {
    let store = Store::new();
    let cluster = arc(CLUSTER);
    // Made in turn across three connections, as streams open.
    let mut watchers: Vec<Watcher> = (0..12).map(|i| store.watcher_in(1 + i % 3)).collect();
    for (i, w) in watchers.iter_mut().enumerate() {
        if i % 2 == 0 {
            w.watch(&cluster, [&arc("a")]);
        } else {
            w.set_wildcard(&cluster, true);
        }
    }
    let order = wake_order(&store, &watchers, Change::Set(input(CLUSTER, "a", b"1")));
    // Connection 1: watchers 0, 3, 6, 9; connection 2: 1, 4, 7, 10; connection 3: the rest.
    assert_eq!(order, [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
}

#[test]
fn a_change_of_a_muted_type_is_recorded_without_waking_the_watcher() {
    let store = Store::new();
    let (cluster, endpoints) = (arc(CLUSTER), arc(CLUSTER_LOAD_ASSIGNMENT));
    let mut w = store.watcher();
    w.set_wildcard(&cluster, true);
    w.watch(&endpoints, [&arc("e")]);
    w.mute([&endpoints].into_iter());
    assert!(w.is_muting());
    let set = |t: &str, n: &str| Change::Set(input(t, n, b"1"));
    assert!(wake_order(
        &store,
        std::slice::from_ref(&w),
        set(CLUSTER_LOAD_ASSIGNMENT, "e")
    )
    .is_empty());
    // A change of a type not muted wakes it, and the muted type's change is taken with it.
    assert_eq!(
        wake_order(&store, std::slice::from_ref(&w), set(CLUSTER, "c")),
        [0]
    );
    let changes = w.take_changes().into_sets();
    assert!(changes[&endpoints].contains("e") && changes[&cluster].contains("c"));
    // (The wake left a permit: taken, as the stream's loop takes it.)
    assert!(futures::FutureExt::now_or_never(w.changed()).is_some());
    // Unmuted: it wakes again.
    w.mute(std::iter::empty());
    assert!(!w.is_muting());
    let change = Change::Set(input(CLUSTER_LOAD_ASSIGNMENT, "e", b"2"));
    assert_eq!(wake_order(&store, std::slice::from_ref(&w), change), [0]);
}

#[test]
fn a_type_unmuted_with_changes_not_taken_wakes_the_watcher() {
    let store = Store::new();
    let (cluster, endpoints) = (arc(CLUSTER), arc(CLUSTER_LOAD_ASSIGNMENT));
    let mut w = store.watcher();
    // One type watched whole (its commits wait in the type's log), one by name (marked).
    w.set_wildcard(&cluster, true);
    w.watch(&endpoints, [&arc("e")]);
    for (muted, change) in [
        (&cluster, Change::Set(input(CLUSTER, "c", b"1"))),
        (
            &endpoints,
            Change::Set(input(CLUSTER_LOAD_ASSIGNMENT, "e", b"1")),
        ),
    ] {
        w.mute([muted].into_iter());
        let woken = wake_order(&store, std::slice::from_ref(&w), change);
        assert!(woken.is_empty(), "muted: recorded without a wake");
        // The stream let the type go (its ACK came) after it last took its changes: without a
        // wake it would sleep on a change until another came.
        w.mute(std::iter::empty());
        assert!(futures::FutureExt::now_or_never(w.changed()).is_some());
        assert!(w.take_changes().into_sets()[muted].len() == 1);
    }
    // Unmuted with nothing to take: no wake.
    w.mute([&cluster].into_iter());
    w.mute(std::iter::empty());
    assert!(futures::FutureExt::now_or_never(w.changed()).is_none());
}

#[test]
fn a_change_held_while_another_type_is_let_go_is_taken_then() {
    let store = Store::new();
    let (cluster, endpoints) = (arc(CLUSTER), arc(CLUSTER_LOAD_ASSIGNMENT));
    let mut w = store.watcher();
    w.set_wildcard(&cluster, true);
    w.set_dense(&endpoints, true);
    w.mute([&cluster, &endpoints].into_iter());
    store
        .apply([Change::Set(input(CLUSTER, "c", b"1"))])
        .unwrap();
    // Endpoints let go, clusters still muted: the held cluster change wakes the stream, which
    // takes it (its machine keeps it until the clusters' ACK).
    w.mute([&cluster].into_iter());
    assert!(futures::FutureExt::now_or_never(w.changed()).is_some());
    assert!(w.take_changes().into_sets()[&cluster].contains("c"));
    // Taken: letting the clusters go later wakes nobody.
    w.mute(std::iter::empty());
    assert!(futures::FutureExt::now_or_never(w.changed()).is_none());
}

#[test]
fn a_type_still_muted_once_another_is_let_go_does_not_wake_the_watcher() {
    let store = Store::new();
    let (cluster, endpoints) = (arc(CLUSTER), arc(CLUSTER_LOAD_ASSIGNMENT));
    let mut w = store.watcher();
    w.set_wildcard(&cluster, true);
    w.watch(&endpoints, [&arc("e")]);
    w.mute([&cluster, &endpoints].into_iter());
    w.mute([&endpoints].into_iter());
    w.mute([&endpoints].into_iter());
    assert!(w.is_muting());
    let set = |t: &str, n: &str| Change::Set(input(t, n, b"1"));
    assert!(
        wake_order(
            &store,
            std::slice::from_ref(&w),
            set(CLUSTER_LOAD_ASSIGNMENT, "e")
        )
        .is_empty(),
        "the endpoints are still muted"
    );
    assert_eq!(
        wake_order(&store, std::slice::from_ref(&w), set(CLUSTER, "c")),
        [0],
        "the clusters were let go"
    );
}

#[test]
fn a_watcher_has_changes_exactly_when_a_take_would_hand_some_over() {
    let store = Store::new();
    let (cluster, endpoints) = (arc(CLUSTER), arc(CLUSTER_LOAD_ASSIGNMENT));
    let mut w = store.watcher();
    // One type watched whole (the first commit after a take handed over, later ones in the
    // type's log), one by name (marked), both muted.
    w.set_wildcard(&cluster, true);
    w.watch(&endpoints, [&arc("e")]);
    w.mute([&cluster, &endpoints].into_iter());
    assert!(!w.has_changes(), "nothing yet");
    assert!(w.take_changes().is_empty());
    let commit = |t: &str, n: &str, v: &[u8]| store.apply([Change::Set(input(t, n, v))]).unwrap();
    // Each kind alone, then the whole type's second commit (in the log), then all of them.
    let rounds: [&[(&str, &str)]; 4] = [
        &[(CLUSTER_LOAD_ASSIGNMENT, "e")],
        &[(CLUSTER, "c")],
        &[(CLUSTER, "c"), (CLUSTER, "d")],
        &[
            (CLUSTER, "c"),
            (CLUSTER_LOAD_ASSIGNMENT, "e"),
            (CLUSTER, "d"),
        ],
    ];
    for (round, changes) in rounds.iter().enumerate() {
        for (i, (t, n)) in changes.iter().enumerate() {
            commit(t, n, format!("{round}.{i}").as_bytes());
            assert!(w.has_changes(), "round {round}: after {t} {n}");
        }
        let taken = w.take_changes();
        assert!(!taken.is_empty(), "round {round}: the take hands them over");
        assert_eq!(
            taken.names(CLUSTER).count() + taken.names(CLUSTER_LOAD_ASSIGNMENT).count(),
            changes.len(),
            "round {round}"
        );
        assert!(!w.has_changes(), "round {round}: taken");
        assert!(w.take_changes().is_empty(), "round {round}: nothing left");
    }
}

#[test]
fn a_commit_every_whole_type_watcher_took_is_let_go() {
    let store = Store::new();
    let cluster = arc(CLUSTER);
    let (mut fast, mut slow) = (store.watcher(), store.watcher());
    fast.set_wildcard(&cluster, true);
    slow.set_wildcard(&cluster, true);
    let commit = |i: u32| {
        store
            .apply([Change::Set(input(CLUSTER, "c", i.to_string().as_bytes()))])
            .unwrap();
    };
    let log_len = || lock_index(&store.inner.index).debug_log_len(&cluster);
    for i in 0..3 {
        commit(i);
        fast.take_changes();
    }
    // The first commit after a take is handed to the stream; the later ones wait in the log
    // until the slowest takes them.
    assert_eq!((fast.debug_shared(), slow.debug_shared()), (0, 3));
    assert_eq!(log_len(), 2);
    assert_eq!(slow.take_changes().names(CLUSTER).count(), 3);
    // Both took everything: the next commit is handed to each, and the log lets go of all.
    commit(3);
    assert_eq!(log_len(), 0);
    assert_eq!(fast.take_changes().names(CLUSTER).count(), 1);
    commit(4);
    assert_eq!(log_len(), 1, "kept for the one that has not taken commit 3");
    assert_eq!(slow.take_changes().names(CLUSTER).count(), 2);
    drop((fast, slow));
    assert_eq!(lock_index(&store.inner.index).debug_counts(), (0, 0));
}

#[test]
fn changes_not_taken_stay_when_a_stream_stops_watching_the_whole_type() {
    let store = Store::new();
    let cluster = arc(CLUSTER);
    let mut w = store.watcher();
    w.set_dense(&cluster, true);
    store
        .apply([Change::Set(input(CLUSTER, "a", b"1"))])
        .unwrap();
    w.set_dense(&cluster, false);
    let changes = w.take_changes().into_sets();
    assert!(changes[&cluster].contains("a"));
}

#[test]
fn changes_count_the_names_they_list_repeats_included() {
    let store = Store::new();
    let (cluster, endpoints) = (arc(CLUSTER), arc(CLUSTER_LOAD_ASSIGNMENT));
    let mut w = store.watcher();
    w.set_wildcard(&cluster, true);
    w.watch(&endpoints, [&arc("e"), &arc("f")]);
    for content in [b"1", b"2"] {
        store
            .apply([
                Change::Set(input(CLUSTER, "a", content)),
                Change::Set(input(CLUSTER, "b", content)),
                Change::Set(input(CLUSTER_LOAD_ASSIGNMENT, "e", content)),
            ])
            .unwrap();
    }
    let changes = w.take_changes();
    for type_url in [&cluster, &endpoints] {
        assert_eq!(changes.count(type_url), changes.names(type_url).count());
    }
    assert_eq!(
        changes.count(&cluster),
        4,
        "two commits' lists of two names"
    );
    assert_eq!(changes.count(&endpoints), 1, "a set of names");
    assert_eq!(changes.count(LISTENER), 0);
}

#[test]
fn a_watched_name_that_springs_into_existence_notifies() {
    let store = Store::new();
    let mut w = store.watcher();
    let cluster = arc(CLUSTER);
    w.watch(&cluster, [&arc("later")]);
    store
        .apply([Change::Set(input(CLUSTER, "later", b"1"))])
        .unwrap();
    assert!(w.take_changes().into_sets()[&cluster].contains("later"));
    store
        .apply([Change::Remove {
            type_url: CLUSTER.into(),
            name: "later".into(),
        }])
        .unwrap();
    assert!(
        w.take_changes().into_sets()[&cluster].contains("later"),
        "deletion notifies too"
    );
    assert!(store.snapshot().get(CLUSTER).is_none());
}

#[test]
fn dropped_watchers_leave_the_index() {
    let store = Store::new();
    let cluster = arc(CLUSTER);
    {
        let mut w = store.watcher();
        w.watch(&cluster, [&arc("a")]);
        w.set_wildcard(&cluster, true);
    }
    let index = lock_index(&store.inner.index);
    assert!(index_is_empty(&index));
}

#[test]
fn a_dense_watcher_is_woken_by_every_name_of_its_type_without_a_registration_per_name() {
    let store = Store::new();
    let cluster = arc(CLUSTER);
    let mut w = store.watcher();
    w.watch(&cluster, [&arc("a"), &arc("b")]);
    w.set_dense(&cluster, true);
    assert_eq!(
        lock_index(&store.inner.index).debug_counts(),
        (0, 1),
        "the names are let go, the type is watched as a whole"
    );
    w.watch(&cluster, [&arc("c")]);
    assert_eq!(lock_index(&store.inner.index).debug_counts(), (0, 1));
    store
        .apply([Change::Set(input(CLUSTER, "later", b"1"))])
        .unwrap();
    assert!(
        w.take_changes().into_sets()[&cluster].contains("later"),
        "a name added to the store after subscribing wakes it"
    );
    // Turned off: nothing is watched by name until the names are watched again.
    w.set_dense(&cluster, false);
    assert!(index_is_empty(&lock_index(&store.inner.index)));
    w.watch(&cluster, [&arc("a")]);
    store
        .apply([
            Change::Set(input(CLUSTER, "a", b"1")),
            Change::Set(input(CLUSTER, "other", b"1")),
        ])
        .unwrap();
    assert_eq!(
        w.take_changes().into_sets()[&cluster]
            .iter()
            .map(|n| &**n)
            .collect::<Vec<_>>(),
        ["a"]
    );
    // Dense and wildcard together: one registration, gone only when both are off.
    w.set_dense(&cluster, true);
    w.set_wildcard(&cluster, true);
    w.set_dense(&cluster, false);
    assert_eq!(lock_index(&store.inner.index).debug_counts(), (0, 1));
    w.set_dense(&cluster, true);
    drop(w);
    assert!(index_is_empty(&lock_index(&store.inner.index)));
}

#[test]
fn names_are_interned_as_the_store_holds_them_in_any_order() {
    let store = Store::new();
    store
        .replace_all(["a", "b", "c", "d"].map(|n| input(CLUSTER, n, b"1")))
        .unwrap();
    let snap = store.snapshot();
    let t = snap.get(CLUSTER).unwrap();
    let mut interner = t.interner();
    let held = |n: &str| t.entries().find(|(k, _)| &***k == n).unwrap().0.clone();
    for name in ["a", "b", "d", "c", "a", "zz", "b"] {
        match interner.intern(name) {
            Some(n) => assert!(
                Arc::ptr_eq(&n, &held(name)),
                "{name}: the store's allocation"
            ),
            None => assert_eq!(name, "zz", "only unknown names are not found"),
        }
    }
}

fn index_is_empty(index: &WatchIndex) -> bool {
    format!("{:?}", index.debug_counts()) == "(0, 0)"
}

#[test]
fn sotw_body_is_the_concatenation_of_encoded_any_entries() {
    use prost::Message;
    let store = Store::new();
    store
        .replace_all([input(CLUSTER, "a", b"x"), input(CLUSTER, "b", b"y")])
        .unwrap();
    let snap = store.snapshot();
    let body = snap
        .get(CLUSTER)
        .unwrap()
        .view(&crate::params::ParamSet::new())
        .sotw_body(Default::default());
    let decoded =
        envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse::decode(body).unwrap();
    assert_eq!(decoded.resources.len(), 2);
    assert_eq!(decoded.resources[0].type_url, CLUSTER);
    assert_eq!(decoded.resources[1].value, b"y");
}

mod vhds {
    use super::*;
    use crate::types::{ROUTE_CONFIGURATION, VIRTUAL_HOST};
    use envoy_types::pb::envoy::config::core::v3::ConfigSource;
    use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, Vhds, VirtualHost};
    use prost::Message;

    fn route(name: &str, hosts: &[(&str, &[&str])], vhds: bool) -> ResourceInput {
        let rc = RouteConfiguration {
            name: name.into(),
            virtual_hosts: hosts
                .iter()
                .map(|(n, domains)| VirtualHost {
                    name: n.to_string(),
                    domains: domains.iter().map(|d| d.to_string()).collect(),
                    ..Default::default()
                })
                .collect(),
            vhds: vhds.then(|| Vhds {
                config_source: Some(ConfigSource::default()),
            }),
            ..Default::default()
        };
        ResourceInput::new(ROUTE_CONFIGURATION, name, rc.encode_to_vec().into())
    }

    #[test]
    fn vhds_route_configuration_serves_its_virtual_hosts_separately_with_domain_aliases() {
        let store = Store::new();
        store
            .replace_all([route("rc", &[("web", &["a.example", "b.example"])], true)])
            .unwrap();
        let snap = store.snapshot();
        let served =
            RouteConfiguration::decode(snap.resource(ROUTE_CONFIGURATION, "rc").unwrap().value())
                .unwrap();
        assert!(
            served.virtual_hosts.is_empty(),
            "RDS serves the route configuration without its virtual hosts"
        );
        let host = snap.resource(VIRTUAL_HOST, "rc/web").unwrap();
        assert_eq!(&**host.name(), "rc/web");
        let by_alias = snap.resource(VIRTUAL_HOST, "rc/b.example").unwrap();
        assert!(
            Arc::ptr_eq(host, by_alias),
            "the domain alias finds the same virtual host"
        );
        let message = VirtualHost::decode(host.value()).unwrap();
        assert_eq!(message.domains, ["a.example", "b.example"]);
        assert_eq!(
            message.name, "rc/web",
            "the VirtualHost message carries the name Envoy keys it by"
        );
    }

    #[test]
    fn a_virtual_host_from_a_source_is_served_with_the_aliases_it_came_with() {
        let store = Store::new();
        let host = VirtualHost {
            name: "rc/web".into(),
            domains: vec!["a.example".into()],
            ..Default::default()
        };
        store
            .replace_all([
                ResourceInput::new(VIRTUAL_HOST, "rc/web", host.encode_to_vec().into())
                    .with_aliases(vec!["rc/a.example".into()]),
            ])
            .unwrap();
        let snap = store.snapshot();
        let by_name = snap.resource(VIRTUAL_HOST, "rc/web").unwrap();
        assert_eq!(by_name.aliases().len(), 1);
        let by_alias = snap.resource(VIRTUAL_HOST, "rc/a.example").unwrap();
        assert!(Arc::ptr_eq(by_name, by_alias), "found by its alias");
    }

    #[test]
    fn setting_route_configuration_a_keeps_the_virtual_hosts_of_route_configuration_a_slash_b() {
        let store = Store::new();
        store
            .replace_all([
                route("a", &[("web", &["w"])], true),
                route("a/b", &[("api", &["x"])], true),
            ])
            .unwrap();
        store
            .apply([Change::Set(route("a", &[("web", &["w", "v"])], true))])
            .unwrap();
        let snap = store.snapshot();
        assert!(
            snap.resource(VIRTUAL_HOST, "a/b/api").is_some(),
            "a/b's host is not a's to remove"
        );
        assert!(snap.resource(VIRTUAL_HOST, "a/web").is_some());
        store
            .apply([Change::Remove {
                type_url: ROUTE_CONFIGURATION.into(),
                name: "a".into(),
            }])
            .unwrap();
        let snap = store.snapshot();
        assert!(snap.resource(VIRTUAL_HOST, "a/web").is_none());
        assert!(snap.resource(VIRTUAL_HOST, "a/b/api").is_some());
    }

    #[test]
    fn a_rejected_change_keeps_the_virtual_hosts_it_would_have_replaced() {
        let store = Store::new();
        store
            .replace_all([route("rc", &[("web", &["w"])], true)])
            .unwrap();
        let bad = ResourceInput::new("not a type url", "x", Bytes::new());
        assert!(store
            .apply([
                Change::Set(route("rc", &[("other", &["o"])], true)),
                Change::Set(bad),
            ])
            .is_err());
        let snap = store.snapshot();
        assert!(snap.resource(VIRTUAL_HOST, "rc/web").is_some());
        assert!(snap.resource(VIRTUAL_HOST, "rc/other").is_none());
    }

    #[test]
    fn route_configuration_without_vhds_is_served_whole() {
        let store = Store::new();
        store
            .replace_all([route("rc", &[("web", &["a"])], false)])
            .unwrap();
        let snap = store.snapshot();
        let served =
            RouteConfiguration::decode(snap.resource(ROUTE_CONFIGURATION, "rc").unwrap().value())
                .unwrap();
        assert_eq!(served.virtual_hosts.len(), 1);
        assert!(snap.get(VIRTUAL_HOST).is_none());
    }

    #[test]
    fn changing_a_vhds_route_configuration_notifies_alias_watchers_and_drops_old_hosts() {
        let store = Store::new();
        store
            .replace_all([route("rc", &[("web", &["a"]), ("old", &["o"])], true)])
            .unwrap();
        let mut w = store.watcher();
        let hosts = arc(VIRTUAL_HOST);
        w.watch(&hosts, [&arc("rc/a")]);
        store
            .apply([Change::Set(route("rc", &[("web", &["a", "c"])], true))])
            .unwrap();
        assert!(
            w.take_changes().into_sets()[&hosts].contains("rc/a"),
            "watching by alias sees the change"
        );
        let snap = store.snapshot();
        assert!(snap.resource(VIRTUAL_HOST, "rc/old").is_none());
        assert!(snap.resource(VIRTUAL_HOST, "rc/c").is_some());
        store
            .apply([Change::Remove {
                type_url: ROUTE_CONFIGURATION.into(),
                name: "rc".into(),
            }])
            .unwrap();
        assert!(
            store.snapshot().get(VIRTUAL_HOST).is_none(),
            "hosts go with their route configuration"
        );
    }
}

#[test]
fn an_eds_cluster_depends_on_its_cluster_load_assignment() {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
    };
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use prost::Message;
    let cluster = |service: &str, kind: DiscoveryType| {
        Cluster {
            name: "c".into(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(kind as i32)),
            eds_cluster_config: Some(EdsClusterConfig {
                service_name: service.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let r = Resource::new(CLUSTER, "c", cluster("", DiscoveryType::Eds).into());
    assert_eq!(r.dependents(), [(arc(CLUSTER_LOAD_ASSIGNMENT), arc("c"))]);
    let r = Resource::new(CLUSTER, "c", cluster("svc", DiscoveryType::Eds).into());
    assert_eq!(
        &*r.dependents()[0].1,
        "svc",
        "the EDS service name when set"
    );
    let r = Resource::new(CLUSTER, "c", cluster("", DiscoveryType::Static).into());
    assert!(r.dependents().is_empty());
}

mod references;
mod table;
mod wake;
mod xdstp;

#[test]
fn an_update_summary_names_what_was_added_changed_and_removed() {
    let store = Store::new();
    store
        .replace_all([input(CLUSTER, "kept", b"1"), input(CLUSTER, "old", b"1")])
        .unwrap();
    let summary = store
        .replace_all([input(CLUSTER, "kept", b"2"), input(CLUSTER, "new", b"1")])
        .unwrap();
    let shown: Vec<String> = summary.names.iter().map(|n| n.to_string()).collect();
    assert_eq!(
        shown,
        ["~Cluster \"kept\"", "+Cluster \"new\"", "-Cluster \"old\""]
    );
    assert_eq!(
        summary.changed, 3,
        "the resources that changed: one changed, one added, one removed"
    );
}

#[test]
fn an_update_summary_counts_a_changed_resource_once() {
    let store = Store::new();
    store.replace_all([input(CLUSTER, "c", b"1")]).unwrap();
    let summary = store.replace_all([input(CLUSTER, "c", b"2")]).unwrap();
    assert_eq!(
        summary.changed, 1,
        "one resource changed, not its old and new versions"
    );
}

/// A commit that changes several types marks them on a stream under one lock: a stream woken
/// while it is being marked never takes part of it (make-before-break reads the types of one
/// commit together). A second thread takes the marks as fast as it can while commits of two
/// types go in; every take holds both types.
#[test]
fn a_commit_of_several_types_reaches_a_watcher_whole() {
    // Each type by name or by the wildcard (the commit's changes shared).
    for (whole_cluster, whole_cla) in [(false, false), (false, true), (true, true)] {
        a_commit_of_several_types_reaches(whole_cluster, whole_cla);
    }
}

fn a_commit_of_several_types_reaches(whole_cluster: bool, whole_cla: bool) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let cla = CLUSTER_LOAD_ASSIGNMENT;
    let store = Store::new();
    store
        .replace_all([input(CLUSTER, "c", b"0"), input(cla, "c", b"0")])
        .unwrap();
    let mut w = store.watcher();
    for (type_url, whole) in [(CLUSTER, whole_cluster), (cla, whole_cla)] {
        if whole {
            w.set_wildcard(&arc(type_url), true);
        } else {
            w.watch(&arc(type_url), [&arc("c")]);
        }
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=2000u32 {
                let v = i.to_string();
                store
                    .apply([
                        Change::Set(input(CLUSTER, "c", v.as_bytes())),
                        Change::Set(input(cla, "c", v.as_bytes())),
                    ])
                    .unwrap();
            }
            done.store(true, Ordering::SeqCst);
        });
        loop {
            let finished = done.load(Ordering::SeqCst);
            let changes = w.take_changes().into_sets();
            assert!(
                changes.is_empty() || changes.len() == 2,
                "a take held part of a commit: {changes:?}"
            );
            if finished {
                break;
            }
        }
    });
}

#[test]
fn commits_a_whole_type_watcher_has_not_taken_fold_into_one_set_of_names() {
    let store = Store::new();
    let cluster = arc(CLUSTER);
    let mut w = store.watcher();
    w.set_wildcard(&cluster, true);
    // Many more commits than the watcher holds shared: the oldest are folded into its names as
    // the commits come (what it holds stays bounded), and nothing is lost.
    for i in 0..300u32 {
        let v = i.to_string();
        store
            .apply([
                Change::Set(input(CLUSTER, &format!("n{}", i % 5), v.as_bytes())),
                Change::Set(input(CLUSTER, &format!("once-{i}"), b"1")),
            ])
            .unwrap();
        // The commit handed over at once, and the log's.
        assert!(w.debug_shared() <= 1 + super::watch::MAX_LOG);
    }
    let changes = w.take_changes().into_sets();
    let mut names: Vec<&str> = changes[&cluster].iter().map(|n| &**n).collect();
    names.sort();
    let mut want: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
    want.extend((0..300).map(|i| format!("once-{i}")));
    want.sort();
    assert_eq!(names, want);
    assert_eq!(w.debug_shared(), 0);
    assert!(w.take_changes().into_sets().is_empty(), "taken once");
}

#[test]
fn changes_list_each_type_once_with_every_name_marked_or_shared() {
    let store = Store::new();
    let (cluster, eds) = (arc(CLUSTER), arc(CLUSTER_LOAD_ASSIGNMENT));
    let mut w = store.watcher();
    // Clusters as a whole (shared lists), endpoints by name (marked one by one).
    w.set_wildcard(&cluster, true);
    w.watch(&eds, [&arc("e1")]);
    for v in ["1", "2"] {
        store
            .apply([
                Change::Set(input(CLUSTER, "c1", v.as_bytes())),
                Change::Set(input(CLUSTER_LOAD_ASSIGNMENT, "e1", v.as_bytes())),
                Change::Set(input(CLUSTER_LOAD_ASSIGNMENT, "e2", v.as_bytes())),
            ])
            .unwrap();
    }
    store
        .apply([Change::Set(input(CLUSTER, "c2", b"1"))])
        .unwrap();
    let changes = w.take_changes();
    assert!(!changes.is_empty());
    let mut types: Vec<&str> = changes.types().map(|t| &**t).collect();
    types.sort();
    assert_eq!(types, [CLUSTER, CLUSTER_LOAD_ASSIGNMENT]);
    // A name two commits changed comes from each commit's list.
    let mut clusters: Vec<&str> = changes.names(CLUSTER).map(|n| &**n).collect();
    clusters.sort();
    assert_eq!(clusters, ["c1", "c1", "c2"]);
    let endpoints: Vec<&str> = changes
        .names(CLUSTER_LOAD_ASSIGNMENT)
        .map(|n| &**n)
        .collect();
    assert_eq!(endpoints, ["e1"]);
    assert!(w.take_changes().is_empty(), "taken once");
}

#[test]
fn a_commit_that_removes_no_name_is_not_listed_among_the_possible_removals() {
    let store = Store::new();
    let cluster = arc(CLUSTER);
    let mut w = store.watcher();
    w.set_wildcard(&cluster, true);
    store
        .apply([Change::Set(input(CLUSTER, "kept", b"1"))])
        .unwrap();
    store
        .apply([Change::Set(input(CLUSTER, "gone", b"1"))])
        .unwrap();
    w.take_changes();
    // A change of content removes nothing; a removal does.
    store
        .apply([Change::Set(input(CLUSTER, "kept", b"2"))])
        .unwrap();
    let changes = w.take_changes();
    assert_eq!(changes.names(CLUSTER).count(), 1);
    assert_eq!(changes.maybe_removed(CLUSTER).count(), 0);
    store
        .apply([
            Change::Set(input(CLUSTER, "kept", b"3")),
            Change::Remove {
                type_url: CLUSTER.into(),
                name: "gone".into(),
            },
        ])
        .unwrap();
    let changes = w.take_changes();
    let mut gone: Vec<&str> = changes.maybe_removed(CLUSTER).map(|n| &**n).collect();
    gone.sort();
    assert_eq!(gone, ["gone", "kept"], "the commit's names, a superset");
}

#[test]
fn a_length_delimited_field_is_written_as_prost_writes_it() {
    for tag in [1u32, 2, 15, 16, 2047, 2048] {
        for len in [0usize, 1, 127, 128, 300, 16_383, 16_384, 2_097_152] {
            let bytes = vec![7u8; len];
            let mut ours = Vec::new();
            wire::put_length_delimited(&mut ours, tag, &bytes);
            let mut theirs = Vec::new();
            prost::encoding::bytes::encode(tag, &bytes, &mut theirs);
            assert_eq!(ours, theirs, "tag {tag}, {len} bytes");
        }
    }
}

#[test]
fn replace_with_copies_another_store_s_state_with_the_same_versions() {
    let a = Store::new();
    let b = Store::new();
    a.replace_all([input(CLUSTER, "c1", b"1"), input(CLUSTER, "c2", b"2")])
        .unwrap();
    b.replace_all([input(CLUSTER, "c1", b"1"), input(CLUSTER, "old", b"9")])
        .unwrap();
    let summary = b.replace_with(&a.snapshot()).unwrap();
    let shown: Vec<String> = summary.names.iter().map(|n| n.to_string()).collect();
    assert_eq!(shown, ["+Cluster \"c2\"", "-Cluster \"old\""]);
    let (sa, sb) = (a.snapshot(), b.snapshot());
    let (ta, tb) = (sa.get(CLUSTER).unwrap(), sb.get(CLUSTER).unwrap());
    assert_eq!(
        ta.version(),
        tb.version(),
        "the same content, the same version"
    );
    assert!(
        Arc::ptr_eq(ta.get("c2").unwrap(), tb.get("c2").unwrap()),
        "shared"
    );
    // Nothing differs: nothing changes.
    assert_eq!(b.replace_with(&a.snapshot()).unwrap().changed, 0);
    // An emptied type goes too.
    a.replace_all([]).unwrap();
    b.replace_with(&a.snapshot()).unwrap();
    assert!(b.snapshot().get(CLUSTER).is_none());
}

#[test]
fn replace_with_wakes_the_watchers_of_what_it_changed() {
    let a = Store::new();
    let b = Store::new();
    a.replace_all([input(CLUSTER, "c1", b"1")]).unwrap();
    b.replace_with(&a.snapshot()).unwrap();
    let mut w = b.watcher();
    w.watch(&Arc::from(CLUSTER), [Arc::<str>::from("c1")].iter());
    a.replace_all([input(CLUSTER, "c1", b"2")]).unwrap();
    assert!(futures::FutureExt::now_or_never(w.changed()).is_none());
    b.replace_with(&a.snapshot()).unwrap();
    assert!(futures::FutureExt::now_or_never(w.changed()).is_some());
}
