//! Buckets: create, list, head, delete (refused while not empty); a missing bucket is NoSuchBucket everywhere.

use crate::TestServer;

#[tokio::test]
async fn bucket_lifecycle() {
    let s = TestServer::start().await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/alpha").send().await.status, 200);
    assert_eq!(c.call("PUT", "/beta").send().await.status, 200);
    let again = c.call("PUT", "/alpha").send().await;
    assert_eq!(
        (again.status, again.code().as_str()),
        (409, "BucketAlreadyOwnedByYou")
    );
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
    ];
    for r in replies {
        assert_eq!(
            (r.status, r.code().as_str()),
            (404, "NoSuchBucket"),
            "{}",
            r.text()
        );
    }
    // Nothing was stored for the refused put.
    assert!(s.store.list("").await.expect("list").is_empty());
}
