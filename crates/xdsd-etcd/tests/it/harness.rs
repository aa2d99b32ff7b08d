//! The test etcd itself: a port taken between the OS calling it free and etcd binding it is not
//! a failed test.

use std::time::Duration;

use xdsd_testsupport::etcd::{put, Etcd};

#[tokio::test]
async fn an_etcd_restart_whose_port_is_taken_for_a_moment_starts_once_it_is_free() {
    let mut etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/h/a", "kept").await;
    drop(client);
    etcd.kill().await;

    // Something else holds the client port (as a connection's local port can) for a moment.
    let taken = std::net::TcpListener::bind(("127.0.0.1", etcd.client_port))
        .expect("the killed etcd's port is free to take");
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        drop(taken);
    });
    etcd.restart().await;
    release.await.expect("the port released");
    assert!(
        etcd.log_text().contains("address already in use"),
        "the first start met the port taken:\n{}",
        etcd.log_text()
    );

    let mut client = etcd.client().await;
    let got = client.get("/h/a", None).await.expect("get");
    assert_eq!(got.kvs()[0].value(), b"kept", "the same data directory");
}
