use super::*;
use xdsd_core::Store;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const LINGER: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(10);

/// A table of the shared partition only, its store not attached (demand only).
fn table() -> Table {
    Table::new(LINGER, WAIT, RelayMetrics::new(), shared_stores())
}

fn attached(store: &Store) -> Table {
    let table = table();
    table.attach(store.pending_names(), 100);
    table
}

fn shared_stores() -> Arc<Stores> {
    Arc::new(Stores::new(crate::AggregateBy::None, 100))
}

fn named(name: &str) -> Want {
    Want::named(GroupKey::shared(), CDS, name)
}

fn edge() -> GroupKey {
    GroupKey::of(
        crate::group::Partition::Cluster("edge".into()),
        Default::default(),
        CDS,
    )
}

fn cds() -> Want {
    Want::wildcard(GroupKey::shared(), CDS)
}

/// `want` subscribed, then left by its last stream a linger ago: unsubscribed.
/// [`Table::received`] of copies of `resources` (the tests' resources are shared).
fn received_copies(
    table: &Table,
    group: &GroupKey,
    type_url: &str,
    resources: &[&xdsd_client::Resource],
) {
    let mut copies: Vec<xdsd_client::Resource> = resources.iter().map(|r| (*r).clone()).collect();
    table.received(group, type_url, &mut copies.iter_mut().collect::<Vec<_>>());
}

fn linger_out(table: &Table, want: &Want) {
    let t0 = Instant::now();
    table.acquire(u64::MAX, want.clone());
    table.release(u64::MAX, t0);
    table.handle_timeout(t0 + LINGER);
}

fn actions(d: &Table) -> Vec<Action> {
    std::iter::from_fn(|| d.poll_action()).collect()
}

// --- Who wants it

#[test]
fn a_want_first_asked_is_subscribed_upstream() {
    let d = table();
    d.acquire(1, cds());
    assert_eq!(actions(&d), vec![Action::Subscribe(cds())]);
    assert_eq!(d.subscriptions(), 1);
}

#[test]
fn a_name_no_longer_asked_by_its_last_stream_is_unsubscribed_after_the_linger() {
    let d = table();
    let t0 = Instant::now();
    let a = Want::named(GroupKey::shared(), CDS, "a");
    let b = Want::named(GroupKey::shared(), CDS, "b");
    d.acquire(1, a.clone());
    d.acquire(1, b.clone());
    d.acquire(2, a.clone());
    actions(&d);
    d.drop_want(1, &a, t0);
    d.drop_want(1, &b, t0);
    assert_eq!(d.poll_timeout(), Some(t0 + LINGER), "b lingers, a is held");
    d.handle_timeout(t0 + LINGER);
    assert_eq!(actions(&d), vec![Action::Unsubscribe(b)]);
    // Stream 1 ending later releases nothing more.
    d.release(1, t0 + LINGER);
    assert_eq!(d.poll_timeout(), None);
    d.release(2, t0 + LINGER);
    d.handle_timeout(t0 + LINGER * 2);
    assert_eq!(actions(&d), vec![Action::Unsubscribe(a)]);
}

#[test]
fn a_want_asked_again_by_another_stream_is_not_subscribed_again() {
    let d = table();
    d.acquire(1, cds());
    actions(&d);
    d.acquire(2, cds());
    d.acquire(1, cds());
    assert_eq!(actions(&d), vec![]);
}

#[test]
fn the_last_stream_leaving_unsubscribes_after_the_linger() {
    let d = table();
    let t0 = Instant::now();
    d.acquire(1, cds());
    actions(&d);
    d.release(1, t0);
    assert_eq!(d.poll_timeout(), Some(t0 + LINGER));
    d.handle_timeout(t0 + LINGER - Duration::from_millis(1));
    assert_eq!(actions(&d), vec![]);
    d.handle_timeout(t0 + LINGER);
    assert_eq!(actions(&d), vec![Action::Unsubscribe(cds())]);
    assert_eq!(d.subscriptions(), 0);
    assert!(!d.group_used(&GroupKey::shared()));
}

#[test]
fn a_stream_asking_within_the_linger_keeps_the_subscription() {
    let d = table();
    let t0 = Instant::now();
    d.acquire(1, cds());
    d.release(1, t0);
    d.acquire(2, cds());
    assert_eq!(d.poll_timeout(), None);
    d.handle_timeout(t0 + LINGER * 2);
    assert_eq!(actions(&d), vec![Action::Subscribe(cds())]);
}

#[test]
fn a_want_held_by_another_stream_stays_when_one_leaves() {
    let d = table();
    let t0 = Instant::now();
    d.acquire(1, cds());
    d.acquire(2, cds());
    d.release(1, t0);
    assert_eq!(d.poll_timeout(), None);
    d.release(2, t0 + LINGER);
    assert_eq!(d.poll_timeout(), Some(t0 + LINGER * 2));
}

#[test]
fn a_pinned_want_is_never_unsubscribed() {
    let d = table();
    let t0 = Instant::now();
    d.pin(cds());
    d.acquire(1, cds());
    d.release(1, t0);
    assert_eq!(d.poll_timeout(), None);
    d.handle_timeout(t0 + LINGER * 10);
    assert_eq!(actions(&d), vec![Action::Subscribe(cds())]);
}

#[test]
fn a_one_shot_request_holds_its_want_for_the_linger_only() {
    let d = table();
    let t0 = Instant::now();
    d.touch(cds(), t0);
    assert_eq!(actions(&d), vec![Action::Subscribe(cds())]);
    d.touch(cds(), t0 + Duration::from_secs(10));
    assert_eq!(
        d.poll_timeout(),
        Some(t0 + Duration::from_secs(10) + LINGER)
    );
    d.handle_timeout(t0 + Duration::from_secs(10) + LINGER);
    assert_eq!(actions(&d), vec![Action::Unsubscribe(cds())]);
}

#[test]
fn a_one_shot_request_does_not_shorten_a_streams_hold() {
    let d = table();
    let t0 = Instant::now();
    d.acquire(1, cds());
    d.touch(cds(), t0);
    assert_eq!(d.poll_timeout(), None);
}

#[test]
fn a_locators_want_is_its_plain_name_in_the_stream_of_its_parameters() {
    let d = table();
    let params = |env: &str| [("env".to_owned(), env.to_owned())].into();
    let prod = Want::named(GroupKey::shared().with_params(params("prod")), CDS, "a");
    let test = Want::named(GroupKey::shared().with_params(params("test")), CDS, "a");
    let plain = Want::named(GroupKey::shared(), CDS, "a");
    d.acquire(1, prod.clone());
    d.acquire(2, test.clone());
    d.acquire(2, plain.clone());
    assert_eq!(actions(&d).len(), 3, "each a subscription of its own");
    assert!(d.holds(&prod) && !d.holds(&Want::named(GroupKey::shared(), CDS, "b")));
    let t0 = Instant::now();
    d.drop_want(2, &test, t0);
    d.handle_timeout(t0 + LINGER);
    assert_eq!(actions(&d), vec![Action::Unsubscribe(test)]);
    assert!(d.holds(&prod));
}

#[test]
fn wants_of_different_groups_are_apart() {
    let d = table();
    let other = Want::wildcard(edge(), CDS);
    d.acquire(1, cds());
    d.acquire(2, other.clone());
    assert_eq!(
        actions(&d),
        vec![Action::Subscribe(cds()), Action::Subscribe(other)]
    );
    d.release(2, Instant::now());
    d.handle_timeout(Instant::now() + LINGER);
    assert!(d.group_used(&GroupKey::shared()));
    assert!(!d.group_used(&edge()));
}

// --- Whether it was answered

#[test]
fn a_want_asked_before_its_answer_is_pending_until_announced() {
    let store = Store::new();
    let answered = attached(&store);
    answered.ask(&named("a"), None, Instant::now());
    let pending = store.pending_names();
    assert!(pending.is_pending(&PendingName::new(CDS, "a")));
    answered.announce([named("a")]);
    assert!(pending.is_empty());
    answered.ask(&named("a"), None, Instant::now());
    assert!(pending.is_empty(), "answered: not pending again");
}

#[test]
fn a_types_wildcard_is_pending_as_the_whole_type_and_its_answer_answers_its_names() {
    let store = Store::new();
    let answered = attached(&store);
    let wildcard = Want::wildcard(GroupKey::shared(), CDS);
    answered.ask(&wildcard, None, Instant::now());
    answered.ask(&named("a"), None, Instant::now());
    let pending = store.pending_names();
    assert!(pending.is_pending(&PendingName::new(CDS, WHOLE_TYPE)));
    answered.announce([wildcard]);
    assert!(pending.is_empty(), "the name is answered with the type");
    answered.ask(&named("b"), None, Instant::now());
    assert!(pending.is_empty(), "a name of an answered wildcard");
}

#[test]
fn a_want_of_a_parameters_group_is_pending_for_its_parameters_only() {
    let store = Store::new();
    let answered = attached(&store);
    let group = GroupKey::shared().with_params([("env".to_owned(), "prod".to_owned())].into());
    answered.ask(&Want::named(group, CDS, "a"), None, Instant::now());
    let pending = store.pending_names();
    let prod: ParamSet = [("env", "prod")].into_iter().collect();
    assert!(pending.is_pending(&PendingName::new(CDS, "a").with_params(prod)));
    assert!(!pending.is_pending(&PendingName::new(CDS, "a")));
}

#[test]
fn a_want_the_upstream_does_not_answer_expires_and_is_not_waited_for_again() {
    let store = Store::new();
    let answered = attached(&store);
    let t0 = Instant::now();
    answered.ask(&named("a"), None, t0);
    assert_eq!(answered.next_expiry(), Some(t0 + WAIT));
    assert!(answered.expire(t0 + WAIT / 2).is_empty());
    assert_eq!(answered.metrics.pending(), 1);
    assert_eq!(answered.expire(t0 + WAIT), vec![named("a")]);
    assert!(answered.is_answered(&named("a")));
    assert_eq!(
        (
            answered.metrics.pending(),
            answered.metrics.pending_expired()
        ),
        (0, 1)
    );
    answered.ask(&named("a"), None, t0 + WAIT);
    assert!(store.pending_names().is_empty());
}

#[test]
fn an_unsubscribed_want_is_no_longer_pending_and_is_waited_for_again() {
    let store = Store::new();
    let answered = attached(&store);
    answered.ask(&named("a"), None, Instant::now());
    linger_out(&answered, &named("a"));
    assert!(store.pending_names().is_empty());
    answered.acquire(1, named("b"));
    answered.announce([named("b")]);
    assert!(answered.is_answered(&named("b")));
    answered.release(1, Instant::now());
    answered.handle_timeout(Instant::now() + LINGER);
    assert!(!answered.is_answered(&named("b")));
    answered.ask(&named("b"), None, Instant::now());
    assert_eq!(store.pending_names().len(), 1);
}

#[test]
fn an_answer_nobody_asked_for_is_not_kept() {
    // A wildcard's resources are announced name by name; once the wildcard lingered out
    // (forgotten), a later client of one of those names waits for the upstream's answer
    // again rather than being told at once that it does not exist.
    let store = Store::new();
    let answered = attached(&store);
    let wildcard = Want::wildcard(GroupKey::shared(), CDS);
    answered.ask(&wildcard, None, Instant::now());
    answered.announce([wildcard.clone(), named("a"), named("b")]);
    linger_out(&answered, &wildcard);
    assert_eq!(answered.rows(), 0, "nothing kept");
    answered.ask(&named("a"), None, Instant::now());
    assert!(store
        .pending_names()
        .is_pending(&PendingName::new(CDS, "a")));
}

#[test]
fn a_locator_is_not_answered_by_the_wildcard_of_its_clients_group() {
    // The wildcard follows its group's parameters; a locator brings its own, so it is the
    // name in the group of those, which that wildcard does not answer.
    let store = Store::new();
    let answered = attached(&store);
    let wildcard = Want::wildcard(GroupKey::shared(), CDS);
    answered.ask(&wildcard, None, Instant::now());
    answered.announce([wildcard]);
    let prod = GroupKey::shared().with_params([("env".to_owned(), "prod".to_owned())].into());
    let locator = Want::named(prod, CDS, "a");
    answered.ask(&locator, None, Instant::now());
    assert!(!answered.is_answered(&locator));
    let prod: ParamSet = [("env", "prod")].into_iter().collect();
    assert!(store
        .pending_names()
        .is_pending(&PendingName::new(CDS, "a").with_params(prod)));
}

#[test]
fn past_the_limit_a_want_is_not_held() {
    let store = Store::new();
    let answered = Table::new(LINGER, WAIT, RelayMetrics::new(), shared_stores());
    answered.attach(store.pending_names(), 1);
    answered.ask(&named("a"), None, Instant::now());
    answered.ask(&named("b"), None, Instant::now());
    let pending = store.pending_names();
    assert_eq!(pending.len(), 1);
    assert!(!pending.is_pending(&PendingName::new(CDS, "b")));
}

fn client(id: &str, cluster: &str) -> ClientNode {
    let node = envoy_types::pb::envoy::config::core::v3::Node {
        id: id.into(),
        cluster: cluster.into(),
        ..Default::default()
    };
    ClientNode::from_node(&node).expect("a valid node")
}

fn group_of(by: crate::AggregateBy, node: &ClientNode) -> GroupKey {
    crate::group::group_of(by, Some(node), CDS)
}

/// A `Table` of the server's `store` and the partitions' stores grouped `by`.
fn grouped(store: &Store, by: crate::AggregateBy) -> (Table, Arc<Stores>) {
    let stores = Arc::new(Stores::new(by, 100));
    let answered = Table::new(LINGER, WAIT, RelayMetrics::new(), stores.clone());
    answered.attach(store.pending_names(), 100);
    (answered, stores)
}

#[test]
fn a_want_of_a_cluster_group_is_pending_in_its_clusters_store_for_its_clients_only() {
    let store = Store::new();
    let (answered, stores) = grouped(&store, crate::AggregateBy::Cluster);
    let node = client("n1", "edge");
    let want = Want::named(group_of(crate::AggregateBy::Cluster, &node), CDS, "a");
    // The client's stream holds its store (the server's picker gave it).
    let edge_store = stores
        .store(&want.group.partition)
        .expect("the cluster's store");
    answered.ask(&want, Some(&node), Instant::now());
    let edge: ParamSet = [(xdsd_core::NODE_CLUSTER_PARAM, "edge")]
        .into_iter()
        .collect();
    let pending = edge_store.pending_names();
    assert!(pending.is_pending(&PendingName::new(CDS, "a").with_params(edge)));
    assert!(
        !pending.is_pending(&PendingName::new(CDS, "a")),
        "not for every client"
    );
    assert!(store.pending_names().is_empty(), "not in the shared store");
    // Another client of the cluster: the same scope, declared once.
    answered.ask(&want, Some(&client("n2", "edge")), Instant::now());
    assert_eq!(pending.len(), 1);
    answered.announce([want]);
    assert!(pending.is_empty());
}

#[test]
fn a_want_of_a_node_group_is_pending_in_its_nodes_store_for_its_parameters() {
    let store = Store::new();
    let (answered, stores) = grouped(&store, crate::AggregateBy::Node);
    let node = client("n1", "edge");
    let want = Want::named(group_of(crate::AggregateBy::Node, &node), CDS, "a");
    let own_store = stores
        .store(&want.group.partition)
        .expect("the node's store");
    answered.ask(&want, Some(&node), Instant::now());
    let pending = own_store.pending_names();
    let own = node.params_for(CDS).clone();
    assert!(pending.is_pending(&PendingName::new(CDS, "a").with_params(own)));
    assert!(!pending.is_pending(&PendingName::new(CDS, "a")));
    linger_out(&answered, &want);
    assert!(pending.is_empty());
}

#[test]
fn a_want_of_a_partitions_store_expires_there() {
    let store = Store::new();
    let (answered, stores) = grouped(&store, crate::AggregateBy::Cluster);
    let node = client("n1", "edge");
    let want = Want::named(group_of(crate::AggregateBy::Cluster, &node), CDS, "a");
    let _held = stores.store(&want.group.partition);
    let t0 = Instant::now();
    answered.ask(&want, Some(&node), t0);
    assert_eq!(answered.next_expiry(), Some(t0 + WAIT));
    assert_eq!(answered.expire(t0 + WAIT), vec![want.clone()]);
    assert!(answered.is_answered(&want));
}

#[test]
fn a_want_expires_in_its_partitions_store_only_and_nothing_else_is_given_up() {
    let store = Store::new();
    let (answered, stores) = grouped(&store, crate::AggregateBy::Cluster);
    let (na, nb) = (client("n1", "a"), client("n2", "b"));
    let wa = Want::named(group_of(crate::AggregateBy::Cluster, &na), CDS, "x");
    let wb = Want::named(group_of(crate::AggregateBy::Cluster, &nb), CDS, "x");
    let (sa, sb) = (
        stores.store(&wa.group.partition).expect("a's store"),
        stores.store(&wb.group.partition).expect("b's store"),
    );
    let t0 = Instant::now();
    answered.ask(&wa, Some(&na), t0);
    answered.ask(&wb, Some(&nb), t0 + WAIT / 2);
    assert_eq!(answered.next_expiry(), Some(t0 + WAIT));
    assert_eq!(answered.expire(t0 + WAIT), vec![wa.clone()]);
    assert!(sa.pending_names().is_empty());
    assert_eq!(sb.pending_names().len(), 1, "b's still pending");
    assert_eq!(answered.next_expiry(), Some(t0 + WAIT + WAIT / 2));
    answered.announce([wb.clone()]);
    assert_eq!(answered.next_expiry(), None, "nothing declared");
    assert!(answered.state().by_pending.is_empty());
    assert!(answered.state().partitions.is_empty());
}

#[test]
fn a_want_given_up_for_every_scope_it_was_declared_for_is_answered() {
    let store = Store::new();
    let answered = attached(&store);
    let want = Want::named(GroupKey::shared(), CDS, "a");
    let t0 = Instant::now();
    answered.ask(&want, Some(&client("n1", "edge")), t0);
    assert!(answered.expire(t0 + WAIT / 2).is_empty());
    assert!(!answered.is_answered(&want));
    assert_eq!(answered.expire(t0 + WAIT), vec![want.clone()]);
    assert!(answered.is_answered(&want));
}

// --- One row: who wants it and whether it was answered, together

#[test]
fn an_answer_to_a_subscribed_want_is_kept_while_it_is_subscribed() {
    // Answered though no client waited for it (the name asked while the type's wildcard
    // was answered, or past the limit): a later client of it does not wait for an answer
    // the upstream gave already.
    let store = Store::new();
    let table = attached(&store);
    table.acquire(1, named("a"));
    table.announce([named("a")]);
    assert!(table.is_answered(&named("a")));
    table.ask(&named("a"), None, Instant::now());
    assert!(store.pending_names().is_empty());
}

#[test]
fn a_want_declared_before_its_demand_is_taken_in_is_subscribed_when_it_is() {
    let store = Store::new();
    let table = attached(&store);
    table.ask(&named("a"), None, Instant::now());
    assert_eq!(actions(&table), vec![], "declared only");
    assert_eq!(table.subscriptions(), 0);
    table.acquire(1, named("a"));
    assert_eq!(actions(&table), vec![Action::Subscribe(named("a"))]);
    assert_eq!(store.pending_names().len(), 1, "still pending");
    table.announce([named("a")]);
    assert!(store.pending_names().is_empty());
    assert_eq!(table.rows(), 1);
}

#[test]
fn a_wildcard_lingering_out_takes_its_answer_with_it_and_its_names_wait_again() {
    let store = Store::new();
    let table = attached(&store);
    table.acquire(u64::MAX, cds());
    table.announce([cds()]);
    assert!(table.is_answered(&named("a")), "answered by the wildcard");
    linger_out(&table, &cds());
    table.ask(&named("a"), None, Instant::now());
    assert!(store
        .pending_names()
        .is_pending(&PendingName::new(CDS, "a")));
}

// --- The cached variants: kept and dropped by the rows' rules

fn resource(name: &str, aliases: &[&str]) -> xdsd_client::Resource {
    xdsd_client::Resource {
        type_url: CDS.into(),
        name: name.into(),
        version: "1".into(),
        body: envoy_types::pb::google::protobuf::Any {
            type_url: CDS.into(),
            value: b"x".to_vec(),
        },
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        constraints: None,
        ttl: None,
    }
}

/// The names of the changed resources the partition's next change carries.
fn changed_names(table: &Table, partition: &Partition) -> Vec<String> {
    table
        .take_change(partition)
        .map(|(change, _)| match change.update {
            xdsd_core::source::Update::Names { names, .. } => {
                names.into_iter().map(|(_, n)| n).collect()
            }
            other => panic!("a change of names, not {other:?}"),
        })
        .unwrap_or_default()
}

#[test]
fn a_name_left_by_its_last_subscription_leaves_the_cache_unless_its_wildcard_holds_it() {
    let table = table();
    table.acquire(1, named("a"));
    table.acquire(2, cds());
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    assert_eq!(table.variants(), 0, "counted when taken");
    changed_names(&table, &Partition::All);
    assert_eq!(table.variants(), 1);
    let t0 = Instant::now();
    table.release(1, t0);
    table.handle_timeout(t0 + LINGER);
    assert!(
        changed_names(&table, &Partition::All).is_empty(),
        "a is held through the wildcard"
    );
    table.acquire(3, named("a"));
    table.release(2, t0 + LINGER);
    table.release(3, t0 + LINGER * 2);
    table.handle_timeout(t0 + LINGER * 3);
    assert_eq!(changed_names(&table, &Partition::All), vec!["a".to_owned()]);
    assert_eq!(table.variants(), 0);
}

#[test]
fn a_wildcard_left_by_its_last_subscription_keeps_the_names_subscribed_by_name() {
    let table = table();
    table.acquire(1, cds());
    table.acquire(2, named("a"));
    received_copies(
        &table,
        &GroupKey::shared(),
        CDS,
        &[&resource("a", &[]), &resource("b", &[])],
    );
    changed_names(&table, &Partition::All);
    let t0 = Instant::now();
    table.release(1, t0);
    table.handle_timeout(t0 + LINGER);
    assert_eq!(changed_names(&table, &Partition::All), vec!["b".to_owned()]);
    assert_eq!(table.variants(), 1);
}

#[test]
fn an_alias_left_takes_what_it_held_unless_another_of_its_names_is_subscribed() {
    let table = table();
    table.acquire(1, named("rc/one.example"));
    table.acquire(2, named("rc/two.example"));
    received_copies(
        &table,
        &GroupKey::shared(),
        CDS,
        &[&resource("vh", &["rc/one.example", "rc/two.example"])],
    );
    changed_names(&table, &Partition::All);
    let t0 = Instant::now();
    table.release(1, t0);
    table.handle_timeout(t0 + LINGER);
    assert!(
        changed_names(&table, &Partition::All).is_empty(),
        "two.example holds vh"
    );
    table.release(2, t0 + LINGER);
    table.handle_timeout(t0 + LINGER * 2);
    assert_eq!(
        changed_names(&table, &Partition::All),
        vec!["vh".to_owned()]
    );
}

#[test]
fn a_removal_answers_the_subscriptions_of_its_name_and_of_its_aliases() {
    let table = table();
    table.acquire(1, named("rc/one.example"));
    received_copies(
        &table,
        &GroupKey::shared(),
        CDS,
        &[&resource("vh", &["rc/one.example"])],
    );
    table.state().answering.clear();
    table.removed(
        &GroupKey::shared(),
        CDS,
        &["vh".to_owned()],
        &[("vh".to_owned(), None)],
    );
    assert_eq!(
        table.state().answering[&Partition::All],
        vec![named("rc/one.example")],
        "vh itself is not subscribed"
    );
    assert_eq!(
        changed_names(&table, &Partition::All),
        vec!["vh".to_owned()]
    );
}

#[test]
fn a_partition_whose_cache_holds_nothing_is_let_go_once_its_change_is_taken() {
    let table = table();
    let group = edge();
    let want = Want::named(group.clone(), CDS, "a");
    table.acquire(1, want.clone());
    received_copies(&table, &group, CDS, &[&resource("a", &[])]);
    assert_eq!(table.take_touched(), [group.partition.clone()].into());
    changed_names(&table, &group.partition);
    assert!(table.holds_any(&group.partition));
    table.does_not_exist(&group, CDS, "a");
    assert_eq!(
        changed_names(&table, &group.partition),
        vec!["a".to_owned()]
    );
    assert!(!table.holds_any(&group.partition));
}

#[test]
fn a_response_of_its_type_does_not_answer_the_groups_wildcard() {
    // An answer to `a`, asked before the wildcard, sent before the upstream read the wildcard:
    // it says nothing of the names not asked (a SotW client's full state without them).
    let table = table();
    table.acquire(1, named("a"));
    table.acquire(2, cds());
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    assert_eq!(table.state().answering[&Partition::All], vec![named("a")]);
    assert!(table.responded(&cds()), "a response, which readiness reads");
}

#[test]
fn the_groups_wildcard_is_answered_when_its_stream_says_so_if_the_group_subscribes_to_it() {
    let table = table();
    table.wildcard_answered(&GroupKey::shared(), CDS);
    assert!(
        !table.state().answering.contains_key(&Partition::All),
        "an answer nobody subscribed to is nothing to remember"
    );
    table.acquire(2, cds());
    table.wildcard_answered(&GroupKey::shared(), CDS);
    assert_eq!(table.state().answering[&Partition::All], vec![cds()]);
}

#[test]
fn an_answer_waits_for_its_partitions_commit_and_is_announced_after_it() {
    let store = Store::new();
    let table = attached(&store);
    table.ask(&named("a"), None, Instant::now());
    table.acquire(1, named("a"));
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    assert!(!table.is_answered(&named("a")), "not committed yet");
    table.stage_shared();
    assert!(table.state().answering.is_empty());
    assert!(
        !table.is_answered(&named("a")),
        "in the change handed to the feed"
    );
    table.announce_committed();
    assert!(table.is_answered(&named("a")));
    assert!(store.pending_names().is_empty());
}

#[test]
fn a_wildcard_has_a_response_once_its_group_is_sent_one_of_its_type_even_empty() {
    let table = table();
    table.pin(cds());
    assert!(!table.responded(&cds()));
    received_copies(&table, &GroupKey::shared(), CDS, &[]);
    assert!(table.responded(&cds()), "taken in, not committed yet");
    assert!(!table.is_answered(&cds()));
}

// --- Glob collections (xRFC TP1)

const GLOB: &str = "xdstp://a/envoy.config.cluster.v3.Cluster/c1/*";

fn member(id: &str) -> String {
    format!("xdstp://a/envoy.config.cluster.v3.Cluster/c1/{id}")
}

#[test]
fn a_member_received_answers_its_glob_collection_if_the_group_subscribes_to_it() {
    let table = table();
    table.acquire(1, named(GLOB));
    // A member of another collection answers nothing of this one.
    let other = "xdstp://a/envoy.config.cluster.v3.Cluster/c2/e1";
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource(other, &[])]);
    assert_eq!(table.state().answering[&Partition::All], vec![named(other)]);
    table.state().answering.clear();
    received_copies(
        &table,
        &GroupKey::shared(),
        CDS,
        &[&resource(&member("e1"), &[]), &resource(&member("e2"), &[])],
    );
    assert_eq!(
        table.state().answering[&Partition::All],
        vec![named(&member("e1")), named(&member("e2")), named(GLOB)],
        "the glob once, with its members"
    );
}

#[test]
fn a_glob_collection_answered_answers_the_names_of_its_members() {
    let store = Store::new();
    let table = attached(&store);
    table.acquire(1, named(GLOB));
    table.announce([named(GLOB)]);
    // Subscribed by name later, a member (there or not) is answered by the glob's answer.
    table.ask(&named(&member("e9")), None, Instant::now());
    assert!(store.pending_names().is_empty());
    assert_eq!(
        table.answered_names(vec![named(&member("e9")), named("plain")]),
        vec![named(&member("e9"))]
    );
}

#[test]
fn a_glob_collection_left_takes_its_members_but_those_subscribed_by_name() {
    let table = table();
    table.acquire(1, named(GLOB));
    table.acquire(2, named(&member("e1")));
    let below = "xdstp://a/envoy.config.cluster.v3.Cluster/c1/sub/e3";
    table.acquire(3, named(below));
    received_copies(
        &table,
        &GroupKey::shared(),
        CDS,
        &[
            &resource(&member("e1"), &[]),
            &resource(&member("e2"), &[]),
            &resource(below, &[]),
        ],
    );
    changed_names(&table, &Partition::All);
    let t0 = Instant::now();
    // The name unsubscribed while the glob holds it: it stays.
    table.release(2, t0);
    table.handle_timeout(t0 + LINGER);
    assert!(changed_names(&table, &Partition::All).is_empty());
    table.acquire(4, named(&member("e1")));
    // The glob left: e2 goes, e1 (by name) and the name below the glob's path stay.
    table.release(1, t0 + LINGER);
    table.handle_timeout(t0 + LINGER * 2);
    assert_eq!(changed_names(&table, &Partition::All), vec![member("e2")]);
    assert_eq!(table.variants(), 2);
}

// --- Narrowed: a name held through its group narrowed to the keys its variants constrain

/// The shared partition's group presenting `params`.
fn with(params: &[(&str, &str)]) -> GroupKey {
    GroupKey::shared().with_params(
        params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

/// A variant of `name` constrained to `key` = `value`.
fn constrained(name: &str, key: &str, value: &str) -> xdsd_client::Resource {
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
        single_constraint::ConstraintType, SingleConstraint, Type,
    };
    use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
    xdsd_client::Resource {
        constraints: Some(DynamicParameterConstraints {
            r#type: Some(Type::Constraint(SingleConstraint {
                key: key.into(),
                constraint_type: Some(ConstraintType::Value(value.into())),
            })),
        }),
        ..resource(name, &[])
    }
}

fn subscribes(table: &Table) -> Vec<Want> {
    actions(table)
        .into_iter()
        .filter_map(|a| match a {
            Action::Subscribe(w) => Some(w),
            Action::Unsubscribe(_) | Action::Forget(_) => None,
        })
        .collect()
}

#[test]
fn a_name_whose_keys_are_not_known_is_held_through_the_clients_own_group() {
    let table = table();
    let pod = with(&[("env", "prod"), ("pod", "p1")]);
    table.acquire(1, Want::named(pod.clone(), CDS, "a"));
    assert_eq!(subscribes(&table), vec![Want::named(pod, CDS, "a")]);
}

/// A table attached to `store` whose shared stream's wildcard (the prefetch) is answered, its
/// variant of `a` unconstrained.
fn prefetched(store: &Store) -> Table {
    let table = attached(store);
    table.pin(cds());
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    table.announce([cds()]);
    actions(&table);
    table
}

#[test]
fn a_name_whose_variants_constrain_no_key_is_held_through_the_group_of_no_parameters() {
    let store = Store::new();
    let table = prefetched(&store);
    for (stream, pod) in [(1, "p1"), (2, "p2")] {
        let want = Want::named(with(&[("env", "prod"), ("pod", pod)]), CDS, "a");
        table.ask(&want, None, Instant::now());
        table.acquire(stream, want);
    }
    assert!(
        store.pending_names().is_empty(),
        "answered by the shared stream's wildcard: nothing waits"
    );
    assert_eq!(
        subscribes(&table),
        vec![],
        "held on the shared stream, whose pinned wildcard brings it: not asked by name"
    );
    assert!(table.holds(&named("a")));
    assert_eq!(table.subscriptions(), 2);
}

fn declared(keys: &[&str]) -> Option<BTreeSet<String>> {
    Some(keys.iter().map(|k| k.to_string()).collect())
}

#[test]
fn without_declared_keys_a_wildcard_is_fetched_with_the_clients_whole_parameter_set() {
    let store = Store::new();
    let table = prefetched(&store);
    let full = with(&[("xds.node.cluster", "web")]);
    let want = Want::wildcard(full.clone(), CDS);
    table.ask(&want, None, Instant::now());
    table.acquire(1, want.clone());
    assert_eq!(subscribes(&table), vec![want], "its own stream, asked");
    assert_eq!(
        store.pending_names().len(),
        1,
        "its whole type waits for it"
    );
}

#[test]
fn a_wildcard_is_narrowed_to_the_declared_keys() {
    let store = Store::new();
    let table = prefetched(&store);
    table.declare_upstream_keys(declared(&["env"]));
    // Two node clusters, no env: the shared stream's pinned wildcard, answered.
    for (stream, cluster) in [(1, "web"), (2, "api")] {
        let want = Want::wildcard(with(&[("xds.node.cluster", cluster)]), CDS);
        table.ask(&want, None, Instant::now());
        table.acquire(stream, want);
    }
    assert_eq!(subscribes(&table), vec![], "held through the shared stream");
    assert!(
        store.pending_names().is_empty(),
        "answered by the shared stream's wildcard: nothing waits"
    );
    // Two of env=prod: one stream presenting env=prod only.
    for (stream, cluster) in [(3, "web"), (4, "api")] {
        let want = Want::wildcard(with(&[("env", "prod"), ("xds.node.cluster", cluster)]), CDS);
        table.ask(&want, None, Instant::now());
        table.acquire(stream, want);
    }
    assert_eq!(
        subscribes(&table),
        vec![Want::wildcard(with(&[("env", "prod")]), CDS)],
        "one stream for env=prod, whatever the node cluster"
    );
}

#[test]
fn a_name_not_received_yet_is_narrowed_to_the_declared_keys_and_then_to_its_own() {
    let table = table();
    table.declare_upstream_keys(declared(&["env", "version"]));
    let full = |pod: &str| with(&[("env", "prod"), ("pod", pod), ("version", "v1")]);
    table.acquire(1, Want::named(full("p1"), CDS, "a"));
    table.acquire(2, Want::named(full("p2"), CDS, "a"));
    let by_declared = Want::named(with(&[("env", "prod"), ("version", "v1")]), CDS, "a");
    assert_eq!(
        subscribes(&table),
        vec![by_declared.clone()],
        "the pods share the stream of the declared keys"
    );
    // Its variants constrain env only: a later pod is held through env=prod.
    received_copies(
        &table,
        &by_declared.group,
        CDS,
        &[&constrained("a", "env", "prod")],
    );
    let by_env = Want::named(with(&[("env", "prod")]), CDS, "a");
    assert_eq!(
        subscribes(&table),
        vec![by_env.clone()],
        "a name's own keys, once received, narrow it further"
    );
    table.acquire(3, Want::named(full("p3"), CDS, "a"));
    assert_eq!(subscribes(&table), vec![], "a later pod: the same stream");
    assert!(table.holds(&by_env));
}

#[test]
fn a_name_whose_variants_constrain_an_undeclared_key_is_held_through_its_own_keys() {
    let table = table();
    table.declare_upstream_keys(declared(&[]));
    let full = with(&[("env", "prod"), ("pod", "p1")]);
    table.acquire(1, Want::named(full.clone(), CDS, "a"));
    assert_eq!(
        subscribes(&table),
        vec![named("a")],
        "no key declared: the shared stream"
    );
    // The upstream's variant constrains env after all (logged): the name follows its keys.
    received_copies(
        &table,
        &GroupKey::shared(),
        CDS,
        &[&constrained("a", "env", "prod")],
    );
    let by_env = Want::named(with(&[("env", "prod")]), CDS, "a");
    assert!(
        subscribes(&table).contains(&by_env),
        "held through env=prod, as its variants' keys say"
    );
    table.acquire(
        2,
        Want::named(with(&[("env", "prod"), ("pod", "p2")]), CDS, "a"),
    );
    assert_eq!(subscribes(&table), vec![], "a later pod: the same stream");
    assert!(table.holds(&by_env));
}

#[test]
fn a_name_is_narrowed_to_the_keys_its_variants_constrain() {
    let table = table();
    let prod = with(&[("env", "prod")]);
    table.acquire(1, Want::named(prod.clone(), CDS, "a"));
    received_copies(&table, &prod, CDS, &[&constrained("a", "env", "prod")]);
    actions(&table);
    for (stream, pod) in [(2, "p1"), (3, "p2")] {
        table.acquire(
            stream,
            Want::named(with(&[("env", "prod"), ("pod", pod)]), CDS, "a"),
        );
    }
    table.acquire(
        4,
        Want::named(with(&[("env", "test"), ("pod", "p3")]), CDS, "a"),
    );
    assert_eq!(
        subscribes(&table),
        vec![Want::named(with(&[("env", "test")]), CDS, "a")],
        "the pods of env=prod share its stream; env=test has its own"
    );
}

#[test]
fn a_stream_leaving_lets_go_of_what_it_held_through_its_narrowed_group() {
    let table = table();
    table.pin(cds());
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    let full = Want::named(with(&[("pod", "p1")]), CDS, "a");
    table.acquire(1, full.clone());
    table.acquire(2, full.clone());
    actions(&table);
    let t0 = Instant::now();
    table.drop_want(1, &full, t0);
    assert_eq!(table.poll_timeout(), None, "stream 2 holds it");
    table.release(2, t0);
    table.handle_timeout(t0 + LINGER);
    assert!(!table.holds(&named("a")));
    assert_eq!(
        actions(&table),
        vec![Action::Forget(named("a"))],
        "never asked by name: its shared stream's pinned wildcard brings it"
    );
    assert_eq!(table.state().routes.len(), 0, "no route kept");
}

#[test]
fn a_stream_that_held_a_name_through_its_own_group_lets_go_of_it_there_once_others_are_narrowed() {
    let table = table();
    table.pin(cds());
    let full = Want::named(with(&[("pod", "p1")]), CDS, "a");
    // Its keys not known yet: held through the stream's own group.
    table.acquire(1, full.clone());
    // Then known (a constrains nothing): a second stream of the group is narrowed.
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    table.acquire(2, full.clone());
    assert_eq!(subscribes(&table), vec![cds(), full.clone()]);
    assert!(
        table.holds(&named("a")),
        "on the shared stream, by its wildcard"
    );
    let t0 = Instant::now();
    table.release(1, t0);
    table.release(2, t0);
    table.handle_timeout(t0 + LINGER);
    let mut gone = actions(&table);
    gone.sort_by_key(|a| format!("{a:?}"));
    assert_eq!(
        gone,
        vec![Action::Forget(named("a")), Action::Unsubscribe(full)],
        "each left by the stream that held it"
    );
    assert!(!table.holds(&named("a")));
    assert_eq!(table.rows(), 1, "only the pinned wildcard");
}

#[test]
fn a_key_seen_later_moves_the_wants_narrowed_without_it_and_they_wait_there() {
    let store = Store::new();
    let table = attached(&store);
    table.pin(cds());
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    table.announce([cds()]);
    let pod = with(&[("env", "prod"), ("pod", "p1")]);
    table.acquire(1, Want::named(pod, CDS, "a"));
    actions(&table);
    // The upstream now constrains a by env: the shared stream is sent its variant for
    // clients without env.
    let t0 = Instant::now();
    received_copies(
        &table,
        &GroupKey::shared(),
        CDS,
        &[&constrained("a", "env", "none")],
    );
    let prod = Want::named(with(&[("env", "prod")]), CDS, "a");
    assert_eq!(subscribes(&table), vec![prod.clone()]);
    let scope: ParamSet = [("env", "prod")].into_iter().collect();
    assert!(
        store
            .pending_names()
            .is_pending(&PendingName::new(CDS, "a").with_params(scope)),
        "pending for env=prod until its stream answers: the shared variant is not its"
    );
    // The name held on the shared stream is let go (its wildcard holds it still).
    table.handle_timeout(t0 + LINGER * 2);
    assert!(!table.holds(&named("a")));
    assert_eq!(
        actions(&table),
        vec![Action::Forget(named("a"))],
        "never asked by name there"
    );
    assert!(table.holds(&prod));
}

#[test]
fn a_narrowing_looked_up_before_a_key_was_seen_is_looked_up_again_when_held() {
    let table = table();
    table.pin(cds());
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    actions(&table);
    // The observer routes the request's want: a constrains nothing yet, the shared stream.
    let full = Want::named(with(&[("env", "prod"), ("pod", "p1")]), CDS, "a");
    let routed = table.ask_all(std::slice::from_ref(&full), None, Instant::now());
    // Before the source holds it, the upstream constrains a by env.
    received_copies(
        &table,
        &GroupKey::shared(),
        CDS,
        &[&constrained("a", "env", "none")],
    );
    table.acquire_all(1, vec![full], Some(routed));
    assert_eq!(
        subscribes(&table),
        vec![Want::named(with(&[("env", "prod")]), CDS, "a")],
        "held through env=prod's stream, not the shared one the observer looked up"
    );
}

#[test]
fn a_narrowing_looked_up_by_the_observer_is_not_looked_up_again() {
    let table = table();
    table.pin(cds());
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    actions(&table);
    let full = Want::named(with(&[("pod", "p1")]), CDS, "a");
    let mut routed = table.ask_all(std::slice::from_ref(&full), None, Instant::now());
    // What the source is handed is what it holds by (a route made up here shows it).
    let elsewhere = with(&[("zone", "z")]);
    routed.to = Arc::from([Some(elsewhere.clone())]);
    table.acquire_all(1, vec![full], Some(routed));
    assert_eq!(subscribes(&table), vec![Want::named(elsewhere, CDS, "a")]);
}

#[test]
fn a_name_removed_for_its_narrowed_group_is_held_through_the_clients_own_group_again() {
    let store = Store::new();
    let table = attached(&store);
    let prod = with(&[("env", "prod")]);
    table.acquire(1, Want::named(prod.clone(), CDS, "a"));
    received_copies(&table, &prod, CDS, &[&constrained("a", "env", "prod")]);
    table.announce([Want::named(prod.clone(), CDS, "a")]);
    let pod = with(&[("env", "prod"), ("pod", "p1")]);
    table.acquire(2, Want::named(pod.clone(), CDS, "a"));
    actions(&table);
    // The upstream's variants of a now constrain pod too: env=prod alone matches none.
    table.removed(&prod, CDS, &["a".to_owned()], &[("a".to_owned(), None)]);
    assert_eq!(subscribes(&table), vec![Want::named(pod.clone(), CDS, "a")]);
    let scope: ParamSet = [("env", "prod"), ("pod", "p1")].into_iter().collect();
    assert!(store
        .pending_names()
        .is_pending(&PendingName::new(CDS, "a").with_params(scope)));
}

#[test]
fn with_declared_keys_a_name_removed_for_its_narrowed_group_is_held_through_the_declared_ones() {
    let store = Store::new();
    let table = attached(&store);
    table.declare_upstream_keys(declared(&["env", "zone"]));
    let prod = with(&[("env", "prod")]);
    table.acquire(1, Want::named(prod.clone(), CDS, "a"));
    received_copies(&table, &prod, CDS, &[&constrained("a", "env", "prod")]);
    table.announce([Want::named(prod.clone(), CDS, "a")]);
    let pod = with(&[("env", "prod"), ("pod", "p1"), ("zone", "z1")]);
    table.acquire(2, Want::named(pod.clone(), CDS, "a"));
    actions(&table);
    // The upstream's variants of a now constrain zone too: env=prod alone matches none.
    table.removed(&prod, CDS, &["a".to_owned()], &[("a".to_owned(), None)]);
    let by_declared = with(&[("env", "prod"), ("zone", "z1")]);
    assert_eq!(
        subscribes(&table),
        vec![Want::named(by_declared.clone(), CDS, "a")],
        "the declared keys' group, not the pod's own"
    );
    let scope: ParamSet = [("env", "prod"), ("zone", "z1")].into_iter().collect();
    assert!(store
        .pending_names()
        .is_pending(&PendingName::new(CDS, "a").with_params(scope)));
    // Gone for that group too: its answer stands (the declaration says no other key selects).
    table.removed(
        &by_declared,
        CDS,
        &["a".to_owned()],
        &[("a".to_owned(), None)],
    );
    assert_eq!(subscribes(&table), vec![], "nothing wider to ask");
}

#[test]
fn the_keys_of_a_name_no_group_holds_are_forgotten() {
    let table = table();
    table.acquire(1, named("a"));
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    changed_names(&table, &Partition::All);
    assert_eq!(
        table.state().keys.get(&TypeKey::of(CDS)).map(|n| n.len()),
        Some(1)
    );
    let t0 = Instant::now();
    table.release(1, t0);
    table.handle_timeout(t0 + LINGER);
    changed_names(&table, &Partition::All);
    assert!(table.state().keys.is_empty(), "nothing kept of a");
}

#[test]
fn a_group_of_a_node_cluster_is_not_narrowed() {
    let table = table();
    let edge = GroupKey::of(
        Partition::Cluster("edge".into()),
        [("pod".to_owned(), "p1".to_owned())].into(),
        CDS,
    );
    table.pin(Want::wildcard(edge.clone(), CDS));
    received_copies(&table, &edge, CDS, &[&resource("a", &[])]);
    actions(&table);
    table.acquire(1, Want::named(edge.clone(), CDS, "a"));
    assert!(table.holds(&Want::named(edge, CDS, "a")));
    assert!(
        table.state().routes.is_empty(),
        "held through its own group"
    );
}

#[test]
fn a_plain_name_its_groups_pinned_wildcard_brings_is_not_subscribed_upstream_by_name() {
    let table = table();
    table.pin(cds());
    actions(&table);
    let t0 = Instant::now();
    // A plain name of the pinned wildcard's group and type: held, never asked by name.
    table.acquire(1, named("a"));
    assert!(table.holds(&named("a")));
    assert_eq!(subscribes(&table), vec![]);
    // An xdstp name (its authority's server may be another) and a name of another type are.
    let xdstp = named("xdstp://a/envoy.config.cluster.v3.Cluster/c1/e1");
    table.acquire(1, xdstp.clone());
    let eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
    let endpoints = Want::named(GroupKey::shared(), eds, "a");
    table.acquire(1, endpoints.clone());
    assert_eq!(subscribes(&table), vec![xdstp.clone(), endpoints.clone()]);
    // Let go of: only what was asked by name is unsubscribed by name.
    table.release(1, t0);
    table.handle_timeout(t0 + LINGER);
    let mut gone = actions(&table);
    gone.sort_by_key(|a| format!("{a:?}"));
    let mut want = vec![
        Action::Unsubscribe(xdstp),
        Action::Unsubscribe(endpoints),
        Action::Forget(named("a")),
    ];
    want.sort_by_key(|a| format!("{a:?}"));
    assert_eq!(gone, want);
    assert!(!table.holds(&named("a")));
    assert_eq!(table.rows(), 1, "only the pinned wildcard");
}

#[test]
fn a_plain_name_under_a_wildcard_a_stream_holds_is_subscribed_by_name() {
    // A stream's wildcard is let go of once nobody holds it: the names asked by name must
    // stay subscribed then.
    let table = table();
    table.acquire(1, cds());
    table.acquire(2, named("a"));
    assert_eq!(subscribes(&table), vec![cds(), named("a")]);
}

/// `table` with the CDS wildcard pinned and answered with `n` clusters `n0`, `n1`, ...: their
/// names.
fn pinned_cds_answered(table: &Table, n: usize) -> Vec<String> {
    table.pin(cds());
    let names: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
    let resources: Vec<xdsd_client::Resource> = names.iter().map(|n| resource(n, &[])).collect();
    let refs: Vec<&xdsd_client::Resource> = resources.iter().collect();
    received_copies(table, &GroupKey::shared(), CDS, &refs);
    table.announce([cds()]);
    names
}

#[test]
fn a_large_request_asked_again_while_nothing_it_reads_changed_is_routed_as_it_was_without_a_look_up(
) {
    let store = Store::new();
    let table = attached(&store);
    let names = pinned_cds_answered(&table, LAST_ASKED_FROM);
    let pod = with(&[("pod", "p1")]);
    let wants: Vec<Want> = names
        .iter()
        .map(|n| Want::named(pod.clone(), CDS, n.as_str()))
        .collect();
    let first = table.ask_all(&wants, None, Instant::now());
    assert!(
        first.to.iter().all(Option::is_some),
        "each narrowed to the stream of no parameters"
    );
    // The keys forgotten behind the table's back (no count moved): a look-up would not narrow.
    table.state().keys.clear();
    // Another stream's request of the same names (its own copies of them).
    let same: Vec<Want> = names
        .iter()
        .map(|n| Want::named(with(&[("pod", "p1")]), CDS, n.as_str()))
        .collect();
    let again = table.ask_all(&same, None, Instant::now());
    assert_eq!(again.to, first.to, "the same request: routed as it was");
    // A shorter request is looked up.
    let fewer = table.ask_all(&same[1..], None, Instant::now());
    assert!(fewer.to.iter().all(Option::is_none), "looked up");
    // A row removed (its answer with it): the same request is looked up again.
    table.ask_all(&wants, None, Instant::now());
    linger_out(&table, &named("other"));
    let after = table.ask_all(&wants, None, Instant::now());
    assert!(after.to.iter().all(Option::is_none), "looked up again");
}

#[test]
fn a_shared_list_asked_again_is_routed_as_it_was_and_its_routes_are_shared() {
    let store = Store::new();
    let table = attached(&store);
    let names = pinned_cds_answered(&table, LAST_ASKED_FROM);
    let pod = with(&[("pod", "p1")]);
    let list: Arc<[Want]> = names
        .iter()
        .map(|n| Want::named(pod.clone(), CDS, n.as_str()))
        .collect();
    let first = table.ask_list(&list, None, Instant::now());
    assert!(first.to.iter().all(Option::is_some), "narrowed");
    let again = table.ask_list(&list, None, Instant::now());
    assert!(
        Arc::ptr_eq(&first.to, &again.to),
        "routed as it was, shared"
    );
    // A row removed: looked up again.
    linger_out(&table, &named("other"));
    let after = table.ask_list(&list, None, Instant::now());
    assert!(!Arc::ptr_eq(&first.to, &after.to), "looked up again");
}

#[test]
fn lists_asked_in_turn_are_each_routed_as_they_were() {
    let store = Store::new();
    let table = attached(&store);
    let names = pinned_cds_answered(&table, 2 * LAST_ASKED_FROM);
    let pod = with(&[("pod", "p1")]);
    let part = |names: &[String]| -> Arc<[Want]> {
        names
            .iter()
            .map(|n| Want::named(pod.clone(), CDS, n.as_str()))
            .collect()
    };
    // Two parts of a large type, asked by one stream, then by another.
    let (first, second) = (
        part(&names[..LAST_ASKED_FROM]),
        part(&names[LAST_ASKED_FROM..]),
    );
    let a = table.ask_list(&first, None, Instant::now());
    let b = table.ask_list(&second, None, Instant::now());
    let a_again = table.ask_list(&first, None, Instant::now());
    let b_again = table.ask_list(&second, None, Instant::now());
    assert!(Arc::ptr_eq(&a.to, &a_again.to) && Arc::ptr_eq(&b.to, &b_again.to));
}

// --- Lists held once

fn list(names: &[&str]) -> Arc<[Want]> {
    names.iter().map(|n| named(n)).collect::<Vec<_>>().into()
}

#[test]
fn streams_that_ask_the_same_list_hold_it_once_and_the_last_to_leave_lets_go_of_it() {
    let d = table();
    let t0 = Instant::now();
    let l = list(&["a", "b"]);
    d.acquire_list(1, l.clone(), None);
    d.acquire_list(2, l.clone(), None);
    assert_eq!(subscribes(&d), vec![named("a"), named("b")]);
    assert_eq!(
        d.state().wants[&named("a")].holders.len(),
        1,
        "held once, by the list"
    );
    d.release(1, t0);
    assert_eq!(d.poll_timeout(), None, "stream 2 holds the list");
    d.release(2, t0);
    assert_eq!(d.poll_timeout(), Some(t0 + LINGER));
    assert!(d.state().lists.is_empty());
    assert!(d.state().stream_lists.is_empty());
}

/// A list longer than a part of it held under one taking of the lock is held whole, under
/// its one holder, its routes as the observer looked them up part by part.
#[test]
fn a_list_held_in_parts_is_held_whole_by_its_one_holder() {
    let d = table();
    let t0 = Instant::now();
    let names: Vec<String> = (0..super::lists::LIST_PART * 2 + 7)
        .map(|i| format!("n{i:05}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let l = list(&names);
    let routed = d.ask_list(&l, None, t0);
    d.acquire_list(1, l.clone(), Some(routed));
    d.acquire_list(2, l.clone(), None);
    let subscribed = subscribes(&d);
    assert_eq!(subscribed.len(), names.len(), "each want subscribed once");
    for n in &names {
        let entry = &d.state().wants[&named(n)];
        assert_eq!(entry.holders.len(), 1, "{n}: held once, by the list");
    }
    assert_eq!(d.state().lists.len(), 1);
    d.release(1, t0);
    d.release(2, t0);
    assert_eq!(d.poll_timeout(), Some(t0 + LINGER), "let go of whole");
    d.handle_timeout(t0 + LINGER);
    assert_eq!(d.rows(), 0);
}

#[test]
fn a_stream_that_lets_go_of_a_want_of_a_shared_list_holds_the_rest_itself() {
    let d = table();
    let t0 = Instant::now();
    let l = list(&["a", "b"]);
    d.acquire_list(1, l.clone(), None);
    d.acquire_list(2, l.clone(), None);
    actions(&d);
    d.drop_want(1, &named("a"), t0);
    assert_eq!(
        d.poll_timeout(),
        None,
        "a: stream 2 still asks for it through the list"
    );
    d.release(2, t0);
    assert_eq!(d.poll_timeout(), Some(t0 + LINGER), "a: asked by nobody");
    d.handle_timeout(t0 + LINGER);
    assert_eq!(actions(&d), vec![Action::Unsubscribe(named("a"))]);
    assert!(d.holds(&named("b")), "stream 1 holds b itself");
    d.release(1, t0 + LINGER);
    d.handle_timeout(t0 + LINGER * 2);
    assert_eq!(actions(&d), vec![Action::Unsubscribe(named("b"))]);
    assert_eq!(d.rows(), 0);
}

#[test]
fn a_stream_alone_on_a_list_that_lets_go_of_a_want_keeps_the_rest() {
    let d = table();
    let t0 = Instant::now();
    d.acquire_list(1, list(&["a", "b"]), None);
    actions(&d);
    d.drop_want(1, &named("b"), t0);
    assert_eq!(d.poll_timeout(), Some(t0 + LINGER), "b lingers");
    d.handle_timeout(t0 + LINGER);
    assert_eq!(actions(&d), vec![Action::Unsubscribe(named("b"))]);
    assert!(d.holds(&named("a")));
    assert!(
        d.state().lists.is_empty(),
        "the list left with its last stream"
    );
}

#[test]
fn a_want_of_a_list_is_narrowed_as_a_streams_want_is() {
    let table = table();
    table.pin(cds());
    received_copies(&table, &GroupKey::shared(), CDS, &[&resource("a", &[])]);
    actions(&table);
    let full = Want::named(with(&[("pod", "p1")]), CDS, "a");
    let l: Arc<[Want]> = vec![full.clone()].into();
    table.acquire_list(1, l.clone(), None);
    table.acquire_list(2, l, None);
    assert!(table.holds(&named("a")), "held on the shared stream");
    assert_eq!(table.state().routes.len(), 1, "one route, for the list");
    let t0 = Instant::now();
    table.release(1, t0);
    table.release(2, t0);
    table.handle_timeout(t0 + LINGER);
    assert!(!table.holds(&named("a")));
    assert_eq!(table.state().routes.len(), 0);
}

#[test]
fn a_row_counts_each_streams_holds_and_is_held_by_nobody_once_every_hold_is_let_go() {
    let mut entry = Entry::default();
    entry.add(Holder::Stream(7));
    entry.add(Holder::Stream(3));
    // Stream 7 holds it through two wants (a plain name and a locator narrowed to one).
    entry.add(Holder::Stream(7));
    assert_eq!(
        entry.holders,
        vec![(3, 1), (7, 2)],
        "by stream, with counts"
    );
    entry.drop_holder(7);
    entry.drop_holder(3);
    assert_eq!(entry.holders, vec![(7, 1)]);
    assert!(!entry.held_by_nobody());
    entry.drop_holder(3);
    assert_eq!(
        entry.holders,
        vec![(7, 1)],
        "a stream not holding it changes nothing"
    );
    entry.add(Holder::Route);
    entry.drop_holder(7);
    assert!(!entry.held_by_nobody(), "a route holds it");
    entry.routes -= 1;
    assert!(entry.held_by_nobody());
}
