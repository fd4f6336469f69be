//! Buckets: create, list, head, delete (refused while not empty); a missing bucket is NoSuchBucket everywhere.

use crate::TestServer;

#[tokio::test]
async fn bucket_lifecycle() {
    let s = TestServer::start().await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/alpha").send().await.status, 200);
    assert_eq!(c.call("PUT", "/beta").send().await.status, 200);
    // Creating a bucket you already own succeeds in us-east-1, as AWS answers there.
    let again = c.call("PUT", "/alpha").send().await;
    assert_eq!(again.status, 200, "{}", again.text());
    let list = c.get("/").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.xml("Name"), ["alpha", "beta"]);
    assert_eq!(c.call("HEAD", "/alpha").send().await.status, 200);
    let bad = c.call("PUT", "/Not_A_Bucket").send().await;
    assert_eq!(
        (bad.status, bad.code().as_str()),
        (400, "InvalidBucketName"),
        "{}",
        bad.text()
    );

    assert_eq!(c.put("/alpha/obj", &b"x"[..]).await.status, 200);
    let refused = c.delete("/alpha").await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (409, "BucketNotEmpty")
    );
    assert_eq!(
        c.get("/alpha/obj").await.status,
        200,
        "the refused delete changed nothing"
    );
    assert_eq!(c.delete("/alpha/obj").await.status, 204);
    assert_eq!(c.delete("/alpha").await.status, 204);
    assert_eq!(c.call("HEAD", "/alpha").send().await.status, 404);
    assert_eq!(c.get("/").await.xml("Name"), ["beta"]);
}

/// ListBuckets pages as AWS does: `max-buckets`, `continuation-token` (the pages together list every bucket once,
/// in order, even when a bucket is created between two pages), `prefix`, `bucket-region`; a `max-buckets` out of
/// 1..=10000 is 400 InvalidArgument.
#[tokio::test]
async fn list_buckets_pages_by_max_buckets_and_continuation_token() {
    let s = TestServer::start().await;
    let c = &s.client;
    for name in ["b-0", "b-1", "b-2", "b-3", "b-4", "other"] {
        assert_eq!(c.call("PUT", &format!("/{name}")).send().await.status, 200);
    }
    let page = |token: Option<String>| async move {
        let mut call = c
            .call("GET", "/")
            .query("max-buckets", "2")
            .query("prefix", "b-");
        if let Some(token) = &token {
            call = call.query("continuation-token", token);
        }
        let reply = call.send().await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.xml("Prefix"), ["b-"]);
        (reply.xml("Name"), reply.xml("ContinuationToken").pop())
    };
    let (first, token) = page(None).await;
    assert_eq!(first, ["b-0", "b-1"]);
    // Created between two pages, before the token: not listed by the later pages, nor twice.
    assert_eq!(c.call("PUT", "/b-00").send().await.status, 200);
    let (second, token) = page(Some(token.expect("a token after a full page"))).await;
    assert_eq!(second, ["b-2", "b-3"]);
    let (third, token) = page(Some(token.expect("a token after a full page"))).await;
    assert_eq!(third, ["b-4"]);
    assert_eq!(token, None, "no token after the last page");

    let all = c.get("/").await;
    assert_eq!(
        all.xml("Name"),
        ["b-0", "b-00", "b-1", "b-2", "b-3", "b-4", "other"]
    );
    assert!(all.xml("ContinuationToken").is_empty());
    let elsewhere = c
        .call("GET", "/")
        .query("bucket-region", "eu-west-3")
        .send()
        .await;
    assert_eq!(elsewhere.status, 200);
    assert!(elsewhere.xml("Name").is_empty(), "{}", elsewhere.text());
    let here = c
        .call("GET", "/")
        .query("bucket-region", "us-east-1")
        .query("max-buckets", "10000")
        .send()
        .await;
    assert_eq!(here.xml("Name").len(), 7, "{}", here.text());
    for bad in ["0", "10001", "-1"] {
        let refused = c.call("GET", "/").query("max-buckets", bad).send().await;
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (400, "InvalidArgument"),
            "max-buckets={bad}: {}",
            refused.text()
        );
    }
}

#[tokio::test]
async fn a_missing_bucket_is_no_such_bucket_for_every_operation() {
    let s = TestServer::start().await;
    let c = &s.client;
    let replies = [
        c.put("/nobucket/k", &b"x"[..]).await,
        c.get("/nobucket/k").await,
        c.delete("/nobucket/k").await,
        c.call("GET", "/nobucket")
            .query("list-type", "2")
            .send()
            .await,
        c.get("/nobucket").await,
        c.delete("/nobucket").await,
        c.call("PUT", "/nobucket/copy")
            .header("x-amz-copy-source", "/nobucket/k")
            .send()
            .await,
        c.call("GET", "/nobucket")
            .query("location", "")
            .send()
            .await,
        c.call("GET", "/nobucket")
            .query("versioning", "")
            .send()
            .await,
        c.call("GET", "/nobucket")
            .query("versions", "")
            .send()
            .await,
    ];
    for r in replies {
        assert_eq!(
            (r.status, r.code().as_str()),
            (404, "NoSuchBucket"),
            "{}",
            r.text()
        );
        assert!(!r.text().contains("s3/"), "{}", r.text());
    }
    // Nothing was stored for the refused put.
    assert!(s.store.list("").await.expect("list").is_empty());
}

/// GetBucketLocation (empty in us-east-1, the region elsewhere), GetBucketVersioning (an empty configuration:
/// versioning never enabled), and CreateBucket of an owned bucket outside us-east-1 (409
/// BucketAlreadyOwnedByYou, as AWS answers there).
#[tokio::test]
async fn location_versioning_and_recreation_per_region() {
    for region in ["us-east-1", "eu-west-1"] {
        let s = TestServer::start_with(crate::StoreKind::Memory, |mut c| {
            c.region = region.to_owned();
            c
        })
        .await;
        let c = &s.client;
        assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
        let location = c.call("GET", "/bkt").query("location", "").send().await;
        assert_eq!(location.status, 200, "{}", location.text());
        let text = location.text();
        let constraint = text
            .split_once("<LocationConstraint")
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(_, rest)| rest.split('<').next().unwrap_or_default())
            .unwrap_or_else(|| panic!("no LocationConstraint: {text}"));
        let expected = if region == "us-east-1" { "" } else { region };
        assert_eq!(constraint, expected, "{text}");
        let versioning = c.call("GET", "/bkt").query("versioning", "").send().await;
        assert_eq!(versioning.status, 200, "{}", versioning.text());
        assert!(
            versioning.text().contains("VersioningConfiguration"),
            "{}",
            versioning.text()
        );
        assert!(versioning.xml("Status").is_empty(), "{}", versioning.text());
        let again = c.call("PUT", "/bkt").send().await;
        if region == "us-east-1" {
            assert_eq!(again.status, 200, "{}", again.text());
        } else {
            assert_eq!(
                (again.status, again.code().as_str()),
                (409, "BucketAlreadyOwnedByYou")
            );
        }
    }
}
