//! Make-before-break with a real Envoy 1.40 under continuous traffic (spec "Eventual consistency
//! considerations"). Envoy takes everything over ADS (SotW or delta): listener `listener_0`
//! (LDS) → route configuration `r` (RDS) → EDS cluster `x` → endpoints (EDS) at upstream X.
//! While a request loop runs through Envoy's listener, one directory change (one file renamed
//! into place) adds EDS cluster `y` with endpoints at upstream Y, points `r` at `y` and removes
//! `x`. The loop runs until Envoy's config dump shows `r` on `y` and `x` gone, and a little
//! longer.
//!
//! With make-before-break on (the default), no request fails, and traffic moved to Y. With
//! `--make-before-break off` the same switch runs, and what makes requests fail is asserted: the
//! route to `y` goes out before `y`'s endpoints (xdsd's pushes, from its log), so Envoy routes to a
//! cluster still warming. How many requests fail in that window is a figure, printed, not
//! asserted: it depends on timing (a few ms; 15 to 95 requests in runs on a 2-core machine).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

use crate::support::scenario::{
    dynamic_bootstrap, eds_cluster_yaml, endpoints_yaml, listener_yaml, route_yaml, Transport,
};
use crate::support::{unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, DEADLINE};

/// Requests in flight at any time: one connection (kept alive) per worker.
const WORKERS: usize = 4;
/// A request that takes longer than this counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Traffic before the switch, and after Envoy's config dump shows it done.
const SETTLE: Duration = Duration::from_secs(1);

/// The four Envoy runs share two cores with each other's load: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The file holding the route, the clusters and their endpoints: the switch rewrites it whole.
const SERVICES: &str = "services.yaml";

/// Route `r` → EDS cluster `cluster` with endpoints at 127.0.0.1:`port`, as one file.
fn services(transport: Transport, cluster: &str, port: u16) -> String {
    [
        route_yaml("r", cluster),
        eds_cluster_yaml(cluster, transport),
        endpoints_yaml(cluster, port),
    ]
    .join("---\n")
}

// ---------------------------------------------------------------------------------------------
// The request loop
// ---------------------------------------------------------------------------------------------

/// What the request loop saw.
#[derive(Default)]
struct Tally {
    /// 200s from upstream X, from upstream Y.
    ok_x: AtomicUsize,
    ok_y: AtomicUsize,
    /// Requests that did not get a 200 from X or Y: another status, another body, a connection
    /// error or no answer within [`REQUEST_TIMEOUT`].
    failed: AtomicUsize,
    /// The failures by kind ("503 \"\"", "connect: ..."): how many, and when the first and the
    /// last ended, relative to the switch.
    kinds: Mutex<BTreeMap<String, (usize, Duration, Duration)>>,
}

impl Tally {
    fn total(&self) -> usize {
        self.ok_x.load(Ordering::SeqCst)
            + self.ok_y.load(Ordering::SeqCst)
            + self.failed.load(Ordering::SeqCst)
    }

    fn fail(&self, kind: String, since_switch: Duration) {
        self.failed.fetch_add(1, Ordering::SeqCst);
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let entry = kinds.entry(kind).or_insert((0, since_switch, since_switch));
        entry.0 += 1;
        entry.2 = since_switch;
    }

    /// One line per kind of failure.
    fn kinds(&self) -> Vec<String> {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds
            .iter()
            .map(|(kind, (n, first, last))| {
                format!("{n} x {kind}, from {first:.1?} to {last:.1?} after the switch")
            })
            .collect()
    }
}

/// `WORKERS` tasks sending `GET /` to 127.0.0.1:`port` back to back until stopped.
struct RequestLoop {
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
    /// When the switch was written (failures are timed from it).
    switch_at: Arc<Mutex<Option<Instant>>>,
}

impl RequestLoop {
    fn start(port: u16) -> RequestLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let switch_at = Arc::new(Mutex::new(None));
        let workers = (0..WORKERS)
            .map(|_| tokio::spawn(worker(port, stop.clone(), tally.clone(), switch_at.clone())))
            .collect();
        RequestLoop {
            stop,
            tally,
            workers,
            started: Instant::now(),
            switch_at,
        }
    }

    fn mark_switch(&self) {
        *self.switch_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// Stops the workers after their request in flight and returns the tally and how long the
    /// loop ran.
    async fn stop(mut self) -> (Arc<Tally>, Duration) {
        self.stop.store(true, Ordering::SeqCst);
        for w in std::mem::take(&mut self.workers) {
            w.await.expect("a request worker panicked");
        }
        (self.tally.clone(), self.started.elapsed())
    }
}

impl Drop for RequestLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in &self.workers {
            w.abort();
        }
    }
}

async fn worker(
    port: u16,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    switch_at: Arc<Mutex<Option<Instant>>>,
) {
    let mut conn = None;
    while !stop.load(Ordering::SeqCst) {
        let outcome = timeout(REQUEST_TIMEOUT, request(&mut conn, port))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {REQUEST_TIMEOUT:?}")));
        let failure = match outcome {
            Ok((200, body)) if body == "upstream-x" => {
                tally.ok_x.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            Ok((200, body)) if body == "upstream-y" => {
                tally.ok_y.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            Ok((status, body)) => format!("{status} {body:?}"),
            Err(e) => {
                conn = None;
                e
            }
        };
        let switched = *switch_at.lock().unwrap_or_else(|e| e.into_inner());
        match switched {
            Some(t) => tally.fail(failure, t.elapsed()),
            None => tally.fail(format!("{failure} (before the switch)"), Duration::ZERO),
        }
    }
}

/// One `GET /` on the worker's kept-alive connection (opened first if need be): the status and
/// body. The connection is dropped when Envoy says it closes it.
async fn request(
    conn: &mut Option<BufReader<TcpStream>>,
    port: u16,
) -> Result<(u16, String), String> {
    if conn.is_none() {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        *conn = Some(BufReader::new(stream));
    }
    let stream = conn.as_mut().expect("connected above");
    stream
        .get_mut()
        .write_all(b"GET / HTTP/1.1\r\nhost: example.test\r\n\r\n")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut status = None;
    let mut length = None;
    let mut close = false;
    loop {
        let mut line = String::new();
        let n = stream
            .read_line(&mut line)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed before a response".to_string());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if status.is_none() {
            status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok());
            continue;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        } else if lower.starts_with("connection:") && lower.contains("close") {
            close = true;
        }
    }
    let status = status.ok_or("no status line")?;
    let length = length.ok_or("a response without content-length")?;
    let mut body = vec![0; length];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|e| format!("read body: {e}"))?;
    if close {
        *conn = None;
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

// ---------------------------------------------------------------------------------------------
// Envoy's view
// ---------------------------------------------------------------------------------------------

/// What Envoy's config dump says about the switch.
#[derive(Debug, PartialEq, Eq)]
struct View {
    /// The cluster of route configuration `r`.
    route: Option<String>,
    /// Dynamic clusters, active and warming (sorted).
    active: Vec<String>,
    warming: Vec<String>,
}

async fn view(envoy: &Envoy) -> View {
    let dump = envoy.config_dump().await;
    let json: Value = serde_json::from_str(&dump).unwrap_or(Value::Null);
    let mut view = View {
        route: None,
        active: Vec::new(),
        warming: Vec::new(),
    };
    for config in json["configs"].as_array().into_iter().flatten() {
        for rc in config["dynamic_route_configs"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if rc["route_config"]["name"] == "r" {
                view.route = rc
                    .pointer("/route_config/virtual_hosts/0/routes/0/route/cluster")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
        }
        for (key, names) in [
            ("dynamic_active_clusters", &mut view.active),
            ("dynamic_warming_clusters", &mut view.warming),
        ] {
            for c in config[key].as_array().into_iter().flatten() {
                if let Some(n) = c["cluster"]["name"].as_str() {
                    names.push(n.to_owned());
                }
            }
            names.sort();
        }
    }
    view
}

/// Polls the config dump until `pred` holds; panics with the last view after [`DEADLINE`].
async fn wait_view(envoy: &Envoy, what: &str, pred: impl Fn(&View) -> bool) -> View {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let v = view(envoy).await;
        if pred(&v) {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("{what}: Envoy's config dump after {DEADLINE:?}: {v:?}");
        }
        sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The scenario
// ---------------------------------------------------------------------------------------------

/// What one run of the switch measured.
struct Outcome {
    requests: usize,
    failed: usize,
    ok_x: usize,
    ok_y: usize,
    /// From writing the switch to the config dump showing it done.
    switch_took: Duration,
    traffic: Duration,
    /// One line per kind of failure.
    failures: Vec<String>,
    /// Envoy's count of requests whose route named a cluster it did not have (active).
    no_cluster: u64,
    /// xdsd's pushes to Envoy after the switch: type(+resources -removed). SotW has no removed
    /// names: a cluster removed shows as a smaller full state of clusters.
    pushes: Vec<String>,
}

async fn switch_under_traffic(transport: Transport, make_before_break: bool) -> Outcome {
    let _one = ONE_AT_A_TIME.lock().await;
    let upstream_x = Upstream::start("upstream-x").await;
    let upstream_y = Upstream::start("upstream-y").await;

    let dir = ResourceDir::new();
    dir.write(
        "listener.yaml",
        &listener_yaml("listener_0", "r", transport),
    );
    dir.write(SERVICES, &services(transport, "x", upstream_x.port));
    let mode = if make_before_break { "on" } else { "off" };
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &["--log-level", "debug", "--make-before-break", mode],
    )
    .await;
    xdsd.expect_loaded_since(0).await;
    // The warning comes after the first load: waited for when it is due.
    if !make_before_break {
        xdsd.log
            .expect_line_since(0, &["make-before-break ordering is off"], "the warning")
            .await;
    }
    let off_warning = xdsd
        .log
        .matching_since(0, |l| l.contains("make-before-break ordering is off"));
    assert_eq!(
        off_warning.len(),
        usize::from(!make_before_break),
        "xdsd warns when (and only when) ordering is off: {off_warning:?}"
    );

    let envoy = Envoy::start(&dynamic_bootstrap(
        &unique_name("mbb"),
        xdsd.port,
        transport,
    ))
    .await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-x", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    let before = view(&envoy).await;
    assert_eq!(
        (before.route.as_deref(), before.active.as_slice()),
        (Some("x"), ["x".to_string()].as_slice()),
        "before the switch: {before:?}"
    );

    // Traffic to X, then the switch in one rename, then traffic until Envoy shows it done.
    let requests = RequestLoop::start(port);
    sleep(SETTLE).await;
    assert!(
        requests.tally.total() > 0,
        "the request loop is running before the switch"
    );
    let mark = xdsd.log.mark();
    requests.mark_switch();
    let switched_at = Instant::now();
    dir.write(SERVICES, &services(transport, "y", upstream_y.port));
    let after = wait_view(&envoy, "route r on y and cluster x gone", |v| {
        v.route.as_deref() == Some("y") && v.active == ["y"] && v.warming.is_empty()
    })
    .await;
    let switch_took = switched_at.elapsed();
    sleep(SETTLE).await;
    let (tally, traffic) = requests.stop().await;

    let loads = xdsd
        .log
        .matching_since(mark, |l| l.contains("resources loaded"));
    assert_eq!(
        loads.len(),
        1,
        "the switch is one directory change, loaded once: {loads:?}"
    );
    assert!(
        upstream_y.hits() > 0,
        "requests reached upstream Y after the switch: {after:?}"
    );
    let pushes = xdsd
        .log
        .matching_since(mark, |l| {
            l.contains(" push ") && crate::support::log_field(l, "type_url").is_some()
        })
        .iter()
        .map(|l| {
            let field = |k| crate::support::log_field(l, k).unwrap_or("?");
            let type_url = field("type_url");
            let short = type_url.rsplit('.').next().unwrap_or(type_url);
            format!("{short}(+{} -{})", field("resources"), field("removed"))
        })
        .collect();
    Outcome {
        requests: tally.total(),
        failed: tally.failed.load(Ordering::SeqCst),
        ok_x: tally.ok_x.load(Ordering::SeqCst),
        ok_y: tally.ok_y.load(Ordering::SeqCst),
        switch_took,
        traffic,
        failures: tally.kinds(),
        no_cluster: envoy
            .stat("http.ingress_listener_0.no_cluster")
            .await
            .unwrap_or(0),
        pushes,
    }
}

fn report(transport: Transport, make_before_break: bool, o: &Outcome) {
    eprintln!(
        "{transport:?}, make-before-break {}: {} of {} requests failed ({} to X, {} to Y; {:.0} \
         requests/s for {:.1?}; Envoy's no_cluster: {}); Envoy showed the switch {:.0?} after it \
         was written; pushes after the switch: {}",
        if make_before_break { "on" } else { "off" },
        o.failed,
        o.requests,
        o.ok_x,
        o.ok_y,
        o.requests as f64 / o.traffic.as_secs_f64(),
        o.traffic,
        o.no_cluster,
        o.switch_took,
        o.pushes.join(" ")
    );
    for f in &o.failures {
        eprintln!("  failed: {f}");
    }
}

async fn must_lose_nothing(transport: Transport) {
    let o = switch_under_traffic(transport, true).await;
    report(transport, true, &o);
    assert_eq!(
        o.failed, 0,
        "{transport:?}: requests failed during the switch with make-before-break on: {:?}",
        o.failures
    );
    assert!(o.ok_x > 0 && o.ok_y > 0, "traffic went to X, then to Y");
    assert!(
        !route_before_endpoints(&o.pushes),
        "{transport:?}: with make-before-break the route to y waits for y's endpoints; pushes \
         after the switch: {:?}",
        o.pushes
    );
}

/// Whether a push of endpoints (a `ClusterLoadAssignment` carrying resources) follows the push
/// of the route: the route then went out before the endpoints of the cluster it points at.
fn route_before_endpoints(pushes: &[String]) -> bool {
    let Some(route) = pushes
        .iter()
        .position(|p| p.starts_with("RouteConfiguration("))
    else {
        return false;
    };
    pushes[route..].iter().any(|p| {
        p.starts_with("ClusterLoadAssignment(+") && !p.starts_with("ClusterLoadAssignment(+0 ")
    })
}

async fn route_goes_before_its_endpoints(transport: Transport) {
    let o = switch_under_traffic(transport, false).await;
    report(transport, false, &o);
    assert!(o.ok_x > 0 && o.ok_y > 0, "traffic went to X, then to Y");
    assert!(
        route_before_endpoints(&o.pushes),
        "{transport:?}: without make-before-break the route to y goes out before y's endpoints \
         (Envoy then routes to a warming cluster); pushes after the switch: {:?}",
        o.pushes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_clusters_under_traffic_loses_no_request_with_make_before_break_sotw() {
    must_lose_nothing(Transport::Ads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_clusters_under_traffic_loses_no_request_with_make_before_break_delta() {
    must_lose_nothing(Transport::DeltaAds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_clusters_under_traffic_without_make_before_break_sends_the_route_before_its_endpoints_sotw(
) {
    route_goes_before_its_endpoints(Transport::Ads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_clusters_under_traffic_without_make_before_break_sends_the_route_before_its_endpoints_delta(
) {
    route_goes_before_its_endpoints(Transport::DeltaAds).await;
}
