use super::*;

#[test]
fn the_page_is_its_html_template_filled_with_an_escaped_title_the_style_and_the_body() {
    let html = fill("<x>", "<p>{{title}}</p>");
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.contains("<title>&lt;x&gt;</title>"), "{html}");
    assert!(html.contains(".NACKED{"), "the style sheet: {html}");
    assert!(
        html.contains("<p>{{title}}</p>"),
        "the body is not a template: {html}"
    );
    assert!(html.contains("location.reload()"), "{html}");
    assert!(
        !html.contains("{{style}}") && !html.contains("{{body}}"),
        "{html}"
    );
}

#[test]
fn markup_in_names_is_escaped() {
    assert_eq!(
        escape("<script>alert('x')</script>&\""),
        "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
    );
    assert_eq!(query_value("a b&c<"), "a%20b%26c%3C");
}

fn client(id: String, state: TypeState) -> ClientRow {
    ClientRow {
        id,
        cluster: "c".into(),
        agent: String::new(),
        types: vec![TypeRow {
            type_url: types::CLUSTER.into(),
            state,
            version: "v".into(),
            nack: None,
            resources: Vec::new(),
        }],
    }
}

/// 10,000 clients, 3 of them NACKED, sorted as `rows` sorts them.
fn fleet() -> Vec<ClientRow> {
    let mut all: Vec<ClientRow> = (0..10_000)
        .map(|i| {
            let state = if i % 4000 == 7 {
                TypeState::Nacked
            } else {
                TypeState::Synced
            };
            client(format!("envoy-{i:05}"), state)
        })
        .collect();
    all.sort_by(|a, b| b.state().cmp(&a.state()).then_with(|| a.id.cmp(&b.id)));
    all
}

fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn ten_thousand_clients_are_summed_up_and_shown_a_page_at_a_time_problems_first() {
    let mut out = String::new();
    clients_section(&mut out, fleet(), &HashMap::new());
    assert!(
        out.contains("10000 clients: 9997 synced, 3 NACKED"),
        "{out}"
    );
    assert_eq!(out.matches("<tr class=\"client\">").count(), PAGE_SIZE);
    assert!(out.contains("page 1 of 100 (10000 clients, <a href=\"/?page=2&amp;q=\">next</a>)"));
    let first = out.find("envoy-00007").expect("a NACKED client on page 1");
    let synced = out.find("envoy-00000").expect("then the synced ones");
    assert!(first < synced);

    let mut last = String::new();
    clients_section(&mut last, fleet(), &query(&[("page", "100")]));
    assert!(last.contains("page 100 of 100"), "{last}");
    assert!(last.contains("envoy-09999"), "{last}");

    let mut filtered = String::new();
    clients_section(
        &mut filtered,
        fleet(),
        &query(&[("q", "envoy-0999"), ("page", "7")]),
    );
    assert_eq!(filtered.matches("<tr class=\"client\">").count(), 10);
    assert!(!filtered.contains("id=\"pages\""), "one page: {filtered}");
    assert!(
        filtered.contains("10000 clients"),
        "the summary counts all: {filtered}"
    );
}

#[tokio::test]
async fn a_gated_rollout_shows_its_state() {
    use xdsd_core::{Cohort, GateConfig, Rollout, Selector, Store, XdsServer};
    let store = Store::new();
    let cohort = Cohort::new(vec![Selector::parse("node=canary-*").expect("a selector")]);
    // Nothing is committed: the gate stays idle whatever its clock does.
    let rollout = Rollout::new(cohort, GateConfig::default(), store.clone());
    let server = XdsServer::builder(store).rollout(rollout).build().unwrap();
    let state = PageState {
        handle: server.handle(),
        info: Arc::new(PageInfo {
            version: "xdsd 9.9".into(),
            source: "directory <d>".into(),
        }),
        history: None,
    };
    let mut out = String::new();
    server_section(&mut out, &state);
    assert!(out.contains("<td id=\"rollout\"><b>idle</b>"), "{out}");
    assert!(out.contains("node=canary-*"), "{out}");
    assert!(out.contains("directory &lt;d&gt;"), "{out}");
    let mut plain = String::new();
    let server = XdsServer::builder(Store::new()).build().unwrap();
    server_section(
        &mut plain,
        &PageState {
            handle: server.handle(),
            info: Arc::default(),
            history: None,
        },
    );
    assert!(!plain.contains("rollout"), "{plain}");
}

/// A replica serving `revision` (and a candidate to its canaries).
fn replica(name: &str, revision: i64, candidate: Option<i64>) -> Replica {
    Replica {
        name: name.into(),
        served: xdsd_core::csds::Served::from_json(&serde_json::json!({
            "revision": revision, "candidate_revision": candidate, "generation": 1,
            "digest": "d", "server": name,
        }))
        .ok_or_else(String::new),
    }
}

#[test]
fn the_history_marks_the_replicas_serving_each_change_and_escapes_what_a_pusher_wrote() {
    let rows = serde_json::json!([
        {"revision": 9, "kind": "rollback", "rollback_to": 7, "author": "bo",
         "message": "<undo>", "unix_ms": 0,
         "added": {"count": 0}, "changed": {"count": 2}, "removed": {"count": 1},
         "rollout": "soaking"},
        {"revision": 7, "kind": "direct write",
         "added": {"count": 1}, "changed": {"count": 0}, "removed": {"count": 0}},
    ]);
    let replicas = [
        // A gated rollout: the stable state at 7 (not behind), its canaries at 9.
        replica("this replica", 7, Some(9)),
        // A peer that loaded at a later revision than the last change: it serves 9.
        replica("10.0.0.2:18000", 11, None),
        // A peer that refused 9: behind.
        replica("10.0.0.3:<18000>", 8, None),
    ];
    let mut out = String::new();
    history_section(&mut out, Ok(rows), &replicas);
    assert!(out.contains("rollback to 7: &lt;undo&gt;"), "{out}");
    assert!(
        out.contains(
            "+0 ~2 -1</td><td>soaking</td><td><span class=\"served\">this replica: canaries</span>, \
             <span class=\"served\">10.0.0.2:18000</span></td>"
        ),
        "{out}"
    );
    assert!(out.contains("<td>direct write</td>"), "{out}");
    assert!(
        out.contains(
            "+1 ~0 -0</td><td></td><td><span class=\"served\">this replica</span>, \
             <span class=\"served STALE\">10.0.0.3:&lt;18000&gt; (behind)</span></td>"
        ),
        "{out}"
    );
    assert!(out.contains("<table id=\"replicas\">"), "{out}");
    assert!(
        out.contains("change 7: behind, the latest change is 9"),
        "{out}"
    );
    let mut failed = String::new();
    history_section(&mut failed, Err("etcd <down>".into()), &replicas);
    assert!(failed.contains("etcd &lt;down&gt;"), "{failed}");
    assert_eq!(age(59), "59s");
    assert_eq!(age(3 * 3600 + 5), "3h");
}

#[test]
fn leds_collections_are_one_node_each_with_their_members_counted_never_missing() {
    use envoy_types::pb::envoy::config::core::v3::{
        config_source, AggregatedConfigSource, ConfigSource,
    };
    use envoy_types::pb::envoy::config::endpoint::v3::locality_lb_endpoints::LbConfig;
    use envoy_types::pb::envoy::config::endpoint::v3::{
        ClusterLoadAssignment, LbEndpoint, LedsClusterLocalityConfig, LocalityLbEndpoints,
    };
    use prost::Message;
    use xdsd_core::{ResourceInput, Store};
    const LB: &str = "xdstp://xdsd.example/envoy.config.endpoint.v3.LbEndpoint";
    let cla = |cluster: &str| {
        let value = ClusterLoadAssignment {
            cluster_name: cluster.into(),
            endpoints: vec![LocalityLbEndpoints {
                lb_config: Some(LbConfig::LedsClusterLocalityConfig(
                    LedsClusterLocalityConfig {
                        leds_config: Some(ConfigSource {
                            config_source_specifier: Some(
                                config_source::ConfigSourceSpecifier::Ads(
                                    AggregatedConfigSource {},
                                ),
                            ),
                            ..Default::default()
                        }),
                        leds_collection_name: format!("{LB}/{cluster}/*"),
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        };
        ResourceInput::new(
            types::CLUSTER_LOAD_ASSIGNMENT,
            cluster,
            value.encode_to_vec().into(),
        )
    };
    let member = |name: String| {
        ResourceInput::new(
            types::LB_ENDPOINT,
            name,
            LbEndpoint::default().encode_to_vec().into(),
        )
    };
    let store = Store::new();
    store
        .replace_all([
            // "full" has two members, "empty" none; "stray" is a collection nothing refers to.
            cla("full"),
            cla("empty"),
            member(format!("{LB}/full/ep1")),
            member(format!("{LB}/full/ep2")),
            member(format!("{LB}/stray/ep1")),
        ])
        .unwrap();
    let mut out = String::new();
    graph(&mut out, &store.snapshot());
    let node = |glob: &str| {
        let title = format!("<title>{}", escape(glob));
        out.split("<g class=")
            .find(|g| g.contains(&title))
            .unwrap_or_else(|| panic!("a node for {glob}: {out}"))
            .to_owned()
    };
    let full = node(&format!("{LB}/full/*"));
    assert!(
        full.starts_with("\"resource\" data-type=\"LEDS\""),
        "{full}"
    );
    assert!(full.contains("full/* 2 members"), "{full}");
    assert!(
        full.contains(">full/*</text>"),
        "the label is the id: {full}"
    );
    let empty = node(&format!("{LB}/empty/*"));
    assert!(empty.starts_with("\"resource\" "), "not missing: {empty}");
    assert!(empty.contains("0 members"), "{empty}");
    let stray = node(&format!("{LB}/stray/*"));
    assert!(stray.starts_with("\"resource unused\""), "{stray}");
    assert!(!out.contains("resource missing"), "{out}");
    // No member is a node of its own.
    assert!(!out.contains("full/ep1"), "{out}");
    assert!(out.contains(">LEDS</text>"), "the column's title: {out}");
}
