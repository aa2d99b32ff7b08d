//! etcd users: the right password reads, a wrong one and a user without permission are refused
//! with messages that say so.

use xdsd_etcd::{load, EtcdError};

use xdsd_testsupport::etcd::{options, Etcd};

#[tokio::test]
async fn a_user_is_authenticated_and_refusals_say_what_was_refused() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    client.put("/a/x.yaml", "x", None).await.expect("put");
    client
        .user_add("root", "root-pw", None)
        .await
        .expect("user add");
    client.role_add("root").await.expect("role add");
    client.user_grant_role("root", "root").await.expect("grant");
    client
        .user_add("nobody", "nobody-pw", None)
        .await
        .expect("user add");
    client.auth_enable().await.expect("auth enable");

    let endpoint = etcd.endpoint();
    let (_source, snapshot) = load(&options(&endpoint, "/a/").with_user("root", "root-pw"))
        .await
        .expect("load as root");
    assert_eq!(snapshot.entries.len(), 1);

    let error = load(&options(&endpoint, "/a/").with_user("root", "wrong"))
        .await
        .expect_err("a wrong password");
    assert!(matches!(error, EtcdError::Auth { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&endpoint) && message.contains("authentication as user root"),
        "{message}"
    );
    assert!(
        !message.contains("wrong"),
        "the password is in the message: {message}"
    );

    let error = load(&options(&endpoint, "/a/").with_user("nobody", "nobody-pw"))
        .await
        .expect_err("no permission");
    assert!(matches!(error, EtcdError::Auth { .. }), "{error:?}");
    assert!(error.to_string().contains("reading prefix /a/"), "{error}");
}
