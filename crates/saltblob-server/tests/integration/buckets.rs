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
