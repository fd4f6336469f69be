//! Authentication: SigV4 headers and presigned URLs (s3s checks them with our secrets), wrong and unknown keys,
//! anonymous access only to the buckets that allow reads or listings, keys replaced while serving; and the
//! refusals of `guard.rs`, each with a correctly signed request (SigV2, presigned bounds, unpinned scopes,
//! version ids, encryption, object lock, ACL and tagging headers), that nothing refused is stored, and the
//! request id on every response.

use std::time::{Duration, SystemTime};

use crate::client::Client;
use crate::forge::{self, Body, Forged};
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

/// Anonymous reads only on the buckets of `--anonymous-read`, anonymous listings only on those of
/// `--anonymous-list` (a public-read bucket is not listable: audit F9).
#[tokio::test]
async fn anonymous_reads_and_listings_only_where_allowed() {
    let s = TestServer::start_with(StoreKind::Memory, |c| {
        c.with_anonymous_read("public")
            .with_anonymous_list("listed")
    })
    .await;
    let c = &s.client;
    for bucket in ["/public", "/private", "/listed"] {
        assert_eq!(c.call("PUT", bucket).send().await.status, 200);
        assert_eq!(c.put(&format!("{bucket}/k"), &b"v"[..]).await.status, 200);
    }
    let r = c.call("GET", "/public/k").anonymous().send().await;
    assert_eq!((r.status, r.body.as_ref()), (200, &b"v"[..]));
    assert_eq!(
        c.call("HEAD", "/public/k").anonymous().send().await.status,
        200
    );
    for bucket in ["/public", "/listed"] {
        assert_eq!(c.call("HEAD", bucket).anonymous().send().await.status, 200);
    }
    let r = c
        .call("GET", "/listed")
        .query("list-type", "2")
        .anonymous()
        .send()
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.xml("Key"), ["k"]);
    for r in [
        c.call("PUT", "/public/new")
            .body(&b"x"[..])
            .anonymous()
            .send()
            .await,
        c.call("DELETE", "/public/k").anonymous().send().await,
        c.call("GET", "/private/k").anonymous().send().await,
        c.call("GET", "/").anonymous().send().await,
        c.call("GET", "/public")
            .query("list-type", "2")
            .anonymous()
            .send()
            .await,
        c.call("GET", "/public").anonymous().send().await,
        c.call("GET", "/listed/k").anonymous().send().await,
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

/// Sends `request` and waits at most [`forge::PROMPT`] for the answer.
async fn answer(
    s: &TestServer,
    request: http::Request<
        http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>,
    >,
) -> crate::client::Reply {
    tokio::time::timeout(
        forge::PROMPT,
        crate::client::send_raw(s.client.addr, request),
    )
    .await
    .expect("an answer at once")
}

/// A GET of `url` (path and query) with `headers`.
async fn fetch(s: &TestServer, url: &str, headers: &[(&str, String)]) -> crate::client::Reply {
    let mut all: Vec<(String, String)> = vec![("host".to_owned(), s.client.addr.to_string())];
    all.extend(headers.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    answer(
        s,
        forge::raw_request("GET", url, &all, Body::Bytes(bytes::Bytes::new())),
    )
    .await
}

fn is_error(r: &crate::client::Reply, status: u16, code: &str) {
    assert_eq!(
        (r.status, r.code().as_str()),
        (status, code),
        "{}",
        r.text()
    );
    let id = r.header("x-amz-request-id");
    assert_eq!(id.len(), 16, "x-amz-request-id: {:?}", r.headers);
    assert_eq!(r.xml("RequestId"), [id.to_owned()], "{}", r.text());
    assert!(!r.text().contains("s3/"), "an internal key in {}", r.text());
}

/// Signature Version 2, correctly signed, is refused in every form: with a 2004 date (a replay), as a URL
/// presigned to the year 2100, as a POST form. Nothing is stored. (Each was accepted before: audit F1.)
#[tokio::test]
async fn signature_version_2_is_refused_in_every_form() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    assert_eq!(c.put("/bkt/k", &b"v"[..]).await.status, 200);
    let date = "Thu, 01 Jan 2004 00:00:00 GMT".to_owned();
    for (method, path) in [("GET", "/bkt/k"), ("PUT", "/bkt/v2"), ("DELETE", "/bkt/k")] {
        let headers = vec![
            ("host".to_owned(), c.addr.to_string()),
            ("date".to_owned(), date.clone()),
            (
                "authorization".to_owned(),
                forge::sigv2_header(c, method, path, &date),
            ),
            ("content-length".to_owned(), "0".to_owned()),
        ];
        let r = answer(
            &s,
            forge::raw_request(method, path, &headers, Body::Bytes(bytes::Bytes::new())),
        )
        .await;
        is_error(&r, 400, "InvalidRequest");
        assert!(
            r.text().contains("Please use AWS4-HMAC-SHA256"),
            "{}",
            r.text()
        );
    }
    let r = fetch(&s, &forge::sigv2_presign(c, "/bkt/k", 4_102_444_800), &[]).await;
    is_error(&r, 400, "InvalidRequest");
    // A POST form is answered before its body is read: the body here never comes.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let headers = vec![
        ("host".to_owned(), c.addr.to_string()),
        (
            "content-type".to_owned(),
            "multipart/form-data; boundary=xyz".to_owned(),
        ),
        ("content-length".to_owned(), (10 << 20).to_string()),
    ];
    let r = answer(
        &s,
        forge::raw_request("POST", "/bkt", &headers, Body::Stream(rx)),
    )
    .await;
    is_error(&r, 501, "NotImplemented");
    drop(tx);
    assert_eq!(
        c.get("/bkt/v2").await.status,
        404,
        "the SigV2 PUT stored nothing"
    );
    assert_eq!(
        c.get("/bkt/k").await.status,
        200,
        "the SigV2 DELETE deleted nothing"
    );
}

/// Presigned URLs, correctly signed, are refused outside AWS's bounds: X-Amz-Expires not in 1..=604800 (0,
/// negative, 604801, u32::MAX, not a number; F3), a scope for another service than `s3`, `host` not signed
/// (F18); a URL within the bounds works.
#[tokio::test]
async fn presigned_urls_out_of_bounds_are_refused() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    assert_eq!(c.put("/bkt/k", &b"shared"[..]).await.status, 200);
    let host = [("host", c.addr.to_string())];
    let url = forge::presign(c, "GET", "/bkt/k", "604800", "s3", &host, &[]);
    let r = fetch(&s, &url, &[]).await;
    assert_eq!(
        (r.status, r.body.as_ref()),
        (200, &b"shared"[..]),
        "{}",
        r.text()
    );
    for expires in ["604801", "609901", "4294967295", "0", "-7", "soon"] {
        let url = forge::presign(c, "GET", "/bkt/k", expires, "s3", &host, &[]);
        is_error(
            &fetch(&s, &url, &[]).await,
            403,
            "AuthorizationQueryParametersError",
        );
    }
    let sts = forge::presign(c, "GET", "/bkt/k", "60", "sts", &host, &[]);
    is_error(
        &fetch(&s, &sts, &[]).await,
        403,
        "AuthorizationQueryParametersError",
    );
    let other = [("x-amz-meta-probe", "1".to_owned())];
    let unsigned_host = forge::presign(c, "GET", "/bkt/k", "60", "s3", &other, &[]);
    let r = fetch(&s, &unsigned_host, &[("x-amz-meta-probe", "1".to_owned())]).await;
    is_error(&r, 403, "AuthorizationQueryParametersError");
}

/// SigV4 header authentication, correctly signed, is refused when its scope names another service or when
/// `host` or `x-amz-date` is not among the signed headers (F18).
#[tokio::test]
async fn header_signatures_must_pin_the_service_host_and_date() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    assert_eq!(c.put("/bkt/k", &b"v"[..]).await.status, 200);
    let ok = Forged::new(c, "GET", "/bkt/k");
    let r = answer(
        &s,
        ok.request(&ok.sign().headers, Body::Bytes(bytes::Bytes::new())),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut sts = Forged::new(c, "GET", "/bkt/k");
    sts.service = "sts";
    let mut no_host = Forged::new(c, "GET", "/bkt/k");
    no_host.unsigned = vec!["host"];
    let mut no_date = Forged::new(c, "DELETE", "/bkt/k");
    no_date.unsigned = vec!["x-amz-date"];
    for forged in [sts, no_host, no_date] {
        let r = answer(
            &s,
            forged.request(&forged.sign().headers, Body::Bytes(bytes::Bytes::new())),
        )
        .await;
        is_error(&r, 400, "AuthorizationHeaderMalformed");
    }
    assert_eq!(
        c.get("/bkt/k").await.status,
        200,
        "the refused DELETE deleted nothing"
    );
}

/// `versionId` other than `null` is refused on GET, HEAD and DELETE (objects have no versions); `null` is the
/// current object. A DELETE with a version id deletes nothing (F7).
#[tokio::test]
async fn version_ids_other_than_null_are_refused() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    assert_eq!(c.put("/bkt/k", &b"live"[..]).await.status, 200);
    for method in ["GET", "HEAD", "DELETE"] {
        let r = c
            .call(method, "/bkt/k")
            .query("versionId", "3HL4kqtJlcpXroDTDmJ")
            .send()
            .await;
        assert_eq!(r.status, 400, "{method}: {}", r.text());
        if method != "HEAD" {
            is_error(&r, 400, "InvalidArgument");
        }
    }
    let r = c
        .call("GET", "/bkt/k")
        .query("versionId", "null")
        .send()
        .await;
    assert_eq!((r.status, r.body.as_ref()), (200, &b"live"[..]));
}

/// Every header that asks for a feature saltblob does not have is refused with AWS's error, and nothing is
/// stored: server-side encryption with an encryption context, object lock, tagging (501 NotImplemented, naming
/// the header), ACLs other than the canned ones kept (400 AccessControlListNotSupported); SSE-S3 and SSE-KMS on a store
/// without a key provider (501 NotImplemented, from the handler; a key id without `aws:kms` 400
/// InvalidArgument); SSE-C on a server without TLS (400 InvalidRequest, as AWS over plain HTTP). A presigned URL
/// carrying an SSE-C parameter is refused too (501). (Before, each was stored and the header dropped: F2.)
#[tokio::test]
async fn feature_headers_are_refused_and_nothing_is_stored() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    for (name, value, status, code) in [
        (
            "x-amz-server-side-encryption",
            "AES256",
            501,
            "NotImplemented",
        ),
        (
            "x-amz-server-side-encryption",
            "aws:kms",
            501,
            "NotImplemented",
        ),
        (
            "x-amz-server-side-encryption-aws-kms-key-id",
            "key",
            400,
            "InvalidArgument",
        ),
    ] {
        let r = c
            .call("PUT", "/bkt/sse")
            .header(name, value)
            .body(&b"secret"[..])
            .send()
            .await;
        is_error(&r, status, code);
        assert_eq!(
            c.get("/bkt/sse").await.status,
            404,
            "{name}: nothing stored"
        );
    }
    let cases: &[(&str, &str, u16, &str)] = &[
        (
            "x-amz-server-side-encryption-context",
            "e30=",
            501,
            "NotImplemented",
        ),
        // SSE-C on a server without TLS (sse.rs: taken over TLS or with --sse-c-over-http).
        (
            "x-amz-server-side-encryption-customer-algorithm",
            "AES256",
            400,
            "InvalidRequest",
        ),
        (
            "x-amz-server-side-encryption-customer-key",
            "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
            400,
            "InvalidRequest",
        ),
        (
            "x-amz-object-lock-mode",
            "COMPLIANCE",
            501,
            "NotImplemented",
        ),
        (
            "x-amz-object-lock-retain-until-date",
            "2099-01-01T00:00:00Z",
            501,
            "NotImplemented",
        ),
        ("x-amz-object-lock-legal-hold", "ON", 501, "NotImplemented"),
        // A tag set refused (the system's keys): nothing stored either.
        ("x-amz-tagging", "aws:team=a", 400, "InvalidTag"),
        (
            "x-amz-acl",
            "log-delivery-write",
            400,
            "AccessControlListNotSupported",
        ),
        (
            "x-amz-grant-read",
            "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\"",
            400,
            "AccessControlListNotSupported",
        ),
    ];
    for (i, (name, value, status, code)) in cases.iter().enumerate() {
        let path = format!("/bkt/refused{i}");
        let r = c
            .call("PUT", &path)
            .header(name, value)
            .body(&b"secret"[..])
            .send()
            .await;
        is_error(&r, *status, code);
        if *code == "NotImplemented" {
            assert_eq!(r.xml("Header"), [(*name).to_owned()], "{}", r.text());
        }
        assert_eq!(c.get(&path).await.status, 404, "{name}: nothing stored");
    }
    for (name, value) in [
        ("x-amz-acl", "private"),
        ("x-amz-acl", "bucket-owner-full-control"),
    ] {
        assert_eq!(
            c.call("PUT", "/bkt/ok")
                .header(name, value)
                .body(&b"v"[..])
                .send()
                .await
                .status,
            200
        );
    }
    let r = c
        .call("PUT", "/locked")
        .header("x-amz-bucket-object-lock-enabled", "true")
        .send()
        .await;
    is_error(&r, 501, "NotImplemented");
    assert_eq!(
        c.call("HEAD", "/locked").send().await.status,
        404,
        "no bucket made"
    );
    let r = c
        .call("PUT", "/bkt/ok")
        .query("acl", "")
        .header("x-amz-acl", "aws-exec-read")
        .send()
        .await;
    is_error(&r, 400, "AccessControlListNotSupported");
    let host = [("host", c.addr.to_string())];
    let url = forge::presign(
        c,
        "GET",
        "/bkt/ok",
        "60",
        "s3",
        &host,
        &[("x-amz-server-side-encryption-customer-algorithm", "AES256")],
    );
    is_error(&fetch(&s, &url, &[]).await, 501, "NotImplemented");
}

/// Every response carries `x-amz-request-id`, and every error document (s3s's own included) its RequestId.
#[tokio::test]
async fn responses_carry_a_request_id() {
    let s = TestServer::with_bucket("bkt").await;
    let ok = s.client.put("/bkt/k", &b"v"[..]).await;
    assert_eq!(ok.header("x-amz-request-id").len(), 16);
    let missing = s.client.get("/bkt/missing").await;
    is_error(&missing, 404, "NoSuchKey");
    let wrong = Client {
        secret: "not-the-secret".to_owned(),
        ..s.client.clone()
    };
    let refused = wrong.get("/bkt/k").await;
    is_error(&refused, 403, "SignatureDoesNotMatch");
    assert_ne!(
        missing.header("x-amz-request-id"),
        refused.header("x-amz-request-id")
    );
}

/// The keys can be replaced while the server runs ([`saltblob_server::KeyRing::replace`], which `saltblob
/// serve` calls on SIGHUP): a removed key, and the URLs it presigned, stop working at once.
#[tokio::test]
async fn replaced_keys_take_effect_for_the_next_request() {
    let ring = std::sync::Arc::new(std::sync::Mutex::new(None));
    let keep = std::sync::Arc::clone(&ring);
    let s = TestServer::start_with(StoreKind::Memory, move |config| {
        *keep.lock().expect("lock") = Some(config.credentials.clone());
        config
    })
    .await;
    let ring = ring.lock().expect("lock").clone().expect("ring");
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    let url = s
        .client
        .presign_get("/bkt", SystemTime::now(), Duration::from_secs(300));
    assert_eq!(fetch(&s, &url, &[]).await.status, 200);
    ring.replace(&[saltblob_server::AccessKey::new("AKIDNEW", "new-secret")]);
    is_error(
        &s.client.call("PUT", "/bkt2").send().await,
        403,
        "InvalidAccessKeyId",
    );
    is_error(&fetch(&s, &url, &[]).await, 403, "InvalidAccessKeyId");
    let new = Client {
        access_key: "AKIDNEW".to_owned(),
        secret: "new-secret".to_owned(),
        ..s.client.clone()
    };
    assert_eq!(new.call("PUT", "/bkt2").send().await.status, 200);
}
