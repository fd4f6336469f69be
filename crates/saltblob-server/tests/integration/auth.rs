//! Authentication: SigV4 headers and presigned URLs (s3s checks them with our secrets), wrong and unknown keys,
//! anonymous access only to the buckets that allow reads.

use std::time::{Duration, SystemTime};

use crate::client::Client;
use crate::{StoreKind, TestServer};

#[tokio::test]
async fn wrong_secrets_unknown_keys_and_anonymous_requests_are_refused() {
    let s = TestServer::with_bucket("bkt").await;
    assert_eq!(
        s.client.put("/bkt/k", &b"secret data"[..]).await.status,
        200
    );
    let wrong = Client {
        secret: "not-the-secret".to_owned(),
        ..s.client.clone()
    };
    for r in [
        wrong.get("/bkt/k").await,
        wrong.put("/bkt/k2", &b"x"[..]).await,
    ] {
        assert_eq!(
            (r.status, r.code().as_str()),
            (403, "SignatureDoesNotMatch"),
            "{}",
            r.text()
        );
    }
    let unknown = Client {
        access_key: "AKIDNOBODY".to_owned(),
        ..s.client.clone()
    };
    let r = unknown.get("/bkt/k").await;
    assert_eq!((r.status, r.code().as_str()), (403, "InvalidAccessKeyId"));
    let r = s.client.call("GET", "/bkt/k").anonymous().send().await;
    assert_eq!((r.status, r.code().as_str()), (403, "AccessDenied"));
    assert!(!r.text().contains("secret data"));
    assert_eq!(
        s.client.get("/bkt/k2").await.status,
        404,
        "the refused put stored nothing"
    );
}

#[tokio::test]
async fn anonymous_reads_only_where_allowed() {
    let s = TestServer::start_with(StoreKind::Memory, |c| c.with_anonymous_read("public")).await;
    let c = &s.client;
    for bucket in ["/public", "/private"] {
        assert_eq!(c.call("PUT", bucket).send().await.status, 200);
        assert_eq!(c.put(&format!("{bucket}/k"), &b"v"[..]).await.status, 200);
    }
    let r = c.call("GET", "/public/k").anonymous().send().await;
    assert_eq!((r.status, r.body.as_ref()), (200, &b"v"[..]));
    assert_eq!(
        c.call("HEAD", "/public/k").anonymous().send().await.status,
        200
    );
    let r = c
        .call("GET", "/public")
        .query("list-type", "2")
        .anonymous()
        .send()
        .await;
    assert_eq!(r.status, 200);
    for r in [
        c.call("PUT", "/public/new")
            .body(&b"x"[..])
            .anonymous()
            .send()
            .await,
        c.call("DELETE", "/public/k").anonymous().send().await,
        c.call("GET", "/private/k").anonymous().send().await,
        c.call("GET", "/").anonymous().send().await,
    ] {
        assert_eq!((r.status, r.code().as_str()), (403, "AccessDenied"));
    }
    assert_eq!(
        c.get("/public/k").await.status,
        200,
        "the refused delete changed nothing"
    );
}

#[tokio::test]
async fn presigned_urls_work_until_they_expire() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    assert_eq!(c.put("/bkt/shared", &b"shared bytes"[..]).await.status, 200);
    let fetch = async |url: String| {
        let request = http::Request::get(url)
            .header("host", c.addr.to_string())
            .body(http_body_util::BodyExt::boxed(http_body_util::Full::new(
                bytes::Bytes::new(),
            )))
            .expect("request");
        crate::client::send_raw(c.addr, request).await
    };
    let url = c.presign_get("/bkt/shared", SystemTime::now(), Duration::from_secs(300));
    let r = fetch(url.clone()).await;
    assert_eq!(
        (r.status, r.body.as_ref()),
        (200, &b"shared bytes"[..]),
        "{}",
        r.text()
    );

    let tampered = url.replace("/bkt/shared", "/bkt/other");
    let r = fetch(tampered).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (403, "SignatureDoesNotMatch")
    );

    let expired = c.presign_get(
        "/bkt/shared",
        SystemTime::now() - Duration::from_secs(3600),
        Duration::from_secs(60),
    );
    let r = fetch(expired).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (403, "AccessDenied"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn the_server_refuses_to_start_without_access_keys() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let store = saltblob::open("memory://", saltblob::StoreConfig::default())
        .await
        .expect("store");
    let config = saltblob_server::ServerConfig::new(Vec::new());
    let err = saltblob_server::run(listener, config, store, std::future::pending())
        .await
        .expect_err("no keys");
    assert!(err.to_string().contains("no access key"), "{err}");
}
