//! Bucket CORS: Put/Get/DeleteBucketCors, the answer to a browser's preflight (`OPTIONS`, unsigned), and the
//! `Access-Control-*` headers of the answers to its requests, whatever their status.

use crate::TestServer;
use crate::client::{Client, Reply};

/// A page of `https://app.example` may GET and PUT with `Content-Type` and `x-amz-*` headers and read the
/// ETag; any origin may HEAD.
const RULES: &str = "<CORSConfiguration>\
<CORSRule><ID>app</ID><AllowedOrigin>https://app.example</AllowedOrigin><AllowedMethod>GET</AllowedMethod>\
<AllowedMethod>PUT</AllowedMethod><AllowedHeader>content-type</AllowedHeader><AllowedHeader>x-amz-*</AllowedHeader>\
<ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>600</MaxAgeSeconds></CORSRule>\
<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>HEAD</AllowedMethod></CORSRule>\
</CORSConfiguration>";

async fn put_rules(c: &Client, bucket: &str, xml: &'static str) -> Reply {
    c.call("PUT", &format!("/{bucket}"))
        .query("cors", "")
        .body(xml)
        .send()
        .await
}

/// An unsigned preflight of `path` from `origin` for `method` (`None`: the header is left out) with the
/// request headers `asked`.
async fn preflight(
    c: &Client,
    path: &str,
    origin: Option<&str>,
    method: Option<&str>,
    asked: Option<&str>,
) -> Reply {
    let mut call = c.call("OPTIONS", path).anonymous();
    for (name, value) in [
        ("origin", origin),
        ("access-control-request-method", method),
        ("access-control-request-headers", asked),
    ] {
        if let Some(value) = value {
            call = call.header(name, value);
        }
    }
    call.send().await
}

/// A signed `method` request of `path` from a page of `origin`.
async fn from_origin(c: &Client, method: &'static str, path: &str, origin: &str) -> Reply {
    c.call(method, path).header("origin", origin).send().await
}

/// The `Access-Control-Allow-Origin` and `-Methods` of `r` ("" when absent).
fn allowed(r: &Reply) -> (u16, &str, &str) {
    (
        r.status,
        r.header("access-control-allow-origin"),
        r.header("access-control-allow-methods"),
    )
}

#[tokio::test]
async fn rules_are_kept_shown_back_refused_when_bad_and_removed() {
    let s = TestServer::with_bucket("corsbkt").await;
    let c = &s.client;
    let r = c.call("GET", "/corsbkt").query("cors", "").send().await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (404, "NoSuchCORSConfiguration")
    );
    let r = put_rules(c, "corsbkt", RULES).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = c.call("GET", "/corsbkt").query("cors", "").send().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("ID"), ["app"]);
    assert_eq!(r.xml("AllowedOrigin"), ["https://app.example", "*"]);
    assert_eq!(r.xml("AllowedMethod"), ["GET", "PUT", "HEAD"]);
    assert_eq!(r.xml("AllowedHeader"), ["content-type", "x-amz-*"]);
    assert_eq!(r.xml("ExposeHeader"), ["ETag"]);
    assert_eq!(r.xml("MaxAgeSeconds"), ["600"]);
    // Refused configurations leave the rules as they were.
    for (xml, code) in [
        (
            "<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod>\
             </CORSRule></CORSConfiguration>",
            "InvalidRequest",
        ),
        (
            "<CORSConfiguration><CORSRule><AllowedOrigin>*.a.*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>\
             </CORSRule></CORSConfiguration>",
            "InvalidRequest",
        ),
        ("<CORSConfiguration></CORSConfiguration>", "MalformedXML"),
    ] {
        let r = put_rules(c, "corsbkt", xml).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, code),
            "{xml}: {}",
            r.text()
        );
    }
    let r = c.call("GET", "/corsbkt").query("cors", "").send().await;
    assert_eq!(r.xml("AllowedMethod"), ["GET", "PUT", "HEAD"]);
    let r = put_rules(c, "nosuchbkt", RULES).await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchBucket"));
    let r = c.call("DELETE", "/corsbkt").query("cors", "").send().await;
    assert_eq!(r.status, 204, "{}", r.text());
    let r = c.call("GET", "/corsbkt").query("cors", "").send().await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (404, "NoSuchCORSConfiguration")
    );
    let r = preflight(
        c,
        "/corsbkt/k",
        Some("https://app.example"),
        Some("GET"),
        None,
    )
    .await;
    assert_eq!(r.status, 403, "no rules left: {}", r.text());
}

#[tokio::test]
async fn preflights_are_answered_unsigned_from_the_first_matching_rule() {
    let s = TestServer::with_bucket("corsbkt").await;
    let c = &s.client;
    let app = Some("https://app.example");
    // Before any rule: refused, as for a bucket that does not exist.
    let r = preflight(c, "/corsbkt/k", app, Some("GET"), None).await;
    assert_eq!((r.status, r.code().as_str()), (403, "AccessForbidden"));
    assert_eq!(put_rules(c, "corsbkt", RULES).await.status, 200);
    let r = preflight(
        c,
        "/corsbkt/k",
        app,
        Some("PUT"),
        Some("Content-Type, x-amz-date"),
    )
    .await;
    assert_eq!(
        allowed(&r),
        (200, "https://app.example", "GET, PUT"),
        "{}",
        r.text()
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        "Content-Type, x-amz-date"
    );
    assert_eq!(r.header("access-control-expose-headers"), "ETag");
    assert_eq!(r.header("access-control-max-age"), "600");
    assert_eq!(r.header("access-control-allow-credentials"), "true");
    assert!(r.header("vary").contains("Origin"), "{:?}", r.headers);
    // The bucket itself, and a presigned URL's query (ignored: a preflight is never signed).
    let r = preflight(c, "/corsbkt", app, Some("GET"), None).await;
    assert_eq!(allowed(&r), (200, "https://app.example", "GET, PUT"));
    let r = c
        .call("OPTIONS", "/corsbkt/k")
        .anonymous()
        .query("X-Amz-Algorithm", "AWS4-HMAC-SHA256")
        .query("X-Amz-Expires", "100000")
        .header("origin", "https://app.example")
        .header("access-control-request-method", "GET")
        .send()
        .await;
    assert_eq!(
        allowed(&r),
        (200, "https://app.example", "GET, PUT"),
        "{}",
        r.text()
    );
    // Any origin may HEAD (`*`: answered as `*`, without credentials).
    let r = preflight(
        c,
        "/corsbkt/k",
        Some("https://other.example"),
        Some("HEAD"),
        None,
    )
    .await;
    assert_eq!(allowed(&r), (200, "*", "HEAD"));
    assert_eq!(r.header("access-control-allow-credentials"), "");
    // No rule allows these: another origin's GET, the app's DELETE, a header not listed, a missing bucket.
    for (path, origin, method, asked) in [
        ("/corsbkt/k", "https://other.example", "GET", None),
        ("/corsbkt/k", "https://app.example", "DELETE", None),
        (
            "/corsbkt/k",
            "https://app.example",
            "GET",
            Some("authorization"),
        ),
        ("/nosuchbkt/k", "https://app.example", "GET", None),
    ] {
        let r = preflight(c, path, Some(origin), Some(method), asked).await;
        assert_eq!(
            (
                r.status,
                r.code().as_str(),
                r.header("access-control-allow-origin")
            ),
            (403, "AccessForbidden", ""),
            "{path} {origin} {method} {asked:?}"
        );
    }
    // Not a preflight: 400.
    for (origin, method) in [(None, Some("GET")), (app, None), (app, Some("BAD METHOD"))] {
        let r = preflight(c, "/corsbkt/k", origin, method, None).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "BadRequest"),
            "{origin:?} {method:?}"
        );
    }
    let r = preflight(c, "/", app, Some("GET"), None).await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn answers_to_browsers_carry_their_rule_and_grant_nothing() {
    let s = TestServer::with_bucket("corsbkt").await;
    let c = &s.client;
    assert_eq!(c.put("/corsbkt/k", "hello").await.status, 200);
    // Without rules, no CORS header.
    let r = from_origin(c, "GET", "/corsbkt/k", "https://app.example").await;
    assert_eq!(allowed(&r), (200, "", ""));
    assert_eq!(r.header("vary"), "");
    assert_eq!(put_rules(c, "corsbkt", RULES).await.status, 200);
    let r = from_origin(c, "GET", "/corsbkt/k", "https://app.example").await;
    assert_eq!(allowed(&r), (200, "https://app.example", "GET, PUT"));
    assert_eq!(r.header("access-control-expose-headers"), "ETag");
    // Errors carry them too, so that the page can read them.
    let r = from_origin(c, "GET", "/corsbkt/missing", "https://app.example").await;
    assert_eq!(allowed(&r), (404, "https://app.example", "GET, PUT"));
    // An unsigned write is refused as ever: the rules let the page read the refusal, nothing more.
    let r = c
        .call("PUT", "/corsbkt/planted")
        .anonymous()
        .header("origin", "https://app.example")
        .body("x")
        .send()
        .await;
    assert_eq!(allowed(&r), (403, "https://app.example", "GET, PUT"));
    assert_eq!(c.get("/corsbkt/planted").await.status, 404);
    // Another origin: no rule for its GET (only `Vary`); its HEAD is allowed to any origin.
    let r = from_origin(c, "GET", "/corsbkt/k", "https://other.example").await;
    assert_eq!(allowed(&r), (200, "", ""));
    assert!(r.header("vary").contains("Origin"));
    let r = from_origin(c, "HEAD", "/corsbkt/k", "https://other.example").await;
    assert_eq!(allowed(&r), (200, "*", "HEAD"));
    // No Origin: no CORS header.
    let r = c.get("/corsbkt/k").await;
    assert_eq!((allowed(&r), r.header("vary")), ((200, "", ""), ""));
}

#[tokio::test]
async fn rules_go_with_their_bucket_and_damaged_ones_allow_nothing() {
    let s = TestServer::with_bucket("corsbkt").await;
    let c = &s.client;
    let app = Some("https://app.example");
    assert_eq!(put_rules(c, "corsbkt", RULES).await.status, 200);
    let record = s.store.get("s3/c/corsbkt").await.expect("the CORS record");
    assert_eq!(&record[..4], b"SBCR");
    assert_eq!(c.delete("/corsbkt").await.status, 204);
    assert!(
        s.store.get("s3/c/corsbkt").await.is_err(),
        "deleted with its bucket"
    );
    // A record left behind (written again here) names the old bucket record: a new bucket of that name has no rules.
    assert_eq!(c.call("PUT", "/corsbkt").send().await.status, 200);
    s.store
        .put("s3/c/corsbkt", record, &Default::default())
        .await
        .expect("put the old record back");
    let r = c.call("GET", "/corsbkt").query("cors", "").send().await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (404, "NoSuchCORSConfiguration")
    );
    let r = preflight(c, "/corsbkt/k", app, Some("GET"), None).await;
    assert_eq!(r.status, 403);
    // A damaged record allows nothing (and is logged).
    s.store
        .put("s3/c/corsbkt", &b"SBCR\x09"[..], &Default::default())
        .await
        .expect("put a damaged record");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let r = preflight(c, "/corsbkt/k", app, Some("GET"), None).await;
    assert_eq!(r.status, 403);
    // New rules replace it.
    assert_eq!(put_rules(c, "corsbkt", RULES).await.status, 200);
    let r = preflight(c, "/corsbkt/k", app, Some("GET"), None).await;
    assert_eq!(allowed(&r), (200, "https://app.example", "GET, PUT"));
}
