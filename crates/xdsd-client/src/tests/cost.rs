//! What the machine costs, counted deterministically: the heap allocations a step makes on this
//! thread (a counting global allocator for this test binary), at two sizes of what is held. A
//! step that scanned, rebuilt or copied what is held would allocate in proportion to it; a name
//! or a body copied more than once per resource shows as allocations per resource.
//! `examples/cost.rs` measures the same steps' CPU time and instructions (BENCHMARKS.md, stop 66).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::*;

/// The system allocator, counting this thread's allocations.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down has no counter left, and is not measured.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is passed to the system allocator unchanged; counting touches only a
// thread-local `Cell`, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// What `f` returns, and the allocations it made on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (out, ALLOCATIONS.with(Cell::get) - before)
}

fn name(i: usize) -> String {
    format!("cluster-{i:06}")
}

fn response(nonce: usize, items: impl Iterator<Item = (usize, u32)>) -> DeltaDiscoveryResponse {
    DeltaDiscoveryResponse {
        system_version_info: format!("v{nonce}"),
        type_url: CLUSTER_LOAD_ASSIGNMENT.to_owned(),
        nonce: format!("n{nonce}"),
        resources: items
            .map(|(i, port)| {
                let mut body = endpoints(&name(i));
                body.value.extend_from_slice(&port.to_le_bytes());
                wire(&name(i), &format!("{port}"), Some(body))
            })
            .collect(),
        ..Default::default()
    }
}

/// A delta client subscribed to `n` names by name and holding each, its load ACKed.
fn holding(n: usize) -> Pair {
    let mut pair = Pair::delta();
    pair.client.connected();
    let names: Vec<String> = (0..n).map(name).collect();
    pair.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, &names)
        .expect("within the limits");
    pair.requests();
    pair.delta_in(response(0, (0..n).map(|i| (i, 1))));
    pair.requests();
    assert_eq!(pair.names(CLUSTER_LOAD_ASSIGNMENT).len(), n, "{n} held");
    pair.events();
    pair
}

/// The allocations of a load of `n` names by name: taking the response in, its events read.
fn load(n: usize) -> u64 {
    let mut pair = Pair::delta();
    pair.client.connected();
    let names: Vec<String> = (0..n).map(name).collect();
    pair.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, &names)
        .expect("within the limits");
    pair.requests();
    pair.events();
    let r = response(0, (0..n).map(|i| (i, 1)));
    let (events, cost) = allocations(|| {
        pair.delta_in(r);
        std::iter::from_fn(|| pair.client.poll_event()).collect::<Vec<_>>()
    });
    assert_eq!(added_names(&events).len(), n, "the load reported");
    drop(events);
    cost
}

/// The allocations of one-resource updates with their ACKs, `n` names held.
fn updates(n: usize) -> u64 {
    let mut pair = holding(n);
    let batch: Vec<DeltaDiscoveryResponse> = (0..50)
        .map(|u| response(u + 1, std::iter::once(((u * 7) % n, 2 + u as u32))))
        .collect();
    let mut total = 0;
    for r in batch {
        let (event, cost) = allocations(|| {
            pair.delta_in(r);
            let event = pair.client.poll_event();
            let ack = pair.client.poll_request(pair.now);
            (event, ack)
        });
        assert!(matches!(event.0, Some(Event::Update(_))), "{event:?}");
        assert!(event.1.is_some(), "an ACK");
        total += cost;
    }
    total
}

/// The allocations of `k` subscriptions by name, each with its request, `n` names held.
fn subscriptions(n: usize, k: usize) -> u64 {
    let mut pair = holding(n);
    let extra: Vec<String> = (n..n + k).map(name).collect();
    let (_, cost) = allocations(|| {
        for e in &extra {
            pair.client
                .subscribe(CLUSTER_LOAD_ASSIGNMENT, [e])
                .expect("within the limits");
            let request = pair.client.poll_request(pair.now);
            assert!(request.is_some(), "a request");
        }
    });
    cost
}

#[test]
fn a_response_of_n_resources_costs_o_n() {
    let (small, large) = (load(1_000), load(8_000));
    // The tree's nodes grow with it, in steps: per resource, within a tenth of an allocation.
    let (per_small, per_large) = (small as f64 / 1_000.0, large as f64 / 8_000.0);
    assert!(
        (per_large - per_small).abs() < 0.1,
        "{per_small:.2} allocations per resource at 1,000, {per_large:.2} at 8,000"
    );
}

#[test]
fn a_resource_taken_in_is_copied_once_for_the_machine() {
    // Its type URL (the `Resource`'s own), and the copy the machine holds beside the one the
    // update hands out (type URL, name, version, the body and its type URL): 6; the box the
    // held set keeps it in (a pointer moved as the set grows, not the resource): 7; and the
    // set's table and the update's vector, amortized. The key it is held under is its own
    // name, not a copy.
    let per = load(8_000) as f64 / 8_000.0;
    eprintln!("{per:.2} allocations per resource taken in");
    assert!(per < 7.5, "{per:.2} allocations per resource taken in");
}

#[test]
fn a_one_resource_update_and_its_ack_cost_the_same_whatever_is_held() {
    assert_eq!(updates(100), updates(10_000));
}

#[test]
fn a_subscription_of_k_names_costs_o_k_whatever_is_held() {
    let (few, many) = (subscriptions(100, 200), subscriptions(10_000, 200));
    // The subscriptions' tree grows in nodes, at its own steps: within a few allocations.
    assert!(
        many <= few + 8,
        "200 subscriptions: {few} allocations with 100 names held, {many} with 10,000"
    );
    let double = subscriptions(100, 400);
    assert!(
        double <= 2 * few + 4,
        "400 subscriptions: {double} allocations, 200: {few}"
    );
}
